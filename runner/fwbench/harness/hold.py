"""A held cell: a cell process started ahead of its turn that loads its inputs and imports its framework and workload,
then waits, touching no device, until it is released. The kit starts the next units this way while one runs, so
that their imports are not on a lent GPU's clock (docs/gpu-kit.md, "The next units' imports, ahead").

What a cell measures does not change. Its neighbours' work never overlaps its measured phases: before its set-up a
released cell waits until every neighbour it was told of is held (or has ended), so its set-up, first step, warm-up,
timed steps and what it describes after them run beside held processes only, which use no CPU and no GPU while held.
The contention probe checks that in every timed window (a held neighbour that used CPU, or was released during the
window, is competition) and the row says how many held neighbours it met and how long its set-up waited for them.

The protocol, through the files of one folder per held cell (FWBENCH_HOLD_DIR in the cell's environment):

  held.json      the cell: it is held (its pid), signal SIGUSR1 releases it
  release.json   the launcher, before the signal: the cell's timeout from its release, and the folders of the
                 neighbours its set-up waits for
  released.json  the cell: released (the seconds it was held); a cell holds once, whatever runs it again
  ended          the launcher: the process ended (possibly before it held)
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from fwbench.core.atomic import write_atomically
from fwbench.core.processes import alive, environment_variable

HOLD_ENV = "FWBENCH_HOLD_DIR"
HELD, RELEASE, RELEASED, ENDED = "held.json", "release.json", "released.json", "ended"
RELEASE_SIGNAL = signal.SIGUSR1
NEIGHBOUR_WAIT_MAX_S = 180.0  # a neighbour that never holds does not stall a cell past this; the row says so
_POLL_S = 0.05
# A held process's CPU over a timed window: at most this many clock ticks (its own and its threads') still count
# as held; more and it competed.
HELD_MAX_TICKS = 2


def hold_dir() -> Path | None:
    value = os.environ.get(HOLD_ENV)
    return Path(value) if value else None


def state(folder: Path) -> str:
    """'ended', 'released', 'held' or 'starting' (not held yet: starting, loading or importing)."""
    if (folder / ENDED).exists():
        return "ended"
    if (folder / RELEASED).exists():
        return "released"
    if (folder / HELD).exists():
        return "held"
    return "starting"


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def held_pid(folder: Path) -> int | None:
    """The pid of the cell held in `folder`; None unless it is held now."""
    if state(folder) != "held":
        return None
    pid = _read(folder / HELD).get("pid")
    return pid if isinstance(pid, int) else None


# -- the cell's side ---------------------------------------------------------------------------------------------

def asked_to_hold() -> bool:
    """FWBENCH_HOLD_DIR is set and this folder's cell has not held before (a cell holds once, whatever runs it
    again in the same folder)."""
    folder = hold_dir()
    return folder is not None and not (folder / RELEASED).exists()


def block_release_signal() -> None:
    """Block the release signal in this thread, when asked to hold: call it before anything starts a thread. The
    kit's signal is sent to the process, which the kernel delivers to any thread not blocking it, whose default
    action ends the whole process; threads inherit the mask of the thread that starts them, so blocked here it stays
    pending until the main thread's sigwait takes it."""
    if asked_to_hold():
        signal.pthread_sigmask(signal.SIG_BLOCK, {RELEASE_SIGNAL})


def hold_here() -> float | None:
    """Hold this process until it is released: None when it was not asked to (asked_to_hold); else the seconds it
    was held."""
    if not asked_to_hold():
        return None
    folder = hold_dir()
    start = time.perf_counter()
    # Blocked before held.json exists, so a release sent right after it is read stays pending for sigwait (the
    # cell blocked it at its start already, block_release_signal, so that no thread takes it).
    signal.pthread_sigmask(signal.SIG_BLOCK, {RELEASE_SIGNAL})
    try:
        write_atomically(folder / HELD, json.dumps({"pid": os.getpid()}))
        signal.sigwait({RELEASE_SIGNAL})
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {RELEASE_SIGNAL})
    held_s = round(time.perf_counter() - start, 4)
    write_atomically(folder / RELEASED, json.dumps({"pid": os.getpid(), "held_s": held_s}))
    return held_s


def neighbours() -> list[Path]:
    """The folders of the neighbours this released cell's set-up waits for (release.json)."""
    folder = hold_dir()
    if folder is None:
        return []
    return [Path(path) for path in _read(folder / RELEASE).get("wait_for") or []]


def wait_for_neighbours(max_s: float = NEIGHBOUR_WAIT_MAX_S) -> dict[str, Any] | None:
    """Before the set-up: wait until every neighbour is held or has ended, at most `max_s`. None when there are
    none; else what the row records: how many, the seconds waited and those still not held (they may then compete
    with the measured phases; the contention probe judges the timed window)."""
    folders = neighbours()
    if not folders:
        return None
    start = time.perf_counter()
    waiting = [folder for folder in folders if not _settled(folder)]
    while waiting and time.perf_counter() - start < max_s:
        time.sleep(_POLL_S)
        waiting = [folder for folder in waiting if not _settled(folder)]
    return {"neighbours": len(folders), "waited_s": round(time.perf_counter() - start, 3),
            "not_held": [folder.name for folder in waiting]}


def _settled(folder: Path) -> bool:
    """A neighbour that cannot compete: held, ended, or released and gone."""
    found = state(folder)
    return found in ("held", "ended") or (found == "released" and not _alive_in(folder))


def _alive_in(folder: Path) -> bool:
    """Whether the process that held in `folder` is still running (a released neighbour competes until it ends)."""
    pid = _read(folder / RELEASED).get("pid")
    return isinstance(pid, int) and alive(pid)


def release_timeout_s(folder: Path, default: float) -> float:
    """The timeout the launcher gave the cell from its release (release.json), at most `default`."""
    given = _read(folder / RELEASE).get("timeout_s")
    return min(float(given), default) if isinstance(given, (int, float)) and given > 0 else default


# -- the launcher's side ------------------------------------------------------------------------------------------

def release(folder: Path, *, timeout_s: float, wait_for: list[Path], patience_s: float) -> str:
    """Release the cell of `folder` once it holds: 'released', or 'ended' (it ended first), or 'starting' (it did not
    hold within `patience_s`; not released)."""
    write_atomically(folder / RELEASE, json.dumps({"timeout_s": timeout_s, "wait_for": [str(p) for p in wait_for]}))
    end = time.monotonic() + patience_s
    while True:
        found = state(folder)
        if found in ("ended", "released"):
            return found
        pid = held_pid(folder)
        if pid is not None:
            try:
                os.kill(pid, RELEASE_SIGNAL)
            except ProcessLookupError:
                return "ended"
            return "released"
        if time.monotonic() > end:
            return "starting"
        time.sleep(_POLL_S)


def mark_ended(folder: Path) -> None:
    try:
        (folder / ENDED).touch()
    except OSError:
        pass


# -- what the contention probe reads --------------------------------------------------------------------------------

def process_hold_dir(pid: int) -> Path | None:
    """The hold folder in process `pid`'s environment; None: not a held-capable cell, or unreadable."""
    value = environment_variable(pid, HOLD_ENV)
    return Path(value) if value else None


def is_held(pid: int) -> bool:
    """Whether cell process `pid` is held now (its folder's held.json names it, and it is not released)."""
    folder = process_hold_dir(pid)
    return folder is not None and held_pid(folder) == pid
