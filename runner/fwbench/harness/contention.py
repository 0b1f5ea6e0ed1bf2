"""What competed with a cell while it was timed: other CPU load, other fwbench cells, other GPU processes.

On a 2-core machine a test suite running beside a cell made CPU torch steps up to 100x slower. Nothing
in a step time says so, so every row records the competition it met, and a row that met some is
`busy` (the report leaves busy rows out of rankings unless asked).

CPU: /proc/stat counts each CPU's busy time (in clock ticks); the cell's own CPU time (all its
threads) comes from getrusage. Their difference over the timed window, on the cores the cell may run
on (its affinity: all of them unless `fwbench run --parallel` pinned it), is what other processes took
from it. Clock ticks are 10 ms, too coarse for a 20 ms window, so a short window is topped up with an
idle sample right after it (the cell does nothing then: whatever runs is someone else).

Other cells: only those that can compete count, i.e. cells that may run on one of this cell's cores or,
on a GPU, use its GPU. Cells of a `--parallel` run on cores (and GPUs) of their own are not competition.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any, Sequence

from fwbench.core import processes as procfs
from fwbench.core.processes import cpu_ticks, environment_variable
from fwbench.harness import hold
from fwbench.harness.gpu_identity import CellGpu, entry_may_name, nvml_handle, resolve_cell_gpu, unresolved_gpu
from fwbench.harness.nvml import nvml_query
from fwbench.harness.ranks import LAUNCHER_ENV

CELL_MODULE = "fwbench.harness.cell"
BUSY_OTHER_CPU_CORES = 0.5  # other processes using more than half a core count as competition
MIN_SAMPLE_S = 0.5  # shortest span the CPU competition is measured over
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def system_busy_s(cpus: set[int] | None = None) -> float | None:
    """Busy CPU seconds since boot (user, nice, system, irq, softirq, steal) of all CPUs, or of `cpus`
    (their per-CPU lines); None where /proc/stat cannot say."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return None
    if not lines or lines[0][0] != "cpu":
        return None
    if cpus is None:
        chosen = [lines[0]]
    else:
        chosen = [fields for fields in lines[1:] if fields[0][3:].isdigit() and int(fields[0][3:]) in cpus]
        if len(chosen) != len(cpus):  # a core /proc/stat does not list (offline): not measurable
            return None
    total = 0
    for fields in chosen:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        total += user + nice + system + irq + softirq + steal
    return total * _TICK_S


def own_cpus() -> set[int] | None:
    """The cores this process may run on; None where the OS cannot say."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def own_cpu_s() -> float:
    return _own_usage()[0]


def _own_usage() -> tuple[float, int, int]:
    """This process's CPU seconds (all its threads), and its threads' involuntary and voluntary context switches."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nivcsw, usage.ru_nvcsw


def other_cells(exclude: set[int] | None = None) -> list[int]:
    """Pids of other fwbench cell processes visible here (all of the host's, outside a container)."""
    exclude = exclude or {os.getpid()}
    launcher = os.environ.get(LAUNCHER_ENV)  # a data-parallel rank's own cell process (harness.ranks),
    if launcher and launcher.isdigit():      # which only waits for its ranks
        exclude = {*exclude, int(launcher)}
    cells = []
    for pid in procfs.pids():
        if pid in exclude:
            continue
        argv = procfs.command_line(pid)
        if argv is not None and CELL_MODULE.encode() in argv:
            cells.append(pid)
    return cells


