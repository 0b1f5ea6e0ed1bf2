"""Compare two result sets cell by cell: ratio of medians and a Mann-Whitney U test on per-step samples.

Why Mann-Whitney: step times are skewed with outliers (GC, other processes), so a rank test is safer
than a t-test. Why Holm: with 12+ cells, testing each at 0.05 would flag a noise "regression" often;
Holm's step-down correction controls the family-wise error rate and is never worse than Bonferroni.
A minimum effect size keeps statistically detectable but irrelevant differences (1%) from failing CI.
Samples of all repeats are pooled, so the test treats steps as independent; more repeats make that safer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fwbench_aggregator import loading, stats
from fwbench_aggregator.variants import Variant, task_order

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT_PCT = 5.0


@dataclass
class CellComparison:
    preset: str
    task: str
    variant: Variant
    median_a: float | None
    median_b: float | None
    n_a: int
    n_b: int
    p_value: float | None = None
    p_adjusted: float | None = None
    verdict: str = ""

    @property
    def ratio(self) -> float | None:
        if self.median_a is None or self.median_b is None or self.median_a == 0:
            return None
        return self.median_b / self.median_a

    @property
    def change_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1) * 100

    @property
    def is_regression(self) -> bool:
        return self.verdict == "slower"


def cell_samples(loaded: loading.LoadedResults) -> dict[tuple[str, str, Variant], np.ndarray]:
    frame = loaded.frame()
    ok = frame[frame["status"] == "ok"]
    cells = {}
    for (preset, task, stack, mode), rows in ok.groupby(["preset", "task", "stack", "compile_mode"]):
        repeats = [stats.repeat_samples(s, m) for s, m in zip(rows["step_ms"], rows["ms_per_step"])]
        cells[(str(preset), str(task), Variant(str(stack), str(mode)))] = np.concatenate(repeats)
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


def compare(a: loading.LoadedResults, b: loading.LoadedResults, alpha: float = DEFAULT_ALPHA,
            min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT) -> list[CellComparison]:
    from scipy.stats import mannwhitneyu  # lazy: scipy is slow to import

    samples_a, samples_b = cell_samples(a), cell_samples(b)
    keys = set(samples_a) | set(samples_b)
    tasks = {t: i for i, t in enumerate(task_order({k[1] for k in keys}))}
    rows = []
    for key in sorted(keys, key=lambda k: (k[0], tasks[k[1]], k[2].sort_key())):
        sa, sb = samples_a.get(key), samples_b.get(key)
        rows.append(CellComparison(key[0], key[1], key[2],
                                   None if sa is None else float(np.median(sa)),
                                   None if sb is None else float(np.median(sb)),
                                   0 if sa is None else sa.size, 0 if sb is None else sb.size))
    tested = [r for r in rows if r.n_a and r.n_b]
    for r in tested:
        sa, sb = samples_a[(r.preset, r.task, r.variant)], samples_b[(r.preset, r.task, r.variant)]
        r.p_value = float(mannwhitneyu(sa, sb, alternative="two-sided").pvalue)
    for r, p_adj in zip(tested, holm([r.p_value for r in tested])):
        r.p_adjusted = p_adj
        if p_adj >= alpha:
            r.verdict = "not significant"
        elif abs(r.change_pct) < min_effect_pct:
            r.verdict = f"not significant (change below {min_effect_pct:g}%)"
        else:
            r.verdict = "slower" if r.change_pct > 0 else "faster"
    for r in rows:
        if not r.n_a:
            r.verdict = "only in B"
        elif not r.n_b:
            r.verdict = "only in A"
    return rows


def regressions_above(rows: list[CellComparison], fail_above_pct: float) -> list[CellComparison]:
    return [r for r in rows if r.is_regression and r.change_pct is not None and r.change_pct > fail_above_pct]


def load_side(paths: list[Path]) -> loading.LoadedResults:
    return loading.load_results([Path(p) for p in paths])
