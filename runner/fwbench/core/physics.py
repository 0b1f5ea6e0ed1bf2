"""What one step of a cell costs in FLOPs and bytes, and what the hardware could do: the physics columns.

Framework-free (plain Python): the cell, the runner and the aggregator (for the published A100 rows) all
count the same way. Counting convention (docs/workloads.md, "Physics"): 2 FLOPs per multiply-add of every
matmul, convolution and attention product (QK^T and AV over the whole score matrix, as the libraries compute
it); elementwise work, norms, softmax and embedding lookups are not counted (torch's FlopCounterMode and
XLA's cost analysis count matmuls the same way, which the integration test checks at `tiny`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fwbench.core.models import BertArch, CausalLMArch, CausalLMShapes, SamArch, StableDiffusionArch, MODELS

# Backward with weight gradients costs twice the forward (activation grads + weight grads): training = 3x.
TRAIN_FACTOR = 3.0
# LoRA: frozen weights get activation gradients only, so backward = 1x forward: training = 2x (the "4N" rule).
LORA_TRAIN_FACTOR = 2.0
LLM_BYTES_PER_PARAM = 2  # the LLM cells hold bfloat16 weights and KV cache


@dataclass(frozen=True)
class StepCost:
    flops: float  # model FLOPs per timed step
    convention: str  # how flops were counted (a row column)
    bytes_moved: float | None = None  # generate: weights + KV cache read per step
    # The convolution part of `flops`: cuDNN (torch) runs convolutions under a TF32 switch of their own.
    conv_flops: float = 0.0

    @property
    def matmul_flops(self) -> float:
        """Everything that is not a convolution: matmuls and attention products."""
        return self.flops - self.conv_flops


# ---------------------------------------------------------------------------------------------
# Forward FLOPs per model (one sequence / image unless a batch is given).

def bert_forward(arch: BertArch, seq: int) -> float:
    h = arch.hidden
    per_token = arch.layers * (4 * h * h + 2 * h * arch.intermediate + 2 * seq * h)  # dense + QK^T and AV
    return 2.0 * (seq * per_token + h * h + h * arch.num_classes)  # pooler and classifier: the first token only


def causal_lm_dense_params(arch: CausalLMArch) -> int:
    """Matmul weights a token passes through (attention, gated MLP, LM head); embeddings are a lookup."""
    h = arch.hidden
    q_out = arch.heads * arch.head_dim
    kv_out = arch.kv_heads * arch.head_dim
    per_layer = h * q_out + 2 * h * kv_out + q_out * h + 3 * h * arch.intermediate
    return arch.layers * per_layer + h * arch.vocab_size


def causal_lm_params(arch: CausalLMArch, tied_embeddings: bool) -> int:
    """Weights held: Gemma ties its LM head to the embeddings, Mistral has both matrices."""
    return causal_lm_dense_params(arch) + (0 if tied_embeddings else arch.vocab_size * arch.hidden)


def _attended(arch: CausalLMArch, context: int) -> int:
    return context if arch.sliding_window is None else min(context, arch.sliding_window)


def causal_lm_forward(arch: CausalLMArch, tokens: int, context: int, lm_head_tokens: int | None = None) -> float:
    """`tokens` new positions attending to `context` positions (the whole score matrix: prefill/fit compute
    the causal square in full)."""
    dense = causal_lm_dense_params(arch) - arch.hidden * arch.vocab_size
    head = arch.hidden * arch.vocab_size * (tokens if lm_head_tokens is None else lm_head_tokens)
    attention = arch.layers * 2 * arch.heads * arch.head_dim * _attended(arch, context) * tokens
    return 2.0 * (tokens * dense + head + attention)


def causal_lm_generate(arch: CausalLMArch, shapes: CausalLMShapes, batch: int,
                       tied_embeddings: bool) -> tuple[float, float]:
    """(FLOPs, bytes) of one generate call: prefill of the prompt (gives the first new token), then one
    decode pass per further token with the KV cache growing. Bytes = weights read once per pass + the KV
    cache read by each pass (bf16)."""
    prompt, new = shapes.prompt_len, shapes.new_tokens
    flops = batch * causal_lm_forward(arch, prompt, prompt, lm_head_tokens=1)
    kv_per_position = 2 * arch.layers * arch.kv_heads * arch.head_dim * LLM_BYTES_PER_PARAM
    weight_bytes = causal_lm_params(arch, tied_embeddings) * LLM_BYTES_PER_PARAM
    moved = weight_bytes + batch * kv_per_position * prompt  # prefill writes the cache once
    for step in range(1, new):
        context = prompt + step
        flops += batch * causal_lm_forward(arch, 1, context)
        moved += weight_bytes + batch * kv_per_position * _attended(arch, context)
    return flops, float(moved)


def _conv(cin: int, cout: int, pixels: int, kernel: int = 3) -> float:
    return 2.0 * kernel * kernel * cin * cout * pixels


def _resnet(cin: int, cout: int, pixels: int) -> float:
    return _conv(cin, cout, pixels) + _conv(cout, cout, pixels) + (_conv(cin, cout, pixels, 1) if cin != cout else 0)


@dataclass(frozen=True)
class Flops:
    """A forward's FLOPs and the convolution part of them."""
    total: float
    conv: float

    def __add__(self, other: "Flops") -> "Flops":
        return Flops(self.total + other.total, self.conv + other.conv)

    def __mul__(self, factor: float) -> "Flops":
        return Flops(self.total * factor, self.conv * factor)

    __rmul__ = __mul__


