"""GPU energy and clocks over the timed window (NVML): the energy columns of a row.

A GPU without the total-energy counter (pre-Volta, some virtual GPUs) gets energy_status 'unsupported' and
null energy columns, never 0; a CPU cell gets no energy columns at all.
"""

from __future__ import annotations

import time
from typing import Any

from fwbench.harness.nvml import nvml_query

# NVML clocks-event (throttle) reason bits -> names; GPU idle (0x1) is not a throttle and is left out.
THROTTLE_REASONS = {
    0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _energy_mj(gpu_index: int):
    """(counter in mJ, perf_counter at the read): the window's seconds span the reads, not NVML's start-up."""
    def query(pynvml) -> tuple[int, float]:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)), time.perf_counter()
    return query


def _clocks(gpu_index: int):
    def query(pynvml) -> dict[str, Any]:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
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
    """start()/stop() around the timed window (StepClock calls them); result() gives the row's columns."""

    def __init__(self, gpu_index: int | None):
        self.gpu_index = gpu_index
        self._start: tuple[int, float] | None = None
        self._end: tuple[int, float] | None = None
        self._clocks: dict[str, Any] | None = None

    def start(self) -> None:
        if self.gpu_index is None:
            return
        self._start = nvml_query(_energy_mj(self.gpu_index))

    def stop(self) -> None:
        if self.gpu_index is None:
            return
        self._end = nvml_query(_energy_mj(self.gpu_index))
        self._clocks = nvml_query(_clocks(self.gpu_index))

    def result(self, timed_steps: int, tokens_per_step: int | None) -> dict[str, Any]:
        if self.gpu_index is None:
            return {}
        row: dict[str, Any] = {**(self._clocks or {})}
        if self._start is None or self._end is None:
            # No NVML session at all (no pynvml or driver in the environment) is not a missing counter.
            row["energy_status"] = "unsupported" if self._clocks is not None else "nvml_unavailable"
            return row
        joules = (self._end[0] - self._start[0]) / 1000.0
        window_s = self._end[1] - self._start[1]
        row.update(energy_status="ok", energy_j=joules, joules_per_step=joules / timed_steps,
                   mean_power_w=joules / window_s if window_s > 0 else None)
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
