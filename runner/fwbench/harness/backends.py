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

    def configure(self, threads: int, tf32: str) -> None:
        torch = self.torch
        torch.set_num_threads(threads)
        if tf32 == "on":
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
        torch = self.torch
        matmul_tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        cudnn_tf32 = bool(torch.backends.cudnn.allow_tf32)
        # TF32 only exists on Ampere+ GPUs; on the CPU the flags are recorded but have no effect.
        return {"tf32_matmul": matmul_tf32, "tf32_conv": cudnn_tf32,
                "matmul_precision": torch.get_float32_matmul_precision(),
                "tf32_effective": bool(self.on_gpu and matmul_tf32 and _ampere_or_newer(torch))}

    def threads(self) -> int:
        return int(self.torch.get_num_threads())

    def compile_stats(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters

        graph_breaks = sum(counters["graph_break"].values())
        return {
            "compiled_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(graph_breaks),
            "graph_break_reasons": sorted(str(r)[:200] for r in counters["graph_break"])[:20],
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]),
            "recompiles": int(counters["recompiles"].get("total", 0)) if "recompiles" in counters else 0,
        }


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


def backend_for(stack_id: str):
    """The harness backend of a stack (Keras stacks use the backend of their framework)."""
    if stack_id in ("native-torch", "keras3-torch"):
        return TorchBackend()
    raise NotImplementedError(f"no harness backend for stack {stack_id!r} yet")