def _conv_part(flops: float) -> Flops:
    return Flops(flops, flops)


def _matmul_part(flops: float) -> Flops:
    return Flops(flops, 0.0)


def _unet_transformer(c: int, tokens: int, context_dim: int, context_len: int) -> Flops:
    # proj_in and proj_out are 1x1 convolutions in SD v1 (Diffusers' use_linear_projection=False, KerasCV's
    # PaddedConv2D); self-attention q, k, v, out; cross-attention q, out; GEGLU (c -> 2x4c, 4c -> c).
    projections = 2.0 * tokens * (c * c + c * c)
    linear = 2.0 * tokens * (4 * c * c + 2 * c * c + 12 * c * c)
    cross_kv = 2.0 * context_len * 2 * context_dim * c
    attention = 2.0 * 2 * c * tokens * (tokens + context_len)
    return _conv_part(projections) + _matmul_part(linear + cross_kv + attention)


def unet_forward_parts(arch: StableDiffusionArch) -> Flops:
    """One UNet2DConditionModel call on one latent (SD v1 layout: cross-attention in all but the deepest block)."""
    ch, lpb, n = arch.unet_channels, arch.layers_per_block, len(arch.unet_channels)
    side = arch.latent_size
    pixels = side * side
    flops = _conv_part(_conv(arch.latent_channels, ch[0], pixels))
    skips = [ch[0]]
    cin = ch[0]
    for i, c in enumerate(ch):
        for _ in range(lpb):
            flops += _conv_part(_resnet(cin, c, pixels))
            if i < n - 1:
                flops += _unet_transformer(c, pixels, arch.context_dim, arch.context_len)
            cin = c
            skips.append(c)
        if i < n - 1:
            pixels //= 4
            flops += _conv_part(_conv(c, c, pixels))
            skips.append(c)
    flops += (_conv_part(2 * _resnet(cin, cin, pixels))
              + _unet_transformer(cin, pixels, arch.context_dim, arch.context_len))
    for i, c in enumerate(reversed(ch)):
        for _ in range(lpb + 1):
            flops += _conv_part(_resnet(cin + skips.pop(), c, pixels))
            if i > 0:
                flops += _unet_transformer(c, pixels, arch.context_dim, arch.context_len)
            cin = c
        if i < n - 1:
            pixels *= 4
            flops += _conv_part(_conv(c, c, pixels))
    return flops + _conv_part(_conv(ch[0], arch.latent_channels, pixels))


def unet_forward(arch: StableDiffusionArch) -> float:
    return unet_forward_parts(arch).total


def vae_encoder_forward_parts(arch: StableDiffusionArch) -> Flops:
    """The VAE encoder: convolutions but for the mid-block attention (Linear projections in Diffusers)."""
    ch = arch.vae_channels
    pixels = arch.image_size * arch.image_size
    flops = _conv(3, ch[0], pixels)
    cin = ch[0]
    for i, c in enumerate(ch):
        for _ in range(arch.vae_layers_per_block):
            flops += _resnet(cin, c, pixels)
            cin = c
        if i < len(ch) - 1:
            pixels //= 4
            flops += _conv(c, c, pixels)
    attention = 2.0 * pixels * 4 * cin * cin + 2.0 * 2 * cin * pixels * pixels
    flops += 2 * _resnet(cin, cin, pixels)
    moments = 2 * arch.latent_channels
    flops += _conv(cin, moments, pixels) + _conv(moments, moments, pixels, 1)
    return _conv_part(flops) + _matmul_part(attention)


def vae_encoder_forward(arch: StableDiffusionArch) -> float:
    return vae_encoder_forward_parts(arch).total


