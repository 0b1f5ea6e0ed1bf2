"""The physics columns of a cell's row: its model FLOPs (fwbench.core.physics) against a ceiling.

On a GPU the ceiling is the datasheet table (by NVML name); on a CPU it is measured in a cell process after
its timed window (same cores and BLAS as the cell): an fp32 GEMM, best of a few, once per run and core count.
The first cell of a run measures it and leaves it in the run's work directory; the cells after it reuse it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from fwbench.core import physics
from fwbench.core.atomic import write_atomically

GEMM_SIZE = 1024
GEMM_REPEATS = 5


def cpu_gemm_tflops(size: int = GEMM_SIZE, repeats: int = GEMM_REPEATS) -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b  # warm the BLAS threads
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / best / 1e12


def cpu_ceiling(run_id: str | None, cache_dir: Path | None) -> tuple[float, str]:
    """(TFLOP/s, peak_source) of the fp32 GEMM for this run on this many cores, measured once per run."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cache = cache_dir / f"cpu-gemm.{run_id}.{cores}cores.json" if cache_dir and run_id else None
    if cache is not None and cache.is_file():
        try:
            saved = json.loads(cache.read_text())
            return float(saved["tflops"]), str(saved["source"])
        except (ValueError, KeyError, OSError):
            pass  # unreadable: measure again
    tflops = cpu_gemm_tflops()
    source = (f"measured fp32 GEMM {GEMM_SIZE}x{GEMM_SIZE} (numpy, best of {GEMM_REPEATS}, {cores} cores, "
              f"once per run)")
    if cache is not None:
        try:
            write_atomically(cache, json.dumps({"tflops": tflops, "source": source}))
        except OSError:
            pass  # a read-only work directory: every cell measures its own
    return tflops, source


def physics_row(row: dict[str, Any], on_gpu: bool, cache_dir: Path | None = None, *,
                mig_slice: bool = False) -> dict[str, Any]:
    """Physics columns for a measured row (needs model, task_kind, preset, batch_size, ms_per_step; the dtype and
    the effective TF32 state of matmuls and convolutions say what precision each part ran at).
    mig_slice: the cell ran on a MIG slice, which has a share of the GPU's units and bandwidth: no peak."""
    cost = physics.step_cost(row["model"], row["task_kind"], row["preset"], row["batch_size"])
    precisions = physics.step_precisions(cost, row.get("dtype"), row.get("tf32_effective"),
                                         row.get("tf32_conv_effective"))
    peak_tflops = peak_source = bandwidth = None
    if on_gpu and (mig_slice or physics.is_mig_name(row.get("device_name"))):
        peak_source = physics.MIG_PEAK_SOURCE
    elif on_gpu:
        peak = physics.gpu_peak(row.get("device_name"))
        if peak is not None:
            bandwidth = peak.bandwidth_gbs
            peak_tflops = physics.effective_peak(cost, precisions, peak.tflops)
            if peak_tflops is not None:
                peak_source = f"table: {peak.name} ({peak.source})"
                if precisions.combined == "mixed":
                    peak_source += (f"; mixed: matmul FLOPs at the {precisions.matmul} peak, convolution FLOPs at "
                                    f"the {precisions.conv} peak")
    else:
        # A CPU runs bf16 and fp32 on the same units here (and no TF32): the fp32 GEMM is the ceiling for all.
        peak_tflops, peak_source = cpu_ceiling(row.get("run_id"), cache_dir)
    return physics.physics_columns(cost, row.get("ms_per_step"), precisions, peak_tflops=peak_tflops,
                                   peak_source=peak_source, bandwidth_gbs=bandwidth)
