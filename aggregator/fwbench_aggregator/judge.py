"""fwbench's one judge: every winner, tie, change, regression and "reproduced" it states is decided here.

Every consumer (the report's Keras 3 best, noise warnings and published order, the your-models tables, `compare`
and `--fail-above`, `sweep`, `bisect`, `verify`, `history show`) gives this module the rows it wants judged and
formats what it gets back; none compares medians or intervals itself (tests/test_architecture.py holds that line). The rules:

Which rows decide
  Only quiet ok rows (`quiet`): a busy row (something competed with the cell while it was timed) is shown, marked,
  and decides nothing anywhere. A side left with no quiet row is NOT_JUDGED_BUSY, never "slower".
  Rows of one cell identity are pooled only when they share the environment facts that move step time
  (`ENVIRONMENT_FACTS`: library versions, the compile cache's state); a cell that mixes them is split into parts
  (`environment_parts`), each labelled by what differs, never pooled silently.

Ranking two cells (`order`, `rank`)
  From the interval of the ratio B/A of their ms/step, never from overlapping intervals of each. With at least
  MIN_REPEATS repeats a side: Welch's t on the log of each repeat's median (df capped, see `capped_welch`), whose
  interval holds process-to-process variation as the rows show it. With fewer, the rows cannot show how much one
  process differs from the next, so the step-level interval (two-level bootstrap) is widened by an assumed
  process spread (PROCESS_SPREAD_PRIOR, a log standard deviation per process): one process a side separates two
  cells only when they are about 1.5x apart. A is faster only when the whole interval of B/A lies above 1; a "tie"
  when it lies within the equivalence band (EQUIVALENCE_PCT) or both sides are identical; otherwise "cannot rank".
  A ranking names a winner only when its interval against every other candidate is above 1.
  benchmarks/verdict_error_rates.py (part "rank") checks by simulation that a wrong "faster" is under 5% when the
  cells are equal and a wrong winner under 5% at a true 10% difference.

Changes between two result sets (`compare`, `sweep`, `bisect`, `verify`)
  Welch's t on log repeat medians as above, Holm over the cells a command judges (`holm`), along one axis at a
  time: a change of batch is compared per sample, a change of device count is scaling (never a regression), a
  change of device model a ratio only.

Changes in a series (`history show`: `change_points`)
  One cell identity's points over dates or versions (each the median of at least MIN_REPEATS quiet processes in one
  environment): ruptures' PELT on their logs, least absolute deviations, at a penalty chosen by simulation for at most
  5% false alarms per 30-point series (benchmarks/history_change_points.py); a step under EQUIVALENCE_PCT is none.
  Environments measured side by side are separate tracks, each judged as a series (`environment_tracks`).

Plain NumPy (scipy and ruptures imported lazily): the aggregator's layer, no framework.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from fwbench_aggregator import stats

CONFIDENCE = stats.CONFIDENCE  # every interval the judge states: 95%
MIN_REPEATS = 3  # per side, for any test of a change and for a ranking from the repeats' own spread
# The process-to-process spread assumed where a side has fewer than MIN_REPEATS repeats: the log standard deviation
# of one process's median around the cell's. 0.15 covers the quiet CPU processes measured here (coefficients of
# variation of 3-13% between rounds of one cell) with room for a GPU's or another machine's; at one repeat a side
# it separates cells about 1.5x apart (exp(1.96 x sqrt(2) x 0.15) = 1.52).
PROCESS_SPREAD_PRIOR = 0.15
# A ratio whose interval lies within [1/(1+E), 1+E] is a tie ("equivalent"): the tolerance compare, sweep and bisect
# use by default.
EQUIVALENCE_PCT = 5.0

FASTER, SLOWER, TIE, CANNOT_RANK = "faster", "slower", "tie", "cannot rank"
EQUIVALENT = "equivalent"
NOT_JUDGED_BUSY = "not judged: busy"
INCONCLUSIVE = "inconclusive"


# --- which rows decide --------------------------------------------------------------------------------------------

def busy_mask(frame):
    """True for busy rows (pandas Series over `frame`'s index; a frame without the column has none)."""
    import pandas as pd

    if "busy" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["busy"].astype("boolean").fillna(False).astype(bool)


def quiet(frame):
    """(quiet ok rows, number of busy ok rows): the only rows any verdict is taken from."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    busy = busy_mask(ok)
    return ok[~busy], int(busy.sum())


def busy_might_have_won(busy: stats.Estimate, best: stats.Estimate | None) -> bool:
    """A cell measured only busy decides nothing, but one whose median is below the named best's is named beside it:
    busy rows only slow a cell, so it might have won."""
    return best is None or busy.median < best.median


def environment_key(row: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The environment facts of a row that move step time, as sorted (name, value) pairs: each tracked library's
    version (`library_versions`), and the compile cache's state (`compile_cache_warm`: warm, cold, or none used).
    The machine is the identity's (device_model): hosts of one device model pool, as the GPU kit's windows do."""
    facts = []
    versions = row.get("library_versions")
    if isinstance(versions, str) and versions.strip():
        try:
            versions = json.loads(versions)
        except ValueError:
            versions = {"library_versions": versions}
    if isinstance(versions, dict):
        facts += [(str(name), str(value)) for name, value in versions.items() if value is not None]
    cache = row.get("compile_cache_warm")
    if cache is not None and cache == cache:  # NaN: not recorded
        facts.append(("compile cache", "warm" if bool(cache) else "cold"))
    return tuple(sorted(facts))


ENVIRONMENT_COLUMNS = ("library_versions", "compile_cache_warm")  # all environment_key reads of a row


def environment_records(frame) -> list[dict[str, Any]]:
    """A frame's rows as environment_key reads them: only its environment columns (converting every column of a
    results frame to records costs most of a whole-bundle compare)."""
    return frame[[column for column in ENVIRONMENT_COLUMNS if column in frame]].to_dict("records")


def environment_parts(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[int]]]:
    """Rows of one cell identity split by environment: [(label, row indices)], one part with label "" when they
    share one. A label names only the facts that differ between the parts ("keras 3.16.0", "compile cache warm")."""
    keys = [environment_key(row) for row in rows]
    distinct = list(dict.fromkeys(keys))
    if len(distinct) <= 1:
        return [("", list(range(len(rows))))]
    differing = sorted({name for key in distinct for name, _ in key
                        if len({dict(k).get(name) for k in distinct}) > 1})
    parts = []
    for key in distinct:
        facts = dict(key)
        label = ", ".join(f"{name} {facts.get(name, 'not recorded')}" for name in differing)
        parts.append((label, [i for i, k in enumerate(keys) if k == key]))
    return parts


