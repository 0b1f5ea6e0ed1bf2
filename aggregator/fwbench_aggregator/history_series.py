"""Series of the results history (`fwbench history show`): each cell identity's points over date or over the version
of a package, and the changes the judge finds in them.

A point is the rows of one cell identity at one date (UTC day of started_at) or one version of the package, in one
environment: rows that mix environments (judge.environment_parts: library versions, the compile cache's state) are
split into points of their own, never pooled. A point's value is the median of its quiet processes' medians
(judge.quiet: busy rows are counted and left out, never used); a point with only busy rows is shown and decides
nothing, as is one with fewer quiet processes than the judge needs (judge.decides_change). The judge finds the
changes (judge.change_points) in the points that decide, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from packaging.version import InvalidVersion, Version

from fwbench.core import sweep as sweeps_core
from fwbench.core.identity import SECTION_AXES, CellIdentity, describe, differing_settings, held_equal, varying_settings
from fwbench.core.results import started_utc

from fwbench_aggregator import judge, stats

BY_DATE = "date"
VERSION_PREFIX = "version:"


class SeriesError(ValueError):
    """A --by that names no axis of a series."""


def parse_by(by: str) -> str | None:
    """`date` -> None; `version:PACKAGE` -> the package (SeriesError otherwise)."""
    if by == BY_DATE:
        return None
    if by.startswith(VERSION_PREFIX) and by[len(VERSION_PREFIX):].strip():
        return by[len(VERSION_PREFIX):].strip()
    raise SeriesError(f"--by must be 'date' or 'version:PACKAGE' (e.g. version:torch), got '{by}'")


@dataclass
class Point:
    at: str  # the date (YYYY-MM-DD) or the package's version
    rows: list[dict]  # its quiet ok rows (one environment)
    busy: int  # busy ok rows left out
    environment: str = ""  # the facts that differ between the series' points (set by series_of)
    track: int | None = None  # its environment's track (judge.environment_tracks; None: busy only)

    @property
    def processes(self) -> int:
        return len(self.rows)

    @cached_property
    def process_medians(self) -> list[float]:
        """Each quiet process's median ms/step."""
        return [stats.median(stats.repeat_samples(_steps(row), row["ms_per_step"])) for row in self.rows]

    @cached_property
    def median_ms(self) -> float | None:
        """The median of its processes' median ms/step (None: only busy rows)."""
        return stats.median(self.process_medians) if self.rows else None

    @property
    def decides(self) -> bool:
        return bool(self.rows) and judge.decides_change(self.processes)

    @property
    def first_started(self) -> float:
        times = [started_utc(row.get("started_at")) for row in self.rows]
        return min((t.timestamp() for t in times if t is not None), default=0.0)


@dataclass
class Series:
    identity: CellIdentity
    label: str
    points: list[Point]
    left_out: int = 0  # ok rows with no value on the axis (--by version: rows that do not record the package)
    changes: list[tuple[Point, judge.ChangePoint]] = field(default_factory=list)

    @property
    def tracks(self) -> int:
        """How many tracks its points are on: more than one where environments were measured side by side."""
        return len({p.track for p in self.points if p.track is not None})

    def deciding_before(self, point: Point) -> Point | None:
        """The deciding point before `point` on its track: the other side of a change found at `point`."""
        track = [p for p in self.points if p.decides and p.track == point.track]
        index = track.index(point)
        return track[index - 1] if index > 0 else None


def build(frame, by: str) -> list[Series]:
    """Every cell identity's series in the rows of `frame` (ok or not; only ok rows make points)."""
    package = parse_by(by)
    records = frame.to_dict("records") if len(frame) else []
    by_identity: dict[CellIdentity, list[dict]] = {}
    for row in records:
        by_identity.setdefault(series_identity(CellIdentity.of_row(row), package), []).append(row)
    varying = varying_settings(by_identity)
    found = []
    for identity in sorted(by_identity, key=lambda i: (i.cell_key, i.settings_id)):
        settings = describe(differing_settings(identity, varying))
        label = f"{identity.cell_key}{f' [{settings}]' if settings else ''} (settings {identity.settings_id})"
        found.append(series_of(identity, label, by_identity[identity], package))
    return found


