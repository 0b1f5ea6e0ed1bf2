"""BERT classifier (KerasHub BertBackbone + BertTextClassifier; KerasNLP 0.8's BertClassifier where KerasNLP is
the model library: Keras 2, and Keras 3.0.5 in the paper-2024 pin set).

fit: Keras `fit` with AdamW + sparse cross-entropy from logits; predict: Keras `predict`.
Sizes come from fwbench.core.models, so `tiny` here is the same network as native-torch's `tiny`.
"""

from __future__ import annotations

from fwbench.workloads.keras.common import (KERAS_HUB, FitCell, PredictCell, check_stack, keras, nlp_models,
                                            report_model, data_parallel, set_precision_policy)

CELLS = {"fit": FitCell, "predict": PredictCell}


def build(ctx):
    check_stack(ctx)
    set_precision_policy(ctx)
    with data_parallel(ctx):  # --devices N: the model's variables are made, and it is compiled, in its scope
        return _build(ctx)


def _build(ctx):
    arch, models = ctx.arch, nlp_models()
    dropout = {"dropout": 0.0} if ctx.dropout_off else {}
    backbone = models.BertBackbone(
        vocabulary_size=arch.vocab_size, num_layers=arch.layers, num_heads=arch.heads,
        hidden_dim=arch.hidden, intermediate_dim=arch.intermediate,
        max_sequence_length=arch.max_positions, **dropout)
    classifier_class = models.BertTextClassifier if KERAS_HUB else models.BertClassifier
    model = classifier_class(backbone, num_classes=arch.num_classes, preprocessor=None, **dropout)
    report_model(ctx, model)
    ctx.report(seq_len=ctx.shapes.seq_len)
    # BertBackbone also takes segment ids; single-segment inputs are all zeros (HF's default too).
    # A fit reads the global batch (all devices' rows; the shared batch itself on one device, weak scaling).
    arrays = ctx.global_arrays() if ctx.kind == "fit" else ctx.arrays
    token_ids = arrays["token_ids"]
    x = {"token_ids": token_ids, "padding_mask": arrays["padding_mask"],
         "segment_ids": token_ids * 0}

    if ctx.kind == "fit":
        model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=ctx.jit_compile)
        return FitCell(model, x, arrays["labels"], ctx.total_steps, ctx=ctx)
    model.compile(jit_compile=ctx.jit_compile)
    return PredictCell(model, x, ctx.total_steps)
