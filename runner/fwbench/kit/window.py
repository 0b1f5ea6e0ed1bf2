"""One GPU window: restore, preflight, the GPU checks at `tiny` sizes, then the planned units in order while they fit
the window's budget, the checks over rows, a report, and always the files worth bringing back, after every step and
whatever failed. The next window restores them and goes on.

A unit starts only if its estimate (or 1.5x its earlier wall time) fits what is left; one that does not is passed
over for a later one that does. Each cell's timeout is what is left (at most the cell timeout), so no cell outlives
the window; a cell cut short that way has its row removed and runs first in the next window (only a cell that timed
out with all of the cell timeout is recorded as a timeout). The next units are started ahead, held after their
imports (fwbench.kit.ahead), the first of them beside preflight. Each unit's seconds are recorded by part
(fwbench.kit.breakdown) in kit-state.json.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.usage import UsageError
from fwbench.kit import breakdown, cells
from fwbench.kit.ahead import Ahead
from fwbench.kit import log as kit_log
from fwbench.kit.checks import Checks, kit_rows
from fwbench.kit.export import export, restore_into
from fwbench.kit.host import window_gpu
from fwbench.kit.layout import RESULTS, KitError, KitFolders
from fwbench.kit.log import log
from fwbench.kit.plan import PlanSettings, plan_units, scaling_note
from fwbench.kit.preflight import preflight
from fwbench.kit.report import aggregate
from fwbench.kit.rows import unit_rows
from fwbench.kit.source import source_revision
from fwbench.kit.state import BUDGET_CUT, KitState
from fwbench.kit.unit import Unit


@dataclass(frozen=True)
class WindowSettings:
    budget_s: float = 540.0  # the whole window, report and export included
    reserve_s: float = 30.0  # kept for the report and the export
    checks_s: float = 180.0  # the most the GPU checks' cells may take
    cell_timeout_s: float = 480.0  # the longest a cell may take (within a window, at most what is left)
    doctor_timeout_s: float = 120.0
    restore: str = "auto"  # auto, none, an exported folder or its rows.tar.gz, or a published results folder
    recheck: tuple[str, ...] = ()  # cell checks to run again although they passed earlier
    skip_checks: bool = False
    skip_units: bool = False
    max_units: int | None = None
    check_task: str = "bert-predict"  # the cell the sync, TF32 and busy checks time
    retry_failed: bool = False
    export: Path | None = None  # where the files worth bringing back go, after every step
    results: Path = RESULTS  # where `restore auto` looks for this GPU's published results
    prefetch: int = 3  # units started ahead, their imports beside the running unit (kit.ahead); 0: none

    def __post_init__(self):
        if self.budget_s <= 0 or self.cell_timeout_s <= 0:
            raise UsageError("--budget-s and --cell-timeout must be positive")
        if self.prefetch < 0:
            raise UsageError("--prefetch must be 0 (none) or more")


# How long the GPU checks wait for the first wave to hold (its imports beside preflight's) before their cells start.
HOLD_BEFORE_CHECKS_S = 120.0


class Deadline:
    """Seconds left of a window's budget, on the monotonic clock."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def remove_unit_row(folders: KitFolders, unit: Unit) -> None:
    found = unit_rows(folders.rows, unit)
    if found:
        found[-1][0].unlink()


def predicted(state: KitState, later: list[Unit], left_s: float, *, settings: WindowSettings,
              limit: int | None) -> list[Unit]:
    """The units expected to run, in order, of `later` (the pending units after the one about to run), when `left_s`
    remain once it is done: each that fits what is left by its estimate, as run_units would choose them; at most
    `limit` (None: all). Only units runnable now: a repeat whose previous repeat has yet to run is not started
    ahead, as its `fwbench run --resume` would run that repeat first."""
    chosen = []
    for unit in later:
        if limit is not None and len(chosen) >= limit:
            break
        if not state.runnable(unit, settings.retry_failed):
            continue
        if fits(state, unit, left_s, settings=settings):
            chosen.append(unit)
            left_s -= min(state.needed_s(unit), settings.cell_timeout_s)
    return chosen