def sam_encoder_forward_parts(arch: SamArch) -> Flops:
    """The ViT image encoder: a convolutional patch embedding (kernel = stride = patch) and neck (1x1, 3x3)
    around matmul blocks."""
    d, grid = arch.embed_dim, arch.grid
    tokens = grid * grid
    patch_embedding = 2.0 * tokens * arch.patch_size * arch.patch_size * 3 * d
    padded = -(-grid // arch.window_size) * arch.window_size
    blocks = 0.0
    for block in range(arch.depth):
        blocks += 2.0 * tokens * (4 * d * d + 8 * d * d)  # qkv + proj, MLP (ratio 4)
        if block in arch.global_attn_indexes:
            blocks += 2.0 * 2 * d * tokens * tokens
        else:  # windows over the grid padded to a multiple of the window
            blocks += 2.0 * 2 * d * padded * padded * arch.window_size * arch.window_size
    neck = arch.prompt_dim
    return (_conv_part(patch_embedding) + _matmul_part(blocks)
            + _conv_part(_conv(d, neck, tokens, 1) + _conv(neck, neck, tokens)))


def sam_encoder_forward(arch: SamArch) -> float:
    return sam_encoder_forward_parts(arch).total


def sam_decoder_forward_parts(arch: SamArch) -> Flops:
    """Mask decoder on one image (two-way transformer at half width, upscaling convs): the image-token terms;
    the handful of prompt tokens is negligible."""
    c, tokens = arch.prompt_dim, arch.grid * arch.grid
    half = c // 2
    per_layer = 2.0 * tokens * c * half * 2 + 2.0 * tokens * c * half * 2  # token->image k,v; image->token q,out
    final = 2.0 * tokens * c * half * 2
    up = 2.0 * (4 * tokens) * c * (c // 4) * 4 + 2.0 * (16 * tokens) * (c // 4) * (c // 8) * 4  # 2x2 transposed convs
    return _matmul_part(arch.decoder_depth * per_layer + final) + _conv_part(up)


def sam_decoder_forward(arch: SamArch) -> float:
    return sam_decoder_forward_parts(arch).total


# ---------------------------------------------------------------------------------------------
# Per cell.

def step_cost(model: str, kind: str, preset: str, batch: int) -> StepCost:
    """Model FLOPs (and, for generate, bytes) of one timed step of (model, kind) at preset and batch."""
    m = MODELS[model]
    arch, shapes = m.arch(preset), m.shapes[preset]
    if model == "bert":
        forward = batch * bert_forward(arch, shapes.seq_len)
        if kind == "fit":
            return StepCost(TRAIN_FACTOR * forward, "train 6N: 3x forward (2N + attention)")
        return StepCost(forward, "forward 2N + attention")
    if model in ("gemma", "mistral"):
        if kind == "fit":
            forward = batch * causal_lm_forward(arch, shapes.seq_len, shapes.seq_len)
            return StepCost(LORA_TRAIN_FACTOR * forward, "LoRA train ~4N: 2x forward (frozen weights: no weight grads)")
        flops, moved = causal_lm_generate(arch, shapes, batch, tied_embeddings=model == "gemma")
        return StepCost(flops, f"generate: prefill {shapes.prompt_len} + {shapes.new_tokens - 1} decode steps "
                               f"(2N + attention over the growing KV cache)", moved)
    if model == "sam":
        encoder = batch * sam_encoder_forward_parts(arch)
        if kind == "fit":
            return _with_convs(TRAIN_FACTOR * encoder, "train 6N: 3x forward of the ViT image encoder")
        return _with_convs(encoder + batch * sam_decoder_forward_parts(arch),
                           "forward: ViT encoder + mask decoder (approx.)")
    if model == "stable_diffusion":
        if kind == "fit":
            return _with_convs(TRAIN_FACTOR * batch * vae_encoder_forward_parts(arch),
                               "train 6N: 3x forward of the VAE encoder")
        return _with_convs(2 * batch * unet_forward_parts(arch), "forward: one UNet step on [uncond, cond] (2x batch)")
    raise ValueError(f"no FLOP model for {model}")


def _with_convs(flops: Flops, convention: str) -> StepCost:
    return StepCost(flops.total, convention, conv_flops=flops.conv)


# ---------------------------------------------------------------------------------------------
# Peaks: dense (no structured sparsity) tensor/vector TFLOP/s per precision and memory bandwidth (GB/s).
# fp16 and bf16 are the tensor cores' fp16/bf16 inputs with FP32 accumulate (the figure a framework's mixed
# precision gets; the RTX 4090's FP16-accumulate figure is twice its bf16 one and left out).

@dataclass(frozen=True)
class Peak:
    name: str
    tflops: dict[str, float]  # precision (fp32, tf32, bf16, fp16) -> dense TFLOP/s
    bandwidth_gbs: float
    source: str


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (dense)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (dense = half the sparse figure)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (dense = half the sparse figure)"
_GH200 = ("NVIDIA GH200 Grace Hopper Superchip datasheet: its GPU is an H100 (H100 SXM5 figures; dense = half the "
          "sparse figure) with 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at 4.9 TB/s")
_V100 = ("NVIDIA V100 Tensor Core GPU datasheet (fp16 = the tensor-core figure: Volta's tensor cores run fp16 only; "
         "no TF32 or BF16 units)")
_BLACKWELL = ("NVIDIA GB200 NVL72 / HGX B200 specifications, individual Blackwell GPU (dense = half the sparse "
              "figure; fp16 = the bf16 figure; fp32 left out: datasheet revisions give different figures)")
# Ordered, most specific first: the first entry whose every token is one of the NVML name's (upper-cased, split at
# anything not a letter or digit) wins. Tokens, not substrings: "L4" is not in "NVIDIA L40", nor "H200" in
# "NVIDIA GH200 480GB".
GPU_PEAKS: tuple[tuple[tuple[str, ...], Peak], ...] = (
    (("A100", "PCIE", "80GB"), Peak("A100 PCIe 80GB", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1935, _A100)),
    (("A100", "PCIE"), Peak("A100 PCIe 40GB", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1555, _A100)),
    (("A100", "80GB"), Peak("A100 SXM4 80GB", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 2039, _A100)),
    (("A100",), Peak("A100 SXM4 40GB", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1555, _A100)),
    (("H100", "PCIE"), Peak("H100 PCIe", {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756}, 2000, _H100)),
    (("H100", "NVL"), Peak("H100 NVL", {"fp32": 60, "tf32": 417.5, "bf16": 835, "fp16": 835}, 3900, _H100)),
    (("H100",), Peak("H100 SXM5", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}, 3350, _H100)),
    (("H200", "NVL"), Peak("H200 NVL", {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}, 4800, _H200)),
    (("H200",), Peak("H200 SXM", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}, 4800, _H200)),
    (("GH200", "HBM3E"), Peak("GH200 144GB HBM3e", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}, 4900, _GH200)),
    (("GH200",), Peak("GH200 96GB HBM3", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}, 4000, _GH200)),
    (("GB200",), Peak("GB200 (one Blackwell GPU)", {"tf32": 1250, "bf16": 2500, "fp16": 2500}, 8000, _BLACKWELL)),
    (("B200",), Peak("B200 (HGX)", {"tf32": 1100, "bf16": 2250, "fp16": 2250}, 7700, _BLACKWELL)),
    (("L40S",), Peak("L40S", {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362}, 864,
                     "NVIDIA L40S datasheet (dense = half the sparse figure)")),
    (("L40",), Peak("L40", {"fp32": 90.5, "tf32": 90.5, "bf16": 181, "fp16": 181}, 864,
                    "NVIDIA L40 GPU datasheet (dense = half the sparse figure)")),
    (("L4",), Peak("L4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121}, 300,
                   "NVIDIA L4 Tensor Core GPU datasheet (dense = half the sparse figure)")),
    (("A10G",), Peak("A10G", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}, 600,
                     "NVIDIA A10 datasheet (A10G is AWS's A10 variant; dense figures)")),
    (("V100", "PCIE"), Peak("V100 PCIe", {"fp32": 14, "fp16": 112}, 900, _V100)),
    (("V100",), Peak("V100 SXM2", {"fp32": 15.7, "fp16": 125}, 900, _V100)),
    (("RTX", "4090"), Peak("RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2}, 1008,
                           "NVIDIA Ada Lovelace architecture whitepaper (dense, FP32 accumulate)")),
)
MIG_PEAK_SOURCE = "none: a MIG slice (the datasheet figures are the whole GPU's)"