def environment_part_of(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[int | None]]:
    """Rows of one cell identity, ok or not, split by the environments of their ok rows: the parts' labels
    (environment_parts'), and each row's part: the one of its environment, None for a row that did not run ok in an
    environment no ok row has (its caller decides where it goes)."""
    ok = [i for i, row in enumerate(rows) if row.get("status") == "ok"]
    parts = environment_parts([rows[i] for i in ok])
    part_of_key = {environment_key(rows[ok[i]]): index for index, (_, members) in enumerate(parts) for i in members}
    return [label for label, _ in parts], [part_of_key.get(environment_key(row)) for row in rows]


# --- Welch's t on log repeat medians ------------------------------------------------------------------------------

def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (monotone, capped at 1)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank_, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank_) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class LogRatioTest:
    """Welch's t on log repeat medians: B/A as a ratio of geometric means."""
    log_ratio: float
    se: float
    dof: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, confidence: float) -> tuple[float, float]:
        from scipy import stats as sps  # lazy: scipy is slow to import

        half = float(sps.t.ppf(0.5 + confidence / 2, self.dof)) * self.se
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def p_two_sided(self) -> float:
        from scipy import stats as sps

        return float(2 * sps.t.sf(abs(self.log_ratio) / self.se, self.dof))

    def p_above(self, limit: float) -> float:
        """One-sided p of "B/A <= limit" (small when B/A is credibly above limit)."""
        from scipy import stats as sps

        return float(sps.t.sf((self.log_ratio - math.log(limit)) / self.se, self.dof))

    def p_below(self, limit: float) -> float:
        """One-sided p of "B/A >= limit" (small when B/A is credibly below limit)."""
        from scipy import stats as sps

        return float(sps.t.cdf((self.log_ratio - math.log(limit)) / self.se, self.dof))


