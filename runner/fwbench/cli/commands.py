"""The `fwbench` command line (Typer + Rich)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fwbench.core import data, model_inputs, registry
from fwbench.engines import slots as slot_plan
from fwbench.engines import EngineError
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError
from fwbench.cli.common import (DEVICE_HELP, PIN_SET_HELP, RESUME_HELP, STATUS_STYLE, check_out_dir, console,
                                 default_data_dir, make_engine, pin_set_or_default, ran_concurrently,
                                 warn_if_busy)
from fwbench.cli.options import (MODEL_FILE_OPTIONS, MODEL_FILE_OVERRIDES, MatrixOptions, Override, declaration,
                                  matrix_options, require_stack_or_model)

# -h as well as --help, in every command and group (Click passes context settings down to subcommands).
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings=HELP_OPTIONS,
                  help="Benchmark Keras 3 / Keras 2 / native PyTorch on the same models and data.")
env_app = typer.Typer(no_args_is_help=True, help="Manage the per-stack environments of the local engine.")
app.add_typer(env_app, name="env")


def _print_version(asked: bool) -> None:
    if asked:
        from fwbench import __version__

        print(f"fwbench {__version__}")
        raise typer.Exit()


@app.callback()
def _top(version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True,
                                      help="Print fwbench's version and exit.")) -> None:
    """Benchmark Keras 3 / Keras 2 / native PyTorch on the same models and data."""


@app.command("list")
def list_cmd(preset: str = typer.Option(MatrixOptions.preset, envvar=declaration("preset").envvar,  # as `run` has it
                                        help="Preset whose batch sizes to show: tiny, small or paper.")) -> None:
    """Show the stacks, tasks and presets."""
    registry.get_preset(preset)
    stacks = Table(title="Stacks")
    for column in ("stack", "compile modes", "what"):
        stacks.add_column(column)
    for stack in registry.STACKS.values():
        stacks.add_row(stack.id, ", ".join(stack.compile_modes), stack.description)
    tasks = Table(title=f"Tasks (batch sizes at preset '{preset}')")
    for column in ("task", "model", "kind", "batch"):
        tasks.add_column(column)
    for task in registry.TASKS.values():
        tasks.add_row(task.id, task.model, task.kind, str(registry.workload(task.id, preset).batch_size))
    presets = Table(title="Presets")
    for column in ("preset", "steps", "warm-up", "timeout s", "what"):
        presets.add_column(column)
    for p in registry.PRESETS.values():
        steps = ", ".join([str(p.steps), *(f"{kind} {count}" for kind, count in p.kind_steps)])
        presets.add_row(p.id, steps, str(p.warmup), f"{p.timeout_s:g}", p.description)
    for table in (stacks, tasks, presets):
        console.print(table)


@app.command("data")
@matrix_options(only=("task", "preset", "seed"))
def data_cmd(
    options: MatrixOptions,
    out: Path = typer.Option(None, "--out", "-o", help="Data directory (default: $FWBENCH_DATA or ~/.cache/fwbench/data)."),
) -> None:
    """Write the shared synthetic inputs of every task once, with a SHA-256 manifest."""
    out = out or default_data_dir()
    manifest = data.generate(out, options.preset, options.seed, options.task or None)
    # Where `run --model` cells make their inputs: made here, by the data's owner, so that a container given it
    # writable over read-only data (compose's bench services) can write in it (Docker would make it root's).
    (out / model_inputs.INPUTS_FOLDER).mkdir(exist_ok=True)
    table = Table(title=f"Shared data: {out / options.preset}")
    table.add_column("task")
    table.add_column("sha256")
    for task_id, entry in manifest["tasks"].items():
        table.add_row(task_id, entry["sha256"][:16] + "…")
    console.print(table)


@app.command("run")
@matrix_options(opt_in=MODEL_FILE_OPTIONS, **MODEL_FILE_OVERRIDES)
def run_cmd(
    options: MatrixOptions,
    out: Path = typer.Option(..., "--out", "-o", help="Results directory (one Parquet file per cell)."),
    resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help=RESUME_HELP, show_default=False),
    engine: str = typer.Option("local", help="local (per-stack venv), current (this interpreter) or docker."),
    image: Optional[str] = typer.Option(None, help=f"docker: image name template (default {registry.IMAGE_TEMPLATE})."),
    release: Optional[Path] = typer.Option(None, "--release", help="docker: run in this release's images, by digest "
                                                                   "(release.json of `fwbench publish`)."),
    docker_memory: Optional[str] = typer.Option(None, help="docker: container memory limit, e.g. 8g."),
    history: Optional[Path] = typer.Option(None, "--history", help="After the run, add its rows to this history "
                                                                   "store (fwbench history add; docs/history.md); "
                                                                   "its earlier rows give the progress estimates."),
) -> None:
    """Run cells, each in its own process with a timeout, writing one Parquet row per cell."""
    require_stack_or_model(options)
    cells_at_once = slot_plan.parse_parallel(options.parallel)
    base = options.base_spec(data_dir=str((options.data or default_data_dir()).resolve()),
                             threads=options.threads or os.cpu_count() or 1)
    specs = options.plan(base)
    runner = make_engine(engine, image, options.device, docker_memory, options.pin_set, release=release, stacks=options.stack)
    slots = slot_plan.plan_slots(cells_at_once, options.threads, slot_plan.usable_cpus(), engine_gpus(runner),
                                 devices_per_cell=options.devices)
    specs = [replace(spec, threads=slot_plan.slot_threads(slots, options.threads)) for spec in specs]
    check_out_dir(out)
    if history is not None:
        from fwbench.cli.history import check_store

        check_store(history)
    outcomes = execute(specs, runner, out, bool(resume), slots, replace_ok=resume is False, history=history)
    if history is not None:
        from fwbench.cli.history import add_rows

        add_rows(history, [out])
    if any(r.row and r.row["status"] not in ("ok", "unsupported", "diverged") for r in outcomes):
        raise typer.Exit(1)


def engine_gpus(runner) -> list[int]:
    """The GPUs a run's cells may be given (one each, or --devices each): none on a CPU run."""
    if runner.device != "gpu":
        return []
    gpus = slot_plan.usable_gpus()
    if not gpus:
        raise UsageError("a GPU run gives each cell one GPU of its own, but neither NVML (pip install nvidia-ml-py) "
                         "nor nvidia-smi lists this host's GPUs; run `fwbench doctor`")
    return gpus


