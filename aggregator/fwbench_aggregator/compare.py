"""Compare two result sets cell by cell: B/A ratio with a confidence interval, a test when one is possible.

Cells are paired by their full identity (stack, task, preset, compile mode and every setting: TF32,
threads, steps, device, ...); a cell with no partner is listed as "only in A/B".

The unit of a test is the process (a repeat), not the step: the timed steps of one process are
autocorrelated (caches, clocks, a neighbour's burst last several steps), and they share everything that
differs between processes (memory layout, compile results, which core). So:
  * both sides with >= 3 repeats (MIN_REPEATS): Welch's t on the log of each repeat's median ms/step,
    with df capped at what the sample sizes alone allow (see log_ratio_test: Welch-Satterthwaite's
    estimated df alone let false alarms multiply at 10 vs 3 repeats under Holm's small per-cell alpha;
    benchmarks/verdict_error_rates.py shows the rate holds with the cap).
    The ratio is the ratio of geometric means of those medians, with a 95% interval. p-values are
    Holm-adjusted over all tested cells (family-wise alpha). Verdict "slower"/"faster" needs adjusted
    p < alpha and |change| >= --min-effect; otherwise "not significant". Identical repeats on both
    sides (zero spread) give no test and no interval: "not testable", never p = 0.
  * fewer than 3 repeats on a side: no test (two processes cannot estimate process-to-process
    variation usefully); the verdict says what it needs. The ratio of medians gets a moving-block
    bootstrap interval over the steps, which is descriptive only.
The `--fail-above PCT` gate tests, per paired cell, whether B/A exceeds 1 + PCT/100 (one-sided, the same
Welch t), Holm-adjusted over the gated cells, so the chance of failing any cell whose true change is within
PCT stays <= alpha. A cell that has ok rows in A but none in B (failed, timed out or missing) fails the
gate; a paired cell with fewer than 3 repeats a side, or identical repeats, makes the gate refuse (one
line, exit 2) instead of gating on step noise.

`--across SETTING` (repeatable: any name of fwbench.core.identity.SETTINGS, or `engine`, which is the
image_variant setting: venv, cpu or gpu image, host) pairs cells whose identities differ only in the named
settings (e.g. pin_set current in A, paper-2024 in B), by the one comparison rule (fwbench.core.identity.held_equal).
Every other setting must still match; a cell that differs from its nearest partner in a setting not named stays
unpaired and says which settings differ.
Cells equal in every setting pair first; when several cells of a side differ only in named settings from
the same cell, they are ambiguous and stay unpaired. A paired cell lists what differs ("pin_set: current ->
paper-2024", and the engine column when it differs). Across device models the verdict is the ratio with
its interval, never slower/faster: those cells are left out of Holm's family, and --fail-above refuses
(GateRefused) rather than gate on a cross-device ratio, which is not a regression. Across device counts
(`--across devices`) more devices are meant to change ms/step: such a cell reads as data-parallel scaling, the
throughput speed-up (G_B / G_A) x (ms_A / ms_B) and efficiency = speed-up / (N_B / N_A) with their intervals (weak or
strong scaling as the global-batch settings say; fwbench_aggregator.scaling), never slower/faster, outside Holm's
family and the gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fwbench.core import axes
from fwbench.core.identity import KEY_FIELDS, SETTINGS, CellIdentity, held_equal
from fwbench_aggregator import judge, loading, scaling, stats
# The test of a change is the judge's; these names stay importable from here for the benchmarks and tests.
from fwbench_aggregator.judge import LogRatioTest, capped_welch, holm, log_moments, log_ratio_test  # noqa: F401
from fwbench_aggregator.variants import Variant, assign_variants, task_order

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT_PCT = 5.0
CONFIDENCE = 0.95
MIN_REPEATS = judge.MIN_REPEATS  # per side, for any test, verdict or gate
MIN_STEPS_FOR_INTERVAL = 3  # per side, when a side has a single repeat
BOOTSTRAP_RESAMPLES = 4000
METHOD_REPEATS = "repeats (Welch t on log repeat medians, capped df)"
METHOD_STEPS = "steps (block bootstrap, fewer than 3 repeats: descriptive)"
# --across names: every identity setting, and `engine`, which is the image_variant setting (where the
# libraries came from: venv, a cpu/gpu image, the host); the engine column (not part of the identity) is
# shown beside it whenever it differs.
ACROSS_ALIASES = {"engine": "image_variant"}


def across_names() -> tuple[str, ...]:
    """Every axis (fwbench.core.axes, read when asked: a later axis counts) and the aliases."""
    return (*SETTINGS, *ACROSS_ALIASES)


def across_settings(names) -> frozenset[str]:
    """The identity settings that --across NAMES lets differ; ValueError (one line) for an unknown name."""
    chosen = set()
    for name in names or ():
        if name not in across_names():
            raise ValueError(f"unknown --across setting {name!r} (choose from: {', '.join(across_names())})")
        chosen.add(ACROSS_ALIASES.get(name, name))
    return frozenset(chosen)


@dataclass
class Side:
    repeats: list[np.ndarray]  # per-step samples of each quiet ok repeat (the only ones a verdict uses)
    busy: int = 0  # busy ok rows left out
    engines: tuple[str, ...] = ()  # the engine column of its rows (not part of the identity)
    global_batch: int | None = None  # samples a step processed over all devices (scaling's throughput)
    # Not "": its quiet rows ran in several environments (judge.environment_parts), each part named: not judged.
    mixed: str = ""
    environment: tuple = ()  # its quiet rows' one environment (judge.environment_key)

    @property
    def not_judged(self) -> str:
        """Why this side decides nothing ("" when it can): only busy rows, or rows of several environments."""
        if not self.repeats:
            return f"{self.busy} busy ok row(s), no quiet one"
        if self.mixed:
            return f"its rows mix environments ({self.mixed})"
        return ""

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
    test: LogRatioTest | None = None  # set when both sides have MIN_REPEATS repeats with some spread
    identity_b: CellIdentity | None = None  # B's identity (differs from `identity` only with --across)
    # Paired: (name, A value, B value) of every setting that differs, and of the engine column.
    differences: tuple[tuple[str, Any, Any], ...] = ()
    unpaired_note: str = ""  # unpaired: why (the settings that differ from the nearest cell of the other side)
    scaling: ScalingRead | None = None  # paired across device counts: the speed-up and efficiency of B over A

    def _across(self, compared: str) -> bool:
        """Do A and B differ in an axis compared that way (fwbench.core.axes: RATIO_ONLY, SCALING...)?"""
        table = axes.by_name()
        return any(name in table and table[name].compared == compared for name, _, _ in self.differences)

    @property
    def across_device_models(self) -> bool:
        """Another machine: a ratio only, never slower/faster, never gated."""
        return self._across(axes.RATIO_ONLY)

    @property
    def across_device_counts(self) -> bool:
        """Another device count: scaling (speed-up and efficiency), never a regression."""
        return self._across(axes.SCALING)

    @property
    def judged(self) -> bool:
        """Is B/A a change to call slower/faster and gate? Not across device models or device counts, nor when a
        side decides nothing (busy only, mixed environments)."""
        return self.paired and not (self.across_device_models or self.across_device_counts or self.not_judged)

    @property
    def not_judged(self) -> str:
        """'not judged: busy (A: ...)' or 'not judged: A's rows mix environments (...)'; '' when both sides can."""
        if not self.paired:
            return ""
        why = [(name, side) for name, side in (("A", self.a), ("B", self.b)) if side.not_judged]
        if not why:
            return ""
        kind = judge.NOT_JUDGED_BUSY if any(not side.repeats for _, side in why) else "not judged"
        return f"{kind} ({'; '.join(f'{name}: {side.not_judged}' for name, side in why)})"

    @property
    def per_sample(self) -> bool:
        """Paired across a batch change on the same device count: compared per sample (ms per sample)."""
        return (self.paired and not self.across_device_counts and bool(self.a.global_batch)
                and bool(self.b.global_batch) and self.a.global_batch != self.b.global_batch)

    @property
    def differs(self) -> str:
        """'pin_set: current -> paper-2024; engine: local -> docker', or why the cell is unpaired."""
        return describe_differences(self.differences) if self.paired else self.unpaired_note

    @property
    def median_a(self) -> float | None:
        return None if self.a is None or not self.a.repeats else stats.median(np.concatenate(self.a.repeats))

    @property
    def median_b(self) -> float | None:
        return None if self.b is None or not self.b.repeats else stats.median(np.concatenate(self.b.repeats))

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


