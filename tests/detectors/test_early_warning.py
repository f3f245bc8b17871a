"""EarlyWarning: hand-checked cases, invariance and its false-alarm rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.base import clone

from perfwatch.detectors import EarlyWarning

# 1..9: median 5, absolute deviations 4,3,2,1,0,1,2,3,4 -> MAD 2; the 10 % and
# 90 % quantiles (linear interpolation) are 1.8 and 8.2.
ONE_TO_NINE = np.arange(1.0, 10.0)


def test_hand_checked_segment_statistics_with_gaussian_tails() -> None:
    ew = EarlyWarning(tails="normal").fit(ONE_TO_NINE)
    assert ew.center_ == 5.0
    assert ew.scale_ == pytest.approx(2 * 1.4826)
    tail = (8.2 - 5.0) / stats.norm.isf(0.1)  # 2.497, below the MAD's 2.965
    assert tail < ew.scale_
    assert ew.scale_up_ == ew.scale_down_ == ew.scale_
    assert ew.tail_df_up_ == ew.tail_df_down_ == math.inf
    assert ew.single_limit_ == pytest.approx(stats.norm.isf(0.001 / 4))
    assert ew.pair_limit_ == pytest.approx(stats.norm.isf(math.sqrt(0.001 / 4)))
    # 30 is (30 - 5) / (2.9652 * sqrt(10 / 9)) = 7.998 standard errors up, which a
    # t with 0.37 * 8 degrees of freedom exceeds with probability 0.00214: the
    # normal's 0.00214 quantile, 2.857
    t = 25.0 / (2 * 1.4826 * math.sqrt(10 / 9))
    tail_p = stats.t.sf(t, 0.37 * 8)
    assert tail_p == pytest.approx(0.00214, rel=1e-2)
    assert ew.scores([30.0])[0] == pytest.approx(stats.norm.isf(tail_p))
    assert ew.scores([5.0 - 25.0])[0] == pytest.approx(-stats.norm.isf(tail_p))
    assert ew.assess([30.0]).p == pytest.approx(2 * tail_p)


def half_t_loglik(dev: np.ndarray, nu: float) -> float:
    """scipy's maximized log-likelihood of a half t (or half normal) with this df."""
    if math.isinf(nu):
        return float(stats.norm.logpdf(dev, 0, math.sqrt(np.mean(dev**2))).sum())
    _, _, s = stats.t.fit(np.concatenate([dev, -dev]), fdf=nu, floc=0)
    return float(stats.t.logpdf(dev, nu, 0, s).sum())


def test_student_tails_match_scipy_on_each_side() -> None:
    # each side's deviations are a half t: its scale is scipy's maximum-likelihood
    # scale of the mirrored sample at the chosen df, and with no slack the chosen
    # df is the one of the grid with the largest likelihood
    rng = np.random.default_rng(11)
    segment = np.concatenate([3.0 * np.abs(rng.standard_t(3, 80)), -np.abs(rng.normal(0, 1, 80))])
    segment = np.append(segment, 0.0)  # the median, 0
    ew = EarlyWarning(tail_slack=0.0).fit(segment)
    assert ew.center_ == 0.0
    for dev, scale, df in (
        (segment[segment > 0], ew.scale_up_, ew.tail_df_up_),
        (-segment[segment < 0], ew.scale_down_, ew.tail_df_down_),
    ):
        mirrored = np.concatenate([dev, -dev])
        grid = [math.inf] + [1.0 / v for v in np.linspace(0.1, 0.8, 8)]
        best = max(grid, key=lambda nu, dev=dev: half_t_loglik(dev, nu))
        assert df == pytest.approx(best)
        if math.isinf(df):
            assert scale == pytest.approx(math.sqrt(np.mean(dev**2)))
        else:
            assert scale == pytest.approx(stats.t.fit(mirrored, fdf=df, floc=0)[2], rel=5e-3)
    assert ew.tail_df_up_ < 10.0  # the t3 side is heavy
    assert ew.tail_df_down_ >= 5.0  # the Gaussian side light


def test_slack_takes_the_heaviest_tail_within_it() -> None:
    segment = np.random.default_rng(5).standard_normal(150)
    dfs = [EarlyWarning(tail_slack=slack).fit(segment).tail_df_up_ for slack in (0.0, 1.0, 50.0)]
    assert dfs[0] >= dfs[1] >= dfs[2] == 1.25


