"""Gemma (HF Transformers GemmaForCausalLM, random weights, bfloat16): LoRA fit and greedy generate."""

from __future__ import annotations

from transformers import GemmaConfig, GemmaForCausalLM

from fwbench.workloads.torch.causal_lm import GenerateCell, build_causal_lm, config_kwargs
from fwbench.workloads.torch.trainer import TrainerCell

CELLS = {"fit": TrainerCell, "generate": GenerateCell}


def build(ctx):
    config = GemmaConfig(**config_kwargs(ctx.arch), bos_token_id=2, eos_token_id=1)
    return build_causal_lm(ctx, GemmaForCausalLM, config)
