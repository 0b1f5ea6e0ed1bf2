"""Small helpers shared by the native-torch workloads (no timing here: that is the harness's job)."""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import torch

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


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total, trainable


def report_model(ctx, model: torch.nn.Module, dtype: str) -> None:
    total, trainable = count_params(model)
    ctx.info.update(params_total=total, params_trainable=trainable, dtype=dtype)


class RegressionTrainStep:
    """One Adam step of `module` towards a fixed target with MSE (the SAM and SD encoder fits)."""

    def __init__(self, module: torch.nn.Module, compiled: Any, inputs: torch.Tensor, target: torch.Tensor):
        self.module, self.compiled, self.inputs, self.target = module, compiled, inputs, target
        self.optimizer = torch.optim.Adam(module.parameters(), lr=1e-4)
        self.loss_fn = torch.nn.MSELoss()

    def step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.compiled(self.inputs), self.target)
        loss.backward()
        self.optimizer.step()
        return loss


def repeated_batch_dataset(batch: dict[str, torch.Tensor], repeats: int):
    """A map-style dataset yielding the same shared batch `repeats` times (rows stay CPU tensors)."""

    class _Dataset(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(next(iter(batch.values()))) * repeats

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            row = index % len(next(iter(batch.values())))
            return {key: value[row] for key, value in batch.items()}

    return _Dataset()


def trainer_fit(ctx, model, batch: dict[str, torch.Tensor]):
    """HF Trainer fit (as published), timed by the harness clock through a TrainerCallback."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    mode = ctx.spec.compile_mode
    on_gpu = ctx.backend.on_gpu

    class ClockCallback(TrainerCallback):
        def __init__(self, clock):
            self.clock = clock

        def on_step_begin(self, args, state, control, **kwargs):
            self.clock.begin()

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.end(None)  # torch sync is global: cuda.synchronize()

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="fwbench-trainer-"),
        per_device_train_batch_size=ctx.batch_size,
        max_steps=ctx.total_steps,
        learning_rate=1e-4,
        optim="adamw_torch",
        use_cpu=not on_gpu,
        bf16=False,  # the LLMs are bf16 themselves; no autocast on top
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        torch_compile=mode != "none",
        torch_compile_mode=None if mode == "none" else mode,
        seed=ctx.spec.seed,
    )

    class TrainerCell:
        def __init__(self):
            self.trainer = Trainer(model=model, args=args,
                                   train_dataset=repeated_batch_dataset(batch, ctx.total_steps))

        def drive(self, clock) -> None:
            self.trainer.add_callback(ClockCallback(clock))
            self.trainer.train()

    return TrainerCell()
