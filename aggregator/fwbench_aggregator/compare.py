"""Compare two result sets cell by cell: B/A ratio with a confidence interval, a test when one is possible.

Cells are paired by their full identity (stack, task, preset, compile mode and every setting: TF32,
threads, steps, device, ...); a cell with no partner is listed as "only in A/B".

The unit of a test is the process (a repeat), not the step: the timed steps of one process are
autocorrelated (caches, clocks, a neighbour's burst last several steps), and they share everything that
differs between processes (memory layout, compile results, which core). So:
  * both sides with >= 2 repeats: Welch's t-test on the log of each repeat's median ms/step; the ratio is
    the ratio of geometric means of those medians, with Welch's 95% interval. p-values are Holm-adjusted
    over all tested cells (family-wise alpha). Verdict "slower"/"faster" needs adjusted p < alpha and
    |change| >= --min-effect; otherwise "not significant".
  * a side with 1 repeat: no test is possible (nothing measures process-to-process variation); the
    verdict says so and what it would need. The ratio of medians gets a moving-block bootstrap interval
    over the steps (blocks keep neighbouring steps together), which covers step-to-step noise only.
The `--fail-above PCT` gate fails a cell whose whole interval lies above +PCT% (an effect beyond the
threshold that the interval excludes being smaller); a paired cell with too few samples for any
interval makes the gate refuse, with one line and exit 2, instead of passing silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fwbench.core.identity import CellIdentity
from fwbench_aggregator import loading, stats
from fwbench_aggregator.summary import is_busy
from fwbench_aggregator.variants import Variant, assign_variants, task_order

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT_PCT = 5.0
CONFIDENCE = 0.95
MIN_STEPS_FOR_INTERVAL = 3  # per side, when a side has a single repeat
BOOTSTRAP_RESAMPLES = 4000
METHOD_REPEATS = "repeats (Welch t on log repeat medians)"
METHOD_STEPS = "steps (block bootstrap, 1 repeat)"


@dataclass
class Side:
    repeats: list[np.ndarray]  # per-step samples of each repeat
    busy: int = 0  # busy ok rows among them

    @property
    def steps(self) -> int:
        return int(sum(r.size for r in self.repeats))

    @property
    def repeat_medians(self) -> np.ndarray:
        return np.array([stats.median(r) for r in self.repeats])


@dataclass
class CellComparison:
    preset: str
    task: str
    variant: Variant
    identity: CellIdentity
    a: Side | None
    b: Side | None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    method: str = ""
    p_value: float | None = None
    p_adjusted: float | None = None
    verdict: str = ""

    @property
    def median_a(self) -> float | None:
        return None if self.a is None else stats.median(np.concatenate(self.a.repeats))

    @property
    def median_b(self) -> float | None:
        return None if self.b is None else stats.median(np.concatenate(self.b.repeats))

    @property
    def n_a(self) -> int:
        return 0 if self.a is None else self.a.steps

    @property
    def n_b(self) -> int:
        return 0 if self.b is None else self.b.steps

    @property
    def change_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1) * 100

    @property
    def paired(self) -> bool:
        return self.a is not None and self.b is not None

    @property
    def has_interval(self) -> bool:
        return self.ratio_low is not None

    @property
    def busy(self) -> str:
        sides = [name for name, side in (("A", self.a), ("B", self.b)) if side is not None and side.busy]
        return "+".join(sides)

    @property
    def is_regression(self) -> bool:
        return self.verdict == "slower"


def cell_sides(frame: pd.DataFrame) -> dict[CellIdentity, tuple[Variant, Side]]:
    """ok rows grouped by full identity: the per-step samples of each repeat."""
    cells = {}
    ok = frame[frame["status"] == "ok"]
    for identity, rows in ok.groupby("_identity", sort=False):
        repeats = [stats.repeat_samples(s, m) for s, m in zip(rows["step_ms"], rows["ms_per_step"])]
        cells[identity] = (rows["_variant"].iloc[0], Side(repeats, int(is_busy(rows).sum())))
    return cells


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (monotone, capped at 1)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def welch_log_ratio(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """(ratio of geometric means b/a, CI low, CI high, two-sided p) from Welch's t on log values."""
    from scipy import stats as sps  # lazy: scipy is slow to import

    la, lb = np.log(a), np.log(b)
    diff = float(lb.mean() - la.mean())
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    se = math.sqrt(va + vb)
    if se == 0:  # identical repeats on both sides: no spread to test against
        return math.exp(diff), math.exp(diff), math.exp(diff), (1.0 if diff == 0 else 0.0)
    dof = (va + vb) ** 2 / (va ** 2 / (la.size - 1) + vb ** 2 / (lb.size - 1))
    t = diff / se
    half = float(sps.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se
    p = float(2 * sps.t.sf(abs(t), dof))
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half), p


