"""Gemma (KerasHub GemmaBackbone + GemmaCausalLM, random weights, bfloat16): LoRA fit and greedy generate."""

from __future__ import annotations

from fwbench.workloads import Unsupported
from fwbench.workloads.keras.causal_lm import build_causal_lm
from fwbench.workloads.keras.common import KERAS3


def build(ctx):
    if not KERAS3:
        raise Unsupported("KerasNLP 0.8.2 GemmaBackbone requires Keras 3: it refuses to build on Keras 2 "
                          "(the published table reports Keras 2 Gemma as NA)")
    arch = ctx.arch

    def make_backbone(models):
        return models.GemmaBackbone(
            vocabulary_size=arch["vocab_size"], num_layers=arch["layers"], num_query_heads=arch["heads"],
            num_key_value_heads=arch["kv_heads"], hidden_dim=arch["hidden"], head_dim=arch["head_dim"],
            # KerasHub's intermediate_dim counts both gate and up projections: twice HF's width.
            intermediate_dim=2 * arch["intermediate"])

    return build_causal_lm(ctx, make_backbone, "GemmaCausalLM")
