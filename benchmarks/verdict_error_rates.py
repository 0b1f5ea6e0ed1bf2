"""Error rates of `fwbench compare` and `fwbench verify` verdicts, by simulation with known truth.

    python benchmarks/verdict_error_rates.py [--part all|rows|bundle|example|bisect|bisect-two-steps|rank] [--trials 100]
                                             [--planted-trials 30] [--bundle-trials 1000] [--bisect-trials 1000]
                                             [--two-step-trials 4000] [--two-step-caps 9,15,21] [--seed 16] [--jobs 2]
                                             [--json FILE]
    python benchmarks/verdict_error_rates.py --render FILE
    python benchmarks/verdict_error_rates.py --render-prior-separation

--json FILE (with one --part) also writes the part's table, with the run's date, machine, command and settings, to a
result file, benchmarks/results/<date>-<machine>/verdict-<part>.json; --render FILE prints the Markdown table the
docs show from such a file (docs/aggregator.md and docs/versions.md hold each as a generated block that
benchmarks/docblocks.py checks; tests/test_error_rate_docs.py checks the docs' claims against the files).
--render-prior-separation prints what the judge's assumed process spread (judge.PROCESS_SPREAD_PRIOR) alone lets one
or two processes a side rank: arithmetic from the constant, no simulation.

Part "rank" (issue 49: the judge's ranking of two cells, fwbench_aggregator.judge.ratio, behind the report's Keras 3
best, noise warnings and published order and the your-models tables): two cells with 1, 3 or 5 processes a side
(step_times' model: process log-sd 0.02-0.15, step sd 3%, AR(1) 0.5, 20 steps), equal or B 10% slower, --rank-trials
pairs each. Printed: `false order` the share of equal pairs called faster or slower (target <= 5%), `wrong winner`
the share of 10%-apart pairs that name the slower cell faster (target <= 5%), `power` the share that name the right
one, `tie (equal)` the share of equal pairs called a tie.

Part "bisect" (whole `fwbench bisect` runs through its pure core: fwbench_aggregator.bisect.bisect, with compare's
capped Welch test, its 95% interval and the sweep report's verdict rule, fwbench_aggregator.sweep.step_verdict): 9
candidate points, repeat log medians normal with the sds of part "example" (0.03-0.06), tolerance ±5%. Per sd and
rule, --bisect-trials bisects of an unchanged cell and as many with the cell 20% slower from a random candidate on.
Printed: `false changed` the share of unchanged bisects that report a change (found or undecided: both say the ends
differ; target <= 5%), `no change` the share that say equivalent, `found +20%` the share of planted bisects that
report a change, `right pair` the share that name the planted release exactly (found), `undecided` the share that
stop at a middle point inconclusive at the cap, `repeats` the mean repeats measured per planted bisect. Rules:
"split" (bisect's: looks at 3, 6, 9 repeats, each test at 0.05 / 3), "unadjusted looks" (the same looks at 0.05
each) and "one look at 9" (a fixed sample of 9 repeats a point).

Part "bisect-two-steps" (issue 49: bisect named the second of two steps as "the change"): the same whole bisects
over 9-11 candidates (drawn) with the cell 8% slower from a random candidate on and 15% slower again from a later
one, tolerance ±5%, default repeats and looks, --two-step-trials bisects per sd and cap (bisect's --max-repeats,
--two-step-caps: its default 9, then what larger caps buy back). Printed: `first step` the share that
name the first step's pair, `undecided` the share that stop undecided (`(holds it)`: of all bisects, those whose
undecided bracket holds the first step), `second as first` the share that name the second step's pair as found (a
confident wrong answer), `other pair` any other pair found, `no bisect` ends inconclusive, `and again` the share that
name the first step and report the second change beside it, `envs` and `repeats` per bisect. Target: `first step`
>= 90% or every other bisect claims no pair (undecided, no bisect) but at most alpha; `second as first`, `other pair`
and undecided brackets without the first step (`undecided` - `(holds it)`) each <= alpha.

Part "bundle" (whole-bundle verify error rates, through verification's pure core: Rule, judge_arrays,
look_schedule, with_added_repeats, with compare.log_ratio_test per cell): 40 honest cells per verification,
each repeat's log median normal with sd 3.5% on the publisher's machine and --rerun-noise times that on the
re-run machine (3x: 10.5%), for equal noise 5v5, 3x noise 3v3 and 3x noise 10 published v 3 re-run. Printed per
scenario and rule: the share of verifications in which any unchanged cell is called slower or faster (target
<= 5%), the share in which every cell is reproduced, and the power: the share of verifications in which one
cell made 30% slower is called slower. Rules: "old" (the 90% interval wholly beyond the tolerance, per cell),
"adjusted" (one-sided tests at alpha / (2 x 40 cells), no added repeats), "added" (inconclusive cells get
re-run repeats up to 15, in batches of the first count, every look at alpha / (2 x 40 x L) and a TOST at
alpha / L per side, none for a cell verification.decidable_by says the cap cannot decide: verify's default) and
"added, unadjusted looks" (the same loop judging every look at L = 1: what sequential looks do to an unadjusted
level). Part "example": one honest cell on one machine (5 or 10 published repeats v 5 re-runs, log-sd 0.03-0.06,
drift 0 or 3% between the runs; and log-sd 0.17 at ±25%), the share reproduced with one look and with added repeats,
and the share calling it slower or faster: what a user trying the verify flow should expect (no target). Part
"rows" is the table below.

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
"reproduced" for a planted change beyond the tolerance (20%, 2x) <= 5%. Part "rows" is the slow one, since every
trial judges 60 cells through the loader, compare and verify: on 2 shared cores (2026-11-28, two worker processes,
--jobs) about 20 s to start and 1.6 s a trial, so its defaults take about 15 minutes; each other part takes one to
two minutes at the settings the docs show.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
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
from fwbench.harness.envinfo import cpu_model  # noqa: E402
from fwbench_aggregator import bisect as sweep_engine  # noqa: E402
from fwbench_aggregator import compare, judge, loading, verification  # noqa: E402
from fwbench_aggregator import sweep as report_sweep  # noqa: E402
from tests.aggregator_rows import CENTRES, record  # noqa: E402

THREADS = (1, 2, 3, 4, 5)  # 12 cells x 5 thread settings = 60 distinct identities
PLANTED_CELLS = 6
STEPS = 20
STEP_RHO = 0.5
TOLERANCE_PCT = 10.0
TARGET_FWER = 0.05
TARGET_POWER_20_AT_5 = 0.90
TARGET_REPRODUCED_BEYOND = 0.05
PARTS = ("rank", "bisect-two-steps", "bisect", "example", "bundle", "rows")  # --part's choices, in the order run


@dataclass(frozen=True)
class PartResult:
    """What a part found: whether its targets are met, its settings and its table (the rows of its JSON file)."""
    met: bool
    settings: dict
    rows: list[dict]


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


BUNDLE_CELLS = 40
PUBLISHED_SD = 0.035  # sd of a repeat's log median on the publisher's machine
POWER_EFFECT = 1.30
RULES = ("old", "adjusted", "added", "added, unadjusted looks")


@dataclass(frozen=True)
class BundleScenario:
    name: str
    published: int
    rerun: int
    noise: float  # re-run sd / published sd
    cells: int = BUNDLE_CELLS
    sd: float = PUBLISHED_SD  # the publisher's
    drift: float = 1.0  # true re-run/published of every honest cell (the machine's own drift between the runs)
    tolerance_pct: float = TOLERANCE_PCT  # verify's --tolerance


def bundle_scenarios(rerun_noise: float) -> list[BundleScenario]:
    return [BundleScenario("equal noise 5v5", 5, 5, 1.0), BundleScenario(f"{rerun_noise:g}x noise 3v3", 3, 3, rerun_noise),
            BundleScenario(f"{rerun_noise:g}x noise 10v3", 10, 3, rerun_noise)]


@dataclass
class _SimCell:
    index: int
    verdict: str
    rerun_repeats: int
    resolvable: bool


def _judge_bundle(pub: tuple, rerun: tuple, rule: verification.Rule, old: bool = False,
                  cap: int | None = None) -> list[_SimCell]:
    """Every cell's verdict from the moments (mean, variance, count) of simulated log repeat medians, through
    compare's capped Welch test and verification's rule (all cells at once); with a cap, an inconclusive cell is
    resolvable only where verification.decidable_by says the cap could decide it (as verify does)."""
    log_ratio, se, dof = compare.capped_welch(pub, rerun)
    verdicts, low, high, _, _ = verification.judge_arrays(log_ratio, se, dof, rule)
    if old:  # issue 16's rule: the 90% interval wholly beyond a bound, per cell, no family-wise level
        bound = rule.tolerance_pct / 100
        verdicts = np.where(low > 1 + bound, verification.SLOWER,
                            np.where(high < 1 - bound, verification.FASTER, verdicts))
    resolvable = verdicts == verification.INCONCLUSIVE
    if cap is not None:
        resolvable &= verification.decidable_by(pub, rerun, cap, rule)
    return [_SimCell(i, str(v), int(n), bool(r)) for i, (v, n, r) in enumerate(zip(verdicts, rerun[2], resolvable))]


def bundle_trial(rng, scenario: BundleScenario, rule_name: str, effect: float, max_repeats: int) -> tuple[bool, bool, str, int]:
    """One verification of BUNDLE_CELLS cells (cell 0 made `effect` times slower): (any unchanged cell called
    slower/faster, every cell reproduced, cell 0's verdict, re-run repeats spent)."""
    cells_n, sd_pub, sd_rerun = scenario.cells, scenario.sd, scenario.sd * scenario.noise
    shift = np.full(cells_n, math.log(scenario.drift))
    shift[0] += math.log(effect)
    published = rng.normal(0, sd_pub, (cells_n, scenario.published))
    pub = (published.mean(1), published.var(1, ddof=1), np.full(cells_n, scenario.published))
    first = rng.normal(shift[:, None], sd_rerun, (cells_n, scenario.rerun))
    rerun = [row for row in first]
    moments = [first.mean(1), first.var(1, ddof=1), np.full(cells_n, scenario.rerun)]
    adding = rule_name.startswith("added")
    schedule = verification.look_schedule(scenario.rerun, max_repeats) if adding else [scenario.rerun]
    looks = len(schedule) if rule_name == "added" else 1
    rule = verification.Rule(scenario.tolerance_pct, cells=cells_n, looks=looks)

    def add(wanted: dict[int, int]) -> None:
        for i, count in wanted.items():
            rerun[i] = np.concatenate([rerun[i], rng.normal(shift[i], sd_rerun, count - rerun[i].size)])
            moments[0][i], moments[1][i], moments[2][i] = rerun[i].mean(), rerun[i].var(ddof=1), rerun[i].size

    cells = verification.with_added_repeats(
        lambda: _judge_bundle(pub, tuple(moments), rule, old=rule_name == "old", cap=schedule[-1] if adding else None),
        add, schedule, key=lambda c: c.index)
    return (any(c.verdict in (verification.SLOWER, verification.FASTER) for c in cells[1:] + cells[:1] * (effect == 1.0)),
            all(c.verdict == verification.REPRODUCED for c in cells), cells[0].verdict, sum(r.size for r in rerun))


def _run_bundle_job(job) -> dict[str, float]:
    scenario, rule_name, trials, seed, max_repeats = job
    rng = np.random.default_rng(seed)
    false_claims = all_reproduced = found = at_bound = spent = 0
    at_tolerance = 1 + scenario.tolerance_pct / 100  # a cell exactly at the tolerance: "reproduced" must stay <= 5%
    for _ in range(trials):
        wrong, reproduced, _, repeats = bundle_trial(rng, scenario, rule_name, 1.0, max_repeats)
        false_claims, all_reproduced, spent = false_claims + wrong, all_reproduced + reproduced, spent + repeats
        found += bundle_trial(rng, scenario, rule_name, POWER_EFFECT, max_repeats)[2] == verification.SLOWER
        at_bound += bundle_trial(rng, scenario, rule_name, at_tolerance, max_repeats)[2] == verification.REPRODUCED
    return {"false": false_claims / trials, "all_reproduced": all_reproduced / trials, "power": found / trials,
            "at_bound": at_bound / trials, "repeats": spent / trials / scenario.cells}


def run_bundle_part(trials: int, seed: int, jobs: int, rerun_noise: float, max_repeats: int) -> PartResult:
    print(f"whole-bundle verify error rates: {BUNDLE_CELLS} cells, repeat log-median sd {PUBLISHED_SD:g} published, "
          f"x{rerun_noise:g} re-run where noisier; tolerance ±{TOLERANCE_PCT:g}%; added repeats up to {max_repeats}; "
          f"{trials} verifications per row")
    print(f"{'scenario':<17} {'rule':<24} {'false slow/fast':>15} {'all repr':>8} {'pow +30%':>8} {'repr +10%':>9} "
          f"{'re-runs':>7}  target")
    combos = [(scenario, rule) for scenario in bundle_scenarios(rerun_noise) for rule in RULES]
    seeds = np.random.SeedSequence([seed, 30]).spawn(len(combos))
    jobs_list = [(scenario, rule, trials, s, max_repeats) for (scenario, rule), s in zip(combos, seeds)]
    met, rows = True, []
    with ProcessPoolExecutor(jobs) as pool:
        for (scenario, rule, *_), rates in zip(jobs_list, pool.map(_run_bundle_job, jobs_list)):
            checked = rule in ("adjusted", "added")
            ok = rates["false"] <= TARGET_FWER and rates["at_bound"] <= TARGET_REPRODUCED_BEYOND
            met &= ok or not checked
            rows.append({"scenario": scenario.name, "published": scenario.published, "rerun": scenario.rerun,
                         "noise": scenario.noise, "rule": rule, "false_claims": rates["false"],
                         "all_reproduced": rates["all_reproduced"], "power": rates["power"],
                         "reproduced_at_tolerance": rates["at_bound"], "rerun_repeats": rates["repeats"],
                         "checked": checked, "target_met": ok})
            print(f"{scenario.name:<17} {rule:<24} {rates['false']:>15.3f} {rates['all_reproduced']:>8.3f} "
                  f"{rates['power']:>8.3f} {rates['at_bound']:>9.3f} {rates['repeats']:>7.1f}  "
                  f"{('met' if ok else 'MISSED') if checked else '(for comparison)'}", flush=True)
    settings = {"trials": trials, "seed": seed, "cells": BUNDLE_CELLS, "published_sd": PUBLISHED_SD,
                "rerun_noise": rerun_noise, "tolerance_pct": TOLERANCE_PCT, "max_repeats": max_repeats,
                "power_effect": POWER_EFFECT, "target": TARGET_FWER}
    return PartResult(met, settings, rows)


EXAMPLE_SDS = (0.03, 0.045, 0.06)  # per-process log-sd of CPU cells measured on the development machine
EXAMPLE_DRIFTS = (1.0, 1.03)  # the same machine a while later: a few percent either way between two sets


# keras3-jax bert-predict's process spread on the older development machine (docs/verification.md): what even a
# wide tolerance gives at that spread.
EXAMPLE_WIDE_SD, EXAMPLE_WIDE_TOLERANCE_PCT = 0.17, 25.0


def example_scenarios() -> list[BundleScenario]:
    return ([BundleScenario(f"{published}v5 sd {sd:g} drift {drift:g}", published, 5, 1.0, cells=1, sd=sd,
                            drift=drift) for published in (5, 10) for sd in EXAMPLE_SDS for drift in EXAMPLE_DRIFTS]
            + [BundleScenario(f"{published}v5 sd {EXAMPLE_WIDE_SD:g} ±{EXAMPLE_WIDE_TOLERANCE_PCT:g}%", published, 5,
                              1.0, cells=1, sd=EXAMPLE_WIDE_SD, tolerance_pct=EXAMPLE_WIDE_TOLERANCE_PCT)
               for published in (5, 10)])


def run_example_part(trials: int, seed: int, jobs: int, max_repeats: int) -> PartResult:
    """One honest cell, the same machine on both sides (what a user who tries the verify flow on one machine
    sees): the share of verifications that say reproduced, by the publisher's repeats, the machine's spread and
    its drift between the two runs, with one look and with added repeats. No target: usability."""
    print(f"one honest cell, same machine: share reproduced at ±{TOLERANCE_PCT:g}% (unless named), re-run 5 (+ added "
          f"up to {max_repeats}); {trials} verifications per row")
    print(f"{'scenario':<28} {'one look':>8} {'added':>8} {'re-runs':>7} {'slower/faster':>13}")
    scenarios = example_scenarios()
    jobs_list = [(scenario, rule, trials, s, max_repeats) for (scenario, rule), s in
                 zip([(sc, rule) for sc in scenarios for rule in ("adjusted", "added")],
                     np.random.SeedSequence([seed, 31]).spawn(2 * len(scenarios)))]
    with ProcessPoolExecutor(jobs) as pool:
        rates = list(pool.map(_run_bundle_job, jobs_list))
    rows = []
    for i, scenario in enumerate(scenarios):
        one, added = rates[2 * i], rates[2 * i + 1]
        rows.append({"published": scenario.published, "rerun": scenario.rerun, "sd": scenario.sd,
                     "drift": scenario.drift, "tolerance_pct": scenario.tolerance_pct,
                     "reproduced_one_look": one["all_reproduced"], "reproduced_added": added["all_reproduced"],
                     "slower_or_faster_one_look": one["false"], "slower_or_faster_added": added["false"],
                     "rerun_repeats_added": added["repeats"]})
        print(f"{scenario.name:<28} {one['all_reproduced']:>8.3f} {added['all_reproduced']:>8.3f} "
              f"{added['repeats']:>7.1f} {max(one['false'], added['false']):>13.3f}", flush=True)
    return PartResult(True, {"trials": trials, "seed": seed, "max_repeats": max_repeats}, rows)


BISECT_CANDIDATES = 9  # the ends and 7 releases between: 3 middle points tested, as in tests/test_sweep.py
BISECT_TOLERANCE_PCT = 5.0  # bisect's default
BISECT_EFFECT = 1.20
BISECT_RULES = ("split", "unadjusted looks", "one look at 9")


def simulated_bisect(rng, sd: float, shifts: list[float], rule: str = "split",
                     max_repeats: int = 9) -> tuple[list[str], sweep_engine.BisectResult]:
    """One whole `fwbench bisect` (fwbench_aggregator.bisect.bisect: the end check, then the middle points) over
    len(shifts) points whose repeat log medians are normal with sd `sd` around shifts[i]; each judgement by
    compare's capped Welch test, its 95% interval and the sweep report's verdict rule
    (fwbench_aggregator.sweep.step_verdict). Rules: "split" is bisect's (looks at 3, 6, 9 repeats, each test at
    alpha / 3), "unadjusted looks" the same looks at alpha each (bisect before), "one look at 9" a fixed sample
    of 9 repeats chosen up front (one look, alpha). max_repeats: bisect's --max-repeats (its default 9). Returns
    the labels and the result."""
    labels = [f"pkg==1.{i}" for i in range(len(shifts))]
    shift = dict(zip(labels, shifts))
    logs = {label: np.empty(0) for label in labels}

    def measure(label: str, n: int) -> None:
        logs[label] = np.concatenate([logs[label], rng.normal(shift[label], sd, n - logs[label].size)])

    def judge(a: str, b: str, level: float) -> report_sweep.StepVerdict:
        level = compare.DEFAULT_ALPHA if rule == "unadjusted looks" else level
        test = compare.log_ratio_test(np.exp(logs[a]), np.exp(logs[b]))
        if test is None:
            return report_sweep.StepVerdict(None, a, b, None, None, None, report_sweep.INCONCLUSIVE, "no spread")
        verdict = report_sweep.step_verdict(test.ratio, test.p_two_sided(),
                                            report_sweep.equivalence_p(test, BISECT_TOLERANCE_PCT),
                                            BISECT_TOLERANCE_PCT, level)
        low, high = test.interval(compare.CONFIDENCE)
        return report_sweep.StepVerdict(None, a, b, test.ratio, low, high, verdict, "simulated", "",
                                        BISECT_TOLERANCE_PCT)

    def median_of(label: str) -> float:
        return float(np.exp(np.median(logs[label])))

    repeats = 9 if rule == "one look at 9" else 3
    return labels, sweep_engine.bisect(labels, measure, judge, median_of, repeats, max_repeats=max_repeats)


def bisect_trial(rng, sd: float, effect: float, changed_at: int, rule: str) -> sweep_engine.BisectResult:
    """A whole bisect over BISECT_CANDIDATES points, `effect` times slower from points[changed_at] on."""
    shifts = [math.log(effect) if i >= changed_at else 0.0 for i in range(BISECT_CANDIDATES)]
    return simulated_bisect(rng, sd, shifts, rule)[1]


def _run_bisect_job(job) -> dict[str, float]:
    sd, rule, trials, seed = job
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(("false", "no_change", "found", "right", "undecided", "repeats"), 0)
    for _ in range(trials):
        null = bisect_trial(rng, sd, 1.0, BISECT_CANDIDATES, rule)
        counts["false"] += null.outcome in ("found", "undecided")  # both say the ends changed
        counts["no_change"] += null.outcome == "no-change"
        changed_at = int(rng.integers(1, BISECT_CANDIDATES))
        planted = bisect_trial(rng, sd, BISECT_EFFECT, changed_at, rule)
        right = (f"pkg==1.{changed_at - 1}", f"pkg==1.{changed_at}")
        counts["found"] += planted.outcome in ("found", "undecided")
        counts["right"] += (planted.outcome == "found" and planted.direction == "slower"
                            and (planted.good, planted.bad) == right)
        counts["undecided"] += planted.outcome == "undecided"
        counts["repeats"] += sum(t.repeats for t in planted.tested.values())
    return {name: count / trials for name, count in counts.items()}


def run_bisect_part(trials: int, seed: int, jobs: int) -> PartResult:
    """Whole bisects with and without a planted +20%: the false "changed" rate (target <= 5%) and the power."""
    print(f"whole bisect: {BISECT_CANDIDATES} candidates, tolerance ±{BISECT_TOLERANCE_PCT:g}%, repeats 3 (+3 up to "
          f"9), alpha {compare.DEFAULT_ALPHA:g}; repeat log-median sd as below; {trials} bisects with no change and "
          f"{trials} with +{(BISECT_EFFECT - 1) * 100:.0f}% from a random candidate on, per row")
    print(f"{'sd':>5} {'rule':<17} {'false changed':>13} {'no change':>9} {'found +20%':>10} {'right pair':>10} "
          f"{'undecided':>9} {'repeats':>7}  target")
    combos = [(sd, rule) for sd in EXAMPLE_SDS for rule in BISECT_RULES]
    seeds = np.random.SeedSequence([seed, 36]).spawn(len(combos))
    jobs_list = [(sd, rule, trials, s) for (sd, rule), s in zip(combos, seeds)]
    met, rows = True, []
    with ProcessPoolExecutor(jobs) as pool:
        for (sd, rule, *_), rates in zip(jobs_list, pool.map(_run_bisect_job, jobs_list)):
            checked = rule != "unadjusted looks"
            ok = rates["false"] <= TARGET_FWER
            met &= ok or not checked
            rows.append({"sd": sd, "rule": rule, "false_changed": rates["false"], "no_change": rates["no_change"],
                         "found": rates["found"], "right_pair": rates["right"], "undecided": rates["undecided"],
                         "repeats": rates["repeats"], "checked": checked, "target_met": ok})
            print(f"{sd:>5g} {rule:<17} {rates['false']:>13.3f} {rates['no_change']:>9.3f} {rates['found']:>10.3f} "
                  f"{rates['right']:>10.3f} {rates['undecided']:>9.3f} "
                  f"{rates['repeats']:>7.1f}  {('met' if ok else 'MISSED') if checked else '(for comparison)'}",
                  flush=True)
    settings = {"trials": trials, "seed": seed, "candidates": BISECT_CANDIDATES,
                "tolerance_pct": BISECT_TOLERANCE_PCT, "effect": BISECT_EFFECT, "alpha": compare.DEFAULT_ALPHA,
                "target": TARGET_FWER}
    return PartResult(met, settings, rows)


TWO_STEPS = (1.08, 1.15)  # the first step, then a larger one later (issue 49: bisect named the second)
TWO_STEP_CANDIDATES = (9, 10, 11)
TWO_STEP_CAPS = (9, 15, 21)  # bisect's --max-repeats: its default, then what a larger cap buys back
TARGET_FIRST_FOUND = 0.90


def two_steps_trial(rng, sd: float, max_repeats: int = 9) -> dict[str, bool | int]:
    """One bisect over 9-11 points (drawn), +8% from a random candidate on and +15% more from a later one: whether
    it names the first step, says undecided (and whether its bracket holds the first step), names the second step
    as the first (a confident wrong answer), names another pair, or ends without a bisect (ends inconclusive);
    whether a found first step also reports the second change."""
    candidates = int(rng.choice(TWO_STEP_CANDIDATES))
    first_at = int(rng.integers(1, candidates - 1))
    second_at = int(rng.integers(first_at + 1, candidates))
    shifts = [math.log(TWO_STEPS[0]) * (i >= first_at) + math.log(TWO_STEPS[1]) * (i >= second_at)
              for i in range(candidates)]
    labels, result = simulated_bisect(rng, sd, shifts, max_repeats=max_repeats)
    named = (result.good, result.bad) if result.outcome == "found" else None
    first_named = named == (labels[first_at - 1], labels[first_at])
    second_named = named == (labels[second_at - 1], labels[second_at])
    undecided = result.outcome == "undecided"
    return {"first": first_named, "undecided": undecided,
            "holds": undecided and labels.index(result.good) < first_at <= labels.index(result.bad),
            "second": second_named, "other": named is not None and not (first_named or second_named),
            "no_bisect": result.outcome not in ("found", "undecided"),
            "again": first_named and result.again is not None and result.again.verdict == "slower",
            "environments": result.environments, "repeats": sum(t.repeats for t in result.tested.values())}


def _run_two_steps_job(job) -> dict[str, float]:
    sd, max_repeats, trials, seed = job
    rng = np.random.default_rng(seed)
    totals: dict[str, float] = {}
    for _ in range(trials):
        for name, value in two_steps_trial(rng, sd, max_repeats).items():
            totals[name] = totals.get(name, 0) + value
    return {name: total / trials for name, total in totals.items()}


def run_two_steps_part(trials: int, seed: int, jobs: int, caps: tuple[int, ...] = TWO_STEP_CAPS) -> PartResult:
    """Bisects over two planted steps (+8%, then +15%), at each of `caps` (bisect's --max-repeats). Target: the
    first step named in >= 90% of bisects or the rest claiming no pair (undecided, no bisect) but alpha; each kind
    of wrong claim (the second step named as the first, another pair, an undecided bracket without the first step)
    <= alpha."""
    print(f"bisect over two steps: {TWO_STEP_CANDIDATES[0]}-{TWO_STEP_CANDIDATES[-1]} candidates, x{TWO_STEPS[0]:g} "
          f"from a random candidate on and x{TWO_STEPS[1]:g} more from a later one, tolerance "
          f"±{BISECT_TOLERANCE_PCT:g}%, repeats 3 (+3 up to the cap), alpha {compare.DEFAULT_ALPHA:g}; "
          f"{trials} bisects per row")
    print(f"{'sd':>5} {'cap':>3} {'first step':>10} {'undecided':>9} {'(holds it)':>10} {'second as first':>15} "
          f"{'other pair':>10} {'no bisect':>9} {'and again':>9} {'envs':>5} {'repeats':>7}  target")
    # Cap-major, so the default cap's rows keep their streams whatever other caps are asked for.
    grid = [(sd, cap) for cap in caps for sd in EXAMPLE_SDS]
    seeds = np.random.SeedSequence([seed, 49]).spawn(len(grid))
    jobs_list = [(sd, cap, trials, s) for (sd, cap), s in zip(grid, seeds)]
    met, rows = True, []
    with ProcessPoolExecutor(jobs) as pool:
        for (sd, cap, *_), rates in zip(jobs_list, pool.map(_run_two_steps_job, jobs_list)):
            no_pair = rates["undecided"] + rates["no_bisect"]
            # Wrong claims: a pair found that is not the first step's, or an undecided bracket that misses it.
            wrong = (rates["second"], rates["other"], rates["undecided"] - rates["holds"])
            located = rates["first"] >= TARGET_FIRST_FOUND or rates["first"] + no_pair >= 1 - compare.DEFAULT_ALPHA
            ok = max(wrong) <= compare.DEFAULT_ALPHA and located
            met &= ok
            rows.append({"sd": sd, "max_repeats": cap, "first_step": rates["first"], "undecided": rates["undecided"],
                         "undecided_holds_first": rates["holds"], "second_as_first": rates["second"],
                         "other_pair": rates["other"], "no_bisect": rates["no_bisect"], "and_again": rates["again"],
                         "environments": rates["environments"], "repeats": rates["repeats"], "target_met": ok})
            print(f"{sd:>5g} {cap:>3} {rates['first']:>10.3f} {rates['undecided']:>9.3f} {rates['holds']:>10.3f} "
                  f"{rates['second']:>15.3f} {rates['other']:>10.3f} {rates['no_bisect']:>9.3f} "
                  f"{rates['again']:>9.3f} {rates['environments']:>5.1f} {rates['repeats']:>7.1f}  "
                  f"{'met' if ok else 'MISSED'}", flush=True)
    settings = {"trials": trials, "seed": seed, "candidates": list(TWO_STEP_CANDIDATES), "steps": list(TWO_STEPS),
                "tolerance_pct": BISECT_TOLERANCE_PCT, "alpha": compare.DEFAULT_ALPHA,
                "target_first_found": TARGET_FIRST_FOUND, "target": compare.DEFAULT_ALPHA}
    return PartResult(met, settings, rows)


# --- rank: the judge's ranking of two cells (issue 49) ------------------------------------------------------------

RANK_REPEATS = (1, 3, 5)  # the report's default (1), compare's minimum for a test (3), verify's default (5)
RANK_PROCESS_SDS = (0.02, 0.05, 0.10, 0.15)  # per-process log-sd: quiet CPU cells here 0.03-0.06, up to the prior
RANK_STEP_SD = 0.03
RANK_EFFECT = 0.10
RANK_TARGET = 0.05


def rank_trial(rng: np.random.Generator, repeats: int, process_sd: float, effect: float) -> str:
    """One judge.ratio of two cells with `repeats` processes a side (step_times' model), B (1 + effect) x A."""
    a = [step_times(rng, 10.0, process_sd, RANK_STEP_SD) for _ in range(repeats)]
    b = [step_times(rng, 10.0 * (1 + effect), process_sd, RANK_STEP_SD) for _ in range(repeats)]
    return judge.ratio(a, b).word


def _run_rank_job(job) -> dict[str, float]:
    repeats, process_sd, trials, seed = job
    rng = np.random.default_rng(seed)
    equal = [rank_trial(rng, repeats, process_sd, 0.0) for _ in range(trials)]
    apart = [rank_trial(rng, repeats, process_sd, RANK_EFFECT) for _ in range(trials)]
    return {"false_order": float(np.mean([w in (judge.FASTER, judge.SLOWER) for w in equal])),
            "wrong_winner": float(np.mean([w == judge.SLOWER for w in apart])),
            "power": float(np.mean([w == judge.FASTER for w in apart])),
            "tie_when_equal": float(np.mean([w == judge.TIE for w in equal]))}


def run_rank_part(trials: int, seed: int, jobs: int) -> PartResult:
    """The judge's ranking of two cells (fwbench_aggregator.judge.ratio, the rule of the report's Keras 3 best, its
    noise warnings and published order, and the your-models tables): a wrong "faster/slower" when the cells are
    equal, and a wrong winner at a true 10% difference, each at most 5% with the repeats the commands use, for
    process spreads up to the judge's assumed one (judge.PROCESS_SPREAD_PRIOR)."""
    print(f"rank (fwbench_aggregator.judge.ratio): two cells, {STEPS} steps a process (step sd {RANK_STEP_SD:g}, AR1 "
          f"rho {STEP_RHO}), B equal to A or {RANK_EFFECT:.0%} slower; assumed process spread "
          f"{judge.PROCESS_SPREAD_PRIOR:g} below {judge.MIN_REPEATS} repeats; {trials} pairs per row and case")
    print(f"{'repeats':>7} {'process sd':>10} {'false order':>11} {'wrong winner':>12} {'power':>6} {'tie (equal)':>11}"
          "  target")
    grid = [(n, sd) for n in RANK_REPEATS for sd in RANK_PROCESS_SDS]
    seeds = np.random.SeedSequence([seed, 4949]).spawn(len(grid))
    jobs_list = [(n, sd, trials, s) for (n, sd), s in zip(grid, seeds)]
    met, rows = True, []
    with ProcessPoolExecutor(jobs) as pool:
        for (n, sd, *_), rates in zip(jobs_list, pool.map(_run_rank_job, jobs_list)):
            # The binomial error of `trials` pairs: a rate within 2 standard errors of the target meets it.
            slack = 2 * math.sqrt(RANK_TARGET * (1 - RANK_TARGET) / trials)
            ok = max(rates["false_order"], rates["wrong_winner"]) <= RANK_TARGET + slack
            met &= ok
            rows.append({"repeats": n, "process_sd": sd, **rates, "target_met": ok})
            print(f"{n:>7} {sd:>10g} {rates['false_order']:>11.3f} {rates['wrong_winner']:>12.3f} "
                  f"{rates['power']:>6.3f} {rates['tie_when_equal']:>11.3f}  {'met' if ok else 'MISSED'}", flush=True)
    settings = {"trials": trials, "seed": seed, "step_sd": RANK_STEP_SD, "effect": RANK_EFFECT,
                "process_spread_prior": judge.PROCESS_SPREAD_PRIOR, "target": RANK_TARGET}
    return PartResult(met, settings, rows)


# --- rows: compare, the gate and verify over result rows -------------------------------------------------------

ROWS_COLUMNS = ("compare_fw", "gate_fw", "verify_fw", "all_reproduced", "compare_hit", "gate_hit", "verify_slower",
                "verify_reproduced")  # the table's rate columns, in its order


def run_rows_part(trials: int, planted_trials: int, seed: int, jobs: int, process_sigma: float,
                  step_sigma: float) -> PartResult:
    print(f"60 cells, {PLANTED_CELLS} planted; noise: process sigma {process_sigma:g}, step sigma "
          f"{step_sigma:g} (AR1 rho {STEP_RHO}), {STEPS} steps; verify tolerance ±{TOLERANCE_PCT:g}%")
    print(f"{'scenario':<12} {'trials':>6} {'cmp FWER':>8} {'gate FWER':>9} {'ver FWER':>8} {'all repr':>8} "
          f"{'cmp pow':>7} {'gate pow':>8} {'ver slow':>8} {'ver repr':>8}  targets")
    # One seeded stream per scenario (spawned from --seed): the table does not depend on --jobs.
    seeds = np.random.SeedSequence(seed).spawn(len(SCENARIOS))
    jobs_list = [(scenario, trials if scenario.effect == 1.0 else planted_trials, s, process_sigma, step_sigma)
                 for scenario, s in zip(SCENARIOS, seeds)]
    met, rows = True, []
    with ProcessPoolExecutor(jobs) as pool:
        for (scenario, n, *_), rates in zip(jobs_list, pool.map(_run_job, jobs_list)):
            missed = targets_met(scenario, rates)
            met &= not missed
            # NaN (no planted cell in an A/A scenario) is null in JSON, "—" in the tables.
            rows.append({"scenario": scenario.name, "repeats_a": scenario.repeats_a, "repeats_b": scenario.repeats_b,
                         "effect": scenario.effect, "trials": n,
                         **{k: (v if v == v else None) for k, v in rates.items()}, "missed": missed,
                         "target_met": not missed})
            cols = [f"{rates[k]:.3f}" if rates[k] == rates[k] else "—" for k in ROWS_COLUMNS]
            print(f"{scenario.name:<12} {n:>6} {cols[0]:>8} {cols[1]:>9} {cols[2]:>8} {cols[3]:>8} "
                  f"{cols[4]:>7} {cols[5]:>8} {cols[6]:>8} {cols[7]:>8}  "
                  f"{'met' if not missed else 'MISSED: ' + '; '.join(missed)}", flush=True)
    settings = {"trials": trials, "planted_trials": planted_trials, "seed": seed, "cells": len(cells()),
                "planted_cells": PLANTED_CELLS, "process_sigma": process_sigma, "step_sigma": step_sigma,
                "tolerance_pct": TOLERANCE_PCT, "target": TARGET_FWER}
    return PartResult(met, settings, rows)



# --- result files and the docs' tables made from them ------------------------------------------------------------

def write_record(path: Path, part: str, command: str, result: PartResult) -> None:
    """A part's table as a result file (benchmarks/results/<date>-<machine>/verdict-<part>.json); --render prints
    the docs' table from it."""
    record_ = {"benchmark": f"verdict_error_rates.py --part {part}", "date": dt.date.today().isoformat(),
               "machine": f"{cpu_model()}, {os.cpu_count()} cores", "command": command, **result.settings,
               "rows": result.rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record_, indent=1, ensure_ascii=False) + "\n")
    print(f"written: {path}")