def cell_sides(frame: pd.DataFrame) -> dict[CellIdentity, tuple[Variant, Side]]:
    """ok rows grouped by full identity: the per-step samples of each quiet repeat (the judge's busy policy: busy
    rows are counted, never used), and whether those rows mix environments."""
    cells = {}
    ok = frame[frame["status"] == "ok"]
    for identity, rows in ok.groupby("_identity", sort=False):
        quiet, busy = judge.quiet(rows)
        repeats = [stats.repeat_samples(s, m) for s, m in zip(quiet["step_ms"], quiet["ms_per_step"])]
        engines = tuple(sorted({str(e) for e in rows["engine"].dropna()})) if "engine" in rows else ()
        batches = [b for column in ("global_batch", "batch_size") if column in rows for b in rows[column].dropna()]
        environments = judge.environment_records(quiet)
        parts = judge.environment_parts(environments)
        mixed = "; ".join(f"{label}: {len(members)} row(s)" for label, members in parts) if len(parts) > 1 else ""
        # compare names each side's environment itself (Side.mixed, the differences column): labels carry none.
        variant = replace(rows["_variant"].iloc[0], environment="")
        environment = judge.environment_key(environments[0]) if environments and not mixed else ()
        cells[identity] = (variant, Side(repeats, busy, engines, int(batches[0]) if batches else None, mixed,
                                         environment))
    return cells


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "?" if value is None else str(value)


