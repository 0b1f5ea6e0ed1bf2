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
A CPU cell gets no energy columns at all.
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


def throttle_names(mask: int) -> str:
    return ",".join(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


class EnergyProbe:
    """start()/stop() around the timed window (StepClock calls them); result() gives the row's columns.

    on_gpu: whether the cell runs on a GPU; gpu: that GPU as NVML knows it (None: NVML could not say)."""

    def __init__(self, on_gpu: bool, gpu: CellGpu | None, min_window_s: float = MIN_ENERGY_WINDOW_S):
        self.on_gpu = on_gpu
        self.gpu = gpu
        self.min_window_s = min_window_s
        self._session = NvmlSession()
        self._handle: Any = None
        self._start: tuple[int, float] | None = None
        self._end: tuple[int, float] | None = None
        self._clocks: dict[str, Any] | None = None

    def start(self) -> None:
        if not self.on_gpu or self.gpu is None or not self._session.open():
            return
        gpu = self.gpu
        self._handle = self._session.query(lambda pynvml: nvml_handle(pynvml, gpu))
        if self._handle is not None and not gpu.mig:
            self._start = self._session.query(_energy_mj(self._handle))

    def stop(self) -> None:
        try:
            if self._handle is None:
                return
            if not self.gpu.mig:
                self._end = self._session.query(_energy_mj(self._handle))
            self._clocks = self._session.query(_clocks(self._handle))  # a slice's clocks are its GPU's
        finally:
            self._session.close()

    def result(self, timed_steps: int, tokens_per_step: int | None) -> dict[str, Any]:
        if not self.on_gpu:
            return {}
        if self._handle is None:  # no NVML session, or NVML does not know the cell's GPU
            return {"energy_status": "nvml_unavailable"}
        row: dict[str, Any] = {**(self._clocks or {})}
        if self.gpu.mig:
            row["energy_status"] = "mig"
            return row
        if self._start is None or self._end is None:
            row["energy_status"] = "unsupported"
            return row
        window_s = self._end[1] - self._start[1]
        if window_s < self.min_window_s:
            row["energy_status"] = "window_too_short"
            return row
        joules = (self._end[0] - self._start[0]) / 1000.0
        row.update(energy_status="ok", energy_j=joules, joules_per_step=joules / timed_steps,
                   mean_power_w=joules / window_s)
        if tokens_per_step:
            row["joules_per_token"] = joules / (timed_steps * tokens_per_step)
        return row


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
