"""The change-point rule of `fwbench history show`, by simulation: its penalty, false alarms and power.

    python benchmarks/history_change_points.py --json benchmarks/results/DATE-MACHINE/history-change-points.json
    python benchmarks/history_change_points.py --render FILE.json    # the Markdown table docs/history.md shows

A series is 30 points of one cell; a point is the median ms/step of its `repeats` processes (3 or 5: a point of
fewer decides nothing, judge.decides_change). Each
process's log ms/step is normal around the point's true value with a standard deviation taken from this project's
own measurements: "CPU typical" and "CPU noisiest", the median and the largest process-to-process spread
(`fwbench_cv`, as a log sd) of every committed benchmarks/results/*/harness-noise*.json row (tiny CPU cells on 2-core
development machines), and "GPU typical", the median spread of the repeats of each cell with two or more quiet
repeats among the committed GPU rows (benchmarks/results/*/rows). A second shape adds slow outliers, OUTLIER_SHARE of
processes OUTLIER_FACTOR slower, as the harness-noise log saw (four of 30 rounds at 1.23-1.38 ms against 0.98).

Part 1, the penalty: for each no-change series, the smallest penalty (in units of sigma ln n, sigma the series' own
noise, judge.series_noise) at which ruptures' PELT (judge.CHANGE_COST) finds no change, computed exactly from the
best segmentation with k = 1, 2, ... changes (ruptures' Dynp). The needed penalty of a condition is the quantile of
these at which at most 5% of series show a change, with a margin of 1.645 binomial standard errors; the chosen penalty
is the largest over the conditions, rounded up to 0.1. The minimum step (judge.CHANGE_MIN_STEP_PCT) only removes changes, so the
whole rule's false alarms are lower still.

Part 2, the rule (judge.change_points) at the chosen penalty, on fresh series: false alarms (a series
with no change that shows one) and power (a series with a 10% step, after a point drawn between the 3rd and the
27th, in which a change "slower" is found within 2 points of it). judge.CHANGE_PENALTY is the chosen penalty
(tests/test_history.py checks it against the committed result file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "runner"), str(ROOT / "aggregator"), str(ROOT / "benchmarks")]

from fwbench.harness.envinfo import cpu_model  # noqa: E402
from fwbench_aggregator import judge  # noqa: E402
import measurement_log  # noqa: E402

POINTS = 30
REPEATS = (judge.MIN_REPEATS, 5)  # points of fewer quiet processes do not decide (judge.decides_change)
STEP = 1.10  # the power's step: 10% slower
FOUND_WITHIN = 2  # points between the found change and the planted one
TARGET = 0.05  # false alarms per no-change series
# Slow outliers: the harness-noise log's fresh keras3-jax bert-predict run (2026-11-27) had four of 30 rounds at
# 1.23-1.38 ms against a typical 0.98.
OUTLIER_SHARE, OUTLIER_FACTOR = 0.10, 1.30
SHAPES = ("log-normal", "with slow outliers")


def project_noise(root: Path = ROOT) -> tuple[dict[str, float], dict[str, int]]:
    """The process log sds of the simulation, from this project's committed measurements, and how many cells each is
    taken from: the median and the largest process-to-process spread of the harness-noise rows (CPU), and the median
    spread of the cells with two or more quiet repeats among the committed GPU rows (benchmarks/results/*/rows)."""
    cvs = [row["fwbench_cv"] for path in sorted(root.glob("benchmarks/results/*/harness-noise*.json"))
           for row in json.loads(path.read_text())["rows"] if row.get("fwbench_cv") is not None]
    cpu = [math.sqrt(math.log(1 + cv ** 2)) for cv in cvs]
    gpu = gpu_spreads(sorted(root.glob("benchmarks/results/*/rows")))
    noise = {"GPU typical": statistics.median(gpu), "CPU typical": statistics.median(cpu), "CPU noisiest": max(cpu)}
    return ({name: round(sd, 3) for name, sd in noise.items()},
            {"GPU typical": len(gpu), "CPU typical": len(cpu), "CPU noisiest": len(cpu)})


