"""`fwbench stability`: per (stack, task, precision), the fit run untimed at the precision and at fp32 through the
engine's own cell processes (the same launch, environment, timeout and failure records as `fwbench run`), then one
stability record (fwbench.core.stability) written atomically under OUT/stability/."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

from fwbench.core import registry, stability
from fwbench.core.spec import CellSpec
from fwbench.engines.matrix import launch, outcome_record, placed
from fwbench.engines.slots import one_cell_at_a_time

FINISHED = ("ok", "diverged")


def stability_spec(base: CellSpec, *, stack: str, task: str, steps: int) -> CellSpec:
    """The cell spec of one stability fit: `steps` optimizer steps in all (no warm-up: every step's loss counts),
    the stack's default compile mode."""
    if steps < 2:
        raise stability.StabilityError(f"--steps must be at least 2 for a stability run, got {steps}")
    if registry.get_task(task).kind != "fit":
        fits = ", ".join(t.id for t in registry.TASKS.values() if t.kind == "fit")
        raise stability.StabilityError(f"stability runs fit tasks only: {task} is a {registry.get_task(task).kind} "
                                       f"task (fit tasks: {fits})")
    # A malformed overflow:STEP, or a fault of timed cells: a usage error before anything runs.
    if base.fault and stability.overflow_step(base.fault) is None:
        raise stability.StabilityError(f"--inject-fault {base.fault}: a stability run takes overflow:STEP only")
    planted = stability.overflow_step(base.fault)
    if planted is not None and planted >= steps:
        raise stability.StabilityError(f"--inject-fault {base.fault}: step {planted} is past the last step ({steps - 1})")
    return replace(base, stack=stack, task=task, compile_mode=registry.get_stack(stack).compile_modes[0],
                   warmup=0, steps=steps - 1, repeat=0, stability_run=True)


def _run_fit(engine, spec: CellSpec, out_dir: Path, run_id: str) -> dict:
    # One device, placed as `run` places a cell: on a GPU run exactly one GPU, never every GPU of the host.
    [slot] = one_cell_at_a_time(engine.device)
    spec = placed(spec, engine, slot, device_model=engine.device_model(slot.gpu), run_id=run_id)
    name = f"{spec.stack}.{spec.task}.{spec.precision}.stability"
    record_path = out_dir / ".work" / f"{name}.record.json"
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.unlink(missing_ok=True)
    log_path = out_dir / "logs" / "stability" / f"{name}.log"
    outcome = launch(engine, spec, record_path, log_path)
    record = outcome_record(spec, outcome)
    record_path.unlink(missing_ok=True)
    record.setdefault("device", "cuda" if spec.device == "gpu" else "cpu")
    record.setdefault("fault", spec.fault)
    record.setdefault("stability_steps", 1 + spec.warmup + spec.steps)  # a fit that did not run still planned them
    record["log"] = str(log_path)
    return record


def run_stability(engine, spec: CellSpec, out_dir: Path,
                  on_fit: Callable[[str, dict], None] = lambda precision, record: None) -> tuple[dict, Path]:
    """Run one stability spec (stability_spec) at its precision and, unless that is fp32 or did not run to the end,
    at fp32; write and return its record and path. `on_fit` hears each fit's cell record."""
    out_dir = Path(out_dir)
    run_id = uuid.uuid4().hex[:12]
    start = time.perf_counter()
    asked = _run_fit(engine, spec, out_dir, run_id)
    on_fit(spec.precision, asked)
    baseline = None
    if asked.get("status") in FINISHED:
        if spec.precision == stability.BASELINE_PRECISION:
            baseline = asked
        else:
            baseline = _run_fit(engine, replace(spec, precision=stability.BASELINE_PRECISION), out_dir, run_id)
            on_fit(stability.BASELINE_PRECISION, baseline)
    extra = {"logs": [asked["log"]] + ([baseline["log"]] if baseline is not None and baseline is not asked else []),
             "run_id": run_id, "threads": spec.threads,
             # Where each fit process spent its time (start-up, build, steps): the steps alone are the "seconds".
             "phases_s": {record.get("precision"): (record.get("extra") or {}).get("phases_s")
                          for record in (asked, baseline) if record is not None}}
    record = stability.compose(asked, baseline, wall_s=round(time.perf_counter() - start, 3), extra=extra)
    path = stability.record_path(out_dir, record)
    stability.write_record(record, path)
    return record, path
