"""The figures a results page's prose cites, each computed from the kit folder's rows, so that prose cannot say what
its rows do not.

In the page a figure is `<!--f NAME-->VALUE<!--/f-->`: NAME says what to compute, VALUE is what it came to when the
page was last generated. `fwbench kit page` (fwbench.kit.page) refills every VALUE; tests/test_results_pages.py
recomputes each one, and fails where the prose holds a figure outside a marker (only names such as H100 or bf16 may
carry digits).

Names (CELL is task/stack/compile/precision, with /warm or /cold for one compile-cache part of a split cell; a
SELECTOR is the same with * for any):
  ms:CELL            the median ms/step            n:CELL           its quiet ok processes
  tflops:CELL        achieved TFLOP/s               peak:CELL        % of the device's peak at its matmul precision
  first:CELL         the first (compiling) step, s  cache:CELL       the compile cache's state on its rows
  ratio:CELL:BASE    CELL/BASE of the medians with the steps' bootstrap interval (as the tables)
  vs:CELL:BASE       the judge's verdict on CELL against BASE, in words, with how many processes it rests on
  published:CELL:BASE                the published A100 ratio of the same two cells
  published_peak:CELL:PRECISION      the published A100 step of CELL as % of the A100's PRECISION (fp32, tf32)
                                     peak, from the FLOPs per step this cell's rows record
  each:CELL                          each process's median ms/step, in the order they ran
  range:METRIC:SELECTOR              the smallest to the largest METRIC over the cells SELECTOR matches:
                                     speedup (native-torch eager at the same precision / CELL), over_published
                                     (measured / published A100 step), a100_speedup (published / measured: the
                                     GPU's speed-up over the A100), tflops, peak, first, n (processes)
  count:cells | count:cell_repeats | count:planned | count:ok_rows | count:energy | count:windows
  dates                              the windows' dates      const:min_repeats, const:one_process_separates
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fwbench.core import physics
from fwbench_aggregator import judge, stats

FIGURE = re.compile(r"<!--f (?P<name>\S+?)-->(?P<value>.*?)<!--/f-->", re.S)
BASELINE = ("native-torch", "none")
PUBLISHED = "published"


class FigureError(ValueError):
    pass


@dataclass
class Cell:
    """The rows of one cell identity at the kit's sizes; `part` names the compile-cache state where the judge
    splits the cell's rows by it (never pooled)."""

    task: str
    stack: str
    mode: str
    steps: int | None
    precision: str
    part: str = ""
    rows: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> list[dict]:
        """Quiet ok rows: the only ones that decide (the judge's busy policy)."""
        return [r for r in self.rows if r["status"] == "ok" and not r.get("busy")]

    @property
    def label(self) -> str:
        return f"{self.stack} [{self.mode}]" + (f" ({self.part})" if self.part else "")

    def samples(self) -> list[np.ndarray]:
        return [samples(row) for row in self.ok]

    def median(self) -> float:
        return stats.estimate(self.samples()).median

    def mean(self, column: str) -> float | None:
        return mean_of_all([row.get(column) for row in self.ok])

    def gpu_busy(self) -> float | None:
        """The mean over its quiet ok rows of extra.gpu_busy.mean_pct (NVML's share of the timed window a kernel
        ran); None unless every such row has one."""
        from fwbench_aggregator.physics_section import gpu_busy_pct

        return mean_of_all([gpu_busy_pct(row.get("extra")) for row in self.ok])


def mean_of_all(values: list) -> float | None:
    """The mean of `values`; None when there are none or any is missing (a cell's figure is all its rows' or none)."""
    return float(np.mean(values)) if values and all(v is not None for v in values) else None


def samples(row: dict) -> np.ndarray:
    step_ms = row.get("step_ms")
    return stats.repeat_samples(json.loads(step_ms) if isinstance(step_ms, str) else step_ms, row["ms_per_step"])


def is_published(precision: str | None) -> bool:
    """Rows written before --precision existed ran at the published precision."""
    return precision in (None, PUBLISHED)


def cache_state(row: dict) -> str:
    warm = row.get("compile_cache_warm")
    return "no compile cache" if warm is None or warm != warm else ("compile cache warm" if warm else
                                                                    "compile cache cold")


