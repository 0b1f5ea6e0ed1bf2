"""Plan a matrix of cells, run each through an engine, and write one Parquet row per attempt."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from fwbench.core import data, registry, results
from fwbench.engines import CellOutcome, EngineError
from fwbench.harness.cell import base_record
from fwbench.engines.slots import UNPINNED, Slot
from fwbench.core.spec import CellSpec


@dataclass
class CellResult:
    spec: CellSpec
    path: Path
    row: dict | None  # the cell's row (for a --resume skip, the ok row already there)
    skipped: bool = False


def plan(stacks: Iterable[str], tasks: Iterable[str] | None, preset: str, compile_modes: Iterable[str] | None,
         repeats: int, *, base: CellSpec) -> list[CellSpec]:
    """Every (stack, task, compile mode, repeat) cell; validates names first (RegistryError). A base without
    steps gives each task its own default (fwbench.core.registry.default_steps)."""
    registry.get_preset(preset)
    # A name given twice is one cell: run twice at once, its two processes would share one record file.
    stack_objs = list({stack.id: stack for stack in (registry.get_stack(s) for s in stacks)}.values())
    task_ids = list(dict.fromkeys(registry.get_task(t).id for t in (tasks or registry.TASKS)))
    specs = []
    for stack in stack_objs:
        modes = list(dict.fromkeys(compile_modes)) if compile_modes else [stack.compile_modes[0]]
        for mode in modes:
            registry.check_compile_mode(stack, mode)
        for mode in modes:
            for task_id in task_ids:
                for repeat in range(repeats):
                    # --jit only means something to Keras stacks: native rows keep the default.
                    jit = base.jit if stack.family == "keras" else "published"
                    steps = base.steps or registry.default_steps(task_id, preset)
                    specs.append(replace(base, stack=stack.id, task=task_id, preset=preset,
                                         compile_mode=mode, repeat=repeat, jit=jit, steps=steps))
    return specs


def ensure_data(specs: list[CellSpec]) -> None:
    """Generate the shared inputs the planned cells need, once, before any cell starts."""
    missing: dict[tuple[str, str, int], list[str]] = {}
    for spec in specs:
        if spec.model_file is not None:
            continue  # a model file's inputs are made by its first cell (fwbench.core.model_inputs)
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
    if outcome.engine_failure is not None:
        record.update(status="error", error_type="EngineFailed",
                      error_message=f"the {spec.engine} engine failed around the cell: {outcome.engine_failure}")
    elif outcome.timed_out:
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
               *, on_done: Callable[[CellResult], None] = lambda result: None,
               slots: list[Slot] | None = None, replace_ok: bool = False) -> list[CellResult]:
    """Run every cell, one at a time per slot (fwbench.engines.slots; default: one unpinned slot, one cell at a
    time). The callbacks are never called concurrently; the results come back in plan order.

    resume: skip a cell-repeat that has an ok row of its identity (results.matching_ok_row). A new row that is not
    ok never replaces an ok row of its identity and repeat unless replace_ok (`--no-resume`; results.target_path)."""
    slots = slots or [UNPINNED]
    out_dir = Path(out_dir)
    run = _Run(out_dir, engine, resume, uuid.uuid4().hex[:12], on_start=on_start, on_done=on_done,
               replace_ok=replace_ok)
    # The device is part of the identity: each slot's own GPU may be another model.
    device_models = {slot.index: engine.device_model(slot.gpu) for slot in slots}
    pending = deque(enumerate(specs))
    outcomes: list[CellResult | None] = [None] * len(specs)

    def work(slot: Slot) -> None:
        while not run.stopping.is_set():
            with run.lock:
                if not pending:
                    return
                index, spec = pending.popleft()
            spec = placed(spec, engine, slot, device_model=device_models[slot.index], run_id=run.run_id)
            outcomes[index] = run.cell(spec)

    if len(slots) == 1:
        work(slots[0])  # in this thread: Ctrl-C reaches the running cell's process directly
    else:
        _work_in_threads(work, slots, run.stopping)
    _remove_if_empty(out_dir / ".work")
    return [outcome for outcome in outcomes if outcome is not None]


def _work_in_threads(work: Callable[[Slot], None], slots: list[Slot], stopping: threading.Event) -> None:
    """One worker thread per slot. The first error in a worker (an engine that cannot start a cell) stops
    the others from starting cells and is raised here once the running cells are done. On Ctrl-C no new
    cell starts and the runner's exit ends the running ones (a cell process is killed when its runner
    dies, see fwbench.engines)."""
    errors: list[BaseException] = []

    def guarded(slot: Slot) -> None:
        try:
            work(slot)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
            errors.append(exc)
            stopping.set()

    threads = [threading.Thread(target=guarded, args=(slot,), name=f"fwbench-slot-{slot.index}", daemon=True)
               for slot in slots]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)  # a bounded wait, so Ctrl-C is handled at once
    except BaseException:
        stopping.set()
        raise
    if errors:
        raise errors[0]


class _Run:
    """What the workers of one run share: its id, the engine, a lock around the callbacks, and when
    each cell process ran (for parallel_cells)."""

    def __init__(self, out_dir: Path, engine, resume: bool, run_id: str, *, on_start, on_done, replace_ok: bool):
        self.out_dir, self.engine, self.resume, self.run_id = out_dir, engine, resume, run_id
        self.replace_ok = replace_ok
        self.on_start, self.on_done = on_start, on_done
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.spans: list[list[float | None]] = []  # [start, end] of each cell process, monotonic clock

    def cell(self, spec: CellSpec) -> CellResult:
        existing = results.matching_ok_row(spec, self.out_dir) if self.resume else None
        if existing is not None:
            result = CellResult(spec, existing[0], existing[1], skipped=True)
        else:
            with self.lock:
                self.on_start(spec)
                span: list[float | None] = [time.monotonic(), None]
                self.spans.append(span)
            try:
                launched = self._launch(spec)
            finally:
                with self.lock:
                    span[1] = time.monotonic()
                    at_once = most_at_once(span, [other for other in self.spans if other is not span])
            result = self._write(spec, launched, at_once, span[1] - span[0])
        with self.lock:
            self.on_done(result)
        return result

    def _launch(self, spec: CellSpec) -> tuple[Path, CellOutcome]:
        name = f"{spec.cell_id}.{spec.identity.settings_id}.r{spec.repeat}"
        record_path = self.out_dir / ".work" / f"{name}.record.json"
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.unlink(missing_ok=True)
        return record_path, launch(self.engine, spec, record_path, self.out_dir / "logs" / f"{name}.log")

    def _write(self, spec: CellSpec, launched: tuple[Path, CellOutcome], at_once: int, process_s: float) -> CellResult:
        record_path, outcome = launched
        record = outcome_record(spec, outcome)
        # The cell process (or container) from launch to exit, as the runner saw it: wall_s plus interpreter
        # start-up and teardown (benchmarks/first_contact.py splits it).
        record["extra"] = {**(record.get("extra") if isinstance(record.get("extra"), dict) else {}),
                           "process_s": round(process_s, 3)}
        record.setdefault("run_id", self.run_id)
        # Where the runner placed it, unless the cell said (an image with an older harness does not).
        record.setdefault("cpu_set", spec.cpu_set)
        record.setdefault("gpu_index", spec.gpu_index)
        if spec.gpus:  # every GPU the cell was given (gpu_index names only the first of a data-parallel cell's)
            record["extra"]["gpu_indices"] = list(spec.gpus)
        # A sweep point is the runner's to say (the cell process does not know it); part of the identity.
        record.setdefault("sweep_point", spec.sweep_point)
        record["parallel_cells"] = at_once
        # The row's own identity decides where it goes (the device it really ran on may differ).
        path = results.write_new_row(spec, self.out_dir, record, replace_ok=self.replace_ok)
        record_path.unlink(missing_ok=True)
        return CellResult(spec, path, results.read_row(path))


def placed(spec: CellSpec, engine, slot: Slot, *, device_model: str, run_id: str) -> CellSpec:
    """The spec as the engine and the host complete its identity (pin set, image variant, device model) and the
    slot places it (its cores and exactly its GPUs)."""
    return replace(spec, run_id=run_id, engine=engine.name, pin_set=engine.pin_set,
                   image_variant=engine.image_variant(spec.stack), device_model=device_model, cpu_set=slot.cpu_set,
                   gpu_index=slot.gpu, gpu_indices=slot.gpus if len(slot.gpus) > 1 else None, device=engine.device)


def launch(engine, spec: CellSpec, record_path: Path, log_path: Path) -> CellOutcome:
    """The engine's cell process for `spec`. An engine that breaks mid-cell (Docker stops answering) gives an
    outcome that says why, so the cell still gets its row; an EngineError (no image, no Docker) means the run
    cannot go on and is raised: one clear error, not a failed row per cell."""
    try:
        return engine.run_cell(spec, record_path, log_path)
    except EngineError:
        raise
    except Exception as exc:
        failure = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        return CellOutcome(None, False, log_path, record_path, engine_failure=failure)


def most_at_once(span: list[float], others: list[list[float | None]]) -> int:
    """The most cell processes that ran at the same time during `span` ([start, end]), itself included.
    `others` are the run's other cells' spans (end None: still running)."""
    start, end = span
    events = []
    for other_start, other_end in others:
        other_end = end if other_end is None else other_end
        if other_start < end and other_end > start:
            events += [(max(other_start, start), 1), (min(other_end, end), -1)]
    running = most = 0
    for _, change in sorted(events, key=lambda event: (event[0], event[1])):  # an end before a start at a tie
        running += change
        most = max(most, running)
    return 1 + most


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