def gpu_spreads(folders: list[Path]) -> list[float]:
    """Per cell identity with 2+ quiet ok repeats: the standard deviation of its repeats' log medians."""
    from fwbench.core.identity import CellIdentity
    from fwbench_aggregator import loading, stats

    quiet, _ = judge.quiet(loading.load_results(folders).frame())
    cells: dict = {}
    for row in quiet.to_dict("records"):
        median = stats.median(stats.repeat_samples(row["step_ms"], row["ms_per_step"]))
        cells.setdefault(CellIdentity.of_row(row), []).append(math.log(median))
    return [statistics.stdev(logs) for logs in cells.values() if len(logs) > 1]


def series(rng: np.random.Generator, sd: float, repeats: int, shape: str, step_at: int | None = None) -> np.ndarray:
    """One simulated series of point medians (ms/step, around 1), with a STEP from point `step_at` on if given."""
    processes = rng.normal(0.0, sd, (POINTS, repeats))
    if shape == "with slow outliers":
        processes += np.where(rng.random((POINTS, repeats)) < OUTLIER_SHARE, math.log(OUTLIER_FACTOR), 0.0)
    logs = np.median(processes, axis=1)
    if step_at is not None:
        logs[step_at:] += math.log(STEP)
    return np.exp(logs)


def needed_penalty(logs: np.ndarray) -> float:
    """The smallest penalty (units of judge.change_penalty's) at which PELT's best segmentation of `logs` has no
    change: the largest (cost of no change - cost of the best k changes) / k over k."""
    import ruptures

    n = logs.size
    algo = ruptures.Dynp(model=judge.CHANGE_COST, min_size=judge.CHANGE_MIN_POINTS, jump=1).fit(logs)

    def cost(ends) -> float:
        edges = [0, *ends]
        return sum(algo.cost.error(a, b) for a, b in zip(edges, edges[1:]))

    whole = cost([n])
    most = n // judge.CHANGE_MIN_POINTS - 1
    return max((whole - cost(algo.predict(n_bkps=k))) / k for k in range(1, most + 1)) / judge.change_penalty(logs, 1.0)


def _calibrate(job) -> float:
    sd, repeats, shape, trials, seed = job
    rng = np.random.default_rng(seed)
    needed = np.sort([needed_penalty(np.log(series(rng, sd, repeats, shape))) for _ in range(trials)])
    margin = 1.645 * math.sqrt(TARGET * (1 - TARGET) / trials)
    return float(np.quantile(needed, min(1.0, 1 - TARGET + margin)))


def _validate(job) -> dict:
    sd, repeats, shape, trials, penalty, seed = job
    rng = np.random.default_rng(seed)
    alarms = sum(bool(judge.change_points(series(rng, sd, repeats, shape), penalty=penalty)) for _ in range(trials))
    found = 0
    for _ in range(trials):
        step_at = int(rng.integers(judge.CHANGE_MIN_POINTS, POINTS - judge.CHANGE_MIN_POINTS + 1))
        found += any(abs(change.index - step_at) <= FOUND_WITHIN and change.word == judge.SLOWER
                     for change in judge.change_points(series(rng, sd, repeats, shape, step_at), penalty=penalty))
    return {"false_alarms": alarms / trials, "power": found / trials}


def run(trials: int, calibration_trials: int, seed: int, jobs: int) -> dict:
    noise, sources = project_noise()
    grid = [(shape, repeats, name, sd) for shape in SHAPES for repeats in REPEATS for name, sd in noise.items()]
    seeds = np.random.SeedSequence(seed).spawn(2 * len(grid))
    calibration = [(sd, repeats, shape, calibration_trials, s) for (shape, repeats, _, sd), s in zip(grid, seeds)]
    print("process log sd: " + ", ".join(f"{name} {sd:g} ({sources[name]} cells)" for name, sd in noise.items())
          + f"; {POINTS} points a series")
    with ProcessPoolExecutor(jobs) as pool:
        needed = list(pool.map(_calibrate, calibration))
        chosen = math.ceil(max(needed) * 10) / 10
        print(f"penalty needed for <= {TARGET:.0%} false alarms (PELT alone): {max(needed):.2f} -> chosen {chosen:g} "
              f"(judge.CHANGE_PENALTY is {judge.CHANGE_PENALTY:g})")
        validation = [(sd, repeats, shape, trials, chosen, s)
                      for (shape, repeats, _, sd), s in zip(grid, seeds[len(grid):])]
        rates = list(pool.map(_validate, validation))
    slack = 2 * math.sqrt(TARGET * (1 - TARGET) / trials)  # within 2 binomial standard errors meets the target
    rows = []
    for (shape, repeats, name, sd), need, rate in zip(grid, needed, rates):
        rows.append({"shape": shape, "repeats": repeats, "noise": name, "process_sd": sd,
                     "needed_penalty": round(need, 2), **rate, "target_met": rate["false_alarms"] <= TARGET + slack})
        print(f"{shape:>18} {repeats:>2} repeats {name:>12} sd {sd:<5g} needed {need:5.2f}  false alarms "
              f"{rate['false_alarms']:.3f}  power {rate['power']:.3f}", flush=True)
    return {"noise": noise, "noise_cells": sources, "chosen_penalty": chosen, "rows": rows}


