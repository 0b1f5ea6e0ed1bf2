"""The PyTorch twin of a user's model file (`build_torch_model()`, `torch_loss(outputs, targets)`;
docs/your-model.md) on native-torch, eager or under each --compile mode.

It reads the same bytes as the file's Keras cells (integer arrays as int64, what torch's embeddings and losses take);
its module gets x as the Keras model does, one array or a dict of them. fit: one Adam step (learning rate 1e-3, Keras's
default too) of torch_loss(module(x), y), the whole step compiled under --compile, as the registry's encoder fits
are; predict: module(x) under no_grad, the module compiled. Before it runs, its trainable parameters are checked
against those the file's Keras cells found, and the row says whether they agree (twin_params_match).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fwbench.core import model_file, model_inputs
from fwbench.core.model_file import ModelFileError
from fwbench.workloads import StepCell, Unsupported
from fwbench.workloads.torch.common import (autocast, backward_and_step, count_params, data_parallel,
                                            maybe_compile, report_compiled, report_model, with_autocast)
from fwbench.workloads.torch.layer_flops import FlopProbe


class TwinTrainStep(StepCell):
    """One Adam step of the twin on the file's batch; under bf16/fp16 the forward and loss run under autocast
    (float32 weights and Adam), fp16 with torch.amp.GradScaler."""

    kinds = ("fit",)
    timed = "one Adam step: zero_grad, torch_loss(module(x), y).backward(), optimizer.step() (compiled whole)"

    def __init__(self, ctx, module: torch.nn.Module, x: Any, y: torch.Tensor, loss_fn):
        self.ctx, self.module, self.x, self.y, self.loss_fn = ctx, module, x, y, loss_fn
        self.device = y.device.type
        self.optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
        self.scaler = torch.amp.GradScaler(self.device) if ctx.mixed_dtype == "float16" else None
        self.train_step = maybe_compile(self._train_step, ctx.spec.compile_mode)
        report_compiled(ctx, "whole train step (forward, torch_loss, backward, Adam step)")
        if self.scaler is not None:
            ctx.after_run(lambda: ctx.report(loss_scale=float(self.scaler.get_scale())))

    def _train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.ctx, self.device):
            loss = self.loss_fn(self.module(self.x), self.y)
        return backward_and_step(loss, self.optimizer, self.scaler)

    def step(self) -> torch.Tensor:
        loss = self.train_step()
        self.ctx.record_loss(loss.detach())
        return loss


class TwinForward(StepCell):
    """The twin's forward pass on the file's batch, under no_grad."""

    kinds = ("predict",)
    timed = "module(x): one forward pass under no_grad (the compiled module when --compile is set)"

    def __init__(self, forward, x: Any):
        self.forward, self.x = forward, x

    @torch.no_grad()
    def step(self):
        return self.forward(self.x)


CELLS = {"fit": TwinTrainStep, "predict": TwinForward}


def build(ctx):
    source, device = ctx.model_source, ctx.backend.device
    if not source.has(model_file.BUILD_TORCH_MODEL):
        raise Unsupported(f"{source.name} defines no {model_file.BUILD_TORCH_MODEL}(): it has no PyTorch twin to run "
                          "on native-torch (docs/your-model.md)")
    torch.manual_seed(ctx.spec.seed)
    module = source.call(model_file.BUILD_TORCH_MODEL)
    if not isinstance(module, torch.nn.Module):
        raise ModelFileError(f"{source.name}: {model_file.BUILD_TORCH_MODEL}() returned a {type(module).__name__}, "
                             "not a torch.nn.Module")
    module = module.to(device)
    report_model(ctx, module)
    _check_twin(ctx, module)
    rows = slice(None)
    if ctx.kind == "fit":  # --devices N: this rank's rows of the global batch, the module in DistributedDataParallel
        trained, rows = data_parallel(ctx, module)
    x, y = model_file.split_inputs(ctx.global_arrays() if ctx.kind == "fit" else ctx.arrays)
    x = {name: _tensor(array[rows], device) for name, array in x.items()} if isinstance(x, dict) \
        else _tensor(x[rows], device)
    if ctx.devices == 1:  # a data-parallel row has no physics columns (its ceiling is one device's)
        FlopProbe(ctx, module)
    if ctx.kind == "fit":
        loss_fn = source.function(model_file.TORCH_LOSS, " (a fit of the twin needs its loss)")
        module.train()
        return TwinTrainStep(ctx, trained, x, _tensor(y[rows], device), loss_fn)
    module.eval()
    forward = maybe_compile(module, ctx.spec.compile_mode)
    report_compiled(ctx, "module forward")
    return TwinForward(with_autocast(ctx, device, forward), x)


def _tensor(array: np.ndarray, device: str) -> torch.Tensor:
    # Integer inputs as int64: what torch's embeddings, gathers and class-index losses take.
    array = array.astype(np.int64) if array.dtype.kind in "iu" else array
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def _check_twin(ctx, module: torch.nn.Module) -> None:
    """Does the twin have the Keras model's trainable parameters? Said on the row, never assumed."""
    _, trainable = count_params(module)
    keras = model_inputs.read_keras_params(model_inputs.model_folder(ctx.spec.data_dir, ctx.spec.model_sha256))
    keras_count, match, line = model_inputs.twin_check(trainable, keras)
    ctx.report(twin_params_keras=keras_count, twin_params_match=match, extra={"twin_check": line})
