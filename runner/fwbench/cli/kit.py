"""`fwbench kit`: the offline GPU kit (fwbench.kit, docs/gpu-kit.md). `prepare` here, `window` on the GPU host (one
command per window, from the repository's root, with no fwbench installed:
`PYTHONPATH=runner:aggregator python3 -m fwbench.cli kit window --preset paper ...`), then `restore`, `publish` and
`page` here; `status` anywhere."""

from __future__ import annotations

import functools
import json
import sys
import tarfile
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.cli.options import MatrixOptions, declaration
from fwbench.core.usage import UsageError

kit_app = typer.Typer(no_args_is_help=True, help="The offline GPU kit: one command per GPU window, windows that add "
                                                 "up (docs/gpu-kit.md).")

# The options of the plan (window and status) and of the kit's folders, declared once.
PRESET = typer.Option(MatrixOptions.preset, "--preset", envvar=declaration("preset").envvar,
                      help="tiny, small or paper (a GPU window: paper; one kit state holds one preset's units).")
TASKS = typer.Option(None, "--tasks", help="Comma-separated task ids (default: every task of the published table).")
VARIANTS = typer.Option(None, "--variants", help="Comma-separated STACK:COMPILE_MODE (default: every published one "
                                                 "the host's image runs: native-torch:none, "
                                                 "native-torch:reduce-overhead, keras3-jax:xla, keras3-torch:none).")
REPEATS = typer.Option(3, "--repeats", help="Independent processes per cell, every cell once before any repeat.")
PRECISIONS = typer.Option(None, "--precisions", help="Comma-separated --precision values, each after the one before, "
                                                     "all repeats included (default: published,bf16).")
MODELS = typer.Option(None, "--models", help="Comma-separated model files (docs/your-model.md), paths from the "
                                             "repository: their fit and predict on keras3-jax, keras3-torch and the "
                                             "twin, after the BERT and SAM predict cells (default: none).")
MODEL_BATCH = typer.Option(256, "--model-batch", help="--models' batch.")
MODEL_PRECISION = typer.Option("tf32", "--model-precision", help="--models' precision (tf32: every backend's float32 "
                                                                 "matmuls on TF32, like with like).")
TIMED_WINDOW_S = typer.Option(15.0, "--timed-window-s", help="At paper, a task gets fewer timed steps where its "
                                                             "slowest published stack would time longer than this "
                                                             "(estimated; 0: the preset's steps).")
FULL_STEPS = typer.Option(1.0, "--full-steps-below-s", help="At paper, a task keeps the preset's timed steps (the "
                                                             "published 100) where its slowest published stack's step "
                                                             "is estimated under this many seconds (0: every task by "
                                                             "--timed-window-s).")
STEPS = typer.Option(None, "--steps", help="Timed steps of every cell (default: the window's, see --timed-window-s).")
OUT = typer.Option(None, "--out", "-o", help="The window's folder: rows, checks, report, kit-state.json, kit.log "
                                             "(default: KIT_DIR/out).")
KIT_DIR = typer.Option(None, "--kit-dir", help="The kit's folder: wheels/, site/ (the installed wheels), data/, "
                                               "home/, source.json (default: .gpu-kit in the repository).")


