"""Progress of `fwbench run` and `fwbench sweep`: `cell N of M`, the time elapsed and an estimate of what is left.

Each planned cell gets an estimate of its wall time before the run starts (estimate_seconds), and where it came from:

  history   the median wall time of the earlier rows of the same cell identity in a results history store
            (`--history STORE`, else $FWBENCH_HISTORY when that folder exists; docs/history.md). A row's wall time is
            its cell process as the runner timed it (extra.process_s), else the row's own wall_s.
  registry  fwbench.kit.estimates.estimate_s: the kit's planning estimate from the registry (start-up per stack,
            build per model, published step times at `paper`, a nominal step elsewhere).
  unknown   neither (NaN).

After each finished cell, what is left is the sum of the remaining cells' estimates, each scaled by how the finished
cells' estimates of its source came true (observed / estimated; the pooled ratio where none of that source has
finished yet), shared among the cells that run at once. Cells skipped by --resume count as done, with no time.

On a terminal the display is a transient Rich progress bar with each cell's result line printed above it; elsewhere (a
log, CI, a pipe) a plain line follows each result line:

    [3/12] 0:01:40 elapsed, about 0:05:10 left (history estimates for 9 of 9 cells left)

A failure of the display never fails a run: the display turns itself off and the result lines go on.
This module lives in the CLI layer: it reads the history store (fwbench_aggregator) and the kit's estimates.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from fwbench.core.identity import CellIdentity, held_equal
from fwbench.kit.breakdown import number_or_none

HISTORY, REGISTRY, UNKNOWN = "history", "registry", "unknown"
STORE_ENV = "FWBENCH_HISTORY"  # fwbench_aggregator.history.STORE_ENV (not imported: that module loads pyarrow)
# Identity settings the engine and the host fill in when a cell is placed: a finished cell's spec is matched back to
# its planned one without them.
PLACEMENT = ("pin_set", "image_variant", "device_model")


# --- estimates ------------------------------------------------------------------------------------------------------

def estimate_store(history: Path | None) -> Path | None:
    """The store estimates are read from: --history STORE if given, else $FWBENCH_HISTORY if set and the folder
    exists (never created just to be read)."""
    if history is not None:
        return history if Path(history).is_dir() else None
    env = os.environ.get(STORE_ENV)
    return Path(env) if env and Path(env).is_dir() else None


def row_wall_s(row) -> float | None:
    """A row's cell-process wall time: the runner's timing of the whole process (extra.process_s), else the wall
    time the cell process measured itself (wall_s); None when the row has neither."""
    from fwbench.core.results import extra_of

    try:
        extra = extra_of(row.get("extra"))
    except ValueError:
        extra = {}
    for value in ((extra or {}).get("process_s") if isinstance(extra, dict) else None, row.get("wall_s")):
        number = number_or_none(value)
        if number is not None and number > 0:
            return number
    return None


def history_walls(store: Path, stacks: Iterable[str] | None = None,
                  tasks: Iterable[str] | None = None) -> dict[CellIdentity, list[float]]:
    """Cell identity -> the wall times of its stored rows (ok rows only, where the cell has any)."""
    from fwbench_aggregator import history

    if not history.store_files(Path(store)):
        return {}
    frame = history.query(Path(store), stacks=sorted(set(stacks or [])) or None, tasks=sorted(set(tasks or [])) or None)
    return walls_of_rows(frame.to_dict("records"))


def walls_of_rows(rows: Iterable[dict]) -> dict[CellIdentity, list[float]]:
    ok: dict[CellIdentity, list[float]] = {}
    other: dict[CellIdentity, list[float]] = {}
    for row in rows:
        wall = row_wall_s(row)
        if wall is None:
            continue
        (ok if row.get("status") == "ok" else other).setdefault(CellIdentity.of_row(row), []).append(wall)
    return {**other, **ok}  # a cell with ok rows is estimated from them alone


def registry_estimate(spec) -> float:
    """The kit's planning estimate of one cell (fwbench.kit.estimates.estimate_s), in seconds."""
    from fwbench.kit.estimates import estimate_s
    from fwbench.kit.unit import Unit

    return float(estimate_s(Unit(spec, model=getattr(spec, "model_file", None))))


def estimate_seconds(specs, store: Path | None,
                     walls: dict[CellIdentity, list[float]] | None = None) -> list[tuple[float, str]]:
    """Per planned cell spec, (estimated wall seconds, "history" | "registry" | "unknown"); see the module's
    docstring. `walls` (history_walls) stands in for reading the store. A store that cannot be read gives no history
    estimates: a run never fails for an estimate."""
    from fwbench_aggregator.stats import median

    specs = list(specs)
    if walls is None:
        walls = {}
        if store is not None and specs:
            try:
                walls = history_walls(store, [s.stack for s in specs], [s.task for s in specs])
            except Exception:  # noqa: BLE001 - an unreadable store: registry estimates instead
                walls = {}
    found = []
    for spec in specs:
        known = walls.get(CellIdentity.of_spec(spec)) if walls else None
        if known:
            found.append((median(known), HISTORY))
            continue
        try:
            found.append((registry_estimate(spec), REGISTRY))
        except Exception:  # noqa: BLE001 - a task or stack the registry cannot estimate
            found.append((math.nan, UNKNOWN))
    return found


