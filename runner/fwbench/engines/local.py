"""The `local` and `current` engines: a cell is a Python subprocess.

`local` gives each stack its own virtual environment, built from the same requirements file its
Docker image installs (images/<stack>/requirements.txt), and cached under $FWBENCH_HOME/venvs keyed
by that file's hash. fwbench itself is put on the environment's path with a .pth file pointing at
this checkout, so the cells always run the harness you are looking at.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from fwbench.engines import CellOutcome, EngineError, cell_environment, launch_process, write_spec
from fwbench.spec import CellSpec

REPO_ROOT = Path(__file__).resolve().parents[3]
READY_MARKER = ".fwbench-ready"
# Bump to rebuild every cached environment after a change to how they are made.
ENV_LAYOUT_VERSION = "1"


def fwbench_home() -> Path:
    return Path(os.environ.get("FWBENCH_HOME", Path.home() / ".cache" / "fwbench"))


def requirements_file(stack: str) -> Path:
    path = REPO_ROOT / "images" / stack / "requirements.txt"
    if not path.is_file():
        raise EngineError(f"no requirements file for stack '{stack}' at {path} "
                          "(the local engine needs a source checkout of fwbench)")
    return path


class StackEnvironment:
    def __init__(self, stack: str, home: Path | None = None):
        self.stack = stack
        self.requirements = requirements_file(stack)
        key = hashlib.sha256()
        key.update(self.requirements.read_bytes())
        key.update(f"{platform.python_version()}:{ENV_LAYOUT_VERSION}".encode())
        self.path = (home or fwbench_home()) / "venvs" / f"{stack}-{key.hexdigest()[:12]}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        return (self.path / READY_MARKER).is_file()

    @property
    def log_path(self) -> Path:
        return self.path.with_name(self.path.name + ".build.log")

    def build(self) -> None:
        """Create the environment (idempotent; a half-built one from an interrupted build is redone)."""
        if self.ready:
            return
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log:
            def run(*argv: str | Path) -> str:
                log.write(f"$ {' '.join(map(str, argv))}\n")
                log.flush()
                done = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, stdin=subprocess.DEVNULL)
                log.write(done.stdout)
                if done.returncode != 0:
                    raise EngineError(f"building the {self.stack} environment failed "
                                      f"(exit {done.returncode}); see {self.log_path}")
                return done.stdout

            run(sys.executable, "-m", "venv", self.path)
            run(self.python, "-m", "pip", "install", "--disable-pip-version-check", "-r", self.requirements)
            purelib = run(self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
            (Path(purelib.strip().splitlines()[-1]) / "fwbench-src.pth").write_text(f"{REPO_ROOT / 'runner'}\n")
            run(self.python, "-c", "import fwbench.harness.cell")
        (self.path / READY_MARKER).write_text(self.requirements.read_text())


class PythonEngine:
    """Runs `python -m fwbench.harness.cell` with the interpreter chosen for the stack."""

    def __init__(self, name: str, interpreter_for: Callable[[str], Path], variant: str):
        self.name = name
        self.variant = variant  # venv (local), or the image's variant / host (current)
        self._interpreter_for = interpreter_for

    def device_model(self) -> str:
        from fwbench.harness.envinfo import device_model, gpu_model

        return device_model(gpu_model() is not None)

    def prepare(self, stack: str) -> None:
        self._interpreter_for(stack)

    def run_cell(self, spec: CellSpec, record_path: Path, log_path: Path) -> CellOutcome:
        python = self._interpreter_for(spec.stack)
        spec_path = write_spec(spec, record_path.parent)
        try:
            argv = [str(python), "-m", "fwbench.harness.cell", str(spec_path), str(record_path)]
            env = cell_environment(spec)
            if self.name == "local":
                # Environments are cached per requirements hash and shared by every checkout: put this
                # checkout's fwbench first, whichever checkout built the environment (its .pth).
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT / "runner"), env.get("PYTHONPATH")) if p)
            return launch_process(argv, spec, record_path, log_path, env)
        finally:
            spec_path.unlink(missing_ok=True)


def local_engine(home: Path | None = None) -> PythonEngine:
    environments: dict[str, StackEnvironment] = {}

    def interpreter(stack: str) -> Path:
        if stack not in environments:
            environment = StackEnvironment(stack, home)
            environment.build()
            environments[stack] = environment
        return environments[stack].python

    return PythonEngine("local", interpreter, "venv")


def current_engine() -> PythonEngine:
    from fwbench.harness.envinfo import image_manifest

    manifest = image_manifest() or {}
    return PythonEngine("current", lambda stack: Path(sys.executable), str(manifest.get("variant") or "host"))
