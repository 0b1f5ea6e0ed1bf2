"""A model file's inputs, made once and checked by SHA-256, and what its Keras cells leave for its PyTorch twin.

The inputs come from the file's `make_inputs(batch_size, rng)` with a generator seeded by the data seed only. The
first cell that needs them makes them (the runner may not have the frameworks the file imports) under a lock, and
writes them beside the shared data, as fwbench.core.data writes the registry's: DATA/model-files/<sha256[:16]>/
bs<batch>-seed<seed>/<name>.npy with a manifest of their SHA-256s; every later cell, on any backend, reads and
checks those bytes. Plain Python and NumPy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fwbench.core.atomic import write_atomically
from fwbench.core.data import DataError, combined_digest
from fwbench.core.model_file import SHA256, ModelFileError, check_inputs

INPUTS_FOLDER = "model-files"
MANIFEST = "manifest.json"
KERAS_PARAMS = "keras-params.json"


def input_rng(seed: int) -> np.random.Generator:
    """The generator make_inputs gets: from the data seed only, so every backend's cell makes the same bytes."""
    return np.random.default_rng(int.from_bytes(hashlib.sha256(f"{seed}:model-file".encode()).digest()[:8], "little"))


def model_folder(data_dir: str | Path, sha256: str) -> Path:
    """Where a model file's inputs (and what its Keras cells found: keras-params.json) are kept."""
    if not SHA256.match(sha256 or ""):
        raise ModelFileError(f"not a SHA-256: {sha256!r}")
    return Path(data_dir) / INPUTS_FOLDER / sha256[:16]


def inputs_folder(data_dir: str | Path, sha256: str, batch: int, seed: int) -> Path:
    return model_folder(data_dir, sha256) / f"bs{batch}-seed{seed}"


def load_or_make(folder: Path, make: Callable[[], Any], batch: int) -> tuple[dict[str, np.ndarray], str, bool]:
    """The inputs in `folder`, checked against their manifest, or, the first time, `make()`'s checked and written
    there with one (under a lock, so cells started together make them once). Returns (arrays, combined SHA-256,
    whether this call made them)."""
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock"):
        if (folder / MANIFEST).is_file():
            arrays, digest = _load(folder)
            return arrays, digest, False
        arrays = check_inputs(make(), batch)
        files = {}
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.save(buffer, array, allow_pickle=False)
            write_atomically(folder / f"{name}.npy", buffer.getvalue())
            files[name] = {"sha256": hashlib.sha256(buffer.getvalue()).hexdigest(), "shape": list(array.shape),
                           "dtype": str(array.dtype)}
        digest = combined_digest({name: meta["sha256"] for name, meta in files.items()})
        write_atomically(folder / MANIFEST, json.dumps({"batch": batch, "files": files, "sha256": digest},
                                                       indent=2, sort_keys=True))
        return arrays, digest, True


def _load(folder: Path) -> tuple[dict[str, np.ndarray], str]:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        entries = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read {folder / MANIFEST}: {exc}") from None
    arrays, digests = {}, {}
    for name, meta in entries.items():
        path = folder / f"{name}.npy"
        try:
            payload = path.read_bytes()
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc.strerror}") from None
        digests[name] = hashlib.sha256(payload).hexdigest()
        if digests[name] != meta.get("sha256"):
            raise DataError(f"{path} does not match its SHA-256 in the manifest (corrupt or edited)")
        arrays[name] = np.load(io.BytesIO(payload), allow_pickle=False)
    return arrays, combined_digest(digests)


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the twin check: what the Keras cells of a file found, read by its native-torch cells --------------------------

def write_keras_params(folder: Path, trainable: int, stack: str) -> None:
    """A Keras cell's trainable parameter count, for the file's PyTorch twin to be checked against."""
    write_atomically(folder / KERAS_PARAMS, json.dumps({"params_trainable": int(trainable), "stack": stack}))


def read_keras_params(folder: Path) -> dict | None:
    try:
        found = json.loads((folder / KERAS_PARAMS).read_text())
        return found if isinstance(found.get("params_trainable"), int) else None
    except (OSError, ValueError, AttributeError):
        return None


def twin_check(torch_trainable: int, keras: dict | None) -> tuple[int | None, bool | None, str]:
    """(the Keras model's trainable parameters, whether the twin has as many, one line saying so)."""
    if keras is None:
        return None, None, ("not checked: no Keras cell of this file had built its model before the twin ran "
                            "(fwbench run starts the Keras stacks first; --parallel may not)")
    count = keras["params_trainable"]
    if count == torch_trainable:
        return count, True, f"the twin and the Keras model both have {count:,} trainable parameters"
    return count, False, (f"the twin has {torch_trainable:,} trainable parameters, the Keras model ({keras.get('stack')}) "
                          f"{count:,}: not the same model")
