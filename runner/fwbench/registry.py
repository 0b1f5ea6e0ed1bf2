"""What can be benchmarked: stacks, tasks and presets (sizes).

This module is the single source of the matrix. Workloads of every stack read their
architecture sizes from here, so a `tiny` BERT on Keras and on native torch are the
same network. See docs/workloads.md (from shared/design/workloads.md) for the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class RegistryError(ValueError):
    """An unknown stack, task, preset or variant (a user error: exit 2, no traceback)."""


@dataclass(frozen=True)
class Stack:
    id: str
    family: str  # which workload package runs it: "torch" or "keras"
    framework: str  # the library whose version identifies the stack
    compile_modes: tuple[str, ...]  # allowed --compile values; first one is the default
    description: str


STACKS: dict[str, Stack] = {
    s.id: s
    for s in (
        Stack("native-torch", "torch", "torch",
              ("none", "reduce-overhead", "default", "max-autotune"),
              "PyTorch + HF Transformers/Diffusers/PEFT + Meta segment-anything"),
        Stack("keras3-tensorflow", "keras", "keras", ("xla",), "Keras 3, TensorFlow backend, jit_compile=True"),
        Stack("keras3-jax", "keras", "keras", ("xla",), "Keras 3, JAX backend, jit_compile=True"),
        Stack("keras3-torch", "keras", "keras", ("none",), "Keras 3, PyTorch backend, eager (as published)"),
        Stack("keras2-tensorflow", "keras", "tensorflow", ("xla",), "Keras 2 (tf.keras 2.15), XLA"),
    )
}


@dataclass(frozen=True)
class Task:
    id: str  # e.g. "gemma-generate-bs32"
    model: str  # sam, stable_diffusion, bert, gemma, mistral
    kind: str  # fit, predict, generate
    published_batch: int  # batch size of the published v2 table (the `paper` preset)

    @property
    def label(self) -> str:
        return f"{self.model} {self.kind}"


TASKS: dict[str, Task] = {
    t.id: t
    for t in (
        Task("sam-fit", "sam", "fit", 1),
        Task("sam-predict", "sam", "predict", 4),
        Task("stable_diffusion-fit", "stable_diffusion", "fit", 8),
        Task("stable_diffusion-predict", "stable_diffusion", "predict", 13),
        Task("bert-fit", "bert", "fit", 32),
        Task("bert-predict", "bert", "predict", 256),
        Task("gemma-fit", "gemma", "fit", 8),
        Task("gemma-generate-bs32", "gemma", "generate", 32),
        Task("gemma-generate-bs1", "gemma", "generate", 1),
        Task("mistral-fit", "mistral", "fit", 8),
        Task("mistral-generate-bs32", "mistral", "generate", 32),
        Task("mistral-generate-bs1", "mistral", "generate", 1),
    )
}

# ---------------------------------------------------------------------------------------------
# Architectures. Keys are framework-neutral; each stack maps them onto its own constructors.
# `paper` = the published A100 sizes (public configs, random weights).

BERT = {
    "paper": dict(vocab_size=28996, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512,
                  num_classes=2),
    "small": dict(vocab_size=28996, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512,
                  num_classes=2),
    "tiny": dict(vocab_size=1024, hidden=64, layers=2, heads=2, intermediate=128, max_positions=128,
                 num_classes=2),
}

GEMMA = {
    # intermediate = per-projection MLP width (HF); KerasHub's intermediate_dim is twice this.
    "paper": dict(vocab_size=256000, hidden=3072, layers=28, heads=16, kv_heads=16, head_dim=256,
                  intermediate=24576, max_positions=8192),
    # Gemma-2B-shaped: fits a 16-24 GB GPU with LoRA in bf16.
    "small": dict(vocab_size=256000, hidden=2048, layers=18, heads=8, kv_heads=1, head_dim=256,
                  intermediate=16384, max_positions=8192),
    "tiny": dict(vocab_size=1024, hidden=64, layers=2, heads=4, kv_heads=4, head_dim=16,
                 intermediate=128, max_positions=256),
}

MISTRAL = {
    "paper": dict(vocab_size=32000, hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                  intermediate=14336, max_positions=32768, sliding_window=4096),
    # Same widths as 7B with 8 layers: ~1.9B parameters.
    "small": dict(vocab_size=32000, hidden=4096, layers=8, heads=32, kv_heads=8, head_dim=128,
                  intermediate=14336, max_positions=32768, sliding_window=4096),
    "tiny": dict(vocab_size=1024, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                 intermediate=128, max_positions=256, sliding_window=64),
}

SAM = {
    "paper": dict(image_size=1024, patch_size=16, embed_dim=1280, depth=32, heads=16,
                  global_attn_indexes=[7, 15, 23, 31], window_size=14, prompt_dim=256,
                  decoder_depth=2, decoder_heads=8, decoder_mlp_dim=2048),
    # ViT-B sizes.
    "small": dict(image_size=1024, patch_size=16, embed_dim=768, depth=12, heads=12,
                  global_attn_indexes=[2, 5, 8, 11], window_size=14, prompt_dim=256,
                  decoder_depth=2, decoder_heads=8, decoder_mlp_dim=2048),
    "tiny": dict(image_size=128, patch_size=16, embed_dim=32, depth=2, heads=2,
                 global_attn_indexes=[1], window_size=4, prompt_dim=32,
                 decoder_depth=2, decoder_heads=2, decoder_mlp_dim=64),
}

STABLE_DIFFUSION = {
    # SD v1.x. The first len(unet_channels)-1 UNet blocks have cross-attention, the last does not.
    "paper": dict(image_size=512, unet_channels=[320, 640, 1280, 1280], layers_per_block=2,
                  heads=8, context_dim=768, context_len=77, vae_channels=[128, 256, 512, 512],
                  vae_layers_per_block=2, latent_channels=4, guidance_scale=7.5, denoising_steps=50),
    "small": dict(image_size=256, unet_channels=[320, 640, 1280, 1280], layers_per_block=2,
                  heads=8, context_dim=768, context_len=77, vae_channels=[128, 256, 512, 512],
                  vae_layers_per_block=2, latent_channels=4, guidance_scale=7.5, denoising_steps=50),
    # KerasCV needs a latent of at least 16x16, so 128 px. Four VAE blocks keep the /8 latent;
    # channels stay multiples of 32 for SD's 32-group GroupNorm.
    "tiny": dict(image_size=128, unet_channels=[32, 64], layers_per_block=1, heads=2,
                 context_dim=32, context_len=77, vae_channels=[32, 32, 64, 64], vae_layers_per_block=1,
                 latent_channels=4, guidance_scale=7.5, denoising_steps=50),
}

ARCHITECTURES = {"bert": BERT, "gemma": GEMMA, "mistral": MISTRAL, "sam": SAM,
                 "stable_diffusion": STABLE_DIFFUSION}

# Per-task shapes: batch sizes and sequence lengths per preset.
_BATCH = {
    "paper": {t.id: t.published_batch for t in TASKS.values()},
    "small": {"sam-fit": 1, "sam-predict": 4, "stable_diffusion-fit": 4, "stable_diffusion-predict": 4,
              "bert-fit": 16, "bert-predict": 64, "gemma-fit": 4, "gemma-generate-bs32": 16,
              "gemma-generate-bs1": 1, "mistral-fit": 4, "mistral-generate-bs32": 16,
              "mistral-generate-bs1": 1},
    "tiny": {"sam-fit": 1, "sam-predict": 2, "stable_diffusion-fit": 2, "stable_diffusion-predict": 2,
             "bert-fit": 4, "bert-predict": 8, "gemma-fit": 2, "gemma-generate-bs32": 4,
             "gemma-generate-bs1": 1, "mistral-fit": 2, "mistral-generate-bs32": 4,
             "mistral-generate-bs1": 1},
}

_SEQ = {  # bert sequence, LLM fit sequence, prompt length, new tokens
    "paper": dict(bert_seq=512, lm_seq=128, prompt_len=5, new_tokens=45),
    "small": dict(bert_seq=512, lm_seq=128, prompt_len=5, new_tokens=45),
    "tiny": dict(bert_seq=64, lm_seq=32, prompt_len=5, new_tokens=10),
}


@dataclass(frozen=True)
class Preset:
    id: str
    steps: int  # default timed steps
    warmup: int  # default warm-up steps
    timeout_s: float  # default per-cell timeout
    description: str


PRESETS: dict[str, Preset] = {
    p.id: p
    for p in (
        Preset("tiny", 5, 2, 900.0, "CPU-sized: every cell in seconds; used by tests and CI"),
        Preset("small", 20, 2, 3600.0, "fits a 16-24 GB GPU"),
        Preset("paper", 100, 2, 7200.0, "the published A100 sizes and batch sizes"),
    )
}


@dataclass(frozen=True)
class Workload:
    """One task at one preset: everything a stack needs to build and feed the model."""

    task: Task
    preset: str
    batch_size: int
    arch: dict[str, Any]
    shapes: dict[str, Any] = field(default_factory=dict)


def workload(task_id: str, preset: str) -> Workload:
    task = get_task(task_id)
    get_preset(preset)
    seq = _SEQ[preset]
    if task.model == "bert":
        shapes = {"seq_len": seq["bert_seq"]}
    elif task.model in ("gemma", "mistral"):
        shapes = ({"seq_len": seq["lm_seq"]} if task.kind == "fit"
                  else {"prompt_len": seq["prompt_len"], "new_tokens": seq["new_tokens"]})
    else:
        shapes = {}
    return Workload(task, preset, _BATCH[preset][task_id], dict(ARCHITECTURES[task.model][preset]), shapes)


def _choose(kind: str, value: str, table: dict) -> Any:
    if value not in table:
        raise RegistryError(f"unknown {kind} '{value}' (choose from: {', '.join(table)})")
    return table[value]


def get_stack(stack_id: str) -> Stack:
    return _choose("stack", stack_id, STACKS)


def get_task(task_id: str) -> Task:
    return _choose("task", task_id, TASKS)


def get_preset(preset_id: str) -> Preset:
    return _choose("preset", preset_id, PRESETS)


def check_compile_mode(stack: Stack, mode: str) -> str:
    if mode not in stack.compile_modes:
        raise RegistryError(
            f"compile mode '{mode}' is not available on stack '{stack.id}' "
            f"(choose from: {', '.join(stack.compile_modes)})")
    return mode