def log_ratio_test(a: np.ndarray, b: np.ndarray) -> LogRatioTest | None:
    """Welch's t on log values with df = min(Welch-Satterthwaite df, the same formula at equal variances).

    The second term depends on the sample sizes only (2n - 2 at equal n, where it never binds; 3.3 at 10 vs 3),
    so a small side whose variance happens to come out low cannot buy itself extra degrees of freedom: plain
    Welch-Satterthwaite let false alarms multiply at 10 vs 3 repeats under Holm's small per-cell alpha.
    None when both sides' repeats are identical: no spread to test against (undefined, never p = 0)."""
    log_ratio, se, dof = capped_welch(log_moments(a), log_moments(b))
    if se == 0:
        return None
    return LogRatioTest(float(log_ratio), float(se), float(dof))


def log_moments(values) -> tuple[float, float, int]:
    """One side's (mean, variance (ddof 1), size) of the log of its values: what capped_welch takes."""
    logs = np.log(np.asarray(values, dtype=float))
    return float(logs.mean()), float(logs.var(ddof=1)), int(logs.size)


def capped_welch(side_a, side_b):
    """log_ratio_test's (log ratio, standard error, capped df) from each side's (mean, variance (ddof 1), size) of
    log values; vectorised (numpy arrays of cells work), so simulations judge many cells at once."""
    mean_a, var_a, n_a, mean_b, var_b, n_b = (np.asarray(x, dtype=float) for x in (*side_a, *side_b))
    va, vb = var_a / n_a, var_b / n_b
    with np.errstate(invalid="ignore", divide="ignore"):
        welch_dof = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    wa, wb = 1 / n_a, 1 / n_b  # the same with equal variances
    sizes_dof = (wa + wb) ** 2 / (wa ** 2 / (n_a - 1) + wb ** 2 / (n_b - 1))
    return mean_b - mean_a, np.sqrt(va + vb), np.fmin(welch_dof, sizes_dof)


def change_word(ratio: float, p_adjusted: float, alpha: float, min_effect_pct: float) -> str:
    """compare's verdict of one tested cell: slower/faster when the Holm-adjusted p is under alpha and the change at
    least min_effect_pct, else not significant (saying which)."""
    if p_adjusted >= alpha:
        return "not significant"
    if abs(ratio - 1) * 100 < min_effect_pct:
        return f"not significant (change below {min_effect_pct:g}%)"
    return SLOWER if ratio > 1 else FASTER


def equivalence_p(test: LogRatioTest, tolerance_pct: float) -> float:
    """p of "B/A is outside [1/(1+T), 1+T]": the larger of the two one-sided tests of the same Welch t (TOST)."""
    upper, lower = 1 + tolerance_pct / 100, 1 / (1 + tolerance_pct / 100)
    return max(test.p_below(upper), test.p_above(lower))


def step_verdict(ratio: float, p_change: float | None, p_equivalent: float | None, tolerance_pct: float,
                 alpha: float) -> str:
    """A step's verdict from its p-values (Holm-adjusted over the cells of the step; for one cell, as they are):
    compare's slower/faster (p_change < alpha and the change at least the tolerance), else equivalent within it
    (p_equivalent < alpha), else inconclusive. One rule for the sweep report, bisect and the benchmark."""
    if p_change is not None and p_change < alpha and abs(ratio - 1) * 100 >= tolerance_pct:
        return SLOWER if ratio > 1 else FASTER
    if p_equivalent is not None and p_equivalent < alpha:
        return EQUIVALENT
    return INCONCLUSIVE


