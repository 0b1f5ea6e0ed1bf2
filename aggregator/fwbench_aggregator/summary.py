"""From merged rows to per-cell numbers: estimates, status counts, Keras 3 best and speed-ups.

Only headline cells (fwbench.core.identity.off_headline: one device, the task's batch, no sweep point) are summarised:
the other values of those axes have sections of their own (scaling, sweep). Within a summary, Keras 3 best, speed-ups
and rankings compare variants only within a like-for-like group (equal in every setting but stack and compile mode);
a baseline missing from the group is missing, never taken from another group.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from fwbench.core.identity import CellIdentity, differing_settings, held_equal, off_headline
from fwbench.core.schema import STATUSES
from fwbench_aggregator import judge
from fwbench_aggregator import precision as precision_axis
from fwbench_aggregator import stats
from fwbench_aggregator.variants import (KERAS2, NATIVE_COMPILED, NATIVE_EAGER, Variant, assign_variants, identities,
                                        ordered, task_order)

# The published speed-up baselines: (column label, variant key).
SPEEDUP_BASELINES = (("PyTorch eager", NATIVE_EAGER), ("PyTorch compiled", NATIVE_COMPILED),
                     ("Keras 2", KERAS2))
# The axis the main tables compare along; every other identity field is held equal (held_equal).
VARIANT_AXIS = ("stack", "compile_mode")


@dataclass
class CellStatus:
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)  # distinct first lines of error messages
    busy: int = 0  # ok rows measured while something competed (left out of the estimate unless included)
    concurrent: int = 0  # ok rows in the estimate that ran beside other cells of their run (--parallel)


@dataclass(frozen=True)
class CellFacts:
    """What a cell's ok rows say about how it ran, beyond its identity (the published view shows them)."""

    pin_set: str | None = None
    pin_deviations: str | None = None
    jit_compile: bool | None = None
    compiled_target: str | None = None
    tf32_matmul: bool | None = None
    tokenize_in_step: bool | None = None
    device: str | None = None  # cuda or cpu


@dataclass(frozen=True)
class CellCosts:
    """What a cell's ok rows cost beside their time: medians over repeats (peak memory: the largest)."""

    batch: int | None
    samples_per_s: float | None
    tokens_per_s: float | None  # generate: new tokens of the whole batch per second (a step is one generate())
    first_step_s: float | None  # the first (compiling) step, never in ms_per_step
    peak_mem_bytes: float | None
    joules_per_step: float | None


def _costs(ok: pd.DataFrame) -> CellCosts:
    def median(column: str, values=None):
        values = ok[column] if values is None and column in ok else values
        values = pd.to_numeric(values, errors="coerce").dropna() if values is not None else pd.Series(dtype=float)
        return float(values.median()) if len(values) else None

    tokens = None
    if "tokens_generated" in ok and ok["tokens_generated"].notna().any():
        tokens = median("", ok["batch_size"] * ok["tokens_generated"] * 1000.0 / ok["ms_per_step"])
    memory = pd.to_numeric(ok["peak_mem_bytes"], errors="coerce").dropna() if "peak_mem_bytes" in ok else []
    batch = median("batch_size")
    return CellCosts(None if batch is None else int(batch), median("samples_per_s"), tokens, median("first_step_s"),
                     float(memory.max()) if len(memory) else None, median("joules_per_step"))


def _facts(rows: pd.DataFrame) -> CellFacts:
    def first(column: str):
        if column not in rows:
            return None
        values = rows[column].dropna()
        return values.iloc[0] if len(values) else None

    return CellFacts(*(first(name) for name in ("pin_set", "pin_deviations", "jit_compile", "compiled_target",
                                                  "tf32_matmul", "tokenize_in_step", "device")))


