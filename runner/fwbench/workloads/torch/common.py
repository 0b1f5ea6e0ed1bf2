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


def report_model(ctx, model: torch.nn.Module) -> None:
    """Sizes, the declared compute dtype (`dtype`: the precision's), the dtypes the weights are held in, and a probe
    of the dtype the model really computes in (call it with the module that runs, before it is compiled)."""
    total, trainable = count_params(model)
    ctx.report(params_total=total, params_trainable=trainable, dtype=ctx.declared_dtype,
               variable_dtype=variable_dtypes(model.parameters()))
    DtypeProbe(ctx, model)


def data_parallel(ctx, module: torch.nn.Module) -> tuple[torch.nn.Module, slice]:
    """--devices N > 1 in a loop of our own (the encoder fits; the Trainer fits get theirs from the Trainer): this
    rank joins the process group from the rendezvous variables (fwbench.harness.ranks set them, as torchrun would)
    and trains the module wrapped in DistributedDataParallel, which averages the gradients over the ranks in
    backward. Returns the module to train and this rank's rows of the global batch: rank r takes the r-th
    per-device share, as the Trainer's sampler does, so that N ranks update from the rows one device would."""
    if ctx.devices == 1:
        return module, slice(None)
    dist = torch.distributed
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if ctx.backend.on_gpu else "gloo")
    report_process_group(ctx, dist.get_world_size(), "the process group has", "")
    # Every parameter of the encoders takes part in each step: no search for unused ones.
    wrapped = torch.nn.parallel.DistributedDataParallel(module, find_unused_parameters=False)
    share, rank = ctx.per_device_batch, dist.get_rank()
    return wrapped, slice(rank * share, (rank + 1) * share)


def report_process_group(ctx, world: int, set_up_by: str, via: str) -> None:
    """The DistributedDataParallel of a --devices N cell really spans N ranks (never one device's fit recorded as N),
    whoever set it up (`set_up_by`: the HF Trainer, fwbench's own loop); the backend that reduces the gradients goes
    on the row."""
    dist = torch.distributed
    initialized = dist.is_available() and dist.is_initialized()
    if world != ctx.devices or not initialized:
        raise RuntimeError(f"--devices {ctx.devices}: {set_up_by} {world} process(es) "
                           f"(process group initialised: {initialized})")
    ctx.report(comm_backend=str(dist.get_backend()),
               extra={"data_parallel": f"torch DistributedDataParallel{via}, {world} ranks"})


def seed_weights(ctx) -> None:
    """Call before the model is built: every fit starts from weights seeded by --seed, so that two fits at one seed
    (a stability run's, one device against N: DDP broadcasts rank 0's anyway) start alike and another seed starts
    elsewhere. Predict and generate cells are left as they were."""
    if ctx.kind == "fit":
        torch.manual_seed(ctx.spec.seed)


def weight_bytes(model):
    """The model's weights for its initial-weights checksum (CellContext.set_initial_weights): its parameters, then
    its buffers, in the module's own order (a DistributedDataParallel wrapper yields its module's), each as raw
    bytes (NumPy has no bfloat16)."""
    for value in (*model.parameters(), *model.buffers()):
        yield tensor_bytes(value)


def tensor_bytes(value: torch.Tensor):
    """One tensor as (dtype name, shape, raw bytes): the names NumPy gives, the bytes viewed as uint8 (NumPy has no
    bfloat16); a contiguous tensor on a device is read back piece by piece into the checksum's reused host buffers
    (DeviceBytes). Keras's torch backend reads its variables through it too."""
    name, shape = str(value.dtype).removeprefix("torch."), tuple(value.shape)
    value = value.detach()
    if value.device.type != "cpu" and value.is_contiguous():
        return name, shape, DeviceBytes(value.reshape(-1).view(torch.uint8))
    return name, shape, value.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


class DeviceBytes:
    """A tensor's bytes on its device (fwbench.workloads.checksum.ChunkReader): each piece copied into a given host
    buffer, no host memory of its own."""

    def __init__(self, flat_bytes: torch.Tensor):
        self.flat_bytes = flat_bytes
        self.nbytes = flat_bytes.numel()

    def read_into(self, offset: int, out) -> None:
        torch.from_numpy(out).copy_(self.flat_bytes[offset:offset + out.size])


def is_first_rank() -> bool:
    """Rank 0 of a data-parallel cell, or the only process of a one-device cell (it writes the test probes)."""
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def write_weights(model, path: str) -> None:
    """Test-only (CellSpec.probe_weights): the model's parameters after the fit, by name, as float64 numpy."""
    module = getattr(model, "module", model)  # unwrapped from DistributedDataParallel
    np.savez(path, **{name: p.detach().cpu().double().numpy() for name, p in module.named_parameters()})


def backward_and_step(loss: torch.Tensor, optimizer, scaler) -> torch.Tensor:
    """One optimizer step from `loss`: plain, or through the fp16 GradScaler (scaled backward, step, update)."""
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss


