"""What the command groups share: the console, option help texts, the pin-set and engine choices and the
results-folder check. Sub-command modules import this, never commands.py (which imports them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from fwbench.core import pins
from fwbench.core.usage import UsageError

# Piped or logged output has no terminal width to fit: do not squash stack and task names.
console = Console() if Console().is_terminal else Console(width=200)

PIN_SET_HELP = ("Library versions: current, or paper-2024 (the published run's); default current "
                "(the current engine inside an image: the image's).")
DEVICE_HELP = ("Device of every cell, whatever the engine: auto (the GPU when the host has an NVIDIA GPU, else "
               "the CPU), gpu (a cell whose framework sees none is a device_unavailable row) or cpu (no GPU is "
               "visible to the cells).")
RESUME_HELP = ("--resume: skip cell-repeats that already have an ok row of the same identity (any schema version). "
               "Without it every cell runs, but a failed re-run never replaces an ok row (it is written beside it); "
               "--no-resume lets every new row replace its cell-repeat's row.")
STATUS_STYLE = {"ok": "green", "error": "red", "timeout": "yellow", "oom": "magenta", "cancelled": "yellow",
                "unsupported": "dim", "device_unavailable": "red", "diverged": "magenta"}


def default_data_dir() -> Path:
    from fwbench.engines.local import fwbench_home

    return Path(os.environ.get("FWBENCH_DATA", fwbench_home() / "data"))


def check_pin_set(pin_set: str | None) -> None:
    if pin_set is not None and pin_set not in pins.PIN_SETS:
        raise UsageError(f"unknown pin set '{pin_set}' (choose from: {', '.join(pins.PIN_SETS)})")


def pin_set_or_default(pin_set: str | None) -> str:
    check_pin_set(pin_set)
    return pin_set or pins.DEFAULT_PIN_SET


ENGINES = ("local", "current", "docker")


def make_engine(name: str, image: str | None = None, device: str = "auto", memory: str | None = None,
                pin_set: str | None = None, *, release: Path | None = None, stacks: list[str] | None = None):
    """pin_set None: the default one (current engine inside an image: the image's). device: --device, resolved
    here once for the whole run. release: the docker engine runs `stacks` in that release's images, by digest."""
    from fwbench.engines import device as devices
    from fwbench.engines.local import current_engine, local_engine

    check_pin_set(pin_set)
    devices.check_setting(device)
    if name not in ENGINES:
        raise UsageError(f"unknown engine '{name}' (choose from: {', '.join(ENGINES)})")
    if release is not None and name != "docker":
        raise UsageError("--release needs --engine docker")
    if name == "docker":
        from fwbench.engines.docker import DEFAULT_IMAGE, DockerEngine

        engine = DockerEngine(image or DEFAULT_IMAGE, device, memory, pin_set_or_default(pin_set))
        if release is not None:
            engine.references = released_images(release, stacks or [], engine.pin_set, engine.variant)
        return engine
    if name == "local":
        return local_engine(pin_set_or_default(pin_set), device=devices.resolve(device))
    return current_engine(pin_set, devices.resolve(device))


def released_images(path: Path, stacks: list[str], pin_set: str, variant: str) -> dict[str, str]:
    from fwbench.release.record import ReleaseError, read_release

    try:
        release = read_release(path)
    except ReleaseError as exc:
        raise UsageError(str(exc)) from None
    references = {}
    for stack in stacks:
        released = release.image(stack, pin_set, variant)
        if released is None:
            raise UsageError(f"{path} has no {stack} {pin_set}-{variant} image (--pin-set, --device)")
        references[stack] = released.reference
    return references


def check_out_dir(out: Path) -> None:
    """The results folder must be (or become) a writable directory, before any cell runs."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".fwbench-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--out {out} cannot be used as a results folder: {reason}") from None


def planned_cell(plan: Path, index: int | None, where_index_comes_from: str):
    """Cell INDEX of a cluster plan (cells.json), for `slurm run-cell` and `k8s run-cell`."""
    from fwbench.cluster import cellplan

    if index is None:
        raise UsageError(f"no cell index: pass --index or run as {where_index_comes_from}")
    try:
        return cellplan.cell_of_index(plan, index)
    except cellplan.PlanError as exc:
        raise UsageError(str(exc)) from None


def report_planned_cell(spec, result) -> None:
    """One line on the planned cell's row; exit 1 only when no row was written (a failed cell is a row)."""
    row = result.row or {}
    print(f"{row.get('status', '?')} {spec.cell_id} r{spec.repeat}: {result.path}", file=sys.stderr)
    if not result.path.is_file():
        raise typer.Exit(1)


def warn_if_busy() -> None:
    """Timings on a busy machine are meaningless (CPU cells ran up to 100x slower here): say so up front."""
    from fwbench.harness import hold
    from fwbench.harness.contention import BUSY_OTHER_CPU_CORES, host_load

    if hold.hold_dir() is not None:
        # A held run (a kit unit started ahead) starts beside its neighbours' imports by design; its cell waits for
        # them to hold before its set-up and its timed window's own probe judges it: a warning now is noise.
        return

    cores, top = host_load(sample_s=0.5)
    if cores is not None and cores > BUSY_OTHER_CPU_CORES:
        console.print(f"[yellow]warning:[/] the machine is busy ({cores:.1f} CPU cores in use by other processes"
                      f"{': ' + escape(', '.join(top)) if top else ''}); timings will be flagged busy "
                      "on their rows", highlight=False)

def ran_concurrently(row: dict) -> bool:
    return (row.get("parallel_cells") or 1) > 1

def cell_name(spec) -> str:
    return f"{spec.stack} {spec.task} [{spec.compile_mode}] r{spec.repeat}"

def result_line(result) -> str:
    spec = result.spec
    name = escape(cell_name(spec))
    if result.skipped:
        return f"[dim]skip[/] {name}: an ok row with the same settings exists"
    row = result.row
    status = row["status"]
    style = STATUS_STYLE.get(status, "red")
    if status == "ok":
        detail = f"{row['ms_per_step']:.2f} ms/step (first step {row['first_step_s']:.2f} s)"
        if row.get("compiled_graphs"):
            detail += f", {row['compiled_graphs']} compiled graphs"
        if ran_concurrently(row):
            where = f"CPUs {row.get('cpu_set')}" + (f", GPU {row['gpu_index']}" if row.get("gpu_index") is not None else "")
            detail += f" [cyan]concurrent: {row['parallel_cells']} cells at once, {escape(where)}[/]"
        if row.get("busy"):
            detail += f" [yellow]busy: {escape(row.get('busy_reasons') or '')}[/]"
    else:
        detail = escape((row.get("error_message") or " ").splitlines()[0][:200])
    return f"[{style}]{status}[/] {name}: {detail}"
