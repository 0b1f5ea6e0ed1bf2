"""GPU energy and clocks over the timed window (NVML): the energy columns of a row.

One NVML session is open from the window's start to its end (NVML's start-up is not a reading), and every read
asks the cell's own GPU by UUID (fwbench.harness.gpu_identity). A GPU cell's row always says what became of its
energy reading (energy_status), never 0 in place of a reading:
  ok                 the total-energy counter read at both ends of the window;
  unsupported        the GPU has no energy counter (pre-Volta, some virtual GPUs);
  window_too_short   the window was shorter than MIN_ENERGY_WINDOW_S: NVML updates the counter only every
                     ~20-100 ms, so a shorter delta is mostly update granularity;
  mig                the cell ran on a MIG slice: the counter is the whole GPU's, every slice's work together;
  nvml_unavailable   NVML could not start in the cell's environment, or did not find the cell's GPU.
A CPU cell gets no energy columns at all. A cell on several GPUs (one process driving them, or one rank per GPU,
whose readings harness.ranks merges) has their sum, or none with the status of a GPU that had none (combine).

Over the same window the probe also reads NVML's GPU utilization samples (`extra.gpu_busy`): the share of each
sampling period in which a kernel ran on the GPU, averaged over the samples inside the window. Near 100 the GPU
never waited for the host; well below, it sat idle between kernels (a step bound by the host's launches, such as an
eager token-by-token decode). It says nothing of how fully a kernel used the GPU (that is `pct_of_peak`).
"""

from __future__ import annotations

import time
from typing import Any

from fwbench.harness.gpu_identity import CellGpu, nvml_handle
from fwbench.harness.nvml import NvmlSession

ENERGY_STATUSES = ("ok", "unsupported", "window_too_short", "mig", "nvml_unavailable")
# Shortest timed window whose energy is recorded (the counter's update period is ~20-100 ms: >= 10 updates).
MIN_ENERGY_WINDOW_S = 1.0

# NVML clocks-event (throttle) reason bits -> names; GPU idle (0x1) is not a throttle and is left out.
THROTTLE_REASONS = {
    0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _energy_mj(handle: Any):
    """(counter in mJ, perf_counter at the read): the window's seconds span the reads."""
    def query(pynvml) -> tuple[int, float]:
        return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)), time.perf_counter()
    return query


def _clocks(handle: Any):
    def query(pynvml) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        for column, read in (
                ("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                ("gpu_temp_c", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
                ("throttle_reasons", lambda: throttle_names(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)))):
            try:  # one unreadable sensor must not hide the others
                facts[column] = read()
            except Exception:
                facts[column] = None
        return facts
    return query


def _busy_samples(handle: Any, since_us: int):
    """NVML's GPU utilization samples since `since_us` (CPU wall clock, microseconds): [(timestamp us, percent)]."""
    def query(pynvml) -> list[tuple[int, float]]:
        try:
            _kind, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
        except pynvml.NVMLError as exc:
            if "NOT_FOUND" in str(exc) or "Not Found" in str(exc):  # no sample since then
                return []
            raise
        return [(int(sample.timeStamp), float(sample.sampleValue.uiVal)) for sample in samples]
    return query


def busy_reading(samples: list[tuple[int, float]] | None, began_us: int, ended_us: int, *,
                 min_window_s: float = MIN_ENERGY_WINDOW_S) -> dict[str, Any]:
    """One GPU's `gpu_busy` over a window from its utilization samples (None: NVML could not give them): the mean
    percentage of the samples stamped inside the window, how many, and the seconds between the first and last (the
    driver keeps a bounded buffer: a long window's mean covers its latest part)."""
    if samples is None:
        return {"status": "unsupported"}
    if (ended_us - began_us) / 1e6 < min_window_s:
        return {"status": "window_too_short"}
    inside = sorted((stamp, value) for stamp, value in samples if began_us <= stamp <= ended_us)
    if not inside:
        return {"status": "no_samples"}
    return {"status": "ok", "mean_pct": round(sum(value for _stamp, value in inside) / len(inside), 1),
            "samples": len(inside), "covered_s": round((inside[-1][0] - inside[0][0]) / 1e6, 3)}


