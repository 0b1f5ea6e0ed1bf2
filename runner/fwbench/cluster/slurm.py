"""`fwbench slurm`: the plan as a Slurm job array, one array task per cell; Slurm queues and runs them.

A submission lives in the results folder, which compute nodes must share with the submitter:
    <out>/.slurm/<submission>/cells.json       the cells, one per array index (fwbench.cluster.cellplan)
    <out>/.slurm/<submission>/job.sbatch       the batch script sbatch was given (readable, re-submittable)
    <out>/.slurm/<submission>/submission.json  job id, options, when
    <out>/.slurm/<submission>/logs/<index>.out each array task's output (Slurm creates it when the task starts)
    <out>/.slurm/<submission>/done/<index>.json the row an array task wrote (written after the row)
Rows go to <out> in the usual one-file-per-cell layout, so `fwbench aggregate <out>` reads them as usual.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from fwbench.cluster import cellplan
from fwbench.core import model_file, results
from fwbench.core.atomic import write_atomically
from fwbench.harness.cell import base_record
from fwbench.core.identity import CellIdentity
from fwbench.core.spec import CellSpec

SUBMISSIONS = ".slurm"
CONTAINERS = ("none", "pyxis", "apptainer")
# Where the containers see the results folder, the submission folder and the shared data.
IN_CONTAINER = {"results": "/results", "submission": "/submission", "data": "/data"}
_GRES_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_GRES_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")
_NAMES = re.compile(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$")  # partition, account, QOS (lists for partitions)
_MEM = re.compile(r"^[0-9]+[KMGTkmgt]?$")
_SBATCH_ARG = re.compile(r"^--[A-Za-z][A-Za-z0-9-]*(=[^\s\"'\\\x00-\x1f\x7f]+)?$")
# What fwbench's own #SBATCH lines set: another value would break the one-task-per-cell contract.
_MANAGED = {"array", "output", "error", "signal", "open-mode", "job-name", "ntasks", "cpus-per-task", "time",
            "partition", "gres", "mem", "account", "qos", "wrap", "parsable"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?)$")


class SlurmError(RuntimeError):
    """A one-line reason a submission cannot go ahead (nothing is submitted)."""


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    gres: str | None = None  # e.g. gpu:1 or gpu:a100:1
    time_limit: str = "60"  # per array task, Slurm's format (minutes, or [D-]HH:MM:SS)
    cpus_per_task: int = 1
    mem: str | None = None  # e.g. 32G
    container: str = "none"  # none (this fwbench, on a shared filesystem) | pyxis | apptainer
    max_running: int | None = None  # at most this many array tasks at once (the %N of --array)
    stop_grace_s: int = 90  # SIGUSR1 this long before the time limit, to write the row
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()  # further sbatch options, verbatim (e.g. --constraint=a100)


@dataclass
class Submission:
    folder: Path
    job_id: str
    specs: list[CellSpec]
    skipped: int  # cells left out because they already have ok rows


# -- checks before anything is submitted -----------------------------------------------------------

def check_gres(gres: str) -> None:
    """Slurm's --gres syntax: name[:type][:count], comma separated."""
    for item in gres.split(","):
        parts = item.split(":")
        ok = 1 <= len(parts) <= 3 and _GRES_NAME.match(parts[0]) and all(_GRES_TYPE.match(p) for p in parts[1:])
        if ok and len(parts) == 3:
            ok = parts[2].isdigit()
        if not ok:
            raise SlurmError(f"--gres {gres!r} is malformed: expected name[:type][:count] items separated by "
                             "commas, e.g. gpu:1 or gpu:a100:1")


def gres_gpus(gres: str | None) -> int:
    """GPUs one task asks for in a --gres value (gpu, gpu:2, gpu:a100:1; other resources count none)."""
    count = 0
    for item in (gres or "").split(","):
        parts = item.split(":")
        if parts[0] == "gpu":
            count += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return count


def check_cell_resources(gres: str | None, cpus_per_task: int, devices: int, device: str) -> None:
    """A cell runs on exactly --devices devices. On a GPU run its task is given exactly that many GPUs: more would
    all go to the framework (the HF Trainer then trains on each with DataParallel) while the row speaks of fewer,
    fewer would leave ranks without one. On a CPU run each rank needs a core of the task's."""
    given = gres_gpus(gres)
    if device == "gpu" and given != devices and (given or devices > 1):
        fix = f"--gres gpu:{devices} or gpu:TYPE:{devices}"
        if not given:
            raise SlurmError(f"--devices {devices} on a GPU run needs {devices} GPUs per task ({fix})")
        raise SlurmError(f"--gres {gres!r} gives each cell {given} GPU(s): a cell runs on exactly --devices "
                         f"{devices} ({fix})")
    if device == "cpu" and cpus_per_task < devices:
        raise SlurmError(f"--devices {devices} on a CPU run needs --cpus-per-task of at least {devices} (a core per "
                         f"rank), got {cpus_per_task}")