def step_detail(verdict: str, p_change: float, p_equivalent: float, tolerance_pct: float) -> str:
    """Why a tested step got its verdict, in the p-values that decided it (the sweep report, bisect and watch)."""
    if verdict in (SLOWER, FASTER):
        return f"Holm p {p_change:.3g}"
    if verdict == EQUIVALENT:
        return f"equivalence Holm p {p_equivalent:.3g}"
    return (f"change Holm p {p_change:.3g}, equivalence Holm p {p_equivalent:.3g}: the interval reaches past "
            f"±{tolerance_pct:g}%")


def credibly_above(tests: Sequence[LogRatioTest], limit: float, alpha: float) -> list[bool]:
    """--fail-above's gate: for each cell's test, is B/A credibly above `limit` (one-sided Welch t, Holm-adjusted
    over the gated cells, so the chance of failing any cell whose true change is within the limit stays <= alpha)."""
    adjusted = holm([test.p_above(limit) for test in tests])
    return [p < alpha for p in adjusted]


def interval_words(ratio: float | None, low: float | None, high: float | None, tolerance_pct: float) -> str:
    """A ratio B/A (ms/step), its interval, and what the interval supports: "x1.077 [1.019–1.139]: slower by
    1.9–13.9% (not shown beyond 5%)". "More than T%" only when the whole interval is beyond T% (as printed, to
    0.1%): a verdict's point estimate beyond it is not enough."""
    if ratio is None:
        return "no ratio"
    if low is None or high is None:
        return f"x{ratio:.3f} (no interval)"
    # near, far: the interval's ends as percent changes from 1 (near: 0 when it holds 1).
    if low > 1:
        near, far = (low - 1) * 100, (high - 1) * 100
        supported = f"slower by {near:.1f}–{far:.1f}%"
    elif high < 1:
        near, far = (1 - high) * 100, (1 - low) * 100
        supported = f"faster by {near:.1f}–{far:.1f}%"
    else:
        near, far = 0.0, max(1 - low, high - 1) * 100
        supported = f"between {(1 - low) * 100:.1f}% faster and {(high - 1) * 100:.1f}% slower"
    if round(near, 1) > tolerance_pct:
        reach = f"by more than {tolerance_pct:g}%"
    elif round(far, 1) <= tolerance_pct:
        reach = f"within ±{tolerance_pct:g}%"
    else:
        reach = f"not shown beyond {tolerance_pct:g}%"
    return f"x{ratio:.3f} [{low:.3f}–{high:.3f}]: {supported} ({reach})"


# --- verify: is a published cell reproduced? ------------------------------------------------------------------

VERIFY_TOLERANCE_PCT = 10.0
VERIFY_ALPHA = 0.05  # per side of each cell's TOST; family-wise for slower/faster claims
REPRODUCED = "reproduced"


@dataclass(frozen=True)
class Rule:
    """verify's levels for m judged cells and L looks a cell may get (see the module doc)."""
    tolerance_pct: float = VERIFY_TOLERANCE_PCT
    alpha: float = VERIFY_ALPHA
    cells: int = 1  # m
    looks: int = 1  # L

    @property
    def tost_confidence(self) -> float:
        """Two-sided confidence of the TOST interval: alpha / L per side."""
        return 1 - 2 * self.alpha / self.looks

    @property
    def claim_level(self) -> float:
        """The one-sided level of each slower/faster test: alpha over 2 sides x m cells x L looks."""
        return self.alpha / (2 * max(1, self.cells) * self.looks)

    def describe(self) -> str:
        return (f"slower/faster need one-sided p < {self.claim_level:.2g} (alpha {self.alpha:g} over 2 sides x "
                f"{self.cells} cell(s) x {self.looks} look(s))")


