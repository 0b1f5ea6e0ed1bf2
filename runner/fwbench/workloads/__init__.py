"""Workloads: one small module per model per family (torch, keras), plus the family's common modules.

A model module exposes
  * `build(ctx: CellContext)`, which returns a cell, and
  * `CELLS`: task kind -> the cell class `build` returns for that kind (read by the harness, which checks
    the built cell against it, and by `python -m fwbench.cli.stackdoc`, which documents it).

A cell is one of two explicit kinds, each a class defined at module level:
  * `StepCell`: `step()` -> output runs one step; the harness loops and times it;
  * `DrivenCell`: `drive(clock)` lets the framework loop (HF Trainer, Keras fit) and call
    clock.begin()/end() from its per-step callbacks.
Every cell class declares the task kinds it serves (`kinds`) and, in one line, the exact call that is
timed (`timed`). Workloads never read a clock themselves: all timing lives in fwbench.harness.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
import math
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from fwbench.core import models, registry, scaling
from fwbench.core.execution import steps_run
from fwbench.core.schema import COLUMN_NAMES
from fwbench.core.spec import CellSpec
from fwbench.workloads.checksum import WeightBytes, weights_sha256


class Unsupported(Exception):
    """The stack cannot run this task faithfully; becomes a row with status `unsupported`."""


class _Cell(abc.ABC):
    kinds: ClassVar[tuple[str, ...]]  # the task kinds (fit, predict, generate) this cell serves
    timed: ClassVar[str]  # one line: the exact call the clock times

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        kinds, timed = getattr(cls, "kinds", None), getattr(cls, "timed", None)
        if not kinds or not set(kinds) <= set(models.TASK_KINDS):
            raise TypeError(f"cell class {cls.__qualname__}: `kinds` must name task kinds from {models.TASK_KINDS}")
        if not isinstance(timed, str) or not timed.strip() or "\n" in timed:
            raise TypeError(f"cell class {cls.__qualname__}: `timed` must be one line naming the timed call")


class StepCell(_Cell):
    """The harness calls `step()` once per step (first step, warm-up, timed steps) and syncs on its output."""

    abstract = True

    @abc.abstractmethod
    def step(self) -> Any:
        """One step; returns its output (what the device sync waits for)."""


class DrivenCell(_Cell):
    """The framework runs exactly `ctx.total_steps` steps in one call and calls clock.begin()/end() around
    each of them."""

    abstract = True

    @abc.abstractmethod
    def drive(self, clock: Any) -> None:
        """Run every step, reporting each to `clock`."""


CELL_KINDS = (StepCell, DrivenCell)


class ReportError(KeyError):
    """A workload reported a field that is not a result column."""


@dataclass
class CellContext:
    spec: CellSpec
    workload: registry.Workload
    arrays: dict[str, np.ndarray]
    backend: Any
    # Row fields a workload reported (tokens_generated, params_total, dtype, ...): see report().
    _reported: dict[str, Any] = field(default_factory=dict, repr=False)
    # A fit's loss per step, as the step returned it (a device scalar: read only after the run, see record_loss).
    losses: list[Any] = field(default_factory=list, repr=False)
    _after_run: list[Callable[[], None]] = field(default_factory=list, repr=False)
    # A fit's weights as built (set_initial_weights): read once, after the build and before the first step.
    _initial_weights: Callable[[], Iterable[WeightBytes]] | None = field(default=None, repr=False)

    def set_initial_weights(self, weights: Callable[[], Iterable[WeightBytes]]) -> None:
        """A fit cell names its model's weights, in the model's own fixed order, as (dtype, shape, bytes or a
        checksum.ChunkReader) each; the harness hashes them (initial_weights_sha256) before the first step, outside
        the timed window."""
        self._initial_weights = weights

    def initial_weights_sha256(self) -> str | None:
        """SHA-256 over every weight's dtype, shape and its bytes' pieces' SHA-256s, in order
        (fwbench.workloads.checksum; None: the cell named no weights)."""
        if self._initial_weights is None:
            return None
        return weights_sha256(self._initial_weights())
    # `fwbench run --model`: the user's imported file (fwbench.workloads.model_source.ModelSource); None otherwise.
    model_source: Any = None
    # A model file's cost of one step (fwbench.core.physics.StepCost), counted by the workload from the layers that
    # ran; None: not counted (the physics columns stay empty; extra.physics says why).
    step_cost: Any = None

    def record_loss(self, loss: Any) -> None:
        """Keep a fit step's loss (a framework scalar, a Python float or a numpy value) to count non-finite losses
        after the run: never read here, so recording adds no device sync inside the timed window. A torch tensor is
        kept as a copy (one tiny device kernel, no sync): under CUDA graphs (reduce-overhead) the step's loss lives
        in memory the next replay overwrites, and reading it after the run raised there."""
        if hasattr(loss, "detach") and hasattr(loss, "clone"):
            loss = loss.detach().clone()
        self.losses.append(loss)

    def after_run(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the steps have run (outside the timed window), e.g. to report the loss scale."""
        self._after_run.append(callback)

    def finish(self) -> None:
        """Run the after_run callbacks (the harness calls it once, after the steps)."""
        for callback in self._after_run:
            callback()

    def nonfinite_losses(self) -> int | None:
        """How many recorded losses are non-finite (None: the cell recorded none, e.g. not a fit)."""
        if not self.losses:
            return None
        return sum(1 for loss in self.losses if not math.isfinite(float(loss)))

    def report(self, **fields: Any) -> None:
        """Record row fields for this cell's result. Only result columns (fwbench.core.schema) are accepted."""
        unknown = sorted(set(fields) - set(COLUMN_NAMES))
        if unknown:
            raise ReportError(f"not result columns (see fwbench.core.schema): {', '.join(unknown)}")
        if isinstance(fields.get("extra"), dict) and isinstance(self._reported.get("extra"), dict):
            fields = {**fields, "extra": {**self._reported["extra"], **fields["extra"]}}  # merged, not replaced
        self._reported.update(fields)

    @property
    def reported(self) -> dict[str, Any]:
        """A copy of every field reported so far (the harness merges it into the row)."""
        return dict(self._reported)

    @property
    def stack(self) -> registry.Stack:
        return registry.get_stack(self.spec.stack)

    @property
    def arch(self) -> Any:
        return self.workload.arch

    @property
    def shapes(self) -> Any:
        return self.workload.shapes

    @property
    def kind(self) -> str:
        return self.workload.task.kind

    @property
    def jit_compile(self) -> bool | None:
        """Keras jit_compile for this task, from the stack definition (None on native stacks)."""
        return self.stack.jit_compile(self.workload.task.id, self.spec.jit)

    @property
    def batch_size(self) -> int:
        return self.workload.batch_size

    @property
    def devices(self) -> int:
        """Devices the fit runs data-parallel on (fwbench.core.scaling; 1: one device)."""
        return self.spec.devices

    @property
    def scaling(self) -> bool:
        """A scaling cell (--devices or --global-batch given): it reads the global batch in order (and starts, as
        every fit does, from weights seeded by --seed), so that a step covers the same rows, from the same weights,
        for any N."""
        return self.spec.devices > 1 or self.spec.global_batch is not None

    @property
    def per_device_batch(self) -> int:
        return scaling.batches(self.batch_size, self.spec.devices, self.spec.global_batch)[0]

    @property
    def global_batch(self) -> int:
        return scaling.batches(self.batch_size, self.spec.devices, self.spec.global_batch)[1]

    def global_arrays(self) -> dict[str, np.ndarray]:
        """The inputs at the global batch (fwbench.core.scaling.global_rows; the shared batch itself at one device
        with the task's batch)."""
        return scaling.global_rows(self.arrays, self.global_batch)

    @property
    def dropout_off(self) -> bool:
        """Test-only (CellSpec.probe_weights): dropout off, so that updates are deterministic across N."""
        return self.spec.probe_weights is not None

    @property
    def total_steps(self) -> int:
        """Every step the cell runs (the clock's calls times the steps each: fwbench.harness.clock)."""
        return steps_run(self.spec.warmup, self.spec.steps, self.spec.steps_per_execution)

    @property
    def precision(self) -> str:
        return self.spec.precision

    @property
    def stability_run(self) -> bool:
        """`fwbench stability`: an untimed fit whose every step's loss must be exact (Keras: one epoch per step,
        so its logged running mean is that step's loss)."""
        return self.spec.stability_run

    def loss_multipliers(self) -> list[float] | None:
        """Per step, what a fit multiplies its loss by: the test fault `overflow:STEP` plants one loss scaled into
        float16 overflow (fwbench.core.stability); None without it, and then the loss is left alone."""
        from fwbench.core import stability

        return stability.loss_multipliers(self.spec.fault, self.total_steps)

    @property
    def model_dtype(self) -> str:
        """The dtype the model's weights are created in (fwbench.core.precision.model_dtype)."""
        from fwbench.core import precision

        return precision.model_dtype(self.spec.precision, self.workload.task.model)

    @property
    def declared_dtype(self) -> str:
        """The dtype the precision says the model computes in (the `dtype` column, which physics reads)."""
        from fwbench.core import precision

        return precision.expected_compute_dtype(self.spec.precision, self.workload.task.model)

    @property
    def tf32_policy(self) -> str:
        """The TF32 policy the harness applied: the precision's (CellSpec.tf32)."""
        return self.spec.tf32

    @property
    def mixed_dtype(self) -> str | None:
        """The half type a float32 model computes in under bf16/fp16 (None: no mixed precision)."""
        from fwbench.core import precision

        return precision.mixed_dtype(self.spec.precision, self.workload.task.model)


def check_cell(cell: Any, cells: dict[str, type], kind: str, where: str) -> StepCell | DrivenCell:
    """The cell `build()` returned, checked against the module's CELLS declaration and the task kind."""
    if not isinstance(cell, CELL_KINDS):
        raise TypeError(f"{where}.build() returned {type(cell).__name__}, which is neither a StepCell nor a "
                        "DrivenCell (fwbench.workloads)")
    declared = cells.get(kind)
    if type(cell) is not declared:
        raise TypeError(f"{where}.build() returned a {type(cell).__name__} for a {kind} task, but its CELLS "
                        f"declares {getattr(declared, '__name__', None)}")
    if kind not in type(cell).kinds:
        raise TypeError(f"{type(cell).__name__} does not serve {kind} tasks (its kinds: {type(cell).kinds})")
    return cell
