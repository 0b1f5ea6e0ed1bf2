"""The report's data-parallel scaling table (--devices N): per task and stack, each N's ms/step and samples/s beside
the matching one-device cell's, with speed-up and efficiency, each with its 95% interval; and a chart of speed-up
against N, the stacks side by side.

  speed-up    samples/s at N / samples/s of the N=1 cell of the same identity but for the devices (same global-batch
              setting: weak scaling against the task's batch on one device, strong scaling against
              --devices 1 --global-batch G); per-step work differs under weak scaling, so throughput is compared:
              (G_N / ms_N) / (G_1 / ms_1) = (G_N / G_1) x (ms_1 / ms_N).
  efficiency  speed-up / N.

Per cell: the median ms/step of its ok rows' steps with the report's two-level bootstrap interval (stats.estimate;
busy rows are kept and marked ⚠: CPU rows are for correctness). The speed-up's interval is the bootstrap interval of
the ratio ms_1 / ms_N (stats.ratio_estimate, each cell resampled on its own, as the bf16 table's ratio) times
G_N / G_1; samples/s and efficiency are exact transforms of ms/step and speed-up, so their intervals are too.
Framework-free: it reads rows only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from fwbench.core import registry
from fwbench.core.identity import CellIdentity, describe, differing_settings, off_headline, varying_settings
from fwbench_aggregator import document as d
from fwbench_aggregator import plots, stats
from fwbench_aggregator.variants import Variant
from fwbench_aggregator.marks import BUSY_MARK

HEADERS = ["task", "stack", "preset", "settings", "devices", "per-device batch", "global batch",
           "ms/step [95% CI]", "samples/s [95% CI]", "speed-up [95% CI]", "efficiency [95% CI]", "comm", "device"]
ONE_SAMPLE = "1 sample"  # why a value has no interval: its cell has a single timing to resample
# Beside a speed-up of CPU rows (here and in `fwbench compare --across devices`): N logical devices share the cores.
NO_SPEED_CLAIM = "no speed claim (CPU: logical devices share the cores)"
CHART = "scaling.png"  # a fixed name, never built from row content
TASK_ORDER = tuple(registry.TASKS)


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def scaled(self, factor: float) -> "Interval":
        return Interval(self.value * factor, self.low * factor, self.high * factor)


@dataclass(frozen=True)
class ScalingCell:
    identity: CellIdentity
    devices: int
    per_device_batch: int | None
    global_batch: int | None
    ms: stats.Estimate  # ms/step: median of the pooled steps and its 95% interval
    comm_backend: str | None
    device: str | None
    busy: bool
    samples: tuple = field(default=(), repr=False, compare=False)  # per-repeat step times behind `ms`
    speedup: Interval | None = None  # None where the one-device cell has no ok row
    # Why the speed-up has no interval: "reference" (the N=1 cell itself) or a side with a single sample.
    speedup_without_interval: str | None = None

    @property
    def ms_per_step(self) -> float:
        return self.ms.median

    @property
    def ms_without_interval(self) -> str | None:
        return ONE_SAMPLE if self.ms.steps < 2 else None

    @property
    def samples_per_s(self) -> Interval | None:
        """global batch / ms/step, so the interval's ends swap (the slowest step time is the fewest samples/s)."""
        if not self.global_batch:
            return None
        per_s = self.global_batch * 1000.0
        return Interval(per_s / self.ms.median, per_s / self.ms.high, per_s / self.ms.low)

    @property
    def efficiency(self) -> Interval | None:
        return None if self.speedup is None else self.speedup.scaled(1 / self.devices)

    @property
    def stack_label(self) -> str:
        return Variant(self.identity.stack, self.identity.compile_mode).label

    @property
    def no_speed_claim(self) -> bool:
        return self.device == "cpu"


def _number(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def one_device(identity: CellIdentity) -> CellIdentity:
    """The identity of the cell a scaling cell is compared with: the same, on one device."""
    return replace(identity, settings=tuple((name, 1 if name == "devices" else value)
                                            for name, value in identity.settings))


def _group_key(cell: ScalingCell) -> tuple:
    """The cells one chart panel holds: one task, preset and settings (devices aside), every stack."""
    return (cell.identity.task, cell.identity.preset, one_device(cell.identity).settings)


def _order_key(cell: ScalingCell) -> tuple:
    task = cell.identity.task
    task_rank = TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)  # registry order, unknown after
    return (task_rank, task, cell.identity.preset,
            str(one_device(cell.identity).settings),
            Variant(cell.identity.stack, cell.identity.compile_mode).sort_key(), cell.devices)


