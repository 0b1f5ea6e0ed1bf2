"""The GPU kit's install and host facts: the wheelhouse checked against its lock and installed without an
index or dependencies into a folder put on PYTHONPATH, then what the host is (NVML, nvidia-smi, every
installed version and how it differs from the repository's `current` pins)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.pins import normalise, pinned_versions

from kit_plan import KitError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LOCK = HERE / "wheelhouse.lock.json"
KIT_STACKS = ("native-torch", "keras3-jax", "keras3-torch")


# Where log() also appends its lines (the kit's kit.log, beside the cells' output), once the kit has set it.
LOG_PATH: Path | None = None
# Written here by `run_kit.py prepare` (git rev-parse), carried to the host: its copy of the repository has no .git.
SOURCE = REPO / ".gpu-kit" / "source.json"


def log(message: str) -> None:
    line = f"[kit {datetime.now(timezone.utc):%H:%M:%S}] {message}"
    print(line, flush=True)
    if LOG_PATH is not None:
        with open(LOG_PATH, "a") as handle:
            handle.write(line + "\n")


# -- install -----------------------------------------------------------------------------------------

def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locked_wheels() -> list[dict]:
    return locked_wheels_for(python_tag())


def locked_wheels_for(tag: str) -> list[dict]:
    lock = json.loads(LOCK.read_text())
    if tag not in lock:
        raise KitError(f"{LOCK.name} has no wheels for {tag} (it has {', '.join(sorted(lock))}): "
                       f"make_wheelhouse.py --python-version {tag[2]}.{tag[3:]}")
    return lock[tag]


def install(wheels: Path, site: Path) -> None:
    """Check every locked wheel's SHA-256, then install them all into `site` without an index or deps."""
    entries = locked_wheels()
    files = []
    for entry in entries:
        path = wheels / entry["filename"]
        if not path.is_file():
            raise KitError(f"{path} is missing: copy the wheelhouse (make_wheelhouse.py) to {wheels}")
        if sha256(path) != entry["sha256"]:
            raise KitError(f"{path.name}: its SHA-256 is not the one in {LOCK.name}")
        files.append(path)
    stamp = hashlib.sha256("".join(e["sha256"] for e in entries).encode()).hexdigest()
    marker = site / ".kit-installed"
    if marker.is_file() and marker.read_text().strip() == stamp:
        log(f"wheelhouse already installed in {site}")
        return
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if pip.returncode == 0:
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                "--disable-pip-version-check", "--target", str(site), *map(str, files)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise KitError(f"pip install --no-index --no-deps failed: {done.stderr.strip()[-500:]}")
    else:
        # No pip in the image: a wheel is a zip of its files as installed (these have no .data scripts).
        for path in files:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(site)
    write_atomically(marker, stamp + "\n")
    log(f"installed {len(files)} wheels into {site} (--no-index --no-deps)")