def execute(specs: list[CellSpec], runner, out: Path, resume: bool, slots: list | None = None, *,
            replace_ok: bool = False, history: Path | None = None) -> list:
    """Prepare environments and data, run every cell with live progress (up to one per slot at once; cell N of M and
    an estimate of what is left: fwbench.cli.progress, its history estimates from `history` or $FWBENCH_HISTORY),
    print the summary. resume and replace_ok: as matrix.run_matrix takes them."""
    from fwbench.engines import matrix
    from fwbench.cli.build_status import build_status

    matrix.ensure_data(specs)
    for stack_id in dict.fromkeys(s.stack for s in specs):
        with build_status(console, f"preparing {stack_id} ({runner.name} engine)") as report:
            runner.prepare(stack_id, report)

    warn_if_busy()
    slots = slots or [slot_plan.UNPINNED]
    if len(slots) > 1:
        console.print(f"{len(slots)} cells at once, each on its own slot: " + "; ".join(
            f"CPUs {slot.cpu_set}" + (f", GPU {','.join(map(str, slot.gpus))}" if slot.gpus else "") for slot in slots),
            highlight=False)
    from fwbench.cli import progress as run_progress

    store = run_progress.estimate_store(history)
    placed = run_progress.placed_for_run(specs, runner, slots)
    estimates = run_progress.estimates_never_failing(placed, store)
    with run_progress.RunProgress(placed, estimates, console, at_once=min(len(slots), len(specs))) as shown:
        outcomes = matrix.run_matrix(specs, out, runner, resume, shown.started, on_done=shown.finished, slots=slots,
                                     replace_ok=replace_ok)
    console.print(_summary_table(outcomes))
    console.print(f"results: {out}")
    return outcomes


