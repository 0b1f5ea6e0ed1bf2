"""The GPU kit, on the offline host: install the wheelhouse, record the host, run cells in chunks that fit a
time budget (resuming where the last chunk stopped), aggregate a report, and run the GPU checks.

Runs with the host's own Python (no fwbench install: this checkout's runner/ and aggregator/ go on
PYTHONPATH; the wheels are installed with --no-index --no-deps into .gpu-kit/site, also on PYTHONPATH):

    python3 benchmarks/gpu/run_kit.py run --budget-s 540 --export "$OUT"    # one chunk; call again to continue
    python3 benchmarks/gpu/run_kit.py checks --export "$OUT"                # the GPU checks, a line each
    python3 benchmarks/gpu/run_kit.py status                                # units done / left
    python3 benchmarks/gpu/run_kit.py restore rows.tar.gz                   # continue on a fresh machine
    python3 benchmarks/gpu/run_kit.py publish                               # -> benchmarks/results/<date>-<gpu>/

Everything goes under one folder (--out, default .gpu-kit/out): rows/ (one Parquet row per cell-repeat),
report/, host.json, nvidia-smi.txt, kit-state.json, checks.txt, doctor.txt (`fwbench doctor`, run first by `run`
and `checks`). --export DIR copies the few files worth
bringing back (rows packed into rows.tar.gz) into DIR.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "runner"), str(REPO / "aggregator"), str(HERE)]

from fwbench.core.atomic import write_atomically  # noqa: E402

import kit_plan  # noqa: E402
from kit_install import (FWBENCH_MODULES, broken_stacks, check_imports, install, kit_environment,  # noqa: E402
                         log, record_host, usable_gpu_count)
from kit_plan import KitError, KitState, Unit  # noqa: E402

KIT = REPO / ".gpu-kit"
# Seconds a unit needs beyond its cell's timeout: the CLI's start, the data check, writing the row.
UNIT_OVERHEAD_S = 20.0
# A repeat of a cell that already ran ok is expected to take about as long again: it starts only if this many
# times its wall time (at least MIN_REPEAT_S) is left.
REPEAT_FACTOR, MIN_REPEAT_S = 1.5, 30.0
DOCTOR_TIMEOUT_S = 600


# -- running units -----------------------------------------------------------------------------------

def unit_row(rows: Path, preset: str, unit: Unit) -> dict | None:
    """The newest row written for this unit (the file name may carry setting tokens or a settings hash)."""
    from fwbench.core.results import read_row

    paths = unit_row_paths(rows, preset, unit)
    return read_row(paths[-1]) if paths else None


def unit_row_paths(rows: Path, preset: str, unit: Unit) -> list[Path]:
    """The unit's row files, oldest first: those of its cell and repeat at its precision and devices (read from
    each row: a bf16 or --devices N row's file name differs from the one-device published one's only by a token)."""
    from fwbench.core import precision
    from fwbench.core.identity import CellIdentity
    from fwbench.core.results import read_row

    folder = rows / preset / unit.stack
    paths = sorted(folder.glob(f"{unit.task}.compile-{unit.compile_mode}*.r{unit.repeat}.parquet"),
                   key=lambda path: path.stat().st_mtime)
    rows_read = [(path, read_row(path)) for path in paths]
    return [path for path, row in rows_read if row is not None and precision.of_row(row) == unit.precision
            and CellIdentity.of_row(row).setting("devices") == unit.devices]


def run_unit(unit: Unit, args, timeout_s: float, extra: list[str] | None = None, *, rows: Path | None = None,
             preset: str | None = None) -> dict | None:
    """One repeat of one cell through the repository's CLI (--engine current: this interpreter and its
    libraries); --repeats r+1 with --resume runs just repeat r when the earlier ones have ok rows."""
    rows, preset = rows or args.out / "rows", preset or args.preset
    argv = [sys.executable, "-m", "fwbench.cli", "run", "--engine", "current", "--pin-set", "current",
            "--stack", unit.stack, "--compile", unit.compile_mode, "--task", unit.task, "--preset", preset,
            "--repeats", str(unit.repeat + 1), "--resume", "--timeout", f"{timeout_s:.0f}",
            "--out", str(rows), "--data", str(args.data), *(["--steps", str(args.steps)] if args.steps else []),
            *([] if unit.precision == "published" else ["--precision", unit.precision]),
            *([] if unit.devices == 1 else ["--devices", str(unit.devices)]), *(extra or [])]
    env = kit_environment(args.site)
    env.setdefault("FWBENCH_HOME", str(KIT / "home"))
    with open(args.out / "kit.log", "a") as output:
        output.write(f"\n$ {' '.join(argv)}\n")
        output.flush()
        subprocess.run(argv, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    return unit_row(rows, preset, unit)


def needed_s(state: KitState, unit: Unit, first_run_s: float) -> float:
    """How much of the budget a unit should have before it starts: a cell run before, about its wall time;
    a first run, --min-first-s (on a GPU most cells take well under that)."""
    known = state.known_wall_s(unit)
    return first_run_s if known is None else max(MIN_REPEAT_S, REPEAT_FACTOR * known)


def run_doctor(args) -> int:
    """`fwbench doctor --engine current` on the kit's stacks, preset and tasks, first thing in `run` and `checks`:
    its lines go to doctor.txt, its verdict to the log. A FAIL is logged and the kit goes on (its own test runs on
    a CPU)."""
    command = [sys.executable, "-m", "fwbench.cli", "doctor", "--engine", "current", "--preset", args.preset]
    for stack in dict.fromkeys(stack for stack, _mode in args.variants):
        command += ["--stack", stack]
    for task in args.tasks:
        command += ["--task", task]
    try:
        done = subprocess.run(command, env=kit_environment(args.site), capture_output=True, text=True, cwd=REPO,
                              timeout=DOCTOR_TIMEOUT_S)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        text, code = f"fwbench doctor did not finish in {DOCTOR_TIMEOUT_S} s\n", 1
    write_atomically(args.out / "doctor.txt", text)
    failed = [line for line in text.splitlines() if line.startswith("FAIL")]
    log(f"doctor: exit {code}" + (": " + "; ".join(failed) + " (going on; see doctor.txt)" if code else ""))
    return code


def run_chunk(args) -> int:
    """Run units in order while they fit the budget. Each cell's --timeout is what is left of the budget (at
    most --cell-timeout), so no cell outlives the chunk; a cell cut short that way (its timeout below the
    longest a chunk can give) has its row removed and runs again first in the next chunk, with the full
    timeout: only a cell that timed out with all of it is recorded as a timeout."""
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    run_doctor(args)
    install(args.wheels, args.site)
    broken = check_imports(args.site, FWBENCH_MODULES)
    if broken:
        raise KitError("fwbench itself does not import with the kit installed: " + "; ".join(broken))
    if not (args.out / "host.json").is_file():
        record_host(args.out, args.site)
        log(f"host recorded in {args.out / 'host.json'}")
    # A stack whose imports fail is left out with its reason; the others run.
    unrunnable = broken_stacks(args.site, [stack for stack, _mode in args.variants])
    gpus = usable_gpu_count()
    units, left_out = kit_plan.plan_units(args.variants, args.tasks, args.repeats, unrunnable, args.precisions,
                                          gpus=gpus)
    for line in left_out:
        log(f"left out: {line}")
    log(kit_plan.scaling_note(gpus, args.variants, args.tasks))
    state = KitState(args.out / "kit-state.json")
    full_timeout = min(args.cell_timeout, args.budget_s - UNIT_OVERHEAD_S - args.reserve_s)
    pending = [unit for unit in units if state.runnable(unit, args.retry_failed)]
    log(f"{len(units) - len(pending)} of {len(units)} units settled; budget {args.budget_s:.0f} s, "
        f"a cell may take up to {full_timeout:.0f} s")
    ran = 0
    for unit in pending:
        if not state.runnable(unit, args.retry_failed):  # its previous repeat failed in this chunk
            continue
        left = args.budget_s - (time.monotonic() - started) - UNIT_OVERHEAD_S - args.reserve_s
        need = min(needed_s(state, unit, args.min_first_s), full_timeout)
        if left < need:
            log(f"stopping: {unit.key} should have {need:.0f} s, {max(left, 0):.0f} s left of the budget "
                f"(less {UNIT_OVERHEAD_S:.0f} s overhead and {args.reserve_s:.0f} s for the report); run again "
                "to continue")
            break
        timeout_s = min(full_timeout, left)
        log(f"{unit.key}: running (timeout {timeout_s:.0f} s)")
        begun = time.monotonic()
        row = run_unit(unit, args, timeout_s)
        wall_s = time.monotonic() - begun
        status = row["status"] if row else "no-row"
        if status == "timeout" and timeout_s < full_timeout:
            remove_unit_row(args.out / "rows", args.preset, unit)
            status = "budget-cut"
        ms = row.get("ms_per_step") if row and status == "ok" else None
        state.record(unit, status, wall_s, ms)
        write_atomically(state.path, state.to_json())
        reason = "" if status == "ok" else f": {((row or {}).get('error_message') or 'see kit.log').splitlines()[0][:160]}"
        log(f"{unit.key}: {status} in {wall_s:.0f} s" + (f", {ms:.2f} ms/step" if ms else "") + reason)
        ran += 1
        if status == "budget-cut":
            log(f"{unit.key}: cut by this chunk's budget, not by its own timeout: its row is removed and it runs "
                "first in the next chunk")
            break
    aggregate(args)
    left_units = [unit for unit in units if state.runnable(unit, args.retry_failed)]
    log(f"ran {ran} units this chunk; {len(left_units)} left" + (" (run again to continue)" if left_units else ""))
    if args.export:
        export(args)
    return 0


def remove_unit_row(rows: Path, preset: str, unit: Unit) -> None:
    paths = unit_row_paths(rows, preset, unit)
    if paths:
        paths[-1].unlink()


def aggregate(args) -> None:
    rows = args.out / "rows"
    if not any(rows.rglob("*.parquet")):
        log("no rows yet: no report")
        return
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "aggregate", str(rows), "-o", str(args.out / "report")],
                          env=kit_environment(args.site), capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise KitError(f"fwbench aggregate failed: {(done.stderr or done.stdout).strip()[-400:]}")
    log(f"report: {args.out / 'report' / 'report.md'}")


def export(args) -> None:
    """The files worth bringing back, at most 8: the rows packed into one archive, the report (markdown), the
    host, the kit's state and log, the checks and the doctor's lines."""
    args.export.mkdir(parents=True, exist_ok=True)
    rows = args.out / "rows"
    if rows.is_dir():
        archive = args.export / ".rows.tar.gz.tmp"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(rows, arcname="rows")
        archive.replace(args.export / "rows.tar.gz")
    for name in ("report/report.md", "host.json", "nvidia-smi.txt", "kit-state.json", "checks.txt", "doctor.txt",
                 "kit.log"):
        source = args.out / name
        if source.is_file():
            write_atomically(args.export / source.name, source.read_bytes())
    log(f"exported to {args.export}")


def restore(args) -> int:
    """Unpack an exported rows.tar.gz into the out folder, so that `run` continues where it left off on a
    fresh machine, and `publish` works where the rows came back to (the exported kit-state.json, host.json,
    nvidia-smi.txt and checks.txt beside it are restored too)."""
    with tarfile.open(args.archive) as tar:
        members = [m for m in tar.getmembers() if m.name == "rows" or m.name.startswith("rows/")]
        if any(m.issym() or m.islnk() or ".." in Path(m.name).parts for m in members):
            raise KitError(f"{args.archive}: unexpected links or paths in the archive")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.12 (and backports)
        tar.extractall(args.out, members=members, **safe)
    for name in ("kit-state.json", "host.json", "nvidia-smi.txt", "checks.txt"):
        beside = args.archive.with_name(name)
        if beside.is_file():
            write_atomically(args.out / name, beside.read_bytes())
    log(f"restored {len(members)} entries into {args.out}")
    return 0


def publish(args) -> int:
    """Copy the kit's results into benchmarks/results/<date>-<gpu>/ (rows, report, host facts, checks) for
    committing: the date the host was recorded, the GPU NVML named."""
    import re

    host_path = args.out / "host.json"
    if not host_path.is_file():
        raise KitError(f"{host_path} is missing: nothing was run into {args.out} (or restore it first)")
    host = json.loads(host_path.read_text())
    gpus = (host.get("nvml") or {}).get("gpu_names") or []
    if not gpus:
        raise KitError("host.json names no GPU: these rows are not GPU results")
    slug = re.sub(r"[^a-z0-9]+", "-", gpus[0].lower()).strip("-")
    dest = args.dest / f"{host['recorded_at'][:10]}-{slug}"
    aggregate(args)  # the report from every row there is (a restored folder has none yet)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(args.out / "rows", dest / "rows")
    for name in ("report/report.md", "host.json", "nvidia-smi.txt", "checks.txt", "doctor.txt", "kit-state.json"):
        if (args.out / name).is_file():
            shutil.copy2(args.out / name, dest / Path(name).name)
    log(f"published {sum(1 for _ in (dest / 'rows').rglob('*.parquet'))} rows and the report to {dest}")
    return 0


def status(args) -> int:
    gpus = usable_gpu_count()
    units, left_out = kit_plan.plan_units(args.variants, args.tasks, args.repeats, precisions=args.precisions,
                                          gpus=gpus)
    state = KitState(args.out / "kit-state.json")
    counts: dict[str, int] = {}
    for unit in units:
        key = state.status(unit) or ("pending" if state.runnable(unit, False) else "waiting")
        counts[key] = counts.get(key, 0) + 1
    print(", ".join(f"{count} {name}" for name, count in sorted(counts.items())) + f" (of {len(units)} units; "
          f"{len(left_out)} cells left out as this host cannot run them)")
    print(kit_plan.scaling_note(gpus, args.variants, args.tasks))
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
        sub.add_argument("--steps", type=int, help="timed steps (default: the preset's)")
        sub.add_argument("--tasks", type=_argument(kit_plan.parse_tasks), default=kit_plan.parse_tasks(None),
                         help="comma-separated task ids (default: all 12, BERT, SAM, SD, Gemma, Mistral)")
        sub.add_argument("--variants", type=_argument(kit_plan.parse_variants), default=kit_plan.parse_variants(None),
                         help="comma-separated STACK:COMPILE_MODE (default: native-torch:none, "
                              "native-torch:reduce-overhead, keras3-jax:xla, keras3-torch:none)")
        sub.add_argument("--repeats", type=int, default=3)
        sub.add_argument("--precisions", type=_argument(kit_plan.parse_precisions),
                         default=kit_plan.parse_precisions(None),
                         help="comma-separated fwbench --precision values, each after the one before, all "
                              "repeats included (default: published,bf16: bf16 when the time allows)")
        sub.add_argument("--export", type=Path, help="copy rows.tar.gz, the report, host facts and state here")

    run = commands.add_parser("run", help="one chunk of cells within --budget-s; resumes")
    common(run)
    run.add_argument("--budget-s", type=float, default=540.0, help="stop starting units after this (default 540)")
    run.add_argument("--cell-timeout", type=float, default=480.0,
                     help="the longest a cell may take (default 480; within a chunk, at most what is left of it)")
    run.add_argument("--min-first-s", type=float, default=150.0,
                     help="start a cell's first run only with this much of the budget left (default 150)")
    run.add_argument("--reserve-s", type=float, default=30.0, help="seconds kept for the report and export")
    run.add_argument("--retry-failed", action="store_true", help="run units whose row was not ok again")
    checks = commands.add_parser("checks", help="the GPU checks, a pass/fail/skip line each")
    common(checks)
    checks.add_argument("--task", default="bert-predict", help="the cell the checks time (default bert-predict)")
    checks.add_argument("--cell-timeout", type=float, default=300.0)
    sub = commands.add_parser("status", help="units done and left")
    common(sub)
    sub = commands.add_parser("install", help="only install the wheelhouse and check the imports")
    common(sub)
    sub = commands.add_parser("publish", help="copy rows, report and host facts to benchmarks/results/<date>-<gpu>")
    common(sub)
    sub.add_argument("--dest", type=Path, default=REPO / "benchmarks" / "results")
    sub = commands.add_parser("restore", help="unpack an exported rows.tar.gz to continue on a fresh machine")
    common(sub)
    sub.add_argument("archive", type=Path)
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
        check_names(args.variants, args.tasks)
        if args.command == "run":
            return run_chunk(args)
        if args.command == "checks":
            import kit_checks

            return kit_checks.run_checks(args)
        if args.command == "install":
            install(args.wheels, args.site)
            broken = check_imports(args.site, ["keras", "keras_hub", "grain", "diffusers", "segment_anything"])
            print("\n".join(broken) or "the kit's packages import")
            return 1 if broken else 0
        if args.command == "publish":
            return publish(args)
        if args.command == "restore":
            args.out.mkdir(parents=True, exist_ok=True)
            return restore(args)
        return status(args)
    except (KitError, OSError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
