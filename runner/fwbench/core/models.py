"""One definition per model: its typed architecture per preset, its input shapes and its input generator.

Read by the data writer (fwbench.core.data), by both workload families (`ctx.arch.hidden`, `ctx.shapes.seq_len`)
and by the tests, so a `tiny` BERT on Keras and on native torch are the same network and read the same
bytes. Plain Python and NumPy only: no deep-learning framework is imported here.

Architectures are frozen dataclasses: a misspelt size in a definition fails when this module is imported,
and a misspelt attribute in a workload fails a unit test (tests/test_models.py parses the workloads).
`paper` = the published A100 sizes (public configs, random weights).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

import numpy as np

PRESET_IDS = ("tiny", "small", "paper")
TASK_KINDS = ("fit", "predict", "generate")

Arrays = dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Architectures (framework-neutral names; each workload maps them onto its own constructors).

@dataclass(frozen=True)
class BertArch:
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    num_classes: int


@dataclass(frozen=True)
class CausalLMArch:
    """Gemma and Mistral. `intermediate` = per-projection MLP width (HF); KerasHub's Gemma
    intermediate_dim is twice this."""

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_positions: int
    sliding_window: int | None = None  # Mistral only


@dataclass(frozen=True)
class SamArch:
    image_size: int
    patch_size: int
    embed_dim: int
    depth: int
    heads: int
    global_attn_indexes: tuple[int, ...]
    window_size: int
    prompt_dim: int
    decoder_depth: int
    decoder_heads: int
    decoder_mlp_dim: int

    @property
    def grid(self) -> int:
        """Side of the image-embedding grid (image_size / patch_size)."""
        return self.image_size // self.patch_size


@dataclass(frozen=True)
class StableDiffusionArch:
    """SD v1.x. The first len(unet_channels)-1 UNet blocks have cross-attention, the last does not."""

    image_size: int
    unet_channels: tuple[int, ...]
    layers_per_block: int
    heads: int
    context_dim: int
    context_len: int
    vae_channels: tuple[int, ...]
    vae_layers_per_block: int
    latent_channels: int
    guidance_scale: float
    denoising_steps: int

    @property
    def latent_size(self) -> int:
        """Side of the latent (the VAE downsamples by 8)."""
        return self.image_size // 8


# ---------------------------------------------------------------------------------------------
# Input shapes that are not architecture (sequence lengths, generation lengths).

@dataclass(frozen=True)
class NoShapes:
    """Image models: every input shape follows from the architecture."""


@dataclass(frozen=True)
class TextShapes:
    seq_len: int


@dataclass(frozen=True)
class CausalLMShapes:
    seq_len: int  # fit: tokens per sequence
    prompt_len: int  # generate: prompt tokens per sequence
    new_tokens: int  # generate: exactly this many new tokens


# ---------------------------------------------------------------------------------------------
# Input generators. Each takes the model's arch and shapes, the task kind, the batch size and a seeded
# numpy Generator, and returns the arrays in a fixed order (the order of RNG draws is part of the bytes:
# never reorder these calls).

def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _token_ids(rng: np.random.Generator, vocab_size: int, *shape: int) -> np.ndarray:
    # Ids 0..2 are reserved (pad / bos / eos in most vocabularies).
    return rng.integers(3, vocab_size, size=shape, dtype=np.int32)


def bert_inputs(arch: BertArch, shapes: TextShapes, kind: str, batch: int, rng: np.random.Generator) -> Arrays:
    seq = shapes.seq_len
    arrays = {"token_ids": _token_ids(rng, arch.vocab_size, batch, seq),
              "padding_mask": np.ones((batch, seq), np.int32)}
    if kind == "fit":
        arrays["labels"] = rng.integers(0, arch.num_classes, size=(batch,), dtype=np.int32)
    return arrays


def causal_lm_inputs(arch: CausalLMArch, shapes: CausalLMShapes, kind: str, batch: int,
                     rng: np.random.Generator) -> Arrays:
    seq = shapes.seq_len if kind == "fit" else shapes.prompt_len
    return {"token_ids": _token_ids(rng, arch.vocab_size, batch, seq), "padding_mask": np.ones((batch, seq), np.int32)}


def sam_inputs(arch: SamArch, shapes: NoShapes, kind: str, batch: int, rng: np.random.Generator) -> Arrays:
    size, grid = arch.image_size, arch.grid
    arrays = {"images": _normal(rng, batch, size, size, 3)}
    if kind == "fit":
        arrays["target_embeddings"] = _normal(rng, batch, grid, grid, arch.prompt_dim)
    else:
        # Two foreground/background point prompts per image, in input-pixel coordinates.
        arrays["points"] = rng.uniform(0, size, size=(batch, 2, 2)).astype(np.float32)
        arrays["point_labels"] = np.tile(np.array([[1, 0]], np.int32), (batch, 1))
    return arrays


def stable_diffusion_inputs(arch: StableDiffusionArch, shapes: NoShapes, kind: str, batch: int,
                            rng: np.random.Generator) -> Arrays:
    size, latent = arch.image_size, arch.latent_size
    if kind == "fit":
        return {"images": _normal(rng, batch, size, size, 3),
                "target_moments": _normal(rng, batch, latent, latent, 2 * arch.latent_channels)}
    return {"latents": _normal(rng, batch, latent, latent, arch.latent_channels),
            "context": _normal(rng, batch, arch.context_len, arch.context_dim),
            "unconditional_context": _normal(rng, batch, arch.context_len, arch.context_dim)}


# ---------------------------------------------------------------------------------------------
# The models.

@dataclass(frozen=True, eq=False)
class Model:
    id: str
    arch_class: type
    shapes_class: type
    archs: Mapping[str, Any]  # preset -> arch_class instance
    shapes: Mapping[str, Any]  # preset -> shapes_class instance
    make_inputs: Callable[..., Arrays]  # (arch, shapes, kind, batch, rng) -> arrays

    def __post_init__(self) -> None:
        for table, cls in ((self.archs, self.arch_class), (self.shapes, self.shapes_class)):
            if set(table) != set(PRESET_IDS):
                raise ValueError(f"model {self.id}: presets {sorted(table)} != {sorted(PRESET_IDS)}")
            for preset, value in table.items():
                if type(value) is not cls:
                    raise TypeError(f"model {self.id} preset {preset}: {type(value).__name__} is not {cls.__name__}")

    def arch(self, preset: str) -> Any:
        return self.archs[preset]

    def inputs(self, preset: str, kind: str, batch: int, rng: np.random.Generator) -> Arrays:
        return self.make_inputs(self.archs[preset], self.shapes[preset], kind, batch, rng)


_BERT_BASE = BertArch(vocab_size=28996, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512,
                      num_classes=2)
_TEXT_512 = TextShapes(seq_len=512)
# The published generate used max_length=50, which counts the start token and the 5-token prompt: 44 new.
_LM_SHAPES = CausalLMShapes(seq_len=128, prompt_len=5, new_tokens=44)
_SD_V1_UNET_VAE = dict(unet_channels=(320, 640, 1280, 1280), layers_per_block=2, heads=8, context_dim=768,
                       context_len=77, vae_channels=(128, 256, 512, 512), vae_layers_per_block=2,
                       latent_channels=4, guidance_scale=7.5, denoising_steps=50)
_NO_SHAPES = {preset: NoShapes() for preset in PRESET_IDS}

BERT = Model(
    "bert", BertArch, TextShapes,
    archs={
        "paper": _BERT_BASE,
        "small": _BERT_BASE,
        "tiny": BertArch(vocab_size=1024, hidden=64, layers=2, heads=2, intermediate=128, max_positions=128,
                         num_classes=2),
    },
    shapes={"paper": _TEXT_512, "small": _TEXT_512, "tiny": TextShapes(seq_len=64)},
    make_inputs=bert_inputs,
)

GEMMA = Model(
    "gemma", CausalLMArch, CausalLMShapes,
    archs={
        "paper": CausalLMArch(vocab_size=256000, hidden=3072, layers=28, heads=16, kv_heads=16, head_dim=256,
                              intermediate=24576, max_positions=8192),
        # Gemma-2B-shaped: fits a 16-24 GB GPU with LoRA in bf16.
        "small": CausalLMArch(vocab_size=256000, hidden=2048, layers=18, heads=8, kv_heads=1, head_dim=256,
                              intermediate=16384, max_positions=8192),
        "tiny": CausalLMArch(vocab_size=1024, hidden=64, layers=2, heads=4, kv_heads=4, head_dim=16,
                             intermediate=128, max_positions=256),
    },
    shapes={"paper": _LM_SHAPES, "small": _LM_SHAPES,
            "tiny": CausalLMShapes(seq_len=32, prompt_len=5, new_tokens=10)},
    make_inputs=causal_lm_inputs,
)

MISTRAL = Model(
    "mistral", CausalLMArch, CausalLMShapes,
    archs={
        "paper": CausalLMArch(vocab_size=32000, hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                              intermediate=14336, max_positions=32768, sliding_window=4096),
        # Same widths as 7B with 8 layers: ~1.9B parameters.
        "small": CausalLMArch(vocab_size=32000, hidden=4096, layers=8, heads=32, kv_heads=8, head_dim=128,
                              intermediate=14336, max_positions=32768, sliding_window=4096),
        "tiny": CausalLMArch(vocab_size=1024, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                             intermediate=128, max_positions=256, sliding_window=64),
    },
    shapes=GEMMA.shapes,
    make_inputs=causal_lm_inputs,
)

SAM = Model(
    "sam", SamArch, NoShapes,
    archs={
        "paper": SamArch(image_size=1024, patch_size=16, embed_dim=1280, depth=32, heads=16,
                         global_attn_indexes=(7, 15, 23, 31), window_size=14, prompt_dim=256,
                         decoder_depth=2, decoder_heads=8, decoder_mlp_dim=2048),
        # ViT-B sizes.
        "small": SamArch(image_size=1024, patch_size=16, embed_dim=768, depth=12, heads=12,
                         global_attn_indexes=(2, 5, 8, 11), window_size=14, prompt_dim=256,
                         decoder_depth=2, decoder_heads=8, decoder_mlp_dim=2048),
        "tiny": SamArch(image_size=128, patch_size=16, embed_dim=32, depth=2, heads=2,
                        global_attn_indexes=(1,), window_size=4, prompt_dim=32,
                        decoder_depth=2, decoder_heads=2, decoder_mlp_dim=64),
    },
    shapes=_NO_SHAPES,
    make_inputs=sam_inputs,
)

STABLE_DIFFUSION = Model(
    "stable_diffusion", StableDiffusionArch, NoShapes,
    archs={
        "paper": StableDiffusionArch(image_size=512, **_SD_V1_UNET_VAE),
        "small": StableDiffusionArch(image_size=256, **_SD_V1_UNET_VAE),
        # KerasCV needs a latent of at least 16x16, so 128 px. Four VAE blocks keep the /8 latent;
        # channels stay multiples of 32 for SD's 32-group GroupNorm.
        "tiny": StableDiffusionArch(image_size=128, unet_channels=(32, 64), layers_per_block=1, heads=2,
                                    context_dim=32, context_len=77, vae_channels=(32, 32, 64, 64),
                                    vae_layers_per_block=1, latent_channels=4, guidance_scale=7.5,
                                    denoising_steps=50),
    },
    shapes=_NO_SHAPES,
    make_inputs=stable_diffusion_inputs,
)

MODELS: dict[str, Model] = {m.id: m for m in (SAM, STABLE_DIFFUSION, BERT, GEMMA, MISTRAL)}


def field_names(cls: type) -> set[str]:
    """The attributes a workload may read on an architecture or shapes class: fields and properties."""
    names = {f.name for f in fields(cls)}
    names |= {name for name, value in vars(cls).items() if isinstance(value, property)}
    return names
