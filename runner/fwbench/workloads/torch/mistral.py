"""Mistral 7B v0.1 architecture (HF Transformers MistralForCausalLM, random weights, bfloat16)."""

from __future__ import annotations

from transformers import MistralConfig, MistralForCausalLM

from fwbench.workloads.torch.causal_lm import GenerateCell, build_causal_lm, config_kwargs
from fwbench.workloads.torch.trainer import TrainerCell

CELLS = {"fit": TrainerCell, "generate": GenerateCell}


def build(ctx):
    arch = ctx.arch
    config = MistralConfig(**config_kwargs(arch), sliding_window=arch.sliding_window, bos_token_id=1,
                           eos_token_id=2)
    return build_causal_lm(ctx, MistralForCausalLM, config)