def estimates_never_failing(specs, store: Path | None) -> list[tuple[float, str]]:
    """estimate_seconds, or "unknown" for every cell if estimating fails at all (a run never fails for it)."""
    specs = list(specs)
    try:
        return estimate_seconds(specs, store)
    except Exception:  # noqa: BLE001
        return [(math.nan, UNKNOWN)] * len(specs)


def placed_for_run(specs, runner, slots) -> list:
    """The planned specs with the identity the engine will give them (matrix.placed on the first slot), so that they
    match stored rows of the same cell; the specs as planned if the engine cannot say."""
    from fwbench.engines import matrix

    try:
        slot = slots[0]
        model = runner.device_model(slot.gpu)
        return [matrix.placed(spec, runner, slot, device_model=model, run_id="") for spec in specs]
    except Exception:  # noqa: BLE001
        return list(specs)


def placed_for_sweep(specs, point_label: str, pin_set: str, device: str) -> list:
    """A sweep point's specs as fwbench.engines.sweep.run_point places them (its point_specs)."""
    try:
        from fwbench.core import sweep as points_core
        from fwbench.engines.sweep import point_specs

        return point_specs(specs, points_core.parse_label(point_label), pin_set, device)[1]
    except Exception:  # noqa: BLE001 - an estimate never fails a sweep: unplaced specs find no history
        return [replace(spec, sweep_point=point_label) for spec in specs]


# --- what is left ---------------------------------------------------------------------------------------------------

def clock_text(seconds: float) -> str:
    """H:MM:SS."""
    return str(dt.timedelta(seconds=max(0, int(round(seconds)))))


@dataclass
class Left:
    seconds: float | None  # None: nothing to go on (no estimate of any cell left)
    how: str  # which estimates, and whether scaled


@dataclass
class ProgressState:
    """The arithmetic of the progress display, with no console: estimates per planned cell, which are done and how
    long each took."""

    estimates: list[tuple[float, str]]
    keys: list[Any] | None = None  # per planned cell, the key a finished cell is matched by (plan_key)
    at_once: int = 1
    done: dict[int, float | None] = field(default_factory=dict)  # index -> wall seconds (None: skipped, no time)

    @property
    def total(self) -> int:
        return len(self.estimates)

    @property
    def finished(self) -> int:
        return len(self.done)

    def index_of(self, key: Any = None) -> int | None:
        """The first planned cell not done yet with this key (any not done when none has it)."""
        pending = [i for i in range(self.total) if i not in self.done]
        if not pending:
            return None
        if key is not None and self.keys is not None:
            for i in pending:
                if self.keys[i] == key:
                    return i
        return pending[0]

    def mark(self, index: int | None, wall_s: float | None) -> None:
        if index is not None:
            self.done[index] = wall_s

    def ratios(self) -> tuple[dict[str, float], float | None, int]:
        """Observed / estimated per source, pooled, and how many finished cells they rest on."""
        sums: dict[str, list[float]] = {}
        for index, wall in self.done.items():
            estimate, source = self.estimates[index]
            if wall is None or not _usable(estimate):
                continue
            pair = sums.setdefault(source, [0.0, 0.0])
            pair[0] += wall
            pair[1] += estimate
        observed = sum(pair[0] for pair in sums.values())
        estimated = sum(pair[1] for pair in sums.values())
        count = sum(1 for i, w in self.done.items() if w is not None and _usable(self.estimates[i][0]))
        per_source = {source: pair[0] / pair[1] for source, pair in sums.items()}
        return per_source, (observed / estimated if estimated > 0 else None), count

    def left(self) -> Left:
        pending = [i for i in range(self.total) if i not in self.done]
        if not pending:
            return Left(0.0, "all cells done")
        per_source, pooled, count = self.ratios()
        walls = [w for w in self.done.values() if w is not None]
        by_source: dict[str, int] = {}
        total, without = 0.0, 0
        for i in pending:
            estimate, source = self.estimates[i]
            if not _usable(estimate):
                without += 1
                continue
            by_source[source] = by_source.get(source, 0) + 1
            total += estimate * per_source.get(source, pooled if pooled is not None else 1.0)
        if without and walls:
            total += without * sum(walls) / len(walls)
        parts = [f"{source} estimates for {by_source[source]}" for source in (HISTORY, REGISTRY) if source in by_source]
        how = (", ".join(parts) or "no estimates") + f" of {_cells(len(pending))} left"
        if without:
            how += (f"; {without} without an estimate, counted at the mean cell so far" if walls
                    else f"; {without} without an estimate, not counted")
        if pooled is not None and by_source:
            how += f"; scaled {_ratio_text(per_source, pooled)}, observed/estimated over {_cells(count)} done"
        if self.at_once > 1:
            how += f"; {self.at_once} cells at once"
        if not by_source and not (without and walls):
            return Left(None, how)
        return Left(total / max(1, self.at_once), how)

    def line(self, elapsed_s: float) -> str:
        """The plain progress line: `[3/12] 0:01:40 elapsed, about 0:05:10 left (history estimates for 9 of 9 ...)`."""
        head = f"[{self.finished}/{self.total}] {clock_text(elapsed_s)} elapsed"
        left = self.left()
        if left.seconds == 0.0 and self.finished >= self.total:
            return f"{head}, all {self.total} cells done"
        if left.seconds is None:
            return f"{head}, time left unknown ({left.how})"
        return f"{head}, about {clock_text(left.seconds)} left ({left.how})"


