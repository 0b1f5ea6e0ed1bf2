"""The wheelhouse an offline GPU host needs: what its Python image lacks to run the native-torch, keras3-jax and
keras3-torch stacks (keras, keras-hub, diffusers, segment-anything, Grain and the small packages they import), each
at the version of the repository's `current` pin set, checked against the SHA-256 recorded in
data/wheelhouse.lock.json, and under the size the host can receive. `fwbench kit prepare` makes it.

Left out on purpose: TensorFlow (hundreds of MB; the image has none) and so keras-cv, which refuses to import
without it (Keras 3 Stable Diffusion cells cannot run on such a host: the plan leaves them out; the other Keras
cells read their inputs through Grain there instead of tf.data, and their rows say so); tensorflow-text and
kagglehub (keras-hub declares them, but imports them only for tokenizers and downloads, which no cell uses:
everything is installed with --no-deps).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.pins import normalise, pinned_versions
from fwbench.kit.layout import LOCK, REPO, KitError

LIMIT_BYTES = 60 * 2**20
HOST_PYTHON = "3.12"
# Distribution -> the pin file of the `current` pin set that fixes its version (the versions the images use),
# or the version itself for what no image installs.
JAX_LOCK = "images/keras3-jax/current/requirements-cpu.lock"
SOURCES = {
    "keras": "images/keras3-jax/current/requirements.txt",
    "keras-hub": "images/keras3-jax/current/requirements.txt",
    "namex": JAX_LOCK,   # keras imports it (its API export helper)
    "optree": JAX_LOCK,  # keras imports it (tree utilities)
    "diffusers": "images/native-torch/current/requirements.txt",
    "segment-anything": "images/native-torch/current/requirements.txt",
    # Grain: the Keras cells' input pipeline where TensorFlow is absent (fwbench.workloads.keras.common);
    # the images have TensorFlow and use tf.data, so no pin set names these.
    "grain": "==0.2.18",
    "array-record": JAX_LOCK,
    "etils": JAX_LOCK,
    "cloudpickle": "==3.1.3",
    "portpicker": "==1.6.0",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def python_tag(version: str | None = None) -> str:
    """'cp312' for '3.12' (default: this interpreter's)."""
    major, minor = (version.split(".")[:2] if version else (sys.version_info.major, sys.version_info.minor))
    return f"cp{major}{minor}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_lock() -> dict:
    return json.loads(LOCK.read_text()) if LOCK.is_file() else {}


def locked_wheels(tag: str | None = None) -> list[dict]:
    """The locked wheels of a Python tag (default: this interpreter's)."""
    tag = tag or python_tag()
    lock = read_lock()
    if tag not in lock:
        raise KitError(f"{LOCK.name} has no wheels for {tag} (it has {', '.join(sorted(lock))}): "
                       f"fwbench kit prepare --python-version {tag[2]}.{tag[3:]} --update-lock")
    return lock[tag]


def differing(wheels: Path, tag: str) -> list[str]:
    """The locked wheels missing from `wheels` or with other bytes."""
    return [entry["filename"] for entry in locked_wheels(tag) if not (wheels / entry["filename"]).is_file()
            or sha256(wheels / entry["filename"]) != entry["sha256"]]


def pinned(name: str) -> str:
    if SOURCES[name].startswith("=="):
        return SOURCES[name][2:]
    versions = pinned_versions(REPO / SOURCES[name])
    if name not in versions:
        raise KitError(f"{SOURCES[name]} pins no version of {name}")
    return versions[name]


def wheel_distribution(filename: str) -> str:
    return normalise(filename.split("-", 1)[0])


def download(name: str, version: str, python_version: str, into: Path) -> Path:
    """One wheel for Linux x86_64 CPython `python_version` (a pure-Python one where that is all there is)."""
    before = set(into.iterdir())
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", "--dest", str(into),
            *[arg for platform in PLATFORMS for arg in ("--platform", platform)], f"{name}=={version}"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise KitError(f"pip could not download {name}=={version} for cp{python_version.replace('.', '')}: {tail}")
    new = [path for path in set(into.iterdir()) - before if wheel_distribution(path.name) == name]
    if len(new) != 1:
        raise KitError(f"expected one wheel of {name}=={version}, pip left {sorted(p.name for p in new)}")
    return new[0]


def build(dest: Path, python_version: str = HOST_PYTHON, *, update_lock: bool = False) -> tuple[list[dict], int]:
    """Download every wheel into dest (replacing what was there) and check it against the lock (update_lock:
    record the downloaded hashes instead, after a pin changed). Returns the wheels and their bytes."""
    tag = python_tag(python_version)
    lock = read_lock()
    locked = {entry["filename"]: entry for entry in lock.get(tag, [])}
    dest.mkdir(parents=True, exist_ok=True)
    entries = []
    with tempfile.TemporaryDirectory(prefix="wheelhouse-", dir=dest.parent) as staging:
        staging_dir = Path(staging)
        for name in SOURCES:
            version = pinned(name)
            wheel = download(name, version, python_version, staging_dir)
            entry = {"name": name, "version": version, "filename": wheel.name, "sha256": sha256(wheel),
                     "bytes": wheel.stat().st_size}
            known = locked.get(wheel.name)
            if not update_lock:
                if known is None:
                    raise KitError(f"{wheel.name} is not in {LOCK.name} for {tag} (a pin changed? run with "
                                   "--update-lock and commit the lock)")
                if known["sha256"] != entry["sha256"]:
                    raise KitError(f"{wheel.name}: sha256 {entry['sha256']} differs from the locked "
                                   f"{known['sha256']}")
            entries.append(entry)
        total = sum(entry["bytes"] for entry in entries)
        if total > LIMIT_BYTES:
            raise KitError(f"the wheelhouse is {total / 2**20:.1f} MiB, over the {LIMIT_BYTES / 2**20:.0f} MiB "
                           "the host can receive")
        for old in dest.glob("*.whl"):
            old.unlink()
        for entry in entries:
            (staging_dir / entry["filename"]).replace(dest / entry["filename"])
    write_atomically(dest / "manifest.json", json.dumps({"python": tag, "wheels": entries, "total_bytes": total},
                                                        indent=2) + "\n")
    if update_lock:
        lock[tag] = [{key: entry[key] for key in ("name", "version", "filename", "sha256", "bytes")}
                     for entry in entries]
        write_atomically(LOCK, json.dumps(dict(sorted(lock.items())), indent=2) + "\n")
    return entries, total