def _with_speedup(cell: ScalingCell, base: ScalingCell) -> ScalingCell:
    if not cell.global_batch or not base.global_batch:
        return cell
    if cell.identity == base.identity:
        return replace(cell, speedup=Interval(1.0, 1.0, 1.0), speedup_without_interval="reference")
    # samples/s at N over at 1 = (G_N / G_1) x (ms_1 / ms_N): the ms ratio carries the interval.
    ratio = stats.ratio_estimate(list(base.samples), list(cell.samples))
    speedup = Interval(ratio.ratio, ratio.low, ratio.high).scaled(cell.global_batch / base.global_batch)
    short = [f"N={c.devices}" for c in (base, cell) if c.ms.steps < 2]
    return replace(cell, speedup=speedup,
                   speedup_without_interval=f"{ONE_SAMPLE} at {' and '.join(short)}" if short else None)


def cells(frame) -> list[ScalingCell]:
    """Every cell off the scaling headline (N > 1, or a --global-batch: the report's main tables leave them out), and
    the N=1 cell each is set against, with speed-up and efficiency where the N=1 cell has ok rows; by task, preset,
    settings, then stack in report order (side by side), then N."""
    if "status" not in frame or frame.empty:
        return []
    grouped: dict[CellIdentity, list[dict]] = {}
    for row in frame[frame["status"] == "ok"].to_dict("records"):
        if _number(row.get("ms_per_step")) is None:
            continue
        grouped.setdefault(CellIdentity.of_row(row), []).append(row)
    scaled = {one_device(identity) for identity in grouped if identity.setting("devices") != 1}
    measured: dict[CellIdentity, ScalingCell] = {}
    for identity, rows in grouped.items():
        if not off_headline(identity, "scaling") and identity not in scaled:
            continue
        samples = tuple(stats.repeat_samples(r.get("step_ms"), float(r["ms_per_step"])) for r in rows)
        first = rows[0]
        global_batch = _number(first.get("global_batch")) or _number(first.get("batch_size"))
        per_device = _number(first.get("per_device_batch")) or global_batch
        measured[identity] = ScalingCell(
            identity, int(identity.setting("devices")), int(per_device) if per_device else None,
            int(global_batch) if global_batch else None, stats.estimate(list(samples)),
            first.get("comm_backend") if isinstance(first.get("comm_backend"), str) else None,
            first.get("device") if isinstance(first.get("device"), str) else None,
            any(bool(r.get("busy")) for r in rows), samples)
    out = []
    for identity, cell in measured.items():
        base = measured.get(one_device(identity))
        out.append(cell if base is None else _with_speedup(cell, base))
    return sorted(out, key=_order_key)


def settings(identity: CellIdentity, varying: set[str] = frozenset(), leave_out: tuple[str, ...] = ()) -> str:
    """The settings off their defaults (strong scaling's global batch, --jit off...) and those in `varying`, but the
    devices (a column of their own) and `leave_out`: 'default' when none."""
    shown = tuple((name, value) for name, value in differing_settings(identity, varying)
                  if name != "devices" and name not in leave_out)
    return describe(shown) or "default"


def _fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def fmt_interval(value: Interval | None, point: str, bounds: str, without: str | None) -> str:
    """'point [low–high]', or the point and why it has no interval."""
    if value is None:
        return "—"
    if without:
        return f"{point.format(value.value)} ({without})"
    return f"{point.format(value.value)} [{bounds.format(value.low)}–{bounds.format(value.high)}]"


def fmt_efficiency(value: Interval | None, without: str | None) -> str:
    if value is None:
        return "—"
    if without:
        return f"{value.value:.0%} ({without})"
    return f"{value.value:.0%} [{value.low * 100:.0f}–{value.high:.0%}]"


def _fmt_ms(cell: ScalingCell) -> str:
    if cell.ms_without_interval:
        return f"{stats.fmt_ms(cell.ms.median)} ({cell.ms_without_interval})"
    return stats.fmt_estimate(cell.ms)


def table_rows(scaling_cells: list[ScalingCell]) -> list[list[str]]:
    varying = varying_settings(c.identity for c in scaling_cells)
    rows = []
    for c in scaling_cells:
        mark = f"\u00a0{BUSY_MARK}" if c.busy else ""
        rows.append([c.identity.task, c.identity.stack, c.identity.preset, settings(c.identity, varying),
                     str(c.devices), _fmt(c.per_device_batch, "{}"), _fmt(c.global_batch, "{}"), _fmt_ms(c) + mark,
                     fmt_interval(c.samples_per_s, "{:.1f}", "{:.1f}", c.ms_without_interval),
                     fmt_interval(c.speedup, "{:.2f}x", "{:.2f}", c.speedup_without_interval),
                     fmt_efficiency(c.efficiency, c.speedup_without_interval),
                     c.comm_backend or "—", c.device or "—"])
    return rows


