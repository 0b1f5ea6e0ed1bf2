"""The `local` and `current` engines: a cell is a Python subprocess.

`local` gives each stack and pin set its own virtual environment, installed from the same hash-locked
file its Docker image installs (images/<stack>/<pin-set>/requirements-cpu.lock; off Linux x86_64 /
CPython 3.11, which the locks are resolved for, from that folder's requirements.txt instead), cached
under $FWBENCH_HOME/venvs keyed by that file's hash. fwbench itself is put on the environment's path
with a .pth file pointing at this checkout, so the cells always run the harness you are looking at.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from fwbench.engines import CellOutcome, EngineError, cell_environment, launch_process, write_spec
from fwbench.core.pins import DEFAULT_PIN_SET, LOCKED_PYTHON
from fwbench.core.spec import CellSpec

REPO_ROOT = Path(__file__).resolve().parents[3]
READY_MARKER = ".fwbench-ready"
# Bump to rebuild every cached environment after a change to how they are made.
ENV_LAYOUT_VERSION = "2"
# The platform images/lock.sh resolves the lock files for.
LOCKED_PLATFORM = ("Linux", "x86_64", LOCKED_PYTHON)


def fwbench_home() -> Path:
    return Path(os.environ.get("FWBENCH_HOME", Path.home() / ".cache" / "fwbench"))


def pin_set_dir(stack: str, pin_set: str) -> Path:
    """images/<stack>/<pin-set>/: the stack's requirements and lock files for that pin set."""
    path = REPO_ROOT / "images" / stack / pin_set
    if not (path / "requirements.txt").is_file():
        raise EngineError(f"no requirements for stack '{stack}' and pin set '{pin_set}' at {path} "
                          "(the local engine needs a source checkout of fwbench)")
    return path


def platform_is_locked() -> bool:
    """Lock files pin Linux x86_64 CPython 3.11 wheels: only there can they be installed as they are."""
    return (platform.system(), platform.machine(), ".".join(platform.python_version_tuple()[:2])) == LOCKED_PLATFORM


@dataclass(frozen=True)
class BuildProgress:
    """One report from an environment build: a step (creating the venv, installing N requirements, ...)
    or, with step=False, a detail within the current step (the package pip is collecting now)."""

    message: str
    step: bool = True


ProgressCallback = Callable[[BuildProgress], None]


def requirement_count(path: Path) -> int:
    """Requirements named in a requirements file (not comments, blank lines or pip options)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return sum(1 for line in lines if line and not line.startswith("-"))


class PipProgress:
    """Turns `pip install` output lines, as they stream, into progress reports (None: nothing to say).

    Collecting/Downloading/Building lines become details naming the package; "Installing collected
    packages" is a step of its own (the longest silent stretch of a build)."""

    COLLECTING = re.compile(r"^(Collecting|Processing) (\S+)")  # Processing: a local wheel or directory
    DOWNLOADING = re.compile(r"^\s*Downloading (\S+)(?: \(([^)]+)\))?")
    CACHED = re.compile(r"^\s*Using cached (\S+)")
    BUILDING = re.compile(r"^\s*Building wheel for (\S+)")
    INSTALLING = re.compile(r"^Installing collected packages: (.+)$")
    INSTALLED = re.compile(r"^Successfully installed (.+)$")

    def __init__(self, requirements: int | None = None):
        self.requirements = requirements
        self.collected = 0

    def feed(self, line: str) -> BuildProgress | None:
        line = line.rstrip("\r\n")
        if match := self.COLLECTING.match(line):
            self.collected += 1
            of = f"; {self.requirements} requested" if self.requirements else ""
            return BuildProgress(f"collecting {os.path.basename(match.group(2))} (package {self.collected}{of})",
                                 step=False)
        if match := self.DOWNLOADING.match(line):
            name, size = match.groups()
            if name.endswith(".metadata"):  # a few kB per package: not worth a report
                return None
            return BuildProgress(f"downloading {name}" + (f" ({size})" if size else ""), step=False)
        if match := self.CACHED.match(line):
            if match.group(1).endswith(".metadata"):
                return None
            return BuildProgress(f"using cached {match.group(1)}", step=False)
        if (match := self.BUILDING.match(line)) and "finished" not in line:
            return BuildProgress(f"building a wheel for {match.group(1)}", step=False)
        if match := self.INSTALLING.match(line):
            names = [name.strip() for name in match.group(1).split(",") if name.strip()]
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            return BuildProgress(f"installing {len(names)} packages ({shown})")
        if match := self.INSTALLED.match(line):
            return BuildProgress(f"installed {len(match.group(1).split())} packages")
        if line.startswith("ERROR:"):
            return BuildProgress(line, step=False)
        return None


