"""Per-framework hooks of the harness: device sync, peak memory, precision state, compile stats.

Each backend is imported lazily inside the cell process, so the runner and the aggregator never
import a deep-learning framework. GPU paths (CUDA sync, allocator peaks) cannot run on the CPU
machines this project is developed on; they are written against the documented APIs.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

from fwbench.core import registry


def process_peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class TorchBackend:
    name = "torch"

    def __init__(self, device: str | None = None):
        import torch

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.on_gpu = self.device.startswith("cuda")

    def use_compile_cache(self, path: Path, compile_mode: str) -> bool | None:
        """Inductor keeps its own persistent cache (TORCHINDUCTOR_CACHE_DIR); whether it held kernels already
        (None: nothing is compiled)."""
        if compile_mode == "none":
            return None
        return _has_entries(inductor_cache_dir())

    def configure(self, threads: int, tf32: str) -> None:
        torch = self.torch
        torch.set_num_threads(threads)
        if tf32 in ("on", "off") and _has_fp32_precision_api(torch):
            # torch >= 2.9: the new API only. Mixing it with the legacy flags makes later reads raise, and
            # libraries (transformers' Trainer) use the new one.
            torch.backends.fp32_precision = "tf32" if tf32 == "on" else "ieee"
        elif tf32 == "on":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.set_float32_matmul_precision("high")
        elif tf32 == "off":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
        if self.on_gpu:
            torch.cuda.reset_peak_memory_stats()

    def sync(self, output: Any = None) -> None:
        # A CPU step has finished when its call returns; CUDA work is queued until synchronised.
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def peak_memory(self) -> tuple[int, str]:
        if self.on_gpu:
            return int(self.torch.cuda.max_memory_allocated()), "cuda_allocator_peak"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        torch = self.torch
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu",
                                "cuda_runtime": torch.version.cuda}
        if self.on_gpu:
            info["device_name"] = torch.cuda.get_device_name()
            info["device_count"] = torch.cuda.device_count()
        return info

    def precision_state(self) -> dict[str, Any]:
        """TF32 state through the API the installed torch uses (read after the cell, whatever the workload
        or its libraries set). A read that fails leaves its field empty: it never fails the cell."""
        torch = self.torch
        new_api = _has_fp32_precision_api(torch)
        matmul_tf32 = _guarded(lambda: _tf32_allowed(torch.backends.cuda.matmul, torch.backends.cuda.matmul, new_api))
        # torch.backends.cudnn.conv only exists with the new API (torch >= 2.9): older torch has the cudnn flag.
        conv_tf32 = _guarded(lambda: _tf32_allowed(torch.backends.cudnn.conv if new_api else None,
                                                   torch.backends.cudnn, new_api))
        precision = _guarded(torch.get_float32_matmul_precision)
        if precision is None and new_api:
            precision = _guarded(lambda: f"fp32_precision={torch.backends.cuda.matmul.fp32_precision}")
        # TF32 only exists on Ampere+ GPUs; on the CPU the flags are recorded but have no effect.
        return {"tf32_matmul": matmul_tf32, "tf32_conv": conv_tf32, "matmul_precision": precision,
                "tf32_effective": bool(self.on_gpu and matmul_tf32 and _ampere_or_newer(torch))}

    def threads(self) -> int:
        return int(self.torch.get_num_threads())

    def compile_stats(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters

        graph_breaks = sum(counters["graph_break"].values())
        skips = int(counters["inductor"]["cudagraph_skips"]) if _counts_cudagraph_skips() else None
        return {
            "compiled_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(graph_breaks),
            "graph_break_reasons": sorted(str(r)[:200] for r in counters["graph_break"])[:20],
            "cudagraph_skips": skips,
        }


def _has_fp32_precision_api(torch) -> bool:
    """torch >= 2.9 sets TF32 with `fp32_precision` ("tf32"/"ieee"/"none") per backend."""
    return hasattr(torch.backends, "fp32_precision") and hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _counts_cudagraph_skips() -> bool:
    """Does this torch count CUDA-graph skips? Inductor's skip counter arrived with
    `cudagraph_utils.log_cudagraph_skip_and_bump_counter`; older torch (2.2, the published version) skips
    CUDA graphs without counting, so its rows record null (not counted) rather than a false 0."""
    try:
        from torch._inductor import cudagraph_utils
    except ImportError:
        return False
    return hasattr(cudagraph_utils, "log_cudagraph_skip_and_bump_counter")


def _tf32_allowed(new_api_node, legacy_node, new_api: bool) -> bool:
    """Is TF32 allowed for this op family? The new API's value when it has one ("none" = not set: the
    legacy flag, which is then safe to read), else the legacy `allow_tf32` flag."""
    if new_api:
        value = getattr(new_api_node, "fp32_precision", "none")
        if value in ("tf32", "ieee"):
            return value == "tf32"
    return bool(legacy_node.allow_tf32)


def _guarded(read):
    try:
        return read()
    except Exception:  # e.g. "mix of the legacy and new APIs": a state read must never fail a cell
        return None


def _ampere_or_newer(torch) -> bool:
    major, _ = torch.cuda.get_device_capability()
    return major >= 8


def inductor_cache_dir() -> Path:
    """Where Inductor keeps compiled kernels (warm caches shorten first_step_s)."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return Path(env)
    import getpass
    import tempfile

    return Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"


