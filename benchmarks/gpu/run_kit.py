"""The GPU kit: one command per GPU window on an offline host. It installs the wheelhouse, records the host, runs the
GPU checks at `tiny` sizes, then the `paper` cells in priority order while they fit the window's budget, checks the
rows, aggregates a report, and always leaves the few files worth bringing back, whatever failed. The next window
restores them and goes on.

Runs with the host's own Python (no fwbench install: this checkout's runner/ and aggregator/ go on PYTHONPATH; the
wheels are installed with --no-index --no-deps into .gpu-kit/site, also on PYTHONPATH):

    python benchmarks/gpu/run_kit.py prepare                                # here: wheelhouse check, source.json
    python3 benchmarks/gpu/run_kit.py window --budget-s 540 --export "$OUT"  # there: one window
    python3 benchmarks/gpu/run_kit.py status                                 # units done and left, device minutes
    python3 benchmarks/gpu/run_kit.py restore EXPORT_DIR_OR_RESULTS_DIR      # continue where a window stopped
    python3 benchmarks/gpu/run_kit.py publish                                # -> benchmarks/results/<date>-<gpu>/

Everything goes under one folder (--out, default .gpu-kit/out): rows/ (one Parquet row per cell-repeat), checks/
(the check cells' rows), report/, host.json, nvidia-smi.txt, kit-state.json, checks.txt, doctor.txt, kit.log.
--export DIR receives the 8 files worth bringing back (rows and check rows packed into rows.tar.gz), after every
step of the window, so a window killed at its time limit still brings back what it did.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "runner"), str(REPO / "aggregator"), str(HERE)]

from fwbench.core import model_file  # noqa: E402
from fwbench.core.atomic import write_atomically  # noqa: E402

import kit_install  # noqa: E402
import kit_plan  # noqa: E402
from kit_install import (FWBENCH_MODULES, broken_stacks, check_imports, install, kit_environment,  # noqa: E402
                         log, record_host, usable_gpu_count)
from kit_plan import KitError, KitState, Unit  # noqa: E402

KIT = REPO / ".gpu-kit"
RESULTS = REPO / "benchmarks" / "results"
# Seconds a unit needs beyond its cell's timeout: the CLI's start, the data check, writing the row.
UNIT_OVERHEAD_S = 20.0
# A repeat of a cell that already ran ok is expected to take about as long again: it starts only if this many
# times its wall time (at least MIN_REPEAT_S) is left.
REPEAT_FACTOR, MIN_REPEAT_S = 1.5, 30.0
# The files a window brings back (the host returns at most 8).
EXPORTED = ("rows.tar.gz", "report.md", "host.json", "nvidia-smi.txt", "kit-state.json", "checks.txt", "doctor.txt",
            "kit.log")
ROW_FOLDERS = ("rows", "checks")  # packed into rows.tar.gz: the cells' rows and the check cells' rows


class Deadline:
    """Seconds left of a window's budget, on the monotonic clock."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# -- running units -----------------------------------------------------------------------------------

def unit_row(rows: Path, preset: str, unit: Unit) -> dict | None:
    """The newest row written for this unit (the file name may carry setting tokens or a settings hash)."""
    from fwbench.core.results import read_row

    paths = unit_row_paths(rows, preset, unit)
    return read_row(paths[-1]) if paths else None


def unit_row_paths(rows: Path, preset: str, unit: Unit) -> list[Path]:
    """The unit's row files, oldest first: those of its cell and repeat at its precision, devices and timed steps
    (read from each row: such a row's file name differs from the default one's only by a token)."""
    from fwbench.core import precision, registry
    from fwbench.core.identity import CellIdentity
    from fwbench.core.results import read_row

    folder = rows / preset / unit.stack
    paths = sorted(folder.glob(f"{unit.task}.compile-{unit.compile_mode}*.r{unit.repeat}.parquet"),
                   key=lambda path: path.stat().st_mtime)
    steps = unit.steps or registry.default_steps(unit.task, preset)

    rows_read = [(path, read_row(path)) for path in paths]
    return [path for path, row in rows_read if row is not None and precision.of_row(row) == unit.precision
            and CellIdentity.of_row(row).setting("devices") == unit.devices
            and CellIdentity.of_row(row).setting("steps") in (steps, None)]


