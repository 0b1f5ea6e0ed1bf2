"""`fwbench aggregate` and `fwbench compare`, registered onto the runner's Typer app.

Heavy imports (pandas, matplotlib, scipy) happen inside the commands so `fwbench --help` stays fast.
User mistakes end as one line on stderr and an exit code, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def _print_skipped(skipped) -> None:
    for item in skipped:
        print(f"warning: {item.line()}", file=sys.stderr)


def _print_main_tables(summaries) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from fwbench_aggregator.report import BUSY_NOTE, main_table

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped or logged: no terminal to fit, so do not squash the columns
    for summary in summaries:
        headers, rows = main_table(summary)
        table = Table(title=f"ms per step, preset {summary.title}: median [95% CI]")
        for i, header in enumerate(headers):
            # "stack [mode]" and "median [CI]" on two lines keep seven variants readable in 120 columns.
            table.add_column(escape(header).replace(" \\[", "\n\\["), justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*(escape(cell).replace(" \\[", "\n\\[") for cell in row))
        if summary.busy_estimates:
            table.caption = BUSY_NOTE
        console.print(table)


def run_aggregate(result_dirs: list[Path], report_dir: Path, strict: bool = False,
                  include_busy: bool = False) -> Path:
    """Validate + merge results, write the report; print the main table. Returns report.md's path.

    On a user error prints one line to stderr and raises typer.Exit (2 = bad path, 1 = nothing usable
    or --strict with skipped files), so callers such as `fwbench demo` need no error handling of their own.
    """
    from fwbench_aggregator.aggregate import aggregate
    from fwbench_aggregator.errors import AggregateError

    try:
        outcome = aggregate(result_dirs, report_dir, strict, include_busy)
    except AggregateError as exc:
        _print_skipped(exc.skipped)
        raise _fail(str(exc), exc.exit_code) from None
    _print_skipped(outcome.loaded.skipped)
    for note in outcome.loaded.notes:
        print(f"note: {note}", file=sys.stderr)
    _print_main_tables(outcome.summaries)
    from fwbench_aggregator.summary import headline_rows

    off = int((~headline_rows(outcome.loaded.frame())).sum())
    if off:
        print(f"note: {off} row(s) at other device counts, global batches or sweep points are left out of these "
              "tables and compared in the report's own sections (Data-parallel scaling, Version sweeps)",
              file=sys.stderr)
    return outcome.report_md


def table_width(wide: int) -> int | None:
    """The terminal's width where there is one (a terminal, or COLUMNS set: rich reads both), else `wide` (a pipe
    or a file: rich would wrap the table at 80 columns)."""
    import os

    return None if sys.stdout.isatty() or os.environ.get("COLUMNS") else wide


# compare --fail-above: no regression found, but a gated cell could not be judged because a side had only busy rows.
EXIT_NOT_JUDGED_BUSY = 3


def run_compare(a: Path, b: Path, fail_above: float | None, alpha: float, min_effect: float,
                *, across: list[str] | None = None) -> int:
    """Print the per-cell comparison; returns the exit code (1 if a regression exceeds fail_above)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from fwbench_aggregator import compare as cmp
    from fwbench_aggregator.errors import AggregateError

    from fwbench_aggregator.errors import NoResultsError

    try:
        side_a, side_b = cmp.load_side([a]), cmp.load_side([b])
    except AggregateError as exc:
        _print_skipped(exc.skipped)
        # A side with no rows is an unusable path for compare: it refuses to judge (2), as README says.
        raise _fail(str(exc), 2 if isinstance(exc, NoResultsError) else exc.exit_code) from None
    _print_skipped(side_a.skipped + side_b.skipped)
    rows = cmp.compare(side_a, side_b, alpha, min_effect, across or ())
    pairing = (f"identity but for {', '.join(across)} (--across)" if across else "identity")
    table = Table(title=f"B/A median ms per step (A = {escape(str(a))}, B = {escape(str(b))}); cells paired by "
                        f"{pairing}; test: Welch t on log repeat medians (capped df, 3+ repeats a side), Holm-adjusted, "
                        f"alpha {alpha:g}, min effect {min_effect:g}%")
    show_differs = bool(across) or any(r.differs for r in rows)
    for column in ("preset", "task", "variant", "A ms", "B ms", "B/A", "95% CI", "change", "p (Holm)", "unit",
                   "busy", "verdict") + (("differs (A -> B)",) if show_differs else ()):
        # A narrow terminal wraps a cell's text rather than cutting it: a verdict must never read "ver…".
        table.add_column(column, justify="right" if column in ("A ms", "B ms", "B/A", "change", "p (Holm)") else "left",
                         overflow="fold", min_width=12 if column in ("verdict", "differs (A -> B)") else None)
    styles = {"slower": "red", "faster": "green"}
    for r in rows:
        table.add_row(r.preset, r.task, escape(r.variant.label),
                      "—" if r.median_a is None else f"{r.median_a:.4g}",
                      "—" if r.median_b is None else f"{r.median_b:.4g}",
                      "—" if r.ratio is None else f"{r.ratio:.3f}",
                      f"{r.ratio_low:.3f}–{r.ratio_high:.3f}" if r.has_interval else "—",
                      "—" if r.change_pct is None or r.scaling else f"{r.change_pct:+.1f}%",
                      "—" if r.p_adjusted is None else f"{r.p_adjusted:.3g}",
                      {cmp.METHOD_REPEATS: "repeats", cmp.METHOD_STEPS: "steps"}.get(r.method, "—"),
                      r.busy or "",
                      f"[{styles[r.verdict]}]{r.verdict}[/]" if r.verdict in styles else escape(r.verdict),
                      *((escape(r.differs),) if show_differs else ()))
    Console(width=table_width(240 if show_differs else 200)).print(table)
    unnamed = [r for r in rows if r.unpaired_note.startswith("differs")]
    if unnamed:
        print(f"note: {len(unnamed)} unpaired cell(s) have a cell of the same stack, task and compile mode on the other "
              "side that differs in settings not named in --across (column differs); --across SETTING pairs them",
              file=sys.stderr)
    untestable = [r for r in rows if r.method == cmp.METHOD_STEPS]
    if untestable:
        print(f"note: {len(untestable)} cell(s) have fewer than {cmp.MIN_REPEATS} repeats on a side: steps of one "
              "process are not independent samples, so no significance test is made (their interval covers step "
              f"noise only); run both sides with --repeats {cmp.MIN_REPEATS} or more", file=sys.stderr)
    if any(r.busy for r in rows):
        print("note: some rows were measured on a busy machine (column busy): they are left out of every verdict; a "
              f"side with no quiet row is '{cmp.judge.NOT_JUDGED_BUSY}'", file=sys.stderr)
    if fail_above is not None:
        scaled = [r for r in rows if r.scaling]
        if scaled:
            print(f"note: {len(scaled)} cell(s) paired across device counts are not gated: their speed-up and "
                  "efficiency are data-parallel scaling, not a regression", file=sys.stderr)
        try:
            failing = cmp.regressions_above(rows, fail_above, alpha)
        except cmp.GateRefused as exc:
            raise _fail(str(exc), 2) from None
        if failing:
            names = ", ".join(f"{r.task} {r.variant.label} (" + ("no ok row in B" if r.b is None else
                              f"{r.change_pct:+.1f}%, CI from {(r.ratio_low - 1) * 100:+.1f}%") + ")"
                              for r in failing)
            print(f"regression above {fail_above:g}%: {names}", file=sys.stderr)
            return 1
        busy = cmp.not_judged_busy(rows)
        if busy:
            names = ", ".join(f"{r.task} {r.variant.label}" for r in busy[:5])
            print(f"not judged: {len(busy)} cell(s) have a side with only busy rows ({names}); re-run them on a quiet "
                  f"machine (exit {EXIT_NOT_JUDGED_BUSY})", file=sys.stderr)
            return EXIT_NOT_JUDGED_BUSY
    return 0


