"""The wheelhouse installed on the host: every wheel checked against the lock, then installed without an index or
dependencies into a folder the kit puts on PYTHONPATH (kit_environment) for every process it starts; and which of
the kit's stacks then import."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.kit import wheelhouse
from fwbench.kit.image import STACK_MODULES
from fwbench.kit.layout import REPO, KitError, KitFolders
from fwbench.kit.log import log
from fwbench.kit.source import declared_commit


def install(wheels: Path, site: Path) -> None:
    """Check every locked wheel's SHA-256, then install them all into `site` without an index or deps."""
    entries = wheelhouse.locked_wheels()
    files = []
    for entry in entries:
        path = wheels / entry["filename"]
        if not path.is_file():
            raise KitError(f"{path} is missing: copy the wheelhouse (fwbench kit prepare) to {wheels}")
        if wheelhouse.sha256(path) != entry["sha256"]:
            raise KitError(f"{path.name}: its SHA-256 is not the one in {wheelhouse.LOCK.name}")
        files.append(path)
    stamp = wheelhouse_stamp()
    marker = site / ".kit-installed"
    if marker.is_file() and marker.read_text().strip() == stamp:
        log(f"wheelhouse already installed in {site}")
        return
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if pip.returncode == 0:
        # pip compiles every module one after another; compileall below does it on every core.
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                "--disable-pip-version-check", "--target", str(site), *map(str, files)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise KitError(f"pip install --no-index --no-deps failed: {done.stderr.strip()[-500:]}")
    else:
        # No pip in the image: a wheel is a zip of its files as installed (these have no .data scripts).
        for path in files:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(site)
    compiled = compile_site(site)
    write_atomically(marker, stamp + "\n")
    log(f"installed {len(files)} wheels into {site} (--no-index --no-deps){compiled}")


def compile_site(site: Path) -> str:
    """Byte-compile the installed wheels on every core, as pip would have one module at a time: every cell process
    then loads them compiled, even where the host sets PYTHONDONTWRITEBYTECODE (no process would write them). A
    module that does not compile is left as pip leaves it (imported from source); the note says how many."""
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site)], capture_output=True,
                          text=True)
    if done.returncode == 0:
        return ", byte-compiled"
    failed = sum(1 for line in done.stdout.splitlines() if line.startswith("*** Error compiling"))
    return f", byte-compiled but for {failed or 'some'} module(s) (imported from source)"


def wheelhouse_stamp() -> str:
    """A digest of the locked wheels (their SHA-256s): equal stamps, the same wheels installed."""
    return hashlib.sha256("".join(e["sha256"] for e in wheelhouse.locked_wheels()).encode()).hexdigest()


def kit_environment(folders: KitFolders) -> dict[str, str]:
    """The kit's path (the installed wheels, this checkout's runner/ and aggregator/), and the commit it runs
    declared to every cell (its rows' source_commit): the host's copy of the repository can carry a stale .git,
    which the cells would otherwise read."""
    paths = [str(folders.site), str(REPO / "runner"), str(REPO / "aggregator"), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    revision = declared_commit(folders.source)
    if revision and "FWBENCH_SOURCE_COMMIT" not in os.environ:
        environment["FWBENCH_SOURCE_COMMIT"] = revision
    return environment


def check_imports(folders: KitFolders, modules, environment: dict[str, str] | None = None) -> list[str]:
    """The modules that do not import in a fresh interpreter with the kit's path (one line each); `environment`
    adds a stack's switches (KERAS_BACKEND)."""
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        print(f'{name}: {type(exc).__name__}: {exc}'.splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                          env={**kit_environment(folders), "KERAS_BACKEND": "torch", **(environment or {})})
    return [line for line in done.stdout.splitlines() if line.strip()] + (
        [f"check failed: {done.stderr.strip()[-300:]}"] if done.returncode else [])


def broken_stacks(folders: KitFolders, stacks) -> dict[str, str]:
    """Stack -> why it cannot run here (its imports fail), for the stacks of the plan; each is checked with its own
    switches (Keras reads KERAS_BACKEND at import)."""
    from fwbench.core import registry

    broken = {}
    for stack in dict.fromkeys(stacks):
        failures = check_imports(folders, STACK_MODULES.get(stack, ()), registry.get_stack(stack).environment())
        if failures:
            broken[stack] = "does not import here: " + "; ".join(failures)
    return broken