def judge_arrays(log_ratio, se, dof, rule: Rule):
    """Vectorised verdicts of cells from their Welch tests (log of re-run/published, its standard error, df):
    (verdicts, low, high, p_slower, p_faster), the interval at rule.tost_confidence."""
    from scipy import stats as sps

    log_ratio, se, dof = (np.asarray(x, dtype=float) for x in (log_ratio, se, dof))
    half = sps.t.ppf(0.5 + rule.tost_confidence / 2, dof) * se
    low, high = np.exp(log_ratio - half), np.exp(log_ratio + half)
    upper, lower = math.log(1 + rule.tolerance_pct / 100), math.log(1 - rule.tolerance_pct / 100)
    p_slower = sps.t.sf((log_ratio - upper) / se, dof)
    p_faster = sps.t.cdf((log_ratio - lower) / se, dof)
    verdicts = np.full(log_ratio.shape, INCONCLUSIVE, dtype=object)
    verdicts[(low >= 1 - rule.tolerance_pct / 100) & (high <= 1 + rule.tolerance_pct / 100)] = REPRODUCED
    verdicts[p_slower < rule.claim_level] = SLOWER
    verdicts[p_faster < rule.claim_level] = FASTER
    return verdicts, low, high, p_slower, p_faster


def decidable_by(published, rerun, cap: int, rule: Rule):
    """Whether re-run repeats up to `cap` could still decide inconclusive cells (vectorised; each side as
    capped_welch's (mean, variance, count) of log repeat medians). Not when, at the cap and the spread
    measured so far, the interval at the rule's level would be wider than the tolerance band even centred in it,
    while the estimate lies inside the band (no slower/faster claim in view): the published side's own spread
    sets that width's floor, and re-runs cannot lower it. Saying no only spends fewer re-runs: the levels are
    fixed by the schedule, so the error rates hold either way."""
    from scipy import stats as sps

    mean_b, var_b, n_b = (np.asarray(x, dtype=float) for x in rerun)
    log_ratio = mean_b - np.asarray(published[0], dtype=float)
    _, se, dof = capped_welch(published, (mean_b, var_b, np.maximum(n_b, cap)))
    half = sps.t.ppf(0.5 + rule.tost_confidence / 2, dof) * se
    upper, lower = math.log(1 + rule.tolerance_pct / 100), math.log(1 - rule.tolerance_pct / 100)
    hopeless = (half >= (upper - lower) / 2) & (log_ratio >= lower) & (log_ratio <= upper)
    return ~hopeless


def inconclusive_reason(low: float, high: float, p_slower: float, p_faster: float, rule: Rule) -> str:
    """Why an inconclusive verify cell is so: beyond the tolerance as measured but not credibly, or an interval that
    straddles a tolerance bound."""
    if low > 1 + rule.tolerance_pct / 100 or high < 1 - rule.tolerance_pct / 100:
        p = p_slower if low > 1 else p_faster
        return (f": beyond the tolerance as measured, but one-sided p {p:.2g} is not enough: {rule.describe()} (more "
                "repeats needed)")
    return ": the interval straddles a tolerance bound (more repeats or a quieter machine needed)"


def interval_above(low: float | None, limit: float) -> bool:
    """verify --fail-above: the whole interval of re-run/published lies above `limit`."""
    return low is not None and low > limit


# --- ranking ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ratio:
    """B/A of two cells' ms/step with its interval, and what the interval says: FASTER (A is faster: the interval
    lies above 1), SLOWER (A is slower), TIE or CANNOT_RANK."""

    value: float
    low: float
    high: float
    word: str
    method: str

    def text(self) -> str:
        """'x1.32 [1.10–1.58]'."""
        return f"x{self.value:.2f} [{self.low:.2f}–{self.high:.2f}]"


METHOD_REPEATS = "Welch t on log repeat medians"
METHOD_PRIOR = (f"steps' bootstrap widened by an assumed process spread ({PROCESS_SPREAD_PRIOR:g} log sd; fewer "
                f"than {MIN_REPEATS} repeats a side)")


