"""Precision as an axis of every cell: the values of `--precision` and what each implies, defined once.

  published  as the published table ran each task: the LLMs (Gemma, Mistral) in pure bfloat16, SAM, SD and BERT in
             float32 with the framework's own TF32 default (`--tf32 default`, an alias: on is tf32, off is fp32).
  fp32       every model in float32, TF32 off (strict IEEE float32 matmuls and convolutions).
  tf32       every model in float32, TF32 on; only where the device has TF32 (Ampere+ GPUs): on a CPU or an older
             GPU the row is `unsupported` (device_unsupported_reason), never a float32 row under tf32's name.
  bf16       SAM, SD, BERT: mixed precision in the stack's own idiom (Keras `mixed_bfloat16`, torch.autocast
             bfloat16 / the Trainer's bf16=True) with float32 variables; LLMs: pure bfloat16 (as published).
  fp16       as bf16 with float16, plus the framework's loss scaling for fits (Keras LossScaleOptimizer, torch
             GradScaler / the Trainer's fp16=True); LLMs: pure float16 weights, no loss scaling.

What is left in float32 under bf16/fp16 (the loss, norms and softmax the frameworks keep in float32, the optimizer
update on float32 master weights) runs with TF32 off: a mixed-precision row's only reduced precision is the one
its name says.

Plain Python: the runner, the cell and the aggregator import it.
"""

from __future__ import annotations

PRECISIONS = ("published", "fp32", "tf32", "bf16", "fp16")
DEFAULT_PRECISION = "published"

# The TF32 policy (the harness backend's `configure(threads, tf32)` switch) each precision implies; None: the
# framework's own default (what the published run had).
TF32_POLICY: dict[str, str | None] = {"published": None, "fp32": "off", "tf32": "on", "bf16": "off", "fp16": "off"}

# The half type of the mixed precisions.
HALF_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
# Keras dtype policies for the models that are float32 as published (SAM, SD, BERT).
KERAS_MIXED_POLICY = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Models that are pure bfloat16 as published (bf16 weights, no float32 master copy).
PURE_HALF_MODELS = ("gemma", "mistral")


# `--tf32` is an alias of `--precision` (one axis, not two): the precision each TF32 policy means. Rows written
# before --precision existed are read the same way (their tf32_setting), so they still pair with new rows.
TF32_AS_PRECISION = {"default": "published", "on": "tf32", "off": "fp32"}


def from_tf32(tf32: str, precision: str = DEFAULT_PRECISION) -> str:
    """The precision a --tf32 value (the alias) and a --precision value mean together; ValueError when they
    contradict each other (--tf32 on --precision fp32)."""
    if tf32 not in TF32_AS_PRECISION:
        raise ValueError(f"unknown TF32 policy '{tf32}' (choose from: {', '.join(TF32_AS_PRECISION)})")
    check(precision)
    meant = TF32_AS_PRECISION[tf32]
    if tf32 == "default" or precision in (DEFAULT_PRECISION, meant):
        return precision if tf32 == "default" else meant
    raise ValueError(f"--tf32 {tf32} means --precision {meant}, which contradicts --precision {precision}")


def of_row(row) -> str:
    """The precision a row was measured at: its `precision` column, or, for a row written before that column
    existed (or as `published` with a --tf32 on/off beside it), what its TF32 setting means."""
    recorded = row.get("precision")
    if isinstance(recorded, str) and recorded and recorded != DEFAULT_PRECISION:  # not missing (None, or NaN read
        return recorded                                                           # through pandas)
    tf32 = row.get("tf32_setting")
    return TF32_AS_PRECISION.get(tf32 if isinstance(tf32, str) else "default", DEFAULT_PRECISION)


def tf32_of(precision: str) -> str:
    """The TF32 policy (the harness backend's switch: default, on, off) a precision runs with."""
    return TF32_POLICY[check(precision)] or "default"


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (choose from: {', '.join(PRECISIONS)})")
    return precision


def device_unsupported_reason(precision: str, *, has_tf32: bool) -> str | None:
    """Why the device cannot run `precision` (None: it can). The one rule: a precision the device cannot run is an
    `unsupported` row with this reason, never an ok row that ran something else under its name. The harness asks it
    at run time, of the device the cell really got; a precision that falls back in a way the device cannot tell
    (a library's own silent fallback) is caught after the run by the dtype the model computed in."""
    if check(precision) == "tf32" and not has_tf32:
        return ("--precision tf32: this device has no TF32 (a CPU, or a GPU older than Ampere, compute capability "
                "below 8.0); it would run plain float32 (fp32), not tf32")
    return None


def model_dtype(precision: str, model: str) -> str:
    """The dtype a model's weights are created in: the LLMs are pure (bf16 as published, fp16, or float32 under
    fp32/tf32); the others keep float32 variables (mixed precision computes in the half type)."""
    check(precision)
    if model in PURE_HALF_MODELS:
        return {"fp16": "float16", "fp32": "float32", "tf32": "float32"}.get(precision, "bfloat16")
    return "float32"


def mixed_dtype(precision: str, model: str) -> str | None:
    """The half type a float32 model computes in under mixed precision (None: no mixed precision)."""
    if model in PURE_HALF_MODELS:
        return None
    return HALF_DTYPE.get(check(precision))


def expected_compute_dtype(precision: str, model: str) -> str:
    """The dtype the model's matmuls/convolutions must have computed in for the row to be `precision`."""
    return mixed_dtype(precision, model) or model_dtype(precision, model)
