"""Error rates of `fwbench compare` and `fwbench verify` verdicts, by simulation with known truth.

    python benchmarks/verdict_error_rates.py [--trials 100] [--planted-trials 30] [--seed 16] [--jobs 2]

Each trial makes 60 cells (the 12 synthetic cells of tests/aggregator_rows.py at 5 thread settings) with two
sides, A (baseline / published) and B (candidate / re-run), as real result rows, validated by the loader
(fwbench_aggregator.loading) and judged by the real compare.compare, compare.regressions_above and
verification.verify. Timing model per repeat (process): a process-level lognormal factor (sigma
--process-sigma, default 2%) times 20 per-step lognormal times with AR(1) correlation (sigma --step-sigma,
default 3%, rho 0.5); the same model on both sides (identical device).

Scenarios: A/A at 3 vs 3, 5 vs 5 and 10 vs 3 repeats; B slower by 5%, 10%, 20% and 2x in 6 of the 60 cells
at 3 and 5 repeats a side (the other 54 unchanged). Printed per scenario:
  compare FWER  share of trials where any unchanged cell is called slower/faster (Holm, alpha 0.05)
  gate FWER     share of trials where any unchanged cell fails --fail-above 0 (the worst case for the gate:
                an unchanged cell sits exactly on its limit)
  verify FWER   share of trials where any unchanged cell is called slower or faster by verify (±10%)
  all repr.     share of A/A trials where verify would exit 0 (every cell reproduced): usability, no target
  compare pow.  share of planted cells called slower; gate pow. the share failing --fail-above 0
  verify slower / verify repr.  share of planted cells verify calls slower / reproduced
Targets (issue 16): every FWER <= 5%; a planted +20% at 5 repeats called slower by compare >= 90%;
"reproduced" for a planted change beyond the tolerance (20%, 2x) <= 5%. Runs in about 2-4 minutes on 2 cores
(two worker processes; --jobs).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/aggregator_rows.py: the synthetic rows the aggregator tests use

from fwbench.core.results import SCHEMA, normalise  # noqa: E402
from fwbench_aggregator import compare, loading, verification  # noqa: E402
from tests.aggregator_rows import CENTRES, record  # noqa: E402

THREADS = (1, 2, 3, 4, 5)  # 12 cells x 5 thread settings = 60 distinct identities
PLANTED_CELLS = 6
STEPS = 20
STEP_RHO = 0.5
TOLERANCE_PCT = 10.0
TARGET_FWER = 0.05
TARGET_POWER_20_AT_5 = 0.90
TARGET_REPRODUCED_BEYOND = 0.05


@dataclass(frozen=True)
class Scenario:
    name: str
    repeats_a: int
    repeats_b: int
    effect: float  # B/A of the planted cells (1.0: A/A)


SCENARIOS = ([Scenario("A/A 3v3", 3, 3, 1.0), Scenario("A/A 5v5", 5, 5, 1.0), Scenario("A/A 10v3", 10, 3, 1.0)]
             + [Scenario(f"+{(e - 1) * 100:.0f}% {n}v{n}", n, n, e) for n in (3, 5) for e in (1.05, 1.10, 1.20, 2.0)])


def cells() -> list[tuple[str, str, str, int, float]]:
    return [(stack, mode, task, threads, centre) for (stack, mode, task), centre in CENTRES.items()
            for threads in THREADS]


def step_times(rng: np.random.Generator, centre: float, process_sigma: float, step_sigma: float) -> np.ndarray:
    """One process: a process-level factor and AR(1) log step noise with marginal sd step_sigma."""
    innovations = rng.normal(0, step_sigma * np.sqrt(1 - STEP_RHO ** 2), STEPS)
    log_noise = np.empty(STEPS)
    log_noise[0] = rng.normal(0, step_sigma)
    for i in range(1, STEPS):
        log_noise[i] = STEP_RHO * log_noise[i - 1] + innovations[i]
    return centre * np.exp(rng.normal(0, process_sigma) + log_noise)


_TEMPLATES: dict[tuple, dict] = {}


def _template(stack: str, mode: str, task: str, threads: int, repeat: int) -> dict:
    """A normalised row per (cell, repeat), made once: normalising is the slow part of making rows."""
    name = (stack, mode, task, threads, repeat)
    if name not in _TEMPLATES:
        _TEMPLATES[name] = normalise(record(stack, task, compile_mode=mode, repeat=repeat, threads=threads,
                                            step_ms=[1.0] * STEPS, record_id=f"sim-{len(_TEMPLATES)}"))
    return _TEMPLATES[name]


def side(rng, repeats: int, factors: dict, process_sigma: float, step_sigma: float) -> loading.LoadedResults:
    """Result rows for every cell, through the loader's validation (as if read from files)."""
    rows = []
    for stack, mode, task, threads, centre in cells():
        factor = factors.get((stack, mode, task, threads), 1.0)
        for repeat in range(repeats):
            steps = step_times(rng, centre * factor, process_sigma, step_sigma)
            rows.append({**_template(stack, mode, task, threads, repeat), "step_ms": steps.tolist(),
                         "ms_per_step": float(steps.mean())})
    table = loading._validate(Path("simulated"), pa.Table.from_pylist(rows, schema=SCHEMA))
    if isinstance(table, loading.SkippedFile):
        raise SystemExit(f"error: simulated rows did not validate: {table.reason}")
    return loading.LoadedResults(table.cast(loading.MERGED_SCHEMA), len(rows))


def key(row) -> tuple:
    return row.variant.stack, row.variant.compile_mode, row.task, row.identity.setting("threads")


