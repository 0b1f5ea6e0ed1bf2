"""The next units' imports, ahead: while one unit runs, the next few are started as held cells
(fwbench.harness.hold), each a fresh `fwbench run` whose cell process loads its inputs, imports its framework and
workload, and waits, touching no device, until its turn. Its imports are then off the window's clock.

What each cell measures does not change: a released cell waits, before its set-up, until every unit started ahead
is held (or has ended), so its set-up, first step, warm-up and timed steps run beside held processes only, and the
contention probe confirms it in each timed window (a held neighbour that used CPU is competition: a busy row).

Units are started ahead in waves: when the unit about to run has no started unit after it, up to `depth` of the
units predicted to run next (those that fit what the budget will have left, in order) are started together, and
that unit's set-up waits for their imports. The first wave (the first unit and `depth` after it) starts while the
window's preflight runs, and holds before any GPU check's cell starts. A unit started ahead that then does not run
(the window ran short, or its previous repeat failed) is stopped: held, it has written no row.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fwbench.engines import prepare_child
from fwbench.harness import hold
from fwbench.kit.cells import run_argv
from fwbench.kit.install import kit_environment
from fwbench.kit.layout import REPO, KitFolders
from fwbench.kit.rows import unit_row
from fwbench.kit.unit import Unit

# How long a unit may take to hold at its turn (started ahead, its imports may still be under way), at most its
# timeout, before the kit stops it; its own timeout covers the rest.
HOLD_PATIENCE_S = 300.0


@dataclass
class Started:
    """A unit's `fwbench run`, started (ahead of its turn or at it) as a held cell."""

    unit: Unit
    process: subprocess.Popen
    folder: Path  # its hold folder
    log_path: Path  # its output, appended to kit.log when it ends
    argv: list[str]
    began_at: datetime
    begun: float  # monotonic
    turn: float | None = None  # monotonic: when its turn came (the unit before it had ended)
    waiter: threading.Thread | None = field(default=None, repr=False)

    @property
    def ahead_s(self) -> float:
        """Seconds from its start to its turn: beside the unit before it, off the window's clock (0 for a unit
        started at its turn; from its turn on, waiting for it to hold is on the clock)."""
        return 0.0 if self.turn is None else max(0.0, self.turn - self.begun)


class Ahead:
    """The units started ahead in one window (see the module's doc); depth 0: each unit starts at its turn."""

    def __init__(self, folders: KitFolders, *, depth: int, cell_timeout_s: float):
        self.folders, self.depth, self.cell_timeout_s = folders, max(depth, 0), cell_timeout_s
        self.started: dict[str, Started] = {}
        self.root = folders.out / "held"

    def start(self, unit: Unit) -> Started:
        folder = self.root / unit.key
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        argv = run_argv(unit, rows=self.folders.rows, data=self.folders.data, timeout_s=self.cell_timeout_s)
        environment = kit_environment(self.folders)
        environment.setdefault("FWBENCH_HOME", str(self.folders.home))
        environment[hold.HOLD_ENV] = str(folder)
        log_path = folder / "output.log"
        with open(log_path, "wb") as output:
            # Its own session, so that stopping it stops its cell too; it dies with the kit (PR_SET_PDEATHSIG).
            process = subprocess.Popen(argv, env=environment, stdout=output, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
                                       preexec_fn=prepare_child(os.getpid()))
        started = Started(unit, process, folder, log_path, argv, datetime.now(timezone.utc), time.monotonic())
        # Marks the folder `ended` when the run exits, so that no neighbour waits for a unit that will never hold.
        started.waiter = threading.Thread(target=lambda: (process.wait(), hold.mark_ended(folder)), daemon=True)
        started.waiter.start()
        self.started[unit.key] = started
        return started

    def refill(self, running: Unit, predicted: list[Unit]) -> None:
        """Before `running` is released: when no unit after it has been started, start up to `depth` of `predicted`
        (the units expected to run after it, in order)."""
        if not any(key != running.key for key in self.started):
            self.start_wave(predicted[:self.depth])

    def start_wave(self, units: list[Unit]) -> None:
        """Start `units` now, ahead of their turns (depth 0: none): a wave, the first of them beside preflight."""
        if self.depth == 0:
            return
        for unit in units:
            if unit.key not in self.started:
                self.start(unit)

    def keep_only(self, keys: set[str]) -> None:
        """Stop the units started ahead that are not among `keys` (their stack's imports failed in preflight)."""
        for key in [key for key in self.started if key not in keys]:
            self.cancel(self.started[key].unit)

    def wait_held(self, patience_s: float) -> list[str]:
        """Wait, at most `patience_s`, until every unit started ahead holds or has ended: before the GPU checks' cells,
        which do not wait for neighbours as a released unit does. Returns the keys of those still importing."""
        give_up = time.monotonic() + patience_s
        while True:
            importing = [key for key, started in self.started.items()
                         if hold.state(started.folder) not in ("held", "ended")]
            if not importing or time.monotonic() >= give_up:
                return importing
            time.sleep(0.05)

    def run(self, unit: Unit, timeout_s: float) -> tuple[Started, dict | None]:
        """Run `unit` now (started ahead, or started here): release it with `timeout_s` from its release and the
        units started ahead as the neighbours its set-up waits for; wait for it; its output to kit.log; its row."""
        turn = time.monotonic()
        started = self.started.get(unit.key) or self.start(unit)
        started.turn = turn
        neighbours = [other.folder for key, other in self.started.items() if key != unit.key]
        outcome = hold.release(started.folder, timeout_s=timeout_s, wait_for=neighbours,
                               patience_s=min(HOLD_PATIENCE_S, timeout_s))
        if outcome == "starting":  # it never held: stopped, and its output says why
            _stop(started.process)
        started.process.wait()
        self._append_log(started)
        self.started.pop(unit.key, None)
        _remove(started)
        return started, unit_row(self.folders.rows, unit)

    def cancel(self, unit: Unit) -> None:
        """A unit started ahead that will not run in this window: stopped (held, it has written no row)."""
        started = self.started.pop(unit.key, None)
        if started is None:
            return
        _stop(started.process)
        self._append_log(started, note="started ahead, stopped: it does not run in this window")
        _remove(started)

    def cancel_all(self) -> None:
        for key in list(self.started):
            self.cancel(self.started[key].unit)

    def _append_log(self, started: Started, note: str | None = None) -> None:
        try:
            output = started.log_path.read_text(errors="replace")
        except OSError:
            output = ""
        with open(self.folders.log, "a") as log:
            log.write(f"\n$ {' '.join(started.argv)}\n" + (f"({note})\n" if note else "") + output)


def _remove(started: Started) -> None:
    """Its hold folder, once its waiter has marked it ended: a mark written while the folder was being removed left
    the folder behind."""
    if started.waiter is not None:
        started.waiter.join()
    shutil.rmtree(started.folder, ignore_errors=True)


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