@dataclass
class PresetSummary:
    preset: str
    tasks: list[str]
    variants: list[Variant]
    estimates: dict[tuple[str, Variant], stats.Estimate]
    statuses: dict[tuple[str, Variant], CellStatus]
    batch_sizes: dict[tuple[str, Variant], set]
    facts: dict[tuple[str, Variant], CellFacts] = field(default_factory=dict)
    # Cells whose only ok rows are busy: shown (marked) so a busy run still shows numbers, but never in
    # `estimates`, so rankings, Keras 3 best, speed-ups and plots leave them out.
    busy_estimates: dict[tuple[str, Variant], stats.Estimate] = field(default_factory=dict)
    # The precision setting of every row in this summary (precision.row_precision): one table per precision.
    precision: str = precision_axis.PUBLISHED
    # Per cell: the per-repeat samples behind its estimate (ratios with intervals), and the (compute_dtype,
    # dtype) its ok rows recorded.
    samples: dict[tuple[str, Variant], list] = field(default_factory=dict)
    dtypes: dict[tuple[str, Variant], tuple] = field(default_factory=dict)
    identities: dict[tuple[str, Variant], CellIdentity] = field(default_factory=dict)
    # (task, (stack, compile mode)) -> labels of its cells off the headline (devices=2, a sweep point...): named
    # where a like-for-like cell is missing, so the reader knows where the number went.
    elsewhere: dict[tuple[str, tuple[str, str]], list[str]] = field(default_factory=dict)
    costs: dict[tuple[str, Variant], CellCosts] = field(default_factory=dict)
    # Per cell: the per-repeat samples of its quiet ok rows, whatever --include-busy shows: what verdicts use.
    quiet_samples: dict[tuple[str, Variant], list] = field(default_factory=dict)
    # The judge's rankings, once per (task, group, Keras 3 only): the best cell, speed-ups, noise warnings and the
    # published order all ask for them, and each costs a bootstrap per candidate.
    _rankings: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def title(self) -> str:
        """'tiny', or 'tiny, bf16' for a precision other than the published setting."""
        return self.preset if self.precision == precision_axis.PUBLISHED else f"{self.preset}, {self.precision}"

    def groups(self, task: str) -> dict[tuple, list[Variant]]:
        """The task's variants in like-for-like groups (equal in every identity setting: held_equal along
        VARIANT_AXIS), each in column order, keyed by the settings their labels name (within one preset and precision
        those tell the groups apart: a setting not named is at its fixed default or the same in every row)."""
        by_identity: dict[CellIdentity, list[Variant]] = {}
        for variant in self.variants:
            if (task, variant) in self.identities:
                by_identity.setdefault(held_equal(self.identities[(task, variant)], VARIANT_AXIS), []).append(variant)
        # The group without named settings first, then by what they name.
        in_order = sorted(by_identity.values(), key=lambda g: (len(g[0].settings), tuple(map(str, g[0].settings))))
        return {group[0].settings: group for group in in_order}

    def keras3_ranking(self, task: str, settings: tuple = ()) -> judge.Ranking | None:
        """The judge's ranking of the group's Keras 3 cells with quiet rows (busy rows never decide)."""
        return self.ranking(task, settings, keras3_only=True)

    def ranking(self, task: str, settings: tuple = (), *, keras3_only: bool = False) -> judge.Ranking | None:
        """The judge's ranking of one like-for-like group's cells, from their quiet rows only."""
        key = (task, settings, keras3_only)
        if key not in self._rankings:
            self._rankings[key] = judge.rank({
                v: self.quiet_samples[(task, v)] for v in self.groups(task).get(settings, ())
                if (task, v) in self.quiet_samples and (v.is_keras3 or not keras3_only)})
        return self._rankings[key]

    def keras3_best(self, task: str, settings: tuple = ()) -> tuple[Variant, stats.Estimate] | None:
        """The Keras 3 cell with the lowest median of its quiet rows in one like-for-like group, as the published
        'best' column (whether the judge can rank it first: keras3_ranking)."""
        ranking = self.keras3_ranking(task, settings)
        return None if ranking is None else (ranking.order[0], self.estimates[(task, ranking.order[0])])

    def keras3_left_out_busy(self, task: str, settings: tuple = ()) -> list[tuple[Variant, stats.Estimate]]:
        """Keras 3 cells of the group measured only busy whose number is below the best's: they might have won."""
        best = self.keras3_best(task, settings)
        return [(v, self.busy_estimates[(task, v)]) for v in self.groups(task).get(settings, ())
                if v.is_keras3 and (task, v) in self.busy_estimates
                and judge.busy_might_have_won(self.busy_estimates[(task, v)], None if best is None else best[1])]

    def keras3_groups(self, task: str) -> list[tuple]:
        """The settings of the task's groups that have a Keras 3 best."""
        return [settings for settings in self.groups(task) if self.keras3_best(task, settings)]

    def baseline(self, task: str, baseline_key: tuple[str, str], settings: tuple = ()) -> stats.Estimate | None:
        """The estimate of a baseline column in the like-for-like group `settings`; None when the group has none."""
        return self.estimates.get((task, Variant(*baseline_key, settings)))

    def speedup(self, task: str, baseline_key: tuple[str, str], settings: tuple = ()) -> float | None:
        """Keras 3 best over a baseline of its group as the page computes it: (baseline_ms / keras_ms - 1) x 100%."""
        best = self.keras3_best(task, settings)
        baseline = self.baseline(task, baseline_key, settings)
        if best is None or baseline is None:
            return None
        return speedup_percent(baseline.median, best[1].median)

    def speedup_verdict(self, task: str, baseline_key: tuple[str, str], settings: tuple = ()) -> str | None:
        """The judge's word on Keras 3 best against a baseline of its group, from quiet rows: 'faster', 'slower'
        (the Keras 3 best's side), 'tie' or 'cannot rank'; None where either side is missing."""
        best = self.keras3_best(task, settings)  # ranked from quiet_samples: it has some
        baseline = Variant(*baseline_key, settings)
        if best is None or (task, baseline) not in self.quiet_samples:
            return None
        return judge.ratio(self.quiet_samples[(task, best[0])], self.quiet_samples[(task, baseline)]).word

    def ranked(self, task: str, settings: tuple = ()) -> list[tuple[Variant, stats.Estimate]]:
        """One like-for-like group's variants with quiet rows, in the judge's order (lowest median first; which of
        them it can tell apart: ranking)."""
        ranking = self.ranking(task, settings)
        return [] if ranking is None else [(v, self.estimates[(task, v)]) for v in ranking.order]

    def status_word(self, task: str, variant: Variant) -> str:
        status = self.statuses.get((task, variant))
        if status is None:
            return "—"  # not run
        if status.busy and status.busy == status.counts.get("ok"):
            return "busy"  # ran ok, but only on a busy machine: see "Busy rows"
        return ", ".join(f"{s}" for s in STATUSES if status.counts.get(s)) or "?"

    def missing(self, task: str, settings: tuple, stack: str, compile_mode: str | None = None) -> str:
        """Why the group `settings` has no estimate of stack [compile_mode] (None: any compile mode): its status,
        or that it ran only at other settings (named), or not at all."""
        def wanted(variant: Variant) -> bool:
            return variant.stack == stack and compile_mode in (None, variant.compile_mode)

        here = [v for v in self.groups(task).get(settings, ()) if wanted(v)]
        if here:
            return "; ".join(f"{v.label}: {self.status_word(task, v)}" for v in here)
        if compile_mode:
            target = f"{Variant(stack, compile_mode, settings).label} cell"
        else:
            at = Variant(stack, "", settings).settings_text
            target = f"{stack} cell" + (f" at {at}" if at else "")
        others = [v.label for group, variants in self.groups(task).items() if group != settings
                  for v in variants if wanted(v)]
        others += [label for (t, key), labels in self.elsewhere.items() if t == task and wanted(Variant(*key))
                   for label in labels]
        if not others:
            return f"no {target}"
        return f"no like-for-like {target}; it ran as {', '.join(others)}"