def _summary_table(outcomes) -> Table:
    # Light modules only: a stack image has no pandas, which the report needs.
    from fwbench_aggregator.marks import BUSY_MARK, CONCURRENT_MARK
    from fwbench_aggregator.stats import median  # one definition of the median, shared with the report

    def variant_of(r) -> str:
        return f"{r.spec.stack} [{r.spec.compile_mode}]"

    variants = list(dict.fromkeys(variant_of(r) for r in outcomes))
    tasks = list(dict.fromkeys(r.spec.task for r in outcomes))
    cells: dict[tuple[str, str], list] = {}
    for r in outcomes:
        cells.setdefault((r.spec.task, variant_of(r)), []).append(r.row)
    table = Table(title="ms per step (median over repeats)")
    table.add_column("task")
    for variant in variants:
        table.add_column(escape(variant), justify="right")
    for task_id in tasks:
        values = []
        for variant in variants:
            rows = [row for row in cells.get((task_id, variant), []) if row]
            all_ok = [row for row in rows if row["status"] == "ok"]
            # As in the report: busy rows count only where nothing else ran ok, and then marked.
            ok = [row for row in all_ok if not row.get("busy")] or all_ok
            marks = (f" {CONCURRENT_MARK}" if any(ran_concurrently(row) for row in ok) else "") + (
                f" [yellow]{BUSY_MARK}[/]" if ok and ok[0].get("busy") else "")
            if ok:
                values.append(f"{median([row['ms_per_step'] for row in ok]):.2f}{marks}")
            elif rows:
                status = rows[0]["status"]
                values.append(f"[{STATUS_STYLE.get(status, 'red')}]{status}[/]")
            else:
                values.append("")
        table.add_row(task_id, *values)
    captions = []
    if any(r.row and r.row["status"] == "ok" and ran_concurrently(r.row) for r in outcomes):
        captions.append(f"{CONCURRENT_MARK} ran beside other cells of this run, each on CPU cores (and a GPU) of its own")
    busy = sum(1 for r in outcomes if r.row and r.row["status"] == "ok" and r.row.get("busy"))
    if busy:
        captions.append(f"{BUSY_MARK} measured only on a busy machine ({busy} busy row(s), reasons above): "
                        "not comparable")
    table.caption = "\n".join(captions) or None
    return table


@app.command("demo")
# The demo is `run` at the tiny preset plus the report: cells side by side, one core each.
@matrix_options(omit=("preset", "compile"), preset=Override(default="tiny"),
                stack=Override(required=False, default_text="every stack with an environment"),
                steps=Override(default=5), parallel=Override(default="auto"), data=Override(default_text="OUT/data"))
