"""Find where a cell changed (`fwbench bisect`): the search over version-sweep points and what it may say.

Bisect is a binary search over the points between a good and a bad one (a package's releases as the index lists
them, or days): the ends first, then middle points, each judged against the GOOD end only with the sweep report's
verdicts (fwbench_aggregator.sweep.judge, the judge's rule): changed from it (slower or faster beyond the tolerance,
by the verdict) puts the point on the bad side, whatever the bad end does (the first change is at or before it);
equivalent to it within the tolerance puts it on the good side. Judging against the bad end instead would place a
point between two steps with the good end and name the second step. A judgement that is inconclusive adds repeats
(to the middle point and the good end) until it decides, or the cap is reached: it looks at most L times (3, 6 and 9
repeats by default), and every test at every look is made at alpha / L (Bonferroni over the planned looks, as verify
does), so an unchanged cell is said to have changed at most alpha of the time however many looks it took. A middle
point still inconclusive at the cap is undecided: never placed without a test; the search stops there and the
outcome is "undecided": the first change is between the bracket's ends, not located in between. Once the search
stops, the bad end is judged against the bracket's bad point (when that is a middle point): a second change, if the
test shows one. A middle point that cannot be measured is dropped from the list and the search goes on.

Pure: `measure` (fwbench.engines.sweep.run_point, through the CLI) and `judge` are given to it; it decides nothing
from numbers itself (every ratio's words are fwbench_aggregator.judge.interval_words).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fwbench_aggregator.judge import interval_words

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
    note: str = ""  # a middle point: its side and how it was placed, or why it was left out
    against_good: object | None = None  # its last judgement against the good end (the bad end: the end check's)


@dataclass
class BisectResult:
    outcome: str  # found | undecided | no-change | inconclusive | failed
    # The bracket the tests give: the last point equivalent to the good end by a test (or the good end), and the
    # first changed from it by a test (or the bad end). Adjacent when found; undecided points between when not.
    good: str | None = None
    bad: str | None = None
    direction: str | None = None  # slower | faster (the bad end against the good end)
    decisions: list[str] = field(default_factory=list)  # one line per judgement, in order
    tested: dict[str, Tested] = field(default_factory=dict)  # label -> what was measured, in order
    looks: list[int] = field(default_factory=list)  # the repeat counts a judgement may look at
    alpha: float = DEFAULT_ALPHA
    undecided: list[str] = field(default_factory=list)  # the middle point inconclusive at the cap (the search stops)
    between: list[str] = field(default_factory=list)  # the candidates inside the bracket (none when found)
    again: object | None = None  # the bad end against `bad` where that is a middle point (a second change?)

    @property
    def environments(self) -> int:
        return len(self.tested)

    @property
    def level(self) -> float:
        return look_level(self.alpha, self.looks) if self.looks else self.alpha


def bisect(points: list[str], measure: Callable[[str, int], None], judge: Callable[[str, str, float], object],
           median_of: Callable[[str], float | None], repeats: int = 3, *, max_repeats: int = 9,
           add_repeats: int = ADD_REPEATS, alpha: float = DEFAULT_ALPHA) -> BisectResult:
    """Binary search over `points` (labels; points[0] the good end, points[-1] the bad one) for the first change.

    measure(label, n): make sure `n` repeats of the point are on disk (ok or not).
    judge(a, b, level): the sweep verdict of b against a at that level (fwbench_aggregator.sweep.StepVerdict; every
    test in it at `level`). median_of(label): the point's median ms/step (None: no ok rows, so not usable).

    Every judgement (the ends', and each middle point's against the good end) looks at most
    L = len(bisect_looks(...)) times, each at alpha / L: so an unchanged cell is said to have changed at most
    alpha of the time, over all the looks."""
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
        result.tested[bad].against_good = verdict
        result.decisions.append(f"{good} → {bad} at {n} repeats: {_described(verdict)}")
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
    while hi - lo > 1:
        mid = (lo + hi) // 2
        label = points[mid]
        if not ensure(label, repeats):
            result.tested[label].note = "no ok rows: left out of the search"
            result.decisions.append(f"{label}: no ok rows (its rows say why); left out")
            points.pop(mid)
            hi -= 1  # it is above mid, whose point is gone
            continue
        side = _place(label, good, result, looks, level, ensure=ensure, judge=judge)
        if side == "undecided":
            # The search stops: going on around it finds the first change more often at low noise, but measures
            # more environments and each further judgement is another chance of a false placement (docs/versions.md).
            result.undecided = [label]
            break
        if side == "bad":
            hi = mid
        else:
            lo = mid
    result.good, result.bad = points[lo], points[hi]
    result.between = points[lo + 1:hi]
    result.outcome = "undecided" if result.undecided else "found"
    if hi < len(points) - 1:
        # A second change shows as the bad end differing from the bracket's bad point (at the repeats both have:
        # a report, not a search).
        result.again = judge(result.bad, bad, level)
        n = min(result.tested[result.bad].repeats, result.tested[bad].repeats)
        result.decisions.append(f"{result.bad} → {bad} (the bad end) at {n} repeats: {_described(result.again)}")
    return result


def _place(label, good, result, looks, level, *, ensure, judge) -> str:
    """A middle point's side of the first change, by its test against the good end alone: "bad" (changed from
    it), "good" (equivalent to it), or "undecided" (inconclusive at the cap: no placement without a test)."""
    tested = result.tested[label]
    for n in looks:
        ensure(label, n)
        ensure(good, n)
        verdict = judge(good, label, level)
        tested.against_good = verdict
        said = f"{label} at {n} repeats against {good}: {_described(verdict)}"
        if verdict.changed:
            result.decisions.append(said + " → changed: on the bad side (the first change is at or before it)")
            tested.note = f"bad side by a test ({verdict.verdict} than the good end)"
            return "bad"
        if verdict.verdict == "equivalent":
            result.decisions.append(said + " → on the good side")
            tested.note = "good side by a test (equivalent to the good end)"
            return "good"
        result.decisions.append(said + ("; inconclusive: more repeats" if n < looks[-1] else ""))
    result.decisions.append(f"{label}: still inconclusive against the good end at the cap of {looks[-1]} repeats: "
                            f"undecided (not placed)")
    tested.note = f"undecided: inconclusive against the good end at {looks[-1]} repeats"
    return "undecided"


def _words(verdict, tolerance_pct: float | None = None) -> str:
    tolerance_pct = verdict.tolerance_pct if tolerance_pct is None else tolerance_pct
    return interval_words(verdict.ratio, verdict.low, verdict.high, tolerance_pct)


def _described(verdict) -> str:
    """A judgement's line: the sweep verdict (with its p-values), then the ratio and what its interval supports."""
    if verdict.ratio is None:
        return verdict.text()
    word = f"equivalent within {verdict.tolerance_pct:g}%" if verdict.verdict == "equivalent" else verdict.verdict
    return f"{word} ({verdict.detail}); {_words(verdict)}"