def series_identity(identity: CellIdentity, package: str | None) -> CellIdentity:
    """The series a row's identity belongs to. By version of a package, the rows a sweep (or watch) measured at a
    version of that package (sweep point `PACKAGE==V`) belong to the series of the cell they were swept from: that
    version is the series' axis (and the rows' library versions say it), not another cell; so do those at a point of
    a member of its family (a jax point in a series over jaxlib: it moved jaxlib with it, axis_names)."""
    if package is None:
        return identity
    try:
        point = sweeps_core.parse_label(identity.setting("sweep_point"))
    except sweeps_core.SweepError:
        return identity
    if point is not None and not point.is_date and point.package in axis_names(package):
        return held_equal(identity, SECTION_AXES["sweep"])
    return identity


def series_of(identity: CellIdentity, label: str, rows: list[dict], package: str | None) -> Series:
    """One identity's points in order, each environment its own point, and the judge's changes."""
    import pandas as pd

    ok = [row for row in rows if row.get("status") == "ok"]
    at_of = {id(row): _axis_value(row, package) for row in ok}
    left_out = sum(1 for value in at_of.values() if value is None)
    groups: dict[str, list[dict]] = {}
    for row in ok:
        if at_of[id(row)] is not None:
            groups.setdefault(at_of[id(row)], []).append(row)
    points = []
    for at, members in groups.items():
        quiet, busy = judge.quiet(pd.DataFrame(members))
        quiet_rows = quiet.to_dict("records")
        if not quiet_rows:
            points.append(Point(at, [], busy))
            continue
        for number, (_, indices) in enumerate(judge.environment_parts(quiet_rows)):
            # The busy rows are counted once, with the point's first environment.
            points.append(Point(at, [quiet_rows[i] for i in indices], busy if number == 0 else 0))
    points.sort(key=lambda p: (_order(p.at, package), p.first_started))
    _label_environments(points, package)
    _put_on_tracks(points, package)
    series = Series(identity, label, points, left_out)
    for track in range(series.tracks):
        deciding = [p for p in points if p.decides and p.track == track]
        series.changes += [(deciding[c.index], c) for c in judge.change_points([p.median_ms for p in deciding])]
    order = {id(p): number for number, p in enumerate(points)}
    series.changes.sort(key=lambda found: order[id(found[0])])
    return series


def _put_on_tracks(points: list[Point], package: str | None) -> None:
    """Each point's track (judge.environment_tracks), by its environment but the axis (axis_names) and its place on
    the axis; a busy-only point is on none."""
    with_rows = [p for p in points if p.rows]
    positions = {at: number for number, at in enumerate(dict.fromkeys(p.at for p in points))}
    axis = axis_names(package)
    keys = [tuple(fact for fact in judge.environment_key(p.rows[0]) if fact[0] not in axis) for p in with_rows]
    for point, track in zip(with_rows, judge.environment_tracks([(key, positions[p.at])
                                                                 for key, p in zip(keys, with_rows)])):
        point.track = track


def axis_names(package: str | None) -> set[str]:
    """The library versions a series over `package` counts as its axis, not its environment: the package and the
    family a point of it moves with it (sweeps_core.moves_with: jaxlib with jax); none for a series over dates."""
    if package is None:
        return set()
    return {package, sweeps_core.normalise(package), *sweeps_core.moves_with(package)}


def _steps(row: dict):
    """A row's step_ms as read through pandas: a sequence, or None where it is missing (None or NaN)."""
    steps = row.get("step_ms")
    return steps if hasattr(steps, "__len__") else None


def _axis_value(row: dict, package: str | None) -> str | None:
    if package is None:
        started = started_utc(row.get("started_at"))
        return None if started is None else started.date().isoformat()
    recorded = dict(judge.environment_key(row)).get(package)
    return recorded if recorded is not None else _swept_version(row, package)


