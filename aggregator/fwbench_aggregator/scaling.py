"""The report's data-parallel scaling table (--devices N): per task and stack, each N's ms/step and samples/s beside
the matching one-device cell's, with speed-up and efficiency.

  speed-up    samples/s at N / samples/s of the N=1 cell of the same identity but for the devices (same global-batch
              setting: weak scaling against the task's batch on one device, strong scaling against
              --devices 1 --global-batch G); per-step work differs under weak scaling, so throughput is compared.
  efficiency  speed-up / N.

Per cell: the median of its ok rows' ms_per_step (busy rows are kept and marked ⚠: CPU rows are for correctness).
Framework-free: it reads rows only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fwbench.core.identity import CellIdentity, describe, differing_settings
from fwbench_aggregator import document as d

HEADERS = ["task", "stack", "preset", "settings", "devices", "per-device batch", "global batch", "ms/step", "samples/s",
           "speed-up", "efficiency", "comm", "device"]
BUSY_MARK = "\u26a0"


@dataclass(frozen=True)
class ScalingCell:
    identity: CellIdentity
    devices: int
    per_device_batch: int | None
    global_batch: int | None
    ms_per_step: float
    samples_per_s: float | None
    comm_backend: str | None
    device: str | None
    busy: bool
    speedup: float | None = None
    efficiency: float | None = None


def _number(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def one_device(identity: CellIdentity) -> CellIdentity:
    """The identity of the cell a scaling cell is compared with: the same, on one device."""
    return replace(identity, settings=tuple((name, 1 if name == "devices" else value)
                                            for name, value in identity.settings))


def cells(frame) -> list[ScalingCell]:
    """Every cell of a scaling group (an identity run at N > 1, and its N=1 cell), with speed-up and efficiency
    where the N=1 cell has ok rows."""
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
        if identity.setting("devices") == 1 and identity not in scaled:
            continue
        ms = _median([float(r["ms_per_step"]) for r in rows])
        first = rows[0]
        global_batch = _number(first.get("global_batch")) or _number(first.get("batch_size"))
        per_device = _number(first.get("per_device_batch")) or global_batch
        measured[identity] = ScalingCell(
            identity, int(identity.setting("devices")), int(per_device) if per_device else None,
            int(global_batch) if global_batch else None, ms, global_batch * 1000.0 / ms if global_batch else None,
            first.get("comm_backend") if isinstance(first.get("comm_backend"), str) else None,
            first.get("device") if isinstance(first.get("device"), str) else None,
            any(bool(r.get("busy")) for r in rows))
    out = []
    for identity, cell in measured.items():
        base = measured.get(one_device(identity))
        if base is not None and cell.samples_per_s and base.samples_per_s:
            speedup = cell.samples_per_s / base.samples_per_s
            cell = replace(cell, speedup=speedup, efficiency=speedup / cell.devices)
        out.append(cell)
    return sorted(out, key=lambda c: (c.identity.task, c.identity.stack, c.identity.preset,
                                      str(one_device(c.identity).settings), c.devices))


def settings(identity: CellIdentity) -> str:
    """The settings off their defaults but the devices (strong scaling's global batch, --jit off...): 'default' when
    none."""
    shown = tuple((name, value) for name, value in differing_settings(identity, set()) if name != "devices")
    return describe(shown) or "default"


def _fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def table_rows(scaling_cells: list[ScalingCell]) -> list[list[str]]:
    rows = []
    for c in scaling_cells:
        mark = f"\u00a0{BUSY_MARK}" if c.busy else ""
        rows.append([c.identity.task, c.identity.stack, c.identity.preset, settings(c.identity), str(c.devices),
                     _fmt(c.per_device_batch, "{}"), _fmt(c.global_batch, "{}"), f"{c.ms_per_step:.2f}{mark}",
                     _fmt(c.samples_per_s, "{:.1f}"), _fmt(c.speedup, "{:.2f}"), _fmt(c.efficiency, "{:.0%}"),
                     c.comm_backend or "—", c.device or "—"])
    return rows


def blocks(frame) -> list:
    found = cells(frame)
    if not found:
        return []
    out: list = [d.Heading("Data-parallel scaling"),
                 d.Paragraph("Fit cells run data-parallel on N devices (--devices): speed-up = samples/s at N over "
                             "samples/s of the same cell on one device (weak scaling: the task's batch per device; "
                             "strong: --global-batch G against --devices 1 --global-batch G); efficiency = "
                             "speed-up / N; — where that one-device cell has no ok row. Median ms/step of each "
                             "cell's ok rows.", "note")]
    if any(c.device == "cpu" for c in found):
        out.append(d.Paragraph("Rows on the cpu are N logical devices sharing the cell's CPU cores: they check that "
                               "data parallelism runs and is correct, and make no speed claim.", "warning"))
    if any(c.busy for c in found):
        out.append(d.Paragraph(f"{BUSY_MARK}: measured while something competed with the cell (see Busy rows).",
                               "note"))
    return out + [d.Table(HEADERS, table_rows(found), css_class="text")]
