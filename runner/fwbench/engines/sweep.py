"""Run cells at version-sweep points (`fwbench sweep`), and find where a cell changed (`fwbench bisect`).

A point's cells run in the local engine's environment for that point (fwbench.engines.local: the pin set's lock
plus one package at another version, or every package re-resolved at a date), one cell at a time (versions are
compared, so no cell runs beside another). A point whose environment cannot be made, or installed another version
than the one asked for, is never measured: each of its planned cells gets a row (status error, error_type
SweepPointUnavailable or SweepVersionMismatch, the resolver's one line as error_message), not a traceback; such
a row never replaces an ok row of its cell-repeat (with --resume the ok row is kept, and nothing is written).

`fwbench bisect`'s search (which points to measure, and what their judgements say) is fwbench_aggregator.bisect; it
measures points through run_point.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from fwbench.core import results
from fwbench.core.spec import CellSpec
from fwbench.core.sweep import SweepPoint
from fwbench.engines.slots import one_cell_at_a_time

FAILED_POINT = "SweepPointUnavailable"
MISMATCH = "SweepVersionMismatch"


def point_failure_rows(specs: list[CellSpec], out: Path, error_type: str, message: str, *, resume: bool = False,
                       replace_ok: bool = False) -> list[dict]:
    """One error row per planned cell of a point that cannot be measured. With resume, a cell-repeat that has an ok
    row at the point keeps it (and it is returned); an error row never replaces an ok row unless replace_ok
    (`--no-resume`): it goes beside it (results.target_path)."""
    from fwbench.harness.cell import base_record

    rows = []
    for spec in specs:
        kept = results.matching_ok_row(spec, out) if resume else None
        if kept is not None:
            rows.append(kept[1])
            continue
        record = base_record(spec)
        record.update(status="error", error_type=error_type, error_message=message, sweep_point=spec.sweep_point)
        path = results.write_new_row(spec, out, record, replace_ok=replace_ok)
        rows.append(results.read_row(path))
    return rows


def point_specs(specs: list[CellSpec], point: SweepPoint, pin_set: str, device: str):
    """(the point's engine, the specs as run_point runs them at `point`): what their rows' identities will be,
    known before anything runs (`fwbench watch` asks its history store which versions it has)."""
    from fwbench.engines.local import local_engine

    engine = local_engine(pin_set, device=device, point=point)
    device_model = engine.device_model(None)
    return engine, [replace(spec, sweep_point=point.label, engine=engine.name, pin_set=pin_set,
                            image_variant=engine.image_variant(spec.stack), device_model=device_model,
                            device=engine.device) for spec in specs]


def run_point(specs: list[CellSpec], point: SweepPoint, out: Path, pin_set: str, device: str,
              *, progress_for: Callable[[str], object] | None = None, on_start=lambda spec: None,
              on_done=lambda result: None, resume: bool = False, replace_ok: bool = False) -> list[dict]:
    """Every planned cell at `point` (device: 'cpu' or 'gpu', resolved). Returns the rows written (or kept by
    resume). `progress_for(label)` gives a context manager yielding a build-progress callback. replace_ok: a row
    that is not ok may replace an ok row of its cell-repeat (`--no-resume`; else it goes beside it)."""
    import contextlib

    from fwbench.engines import matrix
    from fwbench.engines.local import PointUnavailable, StackEnvironment, local_variant

    engine, specs = point_specs(specs, point, pin_set, device)
    variant, _ = local_variant(device)
    broken: dict[str, tuple[str, str]] = {}
    for stack in dict.fromkeys(spec.stack for spec in specs):
        status = progress_for(f"preparing {stack} at {point.label}") if progress_for else contextlib.nullcontext(None)
        try:
            with status as report:
                engine.prepare(stack, report)
        except PointUnavailable as exc:
            broken[stack] = (FAILED_POINT, f"{point.label}: {exc.reason}")
            continue
        mismatch = StackEnvironment(stack, pin_set, variant=variant, point=point).sweep_record().get("mismatch")
        if mismatch:
            broken[stack] = (MISMATCH, mismatch)
    rows = []
    for stack, (error_type, message) in broken.items():
        rows += point_failure_rows([s for s in specs if s.stack == stack], out, error_type, message, resume=resume,
                                   replace_ok=replace_ok)
    runnable = [spec for spec in specs if spec.stack not in broken]
    if runnable:
        matrix.ensure_data(runnable)
        # One cell at a time, on its own GPU(s) only: never every GPU of the host (as `run` and verify give them).
        cell_slots = one_cell_at_a_time(engine.device, max(spec.devices for spec in runnable))
        for result in matrix.run_matrix(runnable, out, engine, resume, on_start, on_done=on_done, slots=cell_slots,
                                        replace_ok=replace_ok):
            rows.append(result.row)
    return rows