def fits(state: KitState, unit: Unit, left_s: float, *, settings: WindowSettings) -> bool:
    """Whether `unit` may start with `left_s` of the budget left: its need (at most the cell timeout) and a unit's
    overhead."""
    return left_s - cells.UNIT_OVERHEAD_S >= min(state.needed_s(unit), settings.cell_timeout_s)


def first_wave(state: KitState, units: list[Unit], left_s: float, *, settings: WindowSettings) -> list[Unit]:
    """The units a window's first wave starts ahead, while preflight runs: the first unit expected to run with
    `left_s` left once the GPU checks are done, as run_units would choose it, and the `--prefetch` predicted after it
    (at most --max-units in all)."""
    if settings.max_units is not None and settings.max_units < 1:
        return []
    pending = state.pending(units, settings.retry_failed)
    for number, unit in enumerate(pending, 1):
        if state.runnable(unit, settings.retry_failed) and fits(state, unit, left_s, settings=settings):
            left_after = left_s - cells.UNIT_OVERHEAD_S - min(state.needed_s(unit), settings.cell_timeout_s)
            limit = settings.prefetch if settings.max_units is None else min(settings.prefetch,
                                                                             settings.max_units - 1)
            return [unit] + predicted(state, pending[number:], left_after, settings=settings, limit=max(limit, 0))
    return []


def run_units(folders: KitFolders, state: KitState, units: list[Unit], deadline: Deadline, *,
              settings: WindowSettings, exported, ahead: Ahead) -> int:
    """Run pending units in order while they fit (see the module's doc), the next ones' imports ahead
    (fwbench.kit.ahead) unless --prefetch 0; returns how many started. The window stops what `ahead` still holds."""
    ran, passed_over = 0, []
    pending = state.pending(units, settings.retry_failed)
    for number, unit in enumerate(pending, 1):
        if settings.max_units is not None and ran >= settings.max_units:
            break
        if not state.runnable(unit, settings.retry_failed):  # its previous repeat failed in this window
            ahead.cancel(unit)
            continue
        left = deadline.left() - cells.UNIT_OVERHEAD_S
        need = min(state.needed_s(unit), settings.cell_timeout_s)
        if left < need:
            passed_over.append(f"{unit.key} ({need:.0f} s)")
            ahead.cancel(unit)
            continue
        timeout_s = min(settings.cell_timeout_s, left)
        # Unit N of the M pending at the window's start, and the device minutes the rest would take by the
        # plan's estimates (after a first run, its wall time): what `run` shows as cell N of M.
        rest_s = sum(min(state.needed_s(later), settings.cell_timeout_s) for later in pending[number:])
        log(f"{unit.key}: running (estimated {need:.0f} s, timeout {timeout_s:.0f} s; unit {number} of "
            f"{len(pending)} pending, about {rest_s / 60:.0f} device minutes after it)")
        if settings.prefetch:
            limit = None if settings.max_units is None else settings.max_units - ran - 1
            ahead.refill(unit, predicted(state, pending[number:], left - need, settings=settings, limit=limit))
            started, row = ahead.run(unit, timeout_s)
            began_at, wall_s, ahead_s = started.began_at, time.monotonic() - started.begun, started.ahead_s
        else:
            began_at, begun, ahead_s = datetime.now(timezone.utc), time.monotonic(), 0.0
            row = cells.run_unit(unit, folders, timeout_s)
            wall_s = time.monotonic() - begun
        status = row["status"] if row else "no-row"
        if status == "timeout" and timeout_s < settings.cell_timeout_s:
            remove_unit_row(folders, unit)
            status = BUDGET_CUT
        ms = row.get("ms_per_step") if row and status == "ok" else None
        state.record(unit, status, wall_s, ms, began_at=began_at.isoformat(timespec="seconds"),
                     breakdown=breakdown.of_unit(row, began_at=began_at, wall_s=wall_s), ahead_s=ahead_s)
        write_atomically(state.path, state.to_json())
        message = ((row or {}).get("error_message") or "see kit.log").splitlines()[0][:160]
        reason = "" if status == "ok" else f": {message}"
        log(f"{unit.key}: {status} in {wall_s:.0f} s" + (f" ({ahead_s:.0f} s of it ahead)" if ahead_s else "")
            + (f", {ms:.2f} ms/step" if ms else "") + reason)
        if status == BUDGET_CUT:
            log(f"{unit.key}: cut by this window's budget, not by its own timeout: its row is removed and it runs "
                "first in the next window")
        ran += 1
        export_begun = time.monotonic()
        exported()
        # The export after the unit is part of what the unit cost the window.
        state.units[unit.key]["breakdown"] = breakdown.of_unit(row, began_at=began_at, wall_s=wall_s,
                                                               export_s=time.monotonic() - export_begun)
    if passed_over:
        log(f"not started, too little of the window left: {len(passed_over)} units, the first "
            + ", ".join(passed_over[:3]))
    return ran


