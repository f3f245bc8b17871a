"""Hand-checked pieces of the E-Divisive engine: sums, t-test, divergence,
parameters, input handling, default-mode behaviour."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.direction import classify_direction
from perfwatch.detectors.edivisive import (
    ChangePoint,
    EDivisiveParams,
    best_split,
    detect_change_points,
    first_pass_pvalue,
    prepare_values,
)


# ---------------------------------------------------------------- sums, t-test
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 127, 128, 129, 300, 8191, 8192, 8193, 20000])
def test_mean_std_are_otavas_bit_for_bit(n, otava):
    # Otava's means and deviations are numpy's, of the numpy Otava is installed
    # with: its summation order for long arrays differs between numpy releases
    rng = np.random.default_rng(n)
    a = 1e6 + rng.normal(0, 3, n)
    expected = otava.ask({"op": "mean_std", "values": a.tolist()})
    m, s = K.mean_std(a, 0, n)
    assert m == expected["mean"]
    assert s == (expected["std"] if n >= 2 else 0.0)
    lo, hi = n // 3, n - n // 5
    if hi > lo:
        m, _ = K.mean_std(a, lo, hi)
        assert m == otava.ask({"op": "mean_std", "values": a[lo:hi].tolist()})["mean"]


def test_ttest_matches_scipy_ttest_ind_equal_var():
    a = np.array([10.0, 11.0, 9.5, 10.2])
    b = np.array([12.0, 12.5, 11.8])
    ref = stats.ttest_ind(a, b, equal_var=True)
    # with sample (ddof=1) standard deviations the pooled test is scipy's exactly
    p = K.ttest_p(a.mean(), a.std(ddof=1), 4, b.mean(), b.std(ddof=1), 3, 0.0)
    assert p == pytest.approx(ref.pvalue, rel=1e-12)


def test_ttest_by_hand():
    # left [1, 2, 3], right [5, 6, 7]: population std sqrt(2/3) each (Otava's input)
    s = math.sqrt(2 / 3)
    df = 4.0
    svar = (2 * s * s + 2 * s * s) / df
    t = (2.0 - 6.0) / math.sqrt(svar * (1 / 3 + 1 / 3))
    p_hand = 2 * stats.t.sf(abs(t), df)
    assert K.ttest_p(2.0, s, 3, 6.0, s, 3, 0.0) == pytest.approx(p_hand, rel=1e-12)
    assert K.segment_stats(np.array([1.0, 2, 3, 5, 6, 7]), 0, 3, 6, 0.0)[4] == pytest.approx(
        p_hand, rel=1e-12
    )
    # and it is what Otava's pipeline computes: the same t statistic, and the
    # p-value from the project's own Student t tail, not scipy's (see
    # tests/detectors/test_student_t.py for how close the two are)
    ref = stats.ttest_ind_from_stats(2.0, s, 3, 6.0, s, 3)
    assert ref.statistic == (2.0 - 6.0) / math.sqrt(svar * (1 / 3 + 1 / 3))
    assert K.ttest_p(2.0, s, 3, 6.0, s, 3, 0.0) == pytest.approx(ref.pvalue, rel=1e-13)


def test_ttest_edge_cases():
    assert K.ttest_p(1.0, 0.0, 1, 5.0, 0.0, 1, 0.0) == 1.0  # two points in total
    assert K.ttest_p(1.0, 0.0, 3, 2.0, 0.0, 3, 0.0) == 0.0  # zero variance, different means
    assert math.isnan(K.ttest_p(1.0, 0.0, 3, 1.0, 0.0, 3, 0.0))  # 0/0 (Otava: NaN)
    assert K.ttest_p(1.0, 0.0, 3, 1.0, 0.0, 3, 0.001) == 1.0  # default mode: undefined -> 1
    # noise floor: 0.001 % step on flat data is not significant, 2 % is
    assert K.ttest_p(1000.0, 0.0, 50, 1000.01, 0.0, 50, 0.001) > 0.9
    assert K.ttest_p(1000.0, 0.0, 50, 1020.0, 0.0, 50, 0.001) < 1e-12


def test_magnitude_as_otava():
    assert K.magnitude(100.0, 110.0) == pytest.approx(0.1)
    assert K.magnitude(110.0, 100.0) == pytest.approx(0.1)  # max(|0.0909..|, |0.1|)
    assert K.magnitude(0.0, 5.0) == 1.0  # forward undefined -> 0; backward 0/5 - 1
    assert K.magnitude(0.0, 0.0) == 0.0


# ---------------------------------------------------------------- divergence
def q_by_definition(z: np.ndarray, tau: int, kappa: int) -> float:
    x, y = z[:tau], z[tau:kappa]
    n, m = len(x), len(y)
    cross = sum(abs(a - b) for a in x for b in y)
    wx = sum(abs(a - b) for a, b in itertools.combinations(x, 2))
    wy = sum(abs(a - b) for a, b in itertools.combinations(y, 2))
    q = 2.0 / (m + n) * cross
    if n > 1:
        q -= 2.0 * m / (m + n) / (n - 1) * wx
    if m > 1:
        q -= 2.0 * n / (m + n) / (m - 1) * wy
    return q


@pytest.mark.parametrize(
    "z",
    [
        [1.0, 2.0],
        [5.0, 5.0, 5.0],
        [1.0, 1.0, 4.0, 4.0],
        [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0],
        [10.0, 10.5, 9.8, 20.0, 20.2, 19.9, 20.1],
    ],
)
def test_divergence_argmax_by_definition(z):
    z = np.asarray(z)
    n = len(z)
    qs = {(t, k): q_by_definition(z, t, k) for t in range(1, n) for k in range(t + 1, n + 1)}
    best = max(qs.values())
    first = min((tk for tk, q in qs.items() if math.isclose(q, best, rel_tol=1e-12, abs_tol=1e-12)))
    tau, qhat = best_split(z)
    assert qhat == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert tau == first[0]


def test_divergence_matches_otavas_calculator(otava):
    rng = np.random.default_rng(5)
    for n in (2, 3, 5, 17, 50):
        for z in (rng.normal(0, 1, n), np.round(rng.normal(0, 1, n)), np.zeros(n)):
            assert best_split(z) == otava.candidate(z)


# ---------------------------------------------------------------- API
def test_params_roundtrip_and_validation():
    p = EDivisiveParams(window_len=30, max_pvalue=0.01, min_magnitude=0.05)
    assert EDivisiveParams.from_dict(p.to_dict()) == p
    c = EDivisiveParams(compat="otava")
    assert EDivisiveParams.from_dict(c.to_dict()) == c
    assert "min_segment_len" not in c.to_dict()
    for bad in (
        {"window_len": 1},
        {"window_len": 2.5},
        {"max_pvalue": -1},
        {"max_pvalue": float("nan")},
        {"compat": "hunter"},
        {"min_segment_len": 0},
        {"compat": "otava", "min_segment_len": 5},
        {"compat": "otava", "noise_floor": 0.0},
    ):
        with pytest.raises(ValueError):
            EDivisiveParams(**bad)
    with pytest.raises(ValueError, match="unknown"):
        EDivisiveParams.from_dict({"window": 3})


def test_first_pass_pvalue():
    assert first_pass_pvalue(0.001) == pytest.approx(0.01)
    assert first_pass_pvalue(0.1) == pytest.approx(0.2)
    assert first_pass_pvalue(0.7) == 0.7


def test_bad_input_is_a_value_error_naming_the_problem():
    with pytest.raises(ValueError, match="empty"):
        detect_change_points([])
    with pytest.raises(ValueError, match="infinite value at index 2"):
        detect_change_points([1.0, 2.0, float("inf")])
    with pytest.raises(ValueError, match="missing"):
        detect_change_points([None, float("nan")])
    with pytest.raises(ValueError, match="one-dimensional"):
        detect_change_points(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="numbers"):
        detect_change_points(["a", "b"])


def test_gaps_forward_then_back_filled():
    x = prepare_values([None, None, 3.0, None, 5.0, float("nan")])
    assert x.tolist() == [3.0, 3.0, 3.0, 3.0, 5.0, 5.0]


def test_tiny_series():
    assert detect_change_points([1.0]) == []
    assert detect_change_points([1.0, 2.0]) == []
    assert detect_change_points([1.0, 2.0], EDivisiveParams(compat="otava")) == []


def test_change_point_fields_and_dict():
    x = np.array([100.0] * 20 + [120.0] * 20) + np.tile([0.5, -0.5], 20)
    (cp,) = detect_change_points(x)
    assert cp.index == 20
    assert cp.mean_before == pytest.approx(100.0)
    assert cp.mean_after == pytest.approx(120.0)
    assert cp.forward_change_percent == pytest.approx(20.0)
    assert cp.magnitude == pytest.approx(0.2)
    assert cp.pvalue < 1e-10
    assert ChangePoint.from_dict(cp.to_dict()) == cp


def spiky(seed: int = 18) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 100 + rng.normal(0, 1, 200)
    for at in rng.choice(np.arange(5, 195), 3, replace=False):
        x[at] += rng.choice([-1, 1]) * rng.uniform(8, 15)
    return x


def test_default_mode_single_spike_is_not_a_change_point():
    x = spiky()  # spikes at 44, 104, 162
    otava_like = [c.index for c in detect_change_points(x, EDivisiveParams(compat="otava"))]
    assert otava_like == [44, 45, 162, 163]
    assert detect_change_points(x) == []
    rng = np.random.default_rng(11)
    # nor a two-run blip (min_segment_len=3), unless asked for
    y = 100 + rng.normal(0, 0.2, 120)
    y[60:62] += 10
    assert detect_change_points(y) == []
    assert [c.index for c in detect_change_points(y, EDivisiveParams(min_segment_len=2))] == [
        60,
        62,
    ]


def test_default_mode_finds_short_reverted_regression_otava_misses():
    for seed in range(3):
        y = 100 + np.random.default_rng(seed).normal(0, 1, 200)
        y[100:103] += 5  # a 5-sigma regression for three runs, then fixed
        assert detect_change_points(y, EDivisiveParams(compat="otava")) == []
        assert [c.index for c in detect_change_points(y)] == [100, 103]


def test_default_mode_flat_tiny_step():
    x = np.array([1000.0] * 50 + [1000.01] * 50)
    assert [c.pvalue for c in detect_change_points(x, EDivisiveParams(compat="otava"))] == [0.0]
    assert detect_change_points(x) == []
    y = np.array([1000.0] * 50 + [1020.0] * 50)
    assert [c.index for c in detect_change_points(y)] == [50]


def test_default_mode_noise_false_positives_do_not_grow_with_length():
    rng = np.random.default_rng(5)
    x = 100 + rng.normal(0, 1, 3000)
    assert len(detect_change_points(x, EDivisiveParams(compat="otava"))) == 10
    assert detect_change_points(x) == []


def test_default_mode_reports_fresh_p_values():
    rng = np.random.default_rng(4)
    x = 100 + rng.normal(0, 1, 400)
    for at in (50, 120, 200, 260, 330):
        x[at:] += rng.uniform(1.5, 4)
    idx = [0] + [c.index for c in detect_change_points(x)] + [400]
    for i, cp in enumerate(detect_change_points(x)):
        p = K.segment_stats(x, idx[i], idx[i + 1], idx[i + 2], 0.001)[4]
        assert cp.pvalue == min(1.0, p * (idx[i + 2] - idx[i] - 1))


@pytest.mark.parametrize(
    ("change", "direction", "expected"),
    [
        (10.0, "higher_is_better", "improvement"),
        (-10.0, "higher_is_better", "regression"),
        (10.0, "lower_is_better", "regression"),
        (-10.0, "lower_is_better", "improvement"),
        (10.0, None, "unknown"),
        (0.0, "lower_is_better", "unknown"),
        (float("nan"), "lower_is_better", "unknown"),
    ],
)
def test_classify_direction(change, direction, expected):
    assert classify_direction(change, direction) == expected


def test_classify_direction_rejects_unknown_direction():
    with pytest.raises(ValueError):
        classify_direction(1.0, "up")


def test_trend_test_option_keeps_a_smooth_trend_whole():
    rng = np.random.default_rng(6)
    x = 100 + np.linspace(0, 20, 300) + rng.normal(0, 1, 300)
    assert len(detect_change_points(x, EDivisiveParams(compat="otava"))) >= 5
    assert len(detect_change_points(x)) >= 5  # default mode: not fixed
    assert detect_change_points(x, EDivisiveParams(trend_test=True)) == []
    y = x.copy()
    y[150:] += 5  # a real step on top of the trend is still found
    (cp,) = detect_change_points(y, EDivisiveParams(trend_test=True))
    assert abs(cp.index - 150) <= 1


def test_trend_shift_p_by_hand():
    # pure line: no shift; line + step: a shift
    t = np.arange(20, dtype=float)
    assert K.trend_shift_p(1.0 + 0.5 * t + np.tile([0.1, -0.1], 10), 0, 10, 20, 0.0) > 0.5
    y = 1.0 + 0.5 * t + np.tile([0.1, -0.1], 10)
    y[10:] += 3.0
    assert K.trend_shift_p(y, 0, 10, 20, 0.0) < 1e-10


def test_clean_step_is_placed_exactly_when_split_candidates_cluster() -> None:
    # The split step proposes 11, 12 and 13 around this step; the minimum
    # segment rule must keep the strongest of the three, the true step at 12.
    rng = np.random.default_rng(148)
    values = np.round(100 + rng.normal(0, 1, 24) + np.where(np.arange(24) >= 12, 20, 0), 3)
    found = detect_change_points(values, EDivisiveParams())
    assert [cp.index for cp in found] == [12]