def test_heavy_tails_raise_the_run_needed_to_be_suspected() -> None:
    # the same bulk (MAD) with and without far values in the segment: the
    # heavy-tailed segment needs a run further out for the same score
    rng = np.random.default_rng(8)
    bulk = rng.standard_normal(100)
    heavy = np.concatenate([bulk, [8.0, -9.0, 11.0, -12.0, 15.0]])
    light = np.concatenate([bulk, [1.0, -1.0, 0.5, -0.5, 0.2]])
    assert EarlyWarning().fit(heavy).tail_df_up_ < EarlyWarning().fit(light).tail_df_up_
    run = 6.0
    assert EarlyWarning().fit(heavy).scores([run])[0] < EarlyWarning().fit(light).scores([run])[0]


def test_skewed_segment_uses_the_long_side() -> None:
    # median 10.5, MAD 0.5; the 90 % quantile is 20 and the 10 % one 10
    segment = np.array([10.0] * 5 + [11.0] * 3 + [20.0] * 2)
    ew = EarlyWarning(tails="normal").fit(segment)
    assert ew.center_ == 10.5
    assert ew.scale_ == pytest.approx(0.5 * 1.4826)
    assert ew.scale_up_ == pytest.approx(9.5 / stats.norm.isf(0.1))
    assert ew.scale_down_ == ew.scale_  # 0.5 / 1.2816 is below the MAD's scale


def gaussian_segment(n: int = 120, seed: int = 3) -> np.ndarray:
    return 100.0 + np.random.default_rng(seed).standard_normal(n)


def test_five_sigma_step_is_suspected_on_its_first_run() -> None:
    ew = EarlyWarning().fit(gaussian_segment())
    first = ew.assess([ew.center_ + 6.0 * ew.scale_])
    assert first.state == "suspected"
    assert (first.rule, first.direction, first.runs) == ("single", "up", (0,))
    # the single-run rule fires exactly when the two-sided p is below its share
    assert first.p < ew.false_alarm_rate / 2
    # the step goes on: the suspicion stays open
    assert ew.assess([ew.center_ + 6.0 * ew.scale_] * 4).state == "suspected"


def test_single_outlier_is_suspected_then_withdrawn_then_clear() -> None:
    ew = EarlyWarning().fit(gaussian_segment())
    c, s = ew.center_, ew.scale_
    runs = [c - 8.0 * s, c + 0.2 * s, c - 0.1 * s]
    assert ew.assess(runs[:1]).state == "suspected"
    withdrawn = ew.assess(runs[:2])
    assert (withdrawn.state, withdrawn.direction, withdrawn.runs) == ("withdrawn", "down", (0,))
    assert ew.assess(runs).state == "clear"
    assert ew.assess(runs).runs == ()


def test_two_runs_rule_needs_both_on_the_same_side() -> None:
    ew = EarlyWarning().fit(gaussian_segment())
    c, s = ew.center_, ew.scale_
    between = (ew.pair_limit_ + ew.single_limit_) / 2 * s * math.sqrt(1 + 1 / 120)
    assert ew.assess([c + between]).state == "clear"
    pair = ew.assess([c + between, c + between])
    assert (pair.state, pair.rule, pair.runs) == ("suspected", "pair", (0, 1))
    assert ew.assess([c + between, c - between]).state == "clear"
    assert list(ew.alarms([c + between, c + between, c - between])) == [0, 2, 0]


def test_constant_segment() -> None:
    ew = EarlyWarning().fit([5.0] * 20)
    assert ew.assess([5.0]).state == "clear"
    assert ew.assess([5.0]).z == (0.0,)
    up = ew.assess([5.01])
    assert up.state == "suspected" and up.z == (math.inf,)


def test_mostly_constant_segment_falls_back_to_mean_deviation() -> None:
    ew = EarlyWarning().fit([5.0] * 15 + [6.0] * 5)  # MAD 0
    assert ew.scale_ == pytest.approx(math.sqrt(math.pi / 2) * 5 / 20)
    assert ew.assess([5.5]).state == "clear"


def test_short_segments_are_insufficient() -> None:
    ew = EarlyWarning(min_segment=8).fit([1.0, 2.0, 3.0, np.nan, 4.0, 5.0, 6.0, 7.0])
    assert ew.n_segment_ == 7  # the gap does not count
    verdict = ew.assess([100.0])
    assert verdict.state == "insufficient"
    assert list(ew.alarms([100.0])) == [0]
    assert EarlyWarning().fit([]).assess([1.0]).state == "insufficient"


