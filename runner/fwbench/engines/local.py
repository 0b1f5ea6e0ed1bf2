"""The `local` and `current` engines: a cell is a Python subprocess.

`local` gives each stack and pin set its own virtual environment, installed from the same hash-locked
file its Docker image installs (images/<stack>/<pin-set>/requirements-cpu.lock; off Linux x86_64 /
CPython 3.11, which the locks are resolved for, from that folder's requirements.txt instead), cached
under $FWBENCH_HOME/venvs keyed by that file's hash. fwbench itself is put on the environment's path
with a .pth file pointing at this checkout, so the cells always run the harness you are looking at.

uv installs them (`uv pip install --require-hashes --no-deps -r <lock>`, as strict as pip): it downloads
in parallel into one cache per machine ($FWBENCH_HOME/uv-cache) and hard-links each file from there into
every environment that needs it, so the torch that native-torch and keras3-torch share, or the
TensorFlow of four stacks, is downloaded once and stored once.

A version-sweep point (fwbench.core.sweep) gets an environment of its own, keyed by the point too:
  PACKAGE==VERSION  the pin set's lock installed as always (hard-linked from the cache: no download), then
                    `uv pip install --no-deps PACKAGE==VERSION` over it, so every other package stays as the lock
                    has it; a one-package download. `uv pip check`'s complaints (the new version asks for other
                    versions of its dependencies) are kept beside the environment and on the rows, not fatal.
  date:YYYY-MM-DD   the stack's requirements (and fwbench's runtime ones) with their pins removed, resolved
                    with `--exclude-newer` the end of that day: every package re-resolved, a full environment.
A point that does not resolve or install raises PointUnavailable with the resolver's one-line reason.
A lock file beside each environment
(<name>.lock) lets only one process build it: another fwbench (a demo beside a test run, pytest
workers) waits, says whom for, and then finds it ready.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
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
from fwbench.engines.device import expected_model
from fwbench.core.pins import DEFAULT_PIN_SET, LOCKED_PYTHON
from fwbench.core.registry import image_name
from fwbench.core.spec import CellSpec
from fwbench.core import sweep as sweeps_core
from fwbench.core.sweep import SweepPoint

REPO_ROOT = Path(__file__).resolve().parents[3]
READY_MARKER = ".fwbench-ready"
# Bump to rebuild every cached environment after a change to how they are made (3: built by uv).
ENV_LAYOUT_VERSION = "3"
# The platform images/lock.sh resolves the lock files for.
LOCKED_PLATFORM = ("Linux", "x86_64", LOCKED_PYTHON)


def fwbench_home() -> Path:
    return Path(os.environ.get("FWBENCH_HOME", Path.home() / ".cache" / "fwbench"))


def uv_cache_dir(home: Path | None = None) -> Path:
    """uv's cache: beside the environments, on the same file system, so files are hard-linked, not copied."""
    return (home or fwbench_home()) / "uv-cache"


def uv_binary() -> Path:
    """The uv executable of the pinned `uv` package (a base dependency of fwbench)."""
    try:
        import uv
    except ImportError:
        raise EngineError("the local engine installs environments with uv, which is not installed here: "
                          "pip install -e . (fwbench depends on a pinned uv)") from None
    return Path(uv.find_uv_bin())


def uv_environment(home: Path | None = None) -> dict[str, str]:
    """uv's settings for an install into an fwbench environment: the machine's one cache, hard-linked (never
    copied: same file system), no progress bars, and never a Python download."""
    return {"UV_CACHE_DIR": str(uv_cache_dir(home)), "UV_LINK_MODE": "hardlink", "UV_NO_PROGRESS": "1",
            "UV_PYTHON_DOWNLOADS": "never"}