def summary(result: BisectResult, tolerance_pct: float) -> list[str]:
    """The outcome in plain lines (the terminal and the bisect report): only what the tests support, each change
    with its interval and what the interval supports."""
    levels = (f"each test at alpha {result.alpha:g} / {len(result.looks)} look(s) = {result.level:.3g} (looks at "
              f"{', '.join(map(str, result.looks))} repeats; Bonferroni: a bisect of an unchanged cell says "
              f"'changed' at most {result.alpha:g} of the time); intervals are 95%")
    if result.outcome in ("found", "undecided"):
        good_end = next(iter(result.tested))
        changed = result.tested[result.bad].against_good
        direction = changed.verdict if changed.changed else result.direction
        evidence = f"{result.bad} against the good end {good_end}: {_words(changed, tolerance_pct)}; "
        if result.good == good_end:
            evidence += f"{result.good} is the good end"
        else:
            like = result.tested[result.good].against_good
            evidence += (f"{result.good} equivalent to the good end within {tolerance_pct:g}%: "
                         f"{_words(like, tolerance_pct)}")
        if result.outcome == "found":
            lines = [f"changed ({direction}) between {result.good} and {result.bad}: by tests, {evidence}"]
        else:
            [label] = result.undecided
            untested = [point for point in result.between if point != label]
            lines = [f"first change ({direction}) between {result.good} and {result.bad}, undecided in between: "
                     f"{label} inconclusive against the good end at the cap of {result.looks[-1]} repeats "
                     f"({_words(result.tested[label].against_good, tolerance_pct)})"
                     + (f"; not tested: {', '.join(untested)}" if untested else ""),
                     f"by tests: {evidence}",
                     "the first change is not located: a larger --max-repeats (or --tolerance) may decide the points "
                     "in between"]
        lines += _again_lines(result, tolerance_pct)
        return lines + [levels]
    if result.outcome == "no-change":
        return [f"no change beyond {tolerance_pct:g}% between the ends (equivalent, by a test): nothing to bisect",
                levels]
    if result.outcome == "failed":
        return ["bisect failed: an end could not be measured"]
    return ["inconclusive: the ends could not be told apart at the repeat cap", levels]


def _again_lines(result: BisectResult, tolerance_pct: float) -> list[str]:
    again = result.again
    if again is None:
        return []
    bad_end = list(result.tested)[1]  # measured second
    words = _words(again, tolerance_pct) if again.ratio is not None else again.text()
    if again.changed:
        return [f"and again ({again.verdict}) between {result.bad} and {bad_end}: {bad_end} against {result.bad}: "
                f"{words} (two changes; the second is not searched)"]
    if again.verdict == "equivalent":
        return [f"{bad_end} is equivalent to {result.bad} within {tolerance_pct:g}% ({words}): no second change "
                f"beyond it"]
    return [f"a second change between {result.bad} and {bad_end} is not decided ({bad_end} against {result.bad}: "
            f"{words})"]
