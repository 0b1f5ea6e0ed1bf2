"""A new user's first contact: README command 1 (`fwbench demo`) from nothing to a report with numbers.

    python benchmarks/first_contact.py [--home DIR] [--stack native-torch ...] [--steps 5] [--keep DIR]

From empty caches (a new FWBENCH_HOME, so no environment and no uv cache): builds the stacks'
environments (`fwbench env build`, timed), measures their disk (hard-linked files counted once, as `du`
does; also what the same files would take copied into each environment), then runs `fwbench demo`
(timed; its default --parallel auto) and prints both times, their sum and the targets. Per stack it
also shows where a tiny cell process's time went, from the phases each row records (extra.phases_s,
extra.process_s): interpreter start-up, framework import, model-library import, model build (setup_s), first
step (first_step_s, trace or compile), the timed steps, describing the run (facts, busy probe, CPU ceiling) and
teardown (the runner's process time minus the rest), and how many rows found a warm compilation cache.
Downloads count in the build time: the figure depends on the network as well as the machine. On a shared
machine the figures are indicative only; the demo rows' busy flags say when something else competed.
--json FILE also writes the figures with the date, machine, command and commit (benchmarks/measurement_log.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runner"), str(ROOT / "aggregator")]

TARGET_TOTAL_S = 15 * 60
TARGET_DISK_GB = 12.0
# The phases' keys in the --json file, in the order of the printed columns.
PHASE_KEYS = ("interpreter_s", "framework_import_s", "model_library_import_s", "model_build_s", "first_step_s",
              "timed_steps_s", "describing_s", "teardown_s")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="a new, empty FWBENCH_HOME (default: a temporary folder)")
    parser.add_argument("--stack", action="append", help="stacks to build and run (default: the demo's, all)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per demo cell (the demo's default)")
    parser.add_argument("--keep", type=Path, help="write the demo's results and report here (default: temporary)")
    parser.add_argument("--json", type=Path, help="also write the figures here (their place: benchmarks/results/"
                        "<date>-<machine>/first-contact.json)")
    return parser.parse_args()


def fwbench(home: Path, *args: str) -> float:
    """Run this checkout's fwbench CLI with FWBENCH_HOME=home; its wall time in seconds; stop on failure."""
    env = {**os.environ, "FWBENCH_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "runner"), str(ROOT / "aggregator"),
                                          os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"fwbench {' '.join(args[:2])} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


def disk_bytes(*roots: Path, seen: set | None = None) -> int:
    """Bytes on disk (allocated blocks) under roots, each file (inode) once, as `du` counts hard links."""
    seen = set() if seen is None else seen
    total = 0
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in files:
                info = os.lstat(os.path.join(folder, name))
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
    return total


def teardown_s(row: dict, phases: dict) -> float | None:
    """The process's time after its record (interpreter teardown) and the runner's launch overhead."""
    extra = json.loads(row["extra"] or "{}")
    if extra.get("process_s") is None or phases.get("interpreter_start") is None:
        return None
    return max(0.0, extra["process_s"] - row["wall_s"] - phases["interpreter_start"])


def main() -> None:
    args = parse_args()
    import measurement_log
    from fwbench.core import registry, results
    from fwbench.engines.local import StackEnvironment, uv_cache_dir
    from fwbench.harness.contention import host_load
    from fwbench.core.pins import DEFAULT_PIN_SET

    stacks = args.stack or [s for s in registry.STACKS
                            if (ROOT / "images" / s / DEFAULT_PIN_SET / "requirements.txt").is_file()]
    started = measurement_log.now()
    scratch = Path(tempfile.mkdtemp(prefix="fwbench-first-contact-"))
    home = args.home or scratch / "home"
    if home.exists() and any(home.iterdir()):
        sys.exit(f"error: --home {home} is not empty: first contact starts from nothing")
    cores, _ = host_load(sample_s=1.0)
    print(f"stacks: {', '.join(stacks)}; FWBENCH_HOME={home}; {os.cpu_count()} cores, "
          f"{cores if cores is not None else '?'} in use by other processes at the start")

    build_s = fwbench(home, "env", "build", *stacks)
    environments = [StackEnvironment(stack, DEFAULT_PIN_SET, home).path for stack in stacks]
    cache = uv_cache_dir(home)
    shared = disk_bytes(*environments, cache)
    copied = sum(disk_bytes(path) for path in environments)  # each environment counted on its own
    venvs_only = disk_bytes(*environments)

    out = args.keep or scratch / "demo"
    demo_s = fwbench(home, "demo", "--out", str(out), "--steps", str(args.steps), "--no-resume",
                     *[item for stack in stacks for item in ("--stack", stack)])
    rows = [results.read_row(path) for path in (out / "results").rglob("*.parquet")]
    ok = [row for row in rows if row["status"] == "ok"]
    busy = sum(1 for row in ok if row.get("busy"))

    gb = 1e9
    total_s = build_s + demo_s
    print(f"environment build: {build_s / 60:.1f} min ({len(stacks)} environments, empty caches)")
    print(f"disk: {shared / gb:.1f} GB environments + uv cache, files shared by hard links counted once "
          f"(environments alone {venvs_only / gb:.1f} GB; {copied / gb:.1f} GB if every environment held "
          f"its own copy); target <= {TARGET_DISK_GB:.0f} GB")
    print(f"demo: {demo_s / 60:.1f} min for {len(rows)} cells ({len(ok)} ok, {busy} busy), "
          f"{max((row.get('parallel_cells') or 1) for row in rows) if rows else 0} at once")
    print(f"first contact (build + demo): {total_s / 60:.1f} min; target <= {TARGET_TOTAL_S / 60:.0f} min"
          + (" - measured under load (busy rows)" if busy else ""))
    print("where a tiny cell process's time goes (medians per stack, seconds; warm: rows whose compilation "
          "cache was warm):")
    columns = [("start", lambda r, p: p.get("interpreter_start")), ("import", lambda r, p: p.get("framework_import")),
               ("models", lambda r, p: p.get("workload_import")), ("build", lambda r, p: r["setup_s"]),
               ("1st step", lambda r, p: r["first_step_s"]),
               ("timed", lambda r, p: r["ms_per_step"] * r["timed_steps"] / 1000),
               ("describe", lambda r, p: (p.get("describe") or 0) + (p.get("ceiling") or 0)),
               ("teardown", teardown_s)]
    print(f"  {'stack':<20}" + "".join(f"{name:>9}" for name, _ in columns) + f"{'total':>9}{'warm':>7}")
    phase_rows = []  # the --json file's table (render_measurements.py's first_contact.py columns)
    for stack in stacks:
        mine = [row for row in ok if row["stack"] == stack]
        if not mine:
            print(f"  {stack:<20} no ok cell")
            continue
        extras = [json.loads(row["extra"] or "{}") for row in mine]
        cells = [statistics.median(value(row, extra.get("phases_s") or {}) or 0.0 for row, extra in zip(mine, extras))
                 for _, value in columns]
        total = statistics.median(extra.get("process_s") or row["wall_s"] for row, extra in zip(mine, extras))
        warm = sum(1 for row in mine if row["compile_cache_warm"])
        print(f"  {stack:<20}" + "".join(f"{value:9.1f}" for value in cells) + f"{total:9.1f}{warm:>4}/{len(mine)}")
        phase_rows.append({"stack": stack, **dict(zip(PHASE_KEYS, cells)), "total_s": total,
                           "jax_cache_warm": f"{warm} of {len(mine)}" if warm else None})
    print(f"report: {out / 'report' / 'report.md'}")
    if args.json:
        figures = [["the environments built (min)", build_s / 60, ".1f"], ["their disk (GB)", shared / gb, ".1f"],
                   ["their disk if each held its own copy of what they share (GB)", copied / gb, ".1f"],
                   ["the demo's cells", f"{len(rows)} ({len(ok)} ok, {busy} busy)"],
                   ["the demo (min)", demo_s / 60, ".1f"], ["build and demo (min)", total_s / 60, ".1f"]]
        measurement_log.write(args.json, measurement_log.record(
            "first_contact.py", phase_rows, started=started, settings={"stacks": stacks, "steps": args.steps},
            figures=figures, target=f"at most {TARGET_TOTAL_S / 60:.0f} minutes to a report with numbers, at most "
                                    f"{TARGET_DISK_GB:.0f} GB for the environments"))


if __name__ == "__main__":
    main()