def describe_differences(differences) -> str:
    return "; ".join(f"{name}: {_text(a)} -> {_text(b)}" for name, a, b in differences)


def setting_differences(a: CellIdentity, b: CellIdentity) -> tuple[tuple[str, Any, Any], ...]:
    return tuple((name, value, b_value) for (name, value), (_, b_value) in zip(a.settings, b.settings)
                 if value != b_value)


def pair_cells(ids_a, ids_b, across: frozenset[str] = frozenset()):
    """(pairs, notes): cells equal in every setting pair first; then, with `across`, a cell pairs with the one
    cell of the other side that differs from it only in `across` settings (several such cells: ambiguous,
    unpaired). notes: unpaired identity -> why (the settings that differ from the nearest cell of the same
    stack, task, preset and compile mode on the other side; "A -> B" order)."""
    set_b = set(ids_b)
    pairs = [(i, i) for i in ids_a if i in set_b]
    rest_a = [i for i in ids_a if i not in set_b]
    rest_b = [i for i in ids_b if i not in set(ids_a)]
    notes: dict[tuple[str, CellIdentity], str] = {}
    if across:
        groups: dict[CellIdentity, tuple[list, list]] = {}
        for side, ids in ((0, rest_a), (1, rest_b)):
            for i in ids:
                groups.setdefault(held_equal(i, across), ([], []))[side].append(i)
        for group_a, group_b in groups.values():
            if len(group_a) == 1 and len(group_b) == 1:
                pairs.append((group_a[0], group_b[0]))
            elif group_a and group_b:
                named = ", ".join(sorted(across))
                for side, ids, others in (("A", group_a, group_b), ("B", group_b, group_a)):
                    for i in ids:
                        notes[(side, i)] = (f"ambiguous: {len(others)} cell(s) of {'B' if side == 'A' else 'A'} "
                                            f"differ from it only in --across settings ({named}); not paired")
        paired = {i for p in pairs for i in p}
        rest_a = [i for i in rest_a if i not in paired]
        rest_b = [i for i in rest_b if i not in paired]
    for side, ids, others in (("A", rest_a, rest_b), ("B", rest_b, rest_a)):
        for i in ids:
            if (side, i) in notes:
                continue
            same_key = [o for o in others if all(getattr(o, f) == getattr(i, f) for f in KEY_FIELDS)]
            if not same_key:
                continue
            ordered_pair = (lambda o: (i, o)) if side == "A" else (lambda o: (o, i))
            diffs = [setting_differences(*ordered_pair(o)) for o in same_key]
            unnamed = [tuple(d for d in diff if d[0] not in across) for diff in diffs]
            nearest = min(range(len(same_key)), key=lambda k: (len(unnamed[k]), str(unnamed[k])))
            notes[(side, i)] = f"differs in settings not named in --across: {describe_differences(unnamed[nearest])}"
    return pairs, notes


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
    if len(a.repeats) >= MIN_REPEATS and len(b.repeats) >= MIN_REPEATS:
        row.method = METHOD_REPEATS
        row.test = log_ratio_test(a.repeat_medians, b.repeat_medians)
        if row.test is None:
            row.ratio = float(np.exp(np.log(b.repeat_medians).mean() - np.log(a.repeat_medians).mean()))
            row.verdict = "not testable: identical repeats on both sides (no spread to test against)"
            return
        row.ratio = row.test.ratio
        row.ratio_low, row.ratio_high = row.test.interval(CONFIDENCE)
        row.p_value = row.test.p_two_sided()
        return
    row.method = METHOD_STEPS
    row.ratio = row.median_b / row.median_a
    needs = f"needs {MIN_REPEATS} repeats a side; A has {len(a.repeats)}, B has {len(b.repeats)}"
    short = [name for name, side in (("A", a), ("B", b)) if len(side.repeats) == 1 and side.steps < MIN_STEPS_FOR_INTERVAL]
    if short:
        row.verdict = f"too few samples: {'/'.join(short)} has 1 repeat of fewer than {MIN_STEPS_FOR_INTERVAL} steps ({needs})"
        return
    ratios = (block_bootstrap_medians(b, BOOTSTRAP_RESAMPLES, rng)
              / block_bootstrap_medians(a, BOOTSTRAP_RESAMPLES, rng))
    tail = (1 - CONFIDENCE) / 2 * 100
    row.ratio_low, row.ratio_high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    row.verdict = f"not testable: {needs}"


