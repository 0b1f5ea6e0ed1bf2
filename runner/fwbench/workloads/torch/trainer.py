"""HF Trainer fits (BERT, and the Gemma/Mistral LoRA fits), as published: the Trainer runs the loop and
the harness clock times each optimizer step through a TrainerCallback. A module of its own so that the
models that do not train with a Trainer (SAM, Stable Diffusion) never import transformers."""

from __future__ import annotations

import tempfile

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from fwbench.workloads import DrivenCell, Unsupported
from fwbench.workloads.torch.common import is_first_rank, report_process_group, weight_bytes, write_weights


def trainer_amp_unsupported(trainer, half: str | None) -> str | None:
    """Why the Trainer would not really run the mixed precision it was given (None: it will, or none was asked).

    TrainingArguments(fp16=True) on a CPU is accepted, but accelerate turns on autocast (`native_amp`) and the
    GradScaler only off the CPU: the fit would silently train in float32. bf16=True on a CPU does use autocast."""
    if half is None:
        return None
    accelerator = trainer.accelerator
    flag = {"bfloat16": "bf16", "float16": "fp16"}[half]
    device = accelerator.device.type
    if not getattr(accelerator, "native_amp", False):
        return (f"the HF Trainer's {flag}=True on {device} would train in float32: accelerate enables autocast "
                f"only where it supports {flag} ({device}: native_amp is False), so no {half} row can be recorded")
    if half == "float16" and getattr(accelerator, "scaler", None) is None:
        return f"the HF Trainer's fp16=True on {device} has no GradScaler: fp16 without loss scaling is not fp16 AMP"
    return None


class RecordingTrainer(Trainer):
    """The Trainer, keeping each step's loss (the detached tensor training_step returns: no sync) so that the cell
    can count non-finite ones after the fit. The Trainer's own logging replaces them (logging_nan_inf_filter)."""

    fwbench_ctx = None
    loss_multipliers: list[float] | None = None  # the test fault overflow:STEP (ctx.loss_multipliers)

    def compute_loss(self, *args, **kwargs):
        result = super().compute_loss(*args, **kwargs)
        if self.loss_multipliers is None:
            return result
        multiplier = self.loss_multipliers[min(self.state.global_step, len(self.loss_multipliers) - 1)]
        if isinstance(result, tuple):
            return (result[0] * multiplier, *result[1:])
        return result * multiplier

    def _get_train_sampler(self, *args, **kwargs):
        # A scaling cell reads its global batch in order: global step k is rows [kG, (k+1)G) whatever N is (each
        # rank takes its share of them), so one device and N devices update from the same rows.
        if self.fwbench_ctx is not None and self.fwbench_ctx.scaling:
            return torch.utils.data.SequentialSampler(args[0] if args and args[0] is not None else self.train_dataset)
        return super()._get_train_sampler(*args, **kwargs)

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        if self.fwbench_ctx is not None:
            self.fwbench_ctx.record_loss(loss)
        return loss


class RepeatedBatch(torch.utils.data.Dataset):
    """A map-style dataset yielding the same shared batch `repeats` times (rows stay CPU tensors)."""

    def __init__(self, batch: dict[str, torch.Tensor], repeats: int):
        self.batch, self.repeats = batch, repeats
        self.rows = len(next(iter(batch.values())))

    def __len__(self) -> int:
        return self.rows * self.repeats

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        row = index % self.rows
        return {key: value[row] for key, value in self.batch.items()}


class ClockCallback(TrainerCallback):
    """Forwards the Trainer's per-step hooks to the harness clock."""

    def __init__(self, clock):
        self.clock = clock

    def on_step_begin(self, args, state, control, **kwargs):
        self.clock.begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.end(None)  # torch sync is global: cuda.synchronize()


class SkippedStepCallback(TrainerCallback):
    """fp16: counts the optimizer steps the GradScaler skipped (accelerate decides it inside the step already)."""

    def __init__(self, trainer):
        self.trainer, self.skipped = trainer, 0

    def on_step_end(self, args, state, control, **kwargs):
        self.skipped += bool(self.trainer.accelerator.optimizer_step_was_skipped)


