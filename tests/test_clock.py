"""StepClock: what is timed, what is synced, and when."""

import time

import pytest

from fwbench.harness.clock import ClockError, StepClock, run_loop


class RecordingSync:
    def __init__(self):
        self.calls = []

    def __call__(self, output):
        self.calls.append(output)


def test_first_warmup_and_timed_steps_are_separated():
    sync = RecordingSync()
    clock = StepClock(sync, warmup=2, steps=3)
    delays = iter([0.05, 0.0, 0.0, 0.01, 0.01, 0.01])

    def step():
        time.sleep(next(delays))
        return "out"

    run_loop(clock, step)
    assert clock.done and clock.total_steps == 6
    assert clock.first_step_s >= 0.05
    assert len(clock.step_ms()) == 3
    assert all(ms >= 10 for ms in clock.step_ms())
    # The slow first step never leaks into the window.
    assert clock.ms_per_step() < 40
    assert sum(clock.step_ms()) == pytest.approx(clock.window_s() * 1000)


def test_sync_before_every_clock_read_in_window():
    sync = RecordingSync()
    clock = StepClock(sync, warmup=1, steps=4)
    run_loop(clock, lambda: "step-output")
    # first step + end of warm-up + 4 timed steps
    assert sync.calls == ["step-output"] * 6


def test_window_only_sync_has_no_per_step_times():
    sync = RecordingSync()
    clock = StepClock(sync, warmup=0, steps=3, per_step_sync=False)
    run_loop(clock, lambda: time.sleep(0.01))
    assert clock.step_ms() is None
    assert len(sync.calls) == 2  # first step, and the end of the window
    assert clock.ms_per_step() >= 10  # the window still holds all three sleeping steps


def test_probe_brackets_exactly_the_timed_window():
    events = []

    class Probe:
        def start(self):
            events.append(("start", clock._index))

        def stop(self):
            events.append(("stop", clock._index))

    clock = StepClock(lambda out: None, warmup=2, steps=3, probe=Probe())
    run_loop(clock, lambda: events.append(("step", clock._index)))
    # started as step 3 (the first timed one) begins, stopped as the last one ends
    assert events.index(("start", 3)) == events.index(("step", 3)) - 1
    assert events[-1] == ("stop", 5)


def test_a_slow_device_is_charged_to_the_step():
    """A step that returns at once but whose work finishes in sync() is still timed in full."""
    clock = StepClock(lambda out: time.sleep(0.02), warmup=0, steps=2)
    run_loop(clock, lambda: None)
    assert clock.ms_per_step() >= 20


def test_incomplete_window_is_an_error_not_a_number():
    clock = StepClock(lambda out: None, warmup=1, steps=5)
    for _ in range(4):
        clock.begin()
        clock.end()
    with pytest.raises(ClockError, match="2 of 5 steps"):
        clock.ms_per_step()


def test_an_incomplete_window_of_calls_counts_calls_of_n_steps():
    """With steps_per_execution the clock counts calls: the error says so, not "steps" (it said "1 of 2 steps" for a
    window of 2 calls of 4 steps, i.e. 8 steps)."""
    clock = StepClock(lambda out: None, warmup=0, steps=8, steps_per_call=4)
    for _ in range(2):
        clock.begin()
        clock.end()
    with pytest.raises(ClockError, match=r"1 of 2 calls of 4 steps recorded \(the framework ran 2 of 3 planned calls\)"):
        clock.ms_per_step()


def test_too_many_steps_is_an_error():
    clock = StepClock(lambda out: None, warmup=0, steps=1)
    run_loop(clock, lambda: None)
    with pytest.raises(ClockError):
        clock.end()


def test_bad_arguments():
    with pytest.raises(ClockError):
        StepClock(lambda out: None, warmup=0, steps=0)


def test_steps_per_call_counts_calls_and_charges_each_step_its_share():
    """Keras's steps_per_execution: callbacks come once per call of N steps; the clock times calls."""
    clock = StepClock(lambda output: None, warmup=3, steps=6, steps_per_call=3)
    assert (clock.total_steps, clock.warmup) == (1 + 1 + 2, 1)  # first call, warm-up of 3 steps in 1, 2 timed calls
    run_loop(clock, lambda: time.sleep(0.006))
    assert clock.ms_per_step() == pytest.approx(1000 * clock.window_s() / 6)
    per_step = clock.step_ms()
    assert len(per_step) == 2 and all(1.5 < ms < 20 for ms in per_step)  # a call's 6+ ms over its 3 steps
    with pytest.raises(ClockError, match="must divide --steps"):
        StepClock(lambda output: None, warmup=2, steps=5, steps_per_call=2)
