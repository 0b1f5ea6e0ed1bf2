"""`fwbench watch`: run cells at a package's newest releases not yet in the results history, add the rows, judge each
new version against the point before it (and the series' change points), and bisect a change between two measured
versions over the releases between them, on the same machine (docs/history.md#watch)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from fwbench.cli.common import check_out_dir, console, default_data_dir, pin_set_or_default, warn_if_busy
from fwbench.cli.options import MatrixOptions, Override, matrix_options
from fwbench.core import sweep as points_core
from fwbench.core.identity import CellIdentity
from fwbench.core.usage import UsageError

EXIT_CHANGE = 3  # a change was found (0: none; 1: a cell or a bisect failed; 2: bad input)
TOLERANCE_HELP = "A change smaller than this, in percent, is no change (the sweep's and bisect's tolerance)."


def register(app: typer.Typer) -> None:
    @app.command("watch")
    @matrix_options(omit=("parallel",),
                    repeats=Override(default=3, help="Processes per measured version, at least 3 (a point "
                                                     "decides only with 3 quiet ones)."))
    def watch_cmd(
        options: MatrixOptions,
        package: str = typer.Option(..., "--package", help="The package whose releases are watched (e.g. keras, "
                                                            "torch, transformers)."),
        out: Path = typer.Option(..., "--out", "-o", help="This watch's results folder (the rows of every version "
                                                          "it measures, and bisect's); the summary goes to "
                                                          "OUT/watch.md."),
        store: Optional[Path] = typer.Option(None, "--store", envvar="FWBENCH_HISTORY",
                                             help="The history store (default: $FWBENCH_HISTORY, else "
                                                  "~/.local/share/fwbench/history)."),
        newest: int = typer.Option(1, "--newest", help="Watch the newest N releases: those the store has no "
                                                       "deciding point of are measured."),
        versions: Optional[str] = typer.Option(None, "--versions", help="V1,V2,...: the releases, oldest first, "
                                                                         "instead of the index's list."),
        tolerance: float = typer.Option(5.0, "--tolerance", help=TOLERANCE_HELP),
        bisect_changes: bool = typer.Option(True, "--bisect/--no-bisect", help="Bisect a change over the releases "
                                                                               "between its two measured versions."),
        max_repeats: int = typer.Option(9, "--max-repeats", help="Cap on the processes a bisect adds up to, per "
                                                                  "point."),
        schedule: Optional[str] = typer.Option(None, "--schedule", help="Run nothing: print this watch as a daily "
                                                                        "cron line, systemd timer, Kubernetes "
                                                                        "CronJob (k8s) or Slurm scrontab entry "
                                                                        "(slurm)."),
        at: str = typer.Option("03:00", "--at", help="--schedule's time of day, HH:MM."),
        image: Optional[str] = typer.Option(None, "--image", help="--schedule k8s: the image the CronJob runs (one "
                                                                  "with fwbench and uv, e.g. a stack's image)."),
    ) -> None:
        """Measure a package's newest releases that the history lacks, add them to it, and look for a change;
        a change between two measured versions with releases between them is bisected. Exit 3 when a change is
        found, 0 when none, 1 when a cell or bisect failed, 2 on bad input."""
        from fwbench.cli.bisecting import check_bisect_settings
        from fwbench.cli.history import add_rows
        from fwbench.engines.sweep import point_specs, run_point
        from fwbench_aggregator import history, history_series, watch

        if schedule is not None:
            print(_schedule(schedule, at, image, options), end="")
            return
        check_bisect_settings(options.repeats, max_repeats, tolerance)
        if newest < 1:
            raise UsageError(f"--newest must be at least 1, got {newest}")
        store = store if store is not None else history.default_store()
        try:
            history.check_store(store)
        except history.HistoryError as exc:
            raise UsageError(str(exc)) from None
        releases, left_out = _releases(package, versions)
        pin_set = pin_set_or_default(options.pin_set)
        from fwbench.engines import device as devices

        device = devices.resolve(options.device)
        base = options.base_spec(data_dir=str((options.data or default_data_dir()).resolve()),
                                 threads=options.threads or os.cpu_count() or 1)
        specs = options.plan(base)
        check_out_dir(out)
        # The series each planned cell's rows join (sweep point blanked: the version is the series' axis), known
        # before anything runs, so that versions the store already has are not measured again.
        probe = points_core.package_point(package, releases[-1])
        cells = list(dict.fromkeys(history_series.series_identity(CellIdentity.of_spec(spec), package)
                                   for spec in point_specs(specs, probe, pin_set, device)[1]))
        known = watch.series_by_identity(_stored(store, options), package)
        measured = [watch.measured_versions(known.get(cell)) for cell in cells]
        watched = releases[-newest:]
        to_measure = [v for v in watched if not all(v in versions for versions in measured)]
        console.print(f"watch {escape(package)}: newest {len(watched)} of {len(releases)} release(s) "
                      f"({escape(', '.join(watched))}); {len(to_measure)} not in the history "
                      f"{escape(str(store))}" + (f": {escape(', '.join(to_measure))}" if to_measure else "")
                      + (f"; {escape(left_out)}" if left_out else ""), highlight=False)
        warn_if_busy()
        failed = False
        from fwbench.cli import progress as run_progress

        # Cell N of M over every version to measure, with what is left estimated from the store (as sweep does).
        labels = [points_core.package_point(package, version).label for version in to_measure]
        planned = [spec for label in labels for spec in run_progress.placed_for_sweep(specs, label, pin_set, device)]
        estimates = run_progress.estimates_never_failing(planned, run_progress.estimate_store(store))
        with run_progress.RunProgress(planned, estimates, console) as shown:
            for number, version in enumerate(to_measure):
                point = points_core.package_point(package, version)
                shown.pause()
                console.print(f"[bold]{escape(point.label)}[/] ({len(specs)} cells)", highlight=False)
                rows = run_point(specs, point, out, pin_set, device, resume=True, on_start=shown.started,
                                 on_done=shown.finished)
                shown.settle(range(number * len(specs), (number + 1) * len(specs)))
                failed |= any(row and row["status"] not in ("ok", "unsupported") for row in rows)
        if to_measure:
            add_rows(store, [out])
        known = watch.series_by_identity(_stored(store, options), package)
        assessed = watch.assess(known, cells, to_measure, releases, tolerance)
        body = watch.lines(assessed, package, tolerance)
        for line in body:
            console.print(escape(line), highlight=False)
        outcomes = []
        if bisect_changes:
            for cell_watch in assessed:
                for bracket in cell_watch.brackets:
                    if not bracket.between:
                        continue
                    outcome, ok = _bisect(options, base, cell_watch.identity, package, bracket, out,
                                          pin_set=pin_set, device=device, tolerance=tolerance,
                                          max_repeats=max_repeats)
                    outcomes += outcome
                    failed |= not ok
            if outcomes:
                add_rows(store, [out])
        heading = [f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, package {package}, "
                   f"{len(releases)} release(s) listed, newest {len(watched)} watched: {', '.join(watched)}"
                   + (f"; {left_out}" if left_out else ""),
                   f"measured now: {', '.join(to_measure) or 'none (all in the history)'}; store {store}; "
                   f"tolerance {tolerance:g}%"]
        summary = watch.write_summary(out / "watch.md", heading, body, outcomes)
        changed = any(cell_watch.changed for cell_watch in assessed)
        console.print(f"{'change found' if changed else 'no change found'}; summary: {escape(str(summary))}",
                      highlight=False)
        if failed:
            raise typer.Exit(1)
        if changed:
            raise typer.Exit(EXIT_CHANGE)


def _releases(package: str, versions: Optional[str]) -> tuple[list[str], str]:
    """The package's releases this Python can install, oldest first, and a note on those left out (UsageError: none,
    or the index cannot list them): measured, every night would end in an error row."""
    from fwbench.cli.bisecting import installable_releases

    releases = installable_releases(package, versions)
    note = releases.left_out_note()
    if not releases.listed:
        raise UsageError(f"the index lists no release of {package}" + (f" that {releases.python} can install; {note}"
                                                                         if note else ""))
    return releases.listed, note


def _stored(store: Path, options: MatrixOptions):
    """The store's rows of the watched stacks and tasks (None: an empty store); a store fwbench cannot read is a
    one-line error."""
    from fwbench_aggregator import history
    from fwbench_aggregator.errors import AggregateError

    if not history.store_files(store):
        return None
    try:
        return history.query(store, stacks=options.stack, tasks=options.task)
    except AggregateError as exc:
        raise UsageError(str(exc)) from None


def _bisect(options: MatrixOptions, base, cell: CellIdentity, package: str, bracket, out: Path, *, pin_set: str,
            device: str, tolerance: float, max_repeats: int) -> tuple[list[str], bool]:
    """Bisect one watched cell over the releases between a bracket's versions; (outcome lines, not failed)."""
    from fwbench.cli.bisecting import bisect_cell
    from fwbench_aggregator.bisect import summary

    labels = [points_core.package_point(package, v).label for v in [bracket.before, *bracket.between, bracket.after]]
    console.print(f"[bold]bisect {escape(cell.cell_key)}[/] between {escape(labels[0])} and {escape(labels[-1])} "
                  f"({len(bracket.between)} release(s) between)", highlight=False)
    one = replace(options, stack=[cell.stack], task=[cell.task], compile=[cell.compile_mode])
    done = bisect_cell(one, base, labels, out, pin_set=pin_set, device=device, tolerance=tolerance,
                       max_repeats=max_repeats)
    for line in done.result.decisions:
        console.print("  " + escape(line), highlight=False)
    lines = summary(done.result, tolerance)
    for line in lines:
        console.print(escape(line), highlight=False)
    return [f"{cell.cell_key}: {' '.join(lines)}"], done.result.outcome != "failed"


