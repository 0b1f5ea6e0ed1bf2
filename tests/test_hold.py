"""Held cells (harness.hold): a cell started ahead of its turn holds after its imports, uses no CPU while held, is
released by its launcher, is timed from its release, and a held neighbour is not competition for a timed window
while a busy one is. Real processes throughout (no framework)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fwbench.core.spec import CellSpec
from fwbench.core.processes import cpu_ticks
from fwbench.engines import launch_process
from fwbench.harness import contention, hold

REPO = Path(__file__).resolve().parents[1]

# A cell stand-in: `fwbench.harness.cell` in its argv (other_cells finds it), holds, then optionally spins a thread.
HELD_CELL = textwrap.dedent("""
    import sys, threading, time
    from fwbench.harness import hold
    hold.block_release_signal()  # as the cell's main() does, before anything starts a thread
    if sys.argv[1] == "spin":  # a held process whose other thread keeps a core busy: not idle, so it competes
        threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()
    if sys.argv[1] == "thread":  # a thread its imports started, idle: the release must still reach the main thread
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        written = hold.write_atomically

        def write_then_dawdle(path, text):  # the release then arrives between held.json and the sigwait
            written(path, text)
            if path.name == hold.HELD:
                time.sleep(0.5)

        hold.write_atomically = write_then_dawdle
    hold.hold_here()
    time.sleep(float(sys.argv[2]))
