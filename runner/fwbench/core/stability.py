"""Numerical stability of a precision (`fwbench stability`): an untimed fit on a learnable target, once at the
precision asked and once at fp32, from the same initial weights, compared step by step. One record per cell identity
(fwbench.core.identity: stack, task, precision, steps, seed, device model, every setting) and planted fault, in a
small Parquet schema of its own (never a cell row: timed cells and their identity are untouched).

The rule (docs/workloads.md#stability), defined once here:
  * deviation at step t = |loss_P(t) - loss_fp32(t)| / max(|loss_fp32(t)|, RELATIVE_FLOOR x |loss_fp32(0)|), over
    the steps where both losses are finite; `max_rel_deviation` is the largest (the floor keeps a loss that has
    fallen near zero from turning rounding into a huge ratio);
  * final loss = the mean of the last FINAL_WINDOW losses;
  * diverged: any non-finite loss at P, or P's final loss above DIVERGENCE_FACTOR x max(fp32's final loss,
    RELATIVE_FLOOR x fp32's first loss);
  * no comparison at all (status incomparable) unless both fits started from the same weights (equal
    initial_weights_sha256).

Plain Python, NumPy and pyarrow: the runner, the cell process and the aggregator import it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fwbench.core.identity import CellIdentity

STABILITY_SCHEMA_VERSION = 2
# Columns each version added; records of an older version are read with them empty.
ADDED_IN = {2: ("cell_id", "settings_id", "initial_weights_sha256", "baseline_initial_weights_sha256")}
DIVERGENCE_FACTOR = 2.0
FINAL_WINDOW = 10
RELATIVE_FLOOR = 0.01
DEFAULT_STEPS = 300
BASELINE_PRECISION = "fp32"
# The test fault `overflow:STEP` multiplies that step's loss by this: 2^26, about 1000x float16's largest value
# (65504), so the loss-scaled gradients of a half-precision backward pass overflow to infinity whatever the scale,
# while the float32 loss itself stays finite.
OVERFLOW_LOSS_FACTOR = float(2 ** 26)
FAULT_PREFIX = "overflow:"
# incomparable: both fits ran, but not from the same initial weights, so their losses are not compared.
STATUSES = ("ok", "diverged", "incomparable", "unsupported", "error", "timeout", "oom", "device_unavailable")
FILE_SUFFIX = ".stability.parquet"

# name, type, description: the schema (docs/results-schema.md#stability-records).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("stability_schema_version", "int64", "Version of this schema."),
    ("fwbench_version", "string", "fwbench that wrote the record."),
    ("record_id", "string", "Unique id of the record."),
    ("started_at", "timestamp", "When the stability run started (UTC)."),
    ("stack", "string", "Stack id."),
    ("task", "string", "Task id (a fit task)."),
    ("model", "string", "Model of the task."),
    ("preset", "string", "Preset (sizes)."),
    ("precision", "string", "The precision checked (--precision)."),
    ("baseline_precision", "string", "The precision it is compared with: fp32."),
    ("pin_set", "string", "Library versions (pin set)."),
    ("compile_mode", "string", "Compile mode (each stack's default: none, or xla for Keras)."),
    ("engine", "string", "Engine that ran the fits (local, current, docker)."),
    ("image_variant", "string", "venv, venv-gpu, cpu, gpu or host."),
    ("device", "string", "Device the fit ran on (cpu, cuda)."),
    ("device_model", "string", "The CPU or GPU model."),
    ("steps", "int64", "Optimizer steps of each fit."),
    ("data_seed", "int64", "Seed of the shared data the learnable target is made from, and of both fits' initial "
                           "weights."),
    ("learnable_target", "string", "How the target was made learnable (a deterministic function of the inputs)."),
    ("fault", "string", "Test-only fault planted in both fits (overflow:STEP), else null."),
    ("cell_id", "string", "stack.task.preset.compile-<mode> of the fits (fwbench.core.identity)."),
    ("settings_id", "string", "Hash of the fit's identity settings at the precision (fwbench.core.identity.SETTINGS: "
                              "pin set, precision, threads, steps, data seed, device model...). With cell_id and "
                              "fault, what keeps records apart."),
    ("initial_weights_sha256", "string", "SHA-256 of the weights the fit at the precision started from (the cell "
                                         "row's column of that name)."),
    ("baseline_initial_weights_sha256", "string", "The same of the fp32 baseline: the losses are compared only "
                                                  "when the two are equal."),
    ("status", "string", "ok | diverged | incomparable (the fits did not start from the same weights: not compared) "
                         "| unsupported | error | timeout | oom | device_unavailable."),
    ("error_type", "string", "Exception class, or what failed, when not ok/diverged."),
    ("error_message", "string", "Why: the unsupported reason, the failure (the fp32 baseline's, prefixed so), or why "
                                "the fits are incomparable."),
    ("losses", "list<float64>", "Loss of every step at the precision (non-finite values kept)."),
    ("baseline_losses", "list<float64>", "Loss of every step of the fp32 baseline."),
    ("first_loss", "float64", "Loss of the first step at the precision."),
    ("final_loss", "float64", f"Mean of the last {FINAL_WINDOW} losses at the precision."),
    ("baseline_final_loss", "float64", f"Mean of the last {FINAL_WINDOW} losses of the fp32 baseline."),
    ("max_rel_deviation", "float64", "Largest relative deviation of the loss from fp32's at the same step (the rule: "
                                     "docs/workloads.md#stability); null when either run has no finite step to compare."),
    ("max_rel_deviation_step", "int64", "The step (0-based) of that largest deviation."),
    ("nonfinite_steps", "int64", "Steps whose loss was non-finite at the precision."),
    ("baseline_nonfinite_steps", "int64", "Steps whose loss was non-finite in the fp32 baseline."),
    ("loss_scale_initial", "float64", "fp16 fits: the dynamic loss scale before the first step."),
    ("loss_scale_final", "float64", "fp16 fits: the dynamic loss scale after the last step."),
    ("loss_scale_skipped_steps", "int64", "fp16 fits: optimizer steps skipped for non-finite gradients (each "
                                          "halves the scale)."),
    ("diverged", "bool", "The divergence rule's verdict (null when the fits did not both run)."),
    ("diverged_reason", "string", "Which part of the rule fired."),
    ("compute_dtype", "string", "The dtype the model computed in at the precision (inspected from what ran)."),
    ("variable_dtype", "string", "The dtype(s) the weights were held in."),
    ("framework_version", "string", "Framework version."),
    ("library_versions", "string", "JSON: library versions in the stack's environment."),
    ("wall_s", "float64", "Seconds both fit processes took, start-up included."),
    ("extra", "string", "JSON: anything else (log paths, the processes' own fields)."),
)
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)


class StabilityError(ValueError):
    """Bad input to a stability run (a task that does not fit, a malformed fault)."""


def overflow_step(fault: str | None) -> int | None:
    """The step of an `overflow:STEP` fault (None: another fault or none); StabilityError when malformed."""
    if not fault or not fault.startswith(FAULT_PREFIX):
        return None
    text = fault[len(FAULT_PREFIX):]
    if not text.isdigit():
        raise StabilityError(f"--inject-fault {fault}: expected overflow:STEP with STEP a step number (0-based)")
    return int(text)


def loss_multipliers(fault: str | None, total_steps: int) -> list[float] | None:
    """Per step, what the fit multiplies its loss by: all 1 but the planted overflow step (None: no such fault)."""
    step = overflow_step(fault)
    if step is None:
        return None
    return [OVERFLOW_LOSS_FACTOR if index == step else 1.0 for index in range(total_steps)]


# -- the learnable target -------------------------------------------------------------------------------------

def learnable_inputs(model: str, arch: Any, arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    """The shared inputs of a fit with a target the model can learn, and the rule in words. BERT: the label is the
    bin of the first token id (a deterministic function of the input, read through the pooled first position);
    Gemma/Mistral: each row counts up by one from its first token, so every next token follows from the current one;
    SAM and SD: the shared fixed target of their fixed input batch (the same pair every step, which the encoder
    can fit) as it is."""
    arrays = dict(arrays)
    if model == "bert":
        first = arrays["token_ids"][:, 0].astype(np.int64)
        arrays["labels"] = (first * arch.num_classes // arch.vocab_size).astype(np.int32)
        return arrays, "label = token_ids[:, 0] * num_classes // vocab_size"
    if model in ("gemma", "mistral"):
        ids = arrays["token_ids"].astype(np.int64)
        span = arch.vocab_size - 3  # ids 0..2 stay reserved, as in the shared data
        counting = 3 + (ids[:, :1] - 3 + np.arange(ids.shape[1])[None, :]) % span
        arrays["token_ids"] = counting.astype(arrays["token_ids"].dtype)
        return arrays, "token_ids[:, t] = token_ids[:, 0] + t (wrapping in 3..vocab_size-1): next token = this + 1"
    return arrays, "the fixed target of the fixed input batch (shared data), every step"


# -- the rule ---------------------------------------------------------------------------------------------------

def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def final_loss(losses: list[float]) -> float | None:
    tail = losses[-FINAL_WINDOW:]
    return float(np.mean(tail)) if tail else None


def max_relative_deviation(losses: list[float], baseline: list[float]) -> tuple[float | None, int | None]:
    """(largest relative deviation, its step) over the steps both fits have with finite losses (rule above)."""
    if not baseline or not _finite(baseline[0]):
        return None, None
    floor = RELATIVE_FLOOR * abs(baseline[0])
    best: tuple[float | None, int | None] = (None, None)
    for step, (loss, reference) in enumerate(zip(losses, baseline)):
        if not (_finite(loss) and _finite(reference)):
            continue
        deviation = abs(loss - reference) / max(abs(reference), floor, 1e-12)
        if best[0] is None or deviation > best[0]:
            best = (deviation, step)
    return best


def verdict(losses: list[float], baseline: list[float]) -> tuple[bool, str | None]:
    """(diverged, why) by the rule above."""
    nonfinite = sum(1 for loss in losses if not _finite(loss))
    if nonfinite:
        return True, f"{nonfinite} non-finite loss(es)"
    final, reference = final_loss(losses), final_loss(baseline)
    if final is None or reference is None or not _finite(reference) or not baseline or not _finite(baseline[0]):
        return False, None
    bound = DIVERGENCE_FACTOR * max(reference, RELATIVE_FLOOR * abs(baseline[0]))
    if final > bound:
        return True, (f"final loss {final:.4g} > {DIVERGENCE_FACTOR:g} x fp32's {reference:.4g}"
                      + ("" if reference >= RELATIVE_FLOOR * abs(baseline[0]) else " (floored)"))
    return False, None


# -- records ----------------------------------------------------------------------------------------------------

def as_losses(values: Any) -> list[float]:
    """A record's losses (JSON may carry them as numbers, NaN/Infinity tokens or null) as floats (null: NaN)."""
    return [float("nan") if value is None else float(value) for value in (values or [])]