def check_sbatch_values(options: SlurmOptions) -> None:
    """Every value that goes into an #SBATCH line, in the forms Slurm accepts: no newline or control character
    can add a line of its own, and no space can split one."""
    for flag, value in (("--partition", options.partition), ("--account", options.account), ("--qos", options.qos)):
        if value is not None and not _NAMES.match(value):
            raise SlurmError(f"{flag} {value!r} is not a Slurm name (letters, digits, '_', '.', '+', '-'; "
                             "partitions may be a comma-separated list)")
    if options.mem is not None and not _MEM.match(options.mem):
        raise SlurmError(f"--mem {options.mem!r} is not a Slurm size (a whole number with an optional K, M, G or T)")
    for argument in options.extra:
        if not _SBATCH_ARG.match(argument):
            raise SlurmError(f"--sbatch-arg {argument!r} must be one long option, --name or --name=value, without "
                             "spaces, quotes, backslashes or control characters")
        name = argument[2:].split("=", 1)[0]
        if name in _MANAGED:
            raise SlurmError(f"--sbatch-arg {argument!r} sets --{name}, which fwbench sets itself (use its own "
                             "option where there is one)")


def check_paths(out: Path, data_dir: Path, container: str) -> None:
    """Paths go into the batch script: quoted there (and '%' escaped for Slurm's file patterns), but a quote,
    backslash or control character cannot be, and container mounts are lists of host:inside pairs."""
    for what, path in (("--out", out), ("--data", data_dir)):
        text = str(path)
        if _CONTROL.search(text) or '"' in text or "\\" in text:
            raise SlurmError(f"{what} {text!r} holds a quote, backslash or control character, which a batch "
                             "script cannot carry: choose another folder")
        if container != "none" and ("," in text or ":" in text):
            raise SlurmError(f"{what} {text!r} holds ',' or ':', which separate --container mounts: choose a "
                             "folder without them (they work with --container none)")


def pattern_literal(text: str) -> str:
    """A path inside a Slurm file-name pattern (--output): '%' doubled, as Slurm reads '%a' and the like. The
    #SBATCH line double-quotes the whole (sbatch keeps spaces inside quotes)."""
    return text.replace("%", "%%")


def check_time(time_limit: str) -> None:
    if not _TIME.match(time_limit):
        raise SlurmError(f"--time {time_limit!r} is not a Slurm time: minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")


def time_limit_s(time_limit: str) -> int:
    """Seconds of a Slurm time: minutes, MM:SS, HH:MM:SS, or D-HH[:MM[:SS]]."""
    days, clock = time_limit.split("-", 1) if "-" in time_limit else ("0", time_limit)
    parts = [int(part) for part in clock.split(":")]
    if "-" in time_limit:
        hours, minutes, seconds = parts + [0] * (3 - len(parts))
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    else:
        hours, minutes, seconds = ([0] + parts)[-3:]
    return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds


