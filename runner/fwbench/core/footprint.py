"""Rough sizes a run needs on the host, in one place: GPU memory per cell, disk per image and per environment.

`fwbench doctor` compares them with what the host has before hours of GPU time are spent. They are
estimates for a go / no-go, not measurements: the rows' own peak-memory columns say what a cell used.

GPU memory: the Gemma and Mistral cells are computed from their architecture (bf16 weights, 2 bytes a
parameter; fit adds the activations of a LoRA step without recomputation, per layer s*b*h*(34 + 5*a*s/h)
bytes (Korthikanti et al., 2022), and the float32 logits with their softmax and gradient; generate adds the
bf16 KV cache and the last position's logits). The other models are a table per preset (float32 weights,
AdamW state and activations of BERT-base at seq 512, SAM ViT-H at 1024 px, Stable Diffusion 1.x at 512 px).
Every cell adds the framework's own share (CUDA context, kernels, allocator slack).
"""

from __future__ import annotations

from fwbench.core import models, physics, registry

GB = 1e9
FRAMEWORK_OVERHEAD_GB = 1.5
# Non-LLM cells, GB at each preset (estimates of weights + optimizer state + activations).
OTHER_CELLS_GB = {
    "paper": {"bert-fit": 20.0, "bert-predict": 8.0, "sam-fit": 16.0, "sam-predict": 8.0,
              "stable_diffusion-fit": 14.0, "stable_diffusion-predict": 10.0},
    "small": {"bert-fit": 10.0, "bert-predict": 4.0, "sam-fit": 8.0, "sam-predict": 4.0,
              "stable_diffusion-fit": 6.0, "stable_diffusion-predict": 4.0},
    "tiny": {},  # every tiny cell: TINY_CELL_GB
}
TINY_CELL_GB = 0.5

# Disk: each stack's environment and images are facts of its definition (fwbench.core.registry.Stack.environment_gb,
# image_gb). The local engine's five environments share files (hard links): 8.8 GB in all.
ALL_ENVIRONMENTS_GB = 9.0


def _llm_gb(model: str, kind: str, preset: str, batch: int) -> float:
    arch: models.CausalLMArch = models.MODELS[model].archs[preset]
    shapes: models.CausalLMShapes = models.MODELS[model].shapes[preset]
    weights = physics.causal_lm_params(arch, tied_embeddings=model == "gemma") * physics.LLM_BYTES_PER_PARAM
    if kind == "fit":
        s, h = shapes.seq_len, arch.hidden
        activations = arch.layers * s * batch * h * (34 + 5 * arch.heads * s / h)
        logits = batch * s * arch.vocab_size * 4 * 3  # float32 logits, softmax, gradient
        return (weights + activations + logits) / GB
    context = shapes.prompt_len + shapes.new_tokens
    kv_cache = 2 * arch.layers * arch.kv_heads * arch.head_dim * context * batch * physics.LLM_BYTES_PER_PARAM
    logits = batch * arch.vocab_size * 4 * 2
    return (weights + kv_cache + logits) / GB


def cell_gpu_gb(task_id: str, preset: str) -> float:
    """A rough peak of GPU memory (GB) for one cell of `task_id` at `preset`, the framework's share included."""
    task = registry.get_task(task_id)
    registry.get_preset(preset)
    if task.model in ("gemma", "mistral"):
        need = _llm_gb(task.model, task.kind, preset, task.batch[preset])
    else:
        need = OTHER_CELLS_GB[preset].get(task_id, TINY_CELL_GB)
    return round(need + FRAMEWORK_OVERHEAD_GB, 1)


def environments_gb(stacks: list[str]) -> float:
    """Disk (GB) for the local engine to build these stacks' environments (shared files are stored once)."""
    return min(sum(registry.get_stack(stack).environment_gb for stack in stacks), ALL_ENVIRONMENTS_GB)


def image_gb(stack: str, variant: str) -> float:
    """Disk (GB) of the stack's image of this variant (cpu or gpu)."""
    return dict(registry.get_stack(stack).image_gb)[variant]
