"""Plan a matrix of cells, run each through an engine, and write one Parquet row per attempt."""

from __future__ import annotations

import json
import signal
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from fwbench import data, registry, results
from fwbench.engines import CellOutcome
from fwbench.harness.cell import base_record
from fwbench.identity import CellIdentity
from fwbench.spec import CellSpec


@dataclass
class CellResult:
    spec: CellSpec
    path: Path
    row: dict | None  # the cell's row (for a --resume skip, the ok row already there)
    skipped: bool = False


def plan(stacks: Iterable[str], tasks: Iterable[str] | None, preset: str, compile_modes: Iterable[str] | None,
         repeats: int, base: CellSpec) -> list[CellSpec]:
    """Every (stack, task, compile mode, repeat) cell; validates names first (RegistryError)."""
    registry.get_preset(preset)
    stack_objs = [registry.get_stack(s) for s in stacks]
    task_ids = [registry.get_task(t).id for t in (tasks or registry.TASKS)]
    specs = []
    for stack in stack_objs:
        modes = list(compile_modes) if compile_modes else [stack.compile_modes[0]]
        for mode in modes:
            registry.check_compile_mode(stack, mode)
        for mode in modes:
            for task_id in task_ids:
                for repeat in range(repeats):
                    # --jit only means something to Keras stacks: native rows keep the default.
                    jit = base.jit if stack.family == "keras" else "published"
                    specs.append(replace(base, stack=stack.id, task=task_id, preset=preset,
                                         compile_mode=mode, repeat=repeat, jit=jit))
    return specs


def ensure_data(specs: list[CellSpec]) -> None:
    """Generate the shared inputs the planned cells need, once, before any cell starts."""
    missing: dict[tuple[str, str, int], list[str]] = {}
    for spec in specs:
        if not data.has_task(Path(spec.data_dir), spec.preset, spec.task, spec.seed):
            missing.setdefault((spec.data_dir, spec.preset, spec.seed), []).append(spec.task)
    for (data_dir, preset, seed), task_ids in missing.items():
        data.generate(Path(data_dir), preset, seed, sorted(set(task_ids)))


def outcome_record(spec: CellSpec, outcome: CellOutcome) -> dict:
    """The row for a finished cell process: its own record, or one describing how it died."""
    record = None
    if not outcome.timed_out and outcome.record_path.is_file():
        try:
            record = json.loads(outcome.record_path.read_text())
        except (OSError, json.JSONDecodeError):
            record = None
    if record is not None:
        return {**record, **outcome.row_fields}
    record = {**base_record(spec), **outcome.row_fields}
    code = outcome.returncode
    if outcome.timed_out:
        record.update(status="timeout", error_type="Timeout",
                      error_message=f"cell exceeded its timeout of {spec.timeout_s:g} s and was killed")
    elif outcome.oom_killed:
        record.update(status="oom", error_type="OOMKilled",
                      error_message="cell was killed by the out-of-memory killer (container memory limit or host)")
    elif code is not None and code == -signal.SIGKILL:
        record.update(status="oom", error_type="Killed",
                      error_message="cell process was killed by SIGKILL, most likely by the out-of-memory killer")
    else:
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        record.update(status="error", error_type="CellCrashed",
                      error_message=f"cell process ended with {how} without writing a record. "
                                    f"Log tail:\n{outcome.log_tail()}")
    record["extra"] = {"log": str(outcome.log_path)}
    return record


def run_matrix(specs: list[CellSpec], out_dir: Path, engine, resume: bool,
               on_start: Callable[[CellSpec], None] = lambda spec: None,
               on_done: Callable[[CellResult], None] = lambda result: None) -> list[CellResult]:
    out_dir = Path(out_dir)
    run_id = uuid.uuid4().hex[:12]
    work_dir = out_dir / ".work"
    device_model = engine.device_model()
    outcomes = []
    for spec in specs:
        # The engine and the host complete the identity: pin set, image variant and device model.
        spec = replace(spec, run_id=run_id, engine=engine.name, pin_set=engine.pin_set,
                       image_variant=engine.image_variant(spec.stack), device_model=device_model)
        existing = results.matching_ok_row(spec, out_dir) if resume else None
        if existing is not None:
            result = CellResult(spec, existing[0], existing[1], skipped=True)
        else:
            on_start(spec)
            name = f"{spec.cell_id}.{spec.identity.settings_id}.r{spec.repeat}"
            record_path = work_dir / f"{name}.record.json"
            record_path.parent.mkdir(parents=True, exist_ok=True)
            record_path.unlink(missing_ok=True)
            outcome = engine.run_cell(spec, record_path, out_dir / "logs" / f"{name}.log")
            record = outcome_record(spec, outcome)
            record.setdefault("run_id", run_id)
            # The row's own identity decides where it goes (the device it really ran on may differ).
            path = results.target_path(spec, out_dir, CellIdentity.of_row(record))
            results.write_row(record, path)
            record_path.unlink(missing_ok=True)
            result = CellResult(spec, path, results.read_row(path))
        outcomes.append(result)
        on_done(result)
    _remove_if_empty(work_dir)
    return outcomes


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