def register(app: typer.Typer) -> None:
    """Add `aggregate` and `compare` to the fwbench app."""
    from fwbench.core.identity import SETTINGS  # plain Python: --help stays fast

    @app.command("aggregate")
    def aggregate_cmd(
        result_dirs: List[Path] = typer.Argument(..., help="Results directories (searched recursively) or files."),
        output: Path = typer.Option(..., "--out", "-o", "--output", help="Report directory (outside the results dirs)."),
        strict: bool = typer.Option(False, help="Exit 1 (and write nothing) if any result file is skipped."),
        include_busy: bool = typer.Option(False, "--include-busy",
                                          help="Count rows measured on a busy machine in the tables' numbers (they never "
                                               "decide a ranking, a tie or any other verdict)."),
    ) -> None:
        """Validate and merge result files; write merged.parquet, report.md, report.html and plots."""
        report_md = run_aggregate(list(result_dirs), output, strict, include_busy)
        print(f"report: {report_md} (also report.html, merged.parquet and the PNG plots)")

    @app.command("compare")
    def compare_cmd(
        a: Path = typer.Argument(..., help="Baseline results (dir, file, or a report dir's merged.parquet)."),
        b: Path = typer.Argument(..., help="Candidate results."),
        fail_above: Optional[float] = typer.Option(
            None, "--fail-above", help="Exit 1 if a cell is credibly slower by more than this many percent (one-sided "
                                       "Welch t, Holm-adjusted) or has no ok row in B; exit 2 if a paired cell has "
                                       "fewer than 3 repeats a side; exit 3 if no cell failed but one has a side "
                                       "with only busy rows (not judged)."),
        alpha: float = typer.Option(0.05, help="Family-wise significance level (Holm-adjusted)."),
        min_effect: float = typer.Option(5.0, "--min-effect", help="Smallest change in percent that counts."),
        across: Optional[List[str]] = typer.Option(
            None, "--across", metavar="SETTING", help="Pair cells whose identity differs only in this setting "
            f"(repeatable): {', '.join(SETTINGS)}, or engine (= image_variant). Across device_model: a ratio only, "
            "and --fail-above is refused; across devices: speed-up and efficiency, never gated."),
    ) -> None:
        """Per cell (paired by identity): B/A ratio with a 95% interval, a test over repeats when both sides have 3+."""
        for name, value in (("--alpha", alpha),):
            if not 0 < value < 1:
                raise _fail(f"{name} must be between 0 and 1, got {value}", 2)
        if min_effect < 0 or (fail_above is not None and fail_above < 0):
            raise _fail("--min-effect and --fail-above must be >= 0", 2)
        from fwbench_aggregator.compare import across_settings

        try:
            named = across_settings(across)
        except ValueError as exc:
            raise _fail(str(exc), 2) from None
        if fail_above is not None and "device_model" in named:
            raise _fail("--fail-above with --across device_model: a ratio across device models is not a regression "
                        "to gate on", 2)
        code = run_compare(a, b, fail_above, alpha, min_effect, across=list(dict.fromkeys(across or [])))
        if code:
            raise typer.Exit(code)
