"""`fwbench run --parallel 2` vs one cell at a time: wall time of the same matrix, and its ms/step.

    python benchmarks/parallel_speedup.py [--tasks bert-fit bert-predict sam-predict mistral-fit]
                                          [--repeats 2] [--steps 20] [--parallel 2] [--keep DIR]

Runs the same native-torch tiny matrix (default 4 tasks x 2 repeats = 8 cells, one thread per cell, local
engine) twice, into separate folders: one cell at a time, then `--parallel 2`. Before either, the stack's
environment and the shared data are made and one untimed cell warms the file cache, so neither run pays
for that. Prints both wall times and their ratio (target on a 2-core machine: <= 0.6), each cell's
ms/step side by side, and per task the two medians with their 95% intervals (fwbench's own bootstrap):
"within noise" when the intervals overlap. On a shared machine the figures are indicative only; the
rows' busy flags say when something else competed. --json FILE also writes the figures with the date, machine,
command and commit (benchmarks/measurement_log.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runner"), str(ROOT / "aggregator")]

STACK = "native-torch"
TARGET_RATIO = 0.6


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["bert-fit", "bert-predict", "sam-predict", "mistral-fit"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per cell (tiny's default is 5)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="write the two result folders here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the figures here (their place: benchmarks/results/"
                        "<date>-<machine>/parallel-speedup.json)")
    return parser.parse_args()


def fwbench(*args: str) -> float:
    """Run the fwbench CLI (this checkout's) and return its wall time in seconds; stop on failure."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runner"), str(ROOT / "aggregator"),
                                                        os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"fwbench {' '.join(args[:2])} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


def rows(out: Path) -> dict[tuple[str, int], dict]:
    from fwbench.core import results

    found = {}
    for path in out.rglob("*.parquet"):
        row = results.read_row(path)
        found[(row["task"], row["repeat"])] = row
    return found


def main() -> int:
    args = parse_args()
    import measurement_log
    from fwbench_aggregator import stats

    started = measurement_log.now()
    work = args.keep or Path(tempfile.mkdtemp(prefix="fwbench-parallel-"))
    data = work / "data"
    fwbench("env", "build", STACK)
    fwbench("data", "--preset", "tiny", "--out", str(data))
    fwbench("run", "--stack", STACK, "--task", args.tasks[0], "--steps", "2", "--threads", "1",
            "--out", str(work / "warm-up"), "--data", str(data))
    matrix = ["--stack", STACK, "--preset", "tiny", *[arg for task in args.tasks for arg in ("--task", task)],
              "--repeats", str(args.repeats), "--steps", str(args.steps), "--threads", "1", "--data", str(data)]
    load_before = os.getloadavg()[0]
    sequential_s = fwbench("run", *matrix, "--out", str(work / "sequential"))
    parallel_s = fwbench("run", *matrix, "--parallel", str(args.parallel), "--out", str(work / "parallel"))
    load_after = os.getloadavg()[0]
    one, many = rows(work / "sequential"), rows(work / "parallel")

    cells = len(args.tasks) * args.repeats
    ratio = parallel_s / sequential_s
    print(f"{cells} cells ({STACK}, tiny, {len(args.tasks)} tasks x {args.repeats} repeats, {args.steps} steps, "
          f"1 thread each) on {len(os.sched_getaffinity(0))} cores; results in {work}")
    print(f"wall time  one at a time {sequential_s:7.1f} s   --parallel {args.parallel} {parallel_s:7.1f} s   "
          f"ratio {ratio:.2f} (target <= {TARGET_RATIO})")
    print(f"host load (1-min average) {load_before:.1f} before, {load_after:.1f} after")
    print()
    # "others": CPU cores other processes used while the cell was timed, on the cores it could run on
    # (all of them alone, its own slot's in parallel): load that was not fwbench's.
    print(f"{'task':<22} {'rep':>3} {'alone ms':>9} {'parallel ms':>11} {'ratio':>6}  {'CPUs':>5} {'at once':>7}  "
          f"{'others alone':>12} {'others parallel':>15}")
    nan = float("nan")
    for key in sorted(one):
        alone, beside = one[key], many.get(key, {})
        print(f"{key[0]:<22} {key[1]:>3} {alone['ms_per_step']:9.2f} {beside.get('ms_per_step', nan):11.2f} "
              f"{beside.get('ms_per_step', nan) / alone['ms_per_step']:6.2f}  {beside.get('cpu_set') or '?':>5} "
              f"{beside.get('parallel_cells') or '?':>7}  {alone.get('other_cpu_cores') or nan:12.2f} "
              f"{beside.get('other_cpu_cores') or nan:15.2f}")
    print()
    print(f"{'task':<22} {'alone median [95% CI]':>24} {'parallel median [95% CI]':>26}  within noise")
    within = 0
    task_rows = []  # the --json file's table
    for task in args.tasks:
        estimates = []
        for found in (one, many):
            samples = [stats.repeat_samples(row["step_ms"], row["ms_per_step"])
                       for (t, _), row in sorted(found.items()) if t == task and row["status"] == "ok"]
            estimates.append(stats.estimate(samples))
        alone, beside = estimates
        overlap = min(alone.high, beside.high) >= max(alone.low, beside.low)
        within += overlap
        print(f"{task:<22} {alone.median:8.2f} [{alone.low:6.2f}-{alone.high:6.2f}] "
              f"{beside.median:10.2f} [{beside.low:6.2f}-{beside.high:6.2f}]  {'yes' if overlap else 'no'}")
        task_rows.append({"task": task, "alone_ms": alone.median, "alone_ms_low": alone.low,
                          "alone_ms_high": alone.high, "parallel_ms": beside.median, "parallel_ms_low": beside.low,
                          "parallel_ms_high": beside.high, "within_noise": "yes" if overlap else "no"})
    print(f"\n{within} of {len(args.tasks)} tasks within noise; wall-time ratio {ratio:.2f} "
          f"({'meets' if ratio <= TARGET_RATIO else 'misses'} the target of {TARGET_RATIO})")
    if args.json:
        figures = [["one cell at a time (s)", sequential_s, ".1f"],
                   [f"--parallel {args.parallel} (s)", parallel_s, ".1f"], ["ratio", ratio, ".2f"],
                   ["tasks whose ms/step agree within noise", f"{within} of {len(args.tasks)}"],
                   ["host load (1-min average) before, after", f"{load_before:.1f}, {load_after:.1f}"]]
        measurement_log.write(args.json, measurement_log.record(
            "parallel_speedup.py", task_rows, started=started, figures=figures,
            settings={"stack": STACK, "tasks": args.tasks, "repeats": args.repeats, "steps": args.steps,
                      "threads a cell": 1, "parallel": args.parallel},
            target=f"wall-time ratio at most {TARGET_RATIO} on a 2-core machine"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