def _swept_version(row: dict, package: str) -> str | None:
    """The version of `package` a sweep (or watch) installed for the row (`sweep_installed`: the point, then the family
    it moved, "jax==0.10.1; jaxlib==0.10.1"; else its sweep point), for a package its library versions do not track
    (e.g. tqdm); None: the row is not at a point of it."""
    installed = row.get("sweep_installed")
    if isinstance(installed, str):
        found = sweeps_core.installed_versions(installed)
        if sweeps_core.normalise(package) in found:
            return found[sweeps_core.normalise(package)]
    try:
        point = sweeps_core.parse_label(row.get("sweep_point") if isinstance(row.get("sweep_point"), str) else None)
    except sweeps_core.SweepError:
        return None
    if point is not None and not point.is_date and point.package == sweeps_core.normalise(package):
        return point.version
    return None


def version_order(version: str) -> tuple:
    """A sort key of versions: PEP 440 order, any text it cannot read after every version it can."""
    return _order(version, "")



def _order(at: str, package: str | None) -> tuple:
    if package is None:
        return (at,)
    try:
        return (0, Version(at), at)
    except InvalidVersion:
        return (1, at, at)  # after every version it can read


def _label_environments(points: list[Point], package: str | None) -> None:
    """Each point's environment facts that differ between the series' points (but the axis: axis_names)."""
    keys = [dict(judge.environment_key(p.rows[0])) if p.rows else None for p in points]
    known = [key for key in keys if key is not None]
    axis = axis_names(package)
    names = sorted({name for key in known for name in key if name not in axis
                    and len({k.get(name) for k in known}) > 1})
    for point, key in zip(points, keys):
        if key is not None:
            point.environment = ", ".join(f"{name} {key.get(name, 'not recorded')}" for name in names)


def lines(series: list[Series], by: str) -> list[str]:
    """What `fwbench history show` prints: per series its points, then its changes or that there are none."""
    axis = "date" if parse_by(by) is None else parse_by(by)
    out = []
    for s in series:
        out.append(f"{s.label}, by {axis}:")
        width = max([len(axis), *(len(p.at) for p in s.points)])
        env_width = max([len("environment"), *(len(p.environment) for p in s.points)])
        out.append(f"  {axis:<{width}}  {'environment':<{env_width}}  {'ms/step':>10}  {'processes':>9}  busy left out")
        for p in s.points:
            value = "busy only" if p.median_ms is None else f"{p.median_ms:.3f}"
            note = "" if p.decides or not p.rows else f"  (fewer than {judge.MIN_REPEATS}: decides nothing)"
            out.append(f"  {p.at:<{width}}  {p.environment or '-':<{env_width}}  {value:>10}  {p.processes:>9}  "
                       f"{p.busy:>13}{note}")
        if s.left_out:
            out.append(f"  {s.left_out} ok row(s) do not record {axis}: left out")
        for point, change in s.changes:
            where = f"{point.at}" + (f" ({point.environment})" if point.environment else "")
            out.append(f"  change at {where}: x{change.ratio:.3f}, {change.word}")
        if s.tracks > 1:
            out.append(f"  {tracks_text(s)}")
        if not s.changes:
            out.append(f"  {no_change_text(s)}")
    return out


def tracks_text(series: Series) -> str:
    """What a series says when its environments were measured side by side (judge.environment_tracks)."""
    return (f"{series.tracks} environments measured side by side: each one's points are judged apart, never "
            f"interleaved")


def no_change_text(series: Series) -> str:
    """What a series without a change says: how many points decided, and when too few could show one."""
    deciding = sum(1 for p in series.points if p.decides)
    longest = max([sum(1 for p in series.points if p.decides and p.track == track) for track in range(series.tracks)],
                  default=0)
    return (f"no change found in {deciding} point(s) that decide"
            + ("" if longest >= 2 * judge.CHANGE_MIN_POINTS else
               f" (a change needs {judge.CHANGE_MIN_POINTS} such points on each side"
               + (", in one environment's points)" if series.tracks > 1 else ")")))


def rule_line() -> str:
    """The judge's rule, said once under the series."""
    return (f"changes: ruptures PELT ({judge.CHANGE_COST}) on log ms/step of the points with at least "
            f"{judge.MIN_REPEATS} quiet processes, penalty {judge.CHANGE_PENALTY:g} x noise x ln(points), a change at "
            f"least {judge.CHANGE_MIN_STEP_PCT:g}% (docs/history.md)")