def name_tokens(device_name: str | None) -> set[str]:
    """"NVIDIA A100-SXM4-80GB" -> {"NVIDIA", "A100", "SXM4", "80GB"}."""
    return set(re.split(r"[^A-Z0-9]+", (device_name or "").upper())) - {""}


def is_mig_name(device_name: str | None) -> bool:
    """A MIG slice's name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"): never given the whole GPU's peak."""
    return "MIG" in name_tokens(device_name)


def gpu_peak(device_name: str | None) -> Peak | None:
    """The datasheet peaks of the GPU NVML (or the framework) names `device_name`; None for a GPU not in the table
    and for a MIG slice."""
    tokens = name_tokens(device_name)
    if "MIG" in tokens:
        return None
    for patterns, peak in GPU_PEAKS:
        if tokens.issuperset(patterns):
            return peak
    return None


def dtype_precision(dtype: str | None) -> str | None:
    """The half precision a dtype (or a Keras policy name) computes in: "bfloat16"/"mixed_bfloat16" -> bf16,
    "float16"/"mixed_float16" -> fp16; None for float32 and for no dtype (then TF32 decides)."""
    name = (dtype or "").lower()
    if "bfloat16" in name or name == "bf16":
        return "bf16"
    if "float16" in name or name in ("fp16", "half"):
        return "fp16"
    return None