def timed_seconds(state: KitState, window: int) -> float:
    """The timed steps' seconds of a window's units (ms_per_step x timed_steps)."""
    return sum((entry.get("breakdown") or {}).get("timed_s") or 0.0 for entry in state.units.values()
               if entry.get("window") == window)


def run_window_units(folders: KitFolders, plan: PlanSettings, state: KitState, deadline: Deadline, *,
                     settings: WindowSettings, unrunnable: dict[str, str], gpus: int, exported,
                     ahead: Ahead) -> None:
    units, left_out = plan_units(plan, gpus=gpus, broken_stacks=unrunnable)
    for line in left_out:
        log(f"left out: {line}")
    ahead.keep_only({unit.key for unit in units})  # a unit of a stack preflight found broken, started ahead
    log(scaling_note(gpus, plan.variants, plan.tasks))
    shortened = {task: n for task, n in plan.steps_by_task().items() if n is not None}
    if shortened:
        log("shortened timed windows (a cell identity of their own): "
            + ", ".join(f"{task} {n} steps" for task, n in shortened.items()))
    log(f"{state.counts_line(units, settings.retry_failed)}; {deadline.left():.0f} s left for units")
    ran = run_units(folders, state, units, deadline, settings=settings, exported=exported, ahead=ahead)
    left_units = [unit for unit in units if state.status(unit) in (None, BUDGET_CUT)]
    log(f"ran {ran} units this window; {state.counts_line(units, settings.retry_failed)}; about "
        f"{sum(state.needed_s(unit) for unit in left_units) / 60:.0f} device minutes left"
        + (" (run another window to continue)" if left_units else ""))