def ratio(a: Sequence[np.ndarray], b: Sequence[np.ndarray], *, equivalence_pct: float = EQUIVALENCE_PCT) -> Ratio:
    """B/A (each side: the per-step samples of each quiet repeat) and its verdict (module doc)."""
    a, b = [np.asarray(r, dtype=float) for r in a if len(r)], [np.asarray(r, dtype=float) for r in b if len(r)]
    if not a or not b:
        raise ValueError("a side has no samples")
    medians_a = np.array([stats.median(r) for r in a])
    medians_b = np.array([stats.median(r) for r in b])
    test = log_ratio_test(medians_a, medians_b) if min(len(a), len(b)) >= MIN_REPEATS else None
    if test is not None:
        low, high = test.interval(CONFIDENCE)
        centre, method = test.ratio, METHOD_REPEATS
    else:
        pooled_a, pooled_b = np.concatenate(a), np.concatenate(b)
        if np.all(pooled_a == pooled_a[0]) and np.all(pooled_b == pooled_b[0]) and pooled_a[0] == pooled_b[0]:
            return Ratio(1.0, 1.0, 1.0, TIE, "identical samples on both sides")
        steps = stats.ratio_estimate(b, a)  # the steps' two-level bootstrap interval of B/A
        centre = steps.ratio
        steps_half = math.log(steps.high / steps.low) / 2
        half = math.hypot(steps_half, prior_half_width(len(a), len(b)))
        low, high = centre * math.exp(-half), centre * math.exp(half)
        method = METHOD_PRIOR
    band = 1 + equivalence_pct / 100
    if low > 1:
        word = FASTER
    elif high < 1:
        word = SLOWER
    elif low >= 1 / band and high <= band:
        word = TIE
    else:
        word = CANNOT_RANK
    return Ratio(float(centre), float(low), float(high), word, method)


def prior_half_width(repeats_a: int, repeats_b: int) -> float:
    """The log half-width of the interval of B/A that the assumed process spread (PROCESS_SPREAD_PRIOR) alone gives
    with these repeats a side: what `ratio` widens by below MIN_REPEATS, and what one process a side can separate."""
    from scipy import stats as sps  # lazy: scipy is slow to import

    process_se = PROCESS_SPREAD_PRIOR * math.sqrt(1 / repeats_a + 1 / repeats_b)
    return float(sps.norm.ppf(0.5 + CONFIDENCE / 2)) * process_se


@dataclass(frozen=True)
class Ranking:
    """Candidates fastest first (by median; the order shown, not a claim), the winner where the judge names one,
    and, when it does not, the candidates the fastest cannot be ranked above."""

    order: tuple[Any, ...]
    winner: Any | None
    # Each other candidate against the fastest: candidate -> its Ratio (candidate / fastest).
    against_fastest: dict
    not_ranked: tuple[Any, ...]  # the fastest first, then those it cannot be ranked above ((): a winner)

    @property
    def tied(self) -> bool:
        return bool(self.not_ranked) and all(self.against_fastest[c].word == TIE for c in self.not_ranked[1:])


def rank(candidates: Mapping[Any, Sequence[np.ndarray]]) -> Ranking | None:
    """A ranking of candidates (key -> per-repeat samples of quiet rows). The fastest by median is the winner only
    when every other candidate's ratio to it is FASTER (its interval above 1). None without candidates."""
    if not candidates:
        return None
    order = sorted(candidates, key=lambda key: _median_of(candidates[key]))
    fastest = order[0]
    against = {key: ratio(candidates[fastest], candidates[key]) for key in order[1:]}
    unranked = tuple(key for key in order[1:] if against[key].word != FASTER)
    return Ranking(tuple(order), None if unranked else fastest, against, (fastest, *unranked) if unranked else ())


def ordered_pairs(candidates: Mapping[Any, Sequence[np.ndarray]]) -> list[tuple[Any, Any]]:
    """(faster, slower) for every pair the judge can order; pairs it cannot order are absent (a tie or "cannot
    rank"). The published-order comparison uses only these."""
    keys = list(candidates)
    pairs = []
    for i, first in enumerate(keys):
        for second in keys[i + 1:]:
            word = ratio(candidates[first], candidates[second]).word
            if word == FASTER:
                pairs.append((first, second))
            elif word == SLOWER:
                pairs.append((second, first))
    return pairs


def _median_of(repeats: Sequence[np.ndarray]) -> float:
    return stats.median(np.concatenate([np.asarray(r, dtype=float) for r in repeats]))