""")


def start_held(folder: Path, *, mode: str = "idle", then_s: float = 0.0) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, hold.HOLD_ENV: str(folder),
                   "PYTHONPATH": os.pathsep.join([str(REPO / "runner"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", HELD_CELL, mode, str(then_s), "fwbench.harness.cell"],
                            env=environment)


def wait_held(folder: Path, timeout_s: float = 20.0) -> int:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        pid = hold.held_pid(folder)
        if pid is not None:
            return pid
        time.sleep(0.02)
    raise AssertionError(f"{folder} never held")


def test_a_held_cell_waits_using_no_cpu_until_released_and_holds_once(tmp_path):
    folder = tmp_path / "unit"
    process = start_held(folder)
    try:
        assert hold.state(folder) in ("starting", "held")
        pid = wait_held(folder)
        assert pid == process.pid and hold.is_held(pid)
        ticks = cpu_ticks(pid)
        time.sleep(0.5)
        assert cpu_ticks(pid) - ticks <= hold.HELD_MAX_TICKS
        assert hold.release(folder, timeout_s=60, wait_for=[], patience_s=5) == "released"
        assert process.wait(timeout=10) == 0
        released = json.loads((folder / hold.RELEASED).read_text())
        assert released["pid"] == pid and released["held_s"] >= 0.5
        assert json.loads((folder / hold.RELEASE).read_text())["timeout_s"] == 60
    finally:
        process.kill()
    # Whatever runs in that folder again (fwbench run's earlier repeat, a rank) does not hold a second time.
    os.environ[hold.HOLD_ENV] = str(folder)
    try:
        assert not hold.asked_to_hold() and hold.hold_here() is None
    finally:
        del os.environ[hold.HOLD_ENV]


def test_a_held_cell_with_threads_is_released_not_killed_by_the_signal(tmp_path):
    """A process-directed signal goes to any thread that does not block it, and SIGUSR1's default action ends the
    process: a cell whose imports started a thread, released between writing held.json and its sigwait, was killed
    by its release until the cell blocked the signal before any thread started."""
    folder = tmp_path / "threaded"
    process = start_held(folder, mode="thread")
    try:
        wait_held(folder)
        assert hold.release(folder, timeout_s=60, wait_for=[], patience_s=5) == "released"
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()


def test_release_reports_a_cell_that_ended_before_it_held_or_never_held(tmp_path):
    ended = tmp_path / "ended"
    ended.mkdir()
    hold.mark_ended(ended)
    assert hold.release(ended, timeout_s=5, wait_for=[], patience_s=1) == "ended"
    silent = tmp_path / "silent"
    silent.mkdir()
    assert hold.release(silent, timeout_s=5, wait_for=[], patience_s=0.2) == "starting"


def test_a_released_cell_waits_for_its_neighbours_to_hold_and_says_what_it_met(tmp_path, monkeypatch):
    own, importing, done = tmp_path / "own", tmp_path / "importing", tmp_path / "done"
    for folder in (own, importing, done):
        folder.mkdir()
    hold.mark_ended(done)
    (own / hold.RELEASE).write_text(json.dumps({"timeout_s": 9, "wait_for": [str(importing), str(done)]}))
    monkeypatch.setenv(hold.HOLD_ENV, str(own))
    assert hold.neighbours() == [importing, done]
    # A neighbour still importing is waited for, at most max_s, and named on the row.
    waited = hold.wait_for_neighbours(max_s=0.3)
    assert waited["neighbours"] == 2 and waited["not_held"] == ["importing"] and waited["waited_s"] >= 0.3
    neighbour = start_held(importing)
    try:
        waited = hold.wait_for_neighbours(max_s=30)
        assert waited["not_held"] == [] and hold.held_pid(importing) == neighbour.pid
    finally:
        neighbour.kill()
        neighbour.wait()
    monkeypatch.delenv(hold.HOLD_ENV)
    assert hold.wait_for_neighbours() is None  # a cell nobody started ahead waits for nobody


def timed_window(during=None) -> contention.ContentionProbe:
    """A 0.6-s window under the contention probe (`during`: what happens at its start)."""
    probe = contention.ContentionProbe(threads=1)
    probe.start()
    if during:
        during()
    time.sleep(0.6)
    probe.stop()
    return probe


def test_a_held_neighbour_is_not_competition_in_a_timed_window_but_a_busy_one_is(tmp_path):
    idle = start_held(tmp_path / "idle")
    try:
        wait_held(tmp_path / "idle")
        probe = timed_window()
        held, competing = probe.cells_met()  # other tests' cells may run beside this one: only its own are asserted
        assert idle.pid in held and idle.pid not in competing
        assert probe.result()["concurrent_cells"] == len(competing) and probe.held_neighbours() == len(held)
    finally:
        idle.kill()
        idle.wait()
    spinning = start_held(tmp_path / "spin", mode="spin")
    try:
        wait_held(tmp_path / "spin")
        probe = timed_window()
        held, competing = probe.cells_met()
        assert spinning.pid in competing and spinning.pid not in held
        assert probe.result()["busy"] is True
    finally:
        spinning.kill()
        spinning.wait()


def test_a_neighbour_released_during_the_window_competed(tmp_path):
    folder = tmp_path / "released"
    neighbour = start_held(folder, then_s=5.0)
    try:
        wait_held(folder)
        probe = timed_window(lambda: hold.release(folder, timeout_s=60, wait_for=[], patience_s=5))
        held, competing = probe.cells_met()
        assert neighbour.pid in competing and neighbour.pid not in held
    finally:
        neighbour.kill()
        neighbour.wait()


def spec_with_timeout(timeout_s: float) -> CellSpec:
    return CellSpec("native-torch", "bert-predict", "tiny", "none", data_dir="", steps=1, warmup=0,
                    timeout_s=timeout_s)


def test_the_runner_times_a_held_cell_from_its_release_with_the_launchers_timeout(tmp_path):
    """Held for longer than its timeout, then 0.5 s of work: not timed out (the held seconds are not the cell's).
    Released with a 0.3 s timeout from the launcher (what its budget had left): timed out."""
    for then_s, release_timeout_s, expect_timeout in ((0.5, 30.0, False), (5.0, 0.3, True)):
        folder = tmp_path / f"cell-{then_s}"
        folder.mkdir()
        environment = {**os.environ, hold.HOLD_ENV: str(folder),
                       "PYTHONPATH": os.pathsep.join([str(REPO / "runner"), os.environ.get("PYTHONPATH", "")])}
        argv = [sys.executable, "-c", HELD_CELL, "idle", str(then_s), "fwbench.harness.cell"]
        outcome = {}

        def run():
            outcome["cell"] = launch_process(argv, spec_with_timeout(1.0), folder / "record.json",
                                             folder / "cell.log", environment)

        import threading

        runner = threading.Thread(target=run)
        runner.start()
        wait_held(folder)
        time.sleep(1.5)  # held past the cell's 1 s timeout
        hold.release(folder, timeout_s=release_timeout_s, wait_for=[], patience_s=5)
        runner.join(timeout=30)
        assert outcome["cell"].timed_out is expect_timeout, (then_s, outcome["cell"].log_tail())


def test_a_cell_that_never_holds_is_timed_out_by_its_own_timeout(tmp_path):
    folder = tmp_path / "never"
    folder.mkdir()
    environment = {**os.environ, hold.HOLD_ENV: str(folder)}
    started = time.monotonic()
    outcome = launch_process([sys.executable, "-c", "import time; time.sleep(30)"], spec_with_timeout(0.5),
                             folder / "record.json", folder / "cell.log", environment)
    assert outcome.timed_out and time.monotonic() - started < 15


@pytest.mark.parametrize("stack", ["native-torch", "keras3-jax"])
def test_prepare_framework_touches_no_device_and_twice_changes_nothing(stack, monkeypatch):
    from fwbench.harness import backends

    monkeypatch.setenv("XLA_FLAGS", "")
    backends.prepare_framework(stack, None, 2)
    once = os.environ["XLA_FLAGS"]
    backends.prepare_framework(stack, None, 2)
    assert os.environ["XLA_FLAGS"] == once
    assert once.count("xla_force_host_platform_device_count") == (1 if stack == "keras3-jax" else 0)
    assert backends.device_started() == []  # nothing imported here has started a device runtime
