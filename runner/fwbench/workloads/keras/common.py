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

from fwbench.workloads import DrivenCell, Unsupported

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
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        # A CPU cell (fwbench.engines.device.hide_gpus): nothing to hide, and TensorFlow's runtime is not started
        # ahead of its time (started at import, its thread pools made tiny CPU cells slower and noisier here).
        return "none visible"
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


def data_parallel(ctx):
    """--devices N > 1: the stack's own Keras data parallelism, a context to build and compile the model in.

    Keras 3 on JAX: keras.distribution.DataParallel over N devices (one process, SPMD: variables replicated, each
    batch split along its first axis, gradients reduced by XLA's collectives), set before the model is built so
    that its variables get the replicated layout. Keras 3 and Keras 2 on TensorFlow: tf.distribute.MirroredStrategy
    over N devices (the harness made N logical CPU devices on a CPU), whose scope the model is built and compiled
    in; fit then splits each batch over the replicas and all-reduces the gradients. Seeds the weights of every fit
    from --seed (the same start for any N, and for a stability run's two fits); unseeded, Keras's initialisers draw
    from Python's `random`, another start per process. Predict cells are left as they were."""
    import contextlib

    if ctx.kind == "fit":
        keras.utils.set_random_seed(ctx.spec.seed)
    if ctx.devices == 1:
        return contextlib.nullcontext()
    if BACKEND == "jax":
        distribution = keras.distribution
        devices = distribution.list_devices()
        if len(devices) < ctx.devices:
            raise RuntimeError(f"--devices {ctx.devices}: Keras sees {len(devices)} device(s): {devices}")
        distribution.set_distribution(distribution.DataParallel(devices=devices[:ctx.devices]))
        ctx.report(comm_backend="xla-collectives",
                   extra={"data_parallel": f"keras.distribution.DataParallel over {', '.join(devices[:ctx.devices])}"})
        return contextlib.nullcontext()
    if BACKEND in ("tensorflow", None):  # None: Keras 2, tf.keras
        import tensorflow as tf

        kind = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
        devices = [device.name for device in tf.config.list_logical_devices(kind)][:ctx.devices]
        if len(devices) < ctx.devices:
            raise RuntimeError(f"--devices {ctx.devices}: TensorFlow has {len(devices)} {kind} device(s)")
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        # What reduces the gradients (TensorFlow's choice; under XLA it is always CollectiveAllReduce).
        chosen = getattr(strategy.extended, "_cross_device_ops", None)
        cross = type(chosen).__name__ if chosen is not None else "default"
        ctx.report(comm_backend=f"tf-{cross}",
                   extra={"data_parallel": f"tf.distribute.MirroredStrategy over {', '.join(devices)} ({cross})"})
        return strategy.scope()
    raise Unsupported(f"--devices {ctx.devices}: no Keras data parallelism on backend {BACKEND}")


def check_replicated(model, devices: int) -> None:
    """After a data-parallel fit: the model's variables really lived on the N devices (JAX: the mesh's; TensorFlow:
    one mirror per replica), never one device's fit recorded as N."""
    spans = {_replicas(weight) for weight in model.weights}
    if spans != {devices}:
        raise RuntimeError(f"--devices {devices}: after the fit the model's variables span {sorted(spans)} "
                           "device(s), not the data-parallel devices")


def _replicas(weight) -> int:
    # Keras 3: weight.value is the backend's array (JAX: sharded) or tf.Variable (mirrored); Keras 2: the weight
    # is the tf.Variable itself (its .value a method).
    for value in (getattr(weight, "value", None), weight):
        if hasattr(value, "sharding"):
            return len(value.sharding.device_set)
        if isinstance(getattr(value, "values", None), tuple):
            return len(value.values)
    return 1


def weight_bytes(model):
    """The model's weights for its initial-weights checksum (CellContext.set_initial_weights): model.weights in its
    own order (trainable and non-trainable variables), each as NumPy holds it (its dtype's name, shape and bytes).
    On the torch backend the same names, shapes and bytes are read from each variable's tensor: Keras's conversion
    to NumPy takes each bfloat16 tensor to float32 and back on the host, which made keras3-torch's checksum of Gemma
    7B's weights twice native-torch's on the H200 (a uint32 variable is an int64 tensor there, as np.asarray reads
    it)."""
    if KERAS3 and BACKEND == "torch":
        from fwbench.workloads.torch.common import tensor_bytes

        for weight in model.weights:
            yield tensor_bytes(weight.value)
        return
    for weight in model.weights:
        array = np.asarray(weight)
        yield str(array.dtype), array.shape, np.ascontiguousarray(array).view(np.uint8)


