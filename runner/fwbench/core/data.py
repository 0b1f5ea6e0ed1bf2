"""Shared synthetic inputs: generated once per (preset, seed), identical bytes for every stack.

Layout: DIR/<preset>/<task_id>/<array>.npy plus DIR/<preset>/manifest.json holding the
SHA-256 of every file and one combined digest per task. `.npy` bytes are deterministic
(unlike `.npz`, whose zip headers carry timestamps), so the same seed gives the same digest
on every machine. Images are NHWC float32; each stack transposes to its own layout.
Text is token ids (no tokenizer anywhere) with an all-ones padding mask.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np

from fwbench.core import registry
from fwbench.core.atomic import write_atomically

MANIFEST = "manifest.json"
DATA_FORMAT_VERSION = 1


class DataError(RuntimeError):
    """Missing or corrupt shared data."""


def task_arrays(task_id: str, preset: str, seed: int) -> dict[str, np.ndarray]:
    """The inputs of one task, from a generator seeded by (seed, task_id) only.

    What the arrays are is the model's definition (fwbench.core.models); this module only seeds, writes,
    hashes and verifies them."""
    wl = registry.workload(task_id, preset)
    # A per-task stream, so adding a task never changes another task's bytes.
    task_seed = int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(task_seed)
    return wl.model.inputs(preset, wl.task.kind, wl.batch_size, rng)


def combined_digest(file_digests: dict[str, str]) -> str:
    lines = "".join(f"{name}:{digest}\n" for name, digest in sorted(file_digests.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def generate(out_dir: Path, preset: str, seed: int = 0, tasks: list[str] | None = None) -> dict:
    """Write every task's inputs for `preset` under out_dir/preset, with a manifest. Idempotent."""
    registry.get_preset(preset)
    root = Path(out_dir) / preset
    root.mkdir(parents=True, exist_ok=True)
    manifest = {"format_version": DATA_FORMAT_VERSION, "preset": preset, "seed": seed, "tasks": {}}
    old = _read_manifest(root) if (root / MANIFEST).exists() else None
    if old and old.get("seed") == seed:
        manifest["tasks"].update(old.get("tasks", {}))
    for task_id in tasks or list(registry.TASKS):
        registry.get_task(task_id)
        task_dir = root / task_id
        task_dir.mkdir(exist_ok=True)
        files = {}
        for name, array in task_arrays(task_id, preset, seed).items():
            payload = _npy_bytes(array)
            write_atomically(task_dir / f"{name}.npy", payload)
            files[name] = {"sha256": hashlib.sha256(payload).hexdigest(),
                           "shape": list(array.shape), "dtype": str(array.dtype)}
        manifest["tasks"][task_id] = {
            "files": files, "sha256": combined_digest({n: f["sha256"] for n, f in files.items()})}
    write_atomically(root / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
    return manifest


def _read_manifest(root: Path) -> dict:
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read {root / MANIFEST}: {exc}") from None


def has_task(data_dir: Path, preset: str, task_id: str, seed: int) -> bool:
    root = Path(data_dir) / preset
    if not (root / MANIFEST).exists():
        return False
    manifest = _read_manifest(root)
    return manifest.get("seed") == seed and task_id in manifest.get("tasks", {})


def load(data_dir: Path, preset: str, task_id: str) -> tuple[dict[str, np.ndarray], str, int]:
    """Read one task's arrays, verifying every byte against the manifest.

    Returns (arrays, combined sha256, seed). Cells call this; they never generate data.
    """
    root = Path(data_dir) / preset
    manifest = _read_manifest(root)
    entry = manifest.get("tasks", {}).get(task_id)
    if entry is None:
        raise DataError(f"{root / MANIFEST} has no data for task {task_id!r}: run `fwbench data --preset {preset}`")
    arrays, digests = {}, {}
    for name, meta in entry["files"].items():
        path = root / task_id / f"{name}.npy"
        try:
            payload = path.read_bytes()
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc.strerror}") from None
        digests[name] = hashlib.sha256(payload).hexdigest()
        if digests[name] != meta["sha256"]:
            raise DataError(f"{path} does not match its SHA-256 in the manifest (corrupt or edited)")
        arrays[name] = np.load(io.BytesIO(payload), allow_pickle=False)
    return arrays, combined_digest(digests), int(manifest["seed"])
