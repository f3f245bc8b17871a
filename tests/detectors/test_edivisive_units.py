"""Hand-checked pieces of the E-Divisive engine: sums, t-test, divergence,
parameters, input handling, default-mode behaviour."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.direction import classify_direction
from perfwatch.detectors.edivisive import (
    ChangePoint,
    EDivisiveParams,
    best_level_split,
    best_split,
    detect_change_points,
    first_pass_pvalue,
    merge_weak_points,
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
        {"compat": "otava", "trend_check": False},
        {"compat": "otava", "trim": 0.1},
        {"trim": 0.5},
        {"trim": -0.1},
        {"trim": "0.1"},
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


def test_trend_options_keep_a_smooth_trend_whole():
    rng = np.random.default_rng(6)
    x = 100 + np.linspace(0, 20, 300) + rng.normal(0, 1, 300)
    assert len(detect_change_points(x, EDivisiveParams(compat="otava"))) >= 5
    assert len(detect_change_points(x, EDivisiveParams(trend_check=False))) >= 5
    assert detect_change_points(x) == []  # the default's trend check
    assert detect_change_points(x, EDivisiveParams(trend_test=True)) == []
    y = x.copy()
    y[150:] += 3  # a real step on top of the trend is still found
    for params in (EDivisiveParams(), EDivisiveParams(trend_test=True)):
        (cp,) = detect_change_points(y, params)
        assert abs(cp.index - 150) <= 1


def test_trend_check_keeps_a_step_without_trend_as_before():
    # where the step fits better than a line, the default's p-value is the
    # t-test's alone: the same change points as without the check
    rng = np.random.default_rng(11)
    x = 100 + rng.normal(0, 1, 200)
    x[90:] += 1.5
    x[150:] -= 2.0
    with_check = detect_change_points(x)
    assert [abs(c.index - at) <= 2 for c, at in zip(with_check, (90, 150), strict=True)] == [
        True,
        True,
    ]
    assert with_check == detect_change_points(x, EDivisiveParams(trend_check=False))


def test_step_beats_line_by_hand():
    t = np.arange(12, dtype=float)
    wiggle = np.tile([0.2, -0.2], 6)
    step = np.where(t >= 6, 1.0, 0.0) + wiggle
    # a step of 1 between two flat halves: the step leaves 12 * 0.04 = 0.48,
    # a line leaves far more (it cannot bend at 6)
    assert K.step_beats_line(step, 0, 6, 12)
    line = 0.5 * t + wiggle
    # a line: the step leaves each half's slope, sum (0.5 * (i - 2.5))**2 * 2
    # = 8.75 plus the wiggle, the line only the wiggle
    assert not K.step_beats_line(line, 0, 6, 12)
    # the same comparison by least squares
    for y, mid in ((step, 6), (line, 6), (line, 3), (step + 0.05 * t, 6)):
        ones = np.ones_like(t)
        design_line = np.column_stack([ones, t])
        design_step = np.column_stack([ones, (t >= mid).astype(float)])
        rss_line = np.linalg.lstsq(design_line, y, rcond=None)[1][0]
        rss_step = np.linalg.lstsq(design_step, y, rcond=None)[1][0]
        assert K.step_beats_line(y, 0, mid, 12) == (not rss_line < rss_step)
    assert K.step_beats_line(line, 0, 2, 4)  # too few points for the trend model
    with pytest.raises(IndexError):
        K.step_beats_line(line, 0, 0, 12)


def test_trimmed_ttest_by_hand():
    # n = 5 a side, trim 0.2: one value cut from each end.  a: trimmed mean of
    # 2, 3, 4 is 3; winsorized 2, 2, 3, 4, 4 (mean 3) has squares sum 4.  b:
    # trimmed mean 7, squares sum 4.  Pooled variance (4 + 4) / (3 + 3 - 2) = 2,
    # t = (3 - 7) / sqrt(2 * (1/3 + 1/3)) = -2 sqrt(3), 4 degrees of freedom.
    x = np.array([1.0, 2, 3, 4, 100, 5, 6, 7, 8, 9])
    expected = 2 * stats.t.sf(2 * math.sqrt(3), 4)
    assert K.trimmed_ttest_p(x, 0, 5, 10, 0.2, 0.0) == pytest.approx(expected, rel=1e-12)
    x[4] = 1e6  # the outlier is cut, whatever its size
    assert K.trimmed_ttest_p(x, 0, 5, 10, 0.2, 0.0) == pytest.approx(expected, rel=1e-12)
    # the t-test on means drowns the difference in the outlier's variance
    assert K.segment_stats(x, 0, 5, 10, 0.0)[4] > 0.25
    # trim 0: the pooled Student t-test (sample variances)
    y = np.array([1.0, 2.5, 2, 4, 5, 7, 6.5, 8])
    plain = stats.ttest_ind(y[:3], y[3:]).pvalue
    assert K.trimmed_ttest_p(y, 0, 3, 8, 0.0, 0.0) == pytest.approx(plain, rel=1e-12)
    assert K.trimmed_ttest_p(y, 0, 1, 2, 0.2, 0.0) == 1.0  # two points: no test
    with pytest.raises(ValueError):
        K.trimmed_ttest_p(y, 0, 3, 8, 0.5, 0.0)


@pytest.mark.parametrize("trim", [0.05, 0.1, 0.2, 0.3])
def test_trimmed_ttest_is_yuens_as_scipy_computes_it(trim):
    rng = np.random.default_rng(int(trim * 100))
    for n1, n2 in ((3, 4), (5, 7), (10, 13), (23, 40), (60, 61), (150, 9)):
        x = 50 + rng.standard_t(3, n1 + n2)
        x[n1:] += rng.uniform(-2, 2)
        expected = stats.ttest_ind(x[:n1], x[n1:], trim=trim).pvalue
        got = K.trimmed_ttest_p(x, 0, n1, n1 + n2, trim, 0.0)
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-300)


# values at a resolution of 1e-6: a change of unit must not round differences away
# (1.0 + 1e-309 is 1.0), or a difference between the sides would vanish with it
METRIC_VALUES = st.floats(-1e3, 1e3).map(lambda value: round(value, 6))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(METRIC_VALUES, min_size=5, max_size=40),
    st.lists(METRIC_VALUES, min_size=5, max_size=40),
    st.floats(0.01, 100),
    st.floats(-1e3, 1e3),
)
def test_trimmed_ttest_invariants(a, b, scale, shift):
    x = np.array(a + b)
    n1, n = len(a), len(a) + len(b)
    p = K.trimmed_ttest_p(x, 0, n1, n, 0.2, 0.0)
    assert 0.0 <= p <= 1.0 or math.isnan(p)
    # the order of the runs within a side does not matter, nor which side is first
    swapped = np.array(b[::-1] + a[::-1])
    assert K.trimmed_ttest_p(swapped, 0, n - n1, n, 0.2, 0.0) == pytest.approx(p, nan_ok=True)
    # nor the unit of the metric
    moved = K.trimmed_ttest_p(x * scale + shift, 0, n1, n, 0.2, 0.0)
    if not math.isnan(p) and np.ptp(x) > 1e-6:
        assert moved == pytest.approx(p, rel=1e-6, abs=1e-12)
    # the largest value of each side is cut (g >= 1): making it larger changes nothing
    wild = x.copy()
    wild[int(np.argmax(x[:n1]))] += 1e4
    wild[n1 + int(np.argmax(x[n1:]))] += 1e4
    assert K.trimmed_ttest_p(wild, 0, n1, n, 0.2, 0.0) == pytest.approx(p, nan_ok=True)


def test_trim_option_finds_a_step_in_heavy_tailed_noise():
    # Student t noise with 2 df: a few huge values inflate the pooled
    # variance of the t-test on means, not the trimmed test's
    def found(params: EDivisiveParams) -> int:
        hits = 0
        for seed in range(40):
            x = 100 + np.random.default_rng(seed).standard_t(2, 200)
            x[100:] += 1.2
            hits += any(abs(c.index - 100) <= 3 for c in detect_change_points(x, params))
        return hits

    assert found(EDivisiveParams()) <= 5
    assert found(EDivisiveParams(trim=0.2)) >= 10


# ------------------------------------------------- correlated selection correction
def _nu_by_hand(x: float) -> float:
    h = x / 2
    return (2 / x) * (stats.norm.cdf(h) - 0.5) / (h * stats.norm.cdf(h) + stats.norm.pdf(h))


def test_normal_two_sided_z_is_the_normal_quantile():
    for p in (0.9, 0.05, 1e-3, 1e-12, 1e-250):
        assert K.normal_two_sided_z(p) == pytest.approx(stats.norm.isf(p / 2), rel=1e-10)
    assert K.normal_two_sided_z(0.05) == pytest.approx(1.959963984540054, rel=1e-12)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            K.normal_two_sided_z(bad)


def test_max_split_pvalue_by_hand():
    # b phi(b) sum_k n / (k (n - k)) nu(b sqrt(n / (k (n - k)))), written out
    n, p = 60, 1e-4
    b = stats.norm.isf(p / 2)
    r = np.array([n / (k * (n - k)) for k in range(1, n)])
    expected = b * stats.norm.pdf(b) * sum(ri * _nu_by_hand(b * math.sqrt(ri)) for ri in r)
    assert expected < (n - 1) * p  # not capped: the formula itself is checked
    assert K.max_split_pvalue(p, n) == pytest.approx(expected, rel=1e-10)
    # the discreteness correction agrees with Siegmund's other form, exp(-0.583 x)
    for x in (0.1, 0.3, 1.0, 2.0):
        assert _nu_by_hand(x) == pytest.approx(math.exp(-0.583 * x), rel=0.02)


def test_max_split_pvalue_bounds():
    assert K.max_split_pvalue(0.0, 50) == 0.0
    assert K.max_split_pvalue(1.0, 50) == 1.0
    assert K.max_split_pvalue(0.3, 2) == 0.3  # one split position: nothing was chosen
    # small n: the approximation exceeds the union bound, which caps it
    assert K.max_split_pvalue(1e-3, 3) == pytest.approx(2e-3, rel=1e-12)
    with pytest.raises(ValueError):
        K.max_split_pvalue(0.1, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=1e-300, max_value=1.0, allow_nan=False),
    st.floats(min_value=1e-300, max_value=1.0, allow_nan=False),
    st.integers(min_value=1, max_value=3000),
)
def test_max_split_pvalue_invariants(p1, p2, n):
    lo, hi = sorted((p1, p2))
    q_lo, q_hi = K.max_split_pvalue(lo, n), K.max_split_pvalue(hi, n)
    # between the single test and Bonferroni, monotone in p
    assert lo <= q_lo <= min(1.0, max(lo, (n - 1) * lo)) * (1 + 1e-12)
    assert q_lo <= q_hi * (1 + 1e-12)
    # more split positions, more chances
    assert q_lo <= K.max_split_pvalue(lo, n + 1) * (1 + 1e-12)


@pytest.mark.parametrize("n", [12, 30, 100])
def test_max_split_pvalue_is_calibrated_on_gaussian_noise(n):
    """Simulated: the largest pooled t over all split positions of n Gaussian
    values, corrected, rejects at about the nominal rate; Bonferroni is too
    strict, more so the longer the segments."""
    rng = np.random.default_rng(7 + n)
    reps = 10_000
    x = rng.standard_normal((reps, n))
    k = np.arange(1, n)
    c, c2 = np.cumsum(x, 1), np.cumsum(x * x, 1)
    s1, q1 = c[:, :-1], c2[:, :-1]
    m1, m2 = s1 / k, (c[:, -1:] - s1) / (n - k)
    ss = (q1 - k * m1**2) + (c2[:, -1:] - q1 - (n - k) * m2**2)
    t = (m1 - m2) / np.sqrt(ss / (n - 2) * (1 / k + 1 / (n - k)))
    p_min = 2 * stats.t.sf(np.abs(t), n - 2).min(axis=1)
    corrected = np.array([K.max_split_pvalue(float(p), n) for p in p_min])
    bonferroni = np.minimum(1.0, (n - 1) * p_min)
    for alpha in (0.05, 0.01):
        rate = float((corrected <= alpha).mean())
        assert 0.7 * alpha <= rate <= 1.35 * alpha, (alpha, rate)
        assert (bonferroni <= alpha).mean() < rate
    if n == 100:
        assert (bonferroni <= 0.05).mean() < 0.025


def test_correlated_selection_option():
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(100, 1, 60), rng.normal(101.5, 1, 60)]
    (found,) = detect_change_points(x, EDivisiveParams(correlated_selection=True))
    assert abs(found.index - 60) <= 3
    # the point's own t-test against its neighbours (the series' ends), then
    # the correction for the 119 split positions it was chosen from
    raw = K.segment_stats(x, 0, found.index, 120, 0.001)[4]
    assert found.pvalue == pytest.approx(K.max_split_pvalue(raw, 120), rel=1e-12)
    assert raw < found.pvalue < 119 * raw
    with pytest.raises(ValueError):
        EDivisiveParams(compat="otava", correlated_selection=True)
    # without the selection correction the option changes nothing
    assert detect_change_points(
        x, EDivisiveParams(selection_correction=False, correlated_selection=True)
    ) == detect_change_points(x, EDivisiveParams(selection_correction=False))


# ---------------------------------------------------------------- refine
def test_best_level_split_by_hand():
    # [0, 2, 0, 2]: between-level sums of squares n1 n2 / n (m1 - m2)**2 are
    # 3/4 (4/3)**2 = 4/3 at 1, 0 at 2, 4/3 at 3: the first of the equal ones
    assert best_level_split(np.array([0.0, 2, 0, 2]), 0, 4, 1) == 1
    # with two runs a side only position 2 is allowed
    assert best_level_split(np.array([0.0, 2, 0, 2]), 0, 4, 2) == 2
    x = np.array([9.0, 1, 1, 1, 5, 5, 5, 5, 9])
    assert best_level_split(x, 1, 8, 3) == 4  # an index of x, not of the slice
    assert best_level_split(x, 1, 8, 4) is None  # 7 runs cannot leave 4 a side
    assert best_level_split(x, 1, 3, 1) == 2


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-50, 50), min_size=2, max_size=40),
    st.integers(1, 6),
    st.sampled_from([1.0, 1e-3, 1e4]),
    st.sampled_from([0.0, 1e6]),
)
def test_best_level_split_maximises_the_between_level_sum_of_squares(ints, min_len, scale, shift):
    x = shift + scale * np.array(ints, dtype=float)
    n = len(x)
    j = best_level_split(x, 0, n, min_len)
    if n < 2 * min_len:
        assert j is None
        return
    assert j is not None and min_len <= j <= n - min_len

    def between(k: int) -> float:
        a, b = x[:k] - shift, x[k:] - shift
        return k * (n - k) / n * (a.mean() - b.mean()) ** 2

    best = max(between(k) for k in range(min_len, n - min_len + 1))
    assert between(j) >= best - 1e-9 * max(best, scale * scale)


def test_refine_moves_a_misplaced_step():
    rng = np.random.default_rng(35)
    x = np.r_[rng.normal(100, 1, 70), rng.normal(101.5, 1, 50)]
    (plain,) = detect_change_points(x, EDivisiveParams(refine=False))
    (refined,) = detect_change_points(x)  # refine is the default
    assert plain.index == 62  # the windows' candidate, 8 runs early
    # moved to the best two-level split of the whole series (its neighbours
    # are the ends), then tested there as the merge tests any point
    assert refined.index == best_level_split(x, 0, 120, 3) == 70
    assert [refined] == merge_weak_points(x, np.array([70]), EDivisiveParams())
    with pytest.raises(ValueError):
        EDivisiveParams(compat="otava", refine=False)
    assert not EDivisiveParams(compat="otava").refines


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(20, 300), st.integers(0, 4))
def test_refine_reports_points_that_pass_the_merge_where_they_are(seed, n, steps):
    rng = np.random.default_rng(seed)
    x = 100 + rng.normal(0, 1, n)
    for at in rng.integers(0, n, size=steps):
        x[at:] += rng.uniform(-4, 4)
    params = EDivisiveParams(window_len=int(rng.integers(8, 60)))
    found = detect_change_points(x, params)
    assert found == detect_change_points(x.copy(), params)  # deterministic
    # each reported point passes the merge against its reported neighbours
    again = merge_weak_points(x, np.array([c.index for c in found], np.int64), params)
    assert again == found
    assert all(params.min_segment_len <= c.index <= n - params.min_segment_len for c in found)


def test_refine_leaves_a_step_on_a_trend_where_the_merge_put_it():
    # a line through a trend with a step off-centre beats the step; the best
    # two-level split is then pulled towards the middle, so the point stays
    gated = pulled = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        at = int(rng.integers(60, 100))
        x = 100 + np.linspace(0, 10, 300) + rng.normal(0, 1, 300)
        x[at:] += 4
        plain = detect_change_points(x, EDivisiveParams(refine=False))
        if len(plain) == 1 and not K.step_beats_line(x, 0, plain[0].index, 300):
            gated += 1
            pulled += best_level_split(x, 0, 300, 3) != plain[0].index
            assert detect_change_points(x) == plain
    assert gated >= 20 and pulled >= 5
