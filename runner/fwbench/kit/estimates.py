"""What a unit is expected to cost, and how many timed steps a window gives a task.

Estimates for planning a window, not measurements: the published A100 step times (fwbench's copy of the keras.io
table) scaled by H100_PER_A100 (an H100 runs these cells about 1.5-3x faster than an A100; the smaller speed-up keeps
the plan on the safe side), plus what a cell process costs before its first timed step. The kit replaces them with a
cell's measured wall time once it has run (state.KitState.needed_s).
"""

from __future__ import annotations

import math
from functools import lru_cache

from fwbench.core import registry
from fwbench.kit.unit import Unit

H100_PER_A100 = 0.6
# Interpreter, imports, CUDA initialisation and the data check, per stack (keras3-jax: XLA's compile as well).
STARTUP_S = {"native-torch": 15.0, "keras3-jax": 40.0, "keras3-torch": 25.0}
# torch.compile's first step beyond that, per native compile mode.
COMPILE_S = {"none": 0.0, "reduce-overhead": 60.0, "default": 60.0, "max-autotune": 300.0}
# Building the model with random weights, per model at `paper` (7B-parameter LLMs take the longest). It also orders
# the tasks of the plan: the cheapest models first (plan.DEFAULT_TASKS).
BUILD_S = {"bert": 5.0, "sam": 15.0, "stable_diffusion": 25.0, "gemma": 60.0, "mistral": 90.0}
UNKNOWN_BUILD_S = 30.0
# Off `paper` (the CPU test's `tiny`): no published times to scale; a step is taken as this long.
OTHER_PRESET_STEP_S = 0.05
# Building a model file's model (and, for its first cell, making its inputs).
MODEL_FILE_BUILD_S = 10.0
MIN_TIMED_STEPS = 5
DEFAULT_TIMED_WINDOW_S = 15.0
# A task whose slowest published stack's step is estimated under this keeps the published protocol's timed steps
# (the preset's: 100 at paper) however long its window; only slower tasks are shortened to --timed-window-s.
FULL_STEPS_BELOW_S = 1.0


@lru_cache(maxsize=None)
def published_steps() -> dict[str, dict[str, float]]:
    """task -> (stack/compile) -> the published A100 seconds per step (the aggregator's copy of the keras.io table)."""
    from fwbench_aggregator.published import load_published

    found: dict[str, dict[str, float]] = {}
    for (task, variant), cell in load_published().items():
        found.setdefault(task, {})[f"{variant.stack}/{variant.compile_mode}"] = cell.ms_per_step / 1000
    return found


def published_step_s(task: str) -> dict[str, float]:
    """(stack/compile) -> the published A100 seconds per step of this task ({} where the table has none)."""
    return dict(published_steps().get(task, {}))


def slowest_step_s(task: str) -> float | None:
    """The task's slowest published stack's step, estimated on an H100 (None: the table has no time for it)."""
    published = published_step_s(task)
    return max(published.values()) * H100_PER_A100 if published else None


def window_steps(task: str, preset: str, timed_window_s: float,
                 full_steps_below_s: float = FULL_STEPS_BELOW_S) -> int | None:
    """The timed steps a window gives this task: None (the preset's own) off `paper`, where the slowest published
    stack's estimated step is under `full_steps_below_s` (the published protocol), or where the preset's steps fit
    `timed_window_s` at that step; else as many as fit, at least MIN_TIMED_STEPS. One number per task, whichever
    stacks run, so that the stacks of a task stay comparable."""
    default = registry.default_steps(task, preset)
    slowest_s = slowest_step_s(task)
    if preset != "paper" or timed_window_s <= 0 or slowest_s is None:
        return None
    if slowest_s < full_steps_below_s:
        return None
    steps = max(MIN_TIMED_STEPS, math.floor(timed_window_s / slowest_s))
    return None if steps >= default else steps


def estimate_s(unit: Unit) -> float:
    """Seconds one unit is expected to take, from its process start to its row (an estimate: see above)."""
    preset = unit.spec.preset
    warmup = registry.get_preset(preset).warmup
    if unit.model is not None:  # a user's model: no published time; small models, a step taken as OTHER_PRESET's
        step_s, build_s = OTHER_PRESET_STEP_S, MODEL_FILE_BUILD_S
    elif preset == "paper":
        published = published_step_s(unit.task)
        step_s = published.get(f"{unit.stack}/{unit.compile_mode}", max(published.values(), default=1.0))
        step_s *= H100_PER_A100
        build_s = BUILD_S.get(registry.get_task(unit.task).model, UNKNOWN_BUILD_S)
    else:
        step_s, build_s = OTHER_PRESET_STEP_S, 0.0
    return (STARTUP_S.get(unit.stack, 30.0) + COMPILE_S.get(unit.compile_mode, 0.0) + build_s
            + (warmup + 1 + unit.spec.steps) * step_s)
