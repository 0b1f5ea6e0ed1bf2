"""The kit's units started ahead (fwbench.kit.ahead), with real processes: a stand-in for `fwbench run` that
"imports", holds through fwbench.harness.hold, waits for its neighbours before its "set-up", and notes each step.
The real cells' side (imports ahead, rows) is the simulated kit test's (tests/test_gpu_kit.py, integration)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fwbench.kit import ahead as kit_ahead
from fwbench.kit.layout import KitFolders
from fwbench.kit.unit import Unit

REPO = Path(__file__).resolve().parents[1]

STAND_IN = textwrap.dedent("""
    import json, sys, time
    from fwbench.harness import hold
    key, events = sys.argv[1], sys.argv[2]
    def note(what, **facts):
        with open(events, "a") as f:
            f.write(json.dumps({"at": time.monotonic(), "key": key, "what": what, **facts}) + "\\n")
    note("start")
    time.sleep(0.4)  # its imports
    held_s = hold.hold_here()
    note("released", held_s=held_s)
    note("setup", neighbours=hold.wait_for_neighbours(30))
    time.sleep(0.3)  # its measured phases
    note("end")
    print(f"{key} done")
""")


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"

    def run_argv(unit, *, rows, data, timeout_s, extra=None):
        return [sys.executable, "-c", STAND_IN, unit.key, str(events)]

    monkeypatch.setattr(kit_ahead, "run_argv", run_argv)
    monkeypatch.setattr(kit_ahead, "unit_row", lambda rows, unit: {"status": "ok", "key": unit.key})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "runner"), os.environ.get("PYTHONPATH", "")]))
    folders = KitFolders.at(tmp_path / "kit", tmp_path / "out")
    folders.out.mkdir(parents=True)

    def read() -> list[dict]:
        return [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
    return folders, read


def units(count: int) -> list[Unit]:
    tasks = ["bert-predict", "bert-fit", "sam-predict", "sam-fit"]
    return [Unit.of("native-torch", "none", task, 0, preset="tiny") for task in tasks[:count]]


def at(events: list[dict], key: str, what: str) -> dict:
    return next(event for event in events if event["key"] == key and event["what"] == what)


def never_holds(monkeypatch) -> None:
    """Every unit's imports hang: it never holds."""
    monkeypatch.setattr(kit_ahead, "run_argv", lambda unit, **kwargs: [sys.executable, "-c",
                                                                       "import time; time.sleep(60)"])


def test_units_started_ahead_import_beside_the_running_one_and_never_overlap_its_measured_phases(stand_ins):
    folders, read = stand_ins
    first, second, third, fourth = units(4)
    ahead = kit_ahead.Ahead(folders, depth=2, cell_timeout_s=60)
    ahead.refill(first, [second, third, fourth])  # the next two start with the first
    done, row = ahead.run(first, 60)
    assert row == {"status": "ok", "key": first.key}
    ahead.refill(second, [third, fourth])  # the third is already started: no new wave
    assert set(ahead.started) == {second.key, third.key}
    second_done, _ = ahead.run(second, 60)
    events = read()
    # The first's set-up waited for both started ahead to hold; they imported beside it and held until their turn.
    setup = at(events, first.key, "setup")
    assert setup["neighbours"]["neighbours"] == 2 and setup["neighbours"]["not_held"] == []
    assert at(events, second.key, "start")["at"] < setup["at"] and at(events, third.key, "start")["at"] < setup["at"]
    assert at(events, second.key, "released")["at"] > at(events, first.key, "end")["at"]
    # Off the window's clock: the second's seconds before its turn; the first, started at its turn, has none.
    assert second_done.ahead_s > 0.4 and done.ahead_s == 0.0
    # The third still holds: its neighbour's measured phases ran beside a held process only.
    assert [event["what"] for event in events if event["key"] == third.key] == ["start"]
    ahead.cancel_all()  # the window ends: the third is stopped, held, before its set-up
    assert [event["what"] for event in read() if event["key"] == third.key] == ["start"] and not ahead.started
    log = folders.log.read_text()
    assert log.index(f"{first.key} done") < log.index(f"{second.key} done")  # each unit's output, in order
    assert "started ahead, stopped: it does not run in this window" in log
    assert not (folders.out / "held").exists() or not any((folders.out / "held").iterdir())


def test_without_units_ahead_a_unit_holds_for_nothing_and_waits_for_no_one(stand_ins):
    folders, read = stand_ins
    (only,) = units(1)
    ahead = kit_ahead.Ahead(folders, depth=3, cell_timeout_s=60)
    ahead.refill(only, [])
    done, _ = ahead.run(only, 60)
    assert at(read(), only.key, "setup")["neighbours"] is None and done.ahead_s == 0.0


