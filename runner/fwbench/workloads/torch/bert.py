"""BERT classifier (HF Transformers). fit: Trainer + AdamW + cross-entropy (bf16/fp16: the Trainer's own bf16=True /
fp16=True); predict: forward pass (bf16/fp16: under torch.autocast)."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForSequenceClassification

from fwbench.workloads import StepCell
from fwbench.workloads.torch.common import (maybe_compile, report_compiled, report_model, seed_weights, tensor,
                                            with_autocast)
from fwbench.workloads.torch.trainer import TrainerCell


class ForwardCell(StepCell):
    """The classifier's forward pass on the batch, under no_grad."""

    kinds = ("predict",)
    timed = "model(**inputs).logits: one forward pass (the compiled module when --compile is set)"

    def __init__(self, forward, inputs: dict[str, torch.Tensor]):
        self.forward, self.inputs = forward, inputs

    @torch.no_grad()
    def step(self):
        return self.forward(**self.inputs).logits


CELLS = {"fit": TrainerCell, "predict": ForwardCell}


def build(ctx):
    arch, device = ctx.arch, ctx.backend.device
    seed_weights(ctx)
    dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0} if ctx.dropout_off else {}
    config = BertConfig(
        vocab_size=arch.vocab_size, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads, intermediate_size=arch.intermediate,
        max_position_embeddings=arch.max_positions, num_labels=arch.num_classes,
        # Set up front: otherwise the first labelled call sets it and a compiled model recompiles.
        problem_type="single_label_classification", **dropout,
    )
    model = BertForSequenceClassification(config).to(device)
    report_model(ctx, model)
    ctx.report(seq_len=ctx.shapes.seq_len)
    # A fit reads the global batch (all devices' rows; the shared batch itself on one device, weak scaling).
    arrays = ctx.global_arrays() if ctx.kind == "fit" else ctx.arrays
    batch = {"input_ids": tensor(arrays["token_ids"], "cpu", torch.long),
             "attention_mask": tensor(arrays["padding_mask"], "cpu", torch.long)}

    if ctx.kind == "fit":
        batch["labels"] = tensor(arrays["labels"], "cpu", torch.long)
        return TrainerCell(ctx, model, batch)

    model.eval()
    forward = maybe_compile(model, ctx.spec.compile_mode)
    report_compiled(ctx, "model forward")
    return ForwardCell(with_autocast(ctx, device, forward), {key: value.to(device) for key, value in batch.items()})