def cells_of(rows: list[dict]) -> list[Cell]:
    """Rows grouped by cell identity, each group split by the environment facts that move step time (the judge's
    environment_parts): one Cell a part, labelled by what differs."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        precision = PUBLISHED if is_published(row.get("precision")) else row["precision"]
        groups.setdefault((row["task"], row["stack"], row["compile_mode"], row.get("timed_steps"), precision),
                          []).append(row)
    cells = []
    for key, found in groups.items():
        ok = [row for row in found if row["status"] == "ok"]
        parts = judge.environment_parts(ok) if ok else []
        if len(parts) <= 1:
            cells.append(Cell(*key, rows=found))
            continue
        for _label, indices in parts:
            part_rows = [ok[i] for i in indices]
            cells.append(Cell(*key, part=cache_state(part_rows[0]), rows=part_rows))
    return cells


def baseline_of(cells: list[Cell], cell: Cell) -> Cell | None:
    """native-torch eager at the same task, timed steps and precision (unsplit), or None."""
    found = [c for c in cells if (c.task, c.steps, c.precision) == (cell.task, cell.steps, cell.precision)
             and (c.stack, c.mode) == BASELINE and c.ok]
    return found[0] if len(found) == 1 else None


def processes(a: Cell, b: Cell) -> str:
    settled = min(len(a.ok), len(b.ok)) >= judge.MIN_REPEATS
    text = f"{len(a.ok)} vs {len(b.ok)} processes"
    return text if settled else f"{text}: fewer than {judge.MIN_REPEATS} a side, not settled"


def verdict_words(cell: Cell, base: Cell) -> str:
    """The judge's verdict on cell against base, as prose may state it: how many times faster or slower, its
    interval, whether the judge ranks them, and how many processes that rests on."""
    verdict = judge.ratio(base.samples(), cell.samples())  # B/A = cell / base; FASTER: base is faster
    if verdict.word == judge.TIE:
        return f"a tie, {verdict.text()} ({processes(cell, base)})"
    faster = verdict.value < 1
    k, low, high = ((1 / verdict.value, 1 / verdict.high, 1 / verdict.low) if faster else
                    (verdict.value, verdict.low, verdict.high))
    direction = "faster" if faster else "slower"
    if f"{k:.2f}" == "1.00":
        return (f"the same median (x1.00), which the judge cannot tell apart ([{verdict.low:.2f}–{verdict.high:.2f}]; "
                f"{processes(cell, base)})")
    if verdict.word == judge.CANNOT_RANK:
        return (f"{k:.2f}x {direction} by the medians, which the judge cannot rank ([{low:.2f}–{high:.2f}] "
                f"spans 1; {processes(cell, base)})")
    return f"{k:.2f}x {direction} [{low:.2f}–{high:.2f}] ({processes(cell, base)})"


def ratio_text(ratio: stats.RatioEstimate) -> str:
    """'0.317 [0.314–0.321]': a measured ratio as the page's tables and prose show it."""
    return f"{ratio.ratio:.3f} [{ratio.low:.3f}–{ratio.high:.3f}]"


def published_ratio(published: dict, cell: Cell, base: Cell) -> float | None:
    """cell / base in the published A100 table (published: the task's stack/compile -> seconds), or None."""
    a, b = published.get(f"{cell.stack}/{cell.mode}"), published.get(f"{base.stack}/{base.mode}")
    return a / b if a and b else None