def block_bootstrap_medians(side: Side, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` moving-block bootstrap resamples of a side (repeats resampled first when
    there are several, then blocks of consecutive steps within each repeat)."""
    per_repeat = []
    for samples in side.repeats:
        n = samples.size
        block = max(1, round(n ** (1 / 3)))
        count = math.ceil(n / block)
        starts = rng.integers(0, n - block + 1, size=(resamples, count))
        index = (starts[..., None] + np.arange(block)).reshape(resamples, -1)[:, :n]
        per_repeat.append(samples[index])
    if len(per_repeat) == 1:
        return np.median(per_repeat[0], axis=1)
    width = max(r.shape[1] for r in per_repeat)
    stacked = np.full((len(per_repeat), resamples, width), np.nan)
    for i, r in enumerate(per_repeat):
        stacked[i, :, : r.shape[1]] = r
    chosen = rng.integers(len(per_repeat), size=(resamples, len(per_repeat)))
    draws = stacked[chosen, np.arange(resamples)[:, None]]  # (resamples, repeats, width)
    return np.nanmedian(draws.reshape(resamples, -1), axis=1)


def _compare_cell(row: CellComparison, rng: np.random.Generator) -> None:
    a, b = row.a, row.b
    if len(a.repeats) >= 2 and len(b.repeats) >= 2:
        row.method = METHOD_REPEATS
        row.ratio, row.ratio_low, row.ratio_high, row.p_value = welch_log_ratio(a.repeat_medians, b.repeat_medians)
        return
    row.method = METHOD_STEPS
    row.ratio = row.median_b / row.median_a
    short = [name for name, side in (("A", a), ("B", b)) if len(side.repeats) == 1 and side.steps < MIN_STEPS_FOR_INTERVAL]
    if short:
        row.verdict = (f"too few samples: {'/'.join(short)} has 1 repeat of fewer than {MIN_STEPS_FOR_INTERVAL} "
                       "steps (needs --repeats 2 on both sides for a test)")
        return
    ratios = (block_bootstrap_medians(b, BOOTSTRAP_RESAMPLES, rng)
              / block_bootstrap_medians(a, BOOTSTRAP_RESAMPLES, rng))
    tail = (1 - CONFIDENCE) / 2 * 100
    row.ratio_low, row.ratio_high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    one = "A and B" if len(a.repeats) == len(b.repeats) == 1 else ("A" if len(a.repeats) == 1 else "B")
    row.verdict = f"not testable: 1 repeat in {one} (needs --repeats 2 or more on both sides)"


def compare(a: loading.LoadedResults, b: loading.LoadedResults, alpha: float = DEFAULT_ALPHA,
            min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT) -> list[CellComparison]:
    # Variants (labels) from both sides together, so a setting that differs between A and B is named.
    frames = [a.frame().assign(_side="A"), b.frame().assign(_side="B")]
    both = assign_variants(pd.concat(frames, ignore_index=True))
    sides_a, sides_b = cell_sides(both[both["_side"] == "A"]), cell_sides(both[both["_side"] == "B"])
    identities = set(sides_a) | set(sides_b)
    tasks = {t: i for i, t in enumerate(task_order({i.task for i in identities}))}
    rows = []
    for identity in identities:
        variant = (sides_a.get(identity) or sides_b.get(identity))[0]
        rows.append(CellComparison(identity.preset, identity.task, variant, identity,
                                   sides_a.get(identity, (None, None))[1], sides_b.get(identity, (None, None))[1]))
    rows.sort(key=lambda r: (r.preset, tasks[r.task], r.variant.sort_key()))
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    for r in rows:
        if r.paired:
            _compare_cell(r, rng)
    tested = [r for r in rows if r.p_value is not None]
    for r, p_adj in zip(tested, holm([r.p_value for r in tested])):
        r.p_adjusted = p_adj
        if p_adj >= alpha:
            r.verdict = "not significant"
        elif abs(r.change_pct) < min_effect_pct:
            r.verdict = f"not significant (change below {min_effect_pct:g}%)"
        else:
            r.verdict = "slower" if r.change_pct > 0 else "faster"
    for r in rows:
        if r.a is None:
            r.verdict = "only in B"
        elif r.b is None:
            r.verdict = "only in A"
    return rows


class GateRefused(Exception):
    """--fail-above cannot judge some paired cells (too few samples for an interval)."""


def regressions_above(rows: list[CellComparison], fail_above_pct: float) -> list[CellComparison]:
    """Cells slower by more than fail_above_pct whose whole interval lies beyond it."""
    unjudgeable = [r for r in rows if r.paired and not r.has_interval]
    if unjudgeable:
        names = ", ".join(f"{r.task} {r.variant.label}" for r in unjudgeable[:5])
        more = f" and {len(unjudgeable) - 5} more" if len(unjudgeable) > 5 else ""
        raise GateRefused(f"cannot gate with --fail-above: {len(unjudgeable)} cell(s) have too few samples for an "
                          f"interval ({names}{more}); run with --repeats 2 or more, or at least "
                          f"{MIN_STEPS_FOR_INTERVAL} --steps")
    limit = 1 + fail_above_pct / 100
    return [r for r in rows if r.has_interval and r.ratio_low > limit]


def load_side(paths: list[Path]) -> loading.LoadedResults:
    return loading.load_results([Path(p) for p in paths])