def run_unit(unit: Unit, args, timeout_s: float, extra: list[str] | None = None, *, rows: Path | None = None,
             preset: str | None = None) -> dict | None:
    """One repeat of one cell through the repository's CLI (--engine current: this interpreter and its
    libraries); --repeats r+1 with --resume runs just repeat r when the earlier ones have ok rows."""
    rows, preset = rows or args.out / "rows", preset or args.preset
    steps = unit.steps
    # A model file's cell: its kind and batch from the task id; the stack's own mode (the twin's eager).
    model_task = model_file.parse_task(unit.task) if unit.model else None
    cell = (["--model", str(kit_plan.model_path(unit.model)), "--task", model_task.kind, "--batch", str(model_task.batch)]
            if model_task else ["--compile", unit.compile_mode, "--task", unit.task])
    argv = [sys.executable, "-m", "fwbench.cli", "run", "--engine", "current", "--pin-set", "current",
            "--stack", unit.stack, *cell, "--preset", preset,
            "--repeats", str(unit.repeat + 1), "--resume", "--timeout", f"{timeout_s:.0f}",
            "--out", str(rows), "--data", str(args.data), *(["--steps", str(steps)] if steps else []),
            *([] if unit.precision == "published" else ["--precision", unit.precision]),
            *([] if unit.devices == 1 else ["--devices", str(unit.devices)]), *(extra or [])]
    env = kit_environment(args.site)
    env.setdefault("FWBENCH_HOME", str(KIT / "home"))
    with open(args.out / "kit.log", "a") as output:
        output.write(f"\n$ {' '.join(argv)}\n")
        output.flush()
        subprocess.run(argv, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    return unit_row(rows, preset, unit)


def model_plan(args) -> dict:
    """plan_units' model-file arguments from the command line (--models, --model-batch, --model-precision)."""
    return {"models": args.models, "model_batch": args.model_batch, "model_precision": args.model_precision}


def needed_s(state: KitState, unit: Unit, preset: str) -> float:
    """How much of the budget a unit should have before it starts: a cell run before, about its wall time; a
    first run, the plan's estimate (kit_plan.estimate_s)."""
    known = state.known_wall_s(unit)
    return kit_plan.estimate_s(unit, preset) if known is None else max(MIN_REPEAT_S, REPEAT_FACTOR * known)


def run_doctor(args) -> subprocess.Popen:
    """`fwbench doctor --engine current` on the kit's stacks, preset and tasks, started in the background (it
    reads the host and probes each framework on the GPU while the kit checks imports); finish_doctor waits."""
    command = [sys.executable, "-m", "fwbench.cli", "doctor", "--engine", "current", "--preset", args.preset]
    for stack in dict.fromkeys(stack for stack, _mode in args.variants):
        command += ["--stack", stack]
    for task in args.tasks:
        command += ["--task", task]
    output = open(args.out / "doctor.txt", "w")
    try:
        return subprocess.Popen(command, env=kit_environment(args.site), stdout=output, stderr=subprocess.STDOUT,
                                cwd=REPO)
    finally:
        output.close()


def finish_doctor(args, doctor: subprocess.Popen, timeout_s: float) -> int:
    """Wait for doctor (at most timeout_s more), then log its verdict; a FAIL is logged and the kit goes on."""
    try:
        code = doctor.wait(timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        doctor.kill()
        doctor.wait()
        with open(args.out / "doctor.txt", "a") as output:
            output.write(f"fwbench doctor did not finish in its {timeout_s:.0f} s: stopped\n")
        code = 1
    failed = [line for line in (args.out / "doctor.txt").read_text(errors="replace").splitlines()
              if line.startswith("FAIL")]
    log(f"doctor: exit {code}" + (": " + "; ".join(failed) + " (going on; see doctor.txt)" if code else ""))
    return code


def preflight(args) -> tuple[dict[str, str], int]:
    """Once per window: install the wheelhouse (hashes checked), then side by side doctor, fwbench's and each
    stack's imports and the host's facts. Returns (stack -> why it cannot run here, usable GPUs)."""
    begun = time.monotonic()
    install(args.wheels, args.site)
    doctor = run_doctor(args)
    stacks = [stack for stack, _mode in args.variants]
    with ThreadPoolExecutor(max_workers=4) as pool:
        own = pool.submit(check_imports, args.site, FWBENCH_MODULES)
        unrunnable = pool.submit(broken_stacks, args.site, stacks)
        host = pool.submit(record_window_host, args)
        gpus = pool.submit(usable_gpu_count)
        broken, unrunnable, gpus = own.result(), unrunnable.result(), gpus.result()
        host.result()
    finish_doctor(args, doctor, args.doctor_timeout - (time.monotonic() - begun))
    if broken:
        raise KitError("fwbench itself does not import with the kit installed: " + "; ".join(broken))
    log(f"preflight done in {time.monotonic() - begun:.0f} s")
    return unrunnable, gpus


def record_window_host(args) -> None:
    """This window's host.json (an earlier window's, restored, is kept as host-<its time>.json beside it)."""
    keep_earlier_host(args.out / "host.json", {})
    facts = record_host(args.out, args.site)
    log(f"host recorded: {', '.join((facts.get('nvml') or {}).get('gpu_names') or ['no GPU'])}, commit "
        f"{(facts.get('git_revision') or 'unknown')[:12]} ({facts.get('git_revision_from')})")


def run_units(args, state: KitState, units: list[Unit], deadline: Deadline, exported) -> int:
    """Run pending units in order while they fit: a unit starts only if its estimate (or 1.5x its earlier wall
    time) fits what is left; one that does not is passed over for a later one that does. Each cell's --timeout
    is what is left (at most --cell-timeout), so no cell outlives the window; a cell cut short that way has its
    row removed and runs first in the next window (only a cell that timed out with all of --cell-timeout is
    recorded as a timeout)."""
    ran, passed_over = 0, []
    for unit in state.pending(units, args.retry_failed):
        if args.max_units is not None and ran >= args.max_units:
            break
        if not state.runnable(unit, args.retry_failed):  # its previous repeat failed in this window
            continue
        left = deadline.left() - UNIT_OVERHEAD_S
        need = min(needed_s(state, unit, args.preset), args.cell_timeout)
        if left < need:
            passed_over.append(f"{unit.key} ({need:.0f} s)")
            continue
        timeout_s = min(args.cell_timeout, left)
        log(f"{unit.key}: running (estimated {need:.0f} s, timeout {timeout_s:.0f} s)")
        begun = time.monotonic()
        row = run_unit(unit, args, timeout_s)
        wall_s = time.monotonic() - begun
        status = row["status"] if row else "no-row"
        if status == "timeout" and timeout_s < args.cell_timeout:
            remove_unit_row(args.out / "rows", args.preset, unit)
            status = "budget-cut"
        ms = row.get("ms_per_step") if row and status == "ok" else None
        state.record(unit, status, wall_s, ms)
        write_atomically(state.path, state.to_json())
        reason = "" if status == "ok" else f": {((row or {}).get('error_message') or 'see kit.log').splitlines()[0][:160]}"
        log(f"{unit.key}: {status} in {wall_s:.0f} s" + (f", {ms:.2f} ms/step" if ms else "") + reason)
        if status == "budget-cut":
            log(f"{unit.key}: cut by this window's budget, not by its own timeout: its row is removed and it runs "
                "first in the next window")
        ran += 1
        exported()
    if passed_over:
        log(f"not started, too little of the window left: {len(passed_over)} units, the first "
            + ", ".join(passed_over[:3]))
    return ran


def plan_counts(state: KitState, units: list[Unit], retry_failed: bool) -> str:
    """'N units: a done, b failed, c runnable now, d waiting for an earlier repeat'."""
    done = sum(state.status(unit) == "ok" for unit in units)
    runnable = sum(state.runnable(unit, retry_failed) for unit in units)
    failed = sum(state.status(unit) not in (None, "ok", "budget-cut") for unit in units)
    return (f"{len(units)} units: {done} done, {failed} failed, {runnable} runnable now, "
            f"{len(units) - done - failed - runnable} waiting for an earlier repeat")


def remove_unit_row(rows: Path, preset: str, unit: Unit) -> None:
    paths = unit_row_paths(rows, preset, unit)
    if paths:
        paths[-1].unlink()


def aggregate(args, timeout_s: float = 300.0) -> None:
    rows = args.out / "rows"
    if not any(rows.rglob("*.parquet")):
        log("no rows yet: no report")
        return
    try:
        done = subprocess.run([sys.executable, "-m", "fwbench.cli", "aggregate", str(rows), "-o",
                               str(args.out / "report")], env=kit_environment(args.site), capture_output=True,
                              text=True, cwd=REPO, timeout=max(timeout_s, 10))
    except subprocess.TimeoutExpired:
        raise KitError(f"fwbench aggregate did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise KitError(f"fwbench aggregate failed: {(done.stderr or done.stdout).strip()[-400:]}")
    log(f"report: {args.out / 'report' / 'report.md'}")


def export(args) -> None:
    """The files worth bringing back, at most 8: the rows and check rows packed into one archive, the report
    (markdown), the host, the kit's state and log, the checks and the doctor's lines. Each written atomically."""
    if not args.export:
        return
    args.export.mkdir(parents=True, exist_ok=True)
    archive = args.export / ".rows.tar.gz.tmp"
    with tarfile.open(archive, "w:gz") as tar:
        for folder in ROW_FOLDERS:
            if (args.out / folder).is_dir():
                tar.add(args.out / folder, arcname=folder, filter=lambda info: None if "/.work" in info.name else info)
    archive.replace(args.export / "rows.tar.gz")
    for name in EXPORTED[1:]:
        source = args.out / ("report/report.md" if name == "report.md" else name)
        if source.is_file():
            write_atomically(args.export / name, source.read_bytes())


def window(args) -> int:
    """One GPU window: restore, preflight, cell checks, units, row checks, report, export. Whatever fails, the
    report is tried and the files are exported; exit 0 when the window ran to its end (cells may have failed:
    their rows say so), 1 when a step of the kit itself failed."""
    started, began_at = time.monotonic(), datetime.now(timezone.utc)
    args.out.mkdir(parents=True, exist_ok=True)
    kit_install.LOG_PATH = args.out / "kit.log"
    # Units and checks stop starting at this point; the reserve is for the report and the export.
    deadline = Deadline(args.budget_s - args.reserve_s)
    state_path = args.out / "kit-state.json"
    code, checks = 0, None

    def exported() -> None:
        write_atomically(state_path, state.to_json())
        export(args)

    def stop(signum, _frame):
        raise KitError(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    commit = kit_install.source_revision().get("git_revision")
    state = KitState(state_path, commit)
    try:
        if args.restore != "none" and not (args.restore == "auto" and state_path.is_file()):
            restore_into(args, args.restore)
        state = KitState(state_path, commit)
        log(f"window: budget {args.budget_s:.0f} s ({args.reserve_s:.0f} s of it kept for the report and export); "
            f"{sum(1 for e in state.units.values() if e.get('status') == 'ok')} units done before")
        unrunnable, gpus = preflight(args)
        exported()
        if not args.skip_checks:
            import kit_checks

            share = Deadline(min(args.checks_s, deadline.left()))
            checks = kit_checks.Checks(args, state=state, time_left=share.left, on_line=exported)
            log(f"GPU checks on {'a GPU' if checks.gpu else 'no GPU (GPU-only checks SKIP)'}, at most "
                f"{min(args.checks_s, deadline.left()):.0f} s")
            checks.run_cell_checks(set(args.recheck) if args.recheck else None)
        if not args.skip_units:
            steps = {task: kit_plan.window_steps(task, args.preset, args.timed_window_s) for task in args.tasks}
            if args.steps:
                steps = {task: args.steps for task in args.tasks}
            units, left_out = kit_plan.plan_units(args.variants, args.tasks, args.repeats, unrunnable,
                                                  args.precisions, gpus=gpus, steps=steps, **model_plan(args))
            for line in left_out:
                log(f"left out: {line}")
            log(kit_plan.scaling_note(gpus, args.variants, args.tasks))
            shortened = {task: n for task, n in steps.items() if n is not None}
            if shortened:
                log("shortened timed windows (a cell identity of their own): "
                    + ", ".join(f"{task} {n} steps" for task, n in shortened.items()))
            log(f"{plan_counts(state, units, args.retry_failed)}; {deadline.left():.0f} s left for units")
            ran = run_units(args, state, units, deadline, exported)
            left_units = [unit for unit in units if state.status(unit) in (None, "budget-cut")]
            log(f"ran {ran} units this window; {plan_counts(state, units, args.retry_failed)}; about "
                f"{sum(needed_s(state, unit, args.preset) for unit in left_units) / 60:.0f} device minutes left"
                + (" (run another window to continue)" if left_units else ""))
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the report is tried and the files come back
        code = 1
        log(f"window stopped early: {type(exc).__name__}: {str(exc)[:400]}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if checks is not None:
            try:
                import kit_checks

                checks.run_row_checks(kit_checks.kit_rows(args.out), since=began_at)
            except Exception as exc:  # noqa: BLE001
                code = 1
                log(f"row checks failed: {type(exc).__name__}: {exc}")
        try:
            aggregate(args, timeout_s=args.reserve_s + deadline.left() - 5)
        except Exception as exc:  # noqa: BLE001
            code = 1
            log(f"no report: {exc}")
        log(f"window done in {time.monotonic() - started:.0f} s" + ("" if code == 0 else " (with errors above)"))
        try:
            write_atomically(state_path, state.to_json())
            export(args)
            if args.export:
                log(f"exported to {args.export}")
                export(args)  # once more, so that kit.log holds the line above
        except Exception as exc:  # noqa: BLE001
            code = 1
            print(f"error: export failed: {exc}", file=sys.stderr)
        kit_install.LOG_PATH = None
    return code


# -- restoring and publishing ----------------------------------------------------------------------------

def find_results(gpu_slug: str | None) -> Path | None:
    """The newest published results folder (benchmarks/results/<date>-<gpu>/) of this GPU, if any."""
    if not RESULTS.is_dir() or not gpu_slug:
        return None
    found = sorted(path for path in RESULTS.glob(f"*-{gpu_slug}") if (path / "kit-state.json").is_file())
    return found[-1] if found else None


def gpu_slug(names: list[str]) -> str | None:
    import re

    return re.sub(r"[^a-z0-9]+", "-", names[0].lower()).strip("-") if names else None


def restore_into(args, source: str | Path) -> None:
    """Bring an earlier window's files into the out folder: `auto` (the newest benchmarks/results/ folder of this
    GPU, if any), an exported folder or its rows.tar.gz, or a published results folder."""
    if str(source) == "auto":
        from fwbench.harness.envinfo import nvml_info

        found = find_results(gpu_slug(nvml_info().get("gpu_names") or []))
        if found is None:
            log("restore auto: no published results of this GPU under benchmarks/results/: starting afresh")
            return
        source = found
    source = Path(source)
    if (args.out / "kit-state.json").is_file():
        raise KitError(f"{args.out} already holds a kit state: restore into an empty --out")
    if source.is_file():
        restore_archive(source, args.out)
        folder = source.parent
    elif (source / "rows.tar.gz").is_file():
        restore_archive(source / "rows.tar.gz", args.out)
        folder = source
    elif (source / "rows").is_dir():  # a published folder: rows/ and checks/ as folders
        for name in ROW_FOLDERS:
            if (source / name).is_dir():
                shutil.copytree(source / name, args.out / name, dirs_exist_ok=True)
        folder = source
    else:
        raise KitError(f"{source}: neither a rows.tar.gz, an exported folder nor a published results folder")
    for name in EXPORTED[2:]:
        if (folder / name).is_file():
            write_atomically(args.out / name, (folder / name).read_bytes())
    for earlier in folder.glob("host-*.json"):
        write_atomically(args.out / earlier.name, earlier.read_bytes())
    log(f"restored {source} into {args.out}")


def restore_archive(archive: Path, out: Path) -> None:
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[0] in ROW_FOLDERS]
        if any(m.issym() or m.islnk() or ".." in Path(m.name).parts for m in members):
            raise KitError(f"{archive}: unexpected links or paths in the archive")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.12 (and backports)
        tar.extractall(out, members=members, **safe)


def publish(args) -> int:
    """Copy the kit's results into benchmarks/results/<date>-<gpu>/ for committing: rows, check rows, report,
    host facts, checks, doctor, state and log. The folder is named after the first window's date; a later window's
    files replace those of the same name there (earlier host facts stay as host-<time>.json)."""
    host_path = args.out / "host.json"
    if not host_path.is_file():
        raise KitError(f"{host_path} is missing: nothing was run into {args.out} (or restore it first)")
    host = json.loads(host_path.read_text())
    slug = gpu_slug((host.get("nvml") or {}).get("gpu_names") or [])
    if not slug:
        raise KitError("host.json names no GPU: these rows are not GPU results")
    earlier = sorted(args.out.glob("host-*.json"))
    first = json.loads(earlier[0].read_text()).get("recorded_at", host["recorded_at"]) if earlier else host["recorded_at"]
    # A window that went on from a published folder joins it (its export brings back this window's host facts
    # only, so the first window's date is that folder's).
    dest = continued_folder(args.dest, slug, args.out / "kit-state.json") or args.dest / f"{first[:10]}-{slug}"
    keep_earlier_host(dest / "host.json", host)
    try:
        aggregate(args)  # the report from every row there is (a restored folder has none yet)
    except KitError as exc:
        log(f"publishing without a fresh report: {exc}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ROW_FOLDERS:
        if (args.out / name).is_dir():
            if (dest / name).exists():
                shutil.rmtree(dest / name)
            shutil.copytree(args.out / name, dest / name, ignore=shutil.ignore_patterns(".work", "logs"))
    for name in [*EXPORTED[1:], *(path.name for path in earlier)]:
        source = args.out / ("report/report.md" if name == "report.md" else name)
        if source.is_file():
            shutil.copy2(source, dest / name)
    log(f"published {sum(1 for _ in (dest / 'rows').rglob('*.parquet'))} rows and the report to {dest}")
    return 0


def continued_folder(results: Path, slug: str, state_path: Path) -> Path | None:
    """The newest published folder of this GPU whose units this kit state holds, each with the same status (the
    state went on from it), or None."""
    if not state_path.is_file() or not results.is_dir():
        return None
    units = json.loads(state_path.read_text()).get("units", {})
    for folder in sorted(results.glob(f"*-{slug}"), reverse=True):
        published = folder / "kit-state.json"
        if not published.is_file():
            continue
        earlier = json.loads(published.read_text()).get("units", {})
        if earlier and all(key in units and (units[key].get("status") == entry.get("status") or entry.get("status")
                                             != "ok") for key, entry in earlier.items()):
            return folder
    return None


def keep_earlier_host(host_path: Path, host: dict) -> None:
    """An earlier window's host.json (restored into a window's folder, or published) stays beside the new host facts
    `host`, as host-<its time>.json; one recorded at host's time is that window's own."""
    if not host_path.is_file():
        return
    recorded = json.loads(host_path.read_text()).get("recorded_at", "earlier")
    if recorded != host.get("recorded_at"):
        kept = host_path.with_name(f"host-{recorded[:19].replace(':', '')}.json")
        if not kept.exists():
            host_path.replace(kept)


def status(args) -> int:
    gpus = usable_gpu_count()
    steps = {task: kit_plan.window_steps(task, args.preset, args.timed_window_s) for task in args.tasks}
    units, left_out = kit_plan.plan_units(args.variants, args.tasks, args.repeats, precisions=args.precisions,
                                          gpus=gpus, steps=steps, **model_plan(args))
    state = KitState(args.out / "kit-state.json", kit_install.source_revision().get("git_revision"))
    counts: dict[str, int] = {}
    for unit in units:
        key = state.status(unit) or ("pending" if state.runnable(unit, False) else "waiting")
        counts[key] = counts.get(key, 0) + 1
    left = [unit for unit in units if state.status(unit) in (None, "budget-cut")]
    minutes = sum(needed_s(state, unit, args.preset) for unit in left) / 60
    print(", ".join(f"{count} {name}" for name, count in sorted(counts.items())) + f" (of {len(units)} units; "
          f"{len(left_out)} cells left out as this host cannot run them)")
    print(f"left: {len(left)} units, about {minutes:.0f} device minutes (estimated; about "
          f"{math.ceil(minutes * 60 / WINDOW_UNITS_S)} windows of {WINDOW_UNITS_S:.0f} s of cells)")
    for name, entry in sorted(state.checks.items()):
        print(f"{entry.get('verdict', '?'):<4} {name} ({entry.get('at')})")
    print(kit_plan.scaling_note(gpus, args.variants, args.tasks))
    return 0


# What a 15-minute window leaves for cells: a 540-s budget less preflight, the checks' share and the reserve.
WINDOW_UNITS_S = 300.0


def prepare(args) -> int:
    """Here, before a window: check the wheelhouse against the lock, record the commit for the host (which gets no
    .git), and print the device call."""
    entries = kit_install.locked_wheels_for("cp312")
    missing = [entry["filename"] for entry in entries if not (args.wheels / entry["filename"]).is_file()
               or kit_install.sha256(args.wheels / entry["filename"]) != entry["sha256"]]
    if missing:
        raise KitError(f"the wheelhouse lacks or differs in {', '.join(missing)}: python "
                       "benchmarks/gpu/make_wheelhouse.py")
    source = {**kit_install.git_source(), "prepared_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if not source["git_revision"]:
        raise KitError("no git commit here: prepare from a git checkout")
    write_atomically(kit_install.SOURCE, json.dumps(source, indent=2) + "\n")
    size = sum(entry["bytes"] for entry in entries)
    print(f"wheelhouse ok ({len(entries)} wheels, {size / 2**20:.1f} MiB); commit {source['git_revision'][:12]}"
          + (" with uncommitted changes (commit first: the results name this commit)" if source["git_dirty"] else ""))
    print("device call: carry [\".gpu-kit/wheels\", \".gpu-kit/source.json\"], timeout_s 600, command:\n"
          "  PYTHONUNBUFFERED=1 python3 benchmarks/gpu/run_kit.py window --budget-s 540 --export \"$OUT\"")
    return 0


# -- command line ------------------------------------------------------------------------------------

def _argument(parse):
    """argparse shows an ArgumentTypeError's own message (a ValueError becomes 'invalid value')."""
    def parsed(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parsed


def check_names(variants: list[tuple[str, str]], tasks: list[str]) -> None:
    """Unknown stacks, tasks or compile modes: one error before anything runs (not one failed unit each)."""
    from fwbench.core import registry

    try:
        for task in tasks:
            registry.get_task(task)
        for stack, mode in variants:
            registry.check_compile_mode(registry.get_stack(stack), mode)
    except registry.RegistryError as exc:
        raise KitError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--out", type=Path, default=KIT / "out", help="the kit's folder (default .gpu-kit/out)")
        sub.add_argument("--wheels", type=Path, default=KIT / "wheels", help="the wheelhouse (default .gpu-kit/wheels)")
        sub.add_argument("--site", type=Path, default=KIT / "site", help="where the wheels are installed")
        sub.add_argument("--data", type=Path, default=KIT / "data", help="fwbench's shared input data")
        sub.add_argument("--preset", default="paper")
        sub.add_argument("--steps", type=int, help="timed steps of every cell (default: the window's, see "
                                                   "--timed-window-s)")
        sub.add_argument("--timed-window-s", type=float, default=kit_plan.DEFAULT_TIMED_WINDOW_S,
                         help="at paper, give a task fewer timed steps where its slowest published stack would "
                              "time longer than this (estimated; default 15; 0: the preset's steps)")
        sub.add_argument("--tasks", type=_argument(kit_plan.parse_tasks), default=kit_plan.parse_tasks(None),
                         help="comma-separated task ids (default: all 12)")
        sub.add_argument("--variants", type=_argument(kit_plan.parse_variants), default=kit_plan.parse_variants(None),
                         help="comma-separated STACK:COMPILE_MODE (default: native-torch:none, "
                              "native-torch:reduce-overhead, keras3-jax:xla, keras3-torch:none)")
        sub.add_argument("--repeats", type=int, default=3)
        sub.add_argument("--precisions", type=_argument(kit_plan.parse_precisions),
                         default=kit_plan.parse_precisions(None),
                         help="comma-separated fwbench --precision values, each after the one before, all "
                              "repeats included (default: published,bf16: bf16 when the time allows)")
        sub.add_argument("--models", type=_argument(kit_plan.parse_models), default=[],
                         help="comma-separated model files (docs/your-model.md), paths from the repository: their "
                              "fit and predict on keras3-jax, keras3-torch and the twin, after the BERT and SAM "
                              "predict cells (default: none)")
        sub.add_argument("--model-batch", type=int, default=kit_plan.DEFAULT_MODEL_BATCH,
                         help=f"--models' batch (default {kit_plan.DEFAULT_MODEL_BATCH})")
        sub.add_argument("--model-precision", type=_argument(lambda text: kit_plan.parse_precisions(text)[0]),
                         default=kit_plan.DEFAULT_MODEL_PRECISION,
                         help=f"--models' precision (default {kit_plan.DEFAULT_MODEL_PRECISION}: every backend's "
                              "float32 matmuls on TF32, like with like)")
        sub.add_argument("--export", type=Path, help="copy the 8 files worth bringing back here")

    run = commands.add_parser("window", help="one GPU window: checks, then cells within --budget-s; resumes")
    common(run)
    run.add_argument("--budget-s", type=float, default=540.0,
                     help="the window's whole time, report and export included (default 540)")
    run.add_argument("--reserve-s", type=float, default=30.0, help="seconds kept for the report and export")
    run.add_argument("--checks-s", type=float, default=180.0,
                     help="the most the GPU checks' cells may take of the window (default 180)")
    run.add_argument("--cell-timeout", type=float, default=480.0,
                     help="the longest a cell may take (default 480; within a window, at most what is left)")
    run.add_argument("--doctor-timeout", type=float, default=120.0, help="seconds for fwbench doctor (default 120)")
    run.add_argument("--restore", default="auto",
                     help="first restore an earlier window: auto (the default: the newest benchmarks/results/ folder "
                          "of this GPU, unless --out already holds a kit state), an exported folder or its "
                          "rows.tar.gz, a results folder, or none")
    run.add_argument("--recheck", action="append", help="run this cell check again although it passed earlier")
    run.add_argument("--skip-checks", action="store_true", help="no GPU checks")
    run.add_argument("--skip-units", action="store_true", help="no cells beyond the checks")
    run.add_argument("--max-units", type=int, help="start at most this many units")
    run.add_argument("--task", default="bert-predict", help="the cell the sync, TF32 and busy checks time")
    run.add_argument("--retry-failed", action="store_true", help="run units whose row was not ok again")
    sub = commands.add_parser("status", help="units done and left, in estimated device minutes")
    common(sub)
    sub = commands.add_parser("install", help="only install the wheelhouse and check the imports")
    common(sub)
    sub = commands.add_parser("prepare", help="here: check the wheelhouse, record the commit, print the device call")
    common(sub)
    sub = commands.add_parser("publish", help="copy rows, report and host facts to benchmarks/results/<date>-<gpu>")
    common(sub)
    sub.add_argument("--dest", type=Path, default=RESULTS)
    sub = commands.add_parser("restore", help="bring back an earlier window's files to continue or publish")
    common(sub)
    sub.add_argument("source", help="an exported folder, its rows.tar.gz, or a benchmarks/results/ folder")
    return top


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if getattr(args, "budget_s", 1) <= 0 or getattr(args, "cell_timeout", 1) <= 0 or args.repeats < 1:
            raise KitError("--budget-s, --cell-timeout and --repeats must be positive")
        args.out, args.site, args.wheels, args.data = (p.resolve() for p in (args.out, args.site, args.wheels, args.data))
        if args.export:
            args.export = args.export.resolve()
        check_names(args.variants, args.tasks)
        if args.command == "window":
            return window(args)
        if args.command == "install":
            install(args.wheels, args.site)
            broken = check_imports(args.site, ["keras", "keras_hub", "grain", "diffusers", "segment_anything"])
            print("\n".join(broken) or "the kit's packages import")
            return 1 if broken else 0
        if args.command == "prepare":
            return prepare(args)
        if args.command == "publish":
            return publish(args)
        if args.command == "restore":
            args.out.mkdir(parents=True, exist_ok=True)
            restore_into(args, args.source)
            return 0
        return status(args)
    except (KitError, OSError, tarfile.TarError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
