"""The clustered-counter check's decision rule: is a model's prediction error on a run
larger than its errors on good runs, given how much those vary within a run (block to
block) and between runs?

A model's error on a run is a trimmed mean of its block errors. Its sampling variance
within the run comes from the blocks' spread and their lag-1 autocorrelation
(``trimmed_mean_variance``); the variation between good runs from the model's errors
on each good run held out of its fit. ``excess_error_test`` turns both into a z and a
one-sided p-value (Student t, Satterthwaite degrees of freedom: the between-run part is
estimated from only the good runs there are). ``familywise`` corrects the smallest p of
a run for the number of models that were judged (Bonferroni: the run's score is a
maximum over them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

# Lag-1 autocorrelation of block errors is clipped here: beyond it the AR(1) inflation
# of the variance (1 + rho) / (1 - rho) rests on too few blocks to be trusted.
_MAX_AUTOCORRELATION = 0.8
# The fewest blocks whose spread says anything about a run's sampling variance.
_MIN_BLOCKS = 3
# tail_inflation: the quantile compared, and the fewest null p-values it is taken from
_TAIL_QUANTILE = 0.9
_MIN_NULL = 10


def trimmed_mean_variance(errors: np.ndarray, trim: float) -> float:
    """Sampling variance of the mean of ``errors`` without its largest ``trim`` share
    (``trimmed_mean``): the winsorized variance over the kept share squared, per block,
    inflated for the blocks' lag-1 autocorrelation (an AR(1) approximation). NaN for
    fewer than three blocks."""
    return _variance_and_blocks(errors, trim)[0]


def effective_blocks(errors: np.ndarray, trim: float) -> float:
    """How many independent blocks the autocorrelated ``errors`` are worth:
    n (1 - rho) / (1 + rho)."""
    return _variance_and_blocks(errors, trim)[1]


def _variance_and_blocks(errors: np.ndarray, trim: float) -> tuple[float, float]:
    count = errors.size
    if count < _MIN_BLOCKS:
        return math.nan, float(count)
    kept = count - int(trim * count)
    winsorized = np.minimum(errors, np.partition(errors, kept - 1)[kept - 1])
    centred = winsorized - winsorized.mean()
    total = float(centred @ centred)
    if total == 0.0:
        return 0.0, float(count)
    rho = float(np.clip(centred[:-1] @ centred[1:] / total, 0.0, _MAX_AUTOCORRELATION))
    variance = total / (count - 1)
    inflation = (1 + rho) / (1 - rho)
    return variance / (count * (kept / count) ** 2) * inflation, count / inflation


@dataclass(frozen=True)
class ErrorTest:
    """How unusual one model's error on a run is."""

    z: float  # (error - mean good-run error) / standard error of the difference
    pvalue: float  # one-sided; NaN without two good runs
    df: float  # degrees of freedom of the t distribution behind pvalue


def excess_error_test(
    error: float,
    error_variance: float,
    good_errors: Sequence[float],
    good_variances: Sequence[float],
    error_blocks: float = math.inf,
) -> ErrorTest:
    """Test one model's error on a run against its errors on k held-out good runs.

    Under no regression the run's error is one more draw of the good runs' errors, so
    error - mean(good) has variance v (1 + 1/k), with v the good runs' error variance
    (sample variance, k - 1 degrees of freedom, at least their mean within-run
    variance), plus whatever the run's own blocks add beyond the good runs' (a noisier
    run's error wanders more). Degrees of freedom by Satterthwaite: k - 1 for v, and for
    the run's own part its effective number of blocks (``effective_blocks``) less one,
    but no more than k - 1: the block variance of autocorrelated errors is known no better
    than the good runs' (with more, good runs with a disturbance of their own raised false
    alarms). With one good run v cannot be estimated: z uses the within-run variances
    alone and the p-value is NaN.
    """
    k = len(good_errors)
    within = float(np.nanmean(good_variances)) if k else math.nan
    own = error_variance if math.isfinite(error_variance) else within
    if k == 0 or not math.isfinite(error):
        return ErrorTest(math.nan, math.nan, math.nan)
    centre = float(np.mean(good_errors))
    if k < 2:
        spread = math.sqrt(max(own, 0.0) + max(within, 0.0))
        z = (error - centre) / spread if spread > 0 else math.nan
        return ErrorTest(z, math.nan, math.nan)
    between = max(float(np.var(good_errors, ddof=1)), within if math.isfinite(within) else 0.0)
    estimated = between * (1 + 1 / k)
    extra = max(own - within, 0.0) if math.isfinite(within) else 0.0
    variance = estimated + extra
    if variance <= 0:
        return ErrorTest(math.inf if error > centre else 0.0, 0.0 if error > centre else 1.0, 0.0)
    z = (error - centre) / math.sqrt(variance)
    own_df = min(max(error_blocks - 1, 1.0), k - 1)
    df = variance**2 / (estimated**2 / (k - 1) + extra**2 / own_df)
    return ErrorTest(z, float(student_t.sf(z, df)), df)


def tail_inflation(null_pvalues: Sequence[float]) -> float:
    """How much heavier than assumed the tail of good runs' errors is: the upper
    ``_TAIL_QUANTILE`` quantile of the normal scores of p-values that good runs got,
    each checked against the other good runs, over the normal quantile it should be
    (at least 1; 1 with fewer than ``_MIN_NULL`` p-values). A genomic-control-style
    factor, taken at the tail because it is the tail that makes false alarms."""
    scores = [pvalue_to_z(p) for p in null_pvalues if math.isfinite(p)]
    scores = [z for z in scores if math.isfinite(z)]
    if len(scores) < _MIN_NULL:
        return 1.0
    observed = float(np.quantile(scores, _TAIL_QUANTILE))
    return max(1.0, observed / float(norm.isf(1 - _TAIL_QUANTILE)))


def deflate(pvalue: float, inflation: float) -> float:
    """A p-value whose normal score is divided by ``inflation``."""
    if not math.isfinite(pvalue) or inflation == 1.0:
        return pvalue
    return float(norm.sf(pvalue_to_z(pvalue) / inflation))


def familywise(pvalues: Sequence[float], tests: int) -> float:
    """Bonferroni: the smallest p-value times the number of tests, at most 1."""
    finite = [p for p in pvalues if math.isfinite(p)]
    if not finite or tests < 1:
        return math.nan
    return min(1.0, min(finite) * tests)


def pvalue_to_z(pvalue: float) -> float:
    """The standard normal quantile with this upper-tail probability (inf for 0)."""
    if not math.isfinite(pvalue):
        return math.nan
    return float(norm.isf(pvalue))