@dataclass
class Figures:
    """Every figure of one kit folder, computed on demand by name."""

    folder: Path
    rows: list[dict]
    published_step_s: object  # task -> {stack/compile: seconds}
    planned: int  # the cells the kit's plan holds at the published precision on this host

    def __post_init__(self):
        self.cells = cells_of([r for r in self.rows if r.get("preset") == "paper"])

    def cell(self, spec: str) -> Cell:
        parts = spec.split("/")
        if len(parts) not in (4, 5):
            raise FigureError(f"not a cell (task/stack/compile/precision[/warm|cold]): {spec!r}")
        found = [c for c in self.cells if [c.task, c.stack, c.mode, c.precision] == parts[:4]]
        if len(parts) == 5:
            found = [c for c in found if c.part == f"compile cache {parts[4]}"]
        if len(found) != 1:
            raise FigureError(f"{spec!r} matches {len(found)} cells" + (
                f" (split: {', '.join(c.part for c in found)}; add /warm or /cold)" if len(found) > 1 else ""))
        if not found[0].ok:
            raise FigureError(f"{spec!r} has no quiet ok row")
        return found[0]

    def select(self, selector: str) -> list[Cell]:
        pattern = selector.split("/")
        return [c for c in self.cells if c.ok and len(pattern) == 4 and
                all(fnmatch.fnmatchcase(value, p) for value, p in zip((c.task, c.stack, c.mode, c.precision), pattern))]

    def published_ratio(self, cell: Cell, base: Cell) -> float:
        ratio = published_ratio(self.published_step_s(cell.task), cell, base)
        if ratio is None:
            raise FigureError(f"no published A100 ratio for {cell.label} / {base.label} ({cell.task})")
        return ratio

    def metric(self, name: str, cell: Cell) -> float | None:
        if name == "speedup":
            base = baseline_of(self.cells, cell)
            return None if base is None or base is cell else base.median() / cell.median()
        if name in ("over_published", "a100_speedup"):
            published = self.published_step_s(cell.task).get(f"{cell.stack}/{cell.mode}")
            if not published or not is_published(cell.precision):
                return None
            over = cell.median() / (published * 1000)
            return over if name == "over_published" else 1 / over
        if name == "n":
            return float(len(cell.ok))
        column = {"tflops": "achieved_tflops", "peak": "pct_of_peak", "first": "first_step_s"}.get(name)
        if column is None:
            raise FigureError(f"unknown metric {name!r}")
        return cell.mean(column)

    def value(self, name: str) -> str:  # noqa: C901 - one branch a kind, read top to bottom
        kind, _, rest = name.partition(":")
        args = rest.split(":") if rest else []
        if kind == "ms":
            return stats.fmt_ms(self.cell(args[0]).median())
        if kind == "n":
            return str(len(self.cell(args[0]).ok))
        if kind == "tflops":
            return f"{self.cell(args[0]).mean('achieved_tflops'):.1f}"
        if kind == "peak":
            pct = self.cell(args[0]).mean('pct_of_peak')
            return f"{pct:.{0 if pct >= 1 else 1}f}%"  # a tenth below 1%: never a bare 0%
        if kind == "first":
            return f"{self.cell(args[0]).mean('first_step_s'):.1f} s"
        if kind == "cache":
            states = sorted({cache_state(r) for r in self.cell(args[0]).ok})
            return " and ".join(states)
        if kind in ("ratio", "vs", "published") and len(args) == 2:
            cell, base = self.cell(args[0]), self.cell(args[1])
            if kind == "ratio":
                return ratio_text(stats.ratio_estimate(cell.samples(), base.samples()))
            if kind == "vs":
                return verdict_words(cell, base)
            return f"{self.published_ratio(cell, base):.3f}"
        if kind == "published_peak" and len(args) == 2:
            cell = self.cell(args[0])
            published = self.published_step_s(cell.task).get(f"{cell.stack}/{cell.mode}")
            flops, peak = cell.mean("model_flops_per_step"), physics.gpu_peak("NVIDIA A100")
            if not published or not flops or args[1] not in peak.tflops:
                raise FigureError(f"{name!r}: no published step, FLOPs per step or {args[1]} peak")
            return f"{flops / published / 1e12 / peak.tflops[args[1]] * 100:.0f}%"
        if kind == "each":
            cell = self.cell(args[0])
            ran = sorted(cell.ok, key=lambda row: str(row.get("started_at")))
            medians = [stats.fmt_ms(stats.median(samples(row))) for row in ran]
            return " and ".join(medians) if len(medians) < 3 else ", ".join(medians[:-1]) + " and " + medians[-1]
        if kind == "range" and len(args) == 2:
            values = [v for c in self.select(args[1]) if (v := self.metric(args[0], c)) is not None]
            if not values:
                raise FigureError(f"{name!r}: no cell has the figure")
            unit = {"speedup": "x", "a100_speedup": "x", "over_published": "", "tflops": "", "peak": "%",
                    "first": " s", "n": ""}[args[0]]
            digits = {"over_published": 2, "n": 0}.get(args[0], 1)
            # Words for the range, not a verdict: one value where both ends print alike.
            smallest, largest = f"{min(values):.{digits}f}{unit}", f"{max(values):.{digits}f}{unit}"
            return smallest if smallest == largest else f"{smallest} to {largest}"
        if kind == "count" and len(args) == 1:
            return self.count(args[0])
        if kind == "dates":
            return " and ".join(sorted({w[:10] for w in self.windows()}))
        if kind == "const":
            constants = {"min_repeats": str(judge.MIN_REPEATS),
                         # what one process a side separates: the prior alone, as the judge widens
                         "one_process_separates": f"{math.exp(judge.prior_half_width(1, 1)):.1f}x"}
            if args and args[0] in constants:
                return constants[args[0]]
        raise FigureError(f"unknown figure {name!r}")

    def windows(self) -> list[str]:
        hosts = [json.loads(p.read_text()) for p in sorted(self.folder.glob("host*.json"))]
        return sorted({h["recorded_at"] for h in hosts if h.get("recorded_at")})

    def count(self, what: str) -> str:
        published = [c for c in self.cells if is_published(c.precision) and c.ok]
        ok_rows = [r for r in self.rows if r["status"] == "ok"]
        counts = {
            "cells": len({(c.task, c.stack, c.mode) for c in published}),
            "cell_repeats": sum(len(c.ok) for c in published),
            "planned": self.planned,
            "ok_rows": len(ok_rows),
            "windows": len(self.windows()),
            "energy": f"{sum(r.get('joules_per_step') is not None for r in ok_rows)} of {len(ok_rows)}",
        }
        if what not in counts:
            raise FigureError(f"unknown count {what!r}")
        return str(counts[what])


def refill(text: str, figures: Figures) -> str:
    """The page with every figure's value computed anew."""
    return FIGURE.sub(lambda m: f"<!--f {m['name']}-->{figures.value(m['name'])}<!--/f-->", text)


def stale(text: str, figures: Figures) -> list[str]:
    """'NAME: page says X, rows say Y' for every figure whose value differs from its rows."""
    found = ((m["name"], m["value"], figures.value(m["name"])) for m in FIGURE.finditer(text))
    return [f"{name}: page says {said!r}, rows say {computed!r}" for name, said, computed in found if said != computed]