def declared_precision(dtype: str | None, tf32_effective: bool | None, compute_dtype: str | None = None) -> str:
    """The precision a row's FLOPs ran at. The dtype the matmuls and convolutions computed in decides:
    `compute_dtype` when the row has it (schema v7: a mixed-precision cell keeps float32 variables and computes
    in its autocast dtype, float16 -> fp16, bfloat16 -> bf16), else `dtype` (older rows: bfloat16 cells are
    bf16). A float32 computation is tf32 when the row says TF32 was in effect (for the op family asked about),
    else fp32."""
    half = dtype_precision(compute_dtype) if compute_dtype else dtype_precision(dtype)
    if half:
        return half
    return "tf32" if tf32_effective else "fp32"


@dataclass(frozen=True)
class Precisions:
    """What a step's FLOPs ran at: its matmuls (and attention products), and its convolutions (None: the
    step has no convolution FLOPs)."""
    matmul: str
    conv: str | None

    @property
    def combined(self) -> str:
        """The row's compute_precision: the common precision, or "mixed"."""
        return self.matmul if self.conv in (None, self.matmul) else "mixed"


def step_precisions(cost: StepCost, dtype: str | None, tf32_effective: bool | None,
                    tf32_conv_effective: bool | None, compute_dtype: str | None = None) -> Precisions:
    """A row's precisions from its compute dtype (else its dtype) and its effective TF32 state for matmuls and
    for convolutions: autocast runs both in its half dtype, so a mixed-precision SD or SAM row is one precision."""
    conv = declared_precision(dtype, tf32_conv_effective, compute_dtype) if cost.conv_flops > 0 else None
    return Precisions(declared_precision(dtype, tf32_effective, compute_dtype), conv)


def effective_peak(cost: StepCost, precisions: Precisions, tflops: dict[str, float]) -> float | None:
    """The ceiling of a step whose parts run at their own precisions: each part's FLOPs at its own peak, so
    total FLOPs / (matmul FLOPs / matmul peak + conv FLOPs / conv peak); None when a part's peak is unknown."""
    matmul_peak = tflops.get(precisions.matmul)
    if precisions.conv is None or precisions.conv == precisions.matmul:
        return matmul_peak
    conv_peak = tflops.get(precisions.conv)
    if not matmul_peak or not conv_peak:
        return None
    return cost.flops / (cost.matmul_flops / matmul_peak + cost.conv_flops / conv_peak)


def physics_columns(cost: StepCost, ms_per_step: float | None, precisions: Precisions, *, peak_tflops: float | None,
                    peak_source: str | None, bandwidth_gbs: float | None) -> dict[str, Any]:
    """The physics columns of one row (achieved figures null without a time; % of peak null without a peak).
    peak_tflops is the ceiling of the row's precisions (effective_peak for a mixed row)."""
    seconds = ms_per_step / 1000.0 if ms_per_step else None
    achieved = cost.flops / seconds / 1e12 if seconds else None
    pct = 100.0 * achieved / peak_tflops if achieved is not None and peak_tflops else None
    row: dict[str, Any] = {
        "model_flops_per_step": cost.flops, "flops_convention": cost.convention, "achieved_tflops": achieved,
        "compute_precision": precisions.combined, "matmul_compute_precision": precisions.matmul,
        "conv_compute_precision": precisions.conv, "conv_flops_per_step": cost.conv_flops,
        "peak_tflops": peak_tflops, "peak_source": peak_source,
        "pct_of_peak": pct, "precision_suspect": (pct > 100.0) if pct is not None else None,
        "bytes_per_step": cost.bytes_moved, "pct_of_bandwidth": None,
    }
    if cost.bytes_moved is not None and seconds and bandwidth_gbs:
        row["pct_of_bandwidth"] = 100.0 * cost.bytes_moved / seconds / (bandwidth_gbs * 1e9)
    return row

