"""Contention on a row: other CPU load, other fwbench cells, other GPU processes (harness.contention)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import pytest

from fwbench.harness import contention
from fwbench.harness.gpu_identity import CellGpu

def test_other_cpu_load_makes_a_window_busy(cpu_hogs):
    probe = contention.ContentionProbe(threads=1)
    probe.start()
    time.sleep(0.6)
    probe.stop()
    row = probe.result()
    assert row["other_cpu_cores"] > contention.BUSY_OTHER_CPU_CORES, row
    assert row["busy"] is True and "other processes used" in row["busy_reasons"]
    assert row["load_avg_1m"] is not None and 0 <= row["cpu_share"] < 0.5  # the probe itself slept


def test_a_short_window_is_topped_up_to_a_measurable_span(cpu_hogs):
    probe = contention.ContentionProbe(threads=1)
    probe.start()
    probe.stop()  # a window far shorter than one clock tick
    started = time.perf_counter()
    row = probe.result()
    assert time.perf_counter() - started >= contention.MIN_SAMPLE_S * 0.9
    assert row["busy"] is True


def test_a_window_counts_the_process_s_own_context_switches(cpu_hogs):
    probe = contention.ContentionProbe(threads=1)
    assert probe.context_switches() == {}  # no window yet
    probe.start()
    for _ in range(5):
        time.sleep(0.005)  # each sleep gives the core up: a voluntary switch
    spin_until = time.perf_counter() + 0.3
    while time.perf_counter() < spin_until:  # runnable all along, beside a hog on every core: preempted
        pass
    probe.stop()
    switches = probe.context_switches()
    assert switches["voluntary"] >= 5, switches
    assert switches["involuntary"] >= 1, switches


def test_other_fwbench_cells_are_counted():
    fake_cell = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "fwbench.harness.cell"])
    try:
        time.sleep(0.2)
        assert fake_cell.pid in contention.other_cells()
        probe = contention.ContentionProbe(threads=1)
        probe.start()
        probe.stop()
        row = probe.result()
        assert row["concurrent_cells"] >= 1 and "other fwbench cell" in row["busy_reasons"]
    finally:
        fake_cell.kill()
        fake_cell.wait()


def test_busy_reasons_thresholds():
    assert contention.busy_reasons({"other_cpu_cores": 0.1, "concurrent_cells": 0}) == []
    assert contention.busy_reasons({"other_cpu_cores": None}) == []
    assert len(contention.busy_reasons({"other_cpu_cores": 0.9, "concurrent_cells": 2,
                                        "gpu_other_processes": 1, "gpu_other_mem_bytes": 2**30})) == 3


class _Process:
    def __init__(self, pid, memory):
        self.pid, self.usedGpuMemory = pid, memory


def _fake_nvml(processes):
    """A stand-in for pynvml: the GPU is a boundary this machine cannot run (no GPU here)."""
    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        nvmlDeviceGetComputeRunningProcesses=lambda handle: processes,
        nvmlDeviceGetGraphicsRunningProcesses=lambda handle: [])


GPU_0 = CellGpu(0, "GPU-00000000-1111-2222-3333-444444444444", "NVIDIA H100 80GB HBM3")


def test_gpu_neighbours_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([_Process(os.getpid(), 5 * 2**30), _Process(1, 2**30)]))
    assert contention.gpu_others(GPU_0) == (1, 2**30)
    # In a container NVML shows host pids: the largest user is taken to be the cell itself.
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([_Process(11, 5 * 2**30), _Process(12, 2**30)]))
    assert contention.gpu_others(GPU_0) == (1, 2**30)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([_Process(11, 5 * 2**30)]))
    assert contention.gpu_others(GPU_0) == (0, 0)


def test_host_load_names_the_top_consumers(cpu_hogs):
    cores, top = contention.host_load(sample_s=0.5)
    assert cores > contention.BUSY_OTHER_CPU_CORES and any(name.startswith("python") for name in top), top


# --- cells pinned to cores of their own (fwbench run --parallel) ------------------------------------------

CORES = sorted(os.sched_getaffinity(0))
needs_two_cores = pytest.mark.skipif(len(CORES) < 2, reason="cells on cores of their own need two cores")
FAKE_CELL = [sys.executable, "-c", "import time; time.sleep(30)", "fwbench.harness.cell"]


def _pinned(argv, cores, **env):
    """A process on `cores` only (as the runner starts a --parallel cell), with extra environment variables."""
    environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    return subprocess.Popen(argv, env={**environment, **env},
                            preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores))


def test_per_cpu_lines_add_up_to_the_all_cpu_line():
    cores = set(range(os.cpu_count()))
    for _ in range(3):
        assert abs(contention.system_busy_s() - contention.system_busy_s(cores)) < 0.1
    assert contention.system_busy_s({max(cores) + 1}) is None  # a core /proc/stat does not list


@needs_two_cores
def test_only_cells_sharing_the_cells_cores_or_gpu_compete():
    own, elsewhere = CORES[0], CORES[1]
    same_core = _pinned(FAKE_CELL, {own})
    other_core = _pinned(FAKE_CELL, {elsewhere}, CUDA_VISIBLE_DEVICES="1")
    unpinned = _pinned(FAKE_CELL, None)
    cells = [same_core, other_core, unpinned]
    try:
        time.sleep(0.3)
        pids = [cell.pid for cell in cells]
        assert set(pids) <= set(contention.other_cells())
        assert contention.competing_cells(pids, {own}, None) == [same_core.pid, unpinned.pid]
        assert contention.competing_cells(pids, None, None) == pids  # an unpinned cell can meet every cell
        # On a GPU: the cell on another core still competes when it may use the same GPU. Its GPU is read
        # from its CUDA_VISIBLE_DEVICES (no GPU needed for that).
        assert contention.process_gpus(other_core.pid) == ["1"] and contention.process_gpus(unpinned.pid) is None
        assert contention.competing_cells(pids, {own}, CellGpu(1, None, None)) == pids
        assert contention.competing_cells(pids, {own}, CellGpu(0, None, None)) == [same_core.pid, unpinned.pid]
    finally:
        for cell in cells:
            cell.kill()
            cell.wait()


@needs_two_cores
def test_load_on_a_pinned_cells_own_core_makes_it_busy():
    core = CORES[-1]
    hog = _pinned([sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"], {core})
    before = os.sched_getaffinity(0)
    try:
        time.sleep(0.3)
        os.sched_setaffinity(0, {core})  # this test is the pinned cell
        probe = contention.ContentionProbe(threads=1)
        assert probe.cpus == {core}
        probe.start()
        time.sleep(0.6)
        probe.stop()
        row = probe.result()
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert row["busy"] is True and "other processes used" in row["busy_reasons"]
    # Measured on its one core only: others can take at most that core (plus a tick of rounding).
    assert contention.BUSY_OTHER_CPU_CORES < row["other_cpu_cores"] <= 1.1, row