class StackEnvironment:
    def __init__(self, stack: str, pin_set: str = DEFAULT_PIN_SET, home: Path | None = None):
        self.stack, self.pin_set = stack, pin_set
        folder = pin_set_dir(stack, pin_set)
        self.locked = platform_is_locked()
        # The lock (every package, hash-checked, no resolve) where it fits; elsewhere the requirements,
        # the pin set's shared constraints and the overrides (installed without their dependencies,
        # as the lock's resolve let them win).
        self.requirements = folder / ("requirements-cpu.lock" if self.locked else "requirements.txt")
        self.constraints = REPO_ROOT / "images" / "pin-sets" / f"{pin_set}.txt"
        self.overrides = folder / "overrides.txt"
        # Keyed by what the install reads: the lock alone holds everything; otherwise all three files.
        inputs = (self.requirements,) if self.locked else (self.requirements, self.constraints, self.overrides)
        key = hashlib.sha256()
        for path in inputs:
            key.update(path.read_bytes() if path.is_file() else b"")
        key.update(f"{platform.python_version()}:{ENV_LAYOUT_VERSION}".encode())
        self.path = (home or fwbench_home()) / "venvs" / f"{stack}-{pin_set}-{key.hexdigest()[:12]}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        return (self.path / READY_MARKER).is_file()

    @property
    def log_path(self) -> Path:
        return self.path.with_name(self.path.name + ".build.log")

    def build(self, progress: Optional[ProgressCallback] = None) -> None:
        """Create the environment (idempotent; a half-built one from an interrupted build is redone).

        `progress` hears each step (the first names the log file) and, as pip's output streams into
        the log, the package pip is on. The log keeps all of pip's output."""
        if self.ready:
            return
        report = progress or (lambda event: None)
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log:
            def run(*argv: str | Path, parse: Optional[PipProgress] = None) -> str:
                log.write(f"$ {' '.join(map(str, argv))}\n")
                log.flush()
                output = []
                # Unbuffered, so pip's lines reach the log (and the progress) as it prints them.
                with subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, stdin=subprocess.DEVNULL, bufsize=1,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}) as process:
                    assert process.stdout is not None
                    for line in process.stdout:
                        log.write(line)
                        log.flush()
                        output.append(line)
                        event = parse.feed(line) if parse is not None else None
                        if event is not None:
                            report(event)
                    returncode = process.wait()
                if returncode != 0:
                    raise EngineError(f"building the {self.stack} ({self.pin_set}) environment failed "
                                      f"(exit {returncode}); see {self.log_path}")
                return "".join(output)

            report(BuildProgress(f"building the {self.stack} ({self.pin_set}) environment in {self.path} "
                                 f"(log: {self.log_path})"))
            report(BuildProgress("creating the virtual environment"))
            run(sys.executable, "-m", "venv", self.path)
            count = requirement_count(self.requirements)
            # No wheel cache: the environment is the cache, and a second copy of every wheel (several GB
            # for a CUDA build of torch) would double its disk.
            pip = (self.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir")
            if self.locked:
                report(BuildProgress(f"installing the {count} locked packages of {self.requirements}"))
                run(*pip, "--no-deps", "--require-hashes", "-r", self.requirements, parse=PipProgress(count))
            else:
                report(BuildProgress(f"installing {count} requirements from {self.requirements} and their "
                                     "dependencies (this platform is not the one the lock files are for)"))
                constraints = ("-c", self.constraints) if self.constraints.is_file() else ()
                run(*pip, "-r", self.requirements, *constraints, parse=PipProgress(count))
                if self.overrides.is_file():
                    run(*pip, "--no-deps", "-r", self.overrides, parse=PipProgress())
            report(BuildProgress("linking this fwbench checkout and checking that the harness imports"))
            purelib = run(self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
            (Path(purelib.strip().splitlines()[-1]) / "fwbench-src.pth").write_text(f"{REPO_ROOT / 'runner'}\n")
            run(self.python, "-c", "import fwbench.harness.cell")
        (self.path / READY_MARKER).write_text(self.requirements.read_text())
        report(BuildProgress(f"the {self.stack} ({self.pin_set}) environment is ready"))


class PythonEngine:
    """Runs `python -m fwbench.harness.cell` with the interpreter chosen for the stack."""

    def __init__(self, name: str, interpreter_for: Callable[[str, Optional[ProgressCallback]], Path], variant: str,
                 pin_set: str):
        self.name = name
        self.variant = variant  # venv (local), or the image's variant / host (current)
        self.pin_set = pin_set
        self._interpreter_for = interpreter_for

    def device_model(self, gpu_index: int | None = None) -> str:
        """The device a cell will run on: GPU `gpu_index` (its slot's), else what the host offers."""
        from fwbench.harness.envinfo import device_model, gpu_model

        if gpu_index is not None:
            return gpu_model(gpu_index) or "unknown GPU"
        return device_model(gpu_model() is not None)

    def image_variant(self, stack: str) -> str:
        return self.variant

    def prepare(self, stack: str, progress: Optional[ProgressCallback] = None) -> None:
        """Make the stack's interpreter ready (the local engine builds its environment, reporting to progress)."""
        self._interpreter_for(stack, progress)

    def run_cell(self, spec: CellSpec, record_path: Path, log_path: Path) -> CellOutcome:
        python = self._interpreter_for(spec.stack, None)
        spec_path = write_spec(spec, record_path.parent)
        try:
            argv = [str(python), "-m", "fwbench.harness.cell", str(spec_path), str(record_path)]
            env = cell_environment(spec)
            if self.name == "local":
                # Environments are cached per requirements hash and shared by every checkout: put this
                # checkout's fwbench first, whichever checkout built the environment (its .pth).
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT / "runner"), env.get("PYTHONPATH")) if p)
            outcome = launch_process(argv, spec, record_path, log_path, env)
            # Compose started this image by digest (release.env): the rows name it (a container cannot see that).
            reference = os.environ.get("FWBENCH_IMAGE_DIGEST", "") if self.name == "current" else ""
            if "@sha256:" in reference:
                outcome.row_fields["image_digest"] = reference
            return outcome
        finally:
            spec_path.unlink(missing_ok=True)


