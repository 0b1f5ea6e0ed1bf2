"""From merged rows to per-cell numbers: estimates, status counts, Keras 3 best and speed-ups."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from fwbench_aggregator import stats
from fwbench_aggregator.variants import KERAS2, NATIVE_COMPILED, NATIVE_EAGER, Variant, ordered, task_order

# The published speed-up baselines: (column label, variant key).
SPEEDUP_BASELINES = (("PyTorch eager", NATIVE_EAGER), ("PyTorch compiled", NATIVE_COMPILED),
                     ("Keras 2", KERAS2))


@dataclass
class CellStatus:
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)  # distinct first lines of error messages


@dataclass
class PresetSummary:
    preset: str
    tasks: list[str]
    variants: list[Variant]
    estimates: dict[tuple[str, Variant], stats.Estimate]
    statuses: dict[tuple[str, Variant], CellStatus]
    batch_sizes: dict[tuple[str, Variant], set]

    def keras3_best(self, task: str) -> tuple[Variant, stats.Estimate] | None:
        """Fastest Keras 3 backend for the task (lowest median), as the published 'best' column."""
        candidates = [(v, self.estimates[(task, v)]) for v in self.variants
                      if v.is_keras3 and (task, v) in self.estimates]
        return min(candidates, key=lambda item: item[1].median) if candidates else None

    def speedup(self, task: str, baseline_key: tuple[str, str]) -> float | None:
        """Keras 3 best over a baseline as the page computes it: (baseline_ms / keras_ms - 1) x 100%."""
        best = self.keras3_best(task)
        baseline = self.estimates.get((task, Variant(*baseline_key)))
        if best is None or baseline is None:
            return None
        return speedup_percent(baseline.median, best[1].median)

    def ranked(self, task: str) -> list[tuple[Variant, stats.Estimate]]:
        present = [(v, self.estimates[(task, v)]) for v in self.variants if (task, v) in self.estimates]
        return sorted(present, key=lambda item: item[1].median)


def speedup_percent(baseline_ms: float, candidate_ms: float) -> float:
    return (baseline_ms / candidate_ms - 1) * 100


def summarise(frame: pd.DataFrame) -> list[PresetSummary]:
    """One summary per preset (sizes differ between presets, so they never share a table)."""
    summaries = []
    for preset in _preset_order(frame["preset"].dropna().unique()):
        rows = frame[frame["preset"] == preset]
        estimates, statuses, batches = {}, {}, {}
        for (task, stack, mode), cell in rows.groupby(["task", "stack", "compile_mode"], dropna=False):
            variant = Variant(str(stack), str(mode))
            status = CellStatus(Counter(cell["status"]))
            for message in cell.loc[cell["status"] != "ok", "error_message"].dropna():
                first = str(message).strip().splitlines()[0][:300] if str(message).strip() else ""
                if first and first not in status.messages:
                    status.messages.append(first)
            statuses[(task, variant)] = status
            ok = cell[cell["status"] == "ok"]
            batches[(task, variant)] = set(int(b) for b in cell["batch_size"].dropna())
            if len(ok):
                samples = [stats.repeat_samples(s, m) for s, m in zip(ok["step_ms"], ok["ms_per_step"])]
                estimates[(task, variant)] = stats.estimate(samples)
        summaries.append(PresetSummary(
            preset=str(preset),
            tasks=task_order({t for t, _ in statuses}),
            variants=ordered(v for _, v in statuses),
            estimates=estimates, statuses=statuses, batch_sizes=batches))
    return summaries


def _preset_order(presets) -> list[str]:
    known = [p for p in ("paper", "small", "tiny") if p in set(presets)]
    return known + sorted(set(map(str, presets)) - set(known))


def noise_warnings(summary: PresetSummary) -> list[str]:
    """Neighbours in each task's ranking whose CIs overlap too much to say which is faster."""
    warnings = []
    for task in summary.tasks:
        ranked = summary.ranked(task)
        for (fast_v, fast), (slow_v, slow) in zip(ranked, ranked[1:]):
            if stats.cis_overlap_too_much(fast, slow):
                warnings.append(
                    f"{task}: cannot rank {fast_v.label} ({fast.median:.3g} ms, CI {fast.low:.3g}-{fast.high:.3g}) "
                    f"vs {slow_v.label} ({slow.median:.3g} ms, CI {slow.low:.3g}-{slow.high:.3g}): "
                    "CIs overlap too much")
    return warnings