def compare(a: loading.LoadedResults, b: loading.LoadedResults, alpha: float = DEFAULT_ALPHA,
            min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT, across=()) -> list[CellComparison]:
    """Cells paired by identity (with `across`: identities that differ only in those settings, see the module
    doc), each with its ratio, interval and verdict."""
    across = across_settings(across)
    # Variants (labels) from both sides together, so a setting that differs between A and B is named.
    frames = [a.frame().assign(_side="A"), b.frame().assign(_side="B")]
    both = assign_variants(pd.concat(frames, ignore_index=True))
    cpu_identities = set(both.loc[both["device"] == "cpu", "_identity"])  # scaling on a CPU makes no speed claim
    sides_a, sides_b = cell_sides(both[both["_side"] == "A"]), cell_sides(both[both["_side"] == "B"])
    pairs, notes = pair_cells(list(sides_a), list(sides_b), across)
    paired_a, paired_b = {p[0] for p in pairs}, {p[1] for p in pairs}
    identities = set(sides_a) | set(sides_b)
    tasks = {t: i for i, t in enumerate(task_order({i.task for i in identities}))}
    rows = []
    for id_a, id_b in pairs:
        variant, side_a = sides_a[id_a]
        side_b = sides_b[id_b][1]
        variant = replace(variant, settings=tuple((k, v) for k, v in variant.settings if k not in across))
        differences = setting_differences(id_a, id_b)
        if side_a.engines != side_b.engines:
            differences += (("engine", ", ".join(side_a.engines) or None, ", ".join(side_b.engines) or None),)
        differences += environment_differences(side_a.environment, side_b.environment)
        rows.append(CellComparison(id_a.preset, id_a.task, variant, id_a, side_a, side_b, identity_b=id_b,
                                   differences=differences))
    for name, sides, paired in (("A", sides_a, paired_a), ("B", sides_b, paired_b)):
        for identity, (variant, side) in sides.items():
            if identity not in paired:
                rows.append(CellComparison(identity.preset, identity.task, variant, identity,
                                           side if name == "A" else None, side if name == "B" else None,
                                           identity_b=identity if name == "B" else None,
                                           unpaired_note=notes.get((name, identity), "")))
    rows.sort(key=lambda r: (r.preset, tasks[r.task], r.variant.sort_key(), r.a is None))
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    for r in rows:
        if r.paired and not r.not_judged:
            _compare_cell(r, rng)
            if r.per_sample:
                _per_sample(r)
    tested = [r for r in rows if r.p_value is not None and r.judged]
    for r, p_adj in zip(tested, holm([r.p_value for r in tested])):
        r.p_adjusted = p_adj
        r.verdict = judge.change_word(r.ratio, p_adj, alpha, min_effect_pct)
        if r.per_sample and r.verdict in (judge.SLOWER, judge.FASTER):
            r.verdict += " per sample"
    for r in rows:
        if r.a is None:
            r.verdict = "only in B"
        elif r.b is None:
            r.verdict = "only in A"
        elif r.not_judged:
            r.verdict = r.not_judged
        elif r.across_device_counts:
            r.scaling = scaling_read(r, on_cpu=bool({r.identity, r.identity_b} & cpu_identities))
            r.verdict = r.scaling.text()
        elif r.across_device_models:
            r.verdict = across_devices_verdict(r)
    return rows