def process_cpus(pid: int) -> set[int] | None:
    """The cores process `pid` may run on; None if that cannot be read (it has ended, or no affinity API)."""
    try:
        return set(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def process_gpus(pid: int) -> list[str] | None:
    """The GPUs process `pid` may use, as its CUDA_VISIBLE_DEVICES names them (NVML indices, GPU-/MIG- UUIDs);
    None: every GPU, or unknown (unset, or its environment is not readable)."""
    value = environment_variable(pid, "CUDA_VISIBLE_DEVICES")
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


def competing_cells(pids: list[int], cpus: set[int] | None, *gpus: CellGpu | None) -> list[int]:
    """The cells among `pids` that compete with this one: they may run on one of its cores (`cpus`;
    None: every core) or, when it uses GPUs `gpus` (None: none), may use one of them. Anything unknown competes."""
    mine = [gpu for gpu in gpus if gpu is not None]
    competing = []
    for pid in pids:
        theirs = process_cpus(pid)
        shares_cores = cpus is None or theirs is None or bool(theirs & cpus)
        shares_gpu = False
        if mine:
            entries = process_gpus(pid)
            shares_gpu = entries is None or any(entry_may_name(entry, gpu) for entry in entries for gpu in mine)
        if shares_cores or shares_gpu:
            competing.append(pid)
    return competing


def gpu_others(gpu: CellGpu) -> tuple[int, int] | None:
    """(other processes, their memory in bytes) on the GPU the cell uses (its MIG slice's, where NVML names the
    slice), from NVML; None without NVML.

    NVML reports host pids: inside a container the cell's own pid is not among them, so one process
    (the largest memory user, the cell's own context) is assumed to be the cell."""

    def memory_by_pid(pynvml) -> dict[int, int]:
        handle = nvml_handle(pynvml, gpu, slice_only=True)
        found = {}
        for query in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            for process in query(handle):
                found[process.pid] = int(process.usedGpuMemory or 0)
        return found

    processes = nvml_query(memory_by_pid)  # None: no pynvml, no driver (a CPU machine), or NVML failed
    if processes is None:
        return None
    if os.getpid() in processes:
        processes.pop(os.getpid())
    elif processes:
        processes.pop(max(processes, key=processes.get))
    return len(processes), sum(processes.values())


@dataclass
class _Snapshot:
    wall: float
    own_cpu: float
    system_busy: float | None
    involuntary_switches: int
    voluntary_switches: int


class ContentionProbe:
    """start() just before the timed window, stop() just after it, then result() for the row."""

    def __init__(self, threads: int, on_gpu: bool = False, gpus: Sequence[CellGpu] = ()):
        """gpus: the GPUs this process's steps run on, when it runs on GPUs (default: the one found here,
        fwbench.harness.gpu_identity); a process that drives several meets what competes on any of them."""
        self.threads = max(int(threads), 1)
        self.on_gpu = on_gpu
        # The cores whose load counts (the cell's own; all of them when it is not pinned, which reads
        # the all-CPU line, exactly as before --parallel existed).
        cpus = own_cpus()
        self.cpus = None if cpus is None or cpus == set(range(os.cpu_count() or 0)) else cpus
        self.gpus: tuple[CellGpu, ...] = ((tuple(gpus) or (resolve_cell_gpu() or unresolved_gpu(),))
                                          if on_gpu else ())
        self._start: _Snapshot | None = None
        self._stop: _Snapshot | None = None
        # Competing cells seen at the window's start and at its end: pid -> (held then, its CPU ticks then).
        self._cells_at: tuple[dict[int, tuple[bool, int | None]], dict[int, tuple[bool, int | None]]] = ({}, {})
        self.load_avg_1m: float | None = None

    def _snapshot(self) -> _Snapshot:
        wall = time.perf_counter()
        own_cpu, involuntary, voluntary = _own_usage()
        return _Snapshot(wall, own_cpu, system_busy_s(self.cpus), involuntary, voluntary)

    def _note_cells(self, seen: dict[int, tuple[bool, int | None]]) -> None:
        for pid in competing_cells(other_cells(), own_cpus(), *self.gpus):
            seen[pid] = (hold.is_held(pid), cpu_ticks(pid))

    def cells_met(self) -> tuple[set[int], set[int]]:
        """(held neighbours, competing cells): a cell held at both ends of the window that used at most
        HELD_MAX_TICKS of CPU in it waited the whole window (fwbench.harness.hold); any other cell competed."""
        at_start, at_stop = self._cells_at
        held = {pid for pid, (held_then, ticks) in at_start.items()
                if held_then and pid in at_stop and at_stop[pid][0] and ticks is not None
                and at_stop[pid][1] is not None and at_stop[pid][1] - ticks <= hold.HELD_MAX_TICKS}
        return held, (set(at_start) | set(at_stop)) - held

    def held_neighbours(self) -> int:
        return len(self.cells_met()[0])

    def start(self) -> None:
        self._note_cells(self._cells_at[0])
        self.load_avg_1m = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self._start = self._snapshot()  # last, closest to the window's first clock read

    def stop(self) -> None:
        self._stop = self._snapshot()  # first, closest to the window's last clock read
        self._note_cells(self._cells_at[1])

    def result(self) -> dict[str, Any]:
        if self._start is None or self._stop is None:
            return {}
        start, stop = self._start, self._stop
        window_s = max(stop.wall - start.wall, 1e-9)
        row: dict[str, Any] = {
            "load_avg_1m": self.load_avg_1m,
            "cpu_share": (stop.own_cpu - start.own_cpu) / (window_s * self.threads),
            "concurrent_cells": len(self.cells_met()[1]),
        }
        if start.system_busy is not None and stop.system_busy is not None:
            end = stop
            if window_s < MIN_SAMPLE_S:
                time.sleep(MIN_SAMPLE_S - window_s)  # the idle top-up (see module doc)
                end = self._snapshot()
            others = (end.system_busy - start.system_busy) - (end.own_cpu - start.own_cpu)
            row["other_cpu_cores"] = max(others, 0.0) / (end.wall - start.wall)
        others = [found for found in map(gpu_others, self.gpus) if found is not None]
        if others:  # summed over the GPUs (a process on two of them counts on each)
            row["gpu_other_processes"] = sum(count for count, _ in others)
            row["gpu_other_mem_bytes"] = sum(memory for _, memory in others)
        reasons = busy_reasons(row)
        row["busy"] = bool(reasons)
        row["busy_reasons"] = "; ".join(reasons) or None
        return row

    def context_switches(self) -> dict[str, int]:
        """The cell process's context switches in the timed window (all its threads; getrusage), for extra.
        Involuntary ones are preemptions: a thread that could have run waited for a core (the machine's
        other processes, or the process's own threads outnumbering its cores). They tell a slow repeat on a
        quiet machine from a slow program: on a 2-core machine they tracked keras3-jax predict's
        process-to-process spread (docs/development.md). Voluntary ones are waits (a sync, a lock, I/O)."""
        if self._start is None or self._stop is None:
            return {}
        return {"involuntary": self._stop.involuntary_switches - self._start.involuntary_switches,
                "voluntary": self._stop.voluntary_switches - self._start.voluntary_switches}


def busy_reasons(row: dict[str, Any]) -> list[str]:
    reasons = []
    other = row.get("other_cpu_cores")
    if other is not None and other > BUSY_OTHER_CPU_CORES:
        reasons.append(f"other processes used {other:.2f} CPU cores while the cell was timed")
    if row.get("concurrent_cells"):
        reasons.append(f"{row['concurrent_cells']} other fwbench cell(s) ran at the same time")
    if row.get("gpu_other_processes"):
        reasons.append(f"{row['gpu_other_processes']} other process(es) held "
                       f"{(row.get('gpu_other_mem_bytes') or 0) / 2**20:.0f} MiB on the GPU")
    return reasons


def host_load(sample_s: float = 1.0, top: int = 3) -> tuple[float | None, list[str]]:
    """CPU cores busy on the host over `sample_s` (the caller idles meanwhile) and the top consumers.

    For `fwbench run`'s warning before a matrix starts."""
    def per_process() -> dict[int, tuple[str, int]]:
        ticks = {}
        for pid in procfs.pids():
            found = procfs.stat(pid)
            if found is not None:
                ticks[pid] = (found[0], procfs.ticks_of(found[1]))
        return ticks

    before_busy, before = system_busy_s(), per_process()
    own_before = own_cpu_s()
    time.sleep(sample_s)
    after_busy, after = system_busy_s(), per_process()
    own = own_cpu_s() - own_before
    if before_busy is None or after_busy is None:
        return None, []
    cores = max((after_busy - before_busy) - own, 0.0) / sample_s
    usage = sorted(((after[pid][1] - before[pid][1], after[pid][0]) for pid in after
                    if pid in before and pid != os.getpid()), reverse=True)
    consumers = [f"{name} {100 * ticks * _TICK_S / sample_s:.0f}%" for ticks, name in usage[:top] if ticks > 0]
    return cores, consumers