# --- change points of a series (`fwbench history show`) -----------------------------------------------------------
# A series is one cell identity's points in order (dates, or versions of a package); a point is the median ms/step of
# its quiet processes in one environment (fwbench_aggregator.history_series builds them with `quiet` and
# `environment_parts`). Only points of at least MIN_REPEATS quiet processes decide: with fewer, one slow process is a
# slow point, and a few of them in a row read as a step. Their logs are segmented by ruptures' PELT with the
# least-absolute-deviation cost (model "l1": each segment around its median, so a slow point moves no boundary), at a
# penalty of CHANGE_PENALTY x sigma x ln(points) per change, sigma the series' own point-to-point noise
# (series_noise: from consecutive differences, so a step barely moves it). A change smaller than CHANGE_MIN_STEP_PCT
# between the medians of its segments is no change (compare's equivalence band): its boundary is removed and the
# segments merged. CHANGE_PENALTY is the smallest penalty at which at most 5% of 30-point series with no change show
# one, by simulation on this project's noise (benchmarks/history_change_points.py; docs/history.md gives it with the
# power for a 10% step).
CHANGE_PENALTY = 1.8
CHANGE_MIN_POINTS = 3  # points each side of a change
CHANGE_MIN_STEP_PCT = EQUIVALENCE_PCT
CHANGE_COST = "l1"


@dataclass(frozen=True)
class ChangePoint:
    """A change in a series: at point `index` (the first point after it), `ratio` = after / before (the medians of
    the segments' points either side), and its word (SLOWER: ms/step went up)."""

    index: int
    ratio: float
    word: str


def environment_tracks(points: Sequence[tuple[tuple, int]]) -> list[int]:
    """The tracks of a series' points, given as (environment key, position on the series' axis): the points whose
    changes are found together. Environments measured side by side (their spans on the axis overlap) go on tracks of
    their own: interleaved in one sequence, one environment's offset from the other hides a step both take. An
    environment that only follows another (it starts after the other's last point) continues that one's track, so a
    change that comes with a change of environment is still seen, labelled with it; of several it could continue, the
    one whose last environment differs from it in the fewest facts. Returns each point's track (0, 1, ...: in the
    order their first environments start)."""
    spans: dict[tuple, tuple[int, int]] = {}
    for key, position in points:
        first, last = spans.get(key, (position, position))
        spans[key] = (min(first, position), max(last, position))
    tracks: list[list[tuple]] = []
    track_of: dict[tuple, int] = {}
    for key in sorted(spans, key=lambda k: spans[k]):  # by start, then end (dicts keep first appearance for ties)
        free = [number for number, keys in enumerate(tracks) if spans[keys[-1]][1] < spans[key][0]]
        if free:
            number = min(free, key=lambda n: (len(set(tracks[n][-1]) ^ set(key)), n))
            tracks[number].append(key)
        else:
            number = len(tracks)
            tracks.append([key])
        track_of[key] = number
    return [track_of[key] for key, _ in points]


def decides_change(processes: int) -> bool:
    """Whether a point of this many quiet processes takes part in finding changes (at least MIN_REPEATS)."""
    return processes >= MIN_REPEATS


def series_noise(logs) -> float:
    """The noise of one point of a series (a log standard deviation): the median absolute deviation of consecutive
    differences (x 1.4826 / sqrt(2)), which a few steps in the series barely move; the plain standard deviation of
    the differences where half of them are equal (quantised times), and at least 1e-4."""
    diffs = np.diff(np.asarray(logs, dtype=float))
    if diffs.size == 0:
        return 1e-4
    spread = float(np.median(np.abs(diffs - np.median(diffs)))) * 1.4826 / math.sqrt(2)
    if spread == 0:
        spread = float(diffs.std()) / math.sqrt(2)
    return max(spread, 1e-4)


def change_penalty(logs, penalty: float = CHANGE_PENALTY) -> float:
    """The cost of one change for PELT on these logs: penalty x sigma x ln(points)."""
    return penalty * series_noise(logs) * math.log(len(logs))


