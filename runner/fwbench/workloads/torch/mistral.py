"""Mistral 7B v0.1 architecture (HF Transformers MistralForCausalLM, random weights, bfloat16)."""

from __future__ import annotations

from transformers import MistralConfig, MistralForCausalLM

from fwbench.workloads.torch.causal_lm import build_causal_lm


def build(ctx):
    arch = ctx.arch
    config = MistralConfig(
        vocab_size=arch["vocab_size"], hidden_size=arch["hidden"], num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"], num_key_value_heads=arch["kv_heads"], head_dim=arch["head_dim"],
        intermediate_size=arch["intermediate"], max_position_embeddings=arch["max_positions"],
        sliding_window=arch["sliding_window"], pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    return build_causal_lm(ctx, MistralForCausalLM, config)
