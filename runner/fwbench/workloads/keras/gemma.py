"""Gemma (KerasHub GemmaBackbone + GemmaCausalLM, random weights, bfloat16): LoRA fit and greedy generate.
Keras 2 cannot run it (the stack definition marks it unsupported: KerasNLP 0.8.2 GemmaBackbone needs Keras 3)."""

from __future__ import annotations

from fwbench.workloads.keras.causal_lm import GenerateCell, backbone_kwargs, build_causal_lm
from fwbench.workloads.keras.common import FitCell

CELLS = {"fit": FitCell, "generate": GenerateCell}


def make_backbone(models, arch):
    # KerasHub's intermediate_dim counts both gate and up projections: twice HF's width.
    return models.GemmaBackbone(**backbone_kwargs(arch), intermediate_dim=2 * arch.intermediate)


def build(ctx):
    return build_causal_lm(ctx, make_backbone, "GemmaCausalLM")
