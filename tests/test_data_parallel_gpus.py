"""A data-parallel cell on several GPUs: each torch rank measures its own GPU, and a row over several GPUs says what
its energy, contention and peak memory cover.

There is no GPU on this machine: CUDA and NVML are the boundaries mocked here, nothing else. torch is a stand-in
module (FakeCudaTorch) that resolves every device argument as CUDA does ("cuda" and None = the current device) and
records which GPU each call reached; pynvml is tests/fake_nvml.py. Everything between them is the real code.
"""

from __future__ import annotations

import sys
import types

import pytest

from fwbench.core.spec import CellSpec
from fwbench.harness import cell, gpu_identity
from fwbench.harness.backends import TorchBackend
from tests.fake_nvml import FakeNvml, gpu


class FakeCuda:
    """torch.cuda on a host with `count` GPUs: which GPU each call reached, by CUDA's rule for its device argument."""

    def __init__(self, count: int):
        self.count, self.current, self.initialized = count, 0, False
        self.reached: list[tuple[str, int]] = []  # (call, GPU ordinal)

    def _ordinal(self, device) -> int:
        if device is None or device == "cuda":
            return self.current
        if isinstance(device, int):
            return device
        return int(str(device).split(":", 1)[1])

    def _reach(self, call: str, device) -> int:
        ordinal = self._ordinal(device)
        assert 0 <= ordinal < self.count, f"{call}: no GPU {ordinal}"
        self.initialized = True
        self.reached.append((call, ordinal))
        return ordinal

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return self.count

    def set_device(self, device):
        self.current = self._reach("set_device", device)

    def current_device(self):
        return self.current

    def synchronize(self, device=None):
        self._reach("synchronize", device)

    def reset_peak_memory_stats(self, device=None):
        self._reach("reset_peak_memory_stats", device)

    def max_memory_allocated(self, device=None):
        return 1000 + self._reach("max_memory_allocated", device)  # GPU k's peak is 1000 + k

    def get_device_name(self, device=None):
        return f"GPU {self._reach('get_device_name', device)}"

    def get_device_properties(self, device):
        ordinal = self._reach("get_device_properties", device)
        return types.SimpleNamespace(uuid=f"{ordinal:08d}-1111-2222-3333-444444444444")


def fake_torch(monkeypatch, gpus: int) -> FakeCuda:
    cuda = FakeCuda(gpus)
    torch = types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.4"), set_num_threads=lambda n: None,
                                  get_num_threads=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return cuda


def as_rank(monkeypatch, rank: int | None, world: int = 2) -> None:
    if rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))


# --- task: a torch rank's device is its own GPU

def test_a_torch_rank_syncs_measures_and_names_its_own_gpu_not_gpu_0(monkeypatch):
    cuda = fake_torch(monkeypatch, gpus=2)
    as_rank(monkeypatch, 1)
    backend = TorchBackend()
    assert backend.device == "cuda:1" and cuda.current == 1  # current before anything else reads it
    assert cuda.reached[0] == ("set_device", 1)
    backend.configure(1, "default")
    backend.sync()
    peak, kind = backend.peak_memory()
    info = backend.device_info()
    assert (peak, kind, info["device_name"]) == (1001, "cuda_allocator_peak", "GPU 1")
    # Its GPU's identity (the UUID NVML finds it by, for energy and contention) is GPU 1's too.
    assert gpu_identity.framework_gpu_uuid(backend.gpu_positions()[0]) == "GPU-00000001-1111-2222-3333-444444444444"
    assert {ordinal for _, ordinal in cuda.reached} == {1}


def test_one_device_and_a_rank_without_its_gpu_keep_the_current_device(monkeypatch):
    cuda = fake_torch(monkeypatch, gpus=1)
    as_rank(monkeypatch, None)
    assert TorchBackend().device == "cuda" and cuda.reached == []
    as_rank(monkeypatch, 1)  # rank 1 on a host where torch sees one GPU: no set_device to a GPU that is not there
    backend = TorchBackend()
    assert backend.device == "cuda" and cuda.reached == [] and backend.gpu_positions() == (0,)


