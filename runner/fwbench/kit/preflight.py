"""Once per window, before any cell: install the wheelhouse (hashes checked), record the host's facts, then side by side
`fwbench doctor`, the imports of fwbench and of each planned stack (and the window's first units' imports, started
ahead). Doctor and the stacks' imports run once per GPU model, commit, wheelhouse and plan: a later window with the
same (kit-state.json's `preflight`) takes the stacks that did not import from the state and checks only fwbench's
own imports; the wheels are installed on every (fresh) machine all the same."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Callable

from fwbench.kit.folders import keep_earlier_host
from fwbench.kit.host import record_host, usable_gpu_count, window_gpu
from fwbench.kit.image import FWBENCH_MODULES
from fwbench.kit.install import broken_stacks, check_imports, install, kit_environment, wheelhouse_stamp
from fwbench.kit.layout import REPO, KitError, KitFolders
from fwbench.kit.log import log
from fwbench.kit.plan import PlanSettings


def run_doctor(folders: KitFolders, plan: PlanSettings) -> subprocess.Popen:
    """`fwbench doctor --engine current` on the plan's stacks, preset and tasks, started in the background (it reads
    the host and probes each framework on the GPU while the kit checks imports); finish_doctor waits."""
    command = doctor_command(plan)
    output = open(folders.out / "doctor.txt", "w")
    try:
        return subprocess.Popen(command, env=kit_environment(folders), stdout=output, stderr=subprocess.STDOUT,
                                cwd=REPO)
    finally:
        output.close()


def finish_doctor(folders: KitFolders, doctor: subprocess.Popen, timeout_s: float) -> int:
    """Wait for doctor (at most timeout_s more), then log its verdict; a FAIL is logged and the kit goes on."""
    try:
        code = doctor.wait(timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        doctor.kill()
        doctor.wait()
        with open(folders.out / "doctor.txt", "a") as output:
            output.write(f"fwbench doctor did not finish in its {timeout_s:.0f} s: stopped\n")
        code = 1
    failed = [line for line in (folders.out / "doctor.txt").read_text(errors="replace").splitlines()
              if line.startswith("FAIL")]
    log(f"doctor: exit {code}" + (": " + "; ".join(failed) + " (going on; see doctor.txt)" if code else ""))
    return code


def record_window_host(folders: KitFolders) -> None:
    """This window's host.json (an earlier window's, restored, is kept as host-<its time>.json beside it)."""
    keep_earlier_host(folders.out / "host.json", {})
    facts = record_host(folders)
    log(f"host recorded: {', '.join((facts.get('nvml') or {}).get('gpu_names') or ['no GPU'])}, commit "
        f"{(facts.get('git_revision') or 'unknown')[:12]} ({facts.get('git_revision_from')})")


def doctor_command(plan: PlanSettings) -> list[str]:
    """`fwbench doctor --engine current` on the plan's stacks, preset and tasks."""
    command = [sys.executable, "-m", "fwbench.cli", "doctor", "--engine", "current", "--preset", plan.preset]
    for stack in dict.fromkeys(stack for stack, _mode in plan.variants):
        command += ["--stack", stack]
    for task in plan.tasks:
        command += ["--task", task]
    return command


def preflight_key(folders: KitFolders, plan: PlanSettings, commit: str | None) -> dict:
    """What a preflight's doctor and imports depend on: the GPU model, the commit, the wheelhouse and doctor's plan."""
    return {"gpu": window_gpu(folders), "commit": commit, "wheelhouse": wheelhouse_stamp()[:16],
            "doctor": doctor_command(plan)[3:]}


def preflight(folders: KitFolders, plan: PlanSettings, *, doctor_timeout_s: float, state=None,
              commit: str | None = None, meanwhile: Callable[[int], None] | None = None) -> tuple[dict[str, str], int]:
    """Returns (stack -> why it cannot run here, usable GPUs). state: the kit's KitState (None: always the whole
    preflight); commit: the one this window runs; meanwhile: called with the usable GPUs once the wheels are
    installed, before doctor and the imports (the window starts its first units' imports beside them)."""
    begun = time.monotonic()
    install(folders.wheels, folders.site)
    with ThreadPoolExecutor(max_workers=2) as pool:
        host = pool.submit(record_window_host, folders)
        gpus = pool.submit(usable_gpu_count)
        host.result()
        gpus = gpus.result()
    if meanwhile is not None:
        meanwhile(gpus)
    key = preflight_key(folders, plan, commit)
    earlier = state.passed_preflight(key) if state is not None and commit else None
    if earlier is not None:
        broken, unrunnable = check_imports(folders, FWBENCH_MODULES), dict(earlier.get("unrunnable") or {})
        log(f"preflight: doctor and the stacks' imports passed on this GPU model at this commit with this wheelhouse "
            f"({earlier.get('at')}): not run again")
    else:
        doctor = run_doctor(folders, plan)
        stacks = [stack for stack, _mode in plan.variants]
        with ThreadPoolExecutor(max_workers=2) as pool:
            own = pool.submit(check_imports, folders, FWBENCH_MODULES)
            unrunnable = pool.submit(broken_stacks, folders, stacks)
            broken, unrunnable = own.result(), unrunnable.result()
        passed = finish_doctor(folders, doctor, doctor_timeout_s - (time.monotonic() - begun)) == 0
    if broken:
        raise KitError("fwbench itself does not import with the kit installed: " + "; ".join(broken))
    if earlier is None and passed and state is not None and commit:
        state.record_preflight(key, unrunnable, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    log(f"preflight done in {time.monotonic() - begun:.0f} s")
    return unrunnable, gpus