def run_scenario(scenario: Scenario, trials: int, rng: np.random.Generator, process_sigma: float = 0.02,
                 step_sigma: float = 0.03) -> dict[str, float]:
    all_cells = [c[:4] for c in cells()]
    counts = dict.fromkeys(("compare_fw", "gate_fw", "verify_fw", "all_reproduced", "compare_hit", "gate_hit",
                            "verify_slower", "verify_reproduced"), 0)
    planted_total = 0
    for _ in range(trials):
        planted = set()
        if scenario.effect != 1.0:
            planted = {all_cells[i] for i in rng.choice(len(all_cells), PLANTED_CELLS, replace=False)}
        a = side(rng, scenario.repeats_a, {}, process_sigma, step_sigma)
        b = side(rng, scenario.repeats_b, dict.fromkeys(planted, scenario.effect), process_sigma, step_sigma)
        rows = compare.compare(a, b)
        gated = {key(r) for r in compare.regressions_above(rows, 0.0)}
        verified = verification.verify(a, b, tolerance_pct=TOLERANCE_PCT)
        verdicts = {(c.stack, c.variant, c.task): c.verdict for c in verified}
        by_key = {key(r): verdicts[(r.variant.stack, r.variant.label, r.task)] for r in rows}
        null = [r for r in rows if key(r) not in planted]
        counts["compare_fw"] += any(r.verdict in ("slower", "faster") for r in null)
        counts["gate_fw"] += any(key(r) in gated for r in null)
        counts["verify_fw"] += any(by_key[key(r)] in (verification.SLOWER, verification.FASTER) for r in null)
        counts["all_reproduced"] += all(v == verification.REPRODUCED for v in verdicts.values())
        for r in rows:
            if key(r) in planted:
                planted_total += 1
                counts["compare_hit"] += r.verdict == "slower"
                counts["gate_hit"] += key(r) in gated
                counts["verify_slower"] += by_key[key(r)] == verification.SLOWER
                counts["verify_reproduced"] += by_key[key(r)] == verification.REPRODUCED
    rates = {name: counts[name] / trials for name in ("compare_fw", "gate_fw", "verify_fw", "all_reproduced")}
    for name in ("compare_hit", "gate_hit", "verify_slower", "verify_reproduced"):
        rates[name] = counts[name] / planted_total if planted_total else float("nan")
    return rates


def _run_job(job) -> dict[str, float]:
    scenario, trials, seed, process_sigma, step_sigma = job
    return run_scenario(scenario, trials, np.random.default_rng(seed), process_sigma, step_sigma)


def targets_met(scenario: Scenario, rates: dict[str, float]) -> list[str]:
    """The targets this scenario misses (empty: all met)."""
    missed = [f"{name} {rates[name]:.3f} > {TARGET_FWER}" for name in ("compare_fw", "gate_fw", "verify_fw")
              if rates[name] > TARGET_FWER]
    if scenario.effect == 1.20 and scenario.repeats_a == scenario.repeats_b == 5 and rates["compare_hit"] < TARGET_POWER_20_AT_5:
        missed.append(f"compare power {rates['compare_hit']:.3f} < {TARGET_POWER_20_AT_5}")
    if scenario.effect - 1 > TOLERANCE_PCT / 100 + 1e-9 and rates["verify_reproduced"] > TARGET_REPRODUCED_BEYOND:
        missed.append(f"reproduced {rates['verify_reproduced']:.3f} > {TARGET_REPRODUCED_BEYOND}")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="trials per A/A scenario")
    parser.add_argument("--planted-trials", type=int, default=30, help="trials per planted-effect scenario")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--process-sigma", type=float, default=0.02)
    parser.add_argument("--step-sigma", type=float, default=0.03)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    if min(args.trials, args.planted_trials, args.jobs) < 1:
        parser.error("--trials, --planted-trials and --jobs must be at least 1")
    header = (f"{'scenario':<12} {'trials':>6} {'cmp FWER':>8} {'gate FWER':>9} {'ver FWER':>8} {'all repr':>8} "
              f"{'cmp pow':>7} {'gate pow':>8} {'ver slow':>8} {'ver repr':>8}  targets")
    print(f"60 cells, {PLANTED_CELLS} planted; noise: process sigma {args.process_sigma:g}, step sigma "
          f"{args.step_sigma:g} (AR1 rho {STEP_RHO}), {STEPS} steps; verify tolerance ±{TOLERANCE_PCT:g}%")
    print(header)
    started, all_met = time.perf_counter(), True
    # One seeded stream per scenario (spawned from --seed): the table does not depend on --jobs.
    seeds = np.random.SeedSequence(args.seed).spawn(len(SCENARIOS))
    jobs = [(scenario, args.trials if scenario.effect == 1.0 else args.planted_trials, seed,
             args.process_sigma, args.step_sigma) for scenario, seed in zip(SCENARIOS, seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for (scenario, trials, *_), rates in zip(jobs, pool.map(_run_job, jobs)):
            missed = targets_met(scenario, rates)
            all_met &= not missed
            cols = [f"{rates[n]:.3f}" if rates[n] == rates[n] else "—" for n in
                    ("compare_fw", "gate_fw", "verify_fw", "all_reproduced", "compare_hit", "gate_hit",
                     "verify_slower", "verify_reproduced")]
            print(f"{scenario.name:<12} {trials:>6} {cols[0]:>8} {cols[1]:>9} {cols[2]:>8} {cols[3]:>8} "
                  f"{cols[4]:>7} {cols[5]:>8} {cols[6]:>8} {cols[7]:>8}  "
                  f"{'met' if not missed else 'MISSED: ' + '; '.join(missed)}", flush=True)
    print(f"all targets met: {'yes' if all_met else 'NO'} ({time.perf_counter() - started:.0f} s)")
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main())
