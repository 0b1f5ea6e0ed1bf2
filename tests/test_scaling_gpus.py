"""A data-parallel cell (`--devices N`) gets exactly N GPUs of its own: slots, the cell's CUDA_VISIBLE_DEVICES, the
docker request, the row, and the cluster schedulers' requests. The GPUs are a boundary this machine does not have:
NVML's list is mocked (slots._nvml_gpus), as tests/test_slots.py and tests/test_device.py do."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fwbench.core.spec import CellSpec
from fwbench.engines import cell_environment, matrix, slots
from fwbench.engines.local import current_engine
from fwbench.engines.slots import Slot, SlotError, plan_slots

FOUR_GPUS = [0, 1, 2, 3]


def spec(**fields) -> CellSpec:
    return CellSpec(**{"stack": "native-torch", "task": "bert-fit", "preset": "tiny", "compile_mode": "none",
                       "data_dir": "/data", "steps": 5, **fields})


def test_one_cell_at_a_time_with_two_devices_gets_the_first_two_gpus():
    [slot] = plan_slots(1, None, list(range(8)), FOUR_GPUS, devices_per_cell=2)
    assert (slot.cpus, slot.gpu, slot.gpus) == (None, 0, (0, 1))


def test_two_cells_with_two_devices_each_get_disjoint_gpu_pairs_and_cores():
    planned = plan_slots(2, None, list(range(8)), FOUR_GPUS, devices_per_cell=2)
    assert [(slot.cpu_set, slot.gpus) for slot in planned] == [("0-3", (0, 1)), ("4-7", (2, 3))]
    assert [slot.gpu for slot in planned] == [0, 2]  # the first GPU of each, as a one-GPU slot's
    assert len(plan_slots(None, None, list(range(16)), FOUR_GPUS, devices_per_cell=2)) == 2  # auto: 4 GPUs / 2


def test_one_device_slots_are_as_before():
    assert plan_slots(2, None, list(range(8)), FOUR_GPUS) == [Slot(0, (0, 1, 2, 3), 0), Slot(1, (4, 5, 6, 7), 1)]
    assert Slot(0, None, 2).gpus == (2,)


@pytest.mark.parametrize("parallel, gpus, message", [
    (2, [0, 1, 2], "--parallel 2 needs 2 GPUs per cell (4 in all), but this host has 3 usable GPU(s) "
                   "(two cells on one GPU would slow each other down)"),
    (1, [0], "--devices 2 needs 2 GPUs per cell, but this host has 1 usable GPU(s)"),
    (None, [0], "--devices 2 needs 2 GPUs per cell, but this host has 1 usable GPU(s)"),
])
def test_too_few_gpus_for_the_devices_is_a_one_line_usage_error(parallel, gpus, message):
    with pytest.raises(SlotError) as raised:
        plan_slots(parallel, None, list(range(8)), gpus, devices_per_cell=2)
    assert str(raised.value) == message


def test_a_cpu_run_with_devices_keeps_its_slots_cores_for_the_ranks():
    assert plan_slots(2, None, [0, 1, 2, 3], [], devices_per_cell=2) == [Slot(0, (0, 1), None), Slot(1, (2, 3), None)]


def test_a_cluster_task_gives_its_cell_the_gpus_it_was_allocated(monkeypatch):
    monkeypatch.setattr(slots, "_nvml_gpus", lambda: FOUR_GPUS)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert slots.one_cell_at_a_time("gpu", 2)[0].gpus == (1, 3)
    assert slots.one_cell_at_a_time("gpu")[0].gpus == (1,)
    # Fewer than asked: the cell runs on those and its framework's count makes the row device_unavailable.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert slots.one_cell_at_a_time("gpu", 2)[0].gpus == (2,)


def test_a_two_gpu_cell_sees_exactly_its_two_gpus():
    env = cell_environment(spec(device="gpu", devices=2, gpu_index=2, gpu_indices=(2, 3)))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert cell_environment(spec(device="gpu", gpu_index=1))["CUDA_VISIBLE_DEVICES"] == "1"


def test_the_gpus_of_a_spec_round_trip_and_are_left_out_for_one_gpu():
    one = spec(gpu_index=1)
    assert "gpu_indices" not in json.loads(one.to_json())  # an older image's harness still reads it
    two = spec(devices=2, gpu_index=2, gpu_indices=(2, 3))
    assert json.loads(two.to_json())["gpu_indices"] == [2, 3]
    assert CellSpec.from_json(two.to_json()) == two and CellSpec.from_json(one.to_json()) == one
    assert two.gpus == (2, 3) and one.gpus == (1,) and spec().gpus == ()


def test_a_two_gpu_docker_cell_requests_exactly_those_two():
    docker = pytest.importorskip("docker")
    from fwbench.engines.docker import docker_device_request

    assert docker_device_request((2, 3), 2) == docker.types.DeviceRequest(device_ids=["2", "3"],
                                                                          capabilities=[["gpu"]])
    assert docker_device_request(3) == docker.types.DeviceRequest(device_ids=["3"], capabilities=[["gpu"]])
    assert docker_device_request((), 2)["Count"] == 2  # GPUs not listed: as many as the cell's devices


def test_the_row_names_every_gpu_of_its_slot(tmp_path):
    """A real cell process (fault `raise`: no framework needed) on a two-GPU slot: the runner passes both GPUs in
    the spec and the row names them."""
    cell = replace(spec(data_dir=str(tmp_path / "d"), devices=2, threads=1, timeout_s=60), fault="raise")
    matrix.ensure_data([cell])
    [result] = matrix.run_matrix([cell], tmp_path / "out", current_engine(), False,
                                 slots=[Slot(0, None, 2, (2, 3))])
    assert result.spec.gpu_indices == (2, 3) and result.row["gpu_index"] == 2
    assert json.loads(result.row["extra"])["gpu_indices"] == [2, 3]
