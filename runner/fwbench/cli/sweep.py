"""`fwbench sweep` (cells at several versions of one package, or at several dates) and `fwbench bisect` (the first
release at which a cell changed). See fwbench.engines.sweep (the points), fwbench_aggregator.bisect (the search) and docs/versions.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from fwbench.cli.common import (RESUME_HELP, check_out_dir, console, default_data_dir, pin_set_or_default,
                                warn_if_busy)
from fwbench.cli.options import MatrixOptions, Override, matrix_options
from fwbench.core import sweep as points_core
from fwbench.core.usage import UsageError

TOLERANCE_HELP = ("A change smaller than this, in percent, is no change: steps within it can be 'equivalent', beyond "
                  "it 'faster'/'slower'.")
VARY_HELP = ("PACKAGE=V1,V2,...: one point per version, each the pin set's environment with that one package at that "
             "version (installed with --no-deps over the stack's lock; every other package as the lock has it: a "
             "small install per point).")
DATE_HELP = ("YYYY-MM-DD,...: one point per date, every package as the index had it at the end of that day (uv "
             "--exclude-newer: the index must serve upload times, as PyPI does). Each date re-resolves every package: "
             "a full environment per date (minutes and GBs for a torch stack).")


def _points(vary: Optional[str], vary_date: Optional[str]) -> list[points_core.SweepPoint]:
    try:
        if vary and vary_date:
            raise UsageError("give --vary or --vary-date, not both (a sweep varies one thing)")
        if vary:
            return points_core.parse_vary(vary)
        if vary_date:
            return points_core.parse_dates(vary_date)
    except points_core.SweepError as exc:
        raise UsageError(str(exc)) from None
    raise UsageError("a sweep needs --vary PACKAGE=V1,V2,... or --vary-date YYYY-MM-DD,...")


def _device(options: MatrixOptions) -> str:
    from fwbench.engines import device as devices

    return devices.resolve(options.device)


def _status():
    from fwbench.cli.build_status import build_status

    return lambda label: build_status(console, label)


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    @matrix_options(omit=("parallel",))
    def sweep_cmd(
        options: MatrixOptions,
        vary: Optional[str] = typer.Option(None, "--vary", help=VARY_HELP),
        vary_date: Optional[str] = typer.Option(None, "--vary-date", help=DATE_HELP),
        out: Path = typer.Option(..., "--out", "-o", help="Results directory; the sweep report goes to OUT/sweep-report."),
        tolerance: float = typer.Option(5.0, "--tolerance", help=TOLERANCE_HELP),
        resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help=RESUME_HELP + " (At each point.)",
                                              show_default=False),
        history: Optional[Path] = typer.Option(None, "--history", help="After the sweep, add its rows to this "
                                                                       "history store (docs/history.md); its earlier "
                                                                       "rows give the progress estimates."),
    ) -> None:
        """Run cells at several versions of one package (or dates), one environment per point, then print and
        write the sweep report (ms/step per point with intervals, a plot, a verdict per step)."""
        from fwbench.engines.sweep import run_point

        points = _points(vary, vary_date)
        if not tolerance > 0:
            raise UsageError(f"--tolerance must be more than 0, got {tolerance:g}")
        pin_set = pin_set_or_default(options.pin_set)
        device = _device(options)
        base = options.base_spec(data_dir=str((options.data or default_data_dir()).resolve()),
                                 threads=options.threads or os.cpu_count() or 1)
        specs = options.plan(base)
        check_out_dir(out)
        if history is not None:
            from fwbench.cli.history import check_store

            check_store(history)
        warn_if_busy()
        from fwbench.cli import progress as run_progress

        # Progress over every cell at every point (M = cells x points), each estimated as placed at its point.
        planned = [spec for point in points
                   for spec in run_progress.placed_for_sweep(specs, point.label, pin_set, device)]
        estimates = run_progress.estimates_never_failing(planned, run_progress.estimate_store(history))
        rows = []
        with run_progress.RunProgress(planned, estimates, console) as shown:
            for number, point in enumerate(points):
                shown.pause()  # the point's environments are prepared with a status line of their own
                console.print(f"[bold]point {escape(point.label)}[/] ({len(specs)} cells)", highlight=False)
                at_point = run_point(specs, point, out, pin_set, device, progress_for=_status(), resume=bool(resume),
                                     replace_ok=resume is False, on_start=shown.started, on_done=shown.finished)
                shown.settle(range(number * len(specs), (number + 1) * len(specs)))  # a point that could not run
                rows += at_point
                for row in at_point:
                    if row and row["status"] != "ok" and str(row.get("error_type", "")).startswith("Sweep"):
                        shown.pause()
                        console.print(f"[red]{row['status']}[/] {escape(row['cell_id'])} at {escape(point.label)}: "
                                      f"{escape(str(row.get('error_message')))}", highlight=False)
                        break
        report = print_sweep_report(out, tolerance)
        console.print(f"sweep report: {report}")
        if history is not None:
            from fwbench.cli.history import add_rows

            add_rows(history, [out])
        if any(row and row["status"] not in ("ok", "unsupported") for row in rows):
            raise typer.Exit(1)

    @app.command("bisect")
    @matrix_options(omit=("parallel",), task=Override(required=True, help="Task id (one)."),
                    repeats=Override(default=3, help="Repeats per tested point, at least 3 (a verdict needs them)."))
    def bisect_cmd(
        options: MatrixOptions,
        package: Optional[str] = typer.Option(None, "--package", help="The package whose releases are searched "
                                                                        "(leave out to bisect dates)."),
        good: str = typer.Option(..., "--good", help="A version (or, without --package, a date) where the cell is "
                                                    "as it was."),
        bad: str = typer.Option(..., "--bad", help="A version (or date) where it has changed."),
        out: Path = typer.Option(..., "--out", "-o", help="Results directory (rows of every tested point)."),
        tolerance: float = typer.Option(5.0, "--tolerance", help=TOLERANCE_HELP),
        max_repeats: int = typer.Option(9, "--max-repeats", help="Cap on repeats an inconclusive judgement adds "
                                                                  "up to, per point."),
        versions: Optional[str] = typer.Option(None, "--versions", help="V1,V2,...: search these versions instead "
                                                                         "of the index's list."),
    ) -> None:
        """Find the first release (or day) between --good and --bad at which a cell changed by more than the
        tolerance: a binary search, each tested point its own environment, 3+ repeats each."""
        from fwbench.cli.bisecting import bisect_cell, check_bisect_settings

        if len(options.stack or []) != 1 or len(options.task or []) != 1 or len(options.compile or [None]) != 1:
            raise UsageError("bisect takes one --stack, one --task and at most one --compile (one cell)")
        check_bisect_settings(options.repeats, max_repeats, tolerance)
        labels, left_out = candidate_points(package, good, bad, versions)
        console.print(f"{len(labels)} candidate points from {escape(labels[0])} to {escape(labels[-1])}; a binary "
                      f"search tests about {2 + max(0, len(labels) - 2).bit_length()} of them", highlight=False)
        if left_out:
            console.print(f"note: {escape(left_out)}", highlight=False)
        pin_set = pin_set_or_default(options.pin_set)
        device = _device(options)
        base = options.base_spec(data_dir=str((options.data or default_data_dir()).resolve()),
                                 threads=options.threads or os.cpu_count() or 1)
        check_out_dir(out)

        done = bisect_cell(options, base, labels, out, pin_set=pin_set, device=device, tolerance=tolerance,
                           max_repeats=max_repeats, progress_for=_status())
        result = done.result
        print_bisect(result, out, tolerance, done.cell, left_out=left_out)
        if result.outcome in ("failed",):
            raise typer.Exit(1)


def candidate_points(package: Optional[str], good: str, bad: str, versions: Optional[str]) -> tuple[list[str], str]:
    """The labels a bisect searches, good end first, and a note naming the releases between the ends left out as this
    Python cannot install them (their points could only be error rows; "" when none). An end this Python cannot
    install is a UsageError: a bisect from it could only fail."""
    from fwbench.cli.bisecting import installable_releases

    try:
        if package is None:
            good_point, bad_point = points_core.date_point(good), points_core.date_point(bad)
            return [points_core.date_point(day).label
                    for day in points_core.dates_between(good_point.date, bad_point.date)], ""
        good_version = points_core.release_version(good, "--good")  # before the index is asked
        bad_version = points_core.release_version(bad, "--bad")
        releases = installable_releases(package, versions)
        for flag, end in (("--good", good_version), ("--bad", bad_version)):
            for release, requires in releases.other_python.items():
                if points_core.release_version(release, "the index's") == end:
                    raise UsageError(f"{flag} {release}: {releases.python} (the environments') cannot install "
                                     f"{package} {release} (requires-python {requires})")
        between = points_core.versions_between(releases.listed, good, bad)
        inside = points_core.releases_in_range(releases.other_python, good, bad)
        return [points_core.package_point(package, v).label for v in between], releases.left_out_note(inside)
    except points_core.SweepError as exc:
        raise UsageError(str(exc)) from None


def print_sweep_report(out: Path, tolerance: float) -> Path:
    from fwbench_aggregator import loading
    from fwbench_aggregator import sweep as report_sweep

    loaded = loading.load_results([out], exclude=out / "sweep-report")
    for line in report_sweep.summary_lines(report_sweep.cell_sweeps(loaded, tolerance), tolerance):
        console.print(escape(line), highlight=False)
    return report_sweep.write_report(loaded, out / "sweep-report", tolerance)


def print_bisect(result, out: Path, tolerance: float, cell=None, *, left_out: str = "") -> None:
    """The evidence, ms/step at each tested point and the outcome; `cell` (the bisect's, sweep point blanked) keeps
    other cells' rows in `out` out of it; `left_out` names candidates the search never had (the report says so)."""
    from fwbench_aggregator import loading
    from fwbench_aggregator import sweep as report_sweep
    from fwbench_aggregator.bisect import summary

    console.print("[bold]evidence[/]")
    for line in result.decisions:
        console.print("  " + escape(line), highlight=False)
    loaded = loading.load_results([out])
    others = report_sweep.cells_in(loaded) - {cell}
    if cell is not None and others:
        console.print(f"note: {escape(str(out))} also holds rows of {len(others)} other cell(s); they are not part of "
                      "this bisect", highlight=False)
    found = [] if cell is None else report_sweep.cell_sweeps(report_sweep.rows_of_cell(loaded, cell), tolerance)
    estimates = {p.label: p for c in found for p in c.points}
    points = []
    for label, tested in result.tested.items():
        point = estimates.get(label)
        points.append((label, report_sweep.fmt_estimate(point.estimate if point else None), tested.note))
        console.print(f"  {escape(label):<28} {points[-1][1]}" + (f"  ({escape(tested.note)})" if tested.note else ""),
                      highlight=False)
    console.print(f"{result.environments} points measured")
    outcome = summary(result, tolerance)
    first = {"found": "bold", "undecided": "bold yellow", "failed": "red", "inconclusive": "yellow",
             "no-change": "default"}[result.outcome]
    for i, line in enumerate(outcome):
        console.print(f"[{first if i == 0 else 'default'}]{escape(line)}[/]", highlight=False)
    report = write_bisect_report(out / "bisect-report", result, outcome, points, left_out=left_out)
    console.print(f"bisect report: {escape(str(report))}", highlight=False)


def write_bisect_report(report_dir: Path, result, outcome: list[str], points: list[tuple[str, str, str]], *,
                        left_out: str = "") -> Path:
    """REPORT_DIR/bisect.md: the outcome, every judgement, and ms/step at each tested point (with its side of the
    change, or why it has none: undecided, left out), and the candidates left out before the search (`left_out`)."""
    from fwbench.core.atomic import write_atomically

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["# fwbench bisect", ""]
    for i, line in enumerate(outcome):
        lines += [f"**{cell(line)}**" if i == 0 else cell(line), ""]
    if left_out:
        lines += [f"Not searched: {cell(left_out)}.", ""]
    lines += ["## Judgements", "", *[f"- {cell(line)}" for line in result.decisions], "", "## Tested points", "",
              "| point | ms/step | repeats | placed |", "|---|---|---|---|"]
    ends = list(result.tested)[:2]  # measured first: the good end, then the bad one
    for label, estimate, note in points:
        placed = note or ("end" if label in ends else "")
        lines.append(f"| {cell(label)} | {cell(estimate)} | {result.tested[label].repeats} | {cell(placed)} |")
    report_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(report_dir / "bisect.md", "\n".join(lines) + "\n")
    return report_dir / "bisect.md"