def _cells(count: int) -> str:
    return f"{count} cell" if count == 1 else f"{count} cells"


def _ratio_text(per_source: dict[str, float], pooled: float) -> str:
    if len(per_source) <= 1:
        return f"x{pooled:.2f}"
    return ", ".join(f"{source} x{ratio:.2f}" for source, ratio in sorted(per_source.items()))


def _usable(estimate: float) -> bool:
    return estimate is not None and not math.isnan(estimate) and estimate > 0


def plan_key(spec) -> tuple:
    """What a finished cell's spec is matched to its planned one by: its identity less the placement, and its
    repeat."""
    return held_equal(CellIdentity.of_spec(spec), PLACEMENT), spec.repeat


# --- the display ----------------------------------------------------------------------------------------------------

class RunProgress:
    """The progress display of a run: `started(spec)` and `finished(result)` are matrix.run_matrix's callbacks
    (never called concurrently). `finished` prints the cell's result line (fwbench.cli.common.result_line) and the
    progress; `pause()` takes a live display down (a sweep prepares its next point's environments meanwhile)."""

    def __init__(self, specs, estimates: list[tuple[float, str]], console, *, at_once: int = 1,
                 clock: Callable[[], float] = time.monotonic, live: bool | None = None):
        keys = None
        try:
            keys = [plan_key(spec) for spec in specs]
        except Exception:  # noqa: BLE001
            keys = None
        self.state = ProgressState(list(estimates), keys, at_once=max(1, at_once))
        self.console = console
        self.clock = clock
        self.began = clock()
        self.live = console.is_terminal if live is None else live
        self.running: dict[int, tuple[str, float]] = {}  # id(spec) -> its name, when it started
        self._progress = None
        self._bar = None
        self._broken = False

    # context manager: the live display goes down on the way out, whatever happened
    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.pause()

    def started(self, spec) -> None:
        from fwbench.cli.common import cell_name

        self._safely(lambda: self.running.__setitem__(id(spec), (cell_name(spec), self.clock())))
        self._safely(self._show)

    def finished(self, result) -> None:
        from fwbench.cli.common import result_line

        line = result_line(result)
        try:
            self._count(result)
        except Exception:  # noqa: BLE001 - a cell the progress cannot place is not the run's failure
            pass
        if self.live and not self._broken and self._safely(self._start):
            printed = self._safely(lambda: self._progress.console.print(line))
            self._safely(self._show)
            if printed:
                return
        self.console.print(line)
        if not self.live or self._broken:
            self._safely(lambda: self.console.print(self.state.line(self.clock() - self.began), markup=False,
                                                    highlight=False))

    def _count(self, result) -> None:
        """Mark the finished cell's planned one done, with its wall time (a skipped cell: none)."""
        began = self.running.pop(id(result.spec), None)
        wall = None
        if not result.skipped:
            wall = row_wall_s(result.row or {})
            if wall is None and began is not None:
                wall = self.clock() - began[1]
        self.state.mark(self.state.index_of(plan_key(result.spec)), wall)

    def settle(self, indices: Iterable[int]) -> None:
        """Count these planned cells as done, with no time (a sweep point whose environment could not be made
        writes its rows without running them)."""
        for index in indices:
            if index not in self.state.done:
                self.state.mark(index, None)

    def pause(self) -> None:
        progress, self._progress, self._bar = self._progress, None, None
        if progress is not None:
            self._safely(progress.stop)

    def _start(self) -> None:
        if self._progress is not None:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[left]}"))
        progress = Progress(*columns, console=self.console, transient=True)
        self._bar = progress.add_task("cells", total=self.state.total, left="")
        progress.start()
        self._progress = progress

    def _show(self) -> None:
        if not self.live or self._broken:
            return
        self._start()
        from rich.markup import escape

        names = " | ".join(name for name, _ in self.running.values()) or "cells"
        left = self.state.left()
        text = "" if left.seconds is None or self.state.finished == 0 else f"about {clock_text(left.seconds)} left"
        self._progress.update(self._bar, description=escape(names), completed=self.state.finished,
                              left=text)

    def _safely(self, action: Callable[[], Any]) -> bool:
        """Run a display action; on any failure turn the live display off for good (the run goes on, with plain
        lines). True: it worked."""
        try:
            action()
            return True
        except Exception:  # noqa: BLE001 - a display failure never fails a run
            self._broken = True
            progress, self._progress = self._progress, None
            if progress is not None:
                try:
                    progress.stop()
                except Exception:  # noqa: BLE001
                    pass
            return False
