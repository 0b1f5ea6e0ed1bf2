"""Which GPU a cell uses (fwbench.harness.gpu_identity) and the NVML readings that follow from it.

No GPU or NVML on this machine: pynvml is a fake module (tests/fake_nvml.py) put in sys.modules, and torch's CUDA
is a fake module object too; everything else is the real code.
"""

from __future__ import annotations

import sys
import types

import pytest

from fwbench.harness import contention, energy, envinfo, gpu_identity
from fwbench.harness.gpu_identity import CellGpu, resolve_cell_gpu
from fwbench.harness.nvml import NvmlSession
from tests.fake_nvml import FakeNvml, FakeSlice, gpu

MIG_SLICE = FakeSlice("MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 1, 0)


def _host(monkeypatch, gpus, visible: str | None) -> FakeNvml:
    """A host whose NVML shows `gpus`, this process seeing CUDA_VISIBLE_DEVICES=`visible` (None: unset)."""
    fake = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return fake


FOUR = [gpu(0, "NVIDIA A100-SXM4-80GB"), gpu(1), gpu(2, "NVIDIA L40S"), gpu(3)]


def test_a_uuid_in_cuda_visible_devices_names_that_gpu_not_index_0(monkeypatch):
    _host(monkeypatch, FOUR, FOUR[2].uuid)
    found = resolve_cell_gpu()
    assert (found.index, found.uuid, found.name, found.mig) == (2, FOUR[2].uuid, "NVIDIA L40S", False)
    # The device model (the cell's identity) is that GPU's: it used to be index 0's (an A100 here).
    assert envinfo.device_model(True) == "NVIDIA L40S"


def test_a_uuid_prefix_is_enough_as_for_cuda(monkeypatch):
    _host(monkeypatch, FOUR, "GPU-00000003,GPU-00000001")
    assert resolve_cell_gpu().index == 3
    _host(monkeypatch, FOUR, "GPU-0000")  # ambiguous: CUDA would refuse it too
    assert resolve_cell_gpu() is None


def test_a_digit_is_an_nvml_index_and_unset_is_the_first_gpu(monkeypatch):
    _host(monkeypatch, FOUR, "1")
    assert resolve_cell_gpu().uuid == FOUR[1].uuid
    # Inside a container NVML shows the container's GPUs only: the cell's is index 0 there.
    _host(monkeypatch, [FOUR[3]], None)
    found = resolve_cell_gpu()
    assert (found.index, found.uuid) == (0, FOUR[3].uuid) and "unset" in found.found_by
    _host(monkeypatch, [FOUR[3]], "3")  # an index the view does not have: unknown, not a guess
    assert resolve_cell_gpu() is None


def test_mig_ids_name_the_slice_and_its_gpu(monkeypatch):
    a100 = gpu(5, "NVIDIA A100-SXM4-40GB", slices=[MIG_SLICE])
    for visible in (MIG_SLICE.uuid, f"MIG-{a100.uuid}/1/0"):  # today's form and CUDA 11.0-11.3's
        _host(monkeypatch, [gpu(4), a100], visible)
        found = resolve_cell_gpu()
        assert found.mig and found.index == 1 and found.uuid == a100.uuid, visible
        assert found.mig_uuid == found.device_uuid == MIG_SLICE.uuid and "MIG" in found.name
    # A GPU in MIG mode named by its index: the cell runs on a slice of it (its only one here).
    _host(monkeypatch, [a100], "0")
    assert resolve_cell_gpu().mig and resolve_cell_gpu().mig_uuid == MIG_SLICE.uuid
    assert envinfo.device_model(True) == MIG_SLICE.name  # a slice is not named as the whole GPU


def test_the_frameworks_uuid_wins_where_cuda_visible_devices_disagrees(monkeypatch):
    _host(monkeypatch, FOUR, "1")  # e.g. CUDA's fastest-first order: its 1 is not NVML's 1
    found = resolve_cell_gpu(framework_uuid=FOUR[3].uuid)
    assert found.uuid == FOUR[3].uuid and "framework" in found.found_by and "'1'" in found.found_by
    agreed = resolve_cell_gpu(framework_uuid=FOUR[1].uuid)
    assert agreed.uuid == FOUR[1].uuid and "confirmed" in agreed.found_by
    assert resolve_cell_gpu(framework_uuid="GPU-not-a-gpu-here").uuid == FOUR[1].uuid  # unknown: no say


def test_torchs_uuid_is_read_only_once_it_started_cuda(monkeypatch):
    """torch is a fake module object here (its CUDA is a boundary this machine cannot run)."""
    properties = types.SimpleNamespace(uuid="00000002-1111-2222-3333-444444444444")
    cuda = types.SimpleNamespace(is_initialized=lambda: True, get_device_properties=lambda index: properties)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert gpu_identity.framework_gpu_uuid() == FOUR[2].uuid
    cuda.is_initialized = lambda: False
    assert gpu_identity.framework_gpu_uuid() is None
    monkeypatch.setitem(sys.modules, "torch", None)
    assert gpu_identity.framework_gpu_uuid() is None


def test_without_nvml_nothing_is_claimed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no pynvml in the environment
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert resolve_cell_gpu() is None
    unresolved = gpu_identity.unresolved_gpu()
    assert unresolved.index is None and unresolved.uuid is None and not unresolved.mig
    assert gpu_identity.unresolved_gpu("2").index == 2 and gpu_identity.unresolved_gpu("MIG-x").mig


@pytest.mark.parametrize("entry, names_it", [
    ("2", True), ("0", False), (FOUR[2].uuid, True), ("GPU-00000002", True), (FOUR[1].uuid, False),
    ("MIG-aaaa", False),  # a slice is never on a GPU used whole
    (f"MIG-{FOUR[2].uuid}/1/0", True), (f"MIG-{FOUR[1].uuid}/1/0", False), ("something else", True)])
def test_which_entries_of_another_cell_name_this_gpu(entry, names_it):
    cell = CellGpu(2, FOUR[2].uuid, "NVIDIA L40S")
    assert gpu_identity.entry_may_name(entry, cell) is names_it


def test_entries_against_a_mig_slice():
    cell = CellGpu(0, FOUR[0].uuid, "x MIG", True, MIG_SLICE.uuid)
    assert gpu_identity.entry_may_name(MIG_SLICE.uuid, cell)
    assert not gpu_identity.entry_may_name("MIG-ffff", cell)
    assert gpu_identity.entry_may_name("MIG-ffff", CellGpu(0, FOUR[0].uuid, "x MIG", True, None))  # unknown slice


# --- contention: the cell's GPU by UUID

def test_gpu_neighbours_are_counted_on_the_cells_own_gpu(monkeypatch):
    gpus = [gpu(0, processes=[(11, 2**30), (12, 2**30), (13, 2**30)]), gpu(1, processes=[(21, 5 * 2**30)])]
    _host(monkeypatch, gpus, gpus[1].uuid)
    probe = contention.ContentionProbe(threads=1, on_gpu=True)
    probe.start()
    probe.stop()
    row = probe.result()
    # GPU 1 holds only the cell itself (the largest user): GPU 0's three processes are not its neighbours.
    assert row["gpu_other_processes"] == 0 and row["gpu_other_mem_bytes"] == 0


def test_a_cell_on_another_gpu_named_by_uuid_does_not_compete(monkeypatch):
    cell = CellGpu(1, FOUR[1].uuid, "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(contention, "process_cpus", lambda pid: {99})  # on cores of its own
    environments = {1: [FOUR[2].uuid], 2: ["GPU-00000001"], 3: None, 4: ["1"]}
    monkeypatch.setattr(contention, "process_gpus", lambda pid: environments[pid])
    assert contention.competing_cells([1, 2, 3, 4], {0}, cell) == [2, 3, 4]
    assert contention.competing_cells([1, 2, 3, 4], {0}, None) == []  # a CPU cell shares no GPU


# --- energy: one session, the cell's GPU, the window's length, MIG

def _energy_window(monkeypatch, fake: FakeNvml, cell: CellGpu | None, times=(10.0, 12.0)):
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    clock = iter(times)
    monkeypatch.setattr(energy.time, "perf_counter", lambda: next(clock))
    probe = energy.EnergyProbe(True, cell)
    probe.start()
    probe.stop()
    return probe


def test_energy_reads_the_cells_gpu_by_uuid_in_one_session(monkeypatch):
    gpus = [gpu(0, energy_mj=iter([5, 6])), gpu(1, energy_mj=iter([1_000_000, 1_600_000]))]
    fake = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cell = resolve_cell_gpu(visible=gpus[1].uuid)
    fake.inits = fake.shutdowns = 0
    cols = _energy_window(monkeypatch, fake, cell).result(timed_steps=10, tokens_per_step=None)
    assert cols["energy_status"] == "ok" and cols["energy_j"] == pytest.approx(600.0)
    assert fake.energy_handles == [("gpu", 1), ("gpu", 1)]
    assert (fake.inits, fake.shutdowns) == (1, 1)  # both ends and the clocks: one NVML session


def test_a_window_shorter_than_the_minimum_has_no_energy(monkeypatch):
    fake = FakeNvml([gpu(0, energy_mj=iter([1_000_000, 1_010_000]))])
    cell = CellGpu(0, fake.gpus[0].uuid, "NVIDIA H100 80GB HBM3")
    cols = _energy_window(monkeypatch, fake, cell, times=(10.0, 10.0 + energy.MIN_ENERGY_WINDOW_S / 2)).result(10, None)
    assert cols["energy_status"] == "window_too_short"
    assert all(cols.get(k) is None for k in ("energy_j", "joules_per_step", "joules_per_token", "mean_power_w"))
    assert cols["sm_clock_mhz"] == 1410  # the clocks are still read


def test_a_mig_slice_gets_no_energy(monkeypatch):
    fake = FakeNvml([gpu(0, "NVIDIA A100-SXM4-40GB", slices=[MIG_SLICE], energy_mj=iter([1, 2]))])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cell = resolve_cell_gpu(visible=MIG_SLICE.uuid)
    cols = _energy_window(monkeypatch, fake, cell).result(10, None)
    assert cols["energy_status"] == "mig" and cols.get("energy_j") is None and fake.energy_handles == []
    assert cols["gpu_temp_c"] == 61  # its GPU's temperature and clocks are the slice's


def test_a_gpu_nvml_cannot_find_or_reach_says_nvml_unavailable(monkeypatch):
    fake = FakeNvml([gpu(0, energy_mj=iter([1, 2]))])
    gone = CellGpu(0, "GPU-not-in-this-view", "NVIDIA H100 80GB HBM3")
    assert _energy_window(monkeypatch, fake, gone).result(10, None) == {"energy_status": "nvml_unavailable"}
    assert fake.shutdowns == fake.inits == 1  # the session is closed all the same
    assert _energy_window(monkeypatch, fake, None).result(10, None) == {"energy_status": "nvml_unavailable"}


def test_a_session_that_cannot_start_never_raises(monkeypatch):
    fake = FakeNvml([])

    def fail():
        raise fake.NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")

    fake.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    session = NvmlSession()
    assert session.open() is False and session.query(lambda pynvml: 1) is None
    session.close()
    session.close()


def test_every_energy_status_is_documented():
    from fwbench.core.schema import COLUMNS

    described = next(doc for name, _, doc in COLUMNS if name == "energy_status")
    for status in energy.ENERGY_STATUSES:
        assert status in described, status
    assert f"{energy.MIN_ENERGY_WINDOW_S:g} s" in described
