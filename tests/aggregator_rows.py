"""Synthetic result rows for the aggregator tests, written with the real writer (fwbench.core.results.write_row)."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from pathlib import Path

import numpy as np

from fwbench.core import registry
from fwbench.core.results import write_row

LIBRARY_VERSIONS = {"torch": "2.2.1", "transformers": "4.38.2"}


def record(stack: str, task: str, *, preset: str = "tiny", compile_mode: str | None = None, repeat: int = 0,
           step_ms=None, status: str = "ok", error_message: str | None = None, started_at=None,
           record_id: str | None = None, **extra) -> dict:
    compile_mode = compile_mode or registry.STACKS[stack].compile_modes[0]
    t = registry.TASKS.get(task) or registry.model_file_task(task)  # a model file's task (fwbench run --model)
    steps = None if step_ms is None else [float(x) for x in step_ms]
    rec = dict(
        fwbench_version="0.1.0", run_id="test", record_id=record_id or uuid.uuid4().hex,
        cell_id=f"{stack}.{task}.{preset}.compile-{compile_mode}", stack=stack,
        family=registry.STACKS[stack].family, framework=registry.STACKS[stack].framework,
        framework_version="9.9", model=t.model, task=task, task_kind=t.kind, preset=preset,
        batch_size=registry.workload(task, preset).batch_size, compile_mode=compile_mode, repeat=repeat,
        status=status, error_type=None if status == "ok" else "RuntimeError", error_message=error_message,
        engine="local", pin_set="current", jit_policy="published", image_variant="venv", device_model="Test CPU", threads=2, cpu_count=2,
        warmup_steps=2, data_seed=0,
        started_at=started_at or dt.datetime(2026, 1, 1, 12, 0, repeat, tzinfo=dt.timezone.utc),
        timed_steps=len(steps) if steps else 20,  # a failed row still carries its spec's steps
        ms_per_step=float(np.mean(steps)) if (steps and status == "ok") else None, step_ms=steps,
        per_step_sync=True, device="cpu", device_name="Test CPU", tf32_setting="default",
        tf32_matmul=False, tf32_effective=False, matmul_precision="highest",
        compiled_graphs=(2 if compile_mode not in ("none", "xla") else 0), graph_breaks=0,
        compile_took_effect=(True if compile_mode not in ("none", "xla") else None),
        python_version="3.11.7", library_versions=LIBRARY_VERSIONS,
    )
    if preset == "paper" and "device" not in extra:  # the published sizes are measured on a GPU
        rec.update(device="cuda", device_name="NVIDIA A100-SXM4-40GB", device_model="NVIDIA A100-SXM4-40GB")
    rec.update(extra)
    return rec


def write(out: Path, rec: dict) -> Path:
    """Same layout as the harness: <out>/<preset>/<stack>/<task>.compile-<mode>.r<repeat>.parquet."""
    path = (Path(out) / rec["preset"] / rec["stack"]
            / f"{rec['task']}.compile-{rec['compile_mode']}.r{rec['repeat']}.parquet")
    return write_row(rec, path)


def samples(rng: np.random.Generator, centre: float, n: int = 20, spread: float = 0.05) -> np.ndarray:
    """Skewed step times around `centre` ms (log-normal, like real step timings)."""
    return centre * np.exp(rng.normal(0, spread, n))


def write_matrix(out: Path, centres: dict[tuple[str, str, str], float], *, repeats: int = 3, steps: int = 20,
                 seed: int = 0, preset: str = "tiny", slow: dict | None = None,
                 spread: float = 0.05) -> list[Path]:
    """One file per (stack, compile mode, task, repeat); `slow` multiplies chosen cells' times."""
    rng = np.random.default_rng(seed)
    paths = []
    for (stack, mode, task), centre in centres.items():
        factor = (slow or {}).get((stack, mode, task), 1.0)
        for r in range(repeats):
            paths.append(write(out, record(stack, task, preset=preset, compile_mode=mode, repeat=r,
                                           step_ms=samples(rng, centre * factor, steps, spread))))
    return paths


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> SHA-256 of every file under root (to prove inputs are byte-for-byte unchanged)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


# Five stacks, published-like orderings, two tasks: enough for Keras 3 best and every speed-up column.
CENTRES = {
    ("keras3-tensorflow", "xla", "bert-fit"): 21.0, ("keras3-jax", "xla", "bert-fit"): 22.0,
    ("keras3-torch", "none", "bert-fit"): 80.0, ("keras2-tensorflow", "xla", "bert-fit"): 48.0,
    ("native-torch", "none", "bert-fit"): 69.0, ("native-torch", "reduce-overhead", "bert-fit"): 20.0,
    ("keras3-tensorflow", "xla", "sam-predict"): 44.0, ("keras3-jax", "xla", "sam-predict"): 37.0,
    ("keras3-torch", "none", "sam-predict"): 172.0, ("keras2-tensorflow", "xla", "sam-predict"): 186.0,
    ("native-torch", "none", "sam-predict"): 157.0, ("native-torch", "reduce-overhead", "sam-predict"): 146.0,
}
