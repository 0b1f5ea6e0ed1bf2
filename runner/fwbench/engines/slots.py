"""Slots for `fwbench run --parallel N|auto`: where each of N concurrent cells may run.

A slot is a set of CPU cores, disjoint from every other slot's, and on a GPU host GPUs of its own (one; a
data-parallel run's `--devices N`, N): two cells sharing a core or a GPU would slow each other down and both
timings would be wrong. The
cores this process may use (its affinity) are split evenly; cores left over by the split stay unused,
so every slot, and every cell's default thread count, is the same size (threads are part of a cell's
identity: uneven slots would make repeats of one cell different measurements).

Plain Python, no framework: the CLI plans the slots, engines and cell processes read CPU lists with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from fwbench.harness.nvml import nvml_query
from fwbench.core.cpusets import format_cpu_set, parse_cpu_set  # noqa: F401 (also read as slots.*)

# `auto` on a CPU-only host: one slot per `threads` cores, but no more than this many. Every cell
# process loads a whole framework (GBs of memory) and shares the memory bandwidth: beyond a few cells at
# once those, not the cores, limit how many can run without slowing each other.
AUTO_MAX_CPU_SLOTS = 8


class SlotError(ValueError):
    """The requested parallelism cannot be planned on this host (a usage error)."""


@dataclass(frozen=True)
class Slot:
    index: int
    cpus: tuple[int, ...] | None  # None: not pinned, the cell inherits the runner's cores (--parallel 1)
    gpu: int | None  # NVML index of the slot's (first) GPU; None: no GPU (a CPU run), or GPUs that cannot be listed
    # NVML indices of every GPU of the slot, `gpu` first: (gpu,) unless a data-parallel cell has several.
    gpus: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.gpu is not None and not self.gpus:
            object.__setattr__(self, "gpus", (self.gpu,))
        if self.gpus and self.gpus[0] != self.gpu:
            raise ValueError(f"a slot's first GPU {self.gpus[0]} is not its gpu {self.gpu}")

    @property
    def cpu_set(self) -> str | None:
        return None if self.cpus is None else format_cpu_set(self.cpus)


UNPINNED = Slot(0, None, None)  # --parallel 1 on a CPU run: cells run on every core, as they always have


def usable_cpus() -> list[int]:
    """The CPU cores this process may run on (its affinity: a container's or taskset's limit)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable_gpus() -> list[int]:
    """NVML indices of the GPUs cells may use: every GPU the driver reports (NVML, else nvidia-smi, which
    numbers them the same way), narrowed to CUDA_VISIBLE_DEVICES when the runner was started with it.
    Empty without an NVIDIA driver."""
    gpus = _nvml_gpus()
    if gpus is None:
        gpus = _nvidia_smi_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(part.strip().isdigit() for part in visible.split(",") if part.strip()):
        wanted = [int(part) for part in visible.split(",") if part.strip()]
        gpus = [gpu for gpu in wanted if gpu in gpus]
    return gpus


def _nvml_gpus() -> list[int] | None:
    """GPU indices from NVML; None when NVML cannot be asked (pynvml is not in the runner's install, or
    no driver)."""
    return nvml_query(lambda pynvml: list(range(pynvml.nvmlDeviceGetCount())))


def _nvidia_smi_gpus() -> list[int]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return [int(line) for line in lines] if done.returncode == 0 and all(map(str.isdigit, lines)) else []


def parse_parallel(text: str) -> int | None:
    """--parallel: a positive number, or None for `auto`."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise SlotError(f"--parallel must be a positive number or auto, not {text!r}") from None
    if value < 1:
        raise SlotError(f"--parallel must be at least 1, got {value}")
    return value


def plan_slots(parallel: int | None, threads: int | None, cpus: list[int], gpus: list[int], *,
               devices_per_cell: int = 1) -> list[Slot]:
    """The slots for `--parallel` (None = auto) given the usable CPU cores and the GPUs of a GPU run (none for a
    CPU run); each slot has `devices_per_cell` GPUs (--devices: a data-parallel cell's ranks), never fewer.

    One slot is not pinned to cores; on a GPU run it still has exactly its GPUs, the first usable ones: a cell
    never sees more GPUs than it asked for by accident (the HF Trainer would train on all of them with
    DataParallel while the row says one). More slots: each gets len(cpus) // N cores of its own and, when there
    are GPUs, `devices_per_cell` GPUs of its own. On a CPU run the ranks share the slot's cores."""
    if not cpus:
        raise SlotError("this process may run on no CPU core (empty CPU affinity)")
    if devices_per_cell < 1:
        raise SlotError(f"--devices must be at least 1, got {devices_per_cell}")
    per = devices_per_cell
    if gpus and len(gpus) < per:
        raise SlotError(f"--devices {per} needs {per} GPUs per cell, but this host has {len(gpus)} usable GPU(s)")
    if parallel is None:
        parallel = auto_parallel(threads, len(cpus), len(gpus) // per)
    if parallel == 1:
        return [Slot(0, None, gpus[0], tuple(gpus[:per]))] if gpus else [UNPINNED]
    if gpus and parallel * per > len(gpus):
        need = f"{per} GPUs per cell ({parallel * per} in all)" if per > 1 else "a GPU per cell"
        raise SlotError(f"--parallel {parallel} needs {need}, but this host has {len(gpus)} usable GPU(s) "
                        "(two cells on one GPU would slow each other down)")
    if parallel > len(cpus):
        raise SlotError(f"--parallel {parallel} needs a CPU core per cell, but this process may use "
                        f"{len(cpus)} core(s): {format_cpu_set(cpus)}")
    size = len(cpus) // parallel
    if threads is not None and threads > size:
        raise SlotError(f"--threads {threads} is more than the {size} core(s) each of the {parallel} parallel "
                        f"cells gets ({len(cpus)} cores / {parallel}): lower --threads or --parallel")
    return [Slot(i, tuple(cpus[i * size:(i + 1) * size]), gpus[i * per] if gpus else None,
                 tuple(gpus[i * per:(i + 1) * per])) for i in range(parallel)]


def one_cell_at_a_time(device: str, devices_per_cell: int = 1) -> list[Slot]:
    """The slot of a runner that runs one cell at a time (a cluster task, a verification): on a GPU run, the
    first `devices_per_cell` GPUs this process may use (a scheduler's CUDA_VISIBLE_DEVICES narrows them), and
    never more. Fewer usable than asked: the cell gets those, and its framework's count makes its row
    device_unavailable (a cluster task's cell gets a row, not a task that dies without one)."""
    gpus = usable_gpus() if device == "gpu" else []
    return plan_slots(1, None, usable_cpus(), gpus, devices_per_cell=max(1, min(devices_per_cell, len(gpus))))


def auto_parallel(threads: int | None, cores: int, gpus: int) -> int:
    """`--parallel auto`: one cell per GPU on a GPU host, one per `threads` cores (default 1) on a
    CPU-only host (there at most AUTO_MAX_CPU_SLOTS); never more cells than `threads`-sized core groups."""
    by_cores = cores // max(1, threads or 1)
    return max(1, min(gpus, by_cores) if gpus else min(by_cores, AUTO_MAX_CPU_SLOTS))


def slot_threads(slots: list[Slot], threads: int | None) -> int:
    """Threads per cell: --threads, else a pinned slot's core count, else every core of the host (as
    fwbench always defaulted to)."""
    if threads is not None:
        return threads
    if slots[0].cpus is not None:
        return len(slots[0].cpus)
    return os.cpu_count() or 1
