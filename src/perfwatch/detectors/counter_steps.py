"""The clustered-counter regression check's steps, as pure functions over arrays.

After Shang, Hassan, Nasser and Flora, "Automated Detection of Performance
Regressions Using Regression Models on Clustered Performance Counters": fill gaps
and cut warm-up (``fill_missing``, ``steady_state_window``), reduce the counters
(``redundancy_analysis``, ``pairwise_redundancy``), cluster them
(``correlation_distance``, ``cluster_counters``, ``merge_singletons``), compare
distributions (``ks_statistics``) and measure prediction errors (``block_means``,
``percentage_error``).  The estimator that
chains them is ``perfwatch.detectors.counters.CounterRegressionCheck``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.cluster.hierarchy import linkage
from scipy.ndimage import median_filter
from scipy.spatial.distance import squareform

Distance = Literal["1-|rho|", "1-rho"]

__all__ = [
    "Distance",
    "RedundancyStep",
    "block_means",
    "calinski_harabasz_by_cut",
    "cluster_counters",
    "correlation_distance",
    "correlation_inverse",
    "correlation_matrix",
    "cut_dendrogram",
    "fill_missing",
    "ks_statistics",
    "merge_singletons",
    "pairwise_redundancy",
    "percentage_error",
    "percentage_error_blocks",
    "percentage_errors",
    "pooled_correlation",
    "redundancy_analysis",
    "shrink_correlation",
    "standardize",
    "steady_state_window",
    "trimmed_mean",
    "trimmed_means",
]

# Below this many observations a run is too short to look for warm-up in.
_MIN_OBSERVATIONS = 20
# Normal-consistency factor of the median absolute deviation.
_MAD_TO_SIGMA = 1.4826
# Columns per chunk in the vectorized KS statistic (bounds the sort's memory).
_KS_CHUNK = 256


def fill_missing(values: np.ndarray) -> np.ndarray:
    """Fill NaN samples by linear interpolation in time within the column (nearest value
    at the ends). A column with no sample at all stays NaN."""
    filled = np.array(values, dtype=np.float64, copy=True)
    positions = np.arange(filled.shape[0])
    for column in np.flatnonzero(np.isnan(filled).any(axis=0)):
        observed = ~np.isnan(filled[:, column])
        if observed.any():
            filled[:, column] = np.interp(positions, positions[observed], filled[observed, column])
    return filled


def steady_state_window(
    values: np.ndarray, *, z_limit: float = 2.0, max_trim_fraction: float = 0.25
) -> tuple[int, int]:
    """The [start, end) range of a run's observations after warm-up and before cool-down.

    Each counter is scored by its distance from the median of the run's middle half, in
    robust standard deviations (MAD); an observation belongs to the steady state when the
    typical (median over counters) score, smoothed by a running median, is at most
    ``z_limit``. Ramps move most load counters at once, so they stand out, while a few
    drifting or bursty counters do not. At most ``max_trim_fraction`` of the run is cut at
    each end. ``values`` must have no NaN (see fill_missing).
    """
    n = values.shape[0]
    if n < _MIN_OBSERVATIONS:
        return 0, n
    middle = values[n // 4 : n - n // 4]
    centre = np.median(middle, axis=0)
    spread = np.median(np.abs(middle - centre), axis=0) * _MAD_TO_SIGMA
    usable = spread > 0
    if not usable.any():
        return 0, n
    scores = np.abs(values[:, usable] - centre[usable]) / spread[usable]
    typical = np.median(scores, axis=1)
    width = max(3, n // 50) | 1
    smoothed = median_filter(typical, size=width, mode="nearest")
    steady = np.flatnonzero(smoothed <= z_limit)
    limit = int(max_trim_fraction * n)
    if steady.size == 0:
        return limit, n - limit
    return min(int(steady[0]), limit), max(int(steady[-1]) + 1, n - limit)


def standardize(values: np.ndarray) -> np.ndarray:
    """Columns centred and scaled to unit variance; a constant column becomes zeros."""
    centred = values - values.mean(axis=0)
    spread = centred.std(axis=0)
    return centred / np.where(spread > 0, spread, 1.0)


def correlation_matrix(values: np.ndarray) -> np.ndarray:
    """Pearson correlation between the columns (none may be constant)."""
    standardized = standardize(values)
    corr = standardized.T @ standardized / values.shape[0]
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def pooled_correlation(
    counts: Sequence[int], means: Sequence[np.ndarray], scatters: Sequence[np.ndarray]
) -> np.ndarray:
    """``correlation_matrix`` of parts stacked on each other (the runs of a baseline), from
    each part's number of rows, column means and centred cross-product matrix
    (X - m)'(X - m): the parallel-axis combination, so parts shared by several stacks (the
    folds of a leave-one-run-out) are multiplied out once. Only the sum of ``scatters``
    matters: it may be given already summed, as a single matrix."""
    total = sum(counts)
    mean = sum(n * m for n, m in zip(counts, means, strict=True)) / total
    scatter = sum(scatters)
    for n, m in zip(counts, means, strict=True):
        offset = m - mean
        scatter = scatter + n * np.outer(offset, offset)
    spread = np.sqrt(np.diag(scatter))
    corr = scatter / np.outer(spread, spread)
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def shrink_correlation(correlation: np.ndarray, amount: float) -> np.ndarray:
    """(1 - amount) C + amount I: the correlation matrix shrunk towards the identity."""
    shrunk = (1.0 - amount) * correlation
    shrunk[np.diag_indices_from(shrunk)] = 1.0
    return shrunk


def correlation_inverse(correlation: np.ndarray) -> np.ndarray:
    """The inverse of a correlation matrix, made exactly symmetric."""
    inverse = np.linalg.inv(correlation)
    return (inverse + inverse.T) / 2


@dataclass(frozen=True, eq=False)
class RedundancyStep:
    """One removal of the redundancy analysis: the counter index (into the matrix given),
    its R^2 on the counters still present (``predictors``, indices into the matrix), and
    its standardized regression coefficients on them (``betas``, in the same order)."""

    index: int
    r_squared: float
    predictors: np.ndarray
    betas: np.ndarray

    @property
    def coefficients(self) -> dict[int, float]:
        """index -> beta."""
        return dict(zip(self.predictors.tolist(), self.betas.tolist(), strict=True))


def redundancy_analysis(
    correlation: np.ndarray,
    r2_threshold: float,
    *,
    observations: int | None = None,
    keep: Iterable[int] = (),
    block: int = 64,
    inverse: np.ndarray | None = None,
) -> list[RedundancyStep]:
    """Repeatedly remove the counter with the highest R^2 on all the others while that R^2
    exceeds ``r2_threshold``; counters in ``keep`` are never removed. With
    ``observations`` the R^2 is adjusted for the number of predictors (n observations,
    p predictors: 1 - (1 - R^2)(n - 1)/(n - p - 1)).

    R^2_i = 1 - 1/(C^-1)_ii for a correlation matrix C, and removing counter j turns the
    inverse of C into that of C without row and column j by a rank-one downdate,
    P - P[:, j] P[j, :] / P_jj. The downdates are accumulated and applied in blocks (one
    matrix product per ``block`` removals), so thousands of counters cost a few matrix
    products instead of a regression per counter per removal. Ties go to the lower index.
    ``inverse``: ``correlation_inverse(correlation)`` when already known (not modified).
    """
    size = correlation.shape[0]
    inverse = correlation_inverse(correlation) if inverse is None else inverse.copy()
    diagonal = np.diag(inverse).copy()
    rows = np.arange(size)  # original index of each row of `inverse`, compacted as we go
    present = np.ones(size, dtype=bool)
    removable = np.ones(size, dtype=bool)
    removable[list(keep)] = False
    pending = np.empty((size, block))
    pending_scale = np.empty(block)
    pending_count = 0
    steps: list[RedundancyStep] = []
    while True:
        candidates = np.flatnonzero(present & removable)
        remaining = int(present.sum())
        if candidates.size == 0 or remaining < 2:
            return steps
        r2 = 1.0 - 1.0 / diagonal[candidates]
        if observations is not None:
            predictors = remaining - 1
            if observations - predictors - 1 <= 0:
                raise ValueError(
                    f"adjusted R^2 needs more observations ({observations}) than counters "
                    f"({remaining})"
                )
            r2 = 1.0 - (1.0 - r2) * (observations - 1) / (observations - predictors - 1)
        best = int(np.argmax(r2))
        if r2[best] <= r2_threshold:
            return steps
        victim = int(candidates[best])
        # the victim's current inverse column: stored column minus the pending downdates
        column = inverse[:, victim] - pending[:, :pending_count] @ (
            pending[victim, :pending_count] * pending_scale[:pending_count]
        )
        pivot = column[victim]
        others = np.flatnonzero(present)
        others = others[others != victim]
        steps.append(
            RedundancyStep(
                index=int(rows[victim]),
                r_squared=float(r2[best]),
                # arrays, not a Python pair per counter per removal
                predictors=rows[others],
                betas=-column[others] / pivot,
            )
        )
        pending[:, pending_count] = column
        pending_scale[pending_count] = 1.0 / pivot
        pending_count += 1
        diagonal -= column**2 / pivot
        present[victim] = False
        if pending_count == block:
            inverse -= (pending * pending_scale) @ pending.T
            pending_count = 0
            if present.sum() < 0.75 * present.size:
                # drop removed rows and columns so later products get cheaper
                alive = np.flatnonzero(present)
                inverse = inverse[np.ix_(alive, alive)]
                diagonal, rows, removable = diagonal[alive], rows[alive], removable[alive]
                present = np.ones(alive.size, dtype=bool)
                pending = np.empty((alive.size, block))


def pairwise_redundancy(correlation: np.ndarray, r2_threshold: float) -> list[tuple[int, int]]:
    """Counters that one other counter alone predicts with R^2 (= rho^2) above the
    threshold, as (removed, the counter that predicts it): pairs are taken from the
    strongest down, and of a pair whose two counters are both still present the one
    with the higher index goes. Each removal is one the full redundancy analysis would
    also make, since R^2 on all others is at least R^2 on one of them."""
    upper = np.triu(correlation**2, k=1)
    rows, columns = np.nonzero(upper > r2_threshold)
    order = np.lexsort((columns, rows, -upper[rows, columns]))
    present = np.ones(correlation.shape[0], dtype=bool)
    removed = []
    for row, column in zip(rows[order], columns[order], strict=True):
        if present[row] and present[column]:
            present[column] = False
            removed.append((int(column), int(row)))
    return removed


def correlation_distance(correlation: np.ndarray, kind: Distance = "1-|rho|") -> np.ndarray:
    """Pearson distance between counters: 1 - |rho| (inversely correlated counters are
    close) or 1 - rho."""
    if kind == "1-|rho|":
        distance = 1.0 - np.abs(correlation)
    elif kind == "1-rho":
        distance = 1.0 - correlation
    else:
        raise ValueError(f"distance must be '1-|rho|' or '1-rho', not {kind!r}")
    distance = np.clip((distance + distance.T) / 2, 0.0, None)
    np.fill_diagonal(distance, 0.0)
    return distance


def calinski_harabasz_by_cut(merges: np.ndarray) -> np.ndarray:
    """Calinski-Harabasz index of every cut of an average-linkage dendrogram.

    ``merges`` is scipy's linkage matrix over n counters; entry k of the result is the
    index of the cut into k clusters (NaN for k < 2 and k = n, where it is undefined).
    The distances are treated as squared Euclidean distances, which 1 - rho is up to a
    factor 2 (between counters standardized to unit length); the within-cluster sum of
    squares of a cluster C is then sum_{i<j in C} d_ij / |C|. An average-linkage merge
    height is the mean distance between the two clusters merged, so each merge updates
    the within sums in O(1) and all n cuts cost O(n).
    """
    n = merges.shape[0] + 1
    pair_sum = np.zeros(2 * n - 1)  # sum over unordered pairs inside each dendrogram node
    count = np.ones(2 * n - 1)
    within = 0.0  # within-cluster sum of squares of the current cut
    within_by_k = np.full(n + 1, np.nan)
    within_by_k[n] = 0.0
    for step, (left, right, height, size) in enumerate(merges):
        left, right, node = int(left), int(right), n + step
        count[node] = size
        pair_sum[node] = pair_sum[left] + pair_sum[right] + height * count[left] * count[right]
        within += (
            pair_sum[node] / count[node]
            - pair_sum[left] / count[left]
            - pair_sum[right] / count[right]
        )
        within_by_k[n - step - 1] = within
    total = within_by_k[1]
    scores = np.full(n + 1, np.nan)
    for k in range(2, n):
        between = max(total - within_by_k[k], 0.0)
        if within_by_k[k] <= 0.0:
            scores[k] = math.inf if between > 0 else math.nan
        else:
            scores[k] = (between / (k - 1)) / (within_by_k[k] / (n - k))
    return scores


def cut_dendrogram(merges: np.ndarray, clusters: int) -> np.ndarray:
    """Cluster label (0..clusters-1, in order of first member) of each of the n leaves
    after the first n - clusters merges."""
    n = merges.shape[0] + 1
    groups: dict[int, list[int]] = {leaf: [leaf] for leaf in range(n)}
    for step in range(n - clusters):
        left, right = int(merges[step, 0]), int(merges[step, 1])
        groups[n + step] = groups.pop(left) + groups.pop(right)
    labels = np.empty(n, dtype=int)
    for label, members in enumerate(sorted(groups.values(), key=min)):
        labels[members] = label
    return labels


def cluster_counters(
    distance: np.ndarray, max_clusters: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Average-linkage clustering cut where Calinski-Harabasz peaks among 2 to
    ``max_clusters`` clusters (default: half the counters): (labels, CH by k). Two
    counters or fewer form one cluster (the index needs 2 <= k < n)."""
    n = distance.shape[0]
    if n <= 2:
        return np.zeros(n, dtype=int), np.full(n + 1, np.nan)
    merges = linkage(squareform(distance, checks=False), method="average")
    scores = calinski_harabasz_by_cut(merges)
    allowed = scores[: max(2, max_clusters or n // 2) + 1]
    if np.isnan(allowed).all():
        return np.zeros(n, dtype=int), scores
    return cut_dendrogram(merges, int(np.nanargmax(allowed))), scores


def merge_singletons(labels: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """Each lone counter joins the cluster at the smallest mean distance from it, which
    may be another lone counter (lone counters nearest to each other end up together).
    Labels renumbered in order of first member."""
    sizes = np.bincount(labels)
    lone = np.flatnonzero(sizes[labels] == 1)
    parent = np.arange(sizes.size)
    if lone.size and sizes.size > 1:
        membership = (labels[:, None] == np.arange(sizes.size)[None, :]).astype(np.float64)
        means = distance[lone] @ membership / sizes
        means[np.arange(lone.size), labels[lone]] = np.inf  # not its own cluster
        for cluster, nearest in zip(labels[lone], np.argmin(means, axis=1), strict=True):
            parent[_root(parent, cluster)] = _root(parent, int(nearest))
    roots = np.array([_root(parent, label) for label in labels])
    _, first, inverse = np.unique(roots, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


def _root(parent: np.ndarray, node: int) -> int:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = int(parent[node])
    return int(node)


def ks_statistics(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two-sample Kolmogorov-Smirnov statistic of every column, NaN samples left out
    (equal to scipy.stats.ks_2samp(...).statistic column by column)."""
    result = np.empty(first.shape[1])
    for start in range(0, first.shape[1], _KS_CHUNK):
        chunk = slice(start, start + _KS_CHUNK)
        both = np.vstack([first[:, chunk], second[:, chunk]])
        order = np.argsort(both, axis=0, kind="stable")
        ordered = np.take_along_axis(both, order, axis=0)
        observed = ~np.isnan(ordered)
        from_first = (order < first.shape[0]) & observed
        from_second = (order >= first.shape[0]) & observed
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = np.cumsum(from_first, axis=0) / from_first.sum(axis=0) - np.cumsum(
                from_second, axis=0
            ) / from_second.sum(axis=0)
        # the empirical CDFs are compared after the last of equal values
        last_of_ties = np.ones(ordered.shape, dtype=bool)
        last_of_ties[:-1] = ordered[1:] != ordered[:-1]
        result[chunk] = np.nanmax(np.where(last_of_ties, np.abs(gap), 0.0), axis=0)
    return result


def block_means(values: np.ndarray, window: int) -> np.ndarray:
    """Means of consecutive blocks of ``window`` rows (the last block may be shorter),
    NaN samples left out; NaN for a block with no sample. 1-D or 2-D input."""
    if window <= 1:
        return np.asarray(values, dtype=np.float64)
    starts = np.arange(0, values.shape[0], window)
    present = ~np.isnan(values)
    totals = np.add.reduceat(np.where(present, values, 0.0), starts, axis=0)
    counts = np.add.reduceat(present, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, totals / counts, np.nan)


def percentage_errors(actual: np.ndarray, predicted: np.ndarray, floor: float) -> np.ndarray:
    """Absolute percentage errors, each denominator max(|actual|, floor).

    NaN in ``actual`` marks a value that was not observed: left out. With ``floor`` > 0 a
    value near zero is measured against the floor instead of dividing by (almost)
    nothing. With ``floor`` = 0 values equal to zero are left out.
    """
    errors = percentage_error_blocks(actual, predicted, np.array(floor))
    return errors[~np.isnan(errors)]


def percentage_error_blocks(
    actual: np.ndarray, predicted: np.ndarray, floor: np.ndarray
) -> np.ndarray:
    """``percentage_errors`` in place: NaN for a value left out, nothing removed, so
    arrays of many models and runs keep their shape (``floor`` broadcasts against them,
    one per model)."""
    magnitude = np.abs(actual)
    with np.errstate(invalid="ignore", divide="ignore"):
        errors = np.abs(actual - predicted) / np.maximum(magnitude, floor)
    return np.where((floor <= 0) & (magnitude == 0), np.nan, errors)


def trimmed_mean(errors: np.ndarray, trim: float = 0.0) -> float:
    """Mean without the largest floor(trim x count) values (a trimmed mean of the worst
    side only); NaN for no values."""
    return float(trimmed_means(np.asarray(errors, dtype=np.float64)[:, None], trim)[0])


def trimmed_means(errors: np.ndarray, trim: float) -> np.ndarray:
    """Per column: the mean without its largest floor(trim x count) values, NaN values
    left out (NaN for a column without values); ``trimmed_mean`` of
    every column at once."""
    count = (~np.isnan(errors)).sum(axis=0)
    kept = count - (trim * count).astype(np.int64)
    ordered = np.sort(errors, axis=0)  # NaN last
    inside = np.arange(errors.shape[0])[:, None] < kept
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inside, ordered, 0.0).sum(axis=0) / np.where(kept > 0, kept, np.nan)


def percentage_error(
    actual: np.ndarray, predicted: np.ndarray, floor: float, trim: float = 0.0
) -> float:
    """Mean absolute percentage error (``percentage_errors``), trimmed of the largest
    ``trim`` share (``trimmed_mean``). NaN when nothing is left."""
    return trimmed_mean(percentage_errors(actual, predicted, floor), trim)
