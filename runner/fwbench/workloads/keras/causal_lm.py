"""The causal-LM recipe shared by Gemma and Mistral on Keras 3 (KerasHub; KerasNLP 0.8 in the paper-2024 pin
set), as published:
whole model in bfloat16 (--precision: float16 or float32 under fp16, fp32/tf32), `backbone.enable_lora(rank=4)` (query and value projections);
fit = Keras `fit` on token ids with next-token sparse cross-entropy and AdamW;
generate = one whole greedy `generate()` call producing exactly `new_tokens` tokens.
"""

from __future__ import annotations

import inspect

import numpy as np

from fwbench.workloads import StepCell
from fwbench.workloads.keras.common import (FitCell, check_stack, data_parallel, keras, nlp_models, report_model,
                                            set_precision_policy)


def backbone_kwargs(arch) -> dict:
    """The KerasHub backbone arguments Gemma and Mistral share (each adds its MLP width and extras)."""
    return dict(vocabulary_size=arch.vocab_size, num_layers=arch.layers, num_query_heads=arch.heads,
                num_key_value_heads=arch.kv_heads, hidden_dim=arch.hidden, head_dim=arch.head_dim)


class GenerateCell(StepCell):
    """One greedy generate() call on the padded prompts; checks it produced exactly new_tokens tokens."""

    kinds = ("generate",)
    timed = "model.generate(): one whole greedy generate call producing exactly new_tokens tokens"

    def __init__(self, ctx, model, inputs, prompt_len: int, new_tokens: int):
        self.ctx, self.model, self.inputs = ctx, model, inputs
        self.prompt_len, self.new_tokens = prompt_len, new_tokens
        # Never stop early at an end token: KerasHub needs stop_token_ids=None; KerasNLP 0.8 has no such
        # argument and, without a preprocessor, has no end token to stop at.
        self.generate_options = ({"stop_token_ids": None}
                                 if "stop_token_ids" in inspect.signature(model.generate).parameters else {})

    def step(self):
        output = self.model.generate(self.inputs, **self.generate_options)
        generated = np.asarray(output["padding_mask"]).sum(axis=1) - self.prompt_len
        if not (generated == self.new_tokens).all():
            raise RuntimeError(f"generate produced {generated.tolist()} new tokens, expected {self.new_tokens}")
        self.ctx.report(tokens_generated=int(generated[0]), tokenize_in_step=False)
        return output


def build_causal_lm(ctx, make_backbone, task_class: str):
    """`make_backbone(models, arch)` builds the model's KerasHub backbone."""
    check_stack(ctx)
    set_precision_policy(ctx)
    models = nlp_models()
    if ctx.kind == "fit":
        with data_parallel(ctx):  # --devices N: the model's variables are made, and it is compiled, in its scope
            return _fit(ctx, models, make_backbone(models, ctx.arch), task_class)
    backbone = make_backbone(models, ctx.arch)
    model = getattr(models, task_class)(backbone=backbone, preprocessor=None)
    token_ids, padding_mask = ctx.arrays["token_ids"], ctx.arrays["padding_mask"]
    report_model(ctx, model)
    model.compile(sampler="greedy", jit_compile=ctx.jit_compile)
    new_tokens = ctx.shapes.new_tokens
    prompt_len = token_ids.shape[1]
    ctx.report(prompt_len=prompt_len)
    # Without a preprocessor, generate() fills the positions whose padding mask is 0, up to the padded
    # length: pad the prompt to prompt_len + new_tokens.
    inputs = {"token_ids": np.pad(token_ids, ((0, 0), (0, new_tokens))),
              "padding_mask": np.pad(padding_mask, ((0, 0), (0, new_tokens))).astype(bool)}
    return GenerateCell(ctx, model, inputs, prompt_len, new_tokens)


def _fit(ctx, models, backbone, task_class: str) -> FitCell:
    model = getattr(models, task_class)(backbone=backbone, preprocessor=None)
    arrays = ctx.global_arrays()  # all devices' rows (the shared batch itself on one device)
    token_ids, padding_mask = arrays["token_ids"], arrays["padding_mask"]
    backbone.enable_lora(rank=4)
    report_model(ctx, model)
    ctx.report(seq_len=token_ids.shape[1])
    # Next-token loss over the same positions as HF's internal shift: every token predicts the next
    # one, and the last position (nothing to predict) has weight 0.
    labels = np.concatenate([token_ids[:, 1:], np.zeros_like(token_ids[:, :1])], axis=1)
    weights = np.concatenate([padding_mask[:, 1:], np.zeros_like(padding_mask[:, :1])], axis=1)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[], jit_compile=ctx.jit_compile)
    return FitCell(model, {"token_ids": token_ids, "padding_mask": padding_mask}, labels,
                   ctx.total_steps, sample_weight=weights.astype("float32"), ctx=ctx)