def kit_environment(site: Path) -> dict[str, str]:
    """The kit's path, and the commit it runs declared to every cell (its rows' source_commit): the host's copy of
    the repository can carry a stale .git, which the cells would otherwise read."""
    paths = [str(site), str(REPO / "runner"), str(REPO / "aggregator"), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    revision = source_revision()["git_revision"]
    if revision and "FWBENCH_SOURCE_COMMIT" not in os.environ:
        environment["FWBENCH_SOURCE_COMMIT"] = revision
    return environment


# What each of the kit's stacks imports to run its cells (fwbench's own modules are checked apart: without them
# nothing runs).
STACK_MODULES = {
    "native-torch": ("torch", "transformers", "peft", "diffusers", "segment_anything"),
    "keras3-jax": ("jax", "keras", "keras_hub", "grain"),
    "keras3-torch": ("torch", "keras", "keras_hub", "grain"),
}
FWBENCH_MODULES = ("fwbench.cli.commands", "fwbench_aggregator.cli")


def check_imports(site: Path, modules: list[str] | tuple[str, ...], environment: dict[str, str] | None = None
                  ) -> list[str]:
    """The modules that do not import in a fresh interpreter with the kit's path (one line each); `environment`
    adds a stack's switches (KERAS_BACKEND)."""
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        print(f'{name}: {type(exc).__name__}: {exc}'.splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                          env={**kit_environment(site), "KERAS_BACKEND": "torch", **(environment or {})})
    return [line for line in done.stdout.splitlines() if line.strip()] + (
        [f"check failed: {done.stderr.strip()[-300:]}"] if done.returncode else [])


def broken_stacks(site: Path, stacks: list[str]) -> dict[str, str]:
    """Stack -> why it cannot run here (its imports fail), for the stacks of the plan; each is checked with its own
    switches (Keras reads KERAS_BACKEND at import)."""
    from fwbench.core import registry

    broken = {}
    for stack in dict.fromkeys(stacks):
        failures = check_imports(site, STACK_MODULES.get(stack, ()), registry.get_stack(stack).environment())
        if failures:
            broken[stack] = "does not import here: " + "; ".join(failures)
    return broken


# -- host facts --------------------------------------------------------------------------------------

def installed_versions(site: Path) -> dict[str, str]:
    paths = [str(site), *sys.path]
    return {normalise(dist.metadata["Name"]): dist.version
            for dist in metadata.distributions(path=paths) if dist.metadata["Name"]}


def pin_differences(versions: dict[str, str]) -> dict[str, list[str]]:
    """Per stack: how the host's libraries differ from the repository's `current` pins (the rows carry the
    host's real versions in library_versions; this says at a glance where they are not the pinned ones)."""
    differences = {}
    for stack in KIT_STACKS:
        pins = pinned_versions(REPO / "images" / stack / "current" / "requirements.txt")
        differences[stack] = [f"{name} {versions.get(name, 'absent')} (pinned {pinned})"
                              for name, pinned in sorted(pins.items()) if versions.get(name) != pinned]
    return differences


def usable_gpu_count() -> int:
    """The GPUs fwbench's runner would give cells here (NVML, else nvidia-smi; narrowed to CUDA_VISIBLE_DEVICES):
    the kit's data-parallel cells ask for all of them, exactly what the runner can place."""
    from fwbench.engines.slots import usable_gpus

    return len(usable_gpus())


def record_host(out: Path, site: Path) -> dict:
    from fwbench.harness.envinfo import cpu_model, nvml_info

    versions = installed_versions(site)
    facts = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "python_executable": sys.executable, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "nvml": nvml_info(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "usable_gpus": usable_gpu_count(),
        **source_revision(), "wheelhouse": locked_wheels(),
        "versions": dict(sorted(versions.items())), "differences_from_current_pins": pin_differences(versions),
    }
    write_atomically(out / "host.json", json.dumps(facts, indent=2) + "\n")
    smi = shutil.which("nvidia-smi")
    try:
        text = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=60).stdout if smi else \
            "nvidia-smi: not found\n"
    except subprocess.TimeoutExpired:
        text = "nvidia-smi -q: no answer within 60 s\n"
    write_atomically(out / "nvidia-smi.txt", text)
    return facts


def git_source() -> dict:
    """This checkout's commit and whether files differ from it (None where there is no git or no .git)."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    revision, changes = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return {"git_revision": revision.strip() if revision else None,
            "git_dirty": None if changes is None else bool(changes.strip())}


def source_revision() -> dict:
    """The commit the kit runs: what `prepare` wrote beside the wheelhouse where it did (on the GPU host the copy of
    the repository may carry a stale .git: seen there, its HEAD was the session's first commit, not the one that
    ran), else git's, else FWBENCH_GIT_REVISION; with where it was read and what git says beside it."""
    found = git_source()
    if SOURCE.is_file():
        saved = json.loads(SOURCE.read_text())
        return {"git_revision": saved.get("git_revision"), "git_dirty": saved.get("git_dirty"),
                "git_revision_from": f"{SOURCE.name} (prepared {saved.get('prepared_at')})",
                "git_revision_seen_by_git": found["git_revision"]}
    if found["git_revision"]:
        return {**found, "git_revision_from": "git"}
    revision = os.environ.get("FWBENCH_GIT_REVISION")
    return {"git_revision": revision, "git_dirty": None,
            "git_revision_from": "FWBENCH_GIT_REVISION" if revision else "nowhere (no .git, no source.json)"}
