"""Stable Diffusion v1 (KerasCV, random weights: download_weights=False).

fit: Adam + MSE training of the VAE image encoder alone, up to its 8-channel moments (before sampling,
as published). predict: one denoising step with classifier-free guidance as KerasCV 0.8.2's generate_image
does it: the UNet twice at the prompt batch size (unconditional, then conditional), guidance, then KerasCV's
DDIM update (text encoding and VAE decoding are outside the step; the text embeddings come from the shared
data, so no tokenizer is needed).

At the SD v1 sizes (paper, small) the models are KerasCV's own ImageEncoder / DiffusionModel classes.
Those hard-code SD v1's widths, so smaller presets (tiny) assemble the same topology from KerasCV's own
blocks with the preset's widths (fwbench.core.models).
"""

from __future__ import annotations

import math

import numpy as np
from keras_cv.src.models.stable_diffusion import constants, diffusion_model, image_encoder
from keras_cv.src.models.stable_diffusion.attention_block import AttentionBlock
from keras_cv.src.models.stable_diffusion.padded_conv2d import PaddedConv2D
from keras_cv.src.models.stable_diffusion.resnet_block import ResnetBlock

from fwbench.workloads import StepCell
from fwbench.workloads.keras.common import (FitCell, check_stack, compile_regression, data_parallel, keras,
                                            report_model, set_precision_policy)

# The widths KerasCV's own classes hard-code.
SD_V1_UNET = dict(unet_channels=(320, 640, 1280, 1280), layers_per_block=2, heads=8, context_dim=768)
SD_V1_VAE = dict(vae_channels=(128, 256, 512, 512), vae_layers_per_block=2, latent_channels=4)


def _is(arch, reference) -> bool:
    return all(getattr(arch, key) == value for key, value in reference.items())


def vae_encoder_to_moments(arch):
    """The VAE encoder up to its 2*latent-channel moments (before KerasCV's sampling Lambda)."""
    if _is(arch, SD_V1_VAE):
        full = image_encoder.ImageEncoder(download_weights=False)
        # KerasCV's encoder ends with conv(8) -> conv1x1(8) -> Lambda(sample); the moments are the
        # conv_out(8), like diffusers' Encoder output (its 1x1 quant_conv belongs to AutoencoderKL).
        moments = [layer for layer in full.layers if isinstance(layer, PaddedConv2D)][-2]
        return keras.Model(full.inputs, moments.output)
    size, channels = arch.image_size, arch.vae_channels
    inputs = keras.Input((size, size, 3))
    x = PaddedConv2D(channels[0], 3, padding=1)(inputs)
    for level, width in enumerate(channels):
        for _ in range(arch.vae_layers_per_block):
            x = ResnetBlock(width)(x)
        if level < len(channels) - 1:
            x = PaddedConv2D(width, 3, padding=((0, 1), (0, 1)), strides=2)(x)
    x = ResnetBlock(channels[-1])(x)
    x = AttentionBlock(channels[-1])(x)
    x = ResnetBlock(channels[-1])(x)
    x = keras.layers.GroupNormalization(epsilon=1e-5)(x)
    x = keras.layers.Activation("swish")(x)
    return keras.Model(inputs, PaddedConv2D(2 * arch.latent_channels, 3, padding=1)(x))


