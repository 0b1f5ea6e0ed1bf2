"""Small helpers shared by the native-torch workloads (no timing here: that is the harness's job)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fwbench.workloads import StepCell

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def tensor(array: np.ndarray, device: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    out = torch.from_numpy(np.ascontiguousarray(array)).to(device)
    return out.to(dtype) if dtype is not None else out


def nchw(array: np.ndarray) -> np.ndarray:
    """Shared data is NHWC; torch convolutions want NCHW."""
    return np.ascontiguousarray(array.transpose(0, 3, 1, 2))


def maybe_compile(module: Any, mode: str) -> Any:
    """torch.compile the module that actually runs; `none` returns it unchanged."""
    if mode == "none":
        return module
    return torch.compile(module, mode=mode)


def report_compiled(ctx, target: str) -> None:
    """Say what a compiled cell compiled (the `compiled_target` column; null when nothing is compiled):
    the published run's compiled variant did not always compile what ran, so rows must say."""
    if ctx.spec.compile_mode != "none":
        ctx.report(compiled_target=target)


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total, trainable


def report_model(ctx, model: torch.nn.Module, dtype: str) -> None:
    total, trainable = count_params(model)
    ctx.report(params_total=total, params_trainable=trainable, dtype=dtype)


class RegressionTrainStep(StepCell):
    """One Adam step of `module` towards a fixed target with MSE (the SAM and SD encoder fits). A compiled
    cell compiles the whole train step, optimizer included, as the published code did."""

    kinds = ("fit",)
    timed = "one Adam step: zero_grad, MSE(module(inputs), target).backward(), optimizer.step()"
    compiled_target = "whole train step (forward, backward, Adam step)"

    def __init__(self, ctx, module: torch.nn.Module, inputs: torch.Tensor, target: torch.Tensor):
        self.module, self.inputs, self.target = module, inputs, target
        self.optimizer = torch.optim.Adam(module.parameters(), lr=1e-4)
        self.loss_fn = torch.nn.MSELoss()
        self.train_step = maybe_compile(self._train_step, ctx.spec.compile_mode)
        report_compiled(ctx, self.compiled_target)

    def _train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.module(self.inputs), self.target)
        loss.backward()
        self.optimizer.step()
        return loss

    def step(self) -> torch.Tensor:
        return self.train_step()
