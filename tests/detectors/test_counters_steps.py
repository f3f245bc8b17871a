"""Each step of the clustered-counter check against hand-computed cases and the library
results it must equal (statsmodels OLS, scipy KS, sklearn Calinski-Harabasz)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform
from scipy.stats import ks_2samp
from sklearn.metrics import calinski_harabasz_score

from perfwatch.detectors.counter_steps import (
    block_means,
    calinski_harabasz_by_cut,
    cluster_counters,
    correlation_distance,
    correlation_matrix,
    cut_dendrogram,
    fill_missing,
    ks_statistics,
    merge_singletons,
    percentage_error,
    redundancy_analysis,
    shrink_correlation,
    steady_state_window,
)


def test_fill_missing_interpolates_inside_and_holds_the_ends() -> None:
    values = np.array(
        [[np.nan, 1.0, np.nan], [2.0, np.nan, np.nan], [np.nan, 5.0, np.nan], [6.0, np.nan, np.nan]]
    )
    filled = fill_missing(values)
    assert filled[:, 0].tolist() == [2.0, 2.0, 4.0, 6.0]
    assert filled[:, 1].tolist() == [1.0, 3.0, 5.0, 5.0]
    assert np.isnan(filled[:, 2]).all()
    assert np.isnan(values[0, 0])  # the input is left alone


def test_steady_state_cuts_idle_ramp_up_and_cool_down() -> None:
    rng = np.random.default_rng(1)
    n = 400
    load = np.concatenate([np.zeros(5), np.linspace(0, 1, 40), np.ones(330), np.linspace(1, 0, 25)])
    values = np.column_stack([100 * load * (1 + 0.05 * rng.normal(size=n)) for _ in range(6)])
    start, end = steady_state_window(values)
    # the ramp ends at 45 and the cool-down starts at 375; samples within two robust
    # standard deviations of the plateau count as steady
    assert 40 <= start <= 50
    assert 370 <= end <= 380
    flat = 50 + rng.normal(size=(n, 4))
    assert steady_state_window(flat) == (0, n)
    assert steady_state_window(flat[:10]) == (0, 10)


def test_steady_state_never_cuts_more_than_the_limit() -> None:
    values = np.linspace(0, 1, 200)[:, None] * np.ones((1, 3))  # all ramp, no plateau
    start, end = steady_state_window(values, max_trim_fraction=0.1)
    assert start <= 20 and end >= 180


def test_correlation_matrix_equals_numpy() -> None:
    values = np.random.default_rng(2).normal(size=(100, 5)) @ np.triu(np.ones((5, 5)))
    assert np.allclose(correlation_matrix(values), np.corrcoef(values.T))


def _ols_r2(values: np.ndarray, column: int, others: list[int]) -> float:
    design = sm.add_constant(values[:, others])
    return float(sm.OLS(values[:, column], design).fit().rsquared)


def _naive_redundancy(values: np.ndarray, threshold: float) -> list[tuple[int, float]]:
    """Shang et al.'s loop literally: refit every counter on the others after each removal."""
    present = list(range(values.shape[1]))
    removed = []
    while len(present) > 1:
        r2 = [_ols_r2(values, c, [o for o in present if o != c]) for c in present]
        best = int(np.argmax(r2))
        if r2[best] <= threshold:
            break
        removed.append((present[best], r2[best]))
        del present[best]
    return removed


@pytest.mark.parametrize("block", [64, 2])  # 2: exercises the batched downdates and compaction
def test_redundancy_analysis_matches_refitting_a_regression_per_counter(block: int) -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=(400, 6))
    derived = np.column_stack(
        [
            base[:, 0] + 0.1 * rng.normal(size=400),
            base[:, 1] + base[:, 2] + 0.2 * rng.normal(size=400),
            0.5 * base[:, 3] - base[:, 4] + 0.3 * rng.normal(size=400),
            base[:, 0] + base[:, 5] + 0.05 * rng.normal(size=400),
        ]
    )
    values = np.column_stack([base, derived])
    steps = redundancy_analysis(correlation_matrix(values), 0.8, block=block)
    expected = _naive_redundancy(values, 0.8)
    assert [s.index for s in steps] == [index for index, _ in expected]
    assert [s.r_squared for s in steps] == pytest.approx([r2 for _, r2 in expected], abs=1e-9)
    # the standardized coefficients are the regression's, rescaled
    first = steps[0]
    others = [i for i in range(values.shape[1]) if i != first.index]
    z = (values - values.mean(axis=0)) / values.std(axis=0)
    beta = np.linalg.lstsq(z[:, others], z[:, first.index], rcond=None)[0]
    assert [first.coefficients[i] for i in others] == pytest.approx(beta, abs=1e-9)