def _measured(record_: dict, what: str) -> str:
    """The line above a table: when, where and by which command its figures were made (and, for figures copied
    from an earlier doc, that they were)."""
    line = f"Measured {record_['date']} on {record_['machine']}: `{record_['command']}`, {what}."
    for said in (record_.get("source"), record_.get("note")):
        if said:
            line += f" {said[0].upper()}{said[1:]}."
    return line


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _target(row: dict) -> str:
    if not row.get("checked", True):
        return "(for comparison)"
    return "met" if row["target_met"] else "missed"


def rank_table(record_: dict) -> str:
    """The markdown table of a part-rank JSON file (docs/aggregator.md shows it; tests/test_one_judge.py checks the
    two agree)."""
    lines = [f"Measured {record_['date']} on {record_['machine']}: `python benchmarks/{record_['benchmark']} "
             f"--rank-trials {record_['trials']} --seed {record_['seed']}`, {record_['trials']} pairs per row and case, "
             f"B {record_['effect']:.0%} slower for the wrong-winner and power columns.", "",
             "| repeats a side | process sd | false order (equal cells) | wrong winner (10% apart) | power (10% apart) "
             "| target (<= 5%) |", "|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        lines.append(f"| {row['repeats']} | {row['process_sd']:g} | {row['false_order']:.3f} | "
                     f"{row['wrong_winner']:.3f} | {row['power']:.3f} | {'met' if row['target_met'] else 'missed'} |")
    return "\n".join(lines)


