"""A cell meant for a GPU runs on one or not at all: never on the CPU under the GPU's name.

When the runner chose the GPU (fwbench.engines.device) and the cell's framework sees none (a CUDA 13 wheel on a
driver below 580, a JAX CUDA plugin that failed to start, TensorFlow without its CUDA libraries, a CPU-only build),
the cell stops before building its model and its row is `device_unavailable`, naming the framework, what it
reported, the NVIDIA driver and the oldest driver its CUDA build runs on.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from fwbench.core.cuda import driver_at_least, minimum_driver
from fwbench.harness.envinfo import nvml_info


class DeviceUnavailable(Exception):
    """The cell was meant to run on a GPU its framework cannot use (status device_unavailable)."""


def require_gpu(backend: Any) -> None:
    """Raise DeviceUnavailable unless the backend's framework runs on a GPU."""
    if not backend.on_gpu:
        framework, reported, cuda_version = _REPORTERS[backend.name](backend)
        raise DeviceUnavailable(explain(framework, reported, cuda_version, nvml_info().get("gpu_driver")))


def explain(framework: str, reported: str, cuda_version: str | None, driver: str | None) -> str:
    """One paragraph: the framework and what it said, the driver, and the oldest driver its CUDA build needs."""
    build = f"CUDA {cuda_version} build" if cuda_version else "no CUDA build (a CPU-only install)"
    text = f"the cell was to run on a GPU, but {framework} ({build}) sees none: {reported}."
    minimum = minimum_driver(cuda_version)
    if driver is None:
        text += " No NVIDIA driver answered NVML in the cell's environment."
    else:
        text += f" NVIDIA driver {driver}"
        if minimum is not None:
            below = not driver_at_least(driver, minimum)
            text += f"; this CUDA {cuda_version} build needs driver {minimum} or newer" + (
                " (the driver is too old)" if below else "")
        text += "."
    return text + " Run `fwbench doctor` on this host, or use --device cpu for a CPU run."


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _torch(backend) -> tuple[str, str, str | None]:
    torch = backend.torch
    try:  # is_available() only says False; initialising CUDA says why
        torch.cuda.init()
        reported = "torch.cuda.is_available() is False"
    except Exception as exc:  # RuntimeError (old driver, no device) or AssertionError (not compiled with CUDA)
        reported = f"torch.cuda.init(): {_first_line(exc)}"
    return f"torch {torch.__version__}", reported, torch.version.cuda


def _jax(backend) -> tuple[str, str, str | None]:
    jax = backend.jax
    try:
        jax.devices("cuda")
        reported = f"its default devices are {backend.devices[0].platform}"
    except Exception as exc:  # RuntimeError: unknown backend, or the CUDA plugin failed to start
        reported = f"jax.devices('cuda'): {_first_line(exc)}"
    cuda = next((major for major, dist in (("13", "jax-cuda13-plugin"), ("12", "jax-cuda12-plugin"))
                 if _installed(dist)), None)
    return f"jax {jax.__version__}", reported, cuda


def _tensorflow(backend) -> tuple[str, str, str | None]:
    tf = backend.tf
    cuda = tf.sysconfig.get_build_info().get("cuda_version") if tf.test.is_built_with_cuda() else None
    return f"tensorflow {tf.__version__}", "tf.config.list_physical_devices('GPU') is empty", cuda


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


# fwbench.harness.backends backend name -> what its framework says about the GPU it does not see.
_REPORTERS = {"torch": _torch, "jax": _jax, "tensorflow": _tensorflow}


def require_cpu(backend: Any) -> None:
    """A `cpu` cell is given no GPU (fwbench.engines.device.hide_gpus); one that finds one anyway would be a GPU
    measurement filed as a CPU one."""
    if backend.on_gpu:
        raise RuntimeError(f"the cell was to run on the CPU, but its {backend.name} backend found a GPU (the "
                           "variables that hide GPUs from it did not reach the cell)")