def speedup_percent(baseline_ms: float, candidate_ms: float) -> float:
    return (baseline_ms / candidate_ms - 1) * 100


def is_busy(frame: pd.DataFrame) -> pd.Series:
    return judge.busy_mask(frame)


def ran_concurrently(frame: pd.DataFrame) -> pd.Series:
    """Rows whose cell ran beside other cells of its run (`fwbench run --parallel`, parallel_cells > 1)."""
    if "parallel_cells" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["parallel_cells"].fillna(1).astype(int) > 1


def summarise(frame: pd.DataFrame, include_busy: bool = False) -> list[PresetSummary]:
    """One summary per preset and precision (sizes differ between presets and precisions change what is computed,
    so they never share a table), presets in order, then precisions. Each (task, variant) pools only rows of one
    cell identity; busy rows count only with include_busy."""
    summaries = []
    off = ~headline_rows(frame)
    elsewhere = _elsewhere(frame[off])
    frame = assign_variants(frame[~off], unnamed=("precision",))  # each table is one precision
    frame = frame.assign(_precision=precision_axis.precision_column(frame))
    for preset in _preset_order(frame["preset"].dropna().unique()):
        for precision in precision_axis.ordered(frame.loc[frame["preset"] == preset, "_precision"]):
            rows = frame[(frame["preset"] == preset) & (frame["_precision"] == precision)]
            summaries.append(_summary(str(preset), precision, rows, include_busy,
                                      elsewhere.get((str(preset), precision), {})))
    return summaries


def headline_rows(frame: pd.DataFrame) -> pd.Series:
    """True for the rows the main tables hold (fwbench.core.identity.off_headline is empty)."""
    return pd.Series([not off_headline(i) for i in identities(frame)], index=frame.index, dtype=bool)