def environment_differences(a: tuple, b: tuple) -> tuple[tuple[str, Any, Any], ...]:
    """(fact, A's value, B's value) for each environment fact (library version, compile cache) the sides' rows
    differ in; none where a side has no single environment."""
    if not a or not b:
        return ()
    facts_a, facts_b = dict(a), dict(b)
    return tuple((name, facts_a.get(name), facts_b.get(name)) for name in sorted(set(facts_a) | set(facts_b))
                 if facts_a.get(name) != facts_b.get(name))


def _per_sample(row: "CellComparison") -> None:
    """A pair that differs in its batch (and not its device count) is compared per sample: B/A of ms per sample,
    (ms_B / G_B) / (ms_A / G_A), the same test shifted by log(G_A / G_B)."""
    factor = row.a.global_batch / row.b.global_batch
    row.ratio *= factor
    if row.ratio_low is not None:
        row.ratio_low, row.ratio_high = row.ratio_low * factor, row.ratio_high * factor
    if row.test is not None:
        row.test = LogRatioTest(row.test.log_ratio + math.log(factor), row.test.se, row.test.dof)
        row.p_value = row.test.p_two_sided()
    row.method += "; per sample (the batch differs)"


@dataclass(frozen=True)
class ScalingRead:
    """B over A across device counts: throughput speed-up and efficiency, each with its interval (None: why not)."""

    devices: tuple[int, int]  # N of A, N of B
    kind: str  # "weak scaling", "strong scaling", or the two global batches asked for
    speedup: scaling.Interval | None
    efficiency: scaling.Interval | None
    without_interval: str | None = None
    # A side ran on a CPU: its N devices were logical ones sharing the cores, so the read checks correctness only.
    no_speed_claim: bool = False

    def text(self) -> str:
        if self.speedup is None:
            text = f"{self.kind} {self.devices[0]} -> {self.devices[1]} devices: no speed-up ({self.without_interval})"
        else:
            speedup = scaling.fmt_interval(self.speedup, "{:.2f}x", "{:.2f}", self.without_interval)
            efficiency = scaling.fmt_efficiency(self.efficiency, self.without_interval)
            text = (f"{self.kind} {self.devices[0]} -> {self.devices[1]} devices: speed-up {speedup}, "
                    f"efficiency {efficiency} (no verdict)")
        return f"{text}; {scaling.NO_SPEED_CLAIM}" if self.no_speed_claim else text


