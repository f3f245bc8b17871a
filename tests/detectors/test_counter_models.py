"""The clustered-counter check's per-model work in arrays (every candidate model, every
left-out run and every block statistic at once) equals the straightforward computation:
one least-squares fit per model per left-out run, one error and one test per model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from _counter_one_model import excess_error_test
from perfwatch.detectors.counter_decision import (
    VariancePrior,
    deflate,
    error_statistics,
    excess_error_tests,
)
from perfwatch.detectors.counter_steps import (
    block_means,
    correlation_inverse,
    correlation_matrix,
    fill_missing,
    percentage_errors,
    redundancy_analysis,
    shrink_correlation,
)
from perfwatch.detectors.counters import (
    CONSTANT_PER_RUN,
    REDUNDANT,
    CounterRegressionCheck,
    CounterSamples,
    _Correlations,
)

TOLERANCE = {"rel": 1e-9, "abs": 1e-9}


def straightforward_statistics(errors: np.ndarray, trim: float) -> tuple[float, float, float]:
    """Trimmed mean, its AR(1)-inflated sampling variance and effective blocks of one
    model's scored block errors (NaN dropped first), written out step by step."""
    errors = errors[~np.isnan(errors)]
    count = errors.size
    if count == 0:
        return math.nan, math.nan, 0.0
    kept = count - int(trim * count)
    ordered = np.sort(errors)
    mean = float(np.mean(ordered[:kept]))
    if count < 3:
        return mean, math.nan, float(count)
    winsorized = np.minimum(errors, ordered[kept - 1])
    centred = winsorized - winsorized.mean()
    total = float(np.sum(centred**2))
    if total <= count * (1e-12 * np.max(np.abs(winsorized))) ** 2:  # equal blocks
        return mean, 0.0, float(count)
    rho = min(max(float(np.sum(centred[:-1] * centred[1:])) / total, 0.0), 0.8)
    inflation = (1 + rho) / (1 - rho)
    variance = total / (count - 1) / (count * (kept / count) ** 2) * inflation
    return mean, variance, count / inflation


def block_errors() -> st.SearchStrategy[np.ndarray]:
    values = st.one_of(st.floats(0.0, 3.0), st.just(math.nan), st.just(0.25))
    return arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 6)), elements=values)


@settings(max_examples=150, deadline=None)
@given(errors=block_errors(), trim=st.sampled_from([0.0, 0.1, 0.2, 0.5]))
def test_block_statistics_of_many_models_equal_one_at_a_time(
    errors: np.ndarray, trim: float
) -> None:
    means, variances, blocks = error_statistics(errors, trim)
    for column in range(errors.shape[1]):
        expected = straightforward_statistics(errors[:, column], trim)
        got = (means[column], variances[column], blocks[column])
        for value, reference in zip(got, expected, strict=True):
            if math.isnan(reference):
                assert math.isnan(value)
            else:
                assert value == pytest.approx(reference, **TOLERANCE)


@settings(max_examples=100, deadline=None)
@given(
    good=arrays(
        np.float64,
        st.tuples(st.integers(1, 5), st.integers(1, 7)),
        elements=st.one_of(st.floats(0.0, 1.0), st.just(math.nan)),
    ),
    spread=st.floats(0.0, 0.01),
    prior=st.sampled_from([None, VariancePrior(4.0, 3.0), VariancePrior(math.inf, 2.0)]),
)
def test_tests_of_many_models_equal_one_at_a_time(
    good: np.ndarray, spread: float, prior: VariancePrior | None
) -> None:
    """Each row is a model; a NaN good error is a run that did not score it: the batch
    equals the single test on that model's scored runs only, moderated or not."""
    rng = np.random.default_rng(good.size)
    error = rng.uniform(0.0, 1.0, good.shape[0])
    variance = np.where(rng.random(good.shape[0]) < 0.2, math.nan, spread)
    good_variances = np.where(rng.random(good.shape) < 0.2, math.nan, spread / 2)
    blocks = rng.uniform(1.0, 40.0, good.shape[0])
    z, pvalue, df = excess_error_tests(error, variance, good, good_variances, blocks, prior)
    for i in range(good.shape[0]):
        scored = np.isfinite(good[i])
        one = excess_error_test(
            float(error[i]),
            float(variance[i]),
            list(good[i, scored]),
            list(good_variances[i, scored]),
            float(blocks[i]),
            prior,
        )
        for value, reference in ((z[i], one.z), (pvalue[i], one.pvalue), (df[i], one.df)):
            if math.isnan(reference):
                assert math.isnan(value)
            else:
                assert value == pytest.approx(reference, **TOLERANCE)


