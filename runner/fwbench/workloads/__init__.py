"""Workloads: one small module per model per family (torch, keras).

A module exposes `build(ctx: CellContext)` and returns an object with either
  * `step()` -> output: one step; the harness loops and times it, or
  * `drive(clock)`: the framework loops (HF Trainer, Keras fit) and calls clock.begin()/end()
    from its per-step callbacks.
Workloads never read a clock themselves: all timing lives in fwbench.harness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fwbench import registry
from fwbench.spec import CellSpec


class Unsupported(Exception):
    """The stack cannot run this task faithfully; becomes a row with status `unsupported`."""


@dataclass
class CellContext:
    spec: CellSpec
    workload: registry.Workload
    arrays: dict[str, np.ndarray]
    backend: Any
    # Row fields a workload reports (tokens_generated, params_total, dtype, ...).
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def arch(self) -> dict[str, Any]:
        return self.workload.arch

    @property
    def batch_size(self) -> int:
        return self.workload.batch_size

    @property
    def total_steps(self) -> int:
        return 1 + self.spec.warmup + self.spec.steps