def test_a_unit_started_ahead_that_failed_before_holding_is_not_waited_for(stand_ins, monkeypatch):
    folders, read = stand_ins
    first, broken = units(2)
    real = kit_ahead.run_argv

    def run_argv(unit, **kwargs):
        if unit.key == broken.key:  # fails during its imports (a broken wheel): it never holds
            return [sys.executable, "-c", "import sys; sys.exit(3)"]
        return real(unit, **kwargs)

    monkeypatch.setattr(kit_ahead, "run_argv", run_argv)
    ahead = kit_ahead.Ahead(folders, depth=1, cell_timeout_s=60)
    ahead.refill(first, [broken])
    ahead.run(first, 60)
    setup = at(read(), first.key, "setup")
    assert setup["neighbours"]["not_held"] == [] and setup["neighbours"]["waited_s"] < 20
    _, row = ahead.run(broken, 60)  # its turn: it has ended; its row (here the stand-in's) is read as any other
    assert row["key"] == broken.key


def test_a_unit_that_does_not_hold_within_its_timeout_is_stopped(stand_ins, monkeypatch):
    folders, _read = stand_ins
    (stuck,) = units(1)
    never_holds(monkeypatch)
    ahead = kit_ahead.Ahead(folders, depth=1, cell_timeout_s=60)
    began = time.monotonic()
    started, _ = ahead.run(stuck, 1.0)  # its imports hang: the window's timeout for it bounds the wait
    assert time.monotonic() - began < 20 and started.process.returncode is not None


def test_a_first_wave_started_beside_preflight_holds_before_the_checks_and_loses_a_broken_stacks_unit(stand_ins):
    """The window's first units start while preflight runs (start_wave); the GPU checks' cells, which wait for no
    neighbour, start only once every one holds (wait_held); a unit preflight then leaves out is stopped (keep_only),
    and the first unit runs with the rest as the neighbours it waits for, started before its turn."""
    folders, read = stand_ins
    first, broken, third = units(3)
    ahead = kit_ahead.Ahead(folders, depth=2, cell_timeout_s=60)
    ahead.start_wave([first, broken, third])
    assert ahead.wait_held(30) == []  # the checks may begin: all three hold, none past its imports
    held_at = time.monotonic()
    assert [event["what"] for event in read()] == ["start"] * 3
    ahead.keep_only({first.key, third.key})
    assert set(ahead.started) == {first.key, third.key}
    ahead.refill(first, [third])  # the first wave is the wave: nothing more is started
    done, _ = ahead.run(first, 60)
    events = read()
    assert [event["what"] for event in events if event["key"] == broken.key] == ["start"]  # stopped while held
    assert at(events, first.key, "setup")["neighbours"]["neighbours"] == 1
    assert done.ahead_s > 0 and at(events, first.key, "released")["at"] >= held_at
    assert "started ahead, stopped: it does not run in this window" in folders.log.read_text()
    ahead.cancel_all()


def test_waiting_for_a_wave_to_hold_gives_up_after_its_patience(stand_ins, monkeypatch):
    folders, _read = stand_ins
    (stuck,) = units(1)
    never_holds(monkeypatch)
    ahead = kit_ahead.Ahead(folders, depth=1, cell_timeout_s=60)
    ahead.start_wave([stuck])
    began = time.monotonic()
    assert ahead.wait_held(0.5) == [stuck.key] and time.monotonic() - began < 5
    ahead.cancel_all()
    assert kit_ahead.Ahead(folders, depth=0, cell_timeout_s=60).wait_held(5) == []  # nothing started: no wait


def test_a_held_run_does_not_warn_of_the_imports_it_was_started_beside(monkeypatch):
    """`fwbench run`'s warning of a busy host sampled the neighbours' imports of every unit started ahead ("timings
    will be flagged busy": none was); a held run leaves it to its cell, which waits for them to hold."""
    from fwbench.cli import common
    from fwbench.harness import contention, hold

    sampled = []
    monkeypatch.setattr(contention, "host_load", lambda sample_s: sampled.append(sample_s) or (2.0, ["python 80%"]))
    monkeypatch.setenv(hold.HOLD_ENV, "/nonexistent/held")
    common.warn_if_busy()
    assert sampled == []
    monkeypatch.delenv(hold.HOLD_ENV)
    common.warn_if_busy()
    assert sampled == [0.5]


def test_a_stopped_units_folder_is_removed_after_its_end_is_marked(stand_ins, monkeypatch):
    """A stopped unit's waiter marks its folder `ended` when the process exits; cancel removed the folder without
    waiting for it, and a mark written during the removal left the folder behind (a CI run caught it)."""
    folders, _read = stand_ins
    (stopped,) = units(1)
    real_mark = kit_ahead.hold.mark_ended

    def slow_mark(folder):
        time.sleep(0.3)
        real_mark(folder)

    monkeypatch.setattr(kit_ahead.hold, "mark_ended", slow_mark)
    ahead = kit_ahead.Ahead(folders, depth=1, cell_timeout_s=60)
    ahead.start_wave([stopped])
    assert ahead.wait_held(30) == []
    waiter = ahead.started[stopped.key].waiter
    removed_while_marking = []
    real_rmtree = kit_ahead.shutil.rmtree
    monkeypatch.setattr(kit_ahead.shutil, "rmtree",
                        lambda path, **kwargs: removed_while_marking.append(waiter.is_alive()) or real_rmtree(path,
                                                                                                          **kwargs))
    ahead.cancel(stopped)
    assert removed_while_marking == [False]
    assert not any((folders.out / "held").iterdir())