def _has_entries(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _leaves(output: Any) -> list[Any]:
    """The leaves of a (nested) step output: Keras logs are dicts, predictions may be lists."""
    if isinstance(output, dict):
        return [leaf for value in output.values() for leaf in _leaves(value)]
    if isinstance(output, (list, tuple)):
        return [leaf for value in output for leaf in _leaves(value)]
    return [] if output is None else [output]


def _limit_cpus(threads: int) -> None:
    """Pin the process to `threads` CPUs: XLA's CPU client has no thread-count API, but it sizes its
    pools from the CPUs it may use. Must run before the framework creates its pools."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return
    if 0 < threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])


class JaxBackend:
    """Stacks whose harness backend is JAX (Keras 3 on JAX). JAX dispatch is asynchronous on every device, the CPU included: a step returns
    before its work is done, so sync must block on the step's own output arrays."""

    name = "jax"

    def __init__(self):
        import jax

        self.jax = jax
        # Initialises the backend: configure() below must not need to run before this.
        self.devices = jax.devices()
        self.on_gpu = self.devices[0].platform == "gpu"

    def use_compile_cache(self, path: Path, compile_mode: str) -> bool | None:
        """JAX's persistent compilation cache at `path`, for every program however quick to compile (model
        build runs many small ones); whether it held programs already. None where this JAX has no such cache."""
        try:
            self.jax.config.update("jax_compilation_cache_dir", str(path))
            self.jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        except (AttributeError, KeyError, ValueError):
            return None
        try:  # newer JAX only; older ones cache every entry size
            self.jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        except (AttributeError, KeyError, ValueError):
            pass
        return _has_entries(path)

    def configure(self, threads: int, tf32: str) -> None:
        # Framework-default precision is None (TF32 for float32 matmuls on Ampere+ GPUs).
        if tf32 == "on":
            self.jax.config.update("jax_default_matmul_precision", "tensorfloat32")
        elif tf32 == "off":
            self.jax.config.update("jax_default_matmul_precision", "highest")
        self._threads = threads

    def sync(self, output: Any = None) -> None:
        # Python floats / numpy leaves pass through; jax.Array leaves are waited for.
        self.jax.block_until_ready(_leaves(output))

    def peak_memory(self) -> tuple[int, str]:
        if self.on_gpu:
            stats = self.devices[0].memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return int(stats["peak_bytes_in_use"]), "jax_device_peak_bytes_in_use"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu", "cuda_runtime": None}
        if self.on_gpu:
            info["device_name"] = self.devices[0].device_kind
            info["device_count"] = len(self.devices)
        return info

    def precision_state(self) -> dict[str, Any]:
        precision = self.jax.config.jax_default_matmul_precision
        allows_tf32 = precision in (None, "default", "tensorfloat32", "bfloat16")
        ampere = self.on_gpu and float(getattr(self.devices[0], "compute_capability", "0") or 0) >= 8.0
        return {"tf32_matmul": allows_tf32, "matmul_precision": str(precision or "default"),
                "tf32_effective": bool(ampere and allows_tf32)}

    def threads(self) -> int:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else int(os.cpu_count() or 1)


class TensorFlowBackend:
    """Stacks on TensorFlow (Keras 3 and Keras 2). TF GPU kernels are queued on streams; fetching a step
    output to the host waits for the work that produced it."""

    name = "tensorflow"

    def __init__(self):
        import tensorflow as tf

        self.tf = tf
        self.gpus = tf.config.list_physical_devices("GPU")
        self.on_gpu = bool(self.gpus)

    def use_compile_cache(self, path: Path, compile_mode: str) -> bool | None:
        """TensorFlow's XLA clusters are compiled afresh in every process: no persistent cache (None)."""
        return None

    def configure(self, threads: int, tf32: str) -> None:
        tf = self.tf
        # All of these must happen before the TF runtime initialises (before the first op).
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        for gpu in self.gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if tf32 in ("on", "off"):
            tf.config.experimental.enable_tensor_float_32_execution(tf32 == "on")

    def sync(self, output: Any = None) -> None:
        for leaf in _leaves(output):
            if hasattr(leaf, "numpy"):
                leaf.numpy()

    def peak_memory(self) -> tuple[int, str]:
        if self.on_gpu:
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"]), "tf_gpu_peak"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        tf = self.tf
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu",
                                "cuda_runtime": tf.sysconfig.get_build_info().get("cuda_version")}
        if self.on_gpu:
            info["device_name"] = tf.config.experimental.get_device_details(self.gpus[0]).get("device_name")
            info["device_count"] = len(self.gpus)
        return info

    def precision_state(self) -> dict[str, Any]:
        tf = self.tf
        enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        ampere = False
        if self.on_gpu:
            capability = tf.config.experimental.get_device_details(self.gpus[0]).get("compute_capability")
            ampere = bool(capability and capability[0] >= 8)
        return {"tf32_matmul": enabled, "matmul_precision": "tf32" if enabled else "float32",
                "tf32_effective": bool(ampere and enabled)}

    def threads(self) -> int:
        return int(self.tf.config.threading.get_intra_op_parallelism_threads())


def backend_for(stack_id: str, threads: int | None = None):
    """The harness backend of a stack, as its definition names it (fwbench.core.registry.Stack.harness_backend).

    `threads` is applied before the framework starts where that must happen first (JAX)."""
    stack = registry.STACKS.get(stack_id)
    if stack is None:
        raise NotImplementedError(f"no harness backend for stack {stack_id!r}")
    if stack.harness_backend == "jax" and threads is not None:
        _limit_cpus(threads)
    return BACKENDS[stack.harness_backend]()


# Stack.harness_backend -> the class that implements it.
BACKENDS = {TorchBackend.name: TorchBackend, JaxBackend.name: JaxBackend, TensorFlowBackend.name: TensorFlowBackend}
