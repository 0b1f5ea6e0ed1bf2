"""What a data-parallel row says its devices talked over: the collectives' version (comm_backend_version) and, on GPUs,
each pair's link in `nvidia-smi topo -m`'s words (interconnect).

There is no GPU here: NVML (tests/fake_nvml.py, given a topology below) and torch.cuda's NCCL version are the
boundaries stood in for; the code between them is the real one.
"""

from __future__ import annotations

import sys
import types

import pytest

from fwbench.core.spec import CellSpec
from fwbench.harness import cell, interconnect
from fwbench.harness.backends import TorchBackend
from fwbench.harness.gpu_identity import CellGpu
from tests.fake_nvml import FakeGpu, FakeNvml


class TopologyNvml(FakeNvml):
    """NVML with peer-to-peer and PCIe topology answers: `nvlink` pairs talk over NVLink with `links` active links
    per GPU; every other pair shares the PCIe ancestor `level`."""

    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, count: int, *, nvlink: set[frozenset[int]] = frozenset(), links: int = 0, level: int = 50,
                 broken: bool = False):
        super().__init__([FakeGpu(f"GPU-{i:04d}", "NVIDIA H100 80GB HBM3") for i in range(count)])
        self.nvlink, self.links, self.level, self.broken = nvlink, links, level, broken

    def nvmlDeviceGetP2PStatus(self, first, second, index):
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        if self.broken:
            raise self.NVMLError("NVML_ERROR_UNKNOWN")
        pair = frozenset((first[1], second[1]))
        return self.NVML_P2P_STATUS_OK if pair in self.nvlink else self.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if link >= self.links:
            raise self.NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetTopologyCommonAncestor(self, first, second):
        if self.broken:
            raise self.NVMLError("NVML_ERROR_UNKNOWN")
        return self.level


def gpus(count: int) -> list[CellGpu]:
    return [CellGpu(i, f"GPU-{i:04d}", "NVIDIA H100 80GB HBM3") for i in range(count)]


@pytest.fixture
def nvml(monkeypatch):
    def install(fake):
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake
    return install


def test_an_nvswitch_host_reads_as_nvidia_smi_prints_it(nvml):
    nvml(TopologyNvml(3, nvlink={frozenset(p) for p in ((0, 1), (0, 2), (1, 2))}, links=18))
    assert interconnect.describe(gpus(3)) == "0-1 NV18; 0-2 NV18; 1-2 NV18"


def test_gpus_without_nvlink_name_their_pcie_path(nvml):
    nvml(TopologyNvml(2, level=40))
    assert interconnect.describe(gpus(2)) == "0-1 NODE"
    nvml(TopologyNvml(2, level=10))
    assert interconnect.describe(gpus(2)) == "0-1 PIX"


def test_no_answer_rather_than_a_partial_or_guessed_one(nvml):
    nvml(TopologyNvml(2, broken=True))
    assert interconnect.describe(gpus(2)) is None
    assert interconnect.describe(gpus(1)) is None  # one GPU has no interconnect
    nvml(TopologyNvml(2, level=40))
    assert interconnect.describe([*gpus(1), CellGpu(5, "GPU-absent", None)]) is None  # NVML does not know a GPU


def test_without_nvml_there_is_no_interconnect(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: a CPU host
    assert interconnect.describe(gpus(2)) is None


def test_nvidia_smi_topology_is_kept_as_printed_or_left_out(monkeypatch, tmp_path):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n[ \"$1 $2\" = 'topo -m' ] && printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\n' || exit 3\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert interconnect.nvidia_smi_topology() == "GPU0\tGPU1\nGPU0\t X \tNV18"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert interconnect.nvidia_smi_topology() is None


def fake_torch(nccl_version) -> types.SimpleNamespace:
    return types.SimpleNamespace(__version__="2.14.1", cuda=types.SimpleNamespace(
        nccl=types.SimpleNamespace(version=lambda: nccl_version)))


def test_torch_names_the_nccl_it_loaded_and_gloo_as_part_of_torch():
    backend = TorchBackend.__new__(TorchBackend)  # no torch here: only the stand-in's version fields are read
    backend.torch = fake_torch((2, 21, 5))
    assert backend.comm_version("nccl") == "nccl 2.21.5"
    assert backend.comm_version("gloo") == "gloo (built into torch 2.14.1)"
    assert backend.comm_version("mpi") is None


class CpuBackend:
    on_gpu = False

    def comm_version(self, comm_backend):
        return f"{comm_backend} (lib 1.0)"


def test_a_data_parallel_cpu_row_has_the_version_and_no_interconnect():
    spec = CellSpec("native-torch", "bert-fit", "tiny", "none", "/data", 2, devices=2)
    extra: dict = {}
    assert cell._interconnect(spec, CpuBackend(), "gloo", extra) == {"comm_backend_version": "gloo (lib 1.0)"}
    assert extra == {}


def test_a_data_parallel_gpu_row_links_the_cells_gpus_by_their_place_in_it(nvml, monkeypatch):
    # The cell was given host GPUs 2 and 3: in the cell they are 0 and 1, and those two are linked over NVLink.
    nvml(TopologyNvml(4, nvlink={frozenset((2, 3))}, links=18, level=50))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(interconnect, "nvidia_smi_topology", lambda: "GPU0\tGPU1 ...")
    backend = types.SimpleNamespace(on_gpu=True, comm_version=lambda comm: f"{comm} 2.21.5")
    spec = CellSpec("native-torch", "bert-fit", "tiny", "none", "/data", 2, devices=2)
    extra: dict = {}
    assert cell._interconnect(spec, backend, "nccl", extra) == {"comm_backend_version": "nccl 2.21.5",
                                                               "interconnect": "0-1 NV18"}
    assert extra == {"nvidia_smi_topo": "GPU0\tGPU1 ..."}
