"""The NVIDIA driver each stack's GPU wheels need, read from its GPU lock file, in one place.

A stack computes with one framework (its harness backend: torch, jax or tensorflow). The CUDA runtime that
framework's wheels bring is locked in images/<stack>/<pin-set>/requirements-gpu.lock as nvidia-cuda-runtime
(`nvidia-cuda-runtime-cu12==12.9.79`, or from CUDA 13 on `nvidia-cuda-runtime==13.0.96`), so the CUDA major
comes from the lock itself and a lock refresh cannot leave this table behind. The driver floor of a CUDA
major is NVIDIA's minor-version compatibility floor on Linux: CUDA 12 wheels run on any driver from
525.60.13, CUDA 13 wheels need 580. `fwbench doctor` checks the host's driver against it, and
docs/doctor.md holds the table (`python -m fwbench.cli.doctor --write`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fwbench.core import pins, registry
from fwbench.core.cuda import MINIMUM_DRIVER_BY_CUDA_MAJOR, driver_at_least, version_tuple  # noqa: F401 (drivers.*)

IMAGES = Path(__file__).resolve().parents[3] / "images"
# CUDA major -> the oldest Linux driver that runs its wheels (minor-version compatibility): one rule, in core.cuda.
CUDA_MIN_DRIVER = MINIMUM_DRIVER_BY_CUDA_MAJOR
# How a framework's CUDA build is asked for on PyPI (the table's wording).
_WHEEL_NAME = {"torch": "torch", "jax": "jax[cuda{major}]", "tensorflow": "tensorflow[and-cuda]"}
_CU_SUFFIX = re.compile(r"-cu(\d+)$")


class LockError(ValueError):
    """A GPU lock file does not say which CUDA its framework's wheels need."""


@dataclass(frozen=True)
class GpuWheels:
    stack: str
    pin_set: str
    framework: str  # the harness backend's distribution: torch, jax or tensorflow
    version: str
    cuda: str  # the locked CUDA runtime, major.minor
    cudnn: str | None  # major.minor

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])

    @property
    def min_driver(self) -> str:
        return CUDA_MIN_DRIVER[self.cuda_major]

    @property
    def image(self) -> str:
        return registry.image_name(self.stack, self.pin_set, "gpu")

    def label(self) -> str:
        wheel = _WHEEL_NAME[self.framework].format(major=self.cuda_major)
        cudnn = f", cuDNN {self.cudnn}" if self.cudnn else ""
        return f"{wheel} {self.version} (CUDA {self.cuda}{cudnn})"


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _locked_cuda(locked: dict[str, str], package: str) -> tuple[str, str] | None:
    """(version, name) of `package` as locked, named nvidia-<package>-cuNN (CUDA 12) or plain (CUDA 13 on);
    the suffix, where there is one, must agree with the version's major."""
    for name, version in locked.items():
        if name == f"nvidia-{package}" or (name.startswith(f"nvidia-{package}-cu") and _CU_SUFFIX.search(name)):
            suffix = _CU_SUFFIX.search(name)
            if suffix and package == "cuda-runtime" and suffix.group(1) != version.split(".")[0]:
                raise LockError(f"{name}=={version}: the suffix and the version name different CUDA majors")
            return version, name
    return None


@lru_cache(maxsize=None)
def gpu_wheels(stack: str, pin_set: str, images: Path = IMAGES) -> GpuWheels:
    """What the stack's GPU image (pin set `pin_set`) computes with, read from its lock file."""
    framework = registry.get_stack(stack).harness_backend
    lock = images / stack / pin_set / "requirements-gpu.lock"
    if not lock.is_file():
        raise LockError(f"no GPU lock file for {stack} {pin_set} at {lock}")
    locked = pins.pinned_versions(lock)
    if framework not in locked:
        raise LockError(f"{lock} locks no {framework}")
    runtime = _locked_cuda(locked, "cuda-runtime")
    if runtime is None:
        raise LockError(f"{lock} locks no nvidia-cuda-runtime: {framework} {locked[framework]} would be a CPU build")
    cuda = _major_minor(runtime[0])
    if framework == "jax":  # the CUDA plugin names its major too; it must be the runtime's
        plugins = [name for name in locked if re.fullmatch(r"jax-cuda\d+-plugin", name)]
        if plugins != [f"jax-cuda{cuda.split('.')[0]}-plugin"]:
            raise LockError(f"{lock}: jax's CUDA plugin {plugins} does not match the CUDA runtime {cuda}")
    cudnn = _locked_cuda(locked, "cudnn")
    return GpuWheels(stack, pin_set, framework, locked[framework], cuda, cudnn and _major_minor(cudnn[0]))


def min_driver(stack: str, pin_set: str) -> str:
    """The oldest NVIDIA driver the stack's GPU wheels of this pin set run on."""
    return gpu_wheels(stack, pin_set).min_driver




def markdown_table(pin_sets: tuple[str, ...] = pins.PIN_SETS) -> str:
    """The minimum-driver table: one row per distinct set of GPU wheels, naming the images that carry it."""
    rows: dict[tuple[str, str], list[str]] = {}
    for pin_set in pin_sets:
        for stack in registry.STACKS:
            wheels = gpu_wheels(stack, pin_set)
            rows.setdefault((wheels.label(), wheels.min_driver), []).append(f"`{wheels.image}`")
    lines = ["| image | CUDA wheels | minimum driver |", "|---|---|---|"]
    lines += [f"| {', '.join(images)} | {label} | {driver} |" for (label, driver), images in rows.items()]
    return "\n".join(lines) + "\n"
