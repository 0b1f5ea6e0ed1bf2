"""The harness's own run-to-run spread: fresh-process fwbench cells against a plain script timing the same call.

    python benchmarks/harness_noise.py                      # five stacks x bert-predict, bert-fit at tiny
    python benchmarks/harness_noise.py --stack native-torch --task bert-predict --runs 8

For each cell, `--runs` rounds; a round is one `fwbench run` of the cell (a new cell process, --repeats 1) and one
run of benchmarks/plain_cell.py (a new process in the same stack environment, building the same model from the
same inputs and timing the same call with a bare synced loop), in alternating order so that drift hits both
alike. Prints, per cell: each side's mean ms/step and process-to-process coefficient of variation, and the mean
ratio fwbench/plain (geometric mean of the rounds' ratios) with its 95% interval. Targets (issue: a quiet
harness): fwbench's CV at most 1.5x the plain script's, and the ratio within 1.02. Time it on a quiet machine:
a row of fwbench's that met competition is counted and said (busy), and the figures are then not worth reporting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent / "runner"))

STACKS = ("native-torch", "keras3-jax", "keras3-tensorflow", "keras3-torch", "keras2-tensorflow")
TASKS = ("bert-predict", "bert-fit")
CV_TARGET, RATIO_TARGET = 1.5, 1.02


def fwbench_ms(stack: str, task: str, args, data: Path, out: Path) -> tuple[float, bool]:
    """One fresh fwbench cell: (ms_per_step, busy)."""
    from fwbench.core import results

    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "run", "--engine", "local", "--stack", stack,
                           "--task", task, "--preset", "tiny", "--repeats", "1", "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--device", "cpu", "--data", str(data), "--out", str(out),
                           "--no-resume"], capture_output=True, text=True)
    rows = [results.read_row(p) for p in out.rglob("*.parquet")]
    if done.returncode != 0 or len(rows) != 1 or rows[0]["status"] != "ok":
        sys.exit(f"fwbench run {stack} {task} failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    for path in out.rglob("*.parquet"):  # the next round writes a fresh row
        path.unlink()
    return float(rows[0]["ms_per_step"]), bool(rows[0]["busy"])


def plain_ms(python: Path, stack: str, task: str, args, data: Path) -> float:
    from fwbench.engines import keras_environment
    from fwbench.engines.device import hide_gpus

    # The stack's own switches (KERAS_BACKEND ...) and no GPU, as a user's script on this CPU would have them.
    env = hide_gpus({**os.environ, **keras_environment(stack)})
    done = subprocess.run([str(python), str(BENCHMARKS / "plain_cell.py"), "--stack", stack, "--task", task,
                           "--data", str(data), "--steps", str(args.steps), "--warmup", str(args.warmup)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"plain_cell.py {stack} {task} failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms_per_step"])


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else math.nan


def ratio_interval(harness: list[float], plain: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the paired rounds' ratios, with a 95% t interval on their logs."""
    logs = [math.log(h / p) for h, p in zip(harness, plain)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    from scipy import stats as sps  # the aggregator's t quantiles (compare, verify)

    half = float(sps.t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def measure_cell(stack: str, task: str, python: Path, args, data: Path, work: Path) -> dict:
    harness, plain, busy = [], [], 0
    for round_index in range(args.runs):
        sides = ("fwbench", "plain") if round_index % 2 == 0 else ("plain", "fwbench")
        for side in sides:
            if side == "fwbench":
                ms, was_busy = fwbench_ms(stack, task, args, data, work / f"{stack}-{task}")
                harness.append(ms)
                busy += was_busy
            else:
                plain.append(plain_ms(python, stack, task, args, data))
        print(f"  {stack} {task} round {round_index + 1}: fwbench {harness[-1]:.3f}  plain {plain[-1]:.3f} ms/step",
              file=sys.stderr, flush=True)
    ratio, low, high = ratio_interval(harness, plain)
    return {"stack": stack, "task": task, "runs": args.runs, "fwbench_ms": statistics.fmean(harness),
            "plain_ms": statistics.fmean(plain), "fwbench_cv": cv(harness), "plain_cv": cv(plain),
            "ratio": ratio, "ratio_low": low, "ratio_high": high, "busy_rows": busy,
            "fwbench_runs_ms": harness, "plain_runs_ms": plain}


def verdict(row: dict) -> str:
    misses = []
    if row["fwbench_cv"] > CV_TARGET * row["plain_cv"]:
        misses.append(f"CV {row['fwbench_cv'] / row['plain_cv']:.1f}x plain's")
    if row["ratio"] > RATIO_TARGET:
        misses.append(f"ratio {row['ratio']:.3f}")
    if row["busy_rows"]:
        misses.append(f"{row['busy_rows']} busy")
    return "meets" if not misses else "misses: " + ", ".join(misses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", choices=STACKS, help="repeatable (default: all five)")
    parser.add_argument("--task", action="append", choices=TASKS, help="repeatable (default: both)")
    parser.add_argument("--runs", type=int, default=5, help="rounds per cell (default 5)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per run (default 100)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up steps per run (default 10)")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs must be at least 2 (a spread needs two runs)")

    import platform
    from datetime import datetime, timezone

    from fwbench.core import data as shared_data
    from fwbench.engines.local import StackEnvironment

    work = Path(tempfile.mkdtemp(prefix="fwbench-noise-"))
    tasks = args.task or list(TASKS)
    shared_data.generate(work / "data", "tiny", tasks=tasks)
    rows = []
    for stack in args.stack or STACKS:
        environment = StackEnvironment(stack)
        environment.build()
        for task in tasks:
            rows.append(measure_cell(stack, task, environment.python, args, work / "data", work))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"harness noise, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu}, {os.cpu_count()} cores; "
          f"tiny, {args.runs} rounds of one fresh process a side, {args.warmup} warm-up + {args.steps} timed steps")
    print(f"{'stack':<18} {'task':<13} {'fwbench ms':>10} {'plain ms':>9} {'fw CV':>6} {'plain CV':>8} "
          f"{'ratio [95% CI]':>22}  verdict")
    for row in rows:
        print(f"{row['stack']:<18} {row['task']:<13} {row['fwbench_ms']:>10.3f} {row['plain_ms']:>9.3f} "
              f"{row['fwbench_cv']:>6.1%} {row['plain_cv']:>8.1%} "
              f"{row['ratio']:>7.3f} [{row['ratio_low']:.3f}, {row['ratio_high']:.3f}]  {verdict(row)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
