"""CPU sets in the kernel's list format ("0-3,6"): the engines pin cells to them, the cell records its own."""

from __future__ import annotations

import os

# The thread pools' variables the engines set for a cell (engines.cell_settings) and the cell records on its row.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def format_cpu_set(cpus) -> str:
    """CPU ids as the kernel's list format: {0,1,2,3} -> "0-3", {0,2} -> "0,2", {0,1,4} -> "0-1,4"."""
    ids = sorted(set(int(c) for c in cpus))
    parts = []
    start = previous = None
    for cpu in ids + [None]:
        if start is not None and (cpu is None or cpu != previous + 1):
            parts.append(str(start) if start == previous else f"{start}-{previous}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        previous = cpu
    return ",".join(parts)


def parse_cpu_set(text: str) -> set[int]:
    """The kernel's list format back to CPU ids ("0-1,4" -> {0, 1, 4}); ValueError if malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(low, high + 1))
    return cpus


def own_cpu_count() -> int:
    """How many CPUs this process may run on (its affinity: what the engine pinned, what XLA's CPU client and the CPU
    ceiling size themselves by); the machine's count where the OS cannot say."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else int(os.cpu_count() or 1)


def own_cpu_set() -> str | None:
    """This process's cores as a CPU list ("0-3"); None where the OS cannot say (no sched_getaffinity)."""
    return format_cpu_set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
