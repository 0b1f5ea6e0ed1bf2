"""What the GPU host's Python image runs: the stacks the wheelhouse completes (and what each imports to run its
cells), and the cells it cannot run, with why. The image has torch, JAX, transformers and fwbench's own needs but no
TensorFlow (data/simulated-image.txt lists it as tests/test_gpu_kit.py rebuilds it)."""

from __future__ import annotations

# Stack -> the modules its cells import (fwbench's own are checked apart: without them nothing runs). The kit's
# stacks are these: the TensorFlow stacks need TensorFlow, hundreds of MB the wheelhouse cannot carry.
STACK_MODULES = {
    "native-torch": ("torch", "transformers", "peft", "diffusers", "segment_anything"),
    "keras3-jax": ("jax", "keras", "keras_hub", "grain"),
    "keras3-torch": ("torch", "keras", "keras_hub", "grain"),
}
KIT_STACKS = tuple(STACK_MODULES)
FWBENCH_MODULES = ("fwbench.cli.commands", "fwbench_aggregator.cli")

# (stack, task) -> why such a host cannot run it: left out of the plan (and listed in its report) rather than failing
# every window again.
NOT_ON_THIS_HOST = {
    (stack, task): "KerasCV (the Keras 3 Stable Diffusion) refuses to import without TensorFlow, which the "
                   "image lacks and the wheelhouse cannot carry (hundreds of MB)"
    for stack in ("keras3-jax", "keras3-torch") for task in ("stable_diffusion-fit", "stable_diffusion-predict")
}