def scaling_read(row: CellComparison, *, on_cpu: bool = False) -> ScalingRead:
    """samples/s of B over A = (G_B / G_A) x (ms_A / ms_B), the interval of compare's B/A ratio carried over; the
    efficiency divides by N_B / N_A (fwbench_aggregator.scaling defines both for the report). on_cpu: either side's
    rows ran on a CPU (the row column `device`), where the read makes no speed claim, as the report's table."""
    n_a, n_b = int(row.identity.setting("devices")), int(row.identity_b.setting("devices"))
    g_a, g_b = row.identity.setting("global_batch"), row.identity_b.setting("global_batch")
    kind = ("weak scaling" if g_a is None and g_b is None else "strong scaling" if g_a == g_b else
            f"global batch {g_a or 'per device'} -> {g_b or 'per device'}")
    if not (row.a.global_batch and row.b.global_batch):
        return ScalingRead((n_a, n_b), kind, None, None, "a side has no batch size", no_speed_claim=on_cpu)
    batches = row.b.global_batch / row.a.global_batch
    if row.has_interval:
        speedup = scaling.Interval(1 / row.ratio, 1 / row.ratio_high, 1 / row.ratio_low).scaled(batches)
        without = None
    else:
        speedup = scaling.Interval(1 / row.ratio, 1 / row.ratio, 1 / row.ratio).scaled(batches)
        without = f"no interval: {row.verdict}"
    return ScalingRead((n_a, n_b), kind, speedup, speedup.scaled(n_a / n_b), without, no_speed_claim=on_cpu)


def across_devices_verdict(row: CellComparison) -> str:
    """A ratio with its interval: another device is not a regression, so never slower/faster."""
    if row.test is None:
        return f"across devices, ratio only: {row.verdict}"
    return f"ratio across devices {row.ratio:.3f} [{row.ratio_low:.3f}–{row.ratio_high:.3f}] (no verdict)"


class GateRefused(Exception):
    """--fail-above cannot judge some paired cells (fewer than MIN_REPEATS repeats a side, or no spread)."""


def regressions_above(rows: list[CellComparison], fail_above_pct: float,
                      alpha: float = DEFAULT_ALPHA) -> list[CellComparison]:
    """Cells that fail the gate: B/A credibly above 1 + fail_above_pct/100 (one-sided Welch t, Holm-adjusted
    over the gated cells), and cells with ok rows in A but none in B."""
    crossing = [r for r in rows if r.paired and r.across_device_models]
    if crossing:
        raise GateRefused(f"cannot gate with --fail-above: {len(crossing)} cell(s) are paired across device models "
                          "(--across device_model); a cross-device ratio is not a regression")
    # Across device counts B/A is data-parallel scaling, not a change: never gated (nor a reason to refuse).
    unjudgeable = [r for r in rows if r.judged and r.test is None]
    if unjudgeable:
        names = ", ".join(f"{r.task} {r.variant.label} (A {len(r.a.repeats)}, B {len(r.b.repeats)})"
                          for r in unjudgeable[:5])
        more = f" and {len(unjudgeable) - 5} more" if len(unjudgeable) > 5 else ""
        raise GateRefused(f"cannot gate with --fail-above: {len(unjudgeable)} cell(s) lack {MIN_REPEATS} repeats a "
                          f"side with some spread ({names}{more}); run both sides with --repeats {MIN_REPEATS} or more")
    gated = [r for r in rows if r.judged and r.test is not None]
    above = judge.credibly_above([r.test for r in gated], 1 + fail_above_pct / 100, alpha)
    return [r for r in rows if r.verdict == "only in A"] + [r for r, fails in zip(gated, above) if fails]


def not_judged_busy(rows: list[CellComparison]) -> list[CellComparison]:
    """Paired cells the gate cannot judge because a side has only busy rows (--fail-above's own exit code)."""
    return [r for r in rows if r.paired and r.verdict.startswith(judge.NOT_JUDGED_BUSY)]


def load_side(paths: list[Path]) -> loading.LoadedResults:
    return loading.load_results([Path(p) for p in paths])