def kit_errors(command):
    """A kit failure is one `error:` line and exit 1 (bad options are the CLI's usage errors, exit 2)."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        from fwbench.kit.layout import KitError

        try:
            return command(*args, **kwargs)
        except (KitError, OSError, tarfile.TarError, json.JSONDecodeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None
    return run


def _folders(kit_dir: Optional[Path], out: Optional[Path]):
    from fwbench.kit.layout import KitFolders, checkout

    checkout()
    return KitFolders.at(kit_dir, out)


def _plan(preset: str, tasks: Optional[str], variants: Optional[str], repeats: int, precisions: Optional[str], *,
          models: Optional[str], model_batch: int, model_precision: str, timed_window_s: float, steps: Optional[int],
          full_steps_below_s: float):
    from fwbench.kit import plan

    if model_batch < 1 or (steps is not None and steps < 1):
        raise UsageError("--model-batch and --steps must be at least 1")
    return plan.PlanSettings(preset, plan.parse_tasks(tasks), plan.parse_variants(variants), repeats,
                             plan.parse_precisions(precisions), plan.parse_models(models), model_batch,
                             plan.parse_precisions(model_precision)[0], timed_window_s, steps, full_steps_below_s)


@kit_app.command("prepare")
@kit_errors
def prepare_cmd(
    kit_dir: Optional[Path] = KIT_DIR,
    python_version: str = typer.Option("3.12", "--python-version", help="The GPU host's Python, major.minor."),
    update_lock: bool = typer.Option(False, "--update-lock", help="Download every wheel again and record its hash "
                                                                  "in the lock (after a pin changed)."),
) -> None:
    """Here, with network: make or check the wheelhouse, record the commit, print the device call."""
    from fwbench.kit.prepare import prepare

    for line in prepare(_folders(kit_dir, None), python_version=python_version, update_lock=update_lock):
        print(line)


@kit_app.command("window")
@kit_errors
def window_cmd(
    preset: str = PRESET, tasks: Optional[str] = TASKS, variants: Optional[str] = VARIANTS,
    cell_repeats: int = REPEATS, precisions: Optional[str] = PRECISIONS, models: Optional[str] = MODELS,
    model_batch: int = MODEL_BATCH, model_precision: str = MODEL_PRECISION, timed_window_s: float = TIMED_WINDOW_S,
    cell_steps: Optional[int] = STEPS, full_steps_below_s: float = FULL_STEPS, out: Optional[Path] = OUT,
    kit_dir: Optional[Path] = KIT_DIR,
    export: Optional[Path] = typer.Option(None, "--export", help="Copy the 8 files worth bringing back here, after "
                                                                 "every step."),
    budget_s: float = typer.Option(540.0, "--budget-s", help="The window's whole time, report and export included."),
    reserve_s: float = typer.Option(30.0, "--reserve-s", help="Seconds kept for the report and export."),
    checks_s: float = typer.Option(180.0, "--checks-s", help="The most the GPU checks' cells may take."),
    cell_timeout: float = typer.Option(480.0, "--cell-timeout", help="The longest a cell may take (within a window, "
                                                                     "at most what is left)."),
    doctor_timeout: float = typer.Option(120.0, "--doctor-timeout", help="Seconds for fwbench doctor."),
    restore: str = typer.Option("auto", "--restore", help="First restore an earlier window: auto (the newest "
                                                          "benchmarks/results/ folder of this GPU, unless --out "
                                                          "already holds a kit state), an exported folder or its "
                                                          "rows.tar.gz, a results folder, or none."),
    recheck: Optional[List[str]] = typer.Option(None, "--recheck", help="Run this cell check again although it "
                                                                        "passed earlier (repeatable)."),
    skip_checks: bool = typer.Option(False, "--skip-checks", help="No GPU cell checks (the checks over "
                                                                    "rows always run)."),
    skip_units: bool = typer.Option(False, "--skip-units", help="No cells beyond the checks."),
    max_units: Optional[int] = typer.Option(None, "--max-units", help="Start at most this many units."),
    check_task: str = typer.Option("bert-predict", "--check-task", help="The cell the sync, TF32 and busy checks "
                                                                        "time."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run units whose row was not ok again."),
    prefetch: int = typer.Option(3, "--prefetch", help="Start up to this many next units ahead, held after their "
                                                       "imports while a unit runs (0: each at its turn)."),
) -> None:
    """One GPU window: checks, then cells within --budget-s, resuming; the files come back whatever fails."""
    from fwbench.core import registry
    from fwbench.kit.window import WindowSettings, window

    plan = _plan(preset, tasks, variants, cell_repeats, precisions, models=models, model_batch=model_batch,
                 model_precision=model_precision, timed_window_s=timed_window_s, steps=cell_steps,
                 full_steps_below_s=full_steps_below_s)
    registry.get_task(check_task)
    settings = WindowSettings(budget_s, reserve_s, checks_s, cell_timeout, doctor_timeout, restore,
                              tuple(recheck or ()), skip_checks, skip_units, max_units, check_task, retry_failed,
                              export.resolve() if export else None, prefetch=prefetch)
    code = window(_folders(kit_dir, out), plan, settings)
    if code:
        raise typer.Exit(code)


@kit_app.command("status")
@kit_errors
def status_cmd(
    preset: str = PRESET, tasks: Optional[str] = TASKS, variants: Optional[str] = VARIANTS,
    cell_repeats: int = REPEATS, precisions: Optional[str] = PRECISIONS, models: Optional[str] = MODELS,
    model_batch: int = MODEL_BATCH, model_precision: str = MODEL_PRECISION, timed_window_s: float = TIMED_WINDOW_S,
    cell_steps: Optional[int] = STEPS, full_steps_below_s: float = FULL_STEPS, out: Optional[Path] = OUT,
    kit_dir: Optional[Path] = KIT_DIR,
) -> None:
    """Units done and left, checks, where each unit's seconds went, each window's timed fraction."""
    from fwbench.kit.status import status

    plan = _plan(preset, tasks, variants, cell_repeats, precisions, models=models, model_batch=model_batch,
                 model_precision=model_precision, timed_window_s=timed_window_s, steps=cell_steps,
                 full_steps_below_s=full_steps_below_s)
    for line in status(_folders(kit_dir, out), plan):
        print(line)


@kit_app.command("restore")
@kit_errors
def restore_cmd(
    source: Path = typer.Argument(..., help="An exported folder, its rows.tar.gz, or a benchmarks/results/ folder."),
    out: Optional[Path] = OUT, kit_dir: Optional[Path] = KIT_DIR,
) -> None:
    """Bring back an earlier window's files into an empty --out, to continue or publish."""
    from fwbench.kit.export import restore_into

    restore_into(_folders(kit_dir, out), source)


