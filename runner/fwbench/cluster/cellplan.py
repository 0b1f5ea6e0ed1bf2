"""What a cluster task runs: cell INDEX of a plan file, leaving its row even when the scheduler stops it.

A plan file is the JSON list of the submission's CellSpecs; a Slurm array task or an Indexed Job pod
runs the cell of its own index (SLURM_ARRAY_TASK_ID / JOB_COMPLETION_INDEX) through the usual matrix
runner, so the row lands in the results folder in the one-file-per-cell layout, atomically, and an ok
row already there is kept (a retried or resubmitted task resumes).

A scheduler stops a task with signals: SIGUSR1 ahead of the time limit (`sbatch --signal=USR1@N`), SIGTERM
on cancel, pod deletion or the limit itself, then SIGKILL after a grace period. On the first of them the
cell process is stopped and the row says why (status timeout or cancelled) instead of the task vanishing.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from fwbench.engines import matrix
from fwbench.engines.slots import one_cell_at_a_time
from fwbench.core import results
from fwbench.core.atomic import write_atomically
from fwbench.harness.cell import base_record
from fwbench.core.identity import CellIdentity
from fwbench.core.spec import CellSpec

# The signal -> what it means when it reaches a cluster task.
STOP_SIGNALS = {signal.SIGUSR1: "timeout", signal.SIGTERM: "cancelled"}


class PlanError(ValueError):
    pass


class Stopped(BaseException):
    """Raised in the task's main thread by a stop signal (a BaseException: nothing may swallow it)."""

    def __init__(self, kind: str, signal_name: str):
        super().__init__(kind)
        self.kind, self.signal_name = kind, signal_name


def write_plan(path: Path, specs: list[CellSpec]) -> None:
    write_atomically(path, json.dumps([asdict(spec) for spec in specs], indent=1, sort_keys=True) + "\n")


def read_plan(path: Path) -> list[CellSpec]:
    try:
        cells = json.loads(Path(path).read_text())
        return [CellSpec.from_fields(cell) for cell in cells]
    except (OSError, ValueError, TypeError) as exc:
        raise PlanError(f"cannot read the plan {path}: {exc}") from None


def cell_of_index(plan: Path, index: int) -> CellSpec:
    cells = read_plan(plan)
    if not 0 <= index < len(cells):
        raise PlanError(f"index {index} is outside the plan's {len(cells)} cells ({plan})")
    return cells[index]


@dataclass
class StopReason:
    kind: str  # timeout | cancelled
    signal_name: str
    detail: str  # one sentence: who stopped the task and why


def run_planned_cell(spec: CellSpec, out: Path, engine, explain: Callable[[str, str], str], *,
                     on_started: Callable[[CellSpec], None] | None = None) -> matrix.CellResult:
    """Run one planned cell into `out` (resuming). `explain(kind, signal_name)` words the row of a cell
    stopped by the scheduler, e.g. "Slurm's time limit of the array task was reached". `on_started` gets the cell's
    completed spec (the fields the engine and the host decide filled in) as its process starts."""
    state = {"phase": "preparing", "spec": complete(spec, engine), "stop": None}

    def on_signal(signum, _frame) -> None:
        if state["stop"] is not None:
            return  # the first signal decides (SIGTERM follows SIGUSR1 at the limit)
        kind = STOP_SIGNALS[signal.Signals(signum)]
        name = signal.Signals(signum).name
        state["stop"] = StopReason(kind, name, explain(kind, name))
        if state["phase"] != "writing":  # a finished cell's row is being written: let it finish
            raise Stopped(kind, name)

    class Watched:
        """The engine, with the phase around each cell process (the signal handler reads it)."""

        def __getattr__(self, name):
            return getattr(engine, name)

        def run_cell(self, cell_spec, record_path, log_path):
            state["phase"] = "running"
            try:
                return engine.run_cell(cell_spec, record_path, log_path)
            finally:
                state["phase"] = "writing"

    def on_start(started: CellSpec) -> None:
        state["spec"] = started
        if on_started is not None:
            on_started(started)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        matrix.ensure_data([spec])
        [result] = matrix.run_matrix([spec], out, Watched(), resume=True, on_start=on_start,
                                     slots=one_cell_at_a_time(engine.device, spec.devices))
    except Stopped:
        return _write_stopped(state["spec"], out, state["stop"], log=None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    row = result.row or {}
    # The scheduler signals every process of the task: the cell itself may have died of it first, and its
    # row then reads "crashed". Say who stopped it.
    if state["stop"] is not None and row.get("status") == "error" and row.get("error_type") == "CellCrashed":
        return _write_stopped(state["spec"], out, state["stop"], log=log_of(row))
    return result


def log_of(row: dict) -> str | None:
    """The cell's log path a row names (extra.log), whether `extra` is still a dict or JSON text read back."""
    try:
        extra = results.extra_of(row.get("extra"))
    except ValueError:
        return None
    return extra.get("log") if isinstance(extra, dict) else None


def complete(spec: CellSpec, engine) -> CellSpec:
    """The identity fields the engine and the host decide (as the matrix runner fills them in)."""
    return replace(spec, engine=engine.name, pin_set=engine.pin_set, image_variant=engine.image_variant(spec.stack),
                   device_model=engine.device_model(spec.gpu_index), device=engine.device)


def _write_stopped(spec: CellSpec, out: Path, stop: StopReason, log: str | None) -> matrix.CellResult:
    record = {**base_record(spec), "status": stop.kind, "error_type": f"Stopped by {stop.signal_name}",
              "error_message": stop.detail, "parallel_cells": 1}
    if log:
        record["extra"] = {"log": log}
    path = results.write_new_row(spec, out, record)
    return matrix.CellResult(spec, path, results.read_row(path))
