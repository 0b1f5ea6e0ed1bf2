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


@pytest.mark.parametrize("gres, cpus, devices, device, says", [
    ("gpu:2", 1, 2, "gpu", None),
    ("gpu:a100:4", 1, 4, "gpu", None),
    ("gpu:1", 1, 1, "gpu", None),
    (None, 1, 1, "gpu", None),  # one GPU cell on a cluster whose tasks see their GPU without --gres, as before
    ("gpu:1", 1, 2, "gpu", "--gres 'gpu:1' gives each cell 1 GPU(s): a cell runs on exactly --devices 2 "
                           "(--gres gpu:2 or gpu:TYPE:2)"),
    ("gpu:4", 1, 2, "gpu", "--gres 'gpu:4' gives each cell 4 GPU(s): a cell runs on exactly --devices 2"),
    (None, 1, 2, "gpu", "--devices 2 on a GPU run needs 2 GPUs per task (--gres gpu:2 or gpu:TYPE:2)"),
    (None, 4, 4, "cpu", None),
    (None, 2, 4, "cpu", "--devices 4 on a CPU run needs --cpus-per-task of at least 4 (a core per rank), got 2"),
])
def test_a_slurm_task_gives_its_cell_exactly_its_devices(gres, cpus, devices, device, says):
    from fwbench.cluster import slurm

    if says is None:
        slurm.check_cell_resources(gres, cpus, devices, device)
        return
    with pytest.raises(slurm.SlurmError) as raised:
        slurm.check_cell_resources(gres, cpus, devices, device)
    assert str(raised.value).startswith(says) and "\n" not in str(raised.value)


def test_slurm_submit_takes_devices_and_refuses_a_gres_that_does_not_match_in_one_line(tmp_path):
    import sys
    from pathlib import Path

    from tests.conftest import run_fwbench

    env = {"PATH": str(Path(sys.executable).parent)}  # no sbatch: a submission that passes every check stops there
    common = ["slurm", "submit", "--stack", "native-torch", "--task", "bert-fit", "--engine", "current", "--out",
              str(tmp_path / "out"), "--data", str(tmp_path / "data")]
    done = run_fwbench(*common, "--devices", "2", "--global-batch", "8", "--gres", "gpu:2", env=env)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: sbatch was not found on PATH: run this on a Slurm login node (or put Slurm's client commands on PATH)"]
    done = run_fwbench(*common, "--devices", "2", "--gres", "gpu:1", env=env)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: --gres 'gpu:1' gives each cell 1 GPU(s): a cell runs on exactly --devices 2 (--gres gpu:2 or "
        "gpu:TYPE:2)"]
    done = run_fwbench(*common, "--devices", "2", "--device", "cpu", env=env)  # --cpus-per-task defaults to 1
    assert done.returncode == 2 and "needs --cpus-per-task of at least 2" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out" / ".slurm").exists()


def k8s_specs(devices: int) -> list[CellSpec]:
    from fwbench.engines import matrix as plan

    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir="/d", steps=5, threads=4,
                    devices=devices)
    return plan.plan(["keras3-jax"], ["bert-fit"], "tiny", None, 1, base=base)


def rendered_container(tmp_path, devices: int, *, gpu: bool, cpu: str = "8") -> dict:
    import yaml

    from fwbench.cluster import k8s

    files = k8s.render(k8s_specs(devices), {"keras3-jax": "r/i@sha256:" + "ab" * 32}, tmp_path, "r", 1,
                       results_claim="c", gpu=gpu, namespace=None, resources=k8s.PodResources(cpu=cpu))
    _configmap, job = yaml.safe_load_all(files[0].read_text())
    return job["spec"]["template"]["spec"]["containers"][0]


def test_a_k8s_pod_of_a_two_device_cell_requests_two_gpus(tmp_path):
    assert rendered_container(tmp_path / "a", 2, gpu=True)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert rendered_container(tmp_path / "b", 1, gpu=True)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in rendered_container(tmp_path / "c", 2, gpu=False)["resources"]["limits"]


@pytest.mark.parametrize("cpu, ok", [("2", True), ("2000m", True), ("1500m", False), ("1", False)])
def test_a_k8s_pod_of_a_two_device_cpu_cell_needs_two_cpus(tmp_path, cpu, ok):
    if ok:
        assert rendered_container(tmp_path, 2, gpu=False, cpu=cpu)["resources"]["requests"]["cpu"] == cpu
        return
    with pytest.raises(ValueError, match=f"--devices 2 on a CPU run needs --cpu of at least 2 .*got {cpu}"):
        rendered_container(tmp_path, 2, gpu=False, cpu=cpu)


def test_k8s_render_takes_devices(tmp_path):
    import yaml

    from fwbench.release.record import Release, ReleasedImage
    from tests.conftest import run_fwbench

    release = tmp_path / "release.json"
    images = [ReleasedImage(stack="keras3-jax", variant=variant, pin_set="current",
                            repository="ghcr.io/o/fwbench/keras3-jax", tag=f"current-{variant}",
                            digest="sha256:" + "ab" * 32, image_id="sha256:" + "0" * 64, lock_sha256="", sbom_sha256="",
                            base_image="", base_image_digest=None, git_revision="") for variant in ("gpu", "cpu")]
    release.write_text(Release("ghcr.io/o", "0.1.0", "rev", "now", images).to_json())
    common = ["k8s", "render", "--stack", "keras3-jax", "--task", "bert-fit", "--release", str(release)]
    done = run_fwbench(*common, "--devices", "2", "--global-batch", "8", "-o", str(tmp_path / "k8s"))
    assert done.returncode == 0, done.stderr
    configmap, job = yaml.safe_load_all((tmp_path / "k8s" / "fwbench-keras3-jax.yaml").read_text())
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {cell["devices"] for cell in json.loads(configmap["data"]["cells.json"])} == {2}
    done = run_fwbench(*common, "--devices", "2", "--variant", "cpu", "--cpu", "1", "-o", str(tmp_path / "x"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: --devices 2 on a CPU run needs --cpu of at least 2 (a core per rank), got 1"]
