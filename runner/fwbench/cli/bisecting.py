"""One cell's bisect over sweep points, run for real: what `fwbench bisect` and `fwbench watch` share (the search is
fwbench_aggregator.bisect's, the judging fwbench_aggregator.sweep's)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from fwbench.cli.common import console, result_line
from fwbench.cli.options import MatrixOptions
from fwbench.core import sweep as points_core
from fwbench.core.identity import CellIdentity
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError


def check_bisect_settings(repeats: int, max_repeats: int, tolerance: float) -> None:
    """A bisect's repeats, cap and tolerance, checked before anything runs (UsageError: one line)."""
    if repeats < 3:
        raise UsageError(f"--repeats must be at least 3 (a verdict needs 3 repeats a point), got {repeats}")
    if max_repeats < repeats:
        raise UsageError(f"--max-repeats ({max_repeats}) is below --repeats ({repeats})")
    if not tolerance > 0:
        raise UsageError(f"--tolerance must be more than 0, got {tolerance:g}")


@dataclass
class Releases:
    """A package's releases, oldest first, that this Python can install, and those the index lists that it cannot."""
    listed: list[str]
    other_python: dict[str, str]  # release -> its requires-python
    python: str  # "Python 3.11.7": the interpreter the stacks' environments are made with (fwbench's own)

    def left_out_note(self, releases: Optional[list[str]] = None) -> str:
        """One line naming the releases left out (of `releases`, default all) as this Python cannot install them;
        "" when none."""
        left = [v for v in self.other_python if releases is None or v in releases]
        if not left:
            return ""
        return (f"{len(left)} release(s) left out that {self.python} (the environments') cannot install, the "
                f"newest {left[-1]} (requires-python {self.other_python[left[-1]]})")


def installable_releases(package: str, versions: Optional[str]) -> Releases:
    """The package's releases (`--versions` as given, else the index's final releases): a release none of whose files
    installs on this Python (the stacks' environments are made with it) is set apart, since measuring it can only
    give an error row. UsageError: the name is not a package name, or the index cannot list it."""
    import platform

    python = f"Python {platform.python_version()}"
    try:
        points_core.package_point(package, "0")  # the name, checked before the index is asked
        if versions:
            return Releases(points_core.listed_releases(package, versions), {}, python)
        listed, other_python = points_core.releases_for_python(points_core.fetch_simple_json(package),
                                                                platform.python_version())
    except points_core.SweepError as exc:
        raise UsageError(str(exc)) from None
    return Releases(listed, other_python, python)


@dataclass
class Bisected:
    result: object  # fwbench_aggregator.bisect.BisectResult
    cell: CellIdentity | None  # the cell bisected (sweep point blanked); None when no row was written


def bisect_cell(options: MatrixOptions, base: CellSpec, labels: list[str], out: Path, *, pin_set: str, device: str,
                tolerance: float, max_repeats: int, progress_for=None) -> Bisected:
    """Bisect one cell (options plan exactly one) over `labels` (good end first), every tested point measured into
    `out` (resumed: rows already there count), options.repeats processes a point, up to max_repeats."""
    from fwbench.engines.sweep import run_point
    from fwbench_aggregator import loading
    from fwbench_aggregator import sweep as report_sweep
    from fwbench_aggregator.bisect import bisect

    # The one cell this bisect is about, from the rows its first point gave: `out` may also hold other cells' rows
    # (an earlier sweep's), and a verdict or a median of theirs must never stand in for this cell's.
    asked: dict[str, CellIdentity] = {}

    def measure(label: str, n: int) -> None:
        specs = replace(options, repeats=n).plan(base)
        rows = run_point(specs, points_core.parse_label(label), out, pin_set, device, progress_for=progress_for,
                         resume=True, on_done=lambda result: console.print(result_line(result)))
        for row in sorted((r for r in rows if r), key=lambda r: r["status"] != "ok"):
            asked.setdefault("cell", report_sweep.cell_of(CellIdentity.of_row(row)))

    def this_cell():
        loaded = loading.load_results([out])
        return report_sweep.rows_of_cell(loaded, asked["cell"]) if "cell" in asked else None

    def judge(a: str, b: str, level: float):
        loaded = this_cell()
        verdicts = [] if loaded is None else report_sweep.judge(
            report_sweep.rows_at(loaded, a), report_sweep.rows_at(loaded, b), tolerance, level)
        return verdicts[0] if verdicts else report_sweep.StepVerdict(
            None, a, b, None, None, None, report_sweep.INCONCLUSIVE, "no ok rows on one side", "", tolerance)

    def median_of(label: str):
        loaded = this_cell()
        for cell in ([] if loaded is None else report_sweep.cell_sweeps(loaded, tolerance)):
            for point in cell.points:
                if point.label == label and point.estimate is not None:
                    return point.estimate.median
        return None

    result = bisect(labels, measure, judge, median_of, options.repeats, max_repeats=max_repeats)
    return Bisected(result, asked.get("cell"))
