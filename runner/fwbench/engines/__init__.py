"""Engines launch one cell process and report how it ended. The runner turns that into a row.

  * `local`:   the stack's own virtual environment, built from images/<stack>/requirements.txt
  * `current`: this interpreter (inside a stack's Docker image, or a dev env that has the frameworks)
  * `docker`:  the stack's image, one container per cell (engines/docker.py)

Every engine also names the image variant each stack's cells run with (cpu, gpu, venv, host) and the device
model they are expected to run on: both are part of a cell's identity (fwbench.core.identity).

A cell never outlives its runner: a runner killed with SIGKILL cannot clean up, so the local cell
process asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), and a docker cell's
container is watched by a small watchdog process that removes it (engines/watchdog.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fwbench.core import registry
from fwbench.core.cpusets import parse_cpu_set
from fwbench.core.spec import CellSpec
from fwbench.engines.device import hide_gpus
from fwbench.harness import hold

# Grace period between SIGTERM and SIGKILL when a cell overruns its timeout.
KILL_GRACE_S = 10.0


class EngineError(RuntimeError):
    """The engine itself cannot work (e.g. an environment failed to build)."""


@dataclass
class CellOutcome:
    returncode: int | None
    timed_out: bool
    log_path: Path
    record_path: Path
    oom_killed: bool = False  # the engine saw the kernel/cgroup OOM killer end the cell
    row_fields: dict = field(default_factory=dict)  # engine facts for the row (image id, digest)
    engine_failure: str | None = None  # the engine itself failed around the cell (e.g. Docker stopped answering)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def cell_settings(spec: CellSpec) -> dict[str, str]:
    """The variables fwbench sets for a cell: pinned thread counts, no hub access, framework switches."""
    threads = str(spec.threads)
    return {
        # Oversubscribed OpenMP pools made steps 10-25x slower here: pin every pool we know of.
        # (core.cpusets.THREAD_VARIABLES names these four for the row; TensorFlow's inter-op pool gets one thread.)
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "TF_NUM_INTRAOP_THREADS": threads,
        "TF_NUM_INTEROP_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Random weights only: fail loudly rather than download anything.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        **keras_environment(spec.stack),
    }


def cell_environment(spec: CellSpec) -> dict[str, str]:
    """Environment of a local cell process: this process's environment plus the cell settings, minus the
    variables the stack's definition unsets."""
    env = {**os.environ, **cell_settings(spec)}
    for name in registry.get_stack(spec.stack).env_unset:
        env.pop(name, None)
    if spec.device == "cpu":
        return hide_gpus(env)
    if spec.gpus:
        # The slot's GPUs, exactly (fwbench.engines.slots: one, or --devices N). CUDA numbers GPUs fastest-first
        # unless told otherwise; PCI order makes its numbers NVML's, the numbering the slot (and the row) use.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


def keras_environment(stack: str) -> dict[str, str]:
    """Framework switches a stack's cell needs (Keras reads them at import; recorded on its rows by the
    cell): from the stack's definition, fwbench.core.registry.Stack.env."""
    return registry.get_stack(stack).environment()


PR_SET_PDEATHSIG = 1


def _libc_prctl():
    """libc's prctl, looked up in the runner: the child must not call dlopen between fork and exec
    (with runner threads, another thread may hold the loader's lock at the fork and never release it)."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl


def prepare_child(parent_pid: int, cpus: set[int] | None = None):
    """A preexec function: the child gets SIGKILL when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG; a runner worker thread lives as long as its cell) and exits at once if the runner
    already died between fork and this call; with `cpus` it is pinned to those cores before the cell
    starts, so every thread the framework creates later stays on them."""
    prctl = _libc_prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return preexec


def launch_process(argv: list[str], spec: CellSpec, record_path: Path, log_path: Path,
                   env: dict[str, str]) -> CellOutcome:
    """Run a cell command with a timeout, on the CPU cores of its slot (spec.cpu_set); on overrun kill
    its whole process group. The cell dies with the runner, even when the runner is killed with SIGKILL."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpus = parse_cpu_set(spec.cpu_set) if spec.cpu_set else None
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True, preexec_fn=prepare_child(os.getpid(), cpus))
        watch = _Timeout(process, spec.timeout_s, Path(env[hold.HOLD_ENV]) if env.get(hold.HOLD_ENV) else None)
        try:
            # A blocking wait: Popen.wait(timeout=...) polls, waking the runner every 50 ms beside the cell's
            # threads for the whole cell; the timeout is a timer thread's, which sleeps until it is due.
            process.wait()
        except BaseException:  # Ctrl-C in the runner: do not leave a cell running
            watch.cancel()
            _kill_group(process)
            raise
        watch.cancel()
    return CellOutcome(process.returncode, watch.fired, log_path, record_path)


class _Timeout:
    """Kills a cell's process group once `timeout_s` have passed, from a timer thread (see launch_process). A cell
    started ahead of its turn (`hold_dir`, fwbench.harness.hold) is timed from its release, with the timeout its
    launcher gave it then (at most `timeout_s`): until then it waits and is no part of the cell's time."""

    _HOLD_POLL_S = 0.25

    def __init__(self, process: subprocess.Popen, timeout_s: float, hold_dir: Path | None = None):
        self.process, self.fired = process, False
        self._timeout_s, self._hold_dir = timeout_s, hold_dir
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        timeout_s = self._timeout_s
        if self._hold_dir is not None:
            starting_s = 0.0  # before it holds (loading, importing) counts against the timeout; held does not
            while (found := hold.state(self._hold_dir)) in ("starting", "held") and self.process.poll() is None:
                if found == "starting":
                    starting_s += self._HOLD_POLL_S
                    if starting_s >= timeout_s:
                        self._expire()
                        return
                if self._cancelled.wait(self._HOLD_POLL_S):
                    return
            # The launcher's timeout from the release (what its budget has left), within the cell's own.
            timeout_s = min(hold.release_timeout_s(self._hold_dir, timeout_s), timeout_s - starting_s)
        if not self._cancelled.wait(timeout_s):
            self._expire()

    def _expire(self) -> None:
        if self.process.poll() is None:
            self.fired = True
            _kill_group(self.process)

    def cancel(self) -> None:
        self._cancelled.set()
        if self._thread is not threading.current_thread():
            self._thread.join()  # a kill under way: its `fired` is then final


def _kill_group(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def write_spec(spec: CellSpec, work_dir: Path) -> Path:
    work_dir.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(dir=work_dir, prefix="spec-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(spec.to_json())
    return Path(path)