class TrainerCell(DrivenCell):
    """HF Trainer fit (as published), timed by the harness clock through a TrainerCallback. The Trainer's
    output directory is a temporary directory, removed when the fit ends (or when the cell is collected)."""

    kinds = ("fit",)
    timed = "trainer.train(): one Trainer optimizer step per clock step"

    def __init__(self, ctx, model, batch: dict[str, torch.Tensor]):
        mode = ctx.spec.compile_mode
        # An explicit tf32 (None only where True would raise), with the same state already set through every
        # torch API: left alone, a compiled Trainer switches TF32 on through the new API only (see
        # TorchBackend.trainer_tf32), and --tf32 off would not reach it.
        tf32, tf32_why = ctx.backend.trainer_tf32(ctx.tf32_policy, compiled=mode != "none")
        ctx.report(extra={"trainer_tf32": tf32, "trainer_tf32_why": tf32_why})
        self.output_dir = tempfile.TemporaryDirectory(prefix="fwbench-trainer-")
        args = TrainingArguments(
            output_dir=self.output_dir.name,
            # The task's batch on one device; a data-parallel rank's share (fwbench.core.scaling) on N.
            per_device_train_batch_size=ctx.per_device_batch,
            max_steps=ctx.total_steps,
            learning_rate=1e-4,
            optim="adamw_torch",
            use_cpu=not ctx.backend.on_gpu,
            # bf16/fp16 of the float32 models (BERT): the Trainer's own mixed precision (autocast, and for fp16
            # accelerate's GradScaler); the LLMs are pure bf16/fp16/fp32 themselves: no autocast on top.
            bf16=ctx.mixed_dtype == "bfloat16",
            fp16=ctx.mixed_dtype == "float16",
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
            torch_compile=mode != "none",
            torch_compile_mode=None if mode == "none" else mode,
            seed=ctx.spec.seed,
            tf32=tf32,
            # Data-parallel ranks (fwbench.harness.ranks set the rendezvous variables): the Trainer wraps the model in
            # DistributedDataParallel over this process group; named, so that accelerate never picks MPI instead.
            # Every BERT parameter takes part in each step: no search for unused ones (the Trainer's default would add
            # a traversal of the autograd graph per step that DDP itself warns about).
            **({"ddp_backend": "nccl" if ctx.backend.on_gpu else "gloo", "ddp_find_unused_parameters": False}
               if ctx.devices > 1 else {}),
        )
        self.trainer = RecordingTrainer(model=model, args=args, train_dataset=RepeatedBatch(batch, ctx.total_steps))
        self.trainer.fwbench_ctx = ctx
        self.trainer.loss_multipliers = ctx.loss_multipliers()
        if ctx.devices > 1:
            check_data_parallel(ctx, self.trainer)
        self.ctx = ctx
        ctx.set_initial_weights(lambda: weight_bytes(model))
        if ctx.spec.probe_weights and is_first_rank():
            write_weights(model, ctx.spec.probe_weights + ".init.npz")  # test-only: the weights the fit starts from
        reason = trainer_amp_unsupported(self.trainer, ctx.mixed_dtype)
        if reason:
            self.output_dir.cleanup()
            raise Unsupported(reason)
        self.skipped = None
        if ctx.mixed_dtype == "float16":
            self.skipped = SkippedStepCallback(self.trainer)
            self.trainer.add_callback(self.skipped)
            initial_scale = float(self.trainer.accelerator.scaler.get_scale())
            ctx.after_run(lambda: ctx.report(loss_scale=float(self.trainer.accelerator.scaler.get_scale()),
                                             loss_scale_skipped_steps=self.skipped.skipped,
                                             extra={**ctx.reported.get("extra", {}),
                                                    "loss_scale_initial": initial_scale}))
        # TrainingArguments(torch_compile=True) compiles the model the Trainer wraps (forward and backward;
        # the optimizer step stays eager); the row's tf32 columns are read after it.
        if mode != "none":
            ctx.report(compiled_target="model (Trainer torch_compile)")

    def drive(self, clock) -> None:
        self.trainer.add_callback(ClockCallback(clock))
        try:
            self.trainer.train()
        finally:
            self.output_dir.cleanup()
        if self.ctx.spec.probe_weights and is_first_rank():
            write_weights(self.trainer.model, self.ctx.spec.probe_weights)


def check_data_parallel(ctx, trainer) -> None:
    """The Trainer really runs DistributedDataParallel over `ctx.devices` ranks; its backend goes on the row."""
    report_process_group(ctx, trainer.args.world_size, "the HF Trainer set up", " via the HF Trainer")