def test_a_rank_finds_its_own_gpu_in_nvml_and_in_the_runners_numbering(monkeypatch):
    gpus = [gpu(0), gpu(1), gpu(2), gpu(3)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    # The cell was given GPUs 2 and 3; rank 1 runs on the framework's device 1, which is NVML's GPU 3.
    found = gpu_identity.resolve_cell_gpu(visible="2,3", position=1, framework_uuid=gpus[3].uuid)
    assert found.uuid == gpus[3].uuid and "confirmed" in found.found_by
    assert gpu_identity.resolve_cell_gpu(visible=f"{gpus[2].uuid},{gpus[3].uuid}", position=1).index == 3
    assert gpu_identity.resolve_cell_gpu(visible=None, position=1).index == 1  # unset: NVML's GPU 1
    assert gpu_identity.resolve_cell_gpu(visible="2", position=1) is None  # no device 1: unknown, not a guess
    assert gpu_identity.unresolved_gpu("2,3", position=1).index == 3
    spec = CellSpec("native-torch", "bert-fit", "tiny", "none", "/d", 2, devices=2, gpu_index=2, gpu_indices=(2, 3))
    assert cell._runner_gpu_index(spec, 1, found) == 3 and cell._runner_gpu_index(spec, 0, found) == 2


# --- the device count of a data-parallel cell: one backend hook, after configure()

class RecordingBackend:
    """A backend that records what build_cell asks of it, and has one GPU (the framework is not imported)."""

    label, on_gpu = "torch", True

    def __init__(self):
        self.calls: list[str] = []

    def use_compile_cache(self, path, compile_mode):
        self.calls.append("use_compile_cache")

    def configure(self, threads, tf32):
        self.calls.append("configure")

    def tf32_available(self):
        return True

    def data_parallel_devices(self, devices):
        self.calls.append(f"data_parallel_devices({devices})")
        return 1


def test_build_cell_asks_the_backend_for_its_devices_once_after_configure(tmp_path, monkeypatch):
    from fwbench.core import data
    from fwbench.harness import backends
    from fwbench.harness.device_check import DeviceUnavailable

    data.generate(tmp_path / "data", "tiny", 0, ["bert-fit"])
    backend = RecordingBackend()
    asked = []
    monkeypatch.setattr(backends, "backend_for", lambda stack, threads, devices: asked.append(devices) or backend)
    spec = CellSpec("native-torch", "bert-fit", "tiny", "none", str(tmp_path / "data"), 2, devices=2)
    with pytest.raises(DeviceUnavailable, match=r"^--devices 2: torch sees 1 GPU\(s\)$"):
        cell.build_cell(spec, cell.PhaseTimer())
    assert asked == [2] and backend.calls == ["use_compile_cache", "configure", "data_parallel_devices(2)"]


def test_each_backend_counts_its_data_parallel_devices(monkeypatch):
    from fwbench.harness.backends import JaxBackend, TensorFlowBackend

    fake_torch(monkeypatch, gpus=1)
    as_rank(monkeypatch, None)
    assert TorchBackend().data_parallel_devices(2) == 1  # one GPU per rank
    assert TorchBackend("cpu").data_parallel_devices(2) == 2  # CPU ranks share the cell's cores

    jax = object.__new__(JaxBackend)
    jax.devices, jax.on_gpu, jax.cell_devices = ["gpu:0", "gpu:1", "gpu:2"], True, 1
    assert jax.data_parallel_devices(2) == 3 and jax.cell_devices == 2

    made = {}
    config = types.SimpleNamespace(
        threading=types.SimpleNamespace(set_inter_op_parallelism_threads=lambda n: made.update(inter_op=n)),
        list_physical_devices=lambda kind: [f"physical {kind}"],
        set_logical_device_configuration=lambda device, logical: made.update(logical=(device, len(logical))),
        LogicalDeviceConfiguration=lambda: "logical")
    tf = object.__new__(TensorFlowBackend)
    tf.tf, tf.gpus, tf.on_gpu, tf.cell_devices = types.SimpleNamespace(config=config), [], False, 1
    assert tf.data_parallel_devices(2) == 2 and tf.cell_devices == 2
    assert made == {"inter_op": 2, "logical": ("physical CPU", 2)}  # N logical CPU devices, N inter-op threads


def test_jaxs_host_device_count_is_set_before_jax_starts(monkeypatch):
    from fwbench.harness import backends

    seen = []

    class StartsJax:
        def __init__(self):
            seen.append(backends.os.environ.get("XLA_FLAGS"))

    monkeypatch.setitem(backends.BACKENDS, "jax", StartsJax)
    monkeypatch.setattr(backends, "_limit_cpus", lambda threads: None)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    backends.backend_for("keras3-jax", 1, 2)
    monkeypatch.delenv("XLA_FLAGS")
    backends.backend_for("keras3-jax", 1, 1)
    assert seen == ["--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=2", None]


# --- energy, contention and peak memory of a row over several GPUs

def rank_fields(rank: int, **columns) -> dict:
    """What a GPU rank's measure() returns, as far as merging goes."""
    return {"ms_per_step": 10.0, "first_step_s": 1.0, "setup_s": 1.0, "busy": False, "cpu_set": str(rank),
            "gpu_uuid": gpu(rank).uuid, "gpu_index": rank, "peak_mem_bytes": 1000 + rank, "extra": {}, **columns}


def test_torch_ranks_energy_is_summed_over_their_gpus_with_consistent_power():
    from fwbench.harness import ranks

    merged = ranks.merge([
        rank_fields(0, energy_status="ok", energy_j=600.0, joules_per_step=60.0, mean_power_w=300.0,
                    sm_clock_mhz=1410, gpu_temp_c=61, throttle_reasons="sw_power_cap", gpu_other_processes=0,
                    gpu_other_mem_bytes=0),
        rank_fields(1, energy_status="ok", energy_j=400.0, joules_per_step=40.0, mean_power_w=200.0,
                    sm_clock_mhz=1200, gpu_temp_c=70, throttle_reasons="hw_slowdown", gpu_other_processes=1,
                    gpu_other_mem_bytes=2**30)], global_batch=8)
    assert (merged["energy_status"], merged["energy_j"], merged["joules_per_step"], merged["mean_power_w"]) == \
        ("ok", 1000.0, 100.0, 500.0)
    # The clocks are the worst of the GPUs': the lowest SM clock, the hottest, every throttle reason.
    assert (merged["sm_clock_mhz"], merged["gpu_temp_c"], merged["throttle_reasons"]) == \
        (1200, 70, "sw_power_cap,hw_slowdown")
    assert [g["gpu_uuid"] for g in merged["extra"]["energy_gpus"]] == [gpu(0).uuid, gpu(1).uuid]
    assert [g["energy_j"] for g in merged["extra"]["energy_gpus"]] == [600.0, 400.0]
    # Another process on rank 1's GPU is the cell's competition; the row is rank 0's GPU by name.
    assert (merged["gpu_other_processes"], merged["gpu_other_mem_bytes"]) == (1, 2**30)
    assert (merged["gpu_uuid"], merged["gpu_index"]) == (gpu(0).uuid, 0)
    assert merged["peak_mem_bytes"] == 1001 and merged["extra"]["rank_peak_mem_bytes"] == [1000, 1001]


def test_a_rank_without_an_energy_reading_leaves_the_cell_without_energy():
    from fwbench.harness import ranks

    merged = ranks.merge([rank_fields(0, energy_status="ok", energy_j=600.0, joules_per_step=60.0,
                                      mean_power_w=300.0, sm_clock_mhz=1410),
                          rank_fields(1, energy_status="nvml_unavailable")], global_batch=8)
    assert merged["energy_status"] == "nvml_unavailable"  # never rank 0's 600 J presented as the cell's
    assert all(merged.get(k) is None for k in ("energy_j", "joules_per_step", "joules_per_token", "mean_power_w"))
    assert gpu(1).uuid in merged["extra"]["energy_reason"] and "1 of the cell's 2 GPUs" in merged["extra"]["energy_reason"]
    cpu = ranks.merge([{k: v for k, v in rank_fields(r).items() if k != "gpu_uuid"} for r in (0, 1)], global_batch=8)
    assert "energy_status" not in cpu and "energy_gpus" not in cpu["extra"]  # CPU ranks: no energy columns


def _window(monkeypatch, fake: FakeNvml, *cells):
    from fwbench.harness import energy

    monkeypatch.setitem(sys.modules, "pynvml", fake)
    clock = iter(range(10, 100))  # one second between NVML reads: every window is long enough
    monkeypatch.setattr(energy.time, "perf_counter", lambda: float(next(clock)))
    probe = energy.EnergyProbe(True, *cells)
    probe.start()
    probe.stop()
    return probe


def test_one_process_on_two_gpus_has_both_gpus_energy_or_none(monkeypatch):
    gpus = [gpu(0, energy_mj=iter([0, 600_000])), gpu(1, energy_mj=iter([0, 400_000])), gpu(2, energy_mj=iter([0, 9]))]
    fake = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cells = [gpu_identity.resolve_cell_gpu(visible="0,1", position=p) for p in (0, 1)]
    fake.inits = fake.shutdowns = 0
    probe = _window(monkeypatch, fake, *cells)
    cols = probe.result(timed_steps=10, tokens_per_step=None)
    assert cols["energy_status"] == "ok" and cols["energy_j"] == pytest.approx(1000.0)
    assert cols["joules_per_step"] == pytest.approx(100.0)
    assert cols["mean_power_w"] == pytest.approx(600_000 / 1000 / 2 + 400_000 / 1000 / 2)  # 2 s windows
    assert {handle for handle in fake.energy_handles} == {("gpu", 0), ("gpu", 1)}  # never GPU 2
    assert (fake.inits, fake.shutdowns) == (1, 1)  # one NVML session for both GPUs
    assert [g["gpu_uuid"] for g in probe.extra(10, None)["energy_gpus"]] == [gpus[0].uuid, gpus[1].uuid]

    no_counter = FakeNvml([gpu(0, energy_mj=iter([0, 600_000])), gpu(1)])  # GPU 1 has no energy counter
    monkeypatch.setitem(sys.modules, "pynvml", no_counter)
    cells = [gpu_identity.resolve_cell_gpu(visible="0,1", position=p) for p in (0, 1)]
    probe = _window(monkeypatch, no_counter, *cells)
    cols = probe.result(10, None)
    assert cols["energy_status"] == "unsupported" and cols.get("energy_j") is None
    assert "unsupported" in probe.extra(10, None)["energy_reason"]
    fresh = FakeNvml([gpu(0, energy_mj=iter([0, 600_000])), gpu(1, energy_mj=iter([0, 1]))])
    unknown = _window(monkeypatch, fresh, cells[0], None)  # NVML could not say which GPU the second is
    assert unknown.result(10, None) == {"energy_status": "nvml_unavailable", "sm_clock_mhz": 1410, "gpu_temp_c": 61,
                                        "throttle_reasons": "sw_power_cap"}


def test_gpu_busy_is_the_mean_of_the_utilization_samples_inside_the_timed_window(monkeypatch):
    """NVML (the boundary: FakeNvml) keeps utilization samples stamped by the CPU's wall clock; the row's gpu_busy
    averages those inside the timed window (100 s to 103 s here), each GPU's, and says why there is none."""
    from fwbench.harness import energy

    def second(s: float) -> int:
        return int(s * 1e6)

    samples = [(second(99.5), 5), (second(100.5), 40), (second(101.5), 60), (second(102.5), 80), (second(103.5), 5)]
    gpus = [gpu(0, energy_mj=iter([0, 1]), utilization=samples),
            gpu(1, energy_mj=iter([0, 1]), utilization=[(second(101.0), 100)])]
    fake = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    def windowed(*cells, begin=100.0, end=103.0):
        reads = iter([begin])  # the window's start, then its end for any later read
        monkeypatch.setattr(energy.time, "time", lambda: next(reads, end))
        return _window(monkeypatch, fake, *cells)

    one = gpu_identity.resolve_cell_gpu(visible="0", position=0)
    assert windowed(one).extra(10, None)["gpu_busy"] == {"status": "ok", "mean_pct": 60.0, "samples": 3,
                                                         "covered_s": 2.0}
    both = [gpu_identity.resolve_cell_gpu(visible="0,1", position=p) for p in (0, 1)]
    busy = windowed(*both).extra(10, None)["gpu_busy"]
    assert (busy["status"], busy["mean_pct"], busy["samples"]) == ("ok", 80.0, 4)
    assert [g["mean_pct"] for g in busy["per_gpu"]] == [60.0, 100.0]
    assert windowed(one, begin=100.0, end=100.5).extra(10, None)["gpu_busy"] == {"status": "window_too_short"}
    assert windowed(one, begin=104.0, end=106.0).extra(10, None)["gpu_busy"] == {"status": "no_samples"}
    fake.gpus[1].utilization = None  # this GPU keeps no samples
    assert windowed(*both).extra(10, None)["gpu_busy"]["status"] == "unsupported"
    cpu = energy.EnergyProbe(False, None)
    cpu.start()
    cpu.stop()
    assert "gpu_busy" not in cpu.extra(10, None)


def test_torch_ranks_gpu_busy_is_each_ranks_own_gpus():
    from fwbench.harness import ranks

    merged = ranks.merge([rank_fields(0, extra={"gpu_busy": {"status": "ok", "mean_pct": 50.0, "samples": 3}}),
                          rank_fields(1, extra={"gpu_busy": {"status": "ok", "mean_pct": 70.0, "samples": 2}})],
                         global_batch=8)
    assert (merged["extra"]["gpu_busy"]["mean_pct"], merged["extra"]["gpu_busy"]["samples"]) == (60.0, 5)
    short = ranks.merge([rank_fields(0, extra={"gpu_busy": {"status": "ok", "mean_pct": 50.0, "samples": 3}}),
                         rank_fields(1, extra={"gpu_busy": {"status": "no_samples"}})], global_batch=8)
    assert short["extra"]["gpu_busy"]["status"] == "no_samples" and "mean_pct" not in short["extra"]["gpu_busy"]


def test_a_competitor_on_any_of_the_cells_gpus_makes_it_busy(monkeypatch):
    from fwbench.harness import contention

    gpus = [gpu(0, processes=[(11, 2**30)]), gpu(1, processes=[(21, 2**30), (22, 3 * 2**30)]), gpu(2)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    mine = [gpu_identity.resolve_cell_gpu(visible="0,1", position=p) for p in (0, 1)]
    probe = contention.ContentionProbe(threads=1, on_gpu=True, gpus=mine)
    monkeypatch.setattr(contention, "other_cells", lambda: [])
    probe.start()
    probe.stop()
    row = probe.result()
    # Each GPU's largest user is taken to be the cell itself (no own pid in a container's NVML view): 21 on GPU 1.
    assert (row["gpu_other_processes"], row["gpu_other_mem_bytes"]) == (1, 2**30) and row["busy"]
    # Another fwbench cell told to use GPU 1 (the cell's second) competes; one on GPU 2 does not.
    monkeypatch.setattr(contention, "process_cpus", lambda pid: {99})
    monkeypatch.setattr(contention, "process_gpus", lambda pid: {1: ["1"], 2: ["2"], 3: [gpus[1].uuid]}[pid])
    assert contention.competing_cells([1, 2, 3], {0}, *mine) == [1, 3]


def test_one_process_reports_the_fullest_of_its_devices(monkeypatch):
    from fwbench.harness.backends import JaxBackend, TensorFlowBackend

    jax = object.__new__(JaxBackend)
    devices = [types.SimpleNamespace(memory_stats=lambda peak=peak: {"peak_bytes_in_use": peak}) for peak in (5, 9, 99)]
    jax.devices, jax.on_gpu, jax.cell_devices = devices, True, 2
    assert jax.peak_memory() == (9, "jax_device_peak_bytes_in_use") and jax.gpu_positions() == (0, 1)

    peaks = {"GPU:0": 7, "GPU:1": 3, "GPU:2": 99}
    tf = object.__new__(TensorFlowBackend)
    experimental = types.SimpleNamespace(get_memory_info=lambda name: {"peak": peaks[name]})
    tf.tf = types.SimpleNamespace(config=types.SimpleNamespace(experimental=experimental))
    tf.on_gpu, tf.cell_devices = True, 2
    assert tf.peak_memory() == (7, "tf_gpu_peak") and tf.gpu_positions() == (0, 1)


def test_a_cell_driving_two_gpus_watches_both(monkeypatch, tmp_path):
    """time_cell with a stand-in backend on two GPUs (CUDA) and NVML: both probes get both GPUs."""
    from fwbench.core import registry
    from fwbench.workloads import CellContext, StepCell

    class TwoGpus:
        on_gpu, label = True, "JAX"

        def gpu_positions(self):
            return (0, 1)

        def sync(self, output):
            pass

    class Step(StepCell):
        kinds, timed = ("fit",), "nothing"

        def step(self):
            return None

    gpus = [gpu(0), gpu(1), gpu(2)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    monkeypatch.setitem(sys.modules, "torch", None)  # no framework UUID to cross-check
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    spec = CellSpec("keras3-jax", "bert-fit", "tiny", "xla", str(tmp_path), steps=1, warmup=0, devices=2,
                    gpu_index=1, gpu_indices=(1, 2))
    ctx = CellContext(spec=spec, workload=registry.workload("bert-fit", "tiny"), arrays={}, backend=TwoGpus())
    built = cell.Built(registry.get_stack("keras3-jax"), ctx, Step(), "sha", 0, None, 0.0)
    timed = cell.time_cell(built)
    assert [g.uuid for g in timed.energy.gpus] == [gpus[1].uuid, gpus[2].uuid]
    assert [g.uuid for g in timed.contention.gpus] == [gpus[1].uuid, gpus[2].uuid]
    assert (timed.gpu_index, timed.cell_gpu.uuid) == (1, gpus[1].uuid)  # the row's GPU is the first
