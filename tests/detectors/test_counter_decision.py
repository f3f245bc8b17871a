"""The clustered-counter check's decision rule (detectors/counter_decision.py and
``decision="pvalue"``): hand-checked statistics, the false-alarm rate it promises on data
drawn from its own null model, and the verdicts on runs of the check's test generator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import digamma, polygamma
from scipy.stats import t as student_t
from test_counters_check import baseline, run

from _counter_one_model import effective_blocks, excess_error_test, trimmed_mean_variance
from perfwatch.detectors.counter_decision import (
    VariancePrior,
    block_exceedances,
    deflate,
    excess_error_tests,
    familywise,
    moderated_ratio,
    pvalue_to_z,
    tail_inflation,
    variance_prior,
)
from perfwatch.detectors.counters import CounterRegressionCheck, CounterSamples


def test_trimmed_mean_variance_by_hand() -> None:
    # 1, 2, 3, 4: variance 5/3; lag-1 autocorrelation (0.75 - 0.25 + 0.75) / 5 = 0.25,
    # inflation 1.25 / 0.75; per block of 4: 5/3 / 4 x 5/3 = 25/36
    errors = np.array([1.0, 2.0, 3.0, 4.0])
    assert trimmed_mean_variance(errors, 0.0) == pytest.approx(25 / 36)
    assert effective_blocks(errors, 0.0) == pytest.approx(4 * 0.75 / 1.25)
    # trimming one of five winsorizes the largest to the next: 1, 2, 3, 4, 4
    trimmed = np.array([1.0, 2.0, 3.0, 4.0, 9.0])
    winsorized = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    centred = winsorized - winsorized.mean()
    rho = centred[:-1] @ centred[1:] / (centred @ centred)
    expected = np.var(winsorized, ddof=1) / (5 * 0.8**2) * (1 + rho) / (1 - rho)
    assert trimmed_mean_variance(trimmed, 0.2) == pytest.approx(expected)
    assert math.isnan(trimmed_mean_variance(np.array([1.0, 2.0]), 0.0))
    assert trimmed_mean_variance(np.full(6, 0.1), 0.2) == pytest.approx(0.0, abs=1e-20)


def test_excess_error_test_by_hand() -> None:
    # good errors 0.10, 0.12, 0.14 (sample variance 0.0004), no within-run variance:
    # z = (0.2 - 0.12) / sqrt(0.0004 x 4/3) = 2 sqrt(3), Student t with 2 df
    test = excess_error_test(0.2, 0.0, [0.10, 0.12, 0.14], [0.0, 0.0, 0.0])
    assert test.z == pytest.approx(2 * math.sqrt(3))
    assert test.df == pytest.approx(2.0)
    assert test.pvalue == pytest.approx(student_t.sf(2 * math.sqrt(3), 2))
    # a noisier run adds its own variance beyond the good runs' (0.0003 here)
    noisy = excess_error_test(0.2, 0.0003, [0.10, 0.12, 0.14], [0.0, 0.0, 0.0], 50.0)
    assert noisy.z == pytest.approx(0.08 / math.sqrt(0.0004 * 4 / 3 + 0.0003))
    # Satterthwaite, the run's own part given no more degrees of freedom than the good runs'
    between, own = 0.0004 * 4 / 3, 0.0003
    assert noisy.df == pytest.approx((between + own) ** 2 / ((between**2 + own**2) / 2))
    # one good run: no run-to-run variation to judge against, so neither z nor p
    single = excess_error_test(0.2, 0.0001, [0.1], [0.0001])
    assert math.isnan(single.pvalue) and math.isnan(single.z)


def test_variance_prior_by_hand() -> None:
    """Twelve models of four good runs (3 df each), with sample variances 0.5, 2, 8 and
    32 times their within-run variance 0.01 (three models each): Smyth's moments on the
    log ratios, the trigamma equation solved here by bracketing instead of Newton."""
    spreads = np.array([0.5, 2.0, 8.0, 32.0] * 3)
    # errors -1.5, -0.5, 0.5, 1.5 (x c) have sample variance 5/3 c²
    good = 0.2 + np.outer(np.sqrt(spreads * 0.01 * 3 / 5), [-1.5, -0.5, 0.5, 1.5])
    within = np.full(good.shape, 0.01)
    prior = variance_prior(good, within)
    logs = np.log(spreads) - digamma(1.5) + math.log(1.5)
    excess = np.var(logs, ddof=1) - polygamma(1, 1.5)
    d0 = 2 * brentq(lambda y: polygamma(1, y) - excess, 1e-3, 1e3)
    s0 = math.exp(logs.mean() + digamma(d0 / 2) - math.log(d0 / 2))
    assert prior.df == pytest.approx(d0, rel=1e-6)
    assert prior.ratio == pytest.approx(s0, rel=1e-6)
    # posterior ratio of the model at 32x: (d0 s0² + 3 x 32) / (d0 + 3)
    assert moderated_ratio(np.array([32.0]), np.array([3.0]), prior)[0] == pytest.approx(
        (d0 * s0 + 96) / (d0 + 3)
    )
    # equal ratios: less spread than 3 df alone give, one common ratio (d0 infinite)
    same = variance_prior(good[::4].repeat(4, axis=0), within)
    assert math.isinf(same.df) and same.ratio > 0
    assert moderated_ratio(np.array([3.0]), np.array([3.0]), same)[0] == same.ratio
    # too few models say nothing
    assert variance_prior(good[:5], within[:5]).df == 0.0


def test_moderated_test_by_hand() -> None:
    # good errors 0.10, 0.12, 0.14 (sample variance 0.0004 = 4x the within-run 0.0001,
    # 2 df), prior d0 = 6 at ratio 2: moderated ratio (12 + 8) / 8 = 2.5, so the
    # between-run variance is 0.00025 with 8 df
    prior = VariancePrior(6.0, 2.0)
    test = excess_error_test(0.2, 0.0001, [0.10, 0.12, 0.14], [0.0001] * 3, 50.0, prior)
    assert test.z == pytest.approx(0.08 / math.sqrt(0.00025 * 4 / 3))
    assert test.df == pytest.approx(8.0)
    assert test.pvalue == pytest.approx(student_t.sf(test.z, 8.0))


def test_the_moderated_false_alarm_rate_holds_under_its_prior() -> None:
    """Studies of 60 models whose between-run variances follow the prior's model (scaled
    inverse chi-square, d0 = 6, around 20 times the within-run variance), six good runs
    each: with the prior fitted to each study, p-values below 5% and 1% keep the level,
    and the fitted d0 and ratio lie near the truth."""
    rng = np.random.default_rng(11)
    pvalues, fitted = [], []
    within = np.full((60, 6), 1e-4)
    for _ in range(150):
        ratio = 20.0 * 6 / rng.chisquare(6, 60)
        runs = 0.05 + rng.normal(0, 1, (60, 7)) * np.sqrt(1e-4 * ratio)[:, None]
        prior = variance_prior(runs[:, 1:], within)
        fitted.append((prior.df, prior.ratio))
        _, pvalue, _ = excess_error_tests(
            runs[:, 0], np.full(60, 1e-4), runs[:, 1:], within, np.full(60, 50.0), prior
        )
        pvalues += list(pvalue)
    shares = {level: float(np.mean(np.array(pvalues) < level)) for level in (0.05, 0.01)}
    assert 0.04 <= shares[0.05] <= 0.06
    assert 0.007 <= shares[0.01] <= 0.013
    d0, ratio = np.median(fitted, axis=0)
    assert 3.0 < d0 < 12.0
    assert 15.0 < ratio < 27.0


@settings(max_examples=60, deadline=None)
@given(
    ratio=st.floats(0.01, 100.0),
    df=st.integers(1, 10),
    prior_df=st.floats(0.1, 50.0),
    prior_ratio=st.floats(0.01, 100.0),
)
def test_the_moderated_ratio_lies_between_the_models_and_the_priors(
    ratio: float, df: int, prior_df: float, prior_ratio: float
) -> None:
    moderated = moderated_ratio(
        np.array([ratio]), np.array([float(df)]), VariancePrior(prior_df, prior_ratio)
    )[0]
    assert (
        min(ratio, prior_ratio) * (1 - 1e-12) <= moderated <= max(ratio, prior_ratio) * (1 + 1e-12)
    )


def test_familywise_and_normal_scores() -> None:
    assert familywise([0.001, 0.2, math.nan], 10) == pytest.approx(0.01)
    assert familywise([0.3], 5) == 1.0
    assert math.isnan(familywise([math.nan], 3))
    assert pvalue_to_z(0.025) == pytest.approx(1.959964, abs=1e-6)
    assert deflate(0.025, 1.0) == 0.025
    assert deflate(0.025, 2.0) == pytest.approx(0.1635, abs=1e-4)  # P(Z > 0.98)
    assert tail_inflation([0.5] * 5) == 1.0  # too few to say
    assert tail_inflation(list(np.linspace(0.001, 0.999, 200))) == pytest.approx(1.0, abs=0.02)
    heavy = [1e-4] * 30 + list(np.linspace(0.05, 0.999, 170))
    assert tail_inflation(heavy) > 2.0


def test_the_false_alarm_rate_holds_under_its_null_model() -> None:
    """Runs whose errors differ by a run effect and by within-run noise, five good runs:
    the share of p-values below 5% and 1% stays at the level (Student t with k - 1 df is
    exact for the between-run part)."""
    rng = np.random.default_rng(7)
    pvalues = []
    for _ in range(4000):
        errors = 0.05 + rng.normal(0, 0.01, 6)
        within = [1e-6] * 6
        pvalues.append(excess_error_test(errors[0], within[0], list(errors[1:]), within[1:]).pvalue)
    shares = {level: float(np.mean(np.array(pvalues) < level)) for level in (0.05, 0.01)}
    assert 0.04 <= shares[0.05] <= 0.06
    assert 0.005 <= shares[0.01] <= 0.015


@settings(max_examples=60, deadline=None)
@given(
    good=st.lists(st.floats(0.01, 0.5), min_size=2, max_size=8),
    error=st.floats(0.0, 1.0),
    step=st.floats(0.001, 0.5),
)
@example(good=[0.5] * 5, error=0.0, step=0.0014648437500000017)  # p-values an ulp below 1
def test_a_larger_error_is_never_less_unusual(good: list[float], error: float, step: float) -> None:
    within = [1e-5] * len(good)
    prior = VariancePrior(5.0, 3.0) if len(good) % 2 else None  # moderated or not
    lower = excess_error_test(error, 1e-5, good, within, prior=prior)
    higher = excess_error_test(error + step, 1e-5, good, within, prior=prior)
    assert 0.0 <= lower.pvalue <= 1.0
    assert higher.z >= lower.z
    # Student t's upper tail near 1 is monotone only to an ulp or so in older scipy
    assert higher.pvalue <= lower.pvalue + 4 * math.ulp(lower.pvalue)


def test_pvalue_rule_flags_a_cpu_regression_and_passes_good_runs() -> None:
    runs = baseline(6)
    check = CounterRegressionCheck().fit(runs)
    for seed in (40, 41, 42):
        good = check.check(run(seed))
        assert good.status == "pass" and not good.regression
        assert good.pvalue is not None and good.pvalue >= 0.01
    bad = check.check(run(43, cpu_per_request=1.3))
    assert bad.regression and bad.status == "regression"
    assert bad.pvalue is not None and bad.pvalue < 0.01
    assert bad.z is not None and bad.z > 2.3
    assert bad.look_first[0] == "cpu"
    assert bad.blame[0][0] == "cpu"
    # look first names the counters whose own models miss by more than usual (blame
    # ranks every counter of the run)
    z = dict(bad.blame)
    assert all(z[name] > 0 for name in bad.look_first)
    assert any(value <= 0 for value in z.values())
    # the cluster's p-value is corrected for every model judged in the run
    top = bad.clusters[0]
    tests = sum(c.tests for c in bad.clusters)
    assert top.flagged and top.pvalue is not None
    assert top.run_pvalue == pytest.approx(min(1.0, top.pvalue * tests))
    document = bad.to_dict()
    assert document["status"] == "regression" and document["decision"] == "pvalue"
    assert document["clusters"][0]["familywise_pvalue"] == pytest.approx(top.run_pvalue)


def test_moderated_variances_lend_each_model_the_others_degrees_of_freedom() -> None:
    """With ``moderate_variance`` a small (5%) CPU regression is more unusual than with
    each model's own few good runs alone; good runs still pass, and the verdict is the
    same on a second fit."""
    runs = baseline(6)
    plain = CounterRegressionCheck().fit(runs)
    moderated = CounterRegressionCheck(moderate_variance=True).fit(runs)
    small = run(43, cpu_per_request=1.05)
    ours, theirs = moderated.check(small), plain.check(small)
    assert ours.regression and theirs.regression
    assert ours.pvalue is not None and theirs.pvalue is not None
    assert ours.pvalue < theirs.pvalue
    assert ours.look_first[0] == "cpu"
    for seed in (40, 41, 42):
        good = moderated.check(run(seed))
        assert not good.regression and good.pvalue is not None and good.pvalue >= 0.01
    again = CounterRegressionCheck(moderate_variance=True).fit(runs).check(small)
    assert again.to_dict() == ours.to_dict()


def test_a_one_run_baseline_gives_no_verdict() -> None:
    check = CounterRegressionCheck().fit(baseline(1))
    result = check.check(run(44, cpu_per_request=1.5))
    assert result.status == "insufficient_baseline"
    assert not result.regression and result.pvalue is None
    # the paper's figures stay visible
    assert result.max_error is not None and result.max_error > 0.1
    # nothing that reads as evidence: no z, no blame, nothing to look at first
    assert result.z is None and result.blame == [] and result.look_first == []
    assert all(c.z is None and c.pvalue is None and not c.flagged for c in result.clusters)
    document = result.to_dict()
    assert document["blame"] == [] and all(c["z"] is None for c in document["clusters"])
    # the clusters are ranked by the paper's excess error instead
    excess = [c.excess_error for c in result.clusters if c.excess_error is not None]
    assert excess == sorted(excess, reverse=True)
    moderated = CounterRegressionCheck(moderate_variance=True).fit(baseline(1))
    assert moderated.check(run(44, cpu_per_request=1.5)).status == "insufficient_baseline"
    threshold = CounterRegressionCheck(decision="threshold").fit(baseline(1))
    assert threshold.check(run(44, cpu_per_request=1.5)).status != "insufficient_baseline"


def test_run_level_counters_are_not_predictors() -> None:
    """A counter whose level differs between runs far more than within a run (a handle
    count) predicts nothing about a new run; it stays a dependent candidate."""
    rng = np.random.default_rng(3)

    def with_level(samples: CounterSamples) -> CounterSamples:
        level = 1000 + 100 * rng.normal() + rng.normal(0, 1, samples.values.shape[0])
        values = np.column_stack([samples.values, level])
        return CounterSamples([*samples.names, "handles"], values, samples.label)

    check = CounterRegressionCheck().fit([with_level(r) for r in baseline(4)])
    assert check.run_level_ == ["handles"]
    assert all("handles" not in members for members in check.clusters_)
    assert any("handles" in candidates for candidates in check.redundant_members_)


def test_block_exceedances_by_hand() -> None:
    # blocks x runs (target, good 1, good 2) x one model; quantile 0.5 = the 4th of 8 values
    blocks = np.array([[1.0, 1.0, 2.0], [5.0, 2.0, 3.0], [2.0, 3.0, 4.0], [math.nan, 4.0, 10.0]])[
        :, :, None
    ]
    exceeds = block_exceedances(blocks, 0.5)[:, :, 0]
    # target against both good runs (1 2 2 3 3 4 4 10: 3); good 1 against good 2
    # (2 3 4 10: 3); good 2 against good 1 (1 2 3 4: 2)
    np.testing.assert_array_equal(exceeds[:, 0], [0.0, 1.0, 0.0, math.nan])
    np.testing.assert_array_equal(exceeds[:, 1], [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(exceeds[:, 2], [0.0, 1.0, 1.0, 1.0])
    # one good run: its own blocks are its reference (1 2 3 at 0.5: 2)
    single = block_exceedances(np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])[:, :, None], 0.5)
    np.testing.assert_array_equal(single[:, :, 0], [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    level=st.floats(0.05, 0.95),
    power=st.floats(0.2, 3.0),
)
def test_block_exceedances_depend_only_on_the_order_of_the_errors(
    seed: int, level: float, power: float
) -> None:
    """Any increasing transformation of the block errors (a change of scale, a power)
    leaves every exceedance as it was; each lies in {0, 1} and NaN stays NaN."""
    rng = np.random.default_rng(seed)
    blocks = rng.gamma(2.0, 0.05, size=(12, 5, 3))
    blocks[rng.random(blocks.shape) < 0.1] = math.nan
    exceeds = block_exceedances(blocks, level)
    np.testing.assert_array_equal(block_exceedances(7.0 * blocks**power, level), exceeds)
    np.testing.assert_array_equal(np.isnan(exceeds), np.isnan(blocks))
    assert set(np.unique(exceeds[~np.isnan(exceeds)])) <= {0.0, 1.0}


def test_the_exceedance_score_flags_broken_relationships_and_passes_good_runs() -> None:
    """``tested_score="exceedance"`` judges the share of blocks beyond the good runs' 90%
    block-error quantile: good runs pass, a CPU regression and a rewired log counter
    (every mean unchanged) are flagged; the reported errors stay the trimmed means."""
    runs = baseline(6)
    check = CounterRegressionCheck(tested_score="exceedance").fit(runs)
    plain = CounterRegressionCheck().fit(runs)
    for seed in (40, 41, 42):
        good = check.check(run(seed))
        assert not good.regression and good.pvalue is not None and good.pvalue >= 0.01
    bad = check.check(run(43, cpu_per_request=1.3))
    assert bad.regression and bad.look_first[0] == "cpu"
    assert bad.max_error == plain.check(run(43, cpu_per_request=1.3)).max_error
    rewired = check.check(run(12, log_follows="disk"))
    assert rewired.regression and "log" in rewired.look_first[:2]
    one = CounterRegressionCheck(tested_score="exceedance").fit(baseline(1))
    assert one.check(run(44, cpu_per_request=1.5)).status == "insufficient_baseline"


def test_bad_decision_parameters_are_reported() -> None:
    with pytest.raises(ValueError, match="alpha"):
        CounterRegressionCheck(alpha=0.0).fit(baseline())
    with pytest.raises(ValueError, match="decision"):
        CounterRegressionCheck(decision="vote").fit(baseline())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tested_score"):
        CounterRegressionCheck(tested_score="mean").fit(baseline())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exceedance_quantile"):
        CounterRegressionCheck(exceedance_quantile=1.0).fit(baseline())
