"""Gemma (HF Transformers GemmaForCausalLM, random weights, bfloat16): LoRA fit and greedy generate."""

from __future__ import annotations

from transformers import GemmaConfig, GemmaForCausalLM

from fwbench.workloads.torch.causal_lm import GenerateCell, build_causal_lm, config_kwargs
from fwbench.workloads.torch.trainer import TrainerCell

CELLS = {"fit": TrainerCell, "generate": GenerateCell}


def build(ctx):
    # Gemma's MLP is tanh-approximated GELU (KerasHub's too). Named explicitly: transformers 4.38 (the
    # published version) defaults to hidden_act="gelu" and runs exact GELU; later releases remap it to tanh.
    config = GemmaConfig(**config_kwargs(ctx.arch), hidden_act="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1)
    return build_causal_lm(ctx, GemmaForCausalLM, config)
