"""The one clock every workload is timed with.

A cell runs `1 + warmup + steps` steps. Step 0 is the first (trace/compile) step, timed alone
as `first_step_s`; the next `warmup` steps are untimed; the last `steps` are the timed window.
The device is synchronised before every clock read, so asynchronous dispatch (CUDA, JAX, TF)
cannot make a step look shorter than it is.

Two ways to drive it, the same numbers either way:
  * the harness loops: `begin()`, run the step, `end(output)` (see `run_loop`);
  * a framework loops (HF Trainer, Keras `fit`): its per-step callbacks call `begin()` / `end()`.

With Keras's `steps_per_execution` N, a framework call runs N steps and its callbacks come once per call: the clock
then counts calls (`steps_per_call`): the first call (N steps, the compile among them) is `first_step_s`, warm-up is
the fewest calls that hold `warmup` steps, and the timed window is `steps / N` calls (N must divide `steps`), its
time per step the window's over `steps`, `step_ms` one entry per call (its mean per step).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fwbench.core.execution import ExecutionError, calls

SyncFn = Callable[[Any], None]


class ClockError(RuntimeError):
    pass


class StepClock:
    def __init__(self, sync: SyncFn, warmup: int, steps: int, per_step_sync: bool = True, probe: Any = None,
                 steps_per_call: int = 1):
        if steps < 1 or warmup < 0:
            raise ClockError(f"need steps >= 1 and warmup >= 0, got steps={steps} warmup={warmup}")
        self._sync = sync
        self.steps_per_call = steps_per_call
        # Counted in calls from here on (one step a call unless steps_per_call says otherwise); steps stays in steps.
        try:
            self.warmup, self._timed_calls = calls(warmup, steps, steps_per_call)
        except ExecutionError as exc:
            raise ClockError(str(exc)) from None
        self.steps = steps
        self.per_step_sync = per_step_sync
        self.total_steps = 1 + self.warmup + self._timed_calls
        self._index = 0  # index of the step in progress (or next to begin)
        self._first_begin: float | None = None
        self.first_step_s: float | None = None
        self._marks: list[float] = []  # window start, then the end of each timed step
        # Optional start()/stop() observer of the window (harness.contention): outside the clock reads.
        self._probe = probe

    @property
    def done(self) -> bool:
        return self._index >= self.total_steps

    @property
    def first_timed_index(self) -> int:
        return 1 + self.warmup

    def begin(self) -> None:
        if self._index == 0:
            self._first_begin = time.perf_counter()
        elif self._index == self.first_timed_index:
            # The step before the window was synced at its end, so nothing is still queued.
            if self._probe is not None:
                self._probe.start()
            self._marks.append(time.perf_counter())

    def end(self, output: Any = None) -> None:
        index = self._index
        if index >= self.total_steps:
            raise ClockError(f"step {index} ended, but only {self.total_steps} steps were planned")
        last = index == self.total_steps - 1
        if index == 0:
            self._sync(output)
            self.first_step_s = time.perf_counter() - self._first_begin
        elif index >= self.first_timed_index:
            if self.per_step_sync or last:
                self._sync(output)
            self._marks.append(time.perf_counter())
            if last and self._probe is not None:
                self._probe.stop()
        elif index == self.first_timed_index - 1:
            self._sync(output)  # end of warm-up
        self._index += 1

    # -- results -------------------------------------------------------------------------
    def window_s(self) -> float:
        self._check_complete()
        return self._marks[-1] - self._marks[0]

    def ms_per_step(self) -> float:
        return 1000.0 * self.window_s() / self.steps

    def step_ms(self) -> list[float] | None:
        """Per-step times; None when steps were not synced one by one (they would be dispatch times)."""
        self._check_complete()
        if not self.per_step_sync:
            return None
        return [1000.0 * (b - a) / self.steps_per_call for a, b in zip(self._marks, self._marks[1:])]

    def _check_complete(self) -> None:
        if len(self._marks) != self._timed_calls + 1:
            unit, planned = (("steps", "steps") if self.steps_per_call == 1
                             else (f"calls of {self.steps_per_call} steps", "calls"))
            raise ClockError(
                f"timed window incomplete: {max(len(self._marks) - 1, 0)} of {self._timed_calls} {unit} recorded "
                f"(the framework ran {self._index} of {self.total_steps} planned {planned})")


def run_loop(clock: StepClock, step: Callable[[], Any]) -> None:
    """The harness-driven loop: the only place a plain `step()` workload is timed."""
    while not clock.done:
        clock.begin()
        output = step()
        clock.end(output)
