"""The environment a cell ran in: host, CPU, GPU driver (NVML), library versions."""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from fwbench.harness.gpu_identity import CellGpu, resolve_cell_gpu, unresolved_gpu

# Distributions whose versions matter for a row; missing ones are simply left out.
TRACKED_DISTRIBUTIONS = (
    "fwbench", "numpy", "torch", "torchvision", "transformers", "diffusers", "peft", "accelerate",
    "segment-anything", "datasets", "huggingface-hub", "keras", "keras-core", "keras-hub", "keras-nlp", "keras-cv",
    "tensorflow", "tensorflow-cpu", "tf-keras", "tensorflow-datasets", "tensorflow-text", "jax", "jaxlib",
    "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-ml-py", "triton",
    "grain",  # the Keras input pipeline where TensorFlow is absent (fwbench.workloads.keras.common)
)


def library_versions() -> dict[str, str]:
    versions = {}
    for dist in TRACKED_DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


# /proc/cpuinfo fields that name a CPU's generation where its model name may not: a virtual machine can call every
# generation "AMD EPYC" (two such machines here ran the same cell 3-4x apart), and Arm CPUs have no model name there.
CPU_GENERATION_FIELDS = (("cpu family", "family"), ("model", "model"), ("CPU implementer", "implementer"),
                         ("CPU part", "part"))


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU a row names (its cpu_model; on a CPU cell its device_model, an identity setting): /proc/cpuinfo's
    model name and its generation's numbers, e.g. "AMD EPYC (family 26, model 2)", so that rows from two
    generations under one name are never held "the same machine". `cpuinfo`: that file's text (default: read)."""
    block = _first_cpu_block() if cpuinfo is None else _first_block(cpuinfo.splitlines())
    fields: dict[str, str] = {}
    for line in block:
        name, colon, value = line.partition(":")
        if colon:
            fields.setdefault(name.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    numbers = ", ".join(f"{label} {fields[key]}" for key, label in CPU_GENERATION_FIELDS if fields.get(key))
    return f"{name} ({numbers})" if numbers else name


def _first_block(lines: Iterable[str]) -> list[str]:
    """/proc/cpuinfo's lines up to the end of the first CPU's block, which names the model (one block per CPU)."""
    block: list[str] = []
    for line in lines:
        if not line.strip() and block:
            break
        block.append(line)
    return block


@functools.lru_cache(maxsize=None)
def _first_cpu_block(path: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The first CPU's block of the file, read once a process (a cell names its CPU more than once) and no further
    (on a large machine the whole file is large)."""
    try:
        with open(path) as f:
            return tuple(_first_block(f))
    except OSError:
        return ()


def nvml_info() -> dict[str, Any]:
    """GPU driver, CUDA driver version and GPU names from NVML; empty where there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # pynvml.NVMLError: no driver / no GPU (every CPU machine)
        return {}
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
        names = []
        for index in range(count):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {
            "gpu_driver": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_driver": f"{cuda // 1000}.{(cuda % 1000) // 10}",
            "gpu_names": names,
        }
    finally:
        pynvml.nvmlShutdown()


def gpu_model(index: int = 0) -> str | None:
    """The NVML name of GPU `index` (pynvml, else nvidia-smi); None where there is no NVIDIA driver."""
    names = nvml_info().get("gpu_names")
    if names:
        return names[index] if index < len(names) else names[0]
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(index)],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    return None


def device_model(on_gpu: bool, gpu: CellGpu | None = None) -> str:
    """The device part of a cell's identity: the GPU's model when it runs on one, else the CPU model.
    Runner and cell both call this, so the expected and the recorded device read the same. gpu: the cell's GPU
    (default: found here, fwbench.harness.gpu_identity; by UUID, so a container's or CUDA_VISIBLE_DEVICES'
    numbering names the right one)."""
    if on_gpu:
        gpu = gpu or resolve_cell_gpu()
        if gpu is not None and gpu.name:
            return gpu.name
        return gpu_model(unresolved_gpu().index or 0) or "unknown GPU"  # no NVML: nvidia-smi's word
    return cpu_model()


IMAGE_MANIFEST = "/opt/fwbench/manifest.json"


def image_manifest(path: str | None = None) -> dict[str, Any] | None:
    """Build facts of the fwbench image this cell runs in (None outside an image): stack, variant,
    pin set, git revision, base image, lock-file hash. A container cannot see its own image id; the
    docker engine records that from outside."""
    path = path or os.environ.get("FWBENCH_IMAGE_MANIFEST", IMAGE_MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return {key: value for key, value in manifest.items() if key != "pip_freeze"}


UNKNOWN_COMMIT = "unknown"
# Set in every image from its build argument GIT_REVISION (images/Dockerfile), which holds no checkout.
SOURCE_COMMIT_VARIABLE = "FWBENCH_SOURCE_COMMIT"
COMMIT_HASH = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1, or SHA-256 object names
GIT_TIMEOUT_S = 2.0


@functools.lru_cache(maxsize=None)
def source_commit() -> str:
    """The commit of the fwbench source this process runs (a row's source_commit), read once a process."""
    return read_source_commit(package_checkout(), os.environ)


def package_checkout() -> Path | None:
    """The checkout this package was imported from (<root>/runner/fwbench, as the local engine's PYTHONPATH and an
    editable install have it), or None: an installed copy, whose folders above say nothing about its source."""
    package = Path(__file__).resolve().parents[1]
    root = package.parents[1]
    return root if package.parent.name == "runner" and (root / "pyproject.toml").is_file() else None


def read_source_commit(checkout: Path | None, environ: Mapping[str, str]) -> str:
    """The commit SOURCE_COMMIT_VARIABLE declares (an image's), else the checkout's HEAD, else UNKNOWN_COMMIT. The
    declared one comes first: a copied checkout can carry a stale .git (seen on the GPU kit's host,
    fwbench.kit.install), and whoever sets the variable knows what they copied."""
    declared = (environ.get(SOURCE_COMMIT_VARIABLE) or "").strip()
    if declared and declared != UNKNOWN_COMMIT:
        return declared
    return (checkout_head(checkout) if checkout is not None else None) or UNKNOWN_COMMIT


def checkout_head(root: Path) -> str | None:
    """`git rev-parse HEAD` of the checkout at root, read from .git's files (no process: a cell's start-up is timed),
    and from git itself, briefly, only where the files do not say (another ref storage); None when root has no .git."""
    try:
        git_dir = _git_dir(root)
        if git_dir is None:
            return None
        commit = _head_from_files(git_dir)
    except (OSError, UnicodeDecodeError):
        commit = None
    if commit:
        return commit
    try:
        asked = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                               timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = asked.stdout.strip()
    return answer if asked.returncode == 0 and COMMIT_HASH.fullmatch(answer) else None


def _git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
        pointer = dot_git.read_text().strip()
        if pointer.startswith("gitdir:"):
            return (root / pointer[len("gitdir:"):].strip()).resolve()
    return None


def _head_from_files(git_dir: Path) -> str | None:
    head = (git_dir / "HEAD").read_text().strip()
    if COMMIT_HASH.fullmatch(head):  # detached
        return head
    if not head.startswith("ref:"):
        return None
    ref = head[len("ref:"):].strip()
    # A worktree keeps HEAD in its own folder and the branches in the repository's (its commondir).
    common = git_dir / "commondir"
    common_dir = (git_dir / common.read_text().strip()).resolve() if common.is_file() else git_dir
    for folder in dict.fromkeys((git_dir, common_dir)):
        loose = folder / ref
        if loose.is_file():
            commit = loose.read_text().strip()
            return commit if COMMIT_HASH.fullmatch(commit) else None
    packed = common_dir / "packed-refs"
    if packed.is_file():  # after `git gc` a branch may live only here
        for line in packed.read_text().splitlines():
            commit, _, name = line.partition(" ")
            if name.strip() == ref and COMMIT_HASH.fullmatch(commit):
                return commit
    return None


def environment() -> dict[str, Any]:
    return {
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "library_versions": library_versions(),
        **nvml_info(),
    }
