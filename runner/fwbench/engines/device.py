"""`--device auto|gpu|cpu`: which device a run's cells use, one option for every engine.

`auto` takes the GPU when the host has an NVIDIA GPU (NVML, else nvidia-smi with the driver's device node),
else the CPU. The choice is made once, by the runner, and travels in each cell's spec as `gpu` or `cpu`:
a `gpu` cell whose framework sees no GPU becomes a `device_unavailable` row (never an ok row measured on
the CPU), and a `cpu` cell is given no GPU at all (CUDA_VISIBLE_DEVICES empty, JAX on its CPU platform), so
a CPU run on a GPU host is what it says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fwbench.core.usage import UsageError
from fwbench.harness.nvml import nvml_query

SETTINGS = ("auto", "gpu", "cpu")


def host_has_gpu() -> bool:
    """An NVIDIA GPU is usable by cells (and containers) only if the host driver answers NVML."""
    count = nvml_query(lambda pynvml: pynvml.nvmlDeviceGetCount())
    if count is not None:
        return count > 0
    # No pynvml or no answer from NVML: the driver's tools and device node say whether a GPU is there.
    return shutil.which("nvidia-smi") is not None and Path("/dev/nvidiactl").exists()


def check_setting(setting: str) -> str:
    if setting not in SETTINGS:
        raise UsageError(f"unknown --device '{setting}' (choose from: {', '.join(SETTINGS)})")
    return setting


def resolve(setting: str) -> str:
    """The device cells will use, `gpu` or `cpu`, for a --device setting on this host."""
    check_setting(setting)
    if setting == "auto":
        return "gpu" if host_has_gpu() else "cpu"
    if setting == "gpu" and not host_has_gpu():
        raise UsageError("--device gpu: this host has no NVIDIA GPU that answers (neither NVML nor nvidia-smi "
                         "lists one); run `fwbench doctor` to see why, or use --device cpu")
    return setting


def hide_gpus(environment: dict[str, str]) -> dict[str, str]:
    """Variables that keep a `cpu` cell off every GPU: CUDA sees none, and JAX uses its CPU platform (JAX 0.4's
    CUDA plugin otherwise fails where later ones only warn and fall back)."""
    return {**environment, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}


def expected_model(device: str, gpu_index: int | None) -> str:
    """The device model a cell is expected to run on (part of its identity): its GPU's NVML name (`gpu_index`,
    the slot's; the host's first GPU without one), or the CPU model. The cell records what it really ran on."""
    from fwbench.harness.envinfo import cpu_model, gpu_model

    if device == "gpu":
        return gpu_model(0 if gpu_index is None else gpu_index) or "unknown GPU"
    return cpu_model()