def write_weights(model, path: str) -> None:
    """Test-only (CellSpec.probe_weights): the model's weights after the fit, by position and path, as float64."""
    np.savez(path, **{f"{i:04d}:{getattr(w, 'path', None) or w.name}": np.asarray(w, dtype=np.float64)
                      for i, w in enumerate(model.weights)})


def set_dtype_policy(name: str) -> None:
    if KERAS3:
        keras.config.set_dtype_policy(name)
    else:
        keras.mixed_precision.set_global_policy(name)


def set_precision_policy(ctx) -> str:
    """The global dtype policy the model is built under, from --precision (fwbench.core.precision): the float32
    models (SAM, SD, BERT) get `mixed_bfloat16` / `mixed_float16` under bf16 / fp16 (float32 variables, half
    compute), else float32; the LLMs are pure: bfloat16 (published, bf16), float16 or float32. Returns the name."""
    from fwbench.core import precision

    name = precision.KERAS_MIXED_POLICY.get(ctx.precision) if ctx.mixed_dtype else ctx.model_dtype
    set_dtype_policy(name)
    return name


def dtype_name(dtype) -> str:
    """'bfloat16' from a Keras dtype string, a tf.DType, a numpy/ml_dtypes dtype or a torch.dtype."""
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None) or str(dtype)
    return name.removeprefix("torch.")


def variable_dtypes(weights) -> str:
    """The dtypes the weights are held in, by element count, largest first: 'float32', 'bfloat16+float32'."""
    counts: dict[str, int] = {}
    for weight in weights:
        name = dtype_name(weight.dtype)
        counts[name] = counts.get(name, 0) + int(np.prod(weight.shape))
    return "+".join(sorted(counts, key=lambda name: -counts[name]))


class DtypeProbe:
    """Records the output dtype of the model's first dense (Dense, EinsumDense) and first convolution layer as
    they run (their `call` wrapped: under XLA / tf.function that is when the program is traced, i.e. the dtype of
    the compiled computation; in eager cells, the first call). What the model really computed in, whatever the
    policy said: the `compute_dtype` column."""

    def __init__(self, ctx, model):
        self.seen: dict[str, str] = {}
        kinds = (("dense", (keras.layers.Dense, keras.layers.EinsumDense)), ("conv", (keras.layers.Conv2D,)))
        layers = list(model._flatten_layers(include_self=False, recursive=True))
        for name, kind in kinds:
            layer = next((layer for layer in layers if isinstance(layer, kind)), None)
            if layer is not None:
                self._wrap(layer, name)
        ctx.after_run(lambda: ctx.report(compute_dtype=self.compute_dtype()))

    def _wrap(self, layer, name: str) -> None:
        original = layer.call
        seen = self.seen

        def call(*args, **kwargs):
            output = original(*args, **kwargs)
            if name not in seen and hasattr(output, "dtype") and not _symbolic(output):
                seen[name] = dtype_name(output.dtype)
            return output
        object.__setattr__(layer, "call", call)

    def compute_dtype(self) -> str | None:
        found = sorted(set(self.seen.values()))
        return "+".join(found) if found else None


def _symbolic(output) -> bool:
    """A shape-only call (Keras's own build tracing: a KerasTensor, or a torch tensor on the meta device), which says
    nothing about what the real computation ran in."""
    keras_tensor = getattr(keras, "KerasTensor", None)
    if keras_tensor is not None and isinstance(output, keras_tensor):
        return True
    device = getattr(output, "device", None)
    return getattr(device, "type", None) == "meta"


def report_model(ctx, model) -> None:
    """Sizes, the declared compute dtype (`dtype`: the precision's), the dtypes its weights are held in, the dtype
    policy, and a probe of the dtype the model really computes in (DtypeProbe)."""
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    policy = getattr(model, "dtype_policy", None)
    ctx.report(params_total=int(model.count_params()), params_trainable=trainable, dtype=ctx.declared_dtype,
               variable_dtype=variable_dtypes(model.weights), jit_compile=ctx.jit_compile,
               extra={"input_pipeline": input_pipeline(), "tensorflow_gpus": TENSORFLOW_GPUS,
                      "dtype_policy": getattr(policy, "name", None)})
    DtypeProbe(ctx, model)


