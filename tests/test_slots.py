"""Slot planning for `fwbench run --parallel`: disjoint cores, one GPU per cell, bad requests refused.

GPU counts come from NVML, which this machine cannot answer (no GPU here): those tests replace the
pynvml module, the boundary to the driver, with a stand-in that reports N GPUs.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

from fwbench.engines import slots
from fwbench.engines.slots import UNPINNED, Slot, SlotError, plan_slots


@pytest.mark.parametrize("cpus, text", [({0, 1, 2, 3}, "0-3"), ({0, 2}, "0,2"), ({0, 1, 4}, "0-1,4"),
                                        ({5}, "5"), ({3, 1, 2, 7, 8, 10}, "1-3,7-8,10")])
def test_cpu_sets_read_like_the_kernels_lists_and_back(cpus, text):
    assert slots.format_cpu_set(cpus) == text
    assert slots.parse_cpu_set(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "1,,2", "-1"])
def test_a_malformed_cpu_list_is_refused(text):
    with pytest.raises(ValueError):
        slots.parse_cpu_set(text)


def test_one_cell_at_a_time_is_not_pinned_to_cores_but_gets_exactly_one_gpu():
    assert plan_slots(1, None, [0, 1, 2, 3], []) == [UNPINNED]
    # Never every GPU: the HF Trainer would wrap the model in DataParallel over all of them while the row says one.
    assert plan_slots(1, None, [0, 1], [2, 3]) == [Slot(0, None, 2)]
    assert plan_slots(None, None, [0, 1], [3]) == [Slot(0, None, 3)]  # auto on a one-GPU host
    assert slots.slot_threads([UNPINNED], None) == (os.cpu_count() or 1)  # as fwbench always defaulted to


def test_a_runner_of_one_cell_at_a_time_gives_it_the_first_gpu_it_may_use(monkeypatch):
    """A Slurm task or a verification: its GPUs (CUDA_VISIBLE_DEVICES narrows NVML's, mocked here) give the cell
    the first one only; a CPU run none."""
    monkeypatch.setattr(slots, "_nvml_gpus", lambda: [0, 1, 2, 3])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [slot.gpu for slot in slots.one_cell_at_a_time("gpu")] == [2]
    assert [slot.gpu for slot in slots.one_cell_at_a_time("cpu")] == [None]


def test_cores_are_split_evenly_and_disjointly():
    planned = plan_slots(2, None, [0, 1, 2, 3], [])
    assert planned == [Slot(0, (0, 1), None), Slot(1, (2, 3), None)]
    assert [slot.cpu_set for slot in planned] == ["0-1", "2-3"]
    assert slots.slot_threads(planned, None) == 2
    # Uneven: every slot the same size (threads are part of the identity), the leftover core unused.
    planned = plan_slots(3, None, [0, 1, 2, 4, 5, 6, 7], [])
    assert [slot.cpus for slot in planned] == [(0, 1), (2, 4), (5, 6)]


def test_each_slot_gets_a_gpu_of_its_own():
    planned = plan_slots(2, None, list(range(8)), [0, 1, 2])
    assert [(slot.cpu_set, slot.gpu) for slot in planned] == [("0-3", 0), ("4-7", 1)]


@pytest.mark.parametrize("parallel, threads, cpus, gpus, message", [
    (3, None, [0, 1, 2, 3], [0, 1], "needs a GPU per cell, but this host has 2 usable GPU(s)"),
    (3, None, [0, 1], [], "needs a CPU core per cell, but this process may use 2 core(s): 0-1"),
    (2, 2, [0, 1], [], "--threads 2 is more than the 1 core(s) each of the 2 parallel cells gets"),
    (2, None, [], [], "empty CPU affinity"),
])
def test_impossible_requests_are_usage_errors(parallel, threads, cpus, gpus, message):
    with pytest.raises(SlotError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_slots(parallel, threads, cpus, gpus)


def test_auto_is_one_cell_per_gpu_or_per_threads_cores():
    assert len(plan_slots(None, None, [0, 1], [])) == 2  # the 2-core machine: one core each
    assert plan_slots(None, 2, [0, 1], []) == [UNPINNED]  # two threads fill the machine: one at a time
    assert [slot.cpus for slot in plan_slots(None, 2, list(range(8)), [])] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert len(plan_slots(None, None, list(range(64)), [])) == slots.AUTO_MAX_CPU_SLOTS
    assert [slot.gpu for slot in plan_slots(None, None, list(range(16)), [0, 1, 2, 3])] == [0, 1, 2, 3]
    assert len(plan_slots(None, None, [0, 1], [0, 1, 2, 3])) == 2  # fewer cores than GPUs
    assert len(plan_slots(None, 8, list(range(16)), [0, 1, 2, 3])) == 2  # --threads 8: two 8-core slots


@pytest.mark.parametrize("text, value", [("1", 1), ("4", 4), ("auto", None), ("AUTO", None)])
def test_parallel_option_values(text, value):
    assert slots.parse_parallel(text) == value


@pytest.mark.parametrize("text", ["0", "-2", "many", "2.5", ""])
def test_bad_parallel_values_are_refused(text):
    with pytest.raises(SlotError, match="--parallel must be"):
        slots.parse_parallel(text)


def _fake_nvml(count: int | None):
    """Stand-in for pynvml (no GPU on this machine): `count` GPUs, or no driver when None."""
    def init():
        if count is None:
            raise RuntimeError("NVML Shared Library Not Found")
    return types.SimpleNamespace(nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: count)


def test_usable_gpus_come_from_nvml_narrowed_by_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(4))
    assert slots.usable_gpus() == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,7")  # 7 does not exist
    assert slots.usable_gpus() == [3, 1]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(None))
    monkeypatch.setenv("PATH", "/nonexistent")  # and no nvidia-smi either
    assert slots.usable_gpus() == []


def test_without_pynvml_the_gpus_come_from_nvidia_smi(monkeypatch, tmp_path):
    """The runner's install has no pynvml; the driver's nvidia-smi (a stand-in script here) still counts."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=index" ] && printf "0\\n1\\n2\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert slots.usable_gpus() == [0, 1, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert slots.usable_gpus() == [2]