def demo_cmd(
    options: MatrixOptions,
    out: Path = typer.Option(Path("demo-results"), "--out", "-o", help="Where results and the report go."),
    compiled: bool = typer.Option(False, help="Also run native-torch with torch.compile(mode='reduce-overhead')."),
    resume: bool = typer.Option(True, help="Keep ok rows from an earlier demo run (--no-resume re-runs every cell "
                                           "and lets a failed one replace its ok row)."),
) -> None:
    """The CPU demo: every stack (and task) at the tiny preset, then the report (OUT/report/report.md)."""
    from fwbench.engines.local import REPO_ROOT

    pin_set = pin_set_or_default(options.pin_set)
    stacks = options.stack or [s for s in registry.STACKS
                               if (REPO_ROOT / "images" / s / pin_set / "requirements.txt").is_file()]
    cells_at_once = slot_plan.parse_parallel(options.parallel)
    runner = make_engine("local", device=options.device, pin_set=pin_set)
    # Tiny cells gain little from a second core but a lot from running beside each other: auto gives
    # each cell one core of its own (rows are marked concurrent, as with `run --parallel`).
    slots = slot_plan.plan_slots(cells_at_once, options.threads, slot_plan.usable_cpus(), engine_gpus(runner),
                                 devices_per_cell=options.devices)
    base = options.base_spec(data_dir=str((options.data or out / "data").resolve()),
                             threads=slot_plan.slot_threads(slots, options.threads))
    specs = replace(options, stack=stacks).plan(base)
    if compiled and "native-torch" in stacks:
        specs += replace(options, stack=["native-torch"], compile=["reduce-overhead"]).plan(base)
    results_dir = out / "results"
    check_out_dir(results_dir)
    execute(specs, runner, results_dir, resume, slots, replace_ok=not resume)
    from fwbench_aggregator.cli import run_aggregate

    report = run_aggregate([results_dir], out / "report")
    console.print(f"report: {report}")


def _environment(stack_id: str, pin_set: str | None, device: str):
    """The local engine's environment of a stack for a pin set and --device (GPU runs get the GPU environment)."""
    from fwbench.engines import device as devices
    from fwbench.engines.local import StackEnvironment, local_variant

    registry.get_stack(stack_id)
    variant, _ = local_variant(devices.resolve(device))
    return StackEnvironment(stack_id, pin_set_or_default(pin_set), variant=variant)


@env_app.command("build")
def env_build(stack: List[str] = typer.Argument(..., help="Stack ids."),
              pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help=PIN_SET_HELP),
              device: str = typer.Option("auto", help=DEVICE_HELP)) -> None:
    """Build (or reuse) the local engine's virtual environment of each stack (for one pin set and device)."""
    from fwbench.cli.build_status import build_status

    for stack_id in stack:
        environment = _environment(stack_id, pin_set, device)
        with build_status(console, f"building {stack_id}") as report:
            environment.build(report)
        console.print(f"{stack_id}: {environment.python}", highlight=False, soft_wrap=True)


@env_app.command("path")
def env_path(stack: str = typer.Argument(..., help="Stack id."),
             pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help=PIN_SET_HELP),
             device: str = typer.Option("auto", help=DEVICE_HELP)) -> None:
    """Print the interpreter of a stack's local environment (building nothing)."""
    environment = _environment(stack, pin_set, device)
    print(environment.python if environment.ready else "")
    if not environment.ready:
        raise typer.Exit(1)


from fwbench_aggregator.cli import register as _register_aggregator
from fwbench.cli.release import register as _register_release
from fwbench.cli.k8s import k8s_app as _k8s_app
from fwbench.cli.slurm import slurm_app as _slurm_app
_register_aggregator(app)
_register_release(app)
app.add_typer(_k8s_app, name="k8s")
app.add_typer(_slurm_app, name="slurm")
from fwbench.cli.kit import kit_app as _kit_app  # noqa: E402
app.add_typer(_kit_app, name="kit")
from fwbench.cli.doctor import register as _register_doctor  # noqa: E402
from fwbench.cli.show import register as _register_show  # noqa: E402
from fwbench.cli.sweep import register as _register_sweep  # noqa: E402
from fwbench.cli.stability import register as _register_stability  # noqa: E402
from fwbench.cli.history import register as _register_history  # noqa: E402
from fwbench.cli.watch import register as _register_watch  # noqa: E402
_register_doctor(app)
_register_show(app)
_register_sweep(app)
_register_stability(app)
_register_history(app)
_register_watch(app)


def main() -> None:
    from fwbench.core.data import DataError
    from fwbench.harness.clock import ClockError

    try:
        app()
    except (UsageError, registry.RegistryError, slot_plan.SlotError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (EngineError, DataError, ClockError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted: finished cells are saved; rerun with --resume to continue", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
