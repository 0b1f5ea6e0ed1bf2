"""Run cells at version-sweep points (`fwbench sweep`), and find where a cell changed (`fwbench bisect`).

A point's cells run in the local engine's environment for that point (fwbench.engines.local: the pin set's lock
plus one package at another version, or every package re-resolved at a date), one cell at a time (versions are
compared, so no cell runs beside another). A point whose environment cannot be made, or installed another version
than the one asked for, is never measured: each of its planned cells gets a row (status error, error_type
SweepPointUnavailable or SweepVersionMismatch, the resolver's one line as error_message), not a traceback; such
a row never replaces an ok row of its cell-repeat (with --resume the ok row is kept, and nothing is written).

Bisect is a binary search over the points between a good and a bad one (a package's releases as the index lists
them, or days): the ends first, then the middle point, judged against the good end and the bad end with the
sweep report's verdicts (fwbench_aggregator.sweep.judge). A judgement that is inconclusive adds repeats (to the
middle point and both ends) until it decides, or the cap is reached: it looks at most L times (3, 6 and 9
repeats by default), and every test at every look is made at alpha / L (Bonferroni over the planned looks, as
verify does), so an unchanged cell is said to have changed at most alpha of the time however many looks it
took. A middle point still inconclusive at the cap goes to the end whose median it is nearer (in log ms/step),
marked as placed without a test; the outcome then names the pair that tests alone support beside the one that
placement gives. A middle point that cannot be measured is dropped from the list and the search goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from fwbench.core import results
from fwbench.core.spec import CellSpec
from fwbench.core.sweep import SweepPoint
from fwbench.engines.slots import one_cell_at_a_time

FAILED_POINT = "SweepPointUnavailable"
MISMATCH = "SweepVersionMismatch"


def point_failure_rows(specs: list[CellSpec], out: Path, error_type: str, message: str, *, resume: bool = False,
                       replace_ok: bool = False) -> list[dict]:
    """One error row per planned cell of a point that cannot be measured. With resume, a cell-repeat that has an ok
    row at the point keeps it (and it is returned); an error row never replaces an ok row unless replace_ok
    (`--no-resume`): it goes beside it (results.target_path)."""
    from fwbench.harness.cell import base_record

    rows = []
    for spec in specs:
        kept = results.matching_ok_row(spec, out) if resume else None
        if kept is not None:
            rows.append(kept[1])
            continue
        record = base_record(spec)
        record.update(status="error", error_type=error_type, error_message=message, sweep_point=spec.sweep_point)
        path = results.write_new_row(spec, out, record, replace_ok=replace_ok)
        rows.append(results.read_row(path))
    return rows


def run_point(specs: list[CellSpec], point: SweepPoint, out: Path, pin_set: str, device: str,
              *, progress_for: Callable[[str], object] | None = None, on_start=lambda spec: None,
              on_done=lambda result: None, resume: bool = False, replace_ok: bool = False) -> list[dict]:
    """Every planned cell at `point` (device: 'cpu' or 'gpu', resolved). Returns the rows written (or kept by
    resume). `progress_for(label)` gives a context manager yielding a build-progress callback. replace_ok: a row
    that is not ok may replace an ok row of its cell-repeat (`--no-resume`; else it goes beside it)."""
    import contextlib

    from fwbench.engines import matrix
    from fwbench.engines.local import PointUnavailable, StackEnvironment, local_engine, local_variant

    engine = local_engine(pin_set, device=device, point=point)
    variant, _ = local_variant(device)
    device_model = engine.device_model(None)
    specs = [replace(spec, sweep_point=point.label, engine=engine.name, pin_set=pin_set,
                     image_variant=engine.image_variant(spec.stack), device_model=device_model,
                     device=engine.device) for spec in specs]
    broken: dict[str, tuple[str, str]] = {}
    for stack in dict.fromkeys(spec.stack for spec in specs):
        status = progress_for(f"preparing {stack} at {point.label}") if progress_for else contextlib.nullcontext(None)
        try:
            with status as report:
                engine.prepare(stack, report)
        except PointUnavailable as exc:
            broken[stack] = (FAILED_POINT, f"{point.label}: {exc.reason}")
            continue
        mismatch = StackEnvironment(stack, pin_set, variant=variant, point=point).sweep_record().get("mismatch")
        if mismatch:
            broken[stack] = (MISMATCH, mismatch)
    rows = []
    for stack, (error_type, message) in broken.items():
        rows += point_failure_rows([s for s in specs if s.stack == stack], out, error_type, message, resume=resume,
                                   replace_ok=replace_ok)
    runnable = [spec for spec in specs if spec.stack not in broken]
    if runnable:
        matrix.ensure_data(runnable)
        # One cell at a time, on its own GPU(s) only: never every GPU of the host (as `run` and verify give them).
        cell_slots = one_cell_at_a_time(engine.device, max(spec.devices for spec in runnable))
        for result in matrix.run_matrix(runnable, out, engine, resume, on_start, on_done=on_done, slots=cell_slots,
                                        replace_ok=replace_ok):
            rows.append(result.row)
    return rows


# --- bisect -----------------------------------------------------------------------------------------------------

DEFAULT_ALPHA = 0.05  # the chance, over all its looks, that a bisect of an unchanged cell says "changed"
ADD_REPEATS = 3


def bisect_looks(repeats: int, max_repeats: int, add_repeats: int = ADD_REPEATS) -> list[int]:
    """The repeat counts at which a judgement may look: `repeats`, then `add_repeats` more each time, up to
    `max_repeats` (3, 6, 9 by default). Its length is L, the looks a judgement may take."""
    if max_repeats <= repeats:
        return [repeats]
    return list(range(repeats, max_repeats, add_repeats)) + [max_repeats]


def look_level(alpha: float, looks: list[int]) -> float:
    """The level of each test at each look: alpha split evenly over the L planned looks (Bonferroni), so a
    judgement that looks up to L times errs at most alpha in all, however many looks it took."""
    return alpha / len(looks)


@dataclass
class Tested:
    label: str
    repeats: int = 0
    usable: bool = True
    note: str = ""
    untested: bool = False  # a middle point placed by its nearer median, without a test


@dataclass
class BisectResult:
    outcome: str  # found | no-change | inconclusive | failed
    good: str | None = None  # the bracketing pair: the last point like the good end, the first like the bad end
    bad: str | None = None
    direction: str | None = None  # slower | faster (bad against good)
    decisions: list[str] = field(default_factory=list)  # one line per judgement, in order
    tested: dict[str, Tested] = field(default_factory=dict)  # label -> what was measured, in order
    looks: list[int] = field(default_factory=list)  # the repeat counts a judgement may look at
    alpha: float = DEFAULT_ALPHA
    # The pair that tests alone support: as good/bad, except where a middle point was placed without a test (the
    # change may then lie on the far side of that point).
    test_good: str | None = None
    test_bad: str | None = None

    @property
    def environments(self) -> int:
        return len(self.tested)

    @property
    def level(self) -> float:
        return look_level(self.alpha, self.looks) if self.looks else self.alpha

    @property
    def untested(self) -> list[str]:
        """Middle points placed without a test (inconclusive at the cap: put with the end whose median is nearer)."""
        return [label for label, tested in self.tested.items() if tested.untested]


def bisect(points: list[str], measure: Callable[[str, int], None], judge: Callable[[str, str, float], object],
           median_of: Callable[[str], float | None], repeats: int = 3, *, max_repeats: int = 9,
           add_repeats: int = ADD_REPEATS, alpha: float = DEFAULT_ALPHA) -> BisectResult:
    """Binary search over `points` (labels; points[0] the good end, points[-1] the bad one).

    measure(label, n): make sure `n` repeats of the point are on disk (ok or not).
    judge(a, b, level): the sweep verdict of b against a at that level (fwbench_aggregator.sweep.StepVerdict; every
    test in it at `level`). median_of(label): the point's median ms/step (None: no ok rows).

    Every judgement (the ends', and each middle point's) looks at most L = len(bisect_looks(...)) times, each at
    alpha / L: so an unchanged cell is said to have changed at most alpha of the time, over all the looks."""
    looks = bisect_looks(repeats, max_repeats, add_repeats)
    level = look_level(alpha, looks)
    result = BisectResult("inconclusive", looks=looks, alpha=alpha)
    points = list(points)

    def ensure(label: str, n: int) -> bool:
        tested = result.tested.setdefault(label, Tested(label))
        if n > tested.repeats:
            measure(label, n)
            tested.repeats = n
        tested.usable = median_of(label) is not None
        return tested.usable

    good, bad = points[0], points[-1]
    for end in (good, bad):
        if not ensure(end, repeats):
            result.outcome = "failed"
            result.decisions.append(f"{end}: no ok rows (see its rows' error): cannot bisect from it")
            return result
    for n in looks:
        ensure(good, n)
        ensure(bad, n)
        verdict = judge(good, bad, level)
        result.decisions.append(f"{good} → {bad} at {n} repeats: {verdict.text()}")
        if verdict.changed:
            result.direction = verdict.verdict
            break
        if verdict.verdict == "equivalent":
            result.outcome = "no-change"
            return result
    else:
        result.decisions.append(f"still inconclusive at the cap of {max_repeats} repeats: no bisect")
        return result
    lo, hi = 0, len(points) - 1
    test_lo, test_hi = lo, hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        label = points[mid]
        if not ensure(label, repeats):
            result.tested[label].note = "no ok rows: left out of the search"
            result.decisions.append(f"{label}: no ok rows (its rows say why); left out")
            points.pop(mid)
            hi -= 1
            test_hi -= 1  # it is above mid, whose point is gone
            continue
        side, by_test = _place(label, good, bad, result, looks, level, ensure, judge, median_of, max_repeats)
        if side == "bad":
            hi = mid
            test_hi = mid if by_test else test_hi
        else:
            lo = mid
            test_lo = mid if by_test else test_lo
    result.outcome, result.good, result.bad = "found", points[lo], points[hi]
    result.test_good, result.test_bad = points[test_lo], points[test_hi]
    return result


def _place(label, good, bad, result, looks, level, ensure, judge, median_of, max_repeats) -> tuple[str, bool]:
    """Which end a middle point is like ("good" or "bad"), and whether a test said so."""
    for n in looks:
        for point in (label, good, bad):
            ensure(point, n)
        from_good, to_bad = judge(good, label, level), judge(label, bad, level)
        said = f"{label} at {n} repeats: against {good} {from_good.text()}; against {bad} {to_bad.text()}"
        if from_good.verdict == result.direction:
            result.decisions.append(said + " → like the bad end")
            return "bad", True
        if from_good.verdict == "equivalent" or to_bad.verdict == result.direction:
            result.decisions.append(said + " → like the good end")
            return "good", True
        result.decisions.append(said + ("; inconclusive" if n < looks[-1] else ""))
    side = _nearer(median_of(label), median_of(good), median_of(bad))
    result.decisions.append(f"{label}: still inconclusive at the cap of {max_repeats} repeats: placed with the {side} "
                            f"end, whose median is nearer, WITHOUT A TEST")
    tested = result.tested[label]
    tested.untested = True
    tested.note = f"placed with the {side} end without a test: inconclusive at {max_repeats} repeats, median nearer"
    return side, False


def _nearer(value: float, good: float, bad: float) -> str:
    return "good" if abs(math.log(value) - math.log(good)) <= abs(math.log(value) - math.log(bad)) else "bad"


def summary(result: BisectResult, tolerance_pct: float) -> list[str]:
    """The outcome in plain lines (the terminal and the bisect report): only what the tests support, and what
    rests on a placement without a test said apart."""
    levels = (f"each test at alpha {result.alpha:g} / {len(result.looks)} look(s) = {result.level:.3g} (looks at "
              f"{', '.join(map(str, result.looks))} repeats; Bonferroni: a bisect of an unchanged cell says "
              f"'changed' at most {result.alpha:g} of the time)")
    if result.outcome == "found":
        lines = [f"changed ({result.direction}) between {result.test_good} and {result.test_bad}: by tests, "
                 f"{result.test_bad} is {result.direction} than the good end by more than {tolerance_pct:g}% and "
                 f"{result.test_good} is like the good end"]
        if result.untested:
            lines.append(f"NOT BY A TEST: {', '.join(result.untested)} placed by the nearer median (inconclusive at "
                         f"the repeat cap); with that placement the change is between {result.good} and "
                         f"{result.bad}")
        return lines + [levels]
    if result.outcome == "no-change":
        return [f"no change beyond {tolerance_pct:g}% between the ends (equivalent, by a test): nothing to bisect",
                levels]
    if result.outcome == "failed":
        return ["bisect failed: an end could not be measured"]
    return ["inconclusive: the ends could not be told apart at the repeat cap", levels]