def _elsewhere(off: pd.DataFrame) -> dict[tuple[str, str], dict[tuple[str, tuple[str, str]], list[str]]]:
    """(preset, precision) -> (task, variant key) -> the labels of the cells measured off the headline."""
    out: dict = {}
    for identity, row in zip(identities(off), off.to_dict("records")):
        named = tuple((n, v) for n, v in differing_settings(identity, set()) if n != "precision")
        labels = out.setdefault((identity.preset, precision_axis.row_precision(row)), {}).setdefault(
            (identity.task, (identity.stack, identity.compile_mode)), [])
        label = Variant(identity.stack, identity.compile_mode, named).label
        if label not in labels:
            labels.append(label)
    return out


def _summary(preset: str, precision: str, rows: pd.DataFrame, include_busy: bool, elsewhere: dict) -> PresetSummary:
    estimates, statuses, batches, facts, busy_estimates, samples, dtypes, costs = {}, {}, {}, {}, {}, {}, {}, {}
    quiet_samples = {}
    cell_identities = {}
    for (task, variant), cell in rows.groupby(["task", "_variant"], dropna=False, sort=False):
        cell_identities[(task, variant)] = cell["_identity"].iloc[0]
        busy = is_busy(cell) & (cell["status"] == "ok")
        status = CellStatus(Counter(cell["status"]), busy=int(busy.sum()))
        for message in cell.loc[cell["status"] != "ok", "error_message"].dropna():
            first = str(message).strip().splitlines()[0][:300] if str(message).strip() else ""
            if first and first not in status.messages:
                status.messages.append(first)
        statuses[(task, variant)] = status
        ok = cell[(cell["status"] == "ok") & (include_busy | ~busy)]
        status.concurrent = int(ran_concurrently(ok).sum())
        batches[(task, variant)] = set(int(b) for b in cell["batch_size"].dropna())
        quiet, _ = judge.quiet(cell)
        if len(quiet):
            quiet_samples[(task, variant)] = _samples(quiet)
        if len(ok):
            samples[(task, variant)] = _samples(ok)
            estimates[(task, variant)] = stats.estimate(samples[(task, variant)])
            facts[(task, variant)] = _facts(ok)
            costs[(task, variant)] = _costs(ok)
            dtypes[(task, variant)] = (_first(ok, "compute_dtype"), _first(ok, "dtype"))
        elif busy.any():
            busy_estimates[(task, variant)] = _estimate(cell[busy])
            status.concurrent = int(ran_concurrently(cell[busy]).sum())  # of the rows behind the shown number
    return PresetSummary(
        preset=preset,
        tasks=task_order({t for t, _ in statuses}),
        variants=ordered(v for _, v in statuses),
        estimates=estimates, statuses=statuses, batch_sizes=batches, facts=facts,
        busy_estimates=busy_estimates, precision=precision, samples=samples, dtypes=dtypes,
        identities=cell_identities, elsewhere=elsewhere, costs=costs, quiet_samples=quiet_samples)


def _samples(ok: pd.DataFrame) -> list:
    return [stats.repeat_samples(s, m) for s, m in zip(ok["step_ms"], ok["ms_per_step"])]


def _estimate(ok: pd.DataFrame) -> stats.Estimate:
    return stats.estimate(_samples(ok))


def _first(rows: pd.DataFrame, column: str):
    """The first recorded value of a column (None when the rows lack it: older schema versions)."""
    if column not in rows:
        return None
    values = rows[column].dropna()
    return values.iloc[0] if len(values) else None


def _preset_order(presets) -> list[str]:
    known = [p for p in ("paper", "small", "tiny") if p in set(presets)]
    return known + sorted(set(map(str, presets)) - set(known))


def noise_warnings(summary: PresetSummary) -> list[str]:
    """Neighbours in each like-for-like group's order that the judge cannot rank: a tie, or an interval of their
    ratio that reaches across 1."""
    warnings = []
    for task, settings in ((t, s) for t in summary.tasks for s in summary.groups(t)):
        order = [v for v, _ in summary.ranked(task, settings)]
        for fast_v, slow_v in zip(order, order[1:]):
            ratio = judge.ratio(summary.quiet_samples[(task, fast_v)], summary.quiet_samples[(task, slow_v)])
            if ratio.word != judge.FASTER:
                fast, slow = summary.estimates[(task, fast_v)], summary.estimates[(task, slow_v)]
                warnings.append(
                    f"{task}: cannot rank {fast_v.label} ({fast.median:.3g} ms, CI {fast.low:.3g}-{fast.high:.3g}) "
                    f"vs {slow_v.label} ({slow.median:.3g} ms, CI {slow.low:.3g}-{slow.high:.3g}): ratio "
                    f"{ratio.text()} ({ratio.word}; {ratio.method})")
    return warnings