def different_start(run: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    """Why two finished fits did not start from the same weights (their initial_weights_sha256 differ or are
    missing), or None: they did, and their losses may be compared."""
    mine, theirs = run.get("initial_weights_sha256"), baseline.get("initial_weights_sha256")
    if mine and mine == theirs:
        return None
    unchecked = [fit for fit, checksum in (("the fit at the precision", mine), ("the fp32 baseline", theirs))
                 if not checksum]
    if unchecked:
        return (f"no initial-weights checksum from {' nor '.join(unchecked)}: that both fits started from the same "
                "weights cannot be checked, so their losses are not compared")
    held, baseline_held = run.get("variable_dtype"), baseline.get("variable_dtype")
    why = (f": the precision holds the weights in {held}, fp32 in {baseline_held}, so they cannot start from the "
           "same bytes" if held and baseline_held and held != baseline_held else "")
    return (f"the fits did not start from the same weights (initial_weights_sha256 {mine[:12]}... at the precision, "
            f"{theirs[:12]}... in the fp32 baseline){why}: their losses are not compared")


def compose(precision_run: dict[str, Any], baseline_run: dict[str, Any] | None, *, wall_s: float,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stability record of one cell identity (stack, task, precision, every setting) from the two cell
    processes' records (the precision's and the fp32 baseline's; the baseline is None when the first did not run to
    the end, or is the same record when the precision is fp32)."""
    run = precision_run
    losses = as_losses(run.get("stability_losses"))
    # The key of the record: the fit's identity as a timed row's (its record carries every setting's column).
    identity = CellIdentity.of_row(run)
    record: dict[str, Any] = {
        "stability_schema_version": STABILITY_SCHEMA_VERSION,
        "fwbench_version": run.get("fwbench_version"),
        "record_id": run.get("record_id"),
        "started_at": run.get("started_at"),
        **{key: run.get(key) for key in ("stack", "task", "model", "preset", "precision", "pin_set", "compile_mode",
                                         "engine", "image_variant", "device", "device_model", "data_seed",
                                         "learnable_target", "fault", "compute_dtype", "variable_dtype",
                                         "framework_version", "error_type", "error_message")},
        "baseline_precision": BASELINE_PRECISION,
        "cell_id": identity.cell_key,
        "settings_id": identity.settings_id,
        "initial_weights_sha256": run.get("initial_weights_sha256"),
        "steps": run.get("stability_steps"),
        "library_versions": json.dumps(run.get("library_versions"), sort_keys=True) if run.get("library_versions")
        else None,
        "status": run.get("status"),
        "losses": losses or None,
        "loss_scale_initial": run.get("loss_scale_initial"),
        "loss_scale_final": run.get("loss_scale"),
        "loss_scale_skipped_steps": run.get("loss_scale_skipped_steps"),
        "wall_s": wall_s,
        "extra": json.dumps(extra or {}, sort_keys=True, default=str),
    }
    if run.get("status") not in ("ok", "diverged"):
        return record
    record["first_loss"] = losses[0] if losses else None
    record["final_loss"] = final_loss(losses)
    record["nonfinite_steps"] = sum(1 for loss in losses if not _finite(loss))
    if baseline_run is None or baseline_run.get("status") not in ("ok", "diverged"):
        what = baseline_run or {}
        record.update(status="error", error_type=f"Baseline:{what.get('error_type') or what.get('status')}",
                      error_message=f"the fp32 baseline did not run to the end ({what.get('status')}): "
                                    f"{what.get('error_message') or 'no message'}"[:4000])
        return record
    record["baseline_initial_weights_sha256"] = baseline_run.get("initial_weights_sha256")
    why = different_start(run, baseline_run)
    if why:
        record.update(status="incomparable", error_type="InitialWeightsDiffer", error_message=why)
        return record
    baseline = as_losses(baseline_run.get("stability_losses"))
    deviation, step = max_relative_deviation(losses, baseline)
    diverged, why = verdict(losses, baseline)
    record.update(baseline_losses=baseline, baseline_final_loss=final_loss(baseline),
                  baseline_nonfinite_steps=sum(1 for loss in baseline if not _finite(loss)),
                  max_rel_deviation=deviation, max_rel_deviation_step=step, diverged=diverged, diverged_reason=why,
                  status="diverged" if diverged else "ok")
    return record


def schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC"), "list<float64>": pa.list_(pa.float64())}
    return pa.schema([pa.field(name, types[kind], metadata={"description": doc}) for name, kind, doc in COLUMNS],
                     metadata={"fwbench_stability_schema_version": str(STABILITY_SCHEMA_VERSION)})


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """The record typed to the schema: unknown keys go under `extra`."""
    record = dict(record)
    extra = json.loads(record.pop("extra", None) or "{}")
    for key in list(record):
        if key not in COLUMN_NAMES:
            extra[key] = record.pop(key)
    record["extra"] = json.dumps(extra, sort_keys=True, default=str)
    row: dict[str, Any] = {}
    for name, kind, _ in COLUMNS:
        value = record.get(name)
        if value is not None:
            if kind == "timestamp" and isinstance(value, str):
                value = dt.datetime.fromisoformat(value)
            elif kind == "int64":
                value = int(value)
            elif kind == "float64":
                value = float(value)
            elif kind == "bool":
                value = bool(value)
            elif kind == "string" and not isinstance(value, str):
                value = str(value)
        row[name] = value
    row["stability_schema_version"] = STABILITY_SCHEMA_VERSION
    return row


# What keeps a record written before its identity columns (schema v1) apart from others: the fields it has.
V1_KEY = ("stack", "task", "preset", "precision", "pin_set", "device", "device_model", "steps", "data_seed", "fault")


def record_key(record: dict[str, Any]) -> tuple:
    """Records with equal keys are reruns of one stability run (the newest stands): the fits' cell identity
    (cell_id and the hash of every setting: steps, seed, device model, threads, precision...) and the planted fault,
    a test input that is no identity setting."""
    if record.get("settings_id"):
        return (record.get("cell_id"), record["settings_id"], record.get("fault"))
    return ("v1", *(record.get(name) for name in V1_KEY))


def record_path(out_dir: Path, record: dict[str, Any]) -> Path:
    """<out>/stability/<preset>/<stack>/<task>.<precision>.<pin set>.<device>.id-<key>.stability.parquet, with <key>
    a short hash of record_key: a rerun of the same key replaces its record, any other key has a file of its own.
    Names from the registry's checked ids, never free text."""
    device = "gpu" if record.get("device") == "cuda" else "cpu"
    key = hashlib.sha256(json.dumps(record_key(record), default=str).encode()).hexdigest()[:10]
    name = f"{record['task']}.{record['precision']}.{record['pin_set']}.{device}.id-{key}{FILE_SUFFIX}"
    return Path(out_dir) / "stability" / record["preset"] / record["stack"] / name


def write_record(record: dict[str, Any], path: Path) -> Path:
    """Write one record atomically (temp file + rename, flushed to disk)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fwbench.core.atomic import write_atomically_with

    table = pa.Table.from_pylist([normalise(record)], schema=schema())
    write_atomically_with(Path(path), lambda temp: pq.write_table(table, temp), fsync=True)
    return Path(path)
