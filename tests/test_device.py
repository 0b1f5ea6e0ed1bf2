"""--device and one GPU per cell: a GPU host never runs a cell on the CPU without saying so, and a cell never sees
several GPUs by accident. The GPU itself is a boundary this machine does not have: NVML's answer
(fwbench.engines.device.host_has_gpu, slots' GPU list) and the CUDA build a framework reports are mocked; the
device_unavailable row of a real cell is produced here by a real CPU-only framework asked for a GPU."""

from __future__ import annotations

import json

import pytest

from fwbench.core import cuda, registry
from fwbench.core.schema import STATUSES
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError
from fwbench.engines import cell_environment
from fwbench.engines import device as devices
from fwbench.harness.device_check import DeviceUnavailable, explain
from tests.conftest import run_fwbench

def spec(**fields) -> CellSpec:
    return CellSpec(stack="keras3-jax", task="bert-predict", preset="tiny", compile_mode="xla", data_dir="/data",
                    steps=5, **fields)


@pytest.mark.parametrize("has_gpu, setting, expected", [(True, "auto", "gpu"), (False, "auto", "cpu"),
                                                        (True, "cpu", "cpu"), (True, "gpu", "gpu")])
def test_the_device_is_resolved_once_from_the_host(monkeypatch, has_gpu, setting, expected):
    monkeypatch.setattr(devices, "host_has_gpu", lambda: has_gpu)
    assert devices.resolve(setting) == expected


def test_asking_for_a_gpu_the_host_lacks_or_an_unknown_device_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(devices, "host_has_gpu", lambda: False)
    with pytest.raises(UsageError, match="no NVIDIA GPU"):
        devices.resolve("gpu")
    with pytest.raises(UsageError, match="unknown --device 'tpu'"):
        devices.resolve("tpu")


def test_a_cpu_cell_sees_no_gpu_and_a_gpu_cell_sees_exactly_its_own():
    cpu = cell_environment(spec(device="cpu", gpu_index=None))
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["JAX_PLATFORMS"] == "cpu"
    gpu = cell_environment(spec(device="gpu", gpu_index=2))
    assert gpu["CUDA_VISIBLE_DEVICES"] == "2" and gpu["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert gpu.get("JAX_PLATFORMS") != "cpu"


def test_the_local_engine_builds_the_gpu_environment_on_a_gpu_host(monkeypatch, tmp_path):
    """Before, every host got the CPU locks (keras3-jax: jax[cpu]) and rows said `venv` either way."""
    from fwbench.cli.common import make_engine
    from fwbench.engines.local import StackEnvironment

    monkeypatch.setenv("FWBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(devices, "host_has_gpu", lambda: True)
    engine = make_engine("local", device="auto")
    assert (engine.device, engine.image_variant("keras3-jax")) == ("gpu", "venv-gpu")
    gpu_env, cpu_env = StackEnvironment("keras3-jax", variant="gpu"), StackEnvironment("keras3-jax")
    assert gpu_env.path != cpu_env.path and "-gpu-" in gpu_env.path.name
    wanted = "requirements-gpu" if gpu_env.locked else "requirements-gpu.txt"
    assert gpu_env.requirements.name.startswith(wanted.split(".")[0]) and "cpu" not in gpu_env.requirements.name
    monkeypatch.setattr(devices, "host_has_gpu", lambda: False)
    assert make_engine("local", device="auto").image_variant("keras3-jax") == "venv"


def test_a_docker_cell_requests_exactly_one_gpu():
    docker = pytest.importorskip("docker")
    from fwbench.engines.docker import docker_device_request

    assert docker_device_request(3) == docker.types.DeviceRequest(device_ids=["3"], capabilities=[["gpu"]])
    unlisted = docker_device_request(None)
    assert unlisted["Count"] == 1  # never -1 (every GPU)


@pytest.mark.parametrize("gres, gpus", [("gpu", 1), ("gpu:1", 1), ("gpu:a100:1", 1), ("gpu:2", 2),
                                        ("gpu:h100:4,shard:1", 4), ("mps:100", 0), (None, 0)])
def test_slurm_counts_the_gpus_a_task_asks_for(gres, gpus):
    from fwbench.cluster import slurm

    assert slurm.gres_gpus(gres) == gpus


def test_slurm_refuses_several_gpus_per_cell_before_anything_else(tmp_path):
    done = run_fwbench("slurm", "submit", "--stack", "native-torch", "--out", str(tmp_path / "out"), "--gres",
                       "gpu:a100:2", "--no-probe")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --gres 'gpu:a100:2' gives each cell 2 GPU(s): a cell runs on exactly --devices 1 (--gres gpu:1 or "
        "gpu:TYPE:1)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("driver, version, needs", [("575.57.08", "13.0", "needs driver 580 or newer (the driver "
                                                                             "is too old)"),
                                                    ("580.95.05", "13.0", "needs driver 580 or newer."),
                                                    ("535.104.05", "12.1", "needs driver 525.60.13 or newer.")])
def test_a_device_unavailable_reason_names_the_framework_the_driver_and_the_minimum(driver, version, needs):
    text = explain("torch 2.14.1", "torch.cuda.init(): The NVIDIA driver on your system is too old", version, driver)
    assert text.startswith(f"the cell was to run on a GPU, but torch 2.14.1 (CUDA {version} build) sees none: ")
    assert f"NVIDIA driver {driver}; this CUDA {version} build {needs}" in text
    assert "No NVIDIA driver" in explain("jax 0.10.2", "jax.devices('cuda'): Unknown backend cuda", None, None)


def test_cuda_versions_read_as_their_major():
    assert [cuda.cuda_major(v) for v in ("13.0", "12.1", "cu121", "cu130", "12", None, "")] == [13, 12, 12, 13, 12,
                                                                                               None, None]
    assert cuda.minimum_driver("13.0") == "580" and cuda.minimum_driver(None) is None
    assert cuda.driver_at_least("580.95.05", "580") and not cuda.driver_at_least("575.57.08", "580")


def test_the_failure_is_its_own_status():
    from fwbench.harness.cell import classify_failure

    assert classify_failure(DeviceUnavailable("no GPU")) == "device_unavailable"
    assert "device_unavailable" in STATUSES


@pytest.mark.integration
def test_a_gpu_cell_whose_framework_sees_none_is_a_device_unavailable_row_not_a_cpu_row(tmp_path, shared_data):
    """A real cell process: native-torch's environment has PyPI's torch, which sees no GPU on this machine; told
    the runner chose the GPU, it must not measure on the CPU."""
    from fwbench.engines.local import local_engine
    from fwbench.engines import matrix

    registry.get_stack("native-torch")
    engine = local_engine(device="cpu")  # the CPU environment: its torch is the one a GPU host would fail to use
    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir=str(shared_data), steps=2,
                    threads=1, device_setting="gpu")
    [cell] = matrix.plan(["native-torch"], ["bert-predict"], "tiny", None, 1, base=base)
    engine.prepare("native-torch")
    engine.device = "gpu"  # what --device gpu resolves to on a GPU host (NVML is the boundary)
    [result] = matrix.run_matrix([cell], tmp_path / "out", engine, resume=False)
    row = result.row
    assert row["status"] == "device_unavailable", row.get("error_message")
    assert row["ms_per_step"] is None and row["device_setting"] == "gpu"
    assert row["error_message"].startswith("the cell was to run on a GPU, but torch ")
    assert "torch.cuda.init()" in row["error_message"] and "fwbench doctor" in row["error_message"]
    assert json.loads(row["extra"]).get("traceback")