def runs_of(seed: int, count: int, observations: int = 200) -> list[CounterSamples]:
    """``count`` runs of 9 counters in three groups driven by shared AR(1) factors, with
    run-to-run level changes and gaps (a whole block missing in places)."""
    rng = np.random.default_rng(seed)
    loading = rng.uniform(0.5, 2.0, 9)
    level = rng.uniform(10, 500, 9)
    runs = []
    for number in range(count):
        factors = np.zeros((observations, 3))
        for t in range(1, observations):
            factors[t] = 0.8 * factors[t - 1] + 0.6 * rng.normal(size=3)
        driven = factors[:, np.arange(9) // 3] * loading
        shift = 1 + 0.03 * rng.normal(size=9)
        values = level * shift * (1 + 0.1 * driven + 0.03 * rng.normal(size=(observations, 9)))
        values[rng.integers(0, observations - 30) :][:25, rng.integers(0, 9)] = math.nan
        values[rng.random((observations, 9)) < 0.02] = math.nan
        runs.append(CounterSamples([f"c{i}" for i in range(9)], values, f"run {number}"))
    return runs


def blocks_of(run: CounterSamples, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Block means of the filled samples and of the observed ones (NaN: no real sample),
    for every sample (steady_state="off"), whole blocks only."""
    end = run.values.shape[0] // block * block
    raw = run.values[:end]
    values = block_means(fill_missing(run.values)[:end], block)
    observed = block_means((~np.isnan(raw)).astype(float), block) > 0
    return values, np.where(observed, values, np.nan)


def straightforward_model(
    fitted: np.ndarray,
    observed: np.ndarray,
    slices: list[slice],
    target: tuple[np.ndarray, np.ndarray],
    dependent: int,
    predictors: list[int],
    floor: float,
    trim: float,
) -> tuple[float, float, float, float]:
    """One model, fitted by least squares on all baseline blocks for the target and on
    the baseline without each run for that run: the target's error, the usual error
    (mean + 2 SD of the held-out runs' errors), z and p."""

    def fit_and_predict(rows: np.ndarray, new: np.ndarray) -> np.ndarray:
        design = np.column_stack([np.ones(int(rows.sum())), fitted[rows][:, predictors]])
        beta = np.linalg.lstsq(design, fitted[rows, dependent], rcond=None)[0]
        return np.column_stack([np.ones(new.shape[0]), new[:, predictors]]) @ beta

    everything = np.ones(fitted.shape[0], dtype=bool)
    good_errors, good_variances = [], []
    for run in slices:
        rows = everything.copy()
        rows[run] = False
        errors = percentage_errors(
            observed[run, dependent], fit_and_predict(rows, fitted[run]), floor
        )
        mean, variance, _ = straightforward_statistics(errors, trim)
        if math.isfinite(mean):
            good_errors.append(mean)
            good_variances.append(variance)
    values, seen = target
    errors = percentage_errors(seen[:, dependent], fit_and_predict(everything, values), floor)
    error, variance, blocks = straightforward_statistics(errors, trim)
    test = excess_error_test(error, variance, good_errors, good_variances, blocks)
    usual = float(np.mean(good_errors) + 2 * np.std(good_errors, ddof=1))
    return error, usual, test.z, test.pvalue


@pytest.mark.parametrize(("seed", "runs"), [(1, 4), (2, 5), (3, 3), (4, 4), (5, 6)])
def test_every_models_leave_one_run_out_scores_equal_separate_fits(seed: int, runs: int) -> None:
    """Every candidate's z (full model and the model without its strongest predictor), and
    the chosen model's error, usual error and p-value, from one least-squares fit per
    model and left-out run."""
    block, trim = 10, 0.2
    check = CounterRegressionCheck(steady_state="off", robust_fit=False, block=block)
    baseline = runs_of(seed, runs)
    target = runs_of(seed + 100, 1)[0]
    result = check.fit(baseline).check(target)
    prepared = [blocks_of(run, block) for run in baseline]
    fitted = np.vstack([values for values, _ in prepared])
    observed = np.vstack([seen for _, seen in prepared])
    edges = np.cumsum([0] + [values.shape[0] for values, _ in prepared])
    slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    target_blocks = blocks_of(target, block)
    column = {name: i for i, name in enumerate(check.names_)}
    scale = fitted.std(axis=0)

    compared = 0
    for cluster in result.clusters:
        if cluster.model == "none":
            continue
        members = [column[m] for m in check.clusters_[cluster.cluster]]
        for name, z in cluster.candidate_z.items():
            dependent = column[name]
            others = [m for m in members if m != dependent]
            floor = check.error_floor * float(np.mean(np.abs(fitted[:, dependent])))
            variants, left_out = [others], [None]
            if len(others) >= 2:
                # the strongest predictor by standardized coefficient, all blocks fitted
                design = np.column_stack([np.ones(fitted.shape[0]), fitted[:, others]])
                beta = np.linalg.lstsq(design, fitted[:, dependent], rcond=None)[0][1:]
                strongest = others[int(np.argmax(np.abs(beta * scale[others])))]
                variants.append([m for m in others if m != strongest])
                left_out.append(check.names_[strongest])
            scores = [
                straightforward_model(
                    fitted, observed, slices, target_blocks, dependent, v, floor, trim
                )
                for v in variants
            ]
            chosen = max(range(len(scores)), key=lambda v: scores[v][2])
            best = scores[chosen]
            assert z == pytest.approx(best[2], **TOLERANCE)
            if name == cluster.dependent:
                assert cluster.left_out == left_out[chosen]
                assert cluster.error == pytest.approx(best[0], **TOLERANCE)
                assert cluster.good_run_error == pytest.approx(best[1], **TOLERANCE)
                assert cluster.z == pytest.approx(best[2], **TOLERANCE)
                pvalue = deflate(best[3], result.tail_inflation)
                assert cluster.pvalue == pytest.approx(pvalue, **TOLERANCE)
            compared += 1
    assert compared >= 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_removals_equal_a_plain_redundancy_analysis_of_the_stacked_samples(seed: int) -> None:
    """The fit's correlations pooled from each run's cross-products, and its redundancy
    steps' R^2 and strongest coefficients, equal a redundancy analysis of the correlation
    matrix of all baseline samples stacked (the fit's tiny ridge, adjusted R^2)."""
    rng = np.random.default_rng(seed)
    groups, count = 4, 40
    group, loading = rng.integers(0, groups, count), rng.uniform(0.5, 2.0, count)
    noise, level = rng.choice([0.05, 0.3, 1.0], count), rng.uniform(10, 1000, count)
    baseline = []
    for number in range(4):
        factors = rng.normal(size=(150, groups)).cumsum(axis=0) * 0.3
        driven = loading * factors[:, group] + noise * rng.normal(size=(150, count))
        values = level * (1 + 0.1 * driven) * (1 + 0.05 * number)
        baseline.append(CounterSamples([f"c{i:02d}" for i in range(count)], values))
    check = CounterRegressionCheck(steady_state="off", identity_r2=None).fit(baseline)
    samples = np.vstack([run.values for run in baseline])
    correlation = shrink_correlation(correlation_matrix(samples), 1e-9)
    steps = redundancy_analysis(correlation, 0.9, observations=samples.shape[0])
    removed = [r for r in check.removed_ if r.reason == REDUNDANT]
    assert [r.counter for r in removed] == [f"c{step.index:02d}" for step in steps]
    assert len(steps) >= 3
    for removal, step in zip(removed, steps, strict=True):
        assert removal.r_squared == pytest.approx(step.r_squared, **TOLERANCE)
        strongest = sorted(step.coefficients.items(), key=lambda item: (-abs(item[1]), item[0]))
        expected = {f"c{index:02d}": beta for index, beta in strongest[:3]}
        assert removal.explained_by.keys() == expected.keys()
        for name, beta in expected.items():
            assert removal.explained_by[name] == pytest.approx(beta, **TOLERANCE)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_constant_and_usually_zero_counters_equal_the_stacked_samples(seed: int) -> None:
    """The fit takes constant counters from each run's extremes and screens usually-zero
    counters with each run's lower quarter: the same counters as ``np.ptp`` and the
    median against the mean of all baseline samples stacked. The counters sit at and
    around the boundary: constant in each run at another level (a spread from the
    largest minimum would call it constant), zero in most runs only (a screen by any
    run's lower quarter instead of the smallest would miss it), zero for about half of
    the samples, constant in all runs but one, constant everywhere."""
    rng = np.random.default_rng(seed)
    runs, rows = 4, 120
    names = [f"c{i:02d}" for i in range(24)]
    baseline = []
    for number in range(runs):
        driver = rng.normal(size=(rows, 1)).cumsum(axis=0)
        values = 50 + 5 * driver + rng.normal(size=(rows, len(names)))
        zero_share = rng.uniform(0.3, 0.7, size=len(names))
        zero_share[: len(names) // 2] = 0.0  # the first half: zeros in no run
        for column, share in enumerate(zero_share):
            if column % 3 == number % 3:
                values[rng.random(rows) < share, column] = 0.0
        values[:, 5] = 0.0 if number < 3 else values[:, 5]  # zero in three runs of four
        values[:, 6] = 0.5 * values[:, 6] * (rng.random(rows) < 0.5)  # zero about half
        values[:, 7] = 3.0  # constant everywhere
        values[:, 8] = 3.0 if number else values[:, 8]  # constant in all runs but one
        values[:, 9] = 3.0 + number  # constant in each run, at another level in each
        baseline.append(CounterSamples(names, values))
    check = CounterRegressionCheck(steady_state="off", identity_r2=None, redundancy_r2=None)
    check.fit(baseline)
    samples = np.vstack([run.values for run in baseline])
    constant = {names[i] for i in np.flatnonzero(np.ptp(samples, axis=0) <= 1e-12 * 50)}
    assert set(check.baseline_constant_) == constant == {"c07"}
    per_run = [r.counter for r in check.removed_ if r.reason == CONSTANT_PER_RUN]
    assert per_run == ["c09"]
    modelled = [name for members in check.clusters_ for name in members]
    modelled += [name for redundant in check.redundant_members_ for name in redundant]
    magnitude = np.abs(samples[:, [names.index(name) for name in modelled]])
    below = np.median(magnitude, axis=0) < check.error_floor * magnitude.mean(axis=0)
    expected = {name for name, low in zip(modelled, below, strict=True) if low}
    assert check.usually_zero_ == expected
    assert "c05" in expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_inverse_downdated_to_fewer_counters_equals_a_fresh_inverse(seed: int) -> None:
    """The redundancy step takes the identity step's inverse downdated to the counters
    the identities left, while no counter is explained nearly exactly by the others:
    equal to the inverse of the remaining counters' matrix (to 1e-9). With an exact
    identity (variance inflation ~1e9 under the ridge) the downdate would be off by far
    more, and the matrix is inverted afresh."""
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(400, 5))
    values = factors @ rng.normal(size=(5, 30)) + rng.normal(size=(400, 30))
    near = values.copy()
    near[:, 0] = values[:, 1] + values[:, 2] + 0.05 * rng.normal(size=400)  # R^2 ~ 0.9995
    exact = values.copy()
    exact[:, 0] = values[:, 1] + values[:, 2]
    everything, rest = np.arange(30), np.arange(1, 30)
    for samples, inversions in ((near, 1), (exact, 2)):
        pooled = _Correlations(samples, everything)
        _, full = pooled.shrunk(everything, 1e-9)
        correlation, inverse = pooled.shrunk(rest, 1e-9)
        assert pooled.inversions == inversions
        plain = shrink_correlation(correlation_matrix(samples[:, rest]), 1e-9)
        np.testing.assert_allclose(correlation, plain, rtol=0, atol=1e-12)
        fresh = correlation_inverse(correlation)  # what the step inverted before
        np.testing.assert_allclose(inverse, fresh, rtol=1e-9, atol=1e-9 * np.abs(fresh).max())
        downdate = full[1:, 1:] - np.outer(full[1:, 0], full[0, 1:]) / full[0, 0]
        error = np.abs(downdate - fresh).max() / np.abs(fresh).max()
        assert error < 1e-9 if inversions == 1 else error > 1e-9
