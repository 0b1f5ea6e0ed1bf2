"""Helpers shared by the Keras workloads of all four Keras stacks (no timing here: that is the harness's job).

The same module runs Keras 3 on TensorFlow, JAX or PyTorch (backend chosen by KERAS_BACKEND, which the engine
sets from the stack's definition) and Keras 2 (tf.keras, which KerasNLP/KerasCV 0.8 use when TensorFlow's
Keras is Keras 2). Whether a model compiles with XLA is the stack definition's per-task policy
(`ctx.jit_compile`), never derived from the backend here.
"""

from __future__ import annotations

from typing import Any

import importlib.util
import os

import numpy as np

import keras as _keras

from fwbench.workloads import DrivenCell

# Keras 2 is TensorFlow's own tf.keras: the bundled Keras 2 of TF <= 2.15, or tf-keras on TF >= 2.16, where
# `import keras` is Keras 3 and the Keras 2 stack asks for the legacy one (TF_USE_LEGACY_KERAS=1).
KERAS3 = _keras.__version__.startswith("3.") and os.environ.get("TF_USE_LEGACY_KERAS") != "1"
if KERAS3:
    keras = _keras
    BACKEND = keras.backend.backend()
else:
    # KerasNLP/KerasCV 0.8 build on `tensorflow.keras`; models must come from the same Keras.
    from tensorflow import keras  # noqa: F811

    BACKEND = None  # Keras 2 has no multi-backend switch


def _hide_gpus_from_tensorflow() -> str | None:
    """Keras 3 on JAX or PyTorch still imports TensorFlow (KerasHub does, and tf.data feeds fit/predict). Left
    alone, TensorFlow would open a CUDA context of its own on the cell's GPU and hold memory there that JAX's and
    torch's peak-memory counters never see: it gets no GPU. Must run before TensorFlow first touches a device.
    Returns what happened (the row's extra.tensorflow_gpus), None where TensorFlow is the backend or absent."""
    if not KERAS3 or BACKEND == "tensorflow" or importlib.util.find_spec("tensorflow") is None:
        return None
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError as exc:  # TensorFlow's devices were initialised already
        return f"not hidden: {exc}"
    return "hidden"


TENSORFLOW_GPUS = _hide_gpus_from_tensorflow()

# The model library, independent of the Keras version: KerasHub on today's Keras 3; its predecessors KerasNLP
# and KerasCV 0.8 (mostly the same class names) on Keras 2 and on the published run's Keras 3.0.5 (pin set
# paper-2024), as that run used them.
KERAS_HUB = KERAS3 and importlib.util.find_spec("keras_hub") is not None


def check_stack(ctx) -> None:
    """The Keras this process imported is the one the stack's definition names (the engine chose it
    through the environment): otherwise the row would describe another stack."""
    stack = ctx.stack
    installed = 3 if KERAS3 else 2
    if (installed, BACKEND) != (stack.keras_version, stack.keras_backend):
        raise RuntimeError(f"stack {stack.id} expects Keras {stack.keras_version} with backend "
                           f"{stack.keras_backend}, but this process runs Keras {installed} with backend {BACKEND}")


def set_dtype_policy(name: str) -> None:
    if KERAS3:
        keras.config.set_dtype_policy(name)
    else:
        keras.mixed_precision.set_global_policy(name)


def report_model(ctx, model, dtype: str) -> None:
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    ctx.report(params_total=int(model.count_params()), params_trainable=trainable, dtype=dtype,
               jit_compile=ctx.jit_compile,
               extra={"input_pipeline": input_pipeline(), "tensorflow_gpus": TENSORFLOW_GPUS})


def input_pipeline() -> str:
    """tf.data wherever TensorFlow is installed (every fwbench image and environment); else a Grain dataset
    (a host image with JAX/torch but no TensorFlow: KerasHub's task models and Keras 3 on those backends
    read Grain datasets natively; a plain generator would not pass KerasHub's preprocessing). Recorded on
    the row (extra.input_pipeline)."""
    if importlib.util.find_spec("tensorflow") is not None or keras.backend.backend() == "tensorflow":
        return "tf.data"
    return "grain"


def repeated_dataset(batch: Any, steps: int | None = None):
    """The same shared batch `steps` times, or endlessly (None) (tf.data, or Grain without TensorFlow:
    accepted by fit/predict on every Keras backend, and neither materialises the copies)."""
    if input_pipeline() == "grain":
        import grain

        return grain.MapDataset.source([batch]).repeat(steps)  # repeat(None): endless
    import tensorflow as tf

    return tf.data.Dataset.from_tensors(batch).repeat(steps if steps is not None else -1)


class ClockCallback(keras.callbacks.Callback):
    """Forwards Keras's per-batch hooks to the harness clock. `clock.end` syncs the device on the
    batch's own outputs (the loss / the predictions), which only exist once the step has run: a
    callback boundary alone is not a sync (JAX and TF dispatch asynchronously)."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def on_train_batch_begin(self, batch, logs=None):
        self.clock.begin()

    def on_train_batch_end(self, batch, logs=None):
        self.clock.end(logs)

    def on_predict_batch_begin(self, batch, logs=None):
        self.clock.begin()

    def on_predict_batch_end(self, batch, logs=None):
        self.clock.end(logs)


class FitCell(DrivenCell):
    """Keras's own `fit`: ONE call over exactly total_steps batches (each fit() call has a fixed
    overhead of its own, which must not be spread over the steps)."""

    kinds = ("fit",)
    timed = "model.fit(): one Keras train step per batch, clocked by its batch callbacks"

    def __init__(self, model, x, y, total_steps: int, sample_weight=None):
        self.model, self.total_steps = model, total_steps
        batch = (x, y) if sample_weight is None else (x, y, sample_weight)
        # Endless, and steps_per_epoch ends the epoch: Keras 3.0's fit takes one batch from the data to build
        # the model first, which would leave a dataset of exactly total_steps one batch short.
        self.dataset = repeated_dataset(batch)

    def drive(self, clock) -> None:
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=self.total_steps, shuffle=False, verbose=0,
                       callbacks=[ClockCallback(clock)])


class PredictCell(DrivenCell):
    """Keras's own `predict` over exactly total_steps batches, in one call."""

    kinds = ("predict",)
    timed = "model.predict(): one Keras predict step per batch, clocked by its batch callbacks"

    def __init__(self, model, x, total_steps: int):
        self.model, self.total_steps = model, total_steps
        self.dataset = repeated_dataset(x, total_steps)

    def drive(self, clock) -> None:
        self.model.predict(self.dataset, steps=self.total_steps, verbose=0, callbacks=[ClockCallback(clock)])


def compile_regression(ctx, model) -> None:
    """Adam + MSE (the SAM and SD encoder fits)."""
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-4), loss="mse", jit_compile=ctx.jit_compile)


def nlp_models():
    """KerasHub where it is installed; KerasNLP 0.8 (its predecessor, same class names mostly) otherwise."""
    if KERAS_HUB:
        import keras_hub

        return keras_hub.models
    import keras_nlp

    return keras_nlp.models
