"""Median ms/step and its 95% confidence interval from per-step samples and repeats.

CI method: two-level percentile bootstrap (resample repeats with replacement, then steps within each
chosen repeat, take the median of the pooled resample). Resampling repeats first keeps
process-to-process variation (the larger one on shared machines) in the interval; with a single repeat
the interval only covers step-to-step noise, and the report says so. Seeded, so reports are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240403  # fixed: the same results give the same report
CI_METHOD = (f"two-level percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples: repeats, then steps "
             f"within each repeat), {CONFIDENCE:.0%} interval of the median")


@dataclass(frozen=True)
class Estimate:
    median: float
    low: float
    high: float
    repeats: int
    steps: int  # samples pooled over all repeats

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def median(values) -> float:
    """fwbench's one median (the mean of the two middle values for an even count): the report, compare
    and `fwbench run`'s summary all use this."""
    return float(np.median(np.asarray(values, dtype=float)))


def repeat_samples(step_ms, ms_per_step: float) -> np.ndarray:
    """Per-step samples of one repeat; the window mean stands in when per-step times were not kept."""
    if step_ms is not None and len(step_ms) > 0:
        samples = np.asarray(step_ms, dtype=float)
        samples = samples[np.isfinite(samples)]
        if samples.size:
            return samples
    return np.asarray([ms_per_step], dtype=float)


def estimate(repeats: list[np.ndarray], resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> Estimate:
    """Median of the pooled samples with a two-level bootstrap CI (see module doc)."""
    repeats = _non_empty(repeats)
    pooled = np.concatenate(repeats)
    centre = median(pooled)
    if pooled.size == 1:
        return Estimate(centre, centre, centre, len(repeats), 1)
    medians = bootstrap_medians(repeats, resamples, seed)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return Estimate(centre, float(low), float(high), len(repeats), int(pooled.size))


def _non_empty(repeats) -> list[np.ndarray]:
    repeats = [np.asarray(r, dtype=float) for r in repeats if len(r)]
    if not repeats:
        raise ValueError("no samples")
    return repeats


def bootstrap_medians(repeats: list[np.ndarray], resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """The medians of `resamples` two-level bootstrap resamples (repeats, then steps within each repeat)."""
    repeats = _non_empty(repeats)
    rng = np.random.default_rng(seed)
    counts = np.array([r.size for r in repeats])
    width = counts.max()
    padded = np.full((len(repeats), width), np.nan)
    for i, r in enumerate(repeats):
        padded[i, : r.size] = r
    chosen = rng.integers(len(repeats), size=(resamples, len(repeats)))  # which repeats
    steps = np.floor(rng.random((resamples, len(repeats), width)) * counts[chosen][..., None]).astype(int)
    mask = np.arange(width)[None, None, :] < counts[chosen][..., None]  # each repeat keeps its own size
    draws = np.where(mask, padded[chosen[..., None], steps], np.nan)
    return np.nanmedian(draws.reshape(resamples, -1), axis=1)


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float  # median of the numerator's samples / median of the denominator's
    low: float
    high: float


def ratio_estimate(numerator: list[np.ndarray], denominator: list[np.ndarray],
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> RatioEstimate:
    """A ratio of two cells' medians with the same two-level bootstrap: each side resampled on its own (the
    cells are independent measurements), the interval the percentiles of the resampled medians' ratios."""
    numerator, denominator = _non_empty(numerator), _non_empty(denominator)
    ratio = median(np.concatenate(numerator)) / median(np.concatenate(denominator))
    ratios = (bootstrap_medians(numerator, resamples, seed) / bootstrap_medians(denominator, resamples, seed + 1))
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return RatioEstimate(float(ratio), float(low), float(high))


def fmt_ms(value: float) -> str:
    """How the report writes a millisecond value (4 significant digits, one decimal from 100 ms)."""
    return f"{value:.4g}" if value < 100 else f"{value:.1f}"


def fmt_estimate(est: Estimate) -> str:
    """'median [low–high]': how the report's tables write an estimate."""
    return f"{fmt_ms(est.median)} [{fmt_ms(est.low)}–{fmt_ms(est.high)}]"
