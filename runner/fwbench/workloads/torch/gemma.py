"""Gemma (HF Transformers GemmaForCausalLM, random weights, bfloat16): LoRA fit and greedy generate."""

from __future__ import annotations

from transformers import GemmaConfig, GemmaForCausalLM

from fwbench.workloads.torch.causal_lm import build_causal_lm


def build(ctx):
    arch = ctx.arch
    config = GemmaConfig(
        vocab_size=arch["vocab_size"], hidden_size=arch["hidden"], num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"], num_key_value_heads=arch["kv_heads"], head_dim=arch["head_dim"],
        intermediate_size=arch["intermediate"], max_position_embeddings=arch["max_positions"],
        pad_token_id=0, bos_token_id=2, eos_token_id=1,
    )
    return build_causal_lm(ctx, GemmaForCausalLM, config)