def chart_panels(scaling_cells: list[ScalingCell]) -> list[plots.ScalingPanel]:
    """One panel per task, preset and settings group: a series per stack (report order) of (N, speed-up, interval);
    points without an interval (the N=1 reference, single samples) carry none."""
    varying = varying_settings(c.identity for c in scaling_cells)
    panels: dict[tuple, plots.ScalingPanel] = {}
    for cell in scaling_cells:  # already in table order: stacks in report order within a group
        if cell.speedup is None:
            continue
        key = _group_key(cell)
        if key not in panels:
            where = cell.identity.setting("device_model") or cell.device or "?"
            shown = settings(cell.identity, varying, leave_out=("device_model",))  # "on {where}" names it
            panels[key] = plots.ScalingPanel(
                f"{cell.identity.task} ({cell.identity.preset}, {shown}) on {where}",
                no_speed_claim=cell.no_speed_claim, series={})
        interval = None if cell.speedup_without_interval else (cell.speedup.low, cell.speedup.high)
        panels[key].series.setdefault(cell.stack_label, []).append((cell.devices, cell.speedup.value, interval))
    return [p for p in panels.values() if any(n > 1 for points in p.series.values() for n, _, _ in points)]


def failed(frame) -> list[str]:
    """'task stack [mode] (preset), devices=2: unsupported: why' for every cell off the scaling headline without an ok
    row (the main tables leave them out)."""
    if "status" not in frame or frame.empty:
        return []
    rows = [(CellIdentity.of_row(row), row) for row in frame.to_dict("records")]
    with_ok = {identity for identity, row in rows if row.get("status") == "ok"}
    listed = [(identity, row) for identity, row in rows
              if identity not in with_ok and off_headline(identity, "scaling")]
    varying = varying_settings(identity for identity, _ in listed)
    lines = []
    for identity, row in listed:
        message = str(row.get("error_message") or "").strip()
        line = (f"{identity.task} {Variant(identity.stack, identity.compile_mode).label} ({identity.preset}), "
                f"{describe(differing_settings(identity, varying))}: {row.get('status')}"
                + (f": {message.splitlines()[0][:300]}" if message else ""))
        if line not in lines:
            lines.append(line)
    return lines


def blocks(frame, report_dir: Path | None = None) -> list:
    found, without_ok = cells(frame), failed(frame)
    if not found and not without_ok:
        return []
    out: list = [d.Heading("Data-parallel scaling"),
                 d.Paragraph("Fit cells run data-parallel on N devices (--devices): speed-up = samples/s at N over "
                             "samples/s of the same cell on one device (weak scaling: the task's batch per device; "
                             "strong: --global-batch G against --devices 1 --global-batch G); efficiency = "
                             "speed-up / N; — where that one-device cell has no ok row. ms/step: median [95% CI] of "
                             "each cell's ok rows (the report's two-level bootstrap); samples/s = global batch / "
                             "ms/step; the speed-up's interval is the bootstrap interval of the ratio of the two "
                             "cells' ms/step (each resampled on its own) times the ratio of their global batches. "
                             "The N=1 rows are the reference (1.00x).", "note")]
    if any(c.no_speed_claim for c in found):
        out.append(d.Paragraph("Rows on the cpu are N logical devices sharing the cell's CPU cores: they check that "
                               "data parallelism runs and is correct, and make no speed claim.", "warning"))
    if any(c.busy for c in found):
        out.append(d.Paragraph(f"{BUSY_MARK}: measured while something competed with the cell (see Busy rows).",
                               "note"))
    if any(c.ms_without_interval for c in found):
        out.append(d.Paragraph(f"({ONE_SAMPLE}): the cell has one repeat without per-step times, so there is nothing "
                               "to resample and no interval; the point value is shown. Use --repeats 3 or more.",
                               "note"))
    single = [c for c in found if c.ms.repeats == 1 and not c.ms_without_interval]
    if single:
        out.append(d.Paragraph(f"{len(single)} cell(s) have a single repeat: their intervals (and the speed-ups "
                               "computed from them) only cover step-to-step noise, not process-to-process "
                               "variation. Use --repeats 3 or more.", "note"))
    if found:
        out.append(d.Table(HEADERS, table_rows(found), css_class="text"))
    if without_ok:
        out += [d.Paragraph("Cells without an ok row:"), d.BulletList(without_ok, "warning")]
    panels = chart_panels(found)
    chart = plots.scaling_chart(panels, report_dir / CHART) if report_dir is not None and panels else None
    if chart is not None:
        if len(panels) > plots.SCALING_CHARTS:
            out.append(d.Paragraph(f"The chart shows the first {plots.SCALING_CHARTS} of {len(panels)} groups; the "
                                   "table lists every cell.", "note"))
        out.append(d.Image(chart, "speed-up against devices N per task, stacks side by side, with the ideal "
                                  "speed-up = N"))
    return out
