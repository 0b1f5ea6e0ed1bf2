"""Counts a Keras model file's FLOPs from the layers that run (the counting: fwbench.core.layer_flops).

After the timed window, so that nothing in it is wrapped: every layer's `call` is wrapped, the model runs once on
one row of the cell's inputs (training=False; on JAX only its shapes are traced), the calls' shapes give each layer's
FLOPs, and the wrappers go. Dense
and EinsumDense layers, convolutions (Conv1D/2D/3D, depthwise ones) and MultiHeadAttention's products are counted;
embeddings, normalisations and weightless layers are free; any other layer with weights of its own (a separable or
transposed convolution, a custom layer) makes the count incomplete, and the row then has no FLOPs.
"""

from __future__ import annotations

import math

from fwbench.core import layer_flops
from fwbench.workloads.keras.common import BACKEND, _symbolic, keras

_LAYERS = keras.layers
DENSE = (_LAYERS.Dense, _LAYERS.EinsumDense)
CONVOLUTIONS = (_LAYERS.Conv1D, _LAYERS.Conv2D, _LAYERS.Conv3D, _LAYERS.DepthwiseConv1D, _LAYERS.DepthwiseConv2D)
FREE = tuple(getattr(_LAYERS, name) for name in (
    "Embedding", "BatchNormalization", "LayerNormalization", "GroupNormalization", "RMSNormalization",
    "UnitNormalization", "Normalization") if hasattr(_LAYERS, name))


class FlopProbe:
    """Counts the model's FLOPs once the steps have run; the row's physics columns come from ctx.step_cost (None,
    with extra.physics saying why, when the model cannot be counted)."""

    def __init__(self, ctx, model):
        self.ctx, self.model = ctx, model
        ctx.after_run(self.count)

    def count(self) -> None:
        from fwbench.core import model_file

        tally = layer_flops.Tally()
        layers = list(self.model._flatten_layers(include_self=True, recursive=True))
        wrapped, seen = [], set()
        for layer in layers:
            if isinstance(layer, DENSE + CONVOLUTIONS + (_LAYERS.MultiHeadAttention,)):
                wrapped.append((layer, layer.call))
                object.__setattr__(layer, "call", self._counting(layer, layer.call, tally, seen))
            elif not isinstance(layer, FREE) and _own_weights(layer):
                tally.cannot_count(f"{type(layer).__name__} {layer.name}")
        x, _ = model_file.split_inputs(self.ctx.arrays)
        try:
            _run_once(self.model, _one_row(x))
        except Exception as exc:  # the count must never fail a cell that ran
            tally.cannot_count(f"the counting call failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        finally:
            for layer, call in wrapped:
                object.__setattr__(layer, "call", call)
        for layer, _ in wrapped:
            if id(layer) not in seen:
                tally.cannot_count(f"{type(layer).__name__} {layer.name} did not run on the counting call")
        frozen = any(not weight.trainable for layer, _ in wrapped for weight in _own_weights(layer))
        cost, why = tally.step_cost(self.ctx.kind, 1, self.ctx.batch_size, frozen)
        self.ctx.step_cost = cost
        if why:
            self.ctx.report(extra={"physics": why})

    @staticmethod
    def _counting(layer, call, tally: layer_flops.Tally, seen: set):
        def counted(*args, **kwargs):
            output = call(*args, **kwargs)
            if id(layer) not in seen and not _symbolic(output):
                seen.add(id(layer))
                _note(layer, args, kwargs, output, tally)
            return output
        return counted


def _note(layer, args, kwargs, output, tally: layer_flops.Tally) -> None:
    name = f"{type(layer).__name__} {layer.name}"
    if isinstance(layer, _LAYERS.MultiHeadAttention):
        query = _shape(args[0] if args else kwargs.get("query"))
        value = _shape(args[1] if len(args) > 1 else kwargs.get("value"))
        if layer._attention_axes not in (None, tuple(range(1, len(query) - 1))):
            tally.cannot_count(f"{name}: attention over axes {layer._attention_axes}")
            return
        tally.add(layer_flops.attention(query[0], layer.num_heads, math.prod(query[1:-1]), math.prod(value[1:-1]),
                                        layer.key_dim, layer.value_dim or layer.key_dim))
        return  # its projections are EinsumDense layers of its own, counted as they run
    kernel = tuple(int(d) for d in layer.kernel.shape)
    out = _shape(output)
    if isinstance(layer, _LAYERS.EinsumDense):
        tally.add(layer_flops.einsum(layer.equation, kernel, out))
    elif isinstance(layer, _LAYERS.Dense):
        tally.add(layer_flops.dense(out, kernel[0]))
    else:
        channels = out[-1] if getattr(layer, "data_format", "channels_last") == "channels_last" else out[1]
        tally.add(layer_flops.conv(out, math.prod(kernel), channels), convolution=True)


def _shape(tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in tensor.shape)


def _own_weights(layer) -> list:
    """The variables a layer made itself (not its sublayers')."""
    return [*getattr(layer, "_trainable_variables", []), *getattr(layer, "_non_trainable_variables", [])]


def _run_once(model, x) -> None:
    """The model on one row, training=False. On JAX, shapes only (jax.eval_shape traces it with the row's shapes and
    computes nothing): run eagerly, every JAX op would be compiled on its own, which took a convnet tens of seconds."""
    if BACKEND == "jax":
        import jax

        jax.eval_shape(lambda row: model(row, training=False), x)
    else:
        model(x, training=False)


def _one_row(x):
    return {name: array[:1] for name, array in x.items()} if isinstance(x, dict) else x[:1]