def report_loss_scale(ctx, model, total_steps: int) -> None:
    """After an fp16 fit: the loss scale at the end and the steps the LossScaleOptimizer skipped (Keras 3 and
    Keras 2 compile wrap the optimizer in it by themselves under mixed_float16: checked and recorded)."""
    optimizer = model.optimizer
    wrapped = type(optimizer).__name__ in ("LossScaleOptimizer", "LossScaleOptimizerV3", "BaseLossScaleOptimizer")
    # What report_model put in `extra` is kept (report() now merges `extra` itself; this stays explicit).
    extra = {**ctx.reported.get("extra", {}), "loss_scale_optimizer": type(optimizer).__name__}
    if wrapped:
        extra["loss_scale_initial"] = float(optimizer.initial_scale)  # the scale the back-off starts from
    ctx.report(extra=extra)
    if not wrapped:
        return
    if KERAS3:
        scale = float(np.asarray(optimizer.dynamic_scale))
        # The inner optimizer counts only the steps it applied.
        skipped = total_steps - int(np.asarray(optimizer.iterations))
    else:
        scale = float(np.asarray(optimizer.loss_scale))
        # tf.keras counts skipped steps as iterations too: below dynamic_growth_steps the scale never grows, so
        # every halving from the initial scale is one skipped step.
        initial, growth = float(optimizer.initial_scale), int(optimizer.dynamic_growth_steps)
        skipped = int(round(np.log2(initial / scale))) if total_steps < growth and scale <= initial else None
    ctx.report(loss_scale=scale, loss_scale_skipped_steps=skipped)


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

    def __init__(self, clock, ctx=None):
        super().__init__()
        self.clock, self.ctx = clock, ctx

    def on_train_batch_begin(self, batch, logs=None):
        self.clock.begin()

    def on_train_batch_end(self, batch, logs=None):
        self.clock.end(logs)
        if self.ctx is not None and logs and "loss" in logs:
            self.ctx.record_loss(logs["loss"])  # Keras's running mean over the epoch; read after the fit

    def on_predict_batch_begin(self, batch, logs=None):
        self.clock.begin()

    def on_predict_batch_end(self, batch, logs=None):
        self.clock.end(logs)


class FitCell(DrivenCell):
    """Keras's own `fit`: ONE call over exactly total_steps batches (each fit() call has a fixed
    overhead of its own, which must not be spread over the steps)."""

    kinds = ("fit",)
    timed = "model.fit(): one Keras train step per batch, clocked by its batch callbacks"

    def __init__(self, model, x, y, total_steps: int, sample_weight=None, *, ctx=None):
        self.ctx, self.model, self.total_steps = ctx, model, total_steps
        if ctx is not None:
            ctx.set_initial_weights(lambda: weight_bytes(model))
        if ctx is not None and ctx.precision == "fp16" and ctx.mixed_dtype:
            ctx.after_run(lambda: report_loss_scale(ctx, model, total_steps))
        multipliers = ctx.loss_multipliers() if ctx is not None else None
        if multipliers is not None:
            self.dataset = weighted_steps_dataset(x, y, sample_weight, multipliers)
            return
        batch = (x, y) if sample_weight is None else (x, y, sample_weight)
        # Endless, and steps_per_epoch ends the epoch: Keras 3.0's fit takes one batch from the data to build
        # the model first, which would leave a dataset of exactly total_steps one batch short.
        self.dataset = repeated_dataset(batch)
        if ctx is not None and ctx.spec.probe_weights:
            write_weights(model, ctx.spec.probe_weights + ".init.npz")  # test-only: the weights the fit starts from

    def drive(self, clock) -> None:
        if self.ctx is not None and self.ctx.stability_run:
            # One epoch per step: Keras logs the running mean of the epoch's losses, which is then the step's own
            # loss (the stability run compares losses step by step; it is not timed).
            self.model.fit(self.dataset, epochs=self.total_steps, steps_per_epoch=1, shuffle=False, verbose=0,
                           callbacks=[ClockCallback(clock, self.ctx)])
            return
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=self.total_steps, shuffle=False, verbose=0,
                       callbacks=[ClockCallback(clock, self.ctx)])
        if self.ctx is not None and self.ctx.devices > 1:
            check_replicated(self.model, self.ctx.devices)
        if self.ctx is not None and self.ctx.spec.probe_weights:
            write_weights(self.model, self.ctx.spec.probe_weights)


def weighted_steps_dataset(x, y, sample_weight, multipliers: list[float]):
    """The batch once per step with per-step sample weights: the weights (ones where the fit has none; the shape of
    the loss before reduction: the labels' for sparse labels, the target's without its last axis for MSE) times the
    step's loss multiplier. Data, not a variable, so it reaches a compiled train step on every backend."""
    base = (np.asarray(sample_weight, np.float32) if sample_weight is not None else
            np.ones(y.shape if np.issubdtype(np.asarray(y).dtype, np.integer) else y.shape[:-1], np.float32))
    # Two more batches than steps: Keras 3.0's fit may take one to build the model first.
    weights = [base * np.float32(m) for m in multipliers] + [base, base]
    if input_pipeline() == "grain":
        import grain

        return grain.MapDataset.source([(x, y, w) for w in weights])
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(np.stack(weights)).map(lambda w: (x, y, w))


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