def combine_busy(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's `gpu_busy` from its GPUs' (one GPU: its own): the mean of their means when every GPU's is ok (each
    GPU's under per_gpu), else the first failing GPU's status."""
    if len(readings) < 2:
        return dict(readings[0]) if readings else {}
    failed = [r.get("status") for r in readings if r.get("status") != "ok"]
    if failed:
        return {"status": failed[0], "per_gpu": readings}
    return {"status": "ok", "mean_pct": round(sum(r["mean_pct"] for r in readings) / len(readings), 1),
            "samples": sum(r["samples"] for r in readings), "per_gpu": readings}


def throttle_names(mask: int) -> str:
    return ",".join(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


class EnergyProbe:
    """start()/stop() around the timed window (StepClock calls them); result() gives the row's columns.

    on_gpu: whether the cell runs on a GPU; gpus: the GPUs this process's steps run on, as NVML knows them (None: NVML
    could not say), usually one. A process that drives several (JAX SPMD, MirroredStrategy) reads each, in one
    session, and its row has their sum (combine); extra() names each GPU's reading."""

    def __init__(self, on_gpu: bool, *gpus: CellGpu | None, min_window_s: float = MIN_ENERGY_WINDOW_S):
        self.on_gpu = on_gpu
        self.gpus: tuple[CellGpu | None, ...] = gpus or (None,)
        self.min_window_s = min_window_s
        self._session = NvmlSession()
        count = len(self.gpus)
        self._handles: list[Any] = [None] * count
        self._start: list[tuple[int, float] | None] = [None] * count
        self._end: list[tuple[int, float] | None] = [None] * count
        self._clocks: list[dict[str, Any] | None] = [None] * count
        self._busy: list[list[tuple[int, float]] | None] = [None] * count
        self._window_us: tuple[int, int] = (0, 0)  # CPU wall clock, as NVML stamps its samples

    def start(self) -> None:
        if not self.on_gpu or all(gpu is None for gpu in self.gpus) or not self._session.open():
            return
        for i, gpu in enumerate(self.gpus):  # every handle first: the counters are then read close together
            if gpu is not None:
                self._handles[i] = self._session.query(lambda pynvml, gpu=gpu: nvml_handle(pynvml, gpu))
        for i, gpu in enumerate(self.gpus):
            if self._handles[i] is not None and not gpu.mig:
                self._start[i] = self._session.query(_energy_mj(self._handles[i]))
        self._window_us = (int(time.time() * 1e6), 0)

    def stop(self) -> None:
        try:
            for i, gpu in enumerate(self.gpus):
                if self._handles[i] is not None and not gpu.mig:
                    self._end[i] = self._session.query(_energy_mj(self._handles[i]))
            self._window_us = (self._window_us[0], int(time.time() * 1e6))
            for i, handle in enumerate(self._handles):
                if handle is not None:
                    self._clocks[i] = self._session.query(_clocks(handle))  # a slice's clocks are its GPU's
                    if not self.gpus[i].mig:  # a slice's samples would be its whole GPU's
                        self._busy[i] = self._session.query(_busy_samples(handle, self._window_us[0]))
        finally:
            self._session.close()

    def _reading(self, i: int, timed_steps: int, tokens_per_step: int | None) -> dict[str, Any]:
        """GPU i's columns, as a one-GPU row would have them."""
        if self._handles[i] is None:  # no NVML session, or NVML does not know that GPU
            return {"energy_status": "nvml_unavailable"}
        row: dict[str, Any] = {**(self._clocks[i] or {})}
        if self.gpus[i].mig:
            row["energy_status"] = "mig"
            return row
        start, end = self._start[i], self._end[i]
        if start is None or end is None:
            row["energy_status"] = "unsupported"
            return row
        window_s = end[1] - start[1]
        if window_s < self.min_window_s:
            row["energy_status"] = "window_too_short"
            return row
        joules = (end[0] - start[0]) / 1000.0
        row.update(energy_status="ok", energy_j=joules, joules_per_step=joules / timed_steps,
                   mean_power_w=joules / window_s)
        if tokens_per_step:
            row["joules_per_token"] = joules / (timed_steps * tokens_per_step)
        return row

    def readings(self, timed_steps: int, tokens_per_step: int | None) -> list[dict[str, Any]]:
        """Each GPU's columns, in the order of `gpus` (none on a CPU)."""
        if not self.on_gpu:
            return []
        return [self._reading(i, timed_steps, tokens_per_step) for i in range(len(self.gpus))]

    def result(self, timed_steps: int, tokens_per_step: int | None) -> dict[str, Any]:
        return combine(self.readings(timed_steps, tokens_per_step))

    def busy(self) -> dict[str, Any]:
        """The row's `gpu_busy` (module doc; none on a CPU)."""
        if not self.on_gpu:
            return {}
        readings = []
        for i, handle in enumerate(self._handles):
            if handle is None:
                readings.append({"status": "nvml_unavailable"})
            elif self.gpus[i].mig:
                readings.append({"status": "mig"})
            else:
                readings.append(busy_reading(self._busy[i], *self._window_us, min_window_s=self.min_window_s))
        return combine_busy(readings)

    def extra(self, timed_steps: int, tokens_per_step: int | None) -> dict[str, Any]:
        """The row's `extra` fields: gpu_busy on a GPU, and each GPU's energy reading where the process ran on
        several (see per_gpu)."""
        busy = self.busy()
        fields = {"gpu_busy": busy} if busy else {}
        readings = self.readings(timed_steps, tokens_per_step)
        if len(readings) < 2:
            return fields
        return {**fields, **per_gpu(readings, [gpu.device_uuid if gpu else None for gpu in self.gpus])}


