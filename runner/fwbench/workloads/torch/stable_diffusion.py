"""Stable Diffusion v1 (Hugging Face Diffusers, random weights).

fit: Adam + MSE training of the VAE encoder alone, up to its 8-channel moments (as published).
predict: one denoising step with classifier-free guidance: the UNet on [uncond, cond] in one batch,
guidance, then a DDIM scheduler step. Text encoding and VAE decoding are outside the step; the text
embeddings come from the shared data, so no tokenizer is needed.
"""

from __future__ import annotations

import torch
from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel

from fwbench.workloads import StepCell
from fwbench.workloads.torch.common import (RegressionTrainStep, data_parallel, maybe_compile, nchw, report_compiled,
                                            report_model, seed_weights, tensor, with_autocast)


def build_vae(arch) -> AutoencoderKL:
    blocks = len(arch.vae_channels)
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=arch.latent_channels,
        down_block_types=("DownEncoderBlock2D",) * blocks, up_block_types=("UpDecoderBlock2D",) * blocks,
        block_out_channels=tuple(arch.vae_channels), layers_per_block=arch.vae_layers_per_block,
        sample_size=arch.image_size)


def build_unet(arch) -> UNet2DConditionModel:
    blocks = len(arch.unet_channels)
    return UNet2DConditionModel(
        sample_size=arch.latent_size, in_channels=arch.latent_channels,
        out_channels=arch.latent_channels, layers_per_block=arch.layers_per_block,
        block_out_channels=tuple(arch.unet_channels),
        down_block_types=("CrossAttnDownBlock2D",) * (blocks - 1) + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (blocks - 1),
        cross_attention_dim=arch.context_dim,
        attention_head_dim=arch.heads,  # SD v1's config names the head *count* attention_head_dim
    )


def sd_v1_scheduler(steps: int, device: str) -> DDIMScheduler:
    """SD v1's DDIM schedule with its timesteps on the UNet's device: a CPU timestep fed to a compiled UNet
    on a GPU makes torch 2.2 skip CUDA graphs (uncounted) and torch 2.14 split the graph around the CPU work."""
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    scheduler.set_timesteps(steps, device=device)
    return scheduler


class DenoisingStep(StepCell):
    """One classifier-free-guidance denoising step: the UNet on [uncond, cond], guidance, a DDIM step."""

    kinds = ("predict",)
    timed = "unet(cat([latents] * 2), t, context) + guidance + DDIMScheduler.step() (one denoising step)"

    def __init__(self, unet_forward, scheduler: DDIMScheduler, guidance: float, latents: torch.Tensor,
                 context: torch.Tensor):
        self.unet_forward, self.scheduler, self.guidance = unet_forward, scheduler, guidance
        self.latents, self.context = latents, context
        self.index = 0

    @torch.no_grad()
    def step(self):
        timesteps = self.scheduler.timesteps
        timestep = timesteps[self.index % len(timesteps)]
        self.index += 1
        noise = self.unet_forward(torch.cat([self.latents] * 2), timestep, encoder_hidden_states=self.context).sample
        uncond, cond = noise.chunk(2)
        guided = uncond + self.guidance * (cond - uncond)
        self.latents = self.scheduler.step(guided, timestep, self.latents).prev_sample
        return self.latents


CELLS = {"fit": RegressionTrainStep, "predict": DenoisingStep}


def build(ctx):
    arch, device, mode = ctx.arch, ctx.backend.device, ctx.spec.compile_mode

    if ctx.kind == "fit":
        seed_weights(ctx)
        encoder = build_vae(arch).encoder.to(device)
        report_model(ctx, encoder)
        # This rank's rows of the global batch (the shared batch itself on one device at the task's batch).
        arrays = ctx.global_arrays()
        encoder, rows = data_parallel(ctx, encoder)
        return RegressionTrainStep(ctx, encoder, tensor(nchw(arrays["images"][rows]), device),
                                   tensor(nchw(arrays["target_moments"][rows]), device))

    unet = build_unet(arch).to(device).eval()
    report_model(ctx, unet)
    context = torch.cat([tensor(ctx.arrays["unconditional_context"], device),
                         tensor(ctx.arrays["context"], device)])
    report_compiled(ctx, "UNet")
    # bf16/fp16: the UNet under torch.autocast (float32 weights, latents and scheduler), as a diffusers user would.
    return DenoisingStep(with_autocast(ctx, device, maybe_compile(unet, mode)), sd_v1_scheduler(arch.denoising_steps, device), arch.guidance_scale,
                         tensor(nchw(ctx.arrays["latents"]), device), context)
