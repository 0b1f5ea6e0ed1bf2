"""Model FLOPs of a model file's step, counted from the layers that ran (the physics columns of `--model` rows).

fwbench's own models are counted from their architectures (fwbench.core.physics); a model file's architecture is
whatever the file builds, so its cells count the layers they see run, with the same convention: 2 FLOPs per
multiply-add of every dense layer, convolution and attention product; norms, activations, pooling and embedding
lookups are free. The workloads' probes (fwbench.workloads.keras.layer_flops, fwbench.workloads.torch.layer_flops)
run the model once on one row of its inputs after the timed window, note each layer's FLOPs here, and say which
layers they cannot count: then the row gets no FLOPs, and extra.physics says why, rather than a number that leaves
part of the model out. Plain Python.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from fwbench.core.physics import TRAIN_FACTOR, StepCost

COUNTED = "dense layers, convolutions and attention products"


def dense(output_shape: tuple[int, ...], in_features: int) -> float:
    """A dense layer: every output element is a dot product of length in_features."""
    return 2.0 * math.prod(output_shape) * in_features


def einsum(equation: str, kernel_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> float:
    """An einsum of the input with a kernel ('abc,cde->abde'): every output element sums over the kernel's axes that
    are not in the output."""
    match = re.fullmatch(r"\s*([\w.]+)\s*,\s*(\w+)\s*->\s*([\w.]+)\s*", equation)
    if match is None or len(match.group(2)) != len(kernel_shape):
        raise ValueError(f"cannot read the einsum equation {equation!r}")
    kernel, output = match.group(2), match.group(3)
    contracted = math.prod(size for axis, size in zip(kernel, kernel_shape) if axis not in output)
    return 2.0 * math.prod(output_shape) * contracted


def conv(output_shape: tuple[int, ...], kernel_size: int, out_channels: int) -> float:
    """A convolution (grouped and depthwise included): each output element is a dot product over its kernel's share,
    kernel_size (all its weights) / out_channels."""
    return 2.0 * math.prod(output_shape) * kernel_size / out_channels


def attention(batch: int, heads: int, queries: int, keys: int, key_dim: int, value_dim: int) -> float:
    """QK^T and AV over the whole score matrix, as the libraries compute it."""
    return 2.0 * batch * heads * queries * keys * (key_dim + value_dim)


@dataclass
class Tally:
    """What a probe saw: the FLOPs of each counted layer call (matmul or convolution), and the layers it could not
    count (with why)."""

    matmul: float = 0.0
    conv: float = 0.0
    uncounted: list[str] = field(default_factory=list)

    def add(self, flops: float, *, convolution: bool = False) -> None:
        if convolution:
            self.conv += flops
        else:
            self.matmul += flops

    def cannot_count(self, what: str) -> None:
        if what not in self.uncounted:
            self.uncounted.append(what)

    def step_cost(self, kind: str, rows: int, batch: int, frozen: bool) -> tuple[StepCost | None, str | None]:
        """The step's cost from a count over `rows` rows of the inputs, at the cell's batch (FLOPs per row times the
        batch), or None with why not."""
        if self.uncounted:
            return None, ("not counted: the model has layers fwbench cannot count FLOPs for ("
                          + "; ".join(self.uncounted[:5]) + (f" and {len(self.uncounted) - 5} more" if
                                                            len(self.uncounted) > 5 else "") + ")")
        if self.matmul + self.conv <= 0:
            return None, f"not counted: no {COUNTED} ran"
        scale = batch / rows
        forward, conv_part = (self.matmul + self.conv) * scale, self.conv * scale
        if kind == "predict":
            return StepCost(forward, f"forward 2N + attention, counted from the model's layers ({COUNTED})",
                            conv_flops=conv_part), None
        if frozen:
            return None, "not counted: frozen weights get no weight gradients, so training is not 3x the forward"
        return StepCost(TRAIN_FACTOR * forward, f"train 6N: 3x forward, counted from the model's layers ({COUNTED})",
                        conv_flops=TRAIN_FACTOR * conv_part), None