def change_points(values: Sequence[float], *, penalty: float = CHANGE_PENALTY,
                  min_step_pct: float = CHANGE_MIN_STEP_PCT) -> list[ChangePoint]:
    """The changes of a series of positive values (ms/step per point, in order; each point one that decides_change):
    PELT on their logs (module comment), then boundaries whose step is under min_step_pct merged away, smallest
    first."""
    logs = np.log(np.asarray(values, dtype=float))
    n = logs.size
    if n < 2 * CHANGE_MIN_POINTS:
        return []
    import ruptures  # lazy: it imports scipy

    algo = ruptures.Pelt(model=CHANGE_COST, min_size=CHANGE_MIN_POINTS, jump=1).fit(logs)
    bounds = [int(end) for end in algo.predict(pen=change_penalty(logs, penalty))[:-1]]  # the last end is n
    while bounds:
        edges = [0, *bounds, n]
        centres = [float(np.median(logs[a:b])) for a, b in zip(edges, edges[1:])]
        steps = [abs(after - before) for before, after in zip(centres, centres[1:])]
        smallest = int(np.argmin(steps))
        if (math.exp(steps[smallest]) - 1) * 100 >= min_step_pct:
            return [ChangePoint(bound, math.exp(after - before), SLOWER if after > before else FASTER)
                    for bound, before, after in zip(bounds, centres, centres[1:])]
        del bounds[smallest]
    return []


# --- a watch's new points (`fwbench watch`) -----------------------------------------------------------------------
# A watch measures a package's newest release and asks whether the cell changed since the point before it. PELT
# (change_points) needs CHANGE_MIN_POINTS points after a change to see it, which a watch cannot wait for: the newest
# point is judged against the one before it by the sweep's step rule (Welch t on log repeat medians, at least
# MIN_REPEATS quiet processes a side, Holm over the cells the watch judges in one run, step_verdict), and a step it
# calls slower or faster is what the watch bisects. The sweep part of benchmarks/verdict_error_rates.py measures
# that rule's false "slower/faster" rate.


@dataclass(frozen=True)
class Step:
    """One cell's step from point A to point B: B/A of ms/step with its 95% interval, and the verdict."""

    ratio: float | None
    low: float | None
    high: float | None
    verdict: str  # EQUIVALENT, FASTER, SLOWER or INCONCLUSIVE
    detail: str

    @property
    def changed(self) -> bool:
        return self.verdict in (FASTER, SLOWER)


def steps_between(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, tolerance_pct: float,
                  alpha: float = 0.05) -> list[Step]:
    """Each pair (the quiet processes' median ms/step at A, at B) judged as a sweep step, Holm over the pairs that
    can be tested (module comment above)."""
    tests: list[LogRatioTest | None] = []
    for before, after in pairs:
        if min(len(before), len(after)) < MIN_REPEATS:
            tests.append(None)
            continue
        tests.append(log_ratio_test(np.asarray(before, dtype=float), np.asarray(after, dtype=float)))
    tested = [i for i, test in enumerate(tests) if test is not None]
    p_change = dict(zip(tested, holm([tests[i].p_two_sided() for i in tested])))
    p_equal = dict(zip(tested, holm([equivalence_p(tests[i], tolerance_pct) for i in tested])))
    found = []
    for i, ((before, after), test) in enumerate(zip(pairs, tests)):
        if test is None:
            short = min(len(before), len(after)) < MIN_REPEATS
            detail = (f"needs {MIN_REPEATS} quiet processes a side ({len(before)} and {len(after)})" if short
                      else "identical processes on both sides: no spread to test against")
            found.append(Step(None, None, None, INCONCLUSIVE, detail))
            continue
        low, high = test.interval(CONFIDENCE)
        verdict = step_verdict(test.ratio, p_change[i], p_equal[i], tolerance_pct, alpha)
        detail = step_detail(verdict, p_change[i], p_equal[i], tolerance_pct)
        found.append(Step(test.ratio, low, high, verdict, detail))
    return found