def bundle_table(record_: dict) -> str:
    lines = [_measured(record_, f"{record_['trials']} verifications per row with no true change, as many with one cell "
                                f"{record_['power_effect'] - 1:.0%} slower and as many with one cell exactly at the "
                                f"tolerance; {record_['cells']} cells, repeat log-median sd "
                                f"{record_['published_sd']:g} published and {record_['rerun_noise']:g}x that on the "
                                f"noisier re-run machine; tolerance ±{record_['tolerance_pct']:g}%; added repeats up "
                                f"to {record_['max_repeats']}"), "",
             f"| scenario | rule | false slow/fast | all repr | pow +{record_['power_effect'] - 1:.0%} | "
             f"repr +{record_['tolerance_pct']:g}% | re-runs | target (<= 5%) |", "|---|---|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        lines.append(f"| {row['scenario']} | {row['rule']} | {_rate(row['false_claims'])} | "
                     f"{_rate(row['all_reproduced'])} | {_rate(row['power'])} | "
                     f"{_rate(row['reproduced_at_tolerance'])} | {row['rerun_repeats']:.1f} | {_target(row)} |")
    return "\n".join(lines)


def example_table(record_: dict) -> str:
    lines = [_measured(record_, f"{record_['trials']} verifications per row, 5 re-runs and added ones up to "
                                f"{record_['max_repeats']}"), "",
             "| published v re-run | log-sd | drift between the runs | tolerance | reproduced, one look | "
             "reproduced, added repeats | re-runs (added) | slower or faster, one look / added |",
             "|---|---|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        drift = "none" if row["drift"] == 1 else f"{row['drift'] - 1:+.0%}"
        lines.append(f"| {row['published']}v{row['rerun']} | {row['sd']:g} | {drift} | ±{row['tolerance_pct']:g}% | "
                     f"{_rate(row['reproduced_one_look'])} | {_rate(row['reproduced_added'])} | "
                     f"{row['rerun_repeats_added']:.1f} | {_rate(row['slower_or_faster_one_look'])} / "
                     f"{_rate(row['slower_or_faster_added'])} |")
    return "\n".join(lines)


def rows_table(record_: dict) -> str:
    lines = [_measured(record_, f"seed {record_['seed']}, {record_['trials']} trials per A/A scenario and "
                                f"{record_['planted_trials']} per planted one; {record_['cells']} cells, "
                                f"{record_['planted_cells']} planted; process sigma {record_['process_sigma']:g}, "
                                f"step sigma {record_['step_sigma']:g}; verify tolerance "
                                f"±{record_['tolerance_pct']:g}%"), "",
             "| scenario | trials | cmp FWER | gate FWER | ver FWER | all repr | cmp pow | gate pow | ver slow | "
             "ver repr | targets |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        lines.append(f"| {row['scenario']} | {row['trials']} | "
                     + " | ".join(_rate(row[k]) for k in ROWS_COLUMNS) + f" | {_target(row)} |")
    return "\n".join(lines)


def bisect_table(record_: dict) -> str:
    lines = [_measured(record_, f"{record_['trials']} bisects with no change and {record_['trials']} with "
                                f"+{record_['effect'] - 1:.0%} from a random candidate on, per row; "
                                f"{record_['candidates']} candidates, tolerance ±{record_['tolerance_pct']:g}%"), "",
             f"| sd | rule | false changed | no change | found +{record_['effect'] - 1:.0%} | right pair | undecided | "
             "repeats | target (<= 5%) |", "|---|---|---|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        lines.append(f"| {row['sd']:g} | {row['rule']} | {_rate(row['false_changed'])} | {_rate(row['no_change'])} | "
                     f"{_rate(row['found'])} | {_rate(row['right_pair'])} | {_rate(row['undecided'])} | "
                     f"{row['repeats']:.1f} | {_target(row)} |")
    return "\n".join(lines)


def two_steps_table(record_: dict) -> str:
    first, second = record_["steps"]
    candidates = record_["candidates"]
    lines = [_measured(record_, f"{record_['trials']} bisects per row over {candidates[0]}-{candidates[-1]} candidates "
                                f"(drawn), x{first:g} from a random candidate on and x{second:g} more from a later "
                                f"one; tolerance ±{record_['tolerance_pct']:g}%, repeats 3 (+3 up to the cap)"), "",
             "| sd | cap (`--max-repeats`) | first step | undecided | (holds it) | second as first | other pair | "
             "no bisect | and again | envs | repeats | target |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in record_["rows"]:
        lines.append(f"| {row['sd']:g} | {row['max_repeats']} | {_rate(row['first_step'])} | "
                     f"{_rate(row['undecided'])} | {_rate(row['undecided_holds_first'])} | "
                     f"{_rate(row['second_as_first'])} | {_rate(row['other_pair'])} | {_rate(row['no_bisect'])} | "
                     f"{_rate(row['and_again'])} | {row['environments']:.1f} | {row['repeats']:.1f} | "
                     f"{_target(row)} |")
    return "\n".join(lines)


RENDERERS = {"rank": rank_table, "bundle": bundle_table, "example": example_table, "rows": rows_table,
             "bisect": bisect_table, "bisect-two-steps": two_steps_table}


def render(record_: dict) -> str:
    """The docs' Markdown of a part's JSON file, by the part its `benchmark` names."""
    part = record_["benchmark"].rpartition("--part ")[2]
    if part not in RENDERERS:
        raise ValueError(f"not a verdict_error_rates.py result file: benchmark {record_['benchmark']!r}")
    return RENDERERS[part](record_)


def prior_separation() -> str:
    """What the judge's assumed process spread alone lets one or two processes a side rank (arithmetic from
    judge.PROCESS_SPREAD_PRIOR; docs/aggregator.md shows it)."""
    def apart(n: int) -> float:  # the interval's half-width, as a factor, from the prior alone (no step noise)
        return math.exp(judge.prior_half_width(n, n))

    return (f"With fewer than {judge.MIN_REPEATS} repeats a side the judge assumes a process spread of "
            f"{judge.PROCESS_SPREAD_PRIOR:g} (the log standard deviation of one process's median around the cell's, "
            f"`judge.PROCESS_SPREAD_PRIOR`). On its own that spread widens the {judge.CONFIDENCE:.0%} interval of "
            f"B/A to a factor of {apart(1):.2f} either side of its centre with one process a side, and {apart(2):.2f} "
            f"with two, so one process a side ranks two cells only when they are at least about {apart(1):.2f}x "
            f"apart and two a side {apart(2):.2f}x (further where the steps themselves vary).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="trials per A/A scenario")
    parser.add_argument("--planted-trials", type=int, default=30, help="trials per planted-effect scenario")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--process-sigma", type=float, default=0.02)
    parser.add_argument("--step-sigma", type=float, default=0.03)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--part", choices=("all", *PARTS), default="all")
    parser.add_argument("--rank-trials", type=int, default=2000, help="pairs per row and case of part rank")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the part's table to this JSON file (one --part; --render prints it)")
    parser.add_argument("--bisect-trials", type=int, default=1000, help="bisects per row of part bisect (each with "
                                                                        "no change and with a planted change)")
    parser.add_argument("--two-step-trials", type=int, default=4000, help="bisects per row of part "
                                                                           "bisect-two-steps")
    parser.add_argument("--two-step-caps", default=",".join(map(str, TWO_STEP_CAPS)),
                        help="part bisect-two-steps: bisect's --max-repeats values, one set of rows each")
    parser.add_argument("--bundle-trials", type=int, default=1000, help="verifications per bundle scenario and rule")
    parser.add_argument("--rerun-noise", type=float, default=3.0, help="re-run sd / published sd (noisy scenarios)")
    parser.add_argument("--max-repeats", type=int, default=verification.DEFAULT_MAX_REPEATS)
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="print the docs' Markdown table of a part's JSON file and exit")
    parser.add_argument("--render-rank", type=Path, default=None, metavar="JSON", help="the same as --render")
    parser.add_argument("--render-prior-separation", action="store_true",
                        help="print what the judge's assumed process spread lets 1 or 2 processes a side rank, and "
                             "exit")
    args = parser.parse_args(argv)
    if args.render_prior_separation:
        print(prior_separation())
        return 0
    if args.render or args.render_rank:
        try:
            print(render(json.loads((args.render or args.render_rank).read_text())))
        except (OSError, ValueError) as error:
            parser.error(str(error))
        return 0
    if min(args.trials, args.planted_trials, args.jobs, args.bundle_trials, args.bisect_trials,
           args.two_step_trials) < 1:
        parser.error("--trials, --planted-trials, --bundle-trials, --bisect-trials, --two-step-trials and --jobs "
                     "must be at least 1")
    try:
        caps = tuple(int(cap) for cap in args.two_step_caps.split(","))
    except ValueError:
        parser.error(f"--two-step-caps: not a comma-separated list of repeat counts: {args.two_step_caps!r}")
    if args.json is not None and args.part == "all":
        parser.error("--json writes one part's table: name it with --part")
    command = "python benchmarks/verdict_error_rates.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"{dt.date.today().isoformat()} on {platform.node() or 'this machine'} ({os.cpu_count()} cores, "
          f"{platform.python_version()})")
    print(f"command: {command}")
    started, all_met = time.perf_counter(), True
    # The parts, in order: (name, run, whether it has targets).
    parts = [("rank", lambda: run_rank_part(args.rank_trials, args.seed, args.jobs), True),
             ("bisect-two-steps", lambda: run_two_steps_part(args.two_step_trials, args.seed, args.jobs, caps), True),
             ("bisect", lambda: run_bisect_part(args.bisect_trials, args.seed, args.jobs), True),
             ("example", lambda: run_example_part(args.bundle_trials, args.seed, args.jobs, args.max_repeats), False),
             ("bundle", lambda: run_bundle_part(args.bundle_trials, args.seed, args.jobs, args.rerun_noise,
                                                args.max_repeats), True),
             ("rows", lambda: run_rows_part(args.trials, args.planted_trials, args.seed, args.jobs,
                                            args.process_sigma, args.step_sigma), True)]
    assert tuple(name for name, *_ in parts) == PARTS
    for name, run, has_targets in parts:
        if args.part not in ("all", name):
            continue
        result = run()
        all_met &= result.met or not has_targets
        if args.json is not None:
            write_record(args.json, name, command, result)
        if args.part == "all" and name != parts[-1][0]:
            print()
    if args.part == "example":  # no target: usability
        return 0
    print(f"all targets met: {'yes' if all_met else 'NO'} ({time.perf_counter() - started:.0f} s)")
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main())