def with_this_checkout(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout's fwbench first on PYTHONPATH: environments are cached per requirements hash and
    shared by every checkout, and their .pth points at whichever checkout built them."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT / "runner"), env.get("PYTHONPATH")) if p)}


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
    or, with step=False, a detail within the current step (the package the installer is downloading now)."""

    message: str
    step: bool = True


ProgressCallback = Callable[[BuildProgress], None]


def requirement_count(path: Path) -> int:
    """Requirements named in a requirements file (not comments, blank lines or pip options)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return sum(1 for line in lines if line and not line.startswith("-"))


class UvProgress:
    """Turns `uv pip install` output lines, as they stream, into progress reports (None: nothing to say).

    Downloads and wheel builds become details naming the package; linking the prepared packages into the
    environment is a step of its own, and so is its end. uv prints no line for a package it takes from
    its cache, so a rebuild from a warm cache goes straight to the install step."""

    RESOLVED = re.compile(r"^Resolved (\d+) packages?")
    DOWNLOADING = re.compile(r"^\s*Downloading (\S+)(?: \(([^)]+)\))?")
    BUILDING = re.compile(r"^\s*Building (\S+?)(?:==\S+)?\s*$")
    PREPARED = re.compile(r"^Prepared (\d+) packages? in (.+)$")
    INSTALLED = re.compile(r"^Installed (\d+) packages? in (.+)$")
    ERROR = re.compile(r"^\s*(error:|×)")

    def __init__(self, requirements: int | None = None):
        self.requirements = requirements

    def feed(self, line: str) -> BuildProgress | None:
        line = line.rstrip("\r\n")
        if match := self.RESOLVED.match(line):
            of = f" of {self.requirements} requested" if self.requirements else ""
            return BuildProgress(f"resolved {match.group(1)} packages{of}", step=False)
        if match := self.DOWNLOADING.match(line):
            name, size = match.groups()
            return BuildProgress(f"downloading {name}" + (f" ({size})" if size else ""), step=False)
        if match := self.BUILDING.match(line):
            return BuildProgress(f"building a wheel for {match.group(1)}", step=False)
        if match := self.PREPARED.match(line):
            return BuildProgress(f"installing {match.group(1)} packages (prepared in {match.group(2)}; "
                                 "linked from the shared cache)")
        if match := self.INSTALLED.match(line):
            return BuildProgress(f"installed {match.group(1)} packages")
        if self.ERROR.match(line):
            return BuildProgress(line.strip(), step=False)
        return None


VARIANTS = ("cpu", "gpu")
SWEEP_FILE = ".fwbench-sweep.json"  # in a point's environment: what it installed, and uv pip check's complaints


class PointUnavailable(EngineError):
    """A sweep point's environment could not be made: the version does not exist, does not resolve, or has no
    file for this platform. `reason` is the resolver's one line."""

    def __init__(self, point: SweepPoint, reason: str, log: Path):
        super().__init__(f"sweep point {point.label}: {reason} (log: {log})")
        self.point, self.reason = point, reason


def resolver_reason(output: str) -> str:
    """The one line of uv's failure output that says why: the cause ('╰─▶ Because there is no version of X==9 ...'
    in a terminal, '  cause: Because ...' otherwise), else the last error line ('× ...', 'error: ...')."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for markers in (("╰─▶", "cause:"), ("×", "error:")):
        found = [i for i, line in enumerate(lines) if line.startswith(markers)]
        if found:
            index = found[-1]
            marker = next(m for m in markers if lines[index].startswith(m))
            text = lines[index][len(marker):].strip()
            for more in lines[index + 1:]:  # uv continues a reason on the lines below it
                if more.startswith(("×", "╰─▶", "error:", "cause:", "hint:", "help:", "$")):
                    break
                text += " " + more
            return re.sub(r"\s+", " ", text)[:400]
    return (lines[-1] if lines else "the installer failed without a message")[:400]


def unpinned_requirements(*paths: Path) -> list[str]:
    """The requirement names (with extras and markers) of requirements files, their version pins removed."""
    names = []
    for path in paths:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            name, _, marker = line.partition(";")
            name = re.split(r"[<>=!~ ]", name.strip(), maxsplit=1)[0]
            names.append(name + (f"; {marker.strip()}" if marker.strip() else ""))
    return list(dict.fromkeys(names))


class StackEnvironment:
    """A stack's environment for one pin set and variant: `cpu` (requirements-cpu.lock, what CPU cells need) or
    `gpu` (requirements-gpu.lock: the CUDA builds its GPU image installs), each in a folder of its own."""

    def __init__(self, stack: str, pin_set: str = DEFAULT_PIN_SET, home: Path | None = None, variant: str = "cpu",
                 point: SweepPoint | None = None):
        if variant not in VARIANTS:
            raise EngineError(f"unknown environment variant {variant!r} (choose from: {', '.join(VARIANTS)})")
        self.stack, self.pin_set, self.variant, self.point = stack, pin_set, variant, point
        folder = pin_set_dir(stack, pin_set)
        self.locked = platform_is_locked()
        # The lock (every package, hash-checked, no resolve) where it fits; elsewhere the requirements,
        # the pin set's shared constraints and the overrides (installed without their dependencies,
        # as the lock's resolve let them win). A stack whose CPU and GPU requirements are the same (PyPI's torch
        # carries CUDA either way) has no requirements-gpu.txt.
        gpu_requirements = folder / "requirements-gpu.txt"
        unlocked = gpu_requirements if variant == "gpu" and gpu_requirements.is_file() else folder / "requirements.txt"
        self.unlocked_requirements = unlocked  # what a date point re-resolves (a GPU one: the CUDA builds)
        self.requirements = folder / f"requirements-{variant}.lock" if self.locked else unlocked
        self.constraints = REPO_ROOT / "images" / "pin-sets" / f"{pin_set}.txt"
        self.overrides = folder / "overrides.txt"
        # Keyed by what the install reads: the lock alone holds everything; otherwise all three files.
        inputs = (self.requirements,) if self.locked else (self.requirements, self.constraints, self.overrides)
        key = hashlib.sha256()
        for path in inputs:
            key.update(path.read_bytes() if path.is_file() else b"")
        key.update(f"{platform.python_version()}:{ENV_LAYOUT_VERSION}".encode())
        if point is not None:
            key.update(f"sweep:{point.label}".encode())
            family = None if point.is_date else sweeps_core.family_of(point.package)
            if family is not None:  # how the family is paired is part of what the environment is
                key.update(f"with:{','.join(family.members)}:{'not-newer' if family.not_newer else ''}".encode())
        self.home = home or fwbench_home()
        name = f"{stack}-{pin_set}" + ("-gpu" if variant == "gpu" else "")
        if point is not None:
            name += "-at-" + re.sub(r"[^A-Za-z0-9.+-]+", "_", point.label)[:48]
        self.path = self.home / "venvs" / f"{name}-{key.hexdigest()[:12]}"

    def date_requirements(self) -> list[str]:
        """A date point's requirements, unpinned: the stack's for this variant (a GPU environment's name the CUDA
        builds: jax[cuda12], tensorflow[and-cuda]; the CPU ones would make every GPU cell device_unavailable) and
        fwbench's runtime ones."""
        return unpinned_requirements(self.unlocked_requirements, REPO_ROOT / "images" / "fwbench-runtime.txt")

    @property
    def label(self) -> str:
        at = f" at {self.point.label}" if self.point is not None else ""
        return f"{self.stack} ({self.pin_set}{', GPU' if self.variant == 'gpu' else ''}{at})"

    def sweep_record(self) -> dict:
        """A point's environment: {"point", "installed", "mismatch", "conflicts"} (empty without a point or
        before it is built)."""
        try:
            return json.loads((self.path / SWEEP_FILE).read_text())
        except (OSError, ValueError):
            return {}

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

        `progress` hears each step (the first names the log file) and, as uv's output streams into
        the log, the package uv is downloading or building. The log keeps all of uv's output."""
        if self.ready:
            return
        report = progress or (lambda event: None)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Two fwbench processes (a demo and a test run, parallel cells, pytest workers) may want the same
        # environment at once: one builds it, the others wait and then find it ready.
        with self.build_lock(report):
            if not self.ready:
                self._build(report)

    @contextlib.contextmanager
    def build_lock(self, report: ProgressCallback):
        with open(self.path.with_name(self.path.name + ".lock"), "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "another process"
                report(BuildProgress(f"waiting for {holder}, which is building the {self.label} environment"))
                fcntl.flock(lock, fcntl.LOCK_EX)
            lock.seek(0)
            lock.truncate()
            lock.write(f"process {os.getpid()}")
            lock.flush()
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _build(self, report: ProgressCallback) -> None:
        if self.path.exists():
            shutil.rmtree(self.path)
        uv_settings = uv_environment(self.home)
        with open(self.log_path, "w") as log:
            def run(*argv: str | Path, parse: Optional[UvProgress] = None, point_step: bool = False,
                    check: bool = True) -> str:
                log.write(f"$ {' '.join(map(str, argv))}\n")
                log.flush()
                output = []
                # Unbuffered, so the installer's lines reach the log (and the progress) as it prints them.
                with subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, stdin=subprocess.DEVNULL, bufsize=1,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1", **uv_settings}) as process:
                    assert process.stdout is not None
                    for line in process.stdout:
                        log.write(line)
                        log.flush()
                        output.append(line)
                        event = parse.feed(line) if parse is not None else None
                        if event is not None:
                            report(event)
                    returncode = process.wait()
                if returncode != 0 and point_step:
                    raise PointUnavailable(self.point, resolver_reason("".join(output)), self.log_path)
                if returncode != 0 and check:
                    raise EngineError(f"building the {self.label} environment failed (exit {returncode}); "
                                      f"see {self.log_path}")
                return "".join(output)

            report(BuildProgress(f"building the {self.label} environment in {self.path} "
                                 f"(log: {self.log_path})"))
            report(BuildProgress("creating the virtual environment"))
            uv = uv_binary()
            run(uv, "venv", "--python", sys.executable, self.path)
            count = requirement_count(self.requirements)
            pip = (uv, "pip", "install", "--python", self.python)
            if self.point is not None and self.point.is_date:
                wanted = self.date_requirements()
                unpinned = self.path.with_name(self.path.name + ".requirements.txt")
                unpinned.write_text("\n".join(wanted) + "\n")
                report(BuildProgress(f"resolving {len(wanted)} requirements as the index had them on "
                                     f"{self.point.date} (uv --exclude-newer {self.point.exclude_newer}): "
                                     "every package re-resolved, a full environment"))
                run(*pip, "--exclude-newer", self.point.exclude_newer, "-r", unpinned, parse=UvProgress(len(wanted)),
                    point_step=True)
            elif self.locked:
                report(BuildProgress(f"installing the {count} locked packages of {self.requirements}"))
                run(*pip, "--no-deps", "--require-hashes", "-r", self.requirements, parse=UvProgress(count))
            else:
                report(BuildProgress(f"installing {count} requirements from {self.requirements} and their "
                                     "dependencies (this platform is not the one the lock files are for)"))
                constraints = ("-c", self.constraints) if self.constraints.is_file() else ()
                run(*pip, "-r", self.requirements, *constraints, parse=UvProgress(count))
                if self.overrides.is_file():
                    run(*pip, "--no-deps", "-r", self.overrides, parse=UvProgress())
            if self.point is not None and not self.point.is_date:
                wanted = self._point_with_family(run)
                moved = f" and its family's {', '.join(wanted[1:])}" if wanted[1:] else ""
                report(BuildProgress(f"installing {self.point.label}{moved} over the lock's (no dependencies: "
                                     "every other package as the lock has it)"))
                run(*pip, "--no-deps", *wanted, parse=UvProgress(len(wanted)), point_step=True)
            if self.point is not None:
                self._record_point(run)
            report(BuildProgress("linking this fwbench checkout and checking that the harness imports"))
            purelib = run(self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
            (Path(purelib.strip().splitlines()[-1]) / "fwbench-src.pth").write_text(f"{REPO_ROOT / 'runner'}\n")
            run(self.python, "-c", "import fwbench.harness.cell")
        (self.path / READY_MARKER).write_text(self.requirements.read_text())
        report(BuildProgress(f"the {self.label} environment is ready"))

    def _point_with_family(self, run) -> list[str]:
        """A package point's requirements: the point, and the members of its family (sweeps_core.FAMILIES) the
        lock installed, each at the release the index resolves beside the point (a point the index cannot pair:
        PointUnavailable with the resolver's reason)."""
        point = self.point
        present = [name for name, version in self._versions(run, sweeps_core.moves_with(point.package)).items()
                   if version is not None]
        if not present:
            return [point.label]
        extras = {}
        for requirement in unpinned_requirements(self.unlocked_requirements):
            name, bracket, rest = requirement.split(";")[0].strip().partition("[")
            extras[sweeps_core.normalise(name)] = f"[{rest}" if bracket else ""
        family = self.path.with_name(self.path.name + ".family.txt")
        family.write_text("\n".join(sweeps_core.family_requirements(point, present, extras)) + "\n")
        compiled = run(uv_binary(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python",
                       self.python, family, point_step=True)
        versions = sweeps_core.resolved_versions(compiled, present)
        return [point.label, *(f"{name}=={versions[name]}" for name in present if name in versions)]

    def _versions(self, run, names) -> dict[str, str | None]:
        """The installed version of each of `names` in the environment being built (None: not installed)."""
        if not names:
            return {}
        script = ("import importlib.metadata as m, json, sys\n"
                  "out = {}\n"
                  "for n in sys.argv[1:]:\n"
                  "    try: out[n] = m.version(n)\n"
                  "    except m.PackageNotFoundError: out[n] = None\n"
                  "print(json.dumps(out))")
        return json.loads(run(self.python, "-c", script, *names).strip().splitlines()[-1])

    def _record_point(self, run) -> None:
        """Read back what the point's environment installed (SWEEP_FILE): a package point's version as the
        environment reports it (a version that is not the one asked for is a mismatch), a date point's top-level
        requirements; and `uv pip check`'s complaints (dependencies the swept version wants otherwise)."""
        from packaging.version import InvalidVersion, Version

        point = self.point
        if point.is_date:
            names = [n.split(";")[0].split("[")[0].strip() for n in unpinned_requirements(
                pin_set_dir(self.stack, self.pin_set) / "requirements.txt")]
        else:
            names = [point.package, *sweeps_core.moves_with(point.package)]
        found = self._versions(run, names)
        installed = "; ".join(f"{n}=={v}" for n, v in found.items() if v is not None)
        mismatch = None
        if not point.is_date:
            got = found.get(point.package)
            try:
                same = got is not None and Version(got) == Version(point.version)
            except InvalidVersion:
                same = got == point.version
            if not same:
                mismatch = f"asked for {point.label}, the environment has {point.package} {got or 'missing'}"
        check = run(uv_binary(), "pip", "check", "--python", self.python, check=False)
        conflicts = [line.strip() for line in check.splitlines()
                     if line.strip() and not line.startswith(("Checked", "All installed", "Resolved", "$"))
                     and ("requires" in line or "incompatible" in line or "missing" in line.lower())]
        (self.path / SWEEP_FILE).write_text(json.dumps(
            {"point": point.label, "installed": installed, "mismatch": mismatch, "conflicts": conflicts}, indent=1))


class PythonEngine:
    """Runs `python -m fwbench.harness.cell` with the interpreter chosen for the stack."""

    def __init__(self, name: str, interpreter_for: Callable[[str, Optional[ProgressCallback]], Path], variant: str,
                 pin_set: str, device: str = "cpu", *, sweep_fields: Callable[[str], dict] | None = None):
        self.name = name
        # A sweep point's engine: the row fields of a stack's point environment (sweep_installed, conflicts).
        self.sweep_fields = sweep_fields
        self.variant = variant  # venv / venv-gpu (local), or the image's variant / host (current)
        self.pin_set = pin_set
        self.device = device  # gpu or cpu (fwbench.engines.device)
        self._interpreter_for = interpreter_for

    def device_model(self, gpu_index: int | None = None) -> str:
        """The device a cell will run on: GPU `gpu_index` (its slot's) on a GPU run, else the CPU."""
        return expected_model(self.device, gpu_index)

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
                env = with_this_checkout(env)
            outcome = launch_process(argv, spec, record_path, log_path, env)
            # Compose started this image by digest (release.env): the rows name it (a container cannot see that).
            reference = os.environ.get("FWBENCH_IMAGE_DIGEST", "") if self.name == "current" else ""
            if "@sha256:" in reference:
                outcome.row_fields["image_digest"] = reference
            if self.sweep_fields is not None:
                outcome.row_fields.update(self.sweep_fields(spec.stack))
            return outcome
        finally:
            spec_path.unlink(missing_ok=True)


def local_variant(device: str) -> tuple[str, str]:
    """(environment variant, the rows' image_variant) of the local engine for a device: a GPU run gets the stack's
    GPU environment (its CUDA builds), named venv-gpu on its rows; a CPU run the CPU one, venv as always."""
    return ("gpu", "venv-gpu") if device == "gpu" else ("cpu", "venv")


def local_engine(pin_set: str = DEFAULT_PIN_SET, home: Path | None = None, device: str = "cpu",
                 point: SweepPoint | None = None) -> PythonEngine:
    """The local engine; with a sweep `point`, each stack's environment is the pin set's at that point (its rows
    get sweep_installed, and uv pip check's complaints under extra)."""
    environments: dict[str, StackEnvironment] = {}
    variant, image_variant = local_variant(device)

    def environment(stack: str, progress: Optional[ProgressCallback] = None) -> StackEnvironment:
        if stack not in environments:
            built = StackEnvironment(stack, pin_set, home, variant, point)
            built.build(progress)
            environments[stack] = built
        return environments[stack]

    def sweep_fields(stack: str) -> dict:
        record = environment(stack).sweep_record()
        fields = {"sweep_point": point.label, "sweep_installed": record.get("installed")}
        if record.get("conflicts"):
            fields["sweep_conflicts"] = "; ".join(record["conflicts"])  # not a column: kept under extra
        return fields

    return PythonEngine("local", lambda stack, progress=None: environment(stack, progress).python, image_variant,
                        pin_set, device, sweep_fields=sweep_fields if point is not None else None)


def current_engine(pin_set: str | None = None, device: str = "cpu") -> PythonEngine:
    """This interpreter. Inside an fwbench image the pin set is the image's (asking for another one is an
    error: the image cannot change its libraries); outside, the caller says which pin set the host's
    libraries are meant to be (paper-2024 rows then list every difference from the published pins)."""
    from fwbench.harness.envinfo import image_manifest

    manifest = image_manifest() or {}
    image_pin_set = manifest.get("pin_set")
    if image_pin_set and pin_set and pin_set != image_pin_set:
        raise EngineError(f"this image holds the {image_pin_set} pin set, not {pin_set}: run the "
                          f"{image_name('<stack>', pin_set, '<variant>')} image instead")
    return PythonEngine("current", lambda stack, progress=None: Path(sys.executable),
                        str(manifest.get("variant") or "host"), pin_set or image_pin_set or DEFAULT_PIN_SET, device)
