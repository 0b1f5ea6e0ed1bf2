"""`fwbench slurm submit | status | run-cell`: the matrix as a Slurm job array (see fwbench.cluster.slurm)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.core import registry
from fwbench.engines import device as devices
from fwbench.engines.local import local_variant
from fwbench.cli.options import (MODEL_FILE_OPTIONS, MODEL_FILE_OVERRIDES, MatrixOptions, Override, matrix_options,
                                  require_stack_or_model)

slurm_app = typer.Typer(no_args_is_help=True, help="Run the matrix as a Slurm job array (one array task per cell).")


@slurm_app.command("submit")
# One cell per array task: no --parallel. A --devices N cell's task is given N GPUs (--gres) or N cores.
@matrix_options(omit=("parallel",), opt_in=MODEL_FILE_OPTIONS, threads=Override(default_text="--cpus-per-task"),
                device=Override(help="Device of every cell: auto (gpu when --gres gives the task a GPU, else cpu), "
                                     "gpu or cpu."), **MODEL_FILE_OVERRIDES)
def submit_cmd(
    options: MatrixOptions,
    out: Path = typer.Option(..., "--out", "-o", help="Results folder, on a filesystem the compute nodes share (--data too)."),
    engine: str = typer.Option("local", help="--container none: local (per-stack venv) or current (this interpreter)."),
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="Slurm partition (default: the cluster's)."),
    gres: Optional[str] = typer.Option(None, "--gres", help="Generic resources per task, e.g. gpu:1."),
    time_limit: Optional[str] = typer.Option(None, "--time", help="Per array task, Slurm's format (default: the "
                                                                   "cells' timeout + 10 min + --stop-grace)."),
    cpus_per_task: int = typer.Option(1, "--cpus-per-task", help="CPU cores per array task."),
    mem: Optional[str] = typer.Option(None, "--mem", help="Memory per task, e.g. 32G."),
    account: Optional[str] = typer.Option(None, "--account", help="Slurm account."),
    qos: Optional[str] = typer.Option(None, "--qos", help="Slurm QOS."),
    max_running: Optional[int] = typer.Option(None, "--max-running", help="At most this many tasks at once."),
    stop_grace: int = typer.Option(90, "--stop-grace", help="Seconds before the time limit at which a task stops "
                                                            "its cell and writes a timeout row."),
    sbatch_arg: Optional[List[str]] = typer.Option(None, "--sbatch-arg", help="Another sbatch option, verbatim "
                                                                              "(repeatable), e.g. --constraint=a100."),
    container: str = typer.Option("none", help="none (this fwbench, shared filesystem), pyxis (srun "
                                               "--container-image) or apptainer (docker:// by digest)."),
    release: Optional[Path] = typer.Option(None, "--release", help="Containers: this release's image, by digest."),
    image: Optional[str] = typer.Option(None, help="Containers without --release: image reference template "
                                                   f"(default {registry.IMAGE_TEMPLATE})."),
    variant: str = typer.Option("gpu", help="Containers: image variant, gpu or cpu."),
    probe: bool = typer.Option(True, help="Check first, with a quick srun, that the compute nodes see --out."),
    probe_timeout: float = typer.Option(300, help="Seconds to wait for that check to run."),
) -> None:
    """Submit one job array for the cells that have no ok row in --out yet (a resubmission completes a matrix)."""
    from dataclasses import replace

    from fwbench.engines import matrix
    from fwbench.cluster import slurm
    from fwbench.cli.common import default_data_dir, pin_set_or_default, released_images
    from fwbench.core.spec import CellSpec
    from fwbench.core.usage import UsageError

    require_stack_or_model(options)
    for name, value in (("--cpus-per-task", cpus_per_task), ("--max-running", max_running)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    if container != "none" and variant not in ("cpu", "gpu"):
        raise UsageError(f"--variant must be cpu or gpu, not {variant!r}")
    if container == "none" and engine not in ("local", "current"):
        raise UsageError(f"--engine must be local or current, not {engine!r} (containers: --container)")
    if release is not None and container == "none":
        raise UsageError("--release needs --container pyxis or apptainer")
    # The login node's own GPUs say nothing of the compute nodes': auto follows what the task is given.
    try:
        if gres:
            slurm.check_gres(gres)
        cell_device = ("gpu" if slurm.gres_gpus(gres) else "cpu") if options.device == "auto" else options.device
        slurm.check_cell_resources(gres, cpus_per_task, options.devices, cell_device)
    except slurm.SlurmError as exc:
        raise UsageError(str(exc)) from None
    slurm_options = slurm.SlurmOptions(partition, gres, time_limit or "1", cpus_per_task, mem, container, max_running,
                                       stop_grace, account, qos, tuple(sbatch_arg or ()))
    data_root = (options.data or default_data_dir()).resolve()
    pin_set = pin_set_or_default(options.pin_set)
    base = options.base_spec(data_dir=str(data_root), threads=options.threads or cpus_per_task, pin_set=pin_set,
                             device=cell_device)
    # The identity the array task will give its row (the compute node adds its device).
    if container != "none":
        base = replace(base, engine="current", image_variant=variant)
    else:
        base = replace(base, engine=engine, image_variant=local_variant(cell_device)[1] if engine == "local" else "host")
    specs = options.plan(base)
    if time_limit is None:
        slurm_options = replace(slurm_options, time_limit=slurm.default_time_limit(specs, stop_grace))
    images = {}
    if container != "none":
        stacks = sorted({spec.stack for spec in specs})
        if release is not None:
            images = released_images(release, stacks, pin_set, variant)
        else:
            template = image or registry.IMAGE_TEMPLATE
            images = {s: template.format(stack=s, pin_set=pin_set, variant=variant) for s in stacks}
    from fwbench.cli.common import check_out_dir

    check_out_dir(out)
    def prepare(todo: list[CellSpec]) -> None:
        # Inputs and environments are made once, here, on the shared filesystem: not by each task at once.
        matrix.ensure_data([replace(spec, data_dir=str(data_root)) for spec in todo])
        if container == "none" and engine == "local":
            from fwbench.engines.local import local_engine

            runner = local_engine(pin_set, device=cell_device)
            for stack_id in sorted({spec.stack for spec in todo}):
                runner.prepare(stack_id, lambda event: print(event.message, file=sys.stderr))

    try:
        submission = slurm.submit(specs, out, data_root, slurm_options, images, probe_timeout_s=probe_timeout if probe else None, prepare=prepare)
    except slurm.SlurmError as exc:
        raise UsageError(str(exc)) from None
    if submission is None:
        print(f"nothing to submit: all {len(specs)} cells have ok rows in {out} or are still queued in an "
              "earlier array", file=sys.stderr)
        return
    print(submission.job_id)
    print(f"submitted job array {submission.job_id}: {len(submission.specs)} cells"
          f"{f' ({submission.skipped} skipped: ok rows already in {out})' if submission.skipped else ''}; "
          f"script {submission.folder / 'job.sbatch'}; watch with: fwbench slurm status --out {out}",
          file=sys.stderr)


@slurm_app.command("status")
def status_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="The results folder of the submissions."),
    all_submissions: bool = typer.Option(False, "--all", help="Every submission, not only the newest."),
) -> None:
    """Each array task's cell and state (Slurm's while queued or running, then its row's status). A task that
    ended without a row (killed outright, or cancelled before it started) gets a row saying so."""
    from rich.table import Table

    from fwbench.cluster import slurm
    from fwbench.cli.common import STATUS_STYLE, console
    from fwbench.core.usage import UsageError

    folders = slurm.submissions(out)
    if not folders:
        raise UsageError(f"no Slurm submissions in {out} (fwbench slurm submit --out {out} ...)")
    totals: Counter = Counter()
    for folder in folders if all_submissions else folders[-1:]:
        try:
            states = slurm.task_states(folder)
        except slurm.SlurmError as exc:
            raise UsageError(str(exc)) from None
        meta = slurm.read_submission(folder)
        table = Table(title=f"job array {meta['job_id']} ({folder.name})")
        for column in ("index", "cell", "repeat", "state", "detail"):
            table.add_column(column)
        for state in states:
            style = STATUS_STYLE.get(state.state, "cyan")
            table.add_row(str(state.index), state.spec.cell_id, str(state.spec.repeat),
                          f"[{style}]{state.state}[/]", state.detail[:120])
            totals[state.state] += 1
        console.print(table)
    console.print(", ".join(f"{count} {state}" for state, count in sorted(totals.items())))


@slurm_app.command("run-cell")
def run_cell_cmd(
    plan: Path = typer.Argument(..., help="The submission's cells.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Results folder."),
    submission: Path = typer.Option(..., "--submission", help="The submission's folder (for the done marker)."),
    index: Optional[int] = typer.Option(None, "--index", envvar="SLURM_ARRAY_TASK_ID",
                                        help="Which cell (Slurm sets SLURM_ARRAY_TASK_ID)."),
) -> None:
    """What each array task runs: its cell, resuming, leaving a row even when Slurm stops it (timeout,
    scancel). Exits 0 once the row is written, whatever its status."""
    from fwbench.cluster import cellplan, slurm
    from fwbench.engines.local import current_engine, local_engine
    from fwbench.cli.common import planned_cell, report_planned_cell

    spec = planned_cell(plan, index, "a Slurm array task (SLURM_ARRAY_TASK_ID)")
    device = spec.device or devices.resolve("auto")  # a plan written before --device: what this node has
    engine = (local_engine(spec.pin_set, device=device) if spec.engine == "local"
              else current_engine(spec.pin_set, device))
    print(f"fwbench slurm: task {index} on {os.uname().nodename}: {spec.cell_id} r{spec.repeat}", file=sys.stderr)
    result = cellplan.run_planned_cell(spec, out, engine, slurm.explain_stop,
                                       on_started=lambda started: slurm.mark_started(submission, index, started))
    if result.path.is_file():
        slurm.mark_done(submission, index, result.path, out)
    report_planned_cell(spec, result)