class RegressionTrainStep(StepCell):
    """One Adam step of `module` towards a fixed target with MSE (the SAM and SD encoder fits). A compiled
    cell compiles the whole train step, optimizer included, as the published code did. Under bf16/fp16 the forward
    and loss run under torch.autocast (float32 weights and Adam); fp16 scales the loss with torch.amp.GradScaler,
    which skips a step whose gradients are not finite and backs its scale off."""

    kinds = ("fit",)
    timed = "one Adam step: zero_grad, MSE(module(inputs), target).backward(), optimizer.step()"
    compiled_target = "whole train step (forward, backward, Adam step)"

    def __init__(self, ctx, module: torch.nn.Module, inputs: torch.Tensor, target: torch.Tensor):
        self.ctx, self.module, self.inputs, self.target = ctx, module, inputs, target
        self.device = inputs.device.type
        self.optimizer = torch.optim.Adam(module.parameters(), lr=1e-4)
        self.loss_fn = torch.nn.MSELoss()
        self.scaler = torch.amp.GradScaler(self.device) if ctx.mixed_dtype == "float16" else None
        # Skipped steps, counted on the device without a sync: the scale backs off exactly when a step is skipped.
        self.skipped: Any = 0
        self.last_scale: Any = self.scaler.get_scale() if self.scaler is not None else None
        self.initial_scale = self.last_scale
        # The test fault overflow:STEP (ctx.loss_multipliers): a tensor updated in place before each step, so a
        # compiled train step reads it without recompiling; None: the loss is left alone.
        self.multipliers = ctx.loss_multipliers()
        self.multiplier = torch.ones((), device=inputs.device) if self.multipliers is not None else None
        self.step_index = 0
        ctx.set_initial_weights(lambda: weight_bytes(module))
        self.train_step = maybe_compile(self._train_step, ctx.spec.compile_mode)
        report_compiled(ctx, self.compiled_target)
        if self.scaler is not None:
            ctx.after_run(self._report_scaler)
        if ctx.spec.probe_weights and is_first_rank():  # test-only: the weights before and after the fit
            write_weights(module, ctx.spec.probe_weights + ".init.npz")
            ctx.after_run(lambda: write_weights(module, ctx.spec.probe_weights))

    def _train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.ctx, self.device):
            loss = self.loss_fn(self.module(self.inputs), self.target)
        if self.multiplier is not None:
            loss = loss * self.multiplier
        return backward_and_step(loss, self.optimizer, self.scaler)

    def step(self) -> torch.Tensor:
        if self.multiplier is not None:
            self.multiplier.fill_(self.multipliers[min(self.step_index, len(self.multipliers) - 1)])
            self.step_index += 1
        loss = self.train_step()
        self.ctx.record_loss(loss.detach())
        if self.scaler is not None:
            scale = self.scaler._scale.detach().clone()  # updated in place by update(): a copy, no sync
            self.skipped = self.skipped + (scale < self.last_scale).to(torch.int64)
            self.last_scale = scale
        return loss

    def _report_scaler(self) -> None:
        self.ctx.report(loss_scale=float(self.scaler.get_scale()), loss_scale_skipped_steps=int(self.skipped),
                        extra={**self.ctx.reported.get("extra", {}), "loss_scale_initial": float(self.initial_scale)})


# -- precision (fwbench.core.precision): what ran, inspected from the model -------------------------------------

def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def variable_dtypes(parameters) -> str:
    """The dtypes parameters are held in, by element count, largest first: 'float32', 'bfloat16+float32'."""
    counts: dict[str, int] = {}
    for parameter in parameters:
        counts[dtype_name(parameter.dtype)] = counts.get(dtype_name(parameter.dtype), 0) + parameter.numel()
    return "+".join(sorted(counts, key=lambda name: -counts[name]))


class DtypeProbe:
    """Records the output dtype of the model's first linear and first convolution layer while the cell runs
    (forward hooks; eager cells remove them after their first call, so no hook is left in the timed steps). What
    the model really computed in, whatever the setting said: the `compute_dtype` column."""

    KINDS = (("linear", torch.nn.Linear), ("conv", (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)))

    def __init__(self, ctx, model: torch.nn.Module):
        self.seen: dict[str, str] = {}
        self.handles: dict[str, Any] = {}
        self.remove_after_first = ctx.spec.compile_mode == "none"
        for name, kind in self.KINDS:
            module = next((m for m in model.modules() if isinstance(m, kind)), None)
            if module is not None:
                self.handles[name] = module.register_forward_hook(self._hook(name))
        ctx.after_run(lambda: ctx.report(compute_dtype=self.compute_dtype()))

    def _hook(self, name: str):
        def hook(module, args, output):
            if name not in self.seen and isinstance(output, torch.Tensor):
                self.seen[name] = dtype_name(output.dtype)
                if self.remove_after_first:
                    self.handles[name].remove()
        return hook

    def compute_dtype(self) -> str | None:
        found = sorted(set(self.seen.values()))
        return "+".join(found) if found else None


def autocast(ctx, device: str):
    """torch.autocast in the half type the precision asks for (bf16/fp16 on a float32 model), else a no-op context."""
    import contextlib

    half = ctx.mixed_dtype
    if half is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=torch_dtype(half))


def with_autocast(ctx, device: str, function):
    """`function` called under autocast (see autocast); the function itself when there is no mixed precision."""
    if ctx.mixed_dtype is None:
        return function

    def autocast_call(*args, **kwargs):
        with autocast(ctx, device):
            return function(*args, **kwargs)
    return autocast_call
