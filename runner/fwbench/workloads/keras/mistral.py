"""Mistral (KerasHub MistralBackbone + MistralCausalLM, random weights, bfloat16): LoRA fit and greedy
generate."""

from __future__ import annotations

from fwbench.workloads import Unsupported
from fwbench.workloads.keras.causal_lm import build_causal_lm
from fwbench.workloads.keras.common import KERAS3


def build(ctx):
    if not KERAS3:
        raise Unsupported("KerasNLP 0.8.2 Mistral on Keras 2 cannot run the published task: its "
                          "bfloat16 (mixed_bfloat16) path fails inside attention, and enable_lora on Keras 2 "
                          "freezes every weight without adding LoRA layers (the published table reports NA)")
    arch = ctx.arch

    def make_backbone(models):
        return models.MistralBackbone(
            vocabulary_size=arch["vocab_size"], num_layers=arch["layers"], num_query_heads=arch["heads"],
            num_key_value_heads=arch["kv_heads"], hidden_dim=arch["hidden"], head_dim=arch["head_dim"],
            intermediate_dim=arch["intermediate"], sliding_window=arch["sliding_window"])

    return build_causal_lm(ctx, make_backbone, "MistralCausalLM")
