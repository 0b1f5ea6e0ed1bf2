"""Mistral (KerasHub MistralBackbone + MistralCausalLM, random weights, bfloat16): LoRA fit and greedy
generate. Keras 2 cannot run it faithfully (the stack definition marks it unsupported, with the reason)."""

from __future__ import annotations

from fwbench.workloads.keras.causal_lm import GenerateCell, backbone_kwargs, build_causal_lm
from fwbench.workloads.keras.common import FitCell

CELLS = {"fit": FitCell, "generate": GenerateCell}


def make_backbone(models, arch):
    return models.MistralBackbone(**backbone_kwargs(arch), intermediate_dim=arch.intermediate,
                                  sliding_window=arch.sliding_window)


def build(ctx):
    return build_causal_lm(ctx, make_backbone, "MistralCausalLM")
