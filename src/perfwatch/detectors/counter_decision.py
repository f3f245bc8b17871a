"""The clustered-counter check's decision rule: is a model's prediction error on a run
larger than its errors on good runs, given how much those vary within a run (block to
block) and between runs?

A model's error on a run is a trimmed mean of its block errors. Its sampling variance
within the run comes from the blocks' spread and their lag-1 autocorrelation
(``error_statistics``); the variation between good runs from the model's errors
on each good run held out of its fit. ``excess_error_tests`` turns both into a z and a
one-sided p-value (Student t, Satterthwaite degrees of freedom: the between-run part is
estimated from only the good runs there are). ``familywise`` corrects the smallest p of
a run for the number of models that were judged (Bonferroni: the run's score is a
maximum over them). Optionally the between-run variances of all models of a check are
moderated toward a common prior (``variance_prior``, an empirical Bayes moderated t),
which lends each model the degrees of freedom of the others. Optionally the statistic
tested is not the error but the share of a run's blocks beyond the good runs' usual block
errors (``block_exceedances``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, polygamma
from scipy.stats import norm
from scipy.stats import t as student_t

from perfwatch.detectors.counter_steps import trimmed_means

# Lag-1 autocorrelation of block errors is clipped here: beyond it the AR(1) inflation
# of the variance (1 + rho) / (1 - rho) rests on too few blocks to be trusted.
_MAX_AUTOCORRELATION = 0.8
# The fewest blocks whose spread says anything about a run's sampling variance.
_MIN_BLOCKS = 3
# Block errors within this relative difference of each other count as equal.
_EQUAL = 1e-12
# tail_inflation: the quantile compared, and the fewest null p-values it is taken from
_TAIL_QUANTILE = 0.9
_MIN_NULL = 10
# variance_prior: the fewest models it is fitted to
_MIN_PRIOR_MODELS = 10


def block_exceedances(blocks: np.ndarray, level: float) -> np.ndarray:
    """Which blocks lie beyond the good runs' usual block errors. ``blocks`` is blocks x
    runs x models (run 0 the target, the others good runs held out of the fit in turn;
    NaN: a block not scored). Per model, each block is compared with the ``level``
    quantile (the smallest value with at least that share of values at or below it) of
    the block errors of the good runs other than its own run (of every good run for the
    target; of itself with only one): 1.0 beyond it, 0.0 not, NaN where not scored. The
    mean of a run's exceedances is about 1 - ``level`` on a good run whatever the errors'
    scale, and rises when the relationship breaks in a share of the blocks even if the
    mean error hardly moves."""
    _, runs, models = blocks.shape
    good = blocks[:, 1:, :]
    exceeds = np.full(blocks.shape, np.nan)
    for run in range(runs):
        others = [g for g in range(runs - 1) if g != run - 1] or [0]
        reference = np.sort(good[:, others, :].reshape(-1, models), axis=0)  # NaN last
        count = (~np.isnan(reference)).sum(axis=0)
        rank = np.clip(np.ceil(level * count).astype(np.int64) - 1, 0, None)
        limit = np.take_along_axis(reference, rank[None, :], axis=0)[0]
        limit = np.where(count > 0, limit, np.nan)
        column = blocks[:, run, :]
        with np.errstate(invalid="ignore"):
            exceeds[:, run, :] = np.where(
                np.isnan(column) | np.isnan(limit), np.nan, (column > limit).astype(np.float64)
            )
    return exceeds


def error_statistics(errors: np.ndarray, trim: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``errors`` (blocks x models, in time order; NaN: a block not scored,
    left out as if absent): the trimmed mean (``trimmed_means``); its sampling variance,
    the winsorized variance over the kept share squared, per block, inflated for the
    blocks' lag-1 autocorrelation rho (an AR(1) approximation; NaN for fewer than three
    blocks); and how many independent blocks the errors are worth, n (1 - rho) / (1 + rho).
    Every model of a run in one pass of array operations."""
    present = ~np.isnan(errors)
    count = present.sum(axis=0)
    kept = count - (trim * count).astype(np.int64)
    means = trimmed_means(errors, trim)
    # the scored blocks of each column moved to its top, in time order
    rank = np.arange(errors.shape[0])[:, None]
    scored = np.take_along_axis(errors, np.argsort(~present, axis=0, kind="stable"), axis=0)
    valid = rank < count
    cutoff = np.take_along_axis(np.sort(errors, axis=0), np.maximum(kept - 1, 0)[None, :], 0)
    winsorized = np.where(valid, np.minimum(scored, cutoff), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        centred = np.where(valid, winsorized - winsorized.sum(axis=0) / count, 0.0)
        total = np.einsum("ij,ij->j", centred, centred)
        # invalid rows are zero, so the product across the last scored block adds nothing
        lag = np.einsum("ij,ij->j", centred[:-1], centred[1:])
        rho = np.clip(lag / total, 0.0, _MAX_AUTOCORRELATION)
        inflation = (1 + rho) / (1 - rho)
        variance = total / (count - 1) / (count * (kept / count) ** 2) * inflation
        blocks = count / inflation
    # blocks equal to float precision: no spread (rounding in the mean is no variance)
    steady = total <= count * (_EQUAL * np.abs(winsorized).max(axis=0, initial=0.0)) ** 2
    variance = np.where(steady, 0.0, variance)
    blocks = np.where(steady, count, blocks).astype(np.float64)
    few = count < _MIN_BLOCKS
    return means, np.where(few, np.nan, variance), np.where(few, count, blocks)


def excess_error_tests(
    error: np.ndarray,
    error_variance: np.ndarray,
    good_errors: np.ndarray,
    good_variances: np.ndarray,
    error_blocks: np.ndarray,
    prior: VariancePrior | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test each model's error on a run against its errors on k held-out good runs: z,
    one-sided p-value and degrees of freedom per model.

    Under no regression the run's error is one more draw of the good runs' errors, so
    error - mean(good) has variance v (1 + 1/k), with v the good runs' error variance
    (sample variance, k - 1 degrees of freedom, at least their mean within-run
    variance), plus whatever the run's own blocks add beyond the good runs' (a noisier
    run's error wanders more). Degrees of freedom by Satterthwaite: k - 1 for v, and for
    the run's own part its effective number of blocks (``error_blocks``) less one, but no
    more than k - 1: the block variance of autocorrelated errors is known no better than
    the good runs' (with more, good runs with a disturbance of their own raised false
    alarms). With one good run v cannot be estimated: there is no spread to judge the
    error against, so z and the p-value are NaN (a z from the within-run variances alone
    would look like evidence, and be in the hundreds for any model that misses a little).

    ``good_errors`` and ``good_variances`` are models x good runs; a NaN good error marks
    a run that did not score the model (left out, so k varies by model). With a ``prior``
    (``variance_prior``) each model's between-run variance is moderated
    (``moderated_ratio``) and counts ``prior.df`` more degrees of freedom."""
    good = np.isfinite(good_errors)
    k = good.sum(axis=1)
    centre, sample_variance, within = _good_run_spread(good_errors, good_variances)
    with np.errstate(invalid="ignore", divide="ignore"):
        own = np.where(np.isfinite(error_variance), error_variance, within)
        known = np.isfinite(within)
        estimated_df = (k - 1).astype(np.float64)
        if prior is not None and prior.df > 0:
            moderated = moderated_ratio(sample_variance / within, k - 1, prior) * within
            shrunk = known & (within > 0) & np.isfinite(moderated)
            sample_variance = np.where(shrunk, moderated, sample_variance)
            estimated_df = np.where(shrunk, estimated_df + prior.df, estimated_df)
        between = np.maximum(sample_variance, np.where(known, within, 0.0))
        estimated = between * (1 + 1 / k)
        extra = np.where(known, np.maximum(own - within, 0.0), 0.0)
        variance = estimated + extra
        above = error > centre
        z = (error - centre) / np.sqrt(variance)
        own_df = np.minimum(np.maximum(error_blocks - 1, 1.0), k - 1)
        df = variance**2 / (estimated**2 / estimated_df + extra**2 / own_df)
    degenerate = variance <= 0
    z = np.where(degenerate, np.where(above, math.inf, 0.0), z)
    df = np.where(degenerate, 0.0, df)
    tested = (k >= 2) & ~degenerate & np.isfinite(error)
    pvalue = np.full(error.shape, np.nan)
    pvalue[tested] = student_t.sf(z[tested], df[tested])
    pvalue = np.where(degenerate, np.where(above, 0.0, 1.0), pvalue)
    untestable = (k < 2) | ~np.isfinite(error)
    z = np.where(untestable, np.nan, z)
    pvalue = np.where(untestable, np.nan, pvalue)
    df = np.where(untestable, np.nan, df)
    return z, pvalue, df


def _good_run_spread(
    good_errors: np.ndarray, good_variances: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per model (row): the mean of its finite good-run errors, their sample variance
    and the mean within-run variance of those runs (NaN where none is known)."""
    good = np.isfinite(good_errors)
    k = good.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        variances = np.where(good, good_variances, np.nan)
        counted = (good & ~np.isnan(variances)).sum(axis=1)
        within = np.where(good, np.nan_to_num(variances), 0.0).sum(axis=1) / counted
        within = np.where(counted > 0, within, np.nan)
        centre = np.where(good, good_errors, 0.0).sum(axis=1) / k
        deviations = np.where(good, good_errors - centre[:, None], 0.0)
        sample_variance = np.einsum("ij,ij->i", deviations, deviations) / (k - 1)
    return centre, sample_variance, within


@dataclass(frozen=True)
class VariancePrior:
    """The distribution of the models' between-run over within-run variance ratios:
    ratio x chi-square(df) / df, as in an empirical Bayes moderated t."""

    df: float  # prior degrees of freedom d0 (0: no information, inf: one common ratio)
    ratio: float  # prior ratio s0²


def variance_prior(good_errors: np.ndarray, good_variances: np.ndarray) -> VariancePrior:
    """Fit ``VariancePrior`` to the models (rows of good-run errors and their within-run
    variances, as for ``excess_error_tests``) by the method of moments of Smyth (2004,
    limma's moderated t) on the log ratios: each model's ratio r of sample variance
    (k - 1 degrees of freedom) to mean within-run variance is taken to be s0² times a
    chi-square(d0) / d0 variable times a chi-square(k - 1) / (k - 1) one; the log ratios'
    mean and variance (less what k - 1 degrees of freedom contribute) give s0² and d0.
    No information (d0 = 0) with fewer than ``_MIN_PRIOR_MODELS`` models of three or
    more good runs."""
    _, sample_variance, within = _good_run_spread(good_errors, good_variances)
    df = np.isfinite(good_errors).sum(axis=1) - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = sample_variance / within
    usable = (df >= 2) & (within > 0) & np.isfinite(ratio) & (ratio > 0)
    if usable.sum() < _MIN_PRIOR_MODELS:
        return VariancePrior(0.0, math.nan)
    half = df[usable] / 2
    adjusted = np.log(ratio[usable]) - digamma(half) + np.log(half)
    centre = float(np.mean(adjusted))
    excess = float(np.var(adjusted, ddof=1) - np.mean(polygamma(1, half)))
    if excess <= 0:
        return VariancePrior(math.inf, math.exp(centre))
    d0 = 2 * _trigamma_inverse(excess)
    return VariancePrior(d0, math.exp(centre + digamma(d0 / 2) - math.log(d0 / 2)))


def moderated_ratio(ratio: np.ndarray, df: np.ndarray, prior: VariancePrior) -> np.ndarray:
    """The posterior variance ratio of each model: (d0 s0² + d r) / (d0 + d), its
    own ratio r (d degrees of freedom) shrunk toward the prior's s0²."""
    if math.isinf(prior.df):
        return np.full(np.shape(ratio), prior.ratio)
    return (prior.df * prior.ratio + df * ratio) / (prior.df + df)


def _trigamma_inverse(value: float) -> float:
    """y with trigamma(y) = value, by Newton's method from 0.5 + 1 / value (Smyth 2004)."""
    if value > 1e7:
        return 1 / math.sqrt(value)
    if value < 1e-6:
        return 1 / value
    y = 0.5 + 1 / value
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1 - tri / value) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def tail_inflation(null_pvalues: Sequence[float]) -> float:
    """How much heavier than assumed the tail of good runs' errors is: the upper
    ``_TAIL_QUANTILE`` quantile of the normal scores of p-values that good runs got,
    each checked against the other good runs, over the normal quantile it should be
    (at least 1; 1 with fewer than ``_MIN_NULL`` p-values). A genomic-control-style
    factor, taken at the tail because it is the tail that makes false alarms."""
    pvalues = np.asarray(null_pvalues, dtype=np.float64)
    scores = norm.isf(pvalues[np.isfinite(pvalues)])  # pvalue_to_z of each, in one call
    scores = scores[np.isfinite(scores)]
    if scores.size < _MIN_NULL:
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