# Summed over a cell's GPUs: each GPU's share of the cell's energy over the same (barrier-aligned) window.
_SUMMED = ("energy_j", "joules_per_step", "joules_per_token", "mean_power_w")


def combine(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's energy columns from its GPUs' readings over the same timed window (one GPU: its own).

    The energy is every GPU's or none: the sum when each GPU's reading is ok, else the first failing GPU's
    energy_status with empty energy columns (never one GPU's energy as the cell's). The clocks are the GPUs' worst
    at the window's end: the lowest SM clock, the highest temperature, every throttle reason of any."""
    if len(readings) < 2:
        return dict(readings[0]) if readings else {}
    row: dict[str, Any] = {}
    clocks = [r["sm_clock_mhz"] for r in readings if r.get("sm_clock_mhz") is not None]
    temperatures = [r["gpu_temp_c"] for r in readings if r.get("gpu_temp_c") is not None]
    reasons = [r["throttle_reasons"] for r in readings if r.get("throttle_reasons") is not None]
    if any("sm_clock_mhz" in r for r in readings):
        row["sm_clock_mhz"] = min(clocks) if clocks else None
    if any("gpu_temp_c" in r for r in readings):
        row["gpu_temp_c"] = max(temperatures) if temperatures else None
    if any("throttle_reasons" in r for r in readings):
        active = {name for text in reasons for name in text.split(",") if name}
        row["throttle_reasons"] = (",".join(name for name in THROTTLE_REASONS.values() if name in active)
                                   if reasons else None)
    failed = [r.get("energy_status") for r in readings if r.get("energy_status") != "ok"]
    if failed:
        row["energy_status"] = failed[0] or "nvml_unavailable"
        return row
    row["energy_status"] = "ok"
    for column in _SUMMED:
        values = [r.get(column) for r in readings]
        if all(value is not None for value in values):
            row[column] = sum(values)
    return row


def per_gpu(readings: list[dict[str, Any]], uuids: list[str | None]) -> dict[str, Any]:
    """`extra` fields of a row over several GPUs: energy_gpus, each GPU's reading (by UUID, in the order of
    extra.gpu_indices), and where the row has no energy, energy_reason: which GPUs had none."""
    extra: dict[str, Any] = {"energy_gpus": [
        {"gpu_uuid": uuid, "energy_status": r.get("energy_status"), "energy_j": r.get("energy_j")}
        for uuid, r in zip(uuids, readings)]}
    missing = [f"{uuid or f'GPU {position}'}: {r.get('energy_status')}"
               for position, (uuid, r) in enumerate(zip(uuids, readings)) if r.get("energy_status") != "ok"]
    if missing:
        extra["energy_reason"] = (f"{len(missing)} of the cell's {len(readings)} GPUs had no energy reading "
                                  f"({'; '.join(missing)}); the row's energy is all its GPUs' or none")
    return extra


class Probes:
    """Several window probes as one: started in order, stopped in reverse (the outer one sees the inner's cost)."""

    def __init__(self, *probes: Any):
        self.probes = probes

    def start(self) -> None:
        for probe in self.probes:
            probe.start()

    def stop(self) -> None:
        for probe in reversed(self.probes):
            probe.stop()
