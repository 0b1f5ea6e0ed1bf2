"""A user's Keras 3 model file (`fwbench run --model`; docs/your-model.md) on a Keras 3 stack.

The file builds the model (`build_model()`, under the precision's dtype policy) and says its loss (`keras_loss()`);
fwbench compiles it, with Adam and jit_compile as the stack's policy says (--jit), and runs Keras's own fit or
predict over the file's inputs, as the registry's Keras cells do. Its trainable parameters are left for the file's
PyTorch twin to be checked against (fwbench.core.model_inputs).
"""

from __future__ import annotations

from fwbench.core import model_file, model_inputs
from fwbench.core.model_file import ModelFileError
from fwbench.workloads import Unsupported
from fwbench.workloads.keras.common import (KERAS3, FitCell, PredictCell, check_stack, data_parallel, keras,
                                            report_model, set_precision_policy)
from fwbench.workloads.keras.layer_flops import FlopProbe
from fwbench.workloads.model_source import describe

CELLS = {"fit": FitCell, "predict": PredictCell}


def build(ctx):
    if not KERAS3:
        raise Unsupported("a model file holds a Keras 3 model: Keras 2 (tf.keras) cannot run it")
    check_stack(ctx)
    set_precision_policy(ctx)
    keras.utils.set_random_seed(ctx.spec.seed)  # the same random weights on every run of the file
    with data_parallel(ctx):  # --devices N (fits): the model's variables are made, and it is compiled, in its scope
        return _build(ctx)


def _build(ctx):
    source = ctx.model_source
    model = source.call(model_file.BUILD_MODEL)
    if not isinstance(model, keras.Model):
        raise ModelFileError(f"{source.name}: {model_file.BUILD_MODEL}() returned a {type(model).__name__}, "
                             "not a keras.Model")
    # A fit reads the global batch (all devices' rows; the file's batch itself on one device).
    x, y = model_file.split_inputs(ctx.global_arrays() if ctx.kind == "fit" else ctx.arrays)
    if not model.built:  # a subclassed model builds on its first call: on one row of the inputs, before counting
        _build_on_one_row(source, model, x)
    report_model(ctx, model)
    trainable = int(ctx.reported["params_trainable"])
    model_inputs.write_keras_params(model_inputs.model_folder(ctx.spec.data_dir, ctx.spec.model_sha256),
                                    trainable, ctx.spec.stack)
    if ctx.devices == 1:  # a data-parallel row has no physics columns (its ceiling is one device's)
        FlopProbe(ctx, model)
    if ctx.kind == "fit":
        loss = source.call(model_file.KERAS_LOSS, why=" (fit needs the Keras loss)")
        _compile(ctx, model, optimizer=keras.optimizers.Adam(), loss=loss)
        return FitCell(model, x, y, ctx.total_steps, ctx=ctx)
    _compile(ctx, model)
    return PredictCell(model, x, ctx.total_steps)


def _compile(ctx, model, **compile_args) -> None:
    """model.compile with the stack's jit_compile and --steps-per-execution; a Keras that refuses steps_per_execution
    on this backend (Keras on PyTorch: "must be 1", when it makes the step function) makes the row unsupported, in
    Keras's words, before anything is timed."""
    try:
        model.compile(jit_compile=ctx.jit_compile, steps_per_execution=ctx.spec.steps_per_execution, **compile_args)
        if ctx.spec.steps_per_execution > 1:  # the step function fit/predict would make (and then reuse)
            model.make_train_function() if ctx.kind == "fit" else model.make_predict_function()
    except ValueError as exc:
        if ctx.spec.steps_per_execution > 1 and "steps_per_execution" in str(exc):
            raise Unsupported(f"--steps-per-execution {ctx.spec.steps_per_execution}: {exc}") from exc
        raise


def _build_on_one_row(source, model, x) -> None:
    try:
        model({name: array[:1] for name, array in x.items()} if isinstance(x, dict) else x[:1])
    except Exception as exc:
        raise ModelFileError(f"{source.name}: the model built by {model_file.BUILD_MODEL}() failed on one row of its "
                             f"inputs on {source.stack}: {describe(exc, source.path)}") from exc
