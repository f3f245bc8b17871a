"""The kernels' own Student t distribution and regularized incomplete beta
function against scipy's public API (scipy.special.stdtr / betainc)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from perfwatch.detectors import _kernels as K

DFS = [1, 2, 3, 4, 5, 7, 10, 13, 30, 48, 49, 100, 333, 1000, 3001, 10_000]
T_GRID = np.concatenate(
    [[0.0, 1e-300, 1e-12, 1e-6], np.logspace(-4, 3, 300), [1e5, 1e10, 1e100, 1e200, 1e300]]
)


def rel_err(got: float, ref: float) -> float:
    return abs(got - ref) / abs(ref)


def closed_form_cdf(t: float, df: int) -> float:
    """F_t for df = 1 (Cauchy) and df = 2, in forms without cancellation."""
    t = float(t)
    if df == 1:
        return math.atan(1.0 / -t) / math.pi if t < -1.0 else 0.5 + math.atan(t) / math.pi
    r = math.hypot(math.sqrt(2.0), t)  # sqrt(2 + t^2) without overflow
    return 1.0 / (r * (r - t)) if t < -1.0 else 0.5 + t / (2.0 * r)


def reference_cdf(t: float, df: int) -> float:
    # scipy 1.17's stdtr is off by up to 3e-9 relative for df = 1 (1.16's is
    # not): the closed forms are the reference there
    return closed_form_cdf(t, df) if df <= 2 else special.stdtr(df, t)


@pytest.mark.parametrize("df", [1, 2])
def test_closed_forms_of_small_df(df):
    for t in T_GRID[:-3]:
        for s in (-t, t):
            ref = closed_form_cdf(s, df)
            if ref > 1e-300:
                assert K.student_t_cdf(s, df) == pytest.approx(ref, rel=1e-13, abs=0.0), s


@pytest.mark.parametrize("df", DFS)
def test_cdf_matches_scipy_stdtr(df):
    worst = 0.0
    for t in T_GRID:
        for s in (-t, t):
            ref = reference_cdf(s, df)
            got = K.student_t_cdf(s, df)
            if ref > 1e-300:
                worst = max(worst, rel_err(got, ref))
            else:  # below the tested range: tiny (or zero) all the same
                assert 0.0 <= got <= 1e-290
    assert worst <= 1e-12


@pytest.mark.parametrize("df", DFS)
def test_two_sided_p_matches_scipy_sf(df):
    for t in T_GRID:
        ref = 2.0 * (stats.t.sf(t, df) if df > 2 else closed_form_cdf(-t, df))
        got = 2.0 * K.student_t_cdf(-t, df)
        if ref > 1e-300:
            assert got == pytest.approx(ref, rel=1e-12, abs=0.0), (df, t)


def test_non_integer_and_large_df():
    for df in (0.5, 1.5, 2.5, 47.25, 1e5, 1e6):
        for t in (-50.0, -3.0, -1.0, -0.01, 0.3, 2.0, 7.0):
            ref = special.stdtr(df, t)
            if ref > 1e-300:
                assert K.student_t_cdf(t, df) == pytest.approx(ref, rel=1e-11, abs=0.0)


def test_special_values():
    assert K.student_t_cdf(0.0, 5.0) == 0.5
    assert K.student_t_cdf(-0.0, 5.0) == 0.5
    assert K.student_t_cdf(-math.inf, 3.0) == 0.0
    assert K.student_t_cdf(math.inf, 3.0) == 1.0
    assert math.isnan(K.student_t_cdf(math.nan, 3.0))
    assert math.isnan(K.student_t_cdf(1.0, math.nan))
    assert math.isnan(K.student_t_cdf(1.0, 0.0))
    assert math.isnan(K.student_t_cdf(1.0, -2.0))
    # infinite df: the standard normal
    assert K.student_t_cdf(-2.0, math.inf) == pytest.approx(special.ndtr(-2.0), rel=1e-14)
    # symmetric: F(-t) + F(t) = 1
    for df in (1.0, 4.0, 77.0):
        for t in (0.1, 1.0, 3.0):
            assert K.student_t_cdf(-t, df) + K.student_t_cdf(t, df) == pytest.approx(1.0, rel=1e-15)


def test_ttest_p_edge_values():
    # t = -inf (zero variance, different means) -> 0; 0/0 -> NaN as scipy
    assert K.ttest_p(1.0, 0.0, 3, 2.0, 0.0, 3, 0.0) == 0.0
    assert math.isnan(K.ttest_p(1.0, 0.0, 3, 1.0, 0.0, 3, 0.0))
    assert K.ttest_p(1.0, 0.5, 30, 1.0, 0.5, 30, 0.0) == 1.0  # t = 0


@pytest.mark.parametrize("a", [0.5, 1.0, 2.5, 7.0, 50.0, 5000.0])
@pytest.mark.parametrize("b", [0.5, 1.0, 3.0, 40.0])
def test_incomplete_beta_matches_scipy(a, b):
    for x in (0.0, 1e-9, 0.01, 0.2, 0.5, 0.8, 0.99, 0.9999, 1.0):
        ref = special.betainc(a, b, x)
        got = K.betainc_regularized(a, b, x)
        if ref > 1e-300:
            assert got == pytest.approx(ref, rel=1e-11, abs=0.0), (a, b, x)
        else:
            assert got <= 1e-290
    assert math.isnan(K.betainc_regularized(-1.0, 1.0, 0.5))
    assert math.isnan(K.betainc_regularized(1.0, 1.0, 1.5))