def local_engine(pin_set: str = DEFAULT_PIN_SET, home: Path | None = None) -> PythonEngine:
    environments: dict[str, StackEnvironment] = {}

    def interpreter(stack: str, progress: Optional[ProgressCallback] = None) -> Path:
        if stack not in environments:
            environment = StackEnvironment(stack, pin_set, home)
            environment.build(progress)
            environments[stack] = environment
        return environments[stack].python

    return PythonEngine("local", interpreter, "venv", pin_set)


def current_engine(pin_set: str | None = None) -> PythonEngine:
    """This interpreter. Inside an fwbench image the pin set is the image's (asking for another one is an
    error: the image cannot change its libraries); outside, the caller says which pin set the host's
    libraries are meant to be (paper-2024 rows then list every difference from the published pins)."""
    from fwbench.harness.envinfo import image_manifest

    manifest = image_manifest() or {}
    image_pin_set = manifest.get("pin_set")
    if image_pin_set and pin_set and pin_set != image_pin_set:
        raise EngineError(f"this image holds the {image_pin_set} pin set, not {pin_set}: run the "
                          f"fwbench/<stack>:{pin_set}-<variant> image instead")
    return PythonEngine("current", lambda stack, progress=None: Path(sys.executable),
                        str(manifest.get("variant") or "host"), pin_set or image_pin_set or DEFAULT_PIN_SET)