def test_missing_run_neither_raises_nor_withdraws() -> None:
    ew = EarlyWarning().fit(gaussian_segment())
    far = ew.center_ + 10.0 * ew.scale_
    assert ew.assess([far, np.nan]).state == "suspected"
    assert ew.assess([np.nan]).state == "clear"


def test_log_scale() -> None:
    ew = EarlyWarning(log=True).fit(np.exp(gaussian_segment() / 100.0))
    assert ew.log_
    assert ew.assess([math.exp(1.0)]).center == pytest.approx(math.exp(ew.center_))
    with pytest.raises(ValueError, match="runs: values must be positive"):
        ew.assess([-1.0])
    assert not EarlyWarning(log=True).fit([-1.0, 1.0] * 5).log_


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"false_alarm_rate": 0.0}, "false_alarm_rate"),
        ({"tail_quantile": 0.5}, "tail_quantile"),
        ({"tails": "cauchy"}, "tails"),
        ({"tail_slack": -1.0}, "tail_slack"),
        ({"min_segment": 1}, "min_segment"),
    ],
)
def test_bad_params_are_named(params: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        EarlyWarning(**params).fit(ONE_TO_NINE)


def test_bad_values_are_named() -> None:
    with pytest.raises(ValueError, match="segment"):
        EarlyWarning().fit([1.0, math.inf])
    with pytest.raises(ValueError, match="runs: at least one"):
        EarlyWarning().fit(ONE_TO_NINE).assess([])


def test_estimator_convention() -> None:
    ew = EarlyWarning(false_alarm_rate=0.002)
    assert clone(ew).get_params() == ew.get_params()
    assert not hasattr(ew, "center_")


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(8, 80),
    a=st.floats(1e-3, 1e3),
    b=st.floats(-1e4, 1e4),
    steps=st.lists(st.floats(-8, 8), min_size=1, max_size=5),
)
def test_decision_is_scale_and_shift_invariant(
    seed: int, n: int, a: float, b: float, steps: list[float]
) -> None:
    rng = np.random.default_rng(seed)
    segment = rng.standard_normal(n)
    runs = np.array(steps) + rng.standard_normal(len(steps))
    plain = EarlyWarning().fit(segment).assess(runs)
    moved = EarlyWarning().fit(a * segment + b).assess(a * runs + b)
    assert (moved.state, moved.rule, moved.direction, moved.runs) == (
        plain.state,
        plain.rule,
        plain.direction,
        plain.runs,
    )
    np.testing.assert_allclose(moved.z, plain.z, rtol=1e-6, atol=1e-6)


def test_false_alarm_rate_on_gaussian_noise_is_near_the_stated_rate() -> None:
    # 400 segments of 60-200 runs, each followed by 1 000 runs of the same noise
    # (about 600 alarms expected).  Taking the heaviest tail the slack allows
    # makes the rule conservative (measured: 0.78 of the stated rate); the
    # interval fails a rule 30 % more trigger-happy than that, or half as much.
    rate = 0.002
    rng = np.random.default_rng(20261201)
    alarms = runs = 0
    for _ in range(400):
        n = int(rng.integers(60, 201))
        ew = EarlyWarning(false_alarm_rate=rate).fit(rng.standard_normal(n))
        alarms += int(np.count_nonzero(ew.alarms(rng.standard_normal(1000))))
        runs += 1000
    assert 0.4 * rate < alarms / runs < rate


def test_fitted_tails_hold_student_t3_noise_near_the_stated_rate() -> None:
    # 300 segments of 60-200 runs of t3 noise, each followed by 1 000 runs of it
    # Measured: 1.9 times the stated rate with fitted tails (a hundred runs
    # cannot pin a t3 tail down), 12 times with Gaussian tails.
    rate = 0.002
    measured = {}
    for tails in ("student", "normal"):
        rng = np.random.default_rng(20261202)
        alarms = 0
        for _ in range(300):
            n = int(rng.integers(60, 201))
            ew = EarlyWarning(false_alarm_rate=rate, tails=tails).fit(rng.standard_t(3, n))
            alarms += int(np.count_nonzero(ew.alarms(rng.standard_t(3, 1000))))
        measured[tails] = alarms / 300_000
    assert measured["student"] < 2.5 * rate
    assert measured["normal"] > 6.0 * rate