SCHEDULE_ONLY = ("--schedule", "--at", "--image")


def _schedule(kind: str, at: str, image: Optional[str], options: MatrixOptions) -> str:
    """The entry that runs this same watch daily (docs/history.md#scheduling a watch)."""
    import shutil
    import sys

    from fwbench.cluster import k8s, schedule
    from fwbench.cluster.slurm import SlurmOptions

    if kind not in schedule.KINDS:
        raise UsageError(f"--schedule must be one of {', '.join(schedule.KINDS)}, got {kind!r}")
    try:
        schedule.parse_at(at)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    argv = _without(sys.argv[1:], SCHEDULE_ONLY)
    workdir = Path.cwd()
    found = shutil.which("fwbench")
    fwbench_argv = [found] if found else [sys.executable, "-m", "fwbench.cli"]
    if kind == "cron":
        return schedule.cron_line(argv, at, fwbench=fwbench_argv, workdir=workdir,
                                  log=workdir / "fwbench-watch.log") + "\n"
    if kind == "systemd":
        return schedule.systemd_units(argv, at, fwbench=fwbench_argv, workdir=workdir)
    if kind == "slurm":
        return schedule.scrontab_entry(argv, at, fwbench=fwbench_argv, workdir=workdir,
                                       options=SlurmOptions(cpus_per_task=options.threads or 1, time_limit="12:00:00"))
    if image is None:
        raise UsageError("--schedule k8s needs --image (the image the CronJob runs)")
    import yaml

    # In the pod, the results claim holds the rows and the store; the data are regenerated in the pod's scratch.
    in_pod = _with_value(_with_value(_with_value(argv, ("--out", "-o"), "/results/watch"), ("--store",),
                                     "/results/history"), ("--data",), "/data")
    try:
        job = schedule.k8s_cronjob(in_pod, at, image=image, results_claim="fwbench-results", namespace=None,
                                   resources=k8s.PodResources(cpu=str(options.threads or 8)))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return yaml.safe_dump(job, sort_keys=False)


def _without(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """argv less the options `names` and their values (`--at 03:00` or `--at=03:00`)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in names:
            skip = True
            continue
        if any(arg.startswith(name + "=") for name in names):
            continue
        kept.append(arg)
    return kept


def _with_value(argv: list[str], names: tuple[str, ...], value: str) -> list[str]:
    """argv with the option of these `names` (its long name first, then its aliases) set to `value`, replaced where
    given under any of them, else added."""
    return [*_without(argv, names), names[0], value]
