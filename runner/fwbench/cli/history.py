"""`fwbench history add DIR...`, `fwbench history show` and `fwbench history page`: a results history of many runs,
its series and the changes in them (fwbench_aggregator.history: the store; fwbench_aggregator.history_series: the
series; fwbench_aggregator.history_page: the page; docs/history.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.core import registry

history_app = typer.Typer(no_args_is_help=True,
                          help="A results history: the rows of many runs in one store, each cell's series over date "
                               "or version, and the changes in it.")

STORE_HELP = ("The history store, a folder (made if missing; default: $FWBENCH_HISTORY, else "
              "~/.local/share/fwbench/history).")
BY_HELP = ("The series' axis: date (UTC day of each row's start) or version:PACKAGE (e.g. version:torch) "
           "(default: date).")
PAGE_BY_HELP = ("An axis to plot besides date (always plotted): version:PACKAGE, e.g. version:torch (repeatable; "
                "date accepted).")


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def _store(store: Optional[Path]) -> Path:
    from fwbench_aggregator.history import default_store

    return store if store is not None else default_store()


def add_rows(store: Path, result_dirs: list[Path]) -> None:
    """Add the rows under result_dirs to the store and say how many were new (one line on stderr and typer.Exit
    on a user error)."""
    from fwbench_aggregator import history
    from fwbench_aggregator.errors import AggregateError

    try:
        added = history.add(store, result_dirs)
    except AggregateError as exc:
        for item in exc.skipped:
            print(f"warning: {item.line()}", file=sys.stderr)
        raise _fail(str(exc), exc.exit_code) from None
    for item in added.skipped:
        print(f"warning: {item.line()}", file=sys.stderr)
    where = f": {added.file}" if added.file else ""
    print(f"history {store}: {added.new} new row(s), {added.already} already there{where}")


def check_store(store: Path) -> None:
    """A store that cannot be one (a file), refused before anything runs."""
    from fwbench_aggregator import history

    try:
        history.check_store(store)
    except history.HistoryError as exc:
        raise _fail(str(exc), exc.exit_code) from None


@history_app.command("add")
def add_cmd(
    results: List[Path] = typer.Argument(..., help="Results folders or files (what `fwbench run --out` wrote)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="FWBENCH_HISTORY", help=STORE_HELP),
) -> None:
    """Append the result rows the store does not hold yet (a row is known by its cell, repeat and start time)."""
    add_rows(_store(store), results)


@history_app.command("show")
def show_cmd(
    store: Optional[Path] = typer.Option(None, "--store", envvar="FWBENCH_HISTORY", help=STORE_HELP),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help="Only this stack (repeatable)."),
    task: Optional[List[str]] = typer.Option(None, "--task", help="Only this task (repeatable)."),
    by: Optional[str] = typer.Option(None, "--by", help=BY_HELP),
) -> None:
    """Each cell's series over date or over a package's version, and the changes the judge finds in it.

    A point: the median ms/step of a cell's quiet processes at one date or version, in one environment (busy rows are
    counted and left out; rows of two environments are two points)."""
    from fwbench_aggregator import history_series

    by = by or history_series.BY_DATE
    path, frame = _selected(store, stack, task, [by])
    series = history_series.build(frame, by)
    print(f"history {path}: {len(frame)} row(s), {len(series)} cell(s)")
    for line in history_series.lines(series, by):
        print(line)
    print(history_series.rule_line())


@history_app.command("page")
def page_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="The folder the page is written to (its index.html)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="FWBENCH_HISTORY", help=STORE_HELP),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help="Only this stack (repeatable)."),
    task: Optional[List[str]] = typer.Option(None, "--task", help="Only this task (repeatable)."),
    by: Optional[List[str]] = typer.Option(None, "--by", help=PAGE_BY_HELP),
) -> None:
    """One static page of every cell's series: a plot over date (and over each --by version:PACKAGE) with the
    judge's changes marked, and a table of the points with their provenance (OUT/index.html, self-contained)."""
    from fwbench_aggregator import history_page

    path, frame = _selected(store, stack, task, list(by or []))
    try:
        page = history_page.write_page(frame, out, by_values=list(by or []), store=path)
    except OSError as exc:
        raise _fail(f"cannot write the page under {out}: {exc.strerror or exc}", 1) from None
    print(page)


def _selected(store: Optional[Path], stack: Optional[List[str]], task: Optional[List[str]], by: List[str]):
    """The store's path and its rows of the stacks and tasks chosen (one line on stderr and typer.Exit on a user
    error: an unknown stack, a bad --by, an empty store or selection)."""
    from fwbench_aggregator import history, history_series
    from fwbench_aggregator.errors import AggregateError

    unknown = [name for name in stack or [] if name not in registry.STACKS]
    if unknown:
        raise _fail(f"unknown stack '{unknown[0]}' (choose from: {', '.join(registry.STACKS)})", 2)
    path = _store(store)
    try:
        for axis in by:
            history_series.parse_by(axis)
        frame = history.query(path, stacks=stack, tasks=task)
    except history_series.SeriesError as exc:
        raise _fail(str(exc), 2) from None
    except AggregateError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    if not len(frame):
        chosen = " and ".join(part for part in (f"stack {', '.join(stack)}" if stack else "",
                                                f"task {', '.join(task)}" if task else "") if part)
        raise _fail(f"the history store {path} holds no rows of {chosen}", 1)
    return path, frame


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")