def render(record: dict) -> str:
    """The Markdown of a result file: one sentence of settings, then the table."""
    settings = record["settings"]
    cells = record["noise_cells"]
    noise_text = (f"GPU typical, the median over the {cells['GPU typical']} cells with two or more quiet repeats of "
                  f"the committed GPU rows; CPU typical and noisiest, the median and the largest over "
                  f"{cells['CPU typical']} committed harness-noise rows")
    lines = [f"Measured {record['date']} on {record['machine']}: `{record['command']}`. {settings['points']} points a "
             f"series, {settings['trials']} series per row and case; process log sd: {noise_text}; outliers: "
             f"{settings['outlier_share']:.0%} of processes x{settings['outlier_factor']:g}. Penalty needed for at "
             f"most "
             f"{settings['target']:.0%} false alarms: {max(r['needed_penalty'] for r in record['rows']):.2f}, chosen "
             f"{record['chosen_penalty']:g} (judge.CHANGE_PENALTY); minimum step "
             f"{settings['min_step_pct']:g}%; power: a {settings['step_pct']:g}% step found within "
             f"{settings['found_within']} points.", "",
             "| noise | repeats a point | process sd | false alarms (no change) | power (10% step) | target (<= 5%) |",
             "|---|---|---|---|---|---|"]
    for row in record["rows"]:
        lines.append(f"| {row['noise']}, {row['shape']} | {row['repeats']} | {row['process_sd']:g} | "
                     f"{row['false_alarms']:.3f} | {row['power']:.3f} | {'met' if row['target_met'] else 'missed'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="series per row and case (no change, a step)")
    parser.add_argument("--calibration-trials", type=int, default=2000, help="no-change series per row, part 1")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    measurement_log.add_output_options(parser, "docs/history.md")
    args = parser.parse_args(argv)
    if measurement_log.rendered(args, render):
        return 0
    if min(args.trials, args.calibration_trials, args.jobs) < 1:
        parser.error("--trials, --calibration-trials and --jobs must be at least 1")
    command = "python benchmarks/history_change_points.py " + " ".join(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    result = run(args.trials, args.calibration_trials, args.seed, args.jobs)
    print(f"took {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        record = {"benchmark": "history_change_points.py", "date": dt.date.today().isoformat(),
                  "machine": f"{cpu_model()}, {os.cpu_count()} cores", "command": command.strip(),
                  "settings": {"points": POINTS, "trials": args.trials, "calibration_trials": args.calibration_trials,
                               "seed": args.seed, "target": TARGET, "step_pct": round((STEP - 1) * 100, 6),
                               "found_within": FOUND_WITHIN, "outlier_share": OUTLIER_SHARE,
                               "outlier_factor": OUTLIER_FACTOR,
                               "min_step_pct": judge.CHANGE_MIN_STEP_PCT, "min_points": judge.CHANGE_MIN_POINTS},
                  **result}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"written: {args.json}")
    if judge.CHANGE_PENALTY != result["chosen_penalty"]:
        print(f"judge.CHANGE_PENALTY ({judge.CHANGE_PENALTY:g}) is not the chosen penalty: set it to "
              f"{result['chosen_penalty']:g}")
        return 1
    return 0 if all(row["target_met"] for row in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
