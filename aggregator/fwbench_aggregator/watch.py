"""What `fwbench watch` concludes from the results history: for each watched cell, its series over the versions of
one package, the step from the point before each newly measured version to it, the series' change points, and the
pairs of versions between which a change calls for a bisect. Every verdict is the judge's (judge.steps_between for a
new point's step, judge.change_points for the series); this module gathers rows and words the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fwbench.core import sweep as sweeps_core
from fwbench.core.identity import CellIdentity

from fwbench_aggregator import history_series, judge


@dataclass
class NewStep:
    """A newly measured version against the deciding point before it in the series."""

    before: str | None  # None: no earlier point decides (the series starts here)
    after: str
    step: judge.Step | None  # None when there is no point before it
    busy: int = 0  # busy processes left out at `after`
    environment: str = ""  # both points' (a version measured in several environments is judged in each)


@dataclass
class Bracket:
    """Two measured versions with a change between them, and why the watch thinks so."""

    before: str
    after: str
    why: str  # "step" (a new point's step) or "change point" (the series')
    between: list[str] = field(default_factory=list)  # releases not measured between them (empty: pinpointed)


@dataclass
class CellWatch:
    identity: CellIdentity
    series: history_series.Series | None  # None: the store holds no row of the cell
    new: list[str]
    steps: list[NewStep]
    brackets: list[Bracket]

    @property
    def label(self) -> str:
        return self.series.label if self.series is not None else self.identity.cell_key

    @property
    def changed(self) -> bool:
        return bool(self.brackets)

    def bracket(self, before: str, after: str, why: str) -> None:
        """A change between two measured versions, once however many steps or change points show it."""
        if not any((b.before, b.after) == (before, after) for b in self.brackets):
            self.brackets.append(Bracket(before, after, why))


def series_by_identity(frame, package: str) -> dict[CellIdentity, history_series.Series]:
    """The store's rows `frame` (None: an empty store) as series over the versions of `package`, by series identity
    (history_series.series_identity: a watch's rows at each version are points of their cell's one series)."""
    if frame is None or not len(frame):
        return {}
    return {series.identity: series
            for series in history_series.build(frame, f"{history_series.VERSION_PREFIX}{package}")}


def measured_versions(series: history_series.Series | None) -> set[str]:
    """The versions at which a series has a point that decides (at least the judge's minimum of quiet processes): a
    watch measures only the others."""
    return {point.at for point in series.points if point.decides} if series is not None else set()


def assess(known: dict[CellIdentity, history_series.Series], cells: list[CellIdentity], new_versions: list[str],
           releases: list[str], tolerance_pct: float) -> list[CellWatch]:
    """Each watched cell (a series identity: history_series.series_identity) in the store's series `known`
    (series_by_identity): the steps of its newly measured versions, judged together (Holm over them), and the
    brackets to bisect."""
    found = []
    pending: list[tuple[CellWatch, NewStep, list[float], list[float]]] = []
    for identity in cells:
        series = known.get(identity)
        watch = CellWatch(identity, series, list(new_versions), [], [])
        found.append(watch)
        if series is None:
            continue
        deciding = [p for p in series.points if p.decides]
        for version in new_versions:
            # Like with like: each of the version's points (one per environment: other libraries' versions, the
            # compile cache) against the deciding point before it in the same environment, never another's.
            for point in [p for p in series.points if p.at == version]:
                before = _point_before([p for p in deciding if p.environment == point.environment], version)
                if before is None:
                    watch.steps.append(NewStep(None, version, None, point.busy, point.environment))
                    continue
                new_step = NewStep(before.at, version, None, point.busy, point.environment)
                watch.steps.append(new_step)
                pending.append((watch, new_step, before.process_medians, point.process_medians))
    judged = judge.steps_between([(a, b) for _, _, a, b in pending], tolerance_pct=tolerance_pct)
    for (watch, new_step, _, _), step in zip(pending, judged):
        new_step.step = step
        if step.changed:
            watch.bracket(new_step.before, new_step.after, "step")
    for watch in found:
        if watch.series is None:
            continue
        for point, _change in watch.series.changes:
            watch.bracket(watch.series.deciding_before(point).at, point.at, "change point")
        for bracket in watch.brackets:
            bracket.between = releases_between(releases, bracket.before, bracket.after)
    return found


def releases_between(releases: list[str], before: str, after: str) -> list[str]:
    """The listed releases strictly between two versions (PEP 440 order): those a bisect would test. An end the
    listing lacks (a version only the store knows) is added to it, so the bracket still has its two ends."""
    try:
        return sweeps_core.versions_between([*releases, before, after], before, after)[1:-1]
    except sweeps_core.SweepError:
        return []


def lines(watches: list[CellWatch], package: str, tolerance_pct: float) -> list[str]:
    """What the watch prints and writes: per cell its points, each new version's step and the brackets."""
    out = []
    for watch in watches:
        out.append(f"{watch.label}:")
        if watch.series is None:
            out.append("  no rows in the history store")
            continue
        for point in watch.series.points:
            value = "busy only" if point.median_ms is None else f"{point.median_ms:.3f} ms/step"
            where = f" ({point.environment})" if point.environment else ""
            mark = where + (" (new)" if point.at in watch.new else "")
            note = "" if point.decides or not point.rows else f", fewer than {judge.MIN_REPEATS}: decides nothing"
            out.append(f"  {package} {point.at}{mark}: {value}, {point.processes} process(es), "
                       f"{point.busy} busy left out{note}")
        if watch.series.left_out:
            out.append(f"  {watch.series.left_out} ok row(s) record no version of {package}: left out")
        for new_step in watch.steps:
            out.append("  " + step_line(new_step, package, tolerance_pct))
        for point, change in watch.series.changes:
            where = f" ({point.environment})" if point.environment else ""
            out.append(f"  change point at {package} {point.at}{where}: x{change.ratio:.3f}, {change.word}")
        for bracket in watch.brackets:
            if bracket.between:
                out.append(f"  to bisect: {package} {bracket.before} .. {bracket.after} ({len(bracket.between)} "
                           f"release(s) between, from the {bracket.why})")
            else:
                out.append(f"  the change is at {package} {bracket.after}: no release between {bracket.before} and "
                           f"{bracket.after} (from the {bracket.why})")
    return out


def step_line(new_step: NewStep, package: str, tolerance_pct: float) -> str:
    where = f" ({new_step.environment})" if new_step.environment else ""
    if new_step.step is None:
        return (f"{package} {new_step.after}{where}: no earlier point that decides"
                f"{' in the same environment' if where else ''}, nothing to compare with")
    step = new_step.step
    busy = f"; {new_step.busy} busy process(es) left out" if new_step.busy else ""
    words = (judge.interval_words(step.ratio, step.low, step.high, tolerance_pct) if step.ratio is not None
             else step.detail)
    return (f"{package} {new_step.before} -> {new_step.after}{where}: {step.verdict} ({words}; {step.detail})"
            f"{busy}")


def write_summary(path: Path, heading: list[str], body: list[str], outcomes: list[str]) -> Path:
    """The watch's markdown summary, written atomically."""
    from fwbench.core.atomic import write_atomically

    text = ["# fwbench watch", "", *[f"{line}  " for line in heading], "", "```", *body, "```", ""]
    if outcomes:
        text += ["## Bisects", "", *[f"- {line}" for line in outcomes], ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, "\n".join(text))
    return path


def _point_before(deciding: list[history_series.Point], version: str) -> history_series.Point | None:
    """The last deciding point at a version below `version`."""
    earlier = [p for p in deciding if history_series.version_order(p.at) < history_series.version_order(version)]
    return earlier[-1] if earlier else None
