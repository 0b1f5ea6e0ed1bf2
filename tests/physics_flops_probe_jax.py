"""Run inside the keras3-jax environment by tests/test_physics_crosscheck.py; prints one JSON object.

XLA's own count of a tiny model's forward (jax.jit(...).lower(...).compile().cost_analysis()["flops"]) next to
the analytic count of fwbench.core.physics. XLA also counts elementwise work (norms, softmax, activations),
which the analytic convention leaves out, so its figure runs a little higher.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from fwbench.core import physics  # noqa: E402
from fwbench.core.models import BERT, GEMMA  # noqa: E402
from fwbench.workloads.keras.common import nlp_models  # noqa: E402

BATCH = 2


def xla_flops(model, inputs) -> float:
    def forward(trainable, non_trainable, x):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return outputs

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    analysis = jax.jit(forward).lower(trainable, non_trainable, inputs).compile().cost_analysis()
    if isinstance(analysis, list):  # older jax: one dict per computation
        analysis = analysis[0]
    return float(analysis["flops"])


def main() -> None:
    models = nlp_models()
    out = {}
    arch, seq = BERT.arch("tiny"), BERT.shapes["tiny"].seq_len
    backbone = models.BertBackbone(vocabulary_size=arch.vocab_size, num_layers=arch.layers, num_heads=arch.heads,
                                   hidden_dim=arch.hidden, intermediate_dim=arch.intermediate,
                                   max_sequence_length=arch.max_positions)
    classifier = models.BertTextClassifier(backbone, num_classes=arch.num_classes, preprocessor=None)
    ids = np.random.default_rng(0).integers(3, arch.vocab_size, (BATCH, seq)).astype("int32")
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": ids * 0}
    out["bert forward"] = (xla_flops(classifier, x), BATCH * physics.bert_forward(arch, seq))

    arch, seq = GEMMA.arch("tiny"), GEMMA.shapes["tiny"].seq_len
    gemma = models.GemmaCausalLM(backbone=models.GemmaBackbone(
        vocabulary_size=arch.vocab_size, num_layers=arch.layers, num_query_heads=arch.heads,
        num_key_value_heads=arch.kv_heads, hidden_dim=arch.hidden, intermediate_dim=2 * arch.intermediate,
        head_dim=arch.head_dim), preprocessor=None)
    ids = np.random.default_rng(1).integers(3, arch.vocab_size, (BATCH, seq)).astype("int32")
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    out["gemma forward"] = (xla_flops(gemma, x), BATCH * physics.causal_lm_forward(arch, seq, seq))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
