"""A stand-in for the pynvml module: the NVIDIA driver is a boundary this machine cannot run (no GPU, no NVML).

FakeNvml(gpus) answers the NVML calls fwbench makes for the GPUs it is given, in one NVML view (a host's, or a
container's); tests put it in sys.modules["pynvml"]. It counts nvmlInit/nvmlShutdown calls so tests can check
how many sessions a window opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator


class NVMLError(Exception):
    pass


@dataclass
class FakeSlice:
    uuid: str
    name: str
    gpu_instance: int
    compute_instance: int


@dataclass
class FakeGpu:
    uuid: str
    name: str
    slices: list[FakeSlice] = field(default_factory=list)  # non-empty: MIG mode is on
    energy_mj: Iterator[int] | None = None  # None: no energy counter (NVML_ERROR_NOT_SUPPORTED)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used memory bytes)
    # GPU utilization samples (CPU wall clock in microseconds, percent); None: NVML_ERROR_NOT_SUPPORTED
    utilization: list[tuple[int, int]] | None = None


class _Sample:
    def __init__(self, stamp: int, percent: int):
        self.timeStamp = stamp
        self.sampleValue = type("Value", (), {"uiVal": percent})()


class _Process:
    def __init__(self, pid: int, memory: int):
        self.pid, self.usedGpuMemory = pid, memory


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, gpus: list[FakeGpu], throttle: int = 0x4 | 0x1):
        self.gpus = gpus
        self.throttle = throttle
        self.inits = self.shutdowns = 0
        self.energy_handles: list[tuple] = []  # the handle each energy read asked

    # sessions
    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    # handles: ("gpu", index) and ("mig", index, position)
    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return ("gpu", index)
            for position, mig in enumerate(gpu.slices):
                if mig.uuid == uuid:
                    return ("mig", index, position)
        raise NVMLError("NVML_ERROR_NOT_FOUND")

    def _gpu(self, handle):
        return self.gpus[handle[1]]

    def _thing(self, handle):
        return self._gpu(handle) if handle[0] == "gpu" else self._gpu(handle).slices[handle[2]]

    def nvmlDeviceGetUUID(self, handle):
        return self._thing(handle).uuid

    def nvmlDeviceGetName(self, handle):
        return self._thing(handle).name.encode()  # older pynvml: bytes

    def nvmlDeviceGetIndex(self, handle):
        if handle[0] != "gpu":
            raise NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return handle[1]

    # MIG
    def nvmlDeviceGetMigMode(self, handle):
        mode = 1 if self._gpu(handle).slices else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, position):
        if position >= len(self._gpu(handle).slices):
            raise NVMLError("NVML_ERROR_NOT_FOUND")
        return ("mig", handle[1], position)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        return ("gpu", handle[1])

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self._thing(handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self._thing(handle).compute_instance

    # readings
    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        gpu = self._gpu(handle)
        if handle[0] != "gpu" or gpu.energy_mj is None:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        self.energy_handles.append(handle)
        return next(gpu.energy_mj)

    def nvmlDeviceGetSamples(self, handle, kind, since_us):
        """(value type, samples stamped after since_us), as pynvml gives them; NVML_ERROR_NOT_FOUND when none."""
        gpu = self._gpu(handle)
        if handle[0] != "gpu" or gpu.utilization is None or kind != self.NVML_GPU_UTILIZATION_SAMPLES:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        samples = [_Sample(stamp, value) for stamp, value in gpu.utilization if stamp > since_us]
        if not samples:
            raise NVMLError("NVML_ERROR_NOT_FOUND")
        return 1, samples

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1410

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.throttle

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [_Process(pid, memory) for pid, memory in self._gpu(handle).processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


def gpu(number: int, name: str = "NVIDIA H100 80GB HBM3", **kwargs) -> FakeGpu:
    """GPU `number` with the UUID GPU-0000000<number>-...: a test names GPUs by number."""
    return FakeGpu(f"GPU-{number:08d}-1111-2222-3333-444444444444", name, **kwargs)