def default_time_limit(specs: list[CellSpec], grace_s: int) -> str:
    """The slowest cell's own timeout, plus the stop grace and time to start (environment, data)."""
    seconds = max(spec.timeout_s for spec in specs) + grace_s + 600
    return str(int(-(-seconds // 60)))  # minutes, rounded up


def client(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SlurmError(f"{name} was not found on PATH: run this on a Slurm login node "
                         "(or put Slurm's client commands on PATH)")
    return path


def _slurm(argv: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([client(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout_s:g} s (is slurmctld reachable?)") from None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no output"


def check_partition(partition: str) -> None:
    listed = _slurm(["sinfo", "--noheader", "--format=%R"])
    if listed.returncode != 0:
        raise SlurmError(f"sinfo failed: {_first_line(listed.stderr)}")
    known = sorted({line.strip() for line in listed.stdout.splitlines() if line.strip()})
    if partition not in known:
        raise SlurmError(f"unknown Slurm partition {partition!r} (this cluster has: {', '.join(known) or 'none'})")


def probe_shared_folder(out: Path, options: SlurmOptions, timeout_s: float) -> None:
    """A file the submitter writes into the results folder must be visible to a job on the partition's
    nodes; otherwise the rows would land where nobody collects them."""
    token = secrets.token_hex(8)
    probe = out / SUBMISSIONS / f"probe-{token}"
    write_atomically(probe, token)
    argv = ["srun", "--job-name=fwbench-probe", "--ntasks=1", "--time=1", "--quiet",
            *_placement(options, gres=False), "cat", str(probe)]
    try:
        done = _slurm(argv, timeout_s)
    except SlurmError:
        raise SlurmError(f"the shared-folder probe (srun on partition {options.partition or 'default'}) did not "
                         f"run within {timeout_s:g} s; is the queue busy? (--probe-timeout, or --no-probe)") from None
    finally:
        probe.unlink(missing_ok=True)
    if done.stdout.strip() != token:
        seen = _first_line(done.stderr) if done.returncode else "the file was missing or different there"
        raise SlurmError(f"the results folder {out} is not shared with the compute nodes: a job could not read "
                         f"the file the submitter wrote there ({seen}); put --out on a filesystem they share")


def check_with_sbatch(options: SlurmOptions, count: int) -> None:
    """`sbatch --test-only`: the controller validates the array's request (partition, GPUs, account, QOS, memory,
    time, extra options) without queueing anything."""
    argv = ["sbatch", "--test-only", "--job-name=fwbench-check", f"--array=0-{count - 1}", "--ntasks=1",
            f"--cpus-per-task={options.cpus_per_task}", f"--time={options.time_limit}", *_placement(options),
            *([f"--mem={options.mem}"] if options.mem else []), *options.extra, "--wrap=true"]
    checked = _slurm(argv)
    if checked.returncode != 0:
        raise SlurmError(f"sbatch refused the job array: {_first_line(checked.stderr)}")


def placement_flags(options: SlurmOptions) -> list[str]:
    """The sbatch flags that place a job (partition, account, QoS, GRES), as submit gives its tasks."""
    return _placement(options)


def _placement(options: SlurmOptions, gres: bool = True) -> list[str]:
    argv = []
    for flag, value in (("--partition", options.partition), ("--account", options.account),
                        ("--qos", options.qos), ("--gres", options.gres if gres else None)):
        if value:
            argv.append(f"{flag}={value}")
    return argv


# -- the batch script ----------------------------------------------------------------------------------

def enroot_reference(reference: str) -> str:
    """Pyxis/enroot name an image `registry#path[:tag]` (a plain docker reference would be read as a Docker
    Hub path), and take a digest in the tag's place (`path:sha256:...`; enroot's grammar has no `@digest`)."""
    name, _, digest = reference.partition("@")
    if digest:
        first, _, rest = name.partition("/")
        if ":" in rest.rsplit("/", 1)[-1]:  # a tag beside the digest: the digest decides
            rest = rest.rsplit(":", 1)[0]
        name = f"{first}/{rest}" if rest else first
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        name = f"{first}#{rest}"
    return f"{name}:{digest}" if digest else name


def job_script(folder: Path, out: Path, data_dir: Path, count: int, options: SlurmOptions, *,
               image: str | None, time_limit: str) -> str:
    """The sbatch script: one array task per cell, each running `fwbench slurm run-cell` on its index."""
    array = f"0-{count - 1}" + (f"%{options.max_running}" if options.max_running else "")
    lines = ["#!/bin/bash", "#SBATCH --job-name=fwbench", f"#SBATCH --array={array}", "#SBATCH --ntasks=1",
             f"#SBATCH --cpus-per-task={options.cpus_per_task}", f"#SBATCH --time={time_limit}",
             # Ahead of the limit: the task stops its cell and writes a timeout row before SIGKILL.
             f"#SBATCH --signal=USR1@{options.stop_grace_s}",
             f'#SBATCH --output="{pattern_literal(str(folder / "logs"))}/%a.out"', "#SBATCH --open-mode=append"]
    lines += [f"#SBATCH {flag}" for flag in _placement(options)]
    if options.mem:
        lines.append(f"#SBATCH --mem={options.mem}")
    lines += [f"#SBATCH {flag}" for flag in options.extra]
    srun = ["srun", "--ntasks=1", f"--cpus-per-task={options.cpus_per_task}"]
    if options.container == "none":
        command = [*srun, sys.executable, "-m", "fwbench.cli", "slurm", "run-cell", str(folder / "cells.json"),
                   "--out", str(out), "--submission", str(folder)]
    else:
        mounts = {str(out): IN_CONTAINER["results"], str(folder): IN_CONTAINER["submission"],
                  str(data_dir): IN_CONTAINER["data"]}
        inner = ["fwbench", "slurm", "run-cell", f"{IN_CONTAINER['submission']}/cells.json",
                 "--out", IN_CONTAINER["results"], "--submission", IN_CONTAINER["submission"]]
        if options.container == "pyxis":
            command = [*srun, f"--container-image={enroot_reference(image or '')}",
                       "--container-mounts=" + ",".join(f"{host}:{inside}" for host, inside in mounts.items()),
                       "--no-container-mount-home", "--container-workdir=/tmp", *inner]
        else:  # apptainer: pulls docker://reference (by digest) into its cache and runs it unprivileged
            command = [*srun, "apptainer", "exec", "--nv", "--containall", "--env", "HOME=/tmp",
                       "--bind", ",".join(f"{host}:{inside}" for host, inside in mounts.items()),
                       f"docker://{image}", *inner]
    body = ["", "# fwbench: one array task per cell of cells.json (its index = SLURM_ARRAY_TASK_ID).",
            "set -eu", "exec " + shlex.join(command), ""]
    return "\n".join(lines + body)


# -- submit ----------------------------------------------------------------------------------------------

def completed_identity(spec: CellSpec) -> tuple[CellIdentity, int]:
    """A cell's identity as far as the submitter knows it: the device is the compute node's to say."""
    identity = replace(spec, device_model=None).identity
    return identity, spec.repeat


def ok_cells(out: Path) -> set[tuple[CellIdentity, int]]:
    """The (identity without device, repeat) of every ok row in the results folder, whatever its schema version
    (an older row's identity reads as what it was measured at: identity.OLD_ROWS_READ_AS)."""
    done = set()
    for path in out.rglob("*.parquet"):
        if SUBMISSIONS in path.parts or path.name.startswith("."):
            continue
        row = results.read_row(path)
        if row and row.get("status") == "ok":
            identity = CellIdentity.of_row({**row, "device_model": None, "device_name": None})
            done.add((identity, row.get("repeat")))
    return done


def submit(specs: list[CellSpec], out: Path, data_dir: Path, options: SlurmOptions, images: dict[str, str],
           *, probe_timeout_s: float | None, prepare: Callable[[list[CellSpec]], None] = lambda todo: None,
           ) -> Submission | None:
    """Check, write and sbatch one job array for the cells without ok rows (None: all have one).
    `prepare(cells)` makes their inputs and environments once every check has passed, before sbatch."""
    if options.container not in CONTAINERS:
        raise SlurmError(f"--container must be one of {', '.join(CONTAINERS)}, not {options.container!r}")
    check_sbatch_values(options)
    check_paths(out.resolve(), data_dir.resolve(), options.container)
    if options.gres:
        check_gres(options.gres)
    given = "gpu" if gres_gpus(options.gres) else "cpu"  # a spec without a device runs on what its task is given
    for device, devices in sorted({(spec.device or given, spec.devices) for spec in specs}):
        check_cell_resources(options.gres, options.cpus_per_task, devices, device)
    check_time(options.time_limit)
    if time_limit_s(options.time_limit) <= options.stop_grace_s:
        raise SlurmError(f"--time {options.time_limit} leaves no time before the stop signal "
                         f"{options.stop_grace_s} s ahead of it (--stop-grace)")
    client("sbatch")
    if options.partition:
        check_partition(options.partition)
    done = ok_cells(out) | queued_cells(out)
    todo = [spec for spec in specs if completed_identity(spec) not in done]
    if not todo:
        return None
    # What sbatch would refuse (a GPU the partition lacks, a bad account) is refused before anything is prepared:
    # a GPU run's environments are several GB to build.
    check_with_sbatch(options, len(todo))
    if probe_timeout_s is not None:
        probe_shared_folder(out, options, probe_timeout_s)
    prepare(todo)

    in_container = options.container != "none"
    stack_images = {spec.stack for spec in todo}
    if in_container and len(stack_images) != 1:
        raise SlurmError("a container submission runs one image: submit one stack at a time (--stack)")
    image = images.get(next(iter(stack_images))) if in_container else None
    # Two submissions in one second stay apart.
    folder = out.resolve() / SUBMISSIONS / f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    (folder / "logs").mkdir(parents=True)
    (folder / "done").mkdir()
    (folder / "started").mkdir()
    planned = [replace(spec, data_dir=IN_CONTAINER["data"]) if in_container else spec for spec in todo]
    try:
        planned = freeze_model_files(planned, folder, in_container)
    except SlurmError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    cellplan.write_plan(folder / "cells.json", planned)
    script = job_script(folder, out.resolve(), data_dir.resolve(), len(planned), options, image=image,
                        time_limit=options.time_limit)
    write_atomically(folder / "job.sbatch", script)
    submitted = _slurm(["sbatch", "--parsable", str(folder / "job.sbatch")])
    if submitted.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise SlurmError(f"sbatch refused the job array: {_first_line(submitted.stderr)}")
    job_id = submitted.stdout.strip().split(";")[0]
    write_atomically(folder / "submission.json", json.dumps({
        "job_id": job_id, "cells": len(planned), "skipped": len(specs) - len(todo), "submitted_at": time.time(),
        "options": asdict(options), "image": image, "out": str(out.resolve())}, indent=1) + "\n")
    return Submission(folder, job_id, planned, len(specs) - len(todo))


MODELS = "models"  # a submission's copies of its model files (fwbench slurm submit --model)


def freeze_model_files(specs: list[CellSpec], folder: Path, in_container: bool) -> list[CellSpec]:
    """The cells of a model file (`--model FILE`) run a copy of it in the submission folder, which the compute nodes
    share (and a container sees at /submission): the bytes that were submitted, checked against the SHA-256 the
    cells carry, whatever becomes of the user's file while the array waits in the queue."""
    frozen = []
    for spec in specs:
        if spec.model_file is None:
            frozen.append(spec)
            continue
        source = Path(spec.model_file)
        relative = Path(MODELS) / spec.model_sha256[:16] / source.name
        copy = folder / relative
        if not copy.is_file():
            try:
                payload = model_file.planned_bytes(source, spec.model_sha256)
            except model_file.ModelFileChanged:
                raise SlurmError(f"--model {source} changed while the cells were planned: submit again") from None
            except model_file.ModelFileError as exc:
                raise SlurmError(f"--model {exc}") from None
            copy.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(copy, payload)
        inside = f"{IN_CONTAINER['submission']}/{relative.as_posix()}" if in_container else str(copy)
        frozen.append(replace(spec, model_file=inside))
    return frozen


# -- in the array task -------------------------------------------------------------------------------

def mark_done(folder: Path, index: int, row_path: Path, out: Path) -> None:
    row = results.read_row(row_path) or {}
    write_atomically(folder / "done" / f"{index}.json", json.dumps(
        {"row": str(row_path.relative_to(out)), "status": row.get("status")}) + "\n")


def mark_started(folder: Path, index: int, started: CellSpec) -> None:
    """The cell's completed spec as its process starts: if the task is then killed outright (no row), `status` records
    the lost task under the identity its row would have had (the device model is the node's to say), not as a cell
    of its own beside the rerun's row. A marker that cannot be written costs only that."""
    try:
        write_atomically(folder / "started" / f"{index}.json", started.to_json() + "\n")
    except OSError as exc:
        print(f"fwbench slurm: cannot write the started marker of task {index}: {exc}", file=sys.stderr)


# The fields of a started marker that status takes (those the engine and the node decide); the rest of the lost row's
# identity is the plan's, which the submitter wrote (a marker sits in a folder others may write).
NODE_DECIDED = ("engine", "pin_set", "image_variant", "device", "device_model")


def started_spec(folder: Path, index: int, planned: CellSpec) -> CellSpec:
    """The planned spec with the node-decided fields of the task's started marker, if it left a readable one."""
    try:
        started = CellSpec.from_json((folder / "started" / f"{index}.json").read_text())
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return planned
    taken = {name: getattr(started, name) for name in NODE_DECIDED}
    if not all(value is None or (isinstance(value, str) and re.fullmatch(r"[^/\\\x00-\x1f]{1,200}", value))
               for value in taken.values()):
        return planned
    return replace(planned, **taken)


def explain_stop(kind: str, signal_name: str) -> str:
    if kind == "timeout":
        return (f"Slurm's time limit of the array task was about to be reached ({signal_name} from "
                "sbatch --signal): the cell was stopped; raise --time")
    return (f"Slurm stopped the array task ({signal_name}: scancel, preemption, or the time limit itself) "
            "before the cell finished")


# -- status ---------------------------------------------------------------------------------------------

@dataclass
class TaskState:
    index: int
    spec: CellSpec
    state: str  # PENDING / RUNNING / ... while Slurm has it; else the row's status, or "no row"
    detail: str = ""


def submissions(out: Path) -> list[Path]:
    base = out / SUBMISSIONS
    found = [path.parent for path in base.glob("*/submission.json")] if base.is_dir() else []
    return sorted(found)


def read_submission(folder: Path) -> dict:
    """submission.json, as far as it is trusted: it sits in a results folder others may write, so only the job id
    is taken from it (checked to be one), never a path."""
    try:
        meta = json.loads((folder / "submission.json").read_text())
        job_id = str(meta["job_id"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise SlurmError(f"cannot read the submission {folder}: {exc.__class__.__name__}: {exc}") from None
    if not re.fullmatch(r"[0-9]{1,12}", job_id):
        raise SlurmError(f"the submission {folder} names no valid job id ({job_id[:40]!r})")
    return {**meta, "job_id": job_id}


def queued_cells(out: Path) -> set[tuple[CellIdentity, int]]:
    """Cells of earlier submissions that Slurm still has (pending or running): a resubmission leaves them to
    those tasks instead of queueing them twice."""
    cells = set()
    for folder in submissions(out):
        states = queued(read_submission(folder)["job_id"])
        if states is None:
            raise SlurmError(f"squeue failed: cannot tell which cells of {folder.name} are still queued")
        if not states:
            continue
        planned = cellplan.read_plan(folder / "cells.json")
        cells.update(completed_identity(planned[index]) for index in states if index < len(planned))
    return cells


def queued(job_id: str) -> dict[int, str] | None:
    """Array index -> Slurm state for the tasks Slurm still lists (None: squeue failed)."""
    listed = _slurm(["squeue", "--noheader", "--array", f"--jobs={job_id}", "--format=%K %T"])
    if listed.returncode != 0:
        if "Invalid job id" in listed.stderr:
            return {}  # the whole array has left the queue
        return None
    states = {}
    for line in listed.stdout.splitlines():
        index, _, state = line.strip().partition(" ")
        if index.isdigit():
            states[int(index)] = state
    return states


def task_states(folder: Path, record_lost: bool = True) -> list[TaskState]:
    """Each array task's state. A task Slurm no longer lists that left no row (killed outright, or
    cancelled before it started) gets a row saying so, so the matrix shows the gap and a resubmission
    reruns it."""
    meta = read_submission(folder)
    out = folder.parent.parent  # <out>/.slurm/<submission>: where this status was asked about, never a path from a file
    specs = cellplan.read_plan(folder / "cells.json")
    in_queue = queued(meta["job_id"])
    states = []
    for index, spec in enumerate(specs):
        marker = folder / "done" / f"{index}.json"
        if marker.is_file():
            row = _marked_row(out, marker)
            states.append(TaskState(index, spec, row.get("status", "row missing"), row.get("error_message") or ""))
        elif in_queue is None:
            states.append(TaskState(index, spec, "unknown", "squeue failed"))
        elif index in in_queue:
            states.append(TaskState(index, spec, in_queue[index]))
        else:
            log = folder / "logs" / f"{index}.out"
            state = TaskState(index, spec, "no row", f"see {log}" if log.is_file() else "never started")
            if record_lost:
                state = _record_lost(folder, out, index, spec, log)
            states.append(state)
    return states


def _marked_row(out: Path, marker: Path) -> dict:
    """The row a done/<index>.json marker names, read only from inside the results folder."""
    try:
        named = (out / json.loads(marker.read_text())["row"]).resolve()
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not named.is_relative_to(out.resolve()):
        return {"status": "row missing", "error_message": f"{marker} names a file outside {out}"}
    return results.read_row(named) or {}


def _record_lost(folder: Path, out: Path, index: int, spec: CellSpec, log: Path) -> TaskState:
    if log.is_file():
        status, kind = "error", "SlurmTaskKilled"
        message = ("the Slurm array task ended without writing its row: killed outright (SIGKILL: out of "
                   f"memory, node failure) or its command failed to start; its output: {log}")
    else:
        status, kind = "cancelled", "SlurmTaskNotStarted"
        message = "the Slurm array task never started (cancelled while pending)"
    spec = started_spec(folder, index, spec)
    record = {**base_record(replace(spec, run_id=folder.name)), "status": status, "error_type": kind,
              "error_message": message}
    path = results.write_new_row(spec, out, record)
    mark_done(folder, index, path, out)
    return TaskState(index, spec, status, message)

