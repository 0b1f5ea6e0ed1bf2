"""The physics columns of a cell's row: its model FLOPs (fwbench.core.physics) against a ceiling.

On a GPU the ceiling is the datasheet table (by NVML name) at the precision the row ran (fp32, tf32, bf16, fp16).
On a CPU it is measured in a cell process after its timed window (same cores and BLAS as the cell), once per run
and core count: an fp32 GEMM with NumPy for fp32 rows, and for bf16 (and fp16) rows a GEMM in that dtype through
the framework the cell already imported (NumPy has no bf16; CPUs with AMX or AVX-512 BF16 run bf16 far faster
than fp32), via the harness backend's `gemm_tflops(dtype)` hook. The first cell of a run measures it and leaves it
in the run's work directory; the cells after it reuse it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from fwbench.core import physics
from fwbench.core.atomic import write_atomically
from fwbench.core.cpusets import own_cpu_count

GEMM_SIZE = 1024
GEMM_REPEATS = 5
# precision -> the framework dtype name a backend's gemm_tflops hook is asked for.
HALF_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
# A backend's GEMM hook: dtype name -> TFLOP/s, or None when the framework cannot run that GEMM on this CPU.
GemmHook = Callable[[str], "float | None"]


# A GEMM slower than this (a framework's unoptimised fp16 path on a CPU: seconds per call) is timed once, so that
# the ceiling never costs a cell more than a few seconds.
SLOW_GEMM_S = 1.0


def best_gemm_seconds(multiply: Callable[[], Any], repeats: int = GEMM_REPEATS) -> float:
    """Best wall time of `multiply()` (which must return only when its GEMM is done) after one warm-up call;
    a GEMM whose warm-up took over SLOW_GEMM_S is timed once more only."""
    start = time.perf_counter()
    multiply()  # warm the BLAS threads (and trace, for a compiled framework)
    if time.perf_counter() - start > SLOW_GEMM_S:
        repeats = 1
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        multiply()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_tflops_of(seconds: float, size: int = GEMM_SIZE) -> float:
    return 2.0 * size ** 3 / seconds / 1e12


def cpu_gemm_tflops(size: int = GEMM_SIZE, repeats: int = GEMM_REPEATS) -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    return gemm_tflops_of(best_gemm_seconds(lambda: a @ b, repeats), size)


def _cached(cache: Path | None, measure: Callable[[], tuple[float | None, str]]) -> tuple[float | None, str]:
    if cache is not None and cache.is_file():
        try:
            saved = json.loads(cache.read_text())
            return (None if saved["tflops"] is None else float(saved["tflops"])), str(saved["source"])
        except (ValueError, KeyError, TypeError, OSError):
            pass  # unreadable: measure again
    tflops, source = measure()
    if cache is not None:
        try:
            write_atomically(cache, json.dumps({"tflops": tflops, "source": source}))
        except OSError:
            pass  # a read-only work directory: every cell measures its own
    return tflops, source


def cpu_ceiling(run_id: str | None, cache_dir: Path | None) -> tuple[float, str]:
    """(TFLOP/s, peak_source) of the fp32 GEMM for this run on this many cores, measured once per run."""
    cores = own_cpu_count()
    cache = cache_dir / f"cpu-gemm.{run_id}.{cores}cores.json" if cache_dir and run_id else None

    def measure() -> tuple[float, str]:
        return cpu_gemm_tflops(), (f"measured fp32 GEMM {GEMM_SIZE}x{GEMM_SIZE} (numpy, best of {GEMM_REPEATS}, "
                                   f"{cores} cores, once per run)")

    tflops, source = _cached(cache, measure)
    return float(tflops), source


def cpu_half_ceiling(precision: str, run_id: str | None, cache_dir: Path | None, gemm: GemmHook | None,
                     framework: str | None) -> tuple[float | None, str]:
    """(TFLOP/s or None, peak_source) of a bf16/fp16 GEMM through the cell's framework, measured once per run,
    core count and framework (a framework's bf16 GEMM is its own: oneDNN with AMX in one, a slower path in
    another). None, with the reason in the source, when the framework cannot run that GEMM here."""
    dtype = HALF_DTYPES[precision]
    cores = own_cpu_count()
    name = framework or "unknown framework"
    cache = (cache_dir / f"cpu-gemm-{precision}.{framework}.{run_id}.{cores}cores.json"
             if cache_dir and run_id and framework else None)

    def measure() -> tuple[float | None, str]:
        if gemm is None:
            return None, f"none: no {dtype} GEMM to measure on this CPU ({name} offers none to fwbench)"
        try:
            tflops, why = gemm(dtype), "it has no such GEMM on this CPU"
        except Exception as exc:  # the ceiling must never fail a cell
            first = (str(exc).strip().splitlines() or [""])[0][:120]
            tflops, why = None, f"{type(exc).__name__}: {first}"
        if not tflops:
            return None, f"none: {name} could not run a {dtype} GEMM on this CPU ({why})"
        return float(tflops), (f"measured {precision} GEMM {GEMM_SIZE}x{GEMM_SIZE} ({name}, {dtype}, best of up "
                               f"to {GEMM_REPEATS}, {cores} cores, once per run)")

    return _cached(cache, measure)


def cpu_peaks(precisions: physics.Precisions, row: dict[str, Any], cache_dir: Path | None,
              gemm: GemmHook | None = None, framework: str | None = None) -> tuple[dict[str, float], list[str]]:
    """The measured ceiling of each precision the row ran at, and their sources (a precision without one is
    left out, and its source says why). A bf16/fp16 ceiling is at least the fp32 GEMM's: a CPU without native
    half-precision instructions widens to fp32 inside its fastest kernels, so a half-precision probe slower than
    fp32 measured a slow path of the framework, not the CPU (seen: torch's bf16 matmul at 1% of the fp32 GEMM
    on a CPU without AVX-512 BF16, where the model's linear layers ran 8x faster than that probe)."""
    wanted = [p for p in dict.fromkeys((precisions.matmul, precisions.conv)) if p]
    peaks, sources = {}, []
    for precision in wanted:
        if precision in HALF_DTYPES:
            tflops, source = cpu_half_ceiling(precision, row.get("run_id"), cache_dir, gemm, framework)
            fp32_tflops, fp32_source = cpu_ceiling(row.get("run_id"), cache_dir)
            if not tflops or fp32_tflops > tflops:
                tflops, source = fp32_tflops, (f"{fp32_source}, standing in for {precision}: the "
                                               f"{precision} probe was slower or absent ({source})")
        else:  # a CPU has no TF32: fp32 (and a "tf32" that cannot have run) against the fp32 GEMM
            tflops, source = cpu_ceiling(row.get("run_id"), cache_dir)
        if tflops:
            peaks[precision] = tflops
        sources.append(source)
    return peaks, sources


def physics_row(row: dict[str, Any], on_gpu: bool, cache_dir: Path | None = None, *,
                mig_slice: bool = False, gemm: GemmHook | None = None,
                cost: physics.StepCost | None = None) -> dict[str, Any]:
    """Physics columns for a measured row (needs model, task_kind, preset, batch_size, ms_per_step; the compute
    dtype (else the dtype) and the effective TF32 state of matmuls and convolutions say what precision each part
    ran at, and the row is measured against that precision's ceiling).
    mig_slice: the cell ran on a MIG slice, which has a share of the GPU's units and bandwidth: no peak.
    gemm: the cell's backend's gemm_tflops hook for a CPU's bf16/fp16 ceiling (the cell passes its backend's; without
    one a bf16/fp16 row on a CPU gets no peak, and its source says so).
    cost: the step's cost where the cell counted it (a model file's layers); else the registry model's."""
    cost = cost or physics.step_cost(row["model"], row["task_kind"], row["preset"], row["batch_size"])
    precisions = physics.step_precisions(cost, row.get("dtype"), row.get("tf32_effective"),
                                         row.get("tf32_conv_effective"), row.get("compute_dtype"))
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
        peaks, sources = cpu_peaks(precisions, row, cache_dir, gemm, _framework_of(row))
        peak_tflops = physics.effective_peak(cost, precisions, peaks)
        peak_source = "; ".join(sources) if peak_tflops is not None else (
            "; ".join(s for s in sources if s.startswith("none:")) or "; ".join(sources))
    return physics.physics_columns(cost, row.get("ms_per_step"), precisions, peak_tflops=peak_tflops,
                                   peak_source=peak_source, bandwidth_gbs=bandwidth)


def _framework_of(row: dict[str, Any]) -> str | None:
    from fwbench.core import registry

    stack = registry.STACKS.get(row.get("stack") or "")
    return stack.harness_backend if stack is not None else None