def window(folders: KitFolders, plan: PlanSettings, settings: WindowSettings) -> int:
    """One GPU window. Whatever fails, the report is tried and the files are exported; 0 when the window ran to its
    end (cells may have failed: their rows say so), 1 when a step of the kit itself failed."""
    started, began_at = time.monotonic(), datetime.now(timezone.utc)
    folders.out.mkdir(parents=True, exist_ok=True)
    kit_log.LOG_PATH = folders.log
    # Units and checks stop starting at this point; the reserve is for the report and export.
    deadline = Deadline(settings.budget_s - settings.reserve_s)
    code, checks, state = 0, None, None
    ahead = Ahead(folders, depth=0 if settings.skip_units else settings.prefetch,
                  cell_timeout_s=settings.cell_timeout_s)

    def exported() -> None:
        state.window_wall(time.monotonic() - started)
        write_atomically(state.path, state.to_json())
        export(folders, settings.export)

    def stop(signum, _frame):
        raise KitError(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    commit = source_revision(folders.source).get("git_revision")
    try:
        if settings.restore != "none" and not (settings.restore == "auto" and folders.state.is_file()):
            restore_into(folders, settings.restore, settings.results)
        state = KitState(folders.state, commit, plan.preset)
        log(f"window: budget {settings.budget_s:.0f} s ({settings.reserve_s:.0f} s of it kept for the report and "
            f"export); {sum(1 for e in state.units.values() if e.get('status') == 'ok')} units done before")
        state.begin_window(began_at.isoformat(timespec="seconds"), None)

        def start_first_wave(gpus: int) -> None:
            # Broken stacks are not known yet: a unit of one is stopped once preflight has found it.
            checks_s = 0.0 if settings.skip_checks else min(settings.checks_s, deadline.left())
            wave = first_wave(state, plan_units(plan, gpus=gpus)[0], deadline.left() - checks_s, settings=settings)
            if ahead.depth and wave:
                ahead.start_wave(wave)
                log(f"started ahead, beside preflight: {', '.join(unit.key for unit in wave)}")

        unrunnable, gpus = preflight(folders, plan, doctor_timeout_s=settings.doctor_timeout_s, state=state,
                                     commit=commit, meanwhile=start_first_wave)
        state.windows[-1]["gpu"] = window_gpu(folders)
        exported()
        # The checks over rows (finish) run in every window, --skip-checks or not: they run no cell, and a row no
        # window checked (a CPU fallback, another GPU) would reach the results page unchecked.
        share = Deadline(min(settings.checks_s, deadline.left()))
        checks = Checks(folders, preset=plan.preset, task=settings.check_task, cell_timeout_s=settings.cell_timeout_s,
                        state=state, time_left=share.left, on_line=exported)
        if settings.skip_checks:
            log("GPU cell checks skipped (--skip-checks); the checks over rows run at the window's end")
        else:
            log(f"GPU checks on {'a GPU' if checks.gpu else 'no GPU (GPU-only checks SKIP)'}, at most "
                f"{min(settings.checks_s, deadline.left()):.0f} s")
            importing = ahead.wait_held(min(HOLD_BEFORE_CHECKS_S, deadline.left()))
            if importing:
                log(f"started ahead, still importing as the GPU checks begin (their rows may be busy): "
                    f"{', '.join(importing)}")
            checks.run_cell_checks(set(settings.recheck) if settings.recheck else None)
        if not settings.skip_units:
            run_window_units(folders, plan, state, deadline, settings=settings, unrunnable=unrunnable, gpus=gpus,
                             exported=exported, ahead=ahead)
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the report is tried and the files come back
        code = 1
        log(f"window stopped early: {type(exc).__name__}: {str(exc)[:400]}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ahead.cancel_all()  # units started ahead that did not run: held, they wrote no row
        code = finish(folders, state, checks, settings=settings, since=began_at, deadline=deadline,
                      started=started, code=code)
        kit_log.LOG_PATH = None
    return code


def finish(folders: KitFolders, state: KitState | None, checks: Checks | None, *, settings: WindowSettings,
           since: datetime, deadline: Deadline, started: float, code: int) -> int:
    """The window's end, whatever happened before: the checks over rows, the report, the state and the export."""
    if checks is not None:
        try:
            checks.run_row_checks(kit_rows(folders), since=since)
        except Exception as exc:  # noqa: BLE001
            code = 1
            log(f"row checks failed: {type(exc).__name__}: {exc}")
    try:
        aggregate(folders, timeout_s=settings.reserve_s + deadline.left() - 5)
    except Exception as exc:  # noqa: BLE001
        code = 1
        log(f"no report: {exc}")
    wall_s = time.monotonic() - started
    timed = "" if state is None else (f"; timed steps {timed_seconds(state, len(state.windows)):.1f} s = "
                                      f"{breakdown.timed_fraction(timed_seconds(state, len(state.windows)), wall_s)} "
                                      "of the window")
    log(f"window done in {wall_s:.0f} s{timed}" + ("" if code == 0 else " (with errors above)"))
    try:
        if state is not None:
            state.window_wall(wall_s)
            write_atomically(state.path, state.to_json())
        export(folders, settings.export)
        if settings.export:
            log(f"exported to {settings.export}")
            export(folders, settings.export)  # once more, so that kit.log holds the line above
    except Exception as exc:  # noqa: BLE001
        code = 1
        print(f"error: export failed: {exc}", file=sys.stderr)
    return code
