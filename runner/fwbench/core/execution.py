"""Steps per call: Keras's `steps_per_execution` (fwbench run --model --steps-per-execution) as the clock and the
workloads count it, defined once. With N steps a call, a cell runs its first call, the fewest calls holding its
warm-up steps, and `steps / N` timed calls (N must divide the timed steps).

Plain Python: the runner, the cell and the workloads import it.
"""

from __future__ import annotations


class ExecutionError(ValueError):
    """Steps that are not a whole number of calls (one line)."""


def calls(warmup: int, steps: int, steps_per_call: int) -> tuple[int, int]:
    """(warm-up calls, timed calls) of N steps each: the fewest calls holding `warmup` steps, and steps / N."""
    if steps_per_call < 1 or steps % steps_per_call:
        raise ExecutionError(f"--steps {steps} is not a whole number of calls of {steps_per_call} steps "
                             "(--steps-per-execution must divide --steps)")
    return -(-warmup // steps_per_call), steps // steps_per_call


def steps_run(warmup: int, steps: int, steps_per_call: int = 1) -> int:
    """Every step a cell runs, the first call's included: what a framework loop is told to run."""
    warmup_calls, timed_calls = calls(warmup, steps, steps_per_call)
    return (1 + warmup_calls + timed_calls) * steps_per_call