def test_redundancy_analysis_keeps_protected_counters_and_adjusts_r2() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=50)
    values = np.column_stack([x, x + 0.01 * rng.normal(size=50), rng.normal(size=(50, 3))])
    correlation = correlation_matrix(values)
    assert redundancy_analysis(correlation, 0.9)[0].index in (0, 1)
    kept_first = redundancy_analysis(correlation, 0.9, keep=[0])
    assert [s.index for s in kept_first] == [1]
    plain = redundancy_analysis(correlation, 0.0)[0].r_squared
    adjusted = redundancy_analysis(correlation, 0.0, observations=50)[0].r_squared
    assert adjusted == pytest.approx(1 - (1 - plain) * 49 / (50 - 4 - 1))


def test_shrinkage_keeps_an_exact_identity_invertible() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(2, 100))
    values = np.column_stack([a, b, a + b])
    steps = redundancy_analysis(shrink_correlation(correlation_matrix(values), 1e-9), 0.999)
    assert len(steps) == 1 and steps[0].r_squared > 0.999


def test_correlation_distance_by_hand() -> None:
    correlation = np.array([[1.0, -0.8, 0.3], [-0.8, 1.0, 0.0], [0.3, 0.0, 1.0]])
    assert correlation_distance(correlation) == pytest.approx(
        np.array([[0.0, 0.2, 0.7], [0.2, 0.0, 1.0], [0.7, 1.0, 0.0]])
    )
    assert correlation_distance(correlation, "1-rho")[0, 1] == pytest.approx(1.8)
    with pytest.raises(ValueError, match="distance"):
        correlation_distance(correlation, "euclid")  # type: ignore[arg-type]


def test_calinski_harabasz_of_every_cut_equals_sklearn() -> None:
    rng = np.random.default_rng(6)
    factors = rng.normal(size=(200, 3))
    counters = np.column_stack(
        [factors[:, i % 3] + (0.3 + 0.2 * i) * rng.normal(size=200) for i in range(9)]
    )
    distance = correlation_distance(correlation_matrix(counters), "1-rho")
    merges = linkage(squareform(distance, checks=False), method="average")
    scores = calinski_harabasz_by_cut(merges)
    # 1 - rho is half the squared distance between counters standardized to unit length
    points = (counters - counters.mean(axis=0)) / (counters.std(axis=0) * np.sqrt(200))
    for k in range(2, 9):
        labels = cut_dendrogram(merges, k)
        assert len(set(labels)) == k
        assert scores[k] == pytest.approx(calinski_harabasz_score(points.T, labels), rel=1e-9)
    assert np.isnan(scores[1]) and np.isnan(scores[9])


def test_cut_dendrogram_matches_scipy_fcluster() -> None:
    rng = np.random.default_rng(7)
    distance = correlation_distance(correlation_matrix(rng.normal(size=(60, 8))))
    merges = linkage(squareform(distance, checks=False), method="average")
    for k in range(1, 9):
        ours = cut_dendrogram(merges, k)
        theirs = fcluster(merges, k, criterion="maxclust")
        # the same partition, whatever the numbering
        assert len({(a, b) for a, b in zip(ours, theirs, strict=True)}) == k


