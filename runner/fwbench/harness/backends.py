"""Per-framework hooks of the harness: device sync, peak memory, precision state, compile stats.

Each backend is imported lazily inside the cell process, so the runner and the aggregator never
import a deep-learning framework. GPU paths (CUDA sync, allocator peaks) cannot run on the CPU
machines this project is developed on; they are written against the documented APIs.
"""

from __future__ import annotations

import functools
import os
import resource
from pathlib import Path
from typing import Any

from fwbench.core import registry
from fwbench.core.cpusets import own_cpu_count
from fwbench.harness import ranks


def process_peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class TorchBackend:
    # The folder of fwbench's own persistent compilation cache the cell used (its name: a row says it); None: none
    # (TensorFlow has no such cache, Inductor keeps its own).
    compile_cache_folder: str | None = None
    name = "torch"
    label = "torch"  # in messages

    def __init__(self, device: str | None = None):
        import torch

        self.torch = torch
        self.device = device or self._own_device(torch)
        self.on_gpu = self.device.startswith("cuda")
        self._replay_counter: CudaGraphReplayCounter | None = None

    @staticmethod
    def _own_device(torch) -> str:
        """The device this process's steps run on. A data-parallel rank's is its own GPU, cuda:LOCAL_RANK (as the
        Trainer's accelerate picks it), made the current device here, before anything reads the current device:
        plain "cuda" is GPU 0 in every rank, whose sync, allocator peak, UUID and energy would be another rank's.
        A rank beyond the GPUs torch sees keeps "cuda": data_parallel_devices() then says there are too few."""
        if not torch.cuda.is_available():
            return "cpu"
        rank = ranks.local_rank()
        if rank is None or rank >= torch.cuda.device_count():
            return "cuda"
        torch.cuda.set_device(rank)
        return f"cuda:{rank}"

    def gpu_positions(self) -> tuple[int, ...]:
        """The framework's ordinals (positions in CUDA_VISIBLE_DEVICES) of the GPUs this process's steps run on."""
        return (int(self.device.split(":", 1)[1]) if ":" in self.device else 0,)

    def comm_version(self, comm_backend: str) -> str | None:
        """The version of the collectives library a data-parallel row reduced its gradients with: NCCL's own (the
        one torch loaded); gloo has none of its own (it is built into torch)."""
        if comm_backend == "nccl":
            version = _guarded(self.torch.cuda.nccl.version)
            return f"nccl {'.'.join(map(str, version)) if isinstance(version, tuple) else version}" if version else None
        if comm_backend == "gloo":
            return f"gloo (built into torch {self.torch.__version__})"
        return None

    def data_parallel_devices(self, devices: int) -> int:
        """--devices N (DistributedDataParallel, this process one of N ranks): the devices there are for the ranks.
        On GPUs one per rank, as torch sees them (N ranks on fewer GPUs would be another measurement than the row
        says); on a CPU the ranks share the cell's cores, so all N."""
        return int(self.torch.cuda.device_count()) if self.on_gpu else devices

    def use_compile_cache(self, path: Path | None, compile_mode: str) -> bool | None:
        """Inductor keeps its own persistent cache (TORCHINDUCTOR_CACHE_DIR), on as torch has it by default whatever
        `path` says; whether it held kernels already (None: nothing is compiled)."""
        if compile_mode == "none":
            return None
        return _has_entries(inductor_cache_dir())

    def configure(self, threads: int, tf32: str) -> None:
        torch = self.torch
        # Only where the count changes: torch.set_num_threads also turns MKL's dynamic threading off (ATen's
        # set_num_threads), even at the count torch already had, which made a whole-machine tiny CPU cell 7-9% slower
        # than the same process left alone (docs/development.md, harness noise). Cells side by side get fewer threads.
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if tf32 in ("on", "off"):
            self.set_tf32(tf32 == "on")
        if self.on_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)

    def set_tf32(self, enabled: bool) -> None:
        """TF32 for float32 CUDA matmuls and cuDNN convolutions (and RNNs), through every API this torch has.

        torch >= 2.9 keeps two TF32 states that must agree: the legacy one (`cuda.matmul.allow_tf32`, the
        float32 matmul precision, `cudnn.allow_tf32`) and the new per-op `fp32_precision` leaves; reading a
        legacy flag while the other says otherwise raises ("mix of the legacy and new APIs"). Inductor reads
        the legacy flags on CUDA (pytorch/pytorch#166387), transformers' Trainer and our own state read the
        new ones. So: the legacy setters first (on torch >= 2.9 they set the leaves too), then every leaf
        explicitly, never the global `torch.backends.fp32_precision`: a leaf that says "tf32" or "ieee" no
        longer inherits from the global, so a library that later sets the global (the Trainer's
        enable_tf32) cannot make a legacy read disagree with it."""
        torch = self.torch
        torch.set_float32_matmul_precision("high" if enabled else "highest")
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
        if _has_fp32_precision_api(torch):
            leaf = "tf32" if enabled else "ieee"
            torch.backends.cuda.matmul.fp32_precision = leaf
            torch.backends.cudnn.conv.fp32_precision = leaf
            torch.backends.cudnn.rnn.fp32_precision = leaf

    def tf32_available(self) -> bool:
        """Can this device run TF32 at all (a CUDA GPU of compute capability 8.0 or newer)? The same test
        transformers makes before it accepts TrainingArguments(tf32=True)."""
        return bool(self.on_gpu and _ampere_or_newer(self.torch))

    def trainer_tf32(self, tf32_setting: str, compiled: bool) -> tuple[bool | None, str]:
        """The `tf32` argument for transformers' TrainingArguments, and why, with the TF32 state set to match.

        Left as None with torch_compile=True on an Ampere GPU, the Trainer switches TF32 on itself through
        the new API only (torch >= 2.9), which makes the legacy reads that Inductor makes raise; tf32=True
        raises on a CPU or a pre-Ampere GPU. So the Trainer always gets an explicit value where one is
        valid, and this backend sets the same state first through every API (set_tf32):
          on      True where TF32 is available, else None (nothing to switch on);
          off     False (the Trainer then switches TF32 off, or does nothing where it cannot run);
          default what the Trainer would do itself: True when compiled on a TF32-capable GPU (as the
                  published compiled Trainer cells ran), else None (the framework's defaults stay)."""
        available = self.tf32_available()
        if tf32_setting == "off":
            value, why = False, "--tf32 off"
        elif tf32_setting == "on":
            value, why = ((True, "--tf32 on") if available else
                          (None, "--tf32 on, but this device has no TF32 (CPU or pre-Ampere GPU)"))
        elif tf32_setting == "default":
            if compiled and available:
                value, why = True, "default: TrainingArguments(torch_compile=True) switches TF32 on by itself"
            else:
                value, why = None, "default: the Trainer leaves TF32 alone (not compiled, or no TF32 on this device)"
        else:
            raise ValueError(f"unknown TF32 setting {tf32_setting!r} (default, on, off)")
        if value is not None:
            self.set_tf32(value)
        return value, why

    def sync(self, output: Any = None) -> None:
        # A CPU step has finished when its call returns; CUDA work is queued until synchronised.
        if self.on_gpu:
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """Data-parallel ranks (DistributedDataParallel): wait for every rank, so that a clock read after it is
        the slowest rank's time. Nothing where no process group is up (one device)."""
        dist = self.torch.distributed
        if dist.is_available() and dist.is_initialized():
            dist.barrier()

    def peak_memory(self) -> tuple[int, str]:
        if self.on_gpu:
            return int(self.torch.cuda.max_memory_allocated(self.device)), "cuda_allocator_peak"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        torch = self.torch
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu",
                                "cuda_runtime": torch.version.cuda}
        if self.on_gpu:
            info["device_name"] = torch.cuda.get_device_name(self.device)
            info["device_count"] = torch.cuda.device_count()
        return info

    def precision_state(self) -> dict[str, Any]:
        """TF32 state of matmuls and convolutions apart, through the API the installed torch uses (read after
        the cell, whatever the workload or its libraries set). On torch >= 2.9 the per-op leaves decide what
        runs (`cuda.matmul`, `cudnn.conv`; a leaf resolves its parents): TF32 exactly when a leaf says "tf32".
        Older torch has the legacy flags only. A read that fails leaves its field empty: it never fails the cell."""
        torch = self.torch
        new_api = _has_fp32_precision_api(torch)
        if new_api:
            matmul_tf32 = _guarded(lambda: torch.backends.cuda.matmul.fp32_precision == "tf32")
            conv_tf32 = _guarded(lambda: torch.backends.cudnn.conv.fp32_precision == "tf32")
        else:
            matmul_tf32 = _guarded(lambda: bool(torch.backends.cuda.matmul.allow_tf32))
            conv_tf32 = _guarded(lambda: bool(torch.backends.cudnn.allow_tf32))
        precision = _guarded(torch.get_float32_matmul_precision)
        if precision is None and new_api:  # the legacy read raised: another library mixed the APIs
            precision = _guarded(lambda: f"fp32_precision={torch.backends.cuda.matmul.fp32_precision}")
        # TF32 only exists on Ampere+ GPUs; on the CPU the flags are recorded but have no effect.
        tf32_hardware = self.tf32_available()
        return {"tf32_matmul": matmul_tf32, "tf32_conv": conv_tf32, "matmul_precision": precision,
                "tf32_effective": bool(tf32_hardware and matmul_tf32),
                "tf32_conv_effective": bool(tf32_hardware and conv_tf32)}

    def threads(self) -> int:
        return int(self.torch.get_num_threads())

    def count_cudagraph_replays(self) -> "CudaGraphReplayCounter":
        """The window probe that counts CUDA-graph replays in the timed window (installed once per process);
        compile_stats() reports its count."""
        if self._replay_counter is None:
            self._replay_counter = CudaGraphReplayCounter(self.torch.cuda.CUDAGraph)
        return self._replay_counter

    def compile_stats(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters

        graph_breaks = sum(counters["graph_break"].values())
        skips = int(counters["inductor"]["cudagraph_skips"]) if _counts_cudagraph_skips() else None
        return {
            "compiled_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(graph_breaks),
            "graph_break_reasons": sorted(str(r)[:200] for r in counters["graph_break"])[:20],
            "cudagraph_skips": skips,
            # None: nothing counted them (an uncompiled cell never installs the counter).
            "cudagraph_replays": None if self._replay_counter is None else self._replay_counter.replays,
        }

    def gemm_tflops(self, dtype: str) -> float | None:
        """The ceiling's hook (fwbench.harness.ceiling): TFLOP/s of a square GEMM in `dtype` ("bfloat16",
        "float16") on this backend's device, the faster of torch.matmul and the linear layers' path
        (torch.nn.functional.linear: on a CPU the two take different kernels, the linear one several times faster
        in bf16), best of a few; None if this torch has no such GEMM here."""
        from fwbench.harness import ceiling

        torch, n = self.torch, ceiling.GEMM_SIZE
        a, b = (torch.randn(n, n, device=self.device).to(getattr(torch, dtype)) for _ in range(2))

        def timed(product):
            def multiply():
                product(a, b)
                self.sync()
            return ceiling.best_gemm_seconds(multiply)

        return ceiling.gemm_tflops_of(min(timed(torch.matmul), timed(torch.nn.functional.linear)))


class CudaGraphReplayCounter:
    """Counts `torch.cuda.CUDAGraph.replay` calls between start() and stop(): a window probe (StepClock calls
    them around the timed window), so recording and warm-up replays are not counted.

    torch.compile's reduce-overhead mode runs the compiled code as CUDA graphs through cudagraph trees, which
    replay each recorded graph with `self.graph.replay()` on a torch.cuda.CUDAGraph, on torch 2.2 and 2.14
    alike: unlike Inductor's skip counter (missing on 2.2) the count exists on both. Wrapping the Python
    method of the class reaches every instance, whenever it was made."""

    def __init__(self, graph_class: type):
        self.replays = 0
        self._counting = False
        original = graph_class.replay
        counter = self

        @functools.wraps(original)
        def replay(graph, *args, **kwargs):
            if counter._counting:
                counter.replays += 1
            return original(graph, *args, **kwargs)

        graph_class.replay = replay

    def start(self) -> None:
        self._counting = True

    def stop(self) -> None:
        self._counting = False


# torch.compile modes whose compiled code runs as CUDA graphs (the mode's whole point).
CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead",)


def compile_took_effect(compile_mode: str, stats: dict[str, Any], timed_steps: int) -> bool | None:
    """Did the timed steps run compiled code? None when nothing was to be compiled.

    Graphs compiled during the run mean the step called compiled code (each workload compiles the modules its
    step calls). reduce-overhead also has to run that code as CUDA graphs: no graph was skipped (a skip count
    of None is a torch that does not count skips, such as 2.2) and at least one replay per timed step was
    counted in the timed window. On a CPU, CUDA graphs cannot run: such a row says False."""
    if compile_mode == "none":
        return None
    compiled = (stats.get("compiled_graphs") or 0) > 0
    if compile_mode not in CUDA_GRAPH_COMPILE_MODES:
        return compiled
    replays = stats.get("cudagraph_replays")
    return bool(compiled and stats.get("cudagraph_skips") in (0, None)
                and replays is not None and replays >= timed_steps)


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

    compile_cache_folder: str | None = None  # as TorchBackend's
    name = "jax"
    label = "JAX"

    def __init__(self):
        import jax

        self.jax = jax
        # Initialises the backend: configure() below must not need to run before this.
        self.devices = jax.devices()
        self.on_gpu = self.devices[0].platform == "gpu"
        self.cell_devices = 1  # the first N of self.devices run the cell (data_parallel_devices)

    def comm_version(self, comm_backend: str) -> str | None:
        """XLA's collectives are compiled into jaxlib (NCCL underneath on GPUs, loaded by jaxlib): jaxlib's version."""
        from importlib import metadata

        try:
            version = metadata.version("jaxlib")
        except metadata.PackageNotFoundError:  # a jax built with its jaxlib (no distribution of its own)
            return f"{comm_backend} (jax {self.jax.__version__})"
        return f"{comm_backend} (jaxlib {version})"

    def data_parallel_devices(self, devices: int) -> int:
        """--devices N (keras.distribution over the first N devices of this one process): the devices JAX sees. On a
        CPU these are the N host devices backend_for asked XLA for before JAX started."""
        self.cell_devices = devices
        return len(self.devices)

    def use_compile_cache(self, path: Path | None, compile_mode: str) -> bool | None:
        """JAX's persistent compilation cache at `path`, for every program however quick to compile (model
        build runs many small ones); whether it held programs already. None: no persistent cache, as JAX has it by
        default (path None: none asked for), or this JAX has none."""
        if path is None:
            return None
        try:
            self.jax.config.update("jax_compilation_cache_dir", str(path))
            self.jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        except (AttributeError, KeyError, ValueError):
            return None
        self.compile_cache_folder = path.name
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

    def gpu_positions(self) -> tuple[int, ...]:
        """The framework's ordinals of the GPUs this process's steps run on: the first N (data_parallel_devices)."""
        return tuple(range(self.cell_devices))

    def sync(self, output: Any = None) -> None:
        # Python floats / numpy leaves pass through; jax.Array leaves are waited for.
        self.jax.block_until_ready(_leaves(output))

    def peak_memory(self) -> tuple[int, str]:
        """The allocator peak of the cell's device; on several, the largest of theirs (what one device must hold)."""
        if self.on_gpu:
            peaks = [(device.memory_stats() or {}).get("peak_bytes_in_use")
                     for device in self.devices[:self.cell_devices]]
            if peaks and all(peak is not None for peak in peaks):
                return int(max(peaks)), "jax_device_peak_bytes_in_use"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu", "cuda_runtime": None}
        if self.on_gpu:
            info["device_name"] = self.devices[0].device_kind
            info["device_count"] = len(self.devices)
        return info

    def tf32_available(self) -> bool:
        """Can this device run TF32 at all (a CUDA GPU of compute capability 8.0 or newer)?"""
        return bool(self.on_gpu and float(getattr(self.devices[0], "compute_capability", "0") or 0) >= 8.0)

    def precision_state(self) -> dict[str, Any]:
        precision = self.jax.config.jax_default_matmul_precision
        allows_tf32 = precision in (None, "default", "tensorfloat32", "bfloat16")
        ampere = self.tf32_available()
        # jax_default_matmul_precision governs dots and convolutions alike (one switch, both columns).
        return {"tf32_matmul": allows_tf32, "tf32_conv": allows_tf32, "matmul_precision": str(precision or "default"),
                "tf32_effective": bool(ampere and allows_tf32), "tf32_conv_effective": bool(ampere and allows_tf32)}

    def threads(self) -> int:
        return own_cpu_count()

    def gemm_tflops(self, dtype: str) -> float | None:
        """The ceiling's hook (fwbench.harness.ceiling): TFLOP/s of a square jnp.matmul in `dtype` ("bfloat16",
        "float16"), jitted, on this backend's device, best of a few."""
        from fwbench.harness import ceiling

        jnp, n = self.jax.numpy, ceiling.GEMM_SIZE
        keys = self.jax.random.split(self.jax.random.PRNGKey(0))
        a, b = (self.jax.random.normal(k, (n, n)).astype(getattr(jnp, dtype)) for k in keys)
        matmul = self.jax.jit(jnp.matmul)
        return ceiling.gemm_tflops_of(ceiling.best_gemm_seconds(lambda: matmul(a, b).block_until_ready()))


class TensorFlowBackend:
    """Stacks on TensorFlow (Keras 3 and Keras 2). TF GPU kernels are queued on streams; fetching a step
    output to the host waits for the work that produced it."""

    compile_cache_folder: str | None = None  # as TorchBackend's
    name = "tensorflow"
    label = "TensorFlow"

    def __init__(self):
        import tensorflow as tf

        self.tf = tf
        self.gpus = tf.config.list_physical_devices("GPU")
        self.on_gpu = bool(self.gpus)
        self.cell_devices = 1  # the first N devices run the cell (data_parallel_devices)

    def use_compile_cache(self, path: Path | None, compile_mode: str) -> bool | None:
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

    def comm_version(self, comm_backend: str) -> str | None:
        """MirroredStrategy's cross-device ops ship with TensorFlow (NCCL underneath on GPUs): TensorFlow's version."""
        return f"{comm_backend} (tensorflow {self.tf.__version__})"

    def data_parallel_devices(self, devices: int) -> int:
        """--devices N (tf.distribute.MirroredStrategy over the first N devices of this one process): on a CPU, N
        logical CPU devices over the cell's cores; and N inter-op threads, so that the replicas' ops can run at the
        same time. After configure() (whose single-device choices it replaces), before the runtime initialises.
        Returns the devices the strategy can use (GPUs as they are)."""
        self.cell_devices = devices
        tf = self.tf
        tf.config.threading.set_inter_op_parallelism_threads(devices)
        if self.gpus:
            return len(self.gpus)
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
        return devices

    def gpu_positions(self) -> tuple[int, ...]:
        """The framework's ordinals of the GPUs this process's steps run on: the first N (data_parallel_devices)."""
        return tuple(range(self.cell_devices))

    def sync(self, output: Any = None) -> None:
        for leaf in _leaves(output):
            if hasattr(leaf, "numpy"):
                leaf.numpy()

    def peak_memory(self) -> tuple[int, str]:
        """The allocator peak of the cell's GPU; on several, the largest of theirs (what one device must hold)."""
        if self.on_gpu:
            memory_info = self.tf.config.experimental.get_memory_info
            return max(int(memory_info(f"GPU:{i}")["peak"]) for i in range(self.cell_devices)), "tf_gpu_peak"
        return process_peak_rss_bytes(), "process_peak_rss"

    def device_info(self) -> dict[str, Any]:
        tf = self.tf
        info: dict[str, Any] = {"device": "cuda" if self.on_gpu else "cpu",
                                "cuda_runtime": tf.sysconfig.get_build_info().get("cuda_version")}
        if self.on_gpu:
            info["device_name"] = tf.config.experimental.get_device_details(self.gpus[0]).get("device_name")
            info["device_count"] = len(self.gpus)
        return info

    def tf32_available(self) -> bool:
        """Can this device run TF32 at all (a CUDA GPU of compute capability 8.0 or newer)?"""
        if not self.on_gpu:
            return False
        capability = self.tf.config.experimental.get_device_details(self.gpus[0]).get("compute_capability")
        return bool(capability and capability[0] >= 8)

    def precision_state(self) -> dict[str, Any]:
        tf = self.tf
        enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        ampere = self.tf32_available()
        # enable_tensor_float_32_execution governs matmuls and convolutions alike (one switch, both columns).
        return {"tf32_matmul": enabled, "tf32_conv": enabled, "matmul_precision": "tf32" if enabled else "float32",
                "tf32_effective": bool(ampere and enabled), "tf32_conv_effective": bool(ampere and enabled)}

    def threads(self) -> int:
        return int(self.tf.config.threading.get_intra_op_parallelism_threads())

    def gemm_tflops(self, dtype: str) -> float | None:
        """The ceiling's hook (fwbench.harness.ceiling): TFLOP/s of a square tf.matmul in `dtype` ("bfloat16",
        "float16"), best of a few (reading one element back waits for the product)."""
        from fwbench.harness import ceiling

        tf, n = self.tf, ceiling.GEMM_SIZE
        a, b = (tf.cast(tf.random.normal((n, n), seed=seed), getattr(tf, dtype)) for seed in (0, 1))
        return ceiling.gemm_tflops_of(ceiling.best_gemm_seconds(lambda: tf.matmul(a, b)[0, 0].numpy()))


def backend_for(stack_id: str, threads: int | None = None, devices: int = 1):
    """The harness backend of a stack, as its definition names it (fwbench.core.registry.Stack.harness_backend).

    `threads` and `devices` are applied before the framework starts where that must happen first (JAX)."""
    stack = prepare_framework(stack_id, threads, devices)
    return BACKENDS[stack.harness_backend]()


def prepare_framework(stack_id: str, threads: int | None = None, devices: int = 1) -> registry.Stack:
    """What must precede the framework's start (JAX's CPU pools and logical CPU devices), touching no device; again
    changes nothing (a held cell runs it before its imports ahead, fwbench.harness.hold)."""
    stack = registry.STACKS.get(stack_id)
    if stack is None:
        raise NotImplementedError(f"no harness backend for stack {stack_id!r}")
    if stack.harness_backend == JaxBackend.name:
        if threads is not None:
            _limit_cpus(threads)
        flag = f"--xla_force_host_platform_device_count={devices}"
        flags = os.environ.get("XLA_FLAGS", "")
        if devices > 1 and flag not in flags.split():
            # N logical CPU devices for keras.distribution (one process, SPMD); GPUs are counted as they are. XLA
            # reads the flag when JAX starts its CPU client, i.e. in the backend's constructor.
            os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()
    return stack


def device_started() -> list[str]:
    """The frameworks imported here that have started a device runtime (a CUDA context, JAX's backends); a held
    cell checks it has none after its imports ahead. Private attributes, read defensively: unknown is not listed."""
    import sys

    started = []
    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "cuda", None), "is_initialized", lambda: False)():
        started.append("torch (CUDA)")
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and getattr(bridge, "_backends", None):
        started.append("jax")
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is not None and getattr(getattr(context, "_context", None), "_context_handle", None) is not None:
        started.append("tensorflow")
    return started


# Stack.harness_backend -> the class that implements it.
BACKENDS = {TorchBackend.name: TorchBackend, JaxBackend.name: JaxBackend, TensorFlowBackend.name: TensorFlowBackend}