@kit_app.command("publish")
@kit_errors
def publish_cmd(
    out: Optional[Path] = OUT, kit_dir: Optional[Path] = KIT_DIR,
    dest: Optional[Path] = typer.Option(None, "--dest", help="Where results folders go (default: benchmarks/results "
                                                             "in the repository)."),
    history: Optional[Path] = typer.Option(None, "--history", help="Then add the published rows to this history "
                                                                   "store (docs/history.md)."),
) -> None:
    """Copy rows, report and host facts to benchmarks/results/<date>-<gpu>/ (the next window restores from there).
    The window itself runs offline without the history's DuckDB; --history adds its rows here, once published."""
    from fwbench.kit.layout import RESULTS
    from fwbench.kit.publish import publish

    if history is not None:
        from fwbench.cli.history import check_store

        check_store(history)
    target = publish(_folders(kit_dir, out), dest.resolve() if dest else RESULTS)
    if history is not None:
        from fwbench.cli.history import add_rows

        add_rows(history, [target / "rows"])  # the cells' rows; checks/ holds the GPU checks' rows


@kit_app.command("page")
@kit_errors
def page_cmd(
    folder: Path = typer.Argument(..., help="A published kit folder, benchmarks/results/<date>-<gpu>/."),
    page: Optional[Path] = typer.Argument(None, help="The results page to write or update."),
    print_block: bool = typer.Option(False, "--print", help="Print the generated block's body only."),
) -> None:
    """A GPU results page: its generated block, and every figure of its prose, from a published kit folder."""
    from fwbench.kit import page as results_page

    folder = results_page.check_folder(folder)
    if print_block:
        sys.stdout.write(results_page.generate(folder))
        return
    if page is None:
        raise UsageError("give the page to update, or --print")
    results_page.write_page(folder, page)
    print(f"wrote {page}")