def test_clusters_cut_where_calinski_harabasz_peaks() -> None:
    rng = np.random.default_rng(8)
    u, v = rng.normal(size=(2, 300))
    counters = np.column_stack(
        [u + 0.1 * rng.normal(size=300) for _ in range(3)]
        + [v + 0.1 * rng.normal(size=300) for _ in range(3)]
    )
    labels, scores = cluster_counters(correlation_distance(correlation_matrix(counters)))
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert int(np.nanargmax(scores)) == 2
    two, _ = cluster_counters(np.array([[0.0, 0.4], [0.4, 0.0]]))
    assert two.tolist() == [0, 0]


def test_lone_counters_join_the_closest_cluster() -> None:
    distance = np.array(
        [
            [0.0, 0.1, 0.8, 0.9],
            [0.1, 0.0, 0.7, 0.9],
            [0.8, 0.7, 0.0, 0.95],
            [0.9, 0.9, 0.95, 0.0],
        ]
    )
    # counter 2 is closer to {0, 1} (mean 0.75) than to counter 3 (0.95); then counter 3
    # joins the only cluster left
    assert merge_singletons(np.array([0, 0, 1, 2]), distance).tolist() == [0, 0, 0, 0]
    assert merge_singletons(np.array([0, 0, 1, 1]), distance).tolist() == [0, 0, 1, 1]


def test_ks_statistics_equal_scipy_with_ties_and_gaps() -> None:
    rng = np.random.default_rng(9)
    first = np.round(rng.normal(size=(80, 4)), 1)
    second = np.round(rng.normal(0.4, 1.2, size=(50, 4)), 1)
    first[3, 1] = np.nan
    second[[0, 7], 2] = np.nan
    ours = ks_statistics(first, second)
    for column in range(4):
        a, b = first[:, column], second[:, column]
        assert ours[column] == pytest.approx(
            ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)]).statistic, abs=1e-12
        )


def test_largest_ks_statistic_is_the_smallest_p_value_at_equal_sizes() -> None:
    rng = np.random.default_rng(10)
    first = rng.normal(size=(100, 6))
    second = rng.normal(np.linspace(0, 0.6, 6), 1, size=(100, 6))
    pvalues = [ks_2samp(first[:, i], second[:, i]).pvalue for i in range(6)]
    assert int(np.argmax(ks_statistics(first, second))) == int(np.argmin(pvalues))


def test_block_means_by_hand() -> None:
    values = np.array([1.0, 3.0, np.nan, 5.0, 7.0, np.nan, np.nan])
    assert block_means(values, 2).tolist()[:3] == [2.0, 5.0, 7.0]
    assert np.isnan(block_means(values, 2)[3])
    assert block_means(values, 1) is not None and np.array_equal(
        block_means(values, 1), values, equal_nan=True
    )
    matrix = np.arange(12.0).reshape(6, 2)
    assert block_means(matrix, 3).tolist() == [[2.0, 3.0], [8.0, 9.0]]


def test_percentage_error_by_hand() -> None:
    actual = np.array([100.0, 50.0, 0.0, np.nan])
    predicted = np.array([90.0, 60.0, 5.0, 1e9])
    # |10|/100, |10|/50, |5|/floor 10; the unobserved sample is left out
    assert percentage_error(actual, predicted, 10.0) == pytest.approx((0.1 + 0.2 + 0.5) / 3)
    # no floor: the zero sample is left out instead of dividing by it
    assert percentage_error(actual, predicted, 0.0) == pytest.approx((0.1 + 0.2) / 2)
    assert math.isnan(percentage_error(np.array([0.0]), np.array([1.0]), 0.0))


def test_trimmed_percentage_error_leaves_out_the_worst_share() -> None:
    actual = np.full(10, 100.0)
    predicted = np.array([99.0, 98.0, 97.0, 96.0, 95.0, 94.0, 93.0, 92.0, 0.0, 500.0])
    # 20% of 10 errors: the two worst (400% and 100%) go, the mean of 1%..8% stays
    assert percentage_error(actual, predicted, 10.0, 0.2) == pytest.approx(0.045)
    # fewer errors than one trimmed share: nothing is left out
    assert percentage_error(actual[:4], predicted[:4], 10.0, 0.2) == pytest.approx(0.025)
    assert percentage_error(actual, predicted, 10.0, 0.0) == pytest.approx(
        percentage_error(actual, predicted, 10.0)
    )