def unet(arch):
    """SD v1's UNet: inputs [latent, timestep_embedding, context], output the predicted noise."""
    size, context_len = arch.image_size, arch.context_len
    if _is(arch, SD_V1_UNET):
        return diffusion_model.DiffusionModel(size, size, context_len, download_weights=False)
    channels, heads, layers = arch.unet_channels, arch.heads, arch.layers_per_block
    ResBlock, SpatialTransformer = diffusion_model.ResBlock, diffusion_model.SpatialTransformer
    context = keras.Input((context_len, arch.context_dim), name="context")
    t_input = keras.Input((channels[0],), name="timestep_embedding")
    latent = keras.Input((arch.latent_size, arch.latent_size, arch.latent_channels), name="latent")
    t_emb = keras.layers.Dense(4 * channels[0])(t_input)
    t_emb = keras.layers.Activation("swish")(t_emb)
    t_emb = keras.layers.Dense(4 * channels[0])(t_emb)

    def attend(x, width, level):
        # Cross-attention on every level but the deepest, as in SD v1 / KerasCV.
        if level < len(channels) - 1:
            x = SpatialTransformer(heads, width // heads, fully_connected=False)([x, context])
        return x

    x = PaddedConv2D(channels[0], 3, padding=1)(latent)
    skips = [x]
    for level, width in enumerate(channels):
        for _ in range(layers):
            x = attend(ResBlock(width)([x, t_emb]), width, level)
            skips.append(x)
        if level < len(channels) - 1:
            x = PaddedConv2D(width, 3, strides=2, padding=1)(x)
            skips.append(x)
    x = ResBlock(channels[-1])([x, t_emb])
    x = SpatialTransformer(heads, channels[-1] // heads, fully_connected=False)([x, context])
    x = ResBlock(channels[-1])([x, t_emb])
    for level in reversed(range(len(channels))):
        width = channels[level]
        for _ in range(layers + 1):
            x = keras.layers.Concatenate()([x, skips.pop()])
            x = attend(ResBlock(width)([x, t_emb]), width, level)
        if level > 0:
            x = diffusion_model.Upsample(width)(x)
    x = keras.layers.GroupNormalization(epsilon=1e-5)(x)
    x = keras.layers.Activation("swish")(x)
    output = PaddedConv2D(arch.latent_channels, 3, padding=1)(x)
    return keras.Model([latent, t_input, context], output)


def timestep_embedding(timestep: int, dim: int, max_period: float = 10000.0) -> np.ndarray:
    """KerasCV's sinusoidal timestep embedding (StableDiffusion._get_timestep_embedding)."""
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(0, half, dtype="float32") / half)
    args = timestep * freqs
    return np.concatenate([np.cos(args), np.sin(args)])[None].astype("float32")


class DenoisingStep(StepCell):
    """One classifier-free-guidance denoising step: the UNet on uncond then cond, guidance, KerasCV's DDIM update."""

    kinds = ("predict",)
    timed = ("two model.predict_on_batch() calls of the UNet (unconditional, conditional) + guidance + DDIM "
             "update (one denoising step)")

    def __init__(self, model, arch, latents, context, unconditional_context):
        self.model, self.arch, self.latents = model, arch, latents
        self.context, self.unconditional_context = context, unconditional_context
        self.batch = latents.shape[0]
        # KerasCV's schedule: timesteps 1, 1+k, ... and its alphas table, walked from the noisiest end.
        self.timesteps = np.arange(1, 1000, 1000 // arch.denoising_steps)[::-1]
        self.alphas = [constants._ALPHAS_CUMPROD[t] for t in self.timesteps]
        self.index = 0

    def step(self):
        arch, batch = self.arch, self.batch
        index = self.index % len(self.timesteps)
        self.index += 1
        t_emb = np.repeat(timestep_embedding(int(self.timesteps[index]), arch.unet_channels[0]), batch, 0)
        # As KerasCV 0.8.2: two UNet calls at the prompt batch size, not one on both halves at twice the batch
        # (other kernel shapes, one host round trip less). predict_on_batch runs the (jit-compiled) predict
        # function and returns host arrays.
        uncond = np.asarray(self.model.predict_on_batch([self.latents, t_emb, self.unconditional_context]),
                            dtype="float32")  # a mixed-precision UNet returns its half type
        cond = np.asarray(self.model.predict_on_batch([self.latents, t_emb, self.context]), dtype="float32")
        guided = uncond + arch.guidance_scale * (cond - uncond)
        # KerasCV's DDIM update (StableDiffusion.generate_image).
        a_t = self.alphas[index]
        a_prev = self.alphas[index + 1] if index + 1 < len(self.alphas) else 1.0
        pred_x0 = (self.latents - math.sqrt(1 - a_t) * guided) / math.sqrt(a_t)
        self.latents = (guided * math.sqrt(1.0 - a_prev) + math.sqrt(a_prev) * pred_x0).astype("float32")
        return self.latents


CELLS = {"fit": FitCell, "predict": DenoisingStep}


def build(ctx):
    check_stack(ctx)
    set_precision_policy(ctx)
    arch = ctx.arch
    if ctx.kind == "fit":
        with data_parallel(ctx):  # --devices N: the encoder's variables are made, and it is compiled, in its scope
            encoder = vae_encoder_to_moments(arch)
            report_model(ctx, encoder)
            compile_regression(ctx, encoder)
        arrays = ctx.global_arrays()  # all devices' rows (the shared batch itself on one device)
        return FitCell(encoder, arrays["images"], arrays["target_moments"], ctx.total_steps, ctx=ctx)

    model = unet(arch)
    report_model(ctx, model)
    model.compile(jit_compile=ctx.jit_compile)
    return DenoisingStep(model, arch, ctx.arrays["latents"], ctx.arrays["context"], ctx.arrays["unconditional_context"])
