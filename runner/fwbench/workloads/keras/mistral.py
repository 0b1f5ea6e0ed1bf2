"""Mistral (KerasHub MistralBackbone + MistralCausalLM; KerasNLP 0.8's in the paper-2024 pin set; random weights,
bfloat16): LoRA fit and greedy generate. Keras 2 cannot run it faithfully (the stack definition marks it
unsupported, with the reason)."""

from __future__ import annotations

from fwbench.workloads.keras.causal_lm import GenerateCell, backbone_kwargs, build_causal_lm
from fwbench.workloads.keras.common import KERAS_HUB, FitCell

CELLS = {"fit": FitCell, "generate": GenerateCell}


def make_backbone(models, arch):
    kwargs = backbone_kwargs(arch)
    if not KERAS_HUB:  # KerasNLP 0.8's Mistral derives the head width: hidden_dim // num_query_heads
        if kwargs.pop("head_dim") * arch.heads != arch.hidden:
            raise ValueError("KerasNLP 0.8 Mistral needs head_dim == hidden / heads")
    return models.MistralBackbone(**kwargs, intermediate_dim=arch.intermediate, sliding_window=arch.sliding_window)


def build(ctx):
    return build_causal_lm(ctx, make_backbone, "MistralCausalLM")
