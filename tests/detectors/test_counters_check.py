"""The clustered-counter check as a whole: verdicts, the documented edge cases, the
result object, calibration and determinism."""

from __future__ import annotations

import math
import re

import numpy as np
import orjson
import pytest
import statsmodels.api as sm
from sklearn.base import clone

from perfwatch.detectors.counter_steps import percentage_error
from perfwatch.detectors.counters import (
    CLOCK,
    CONSTANT_IN_BASELINE,
    CONSTANT_PER_RUN,
    IDENTITY,
    MISSING_IN_BASELINE_RUN,
    MISSING_IN_TARGET,
    MOSTLY_MISSING,
    NOT_IN_BASELINE,
    REDUNDANT,
    ZERO_VARIANCE,
    CounterRegressionCheck,
    CounterSamples,
    PreparedRuns,
)

NAMES = ["cpu", "requests", "net", "disk", "log", "heap"]


def _ar1(rng: np.random.Generator, n: int, phi: float = 0.8) -> np.ndarray:
    series = np.zeros(n)
    for t in range(1, n):
        series[t] = phi * series[t - 1] + rng.normal() * math.sqrt(1 - phi**2)
    return series


def run(seed: int, n: int = 300, *, cpu_per_request: float = 1.0, log_follows: str = "load"):
    """Counters driven by two latent processes: load (cpu, requests, net) and a second
    workload (disk, log, heap). ``cpu_per_request`` scales CPU at the same load;
    ``log_follows="disk"`` rewires log to the second workload's opposite."""
    rng = np.random.default_rng(seed)
    load = 1 + 0.2 * _ar1(rng, n)
    other = 1 + 0.3 * _ar1(rng, n)
    noise = lambda scale: 1 + scale * rng.normal(size=n)  # noqa: E731
    log = 20 * (load if log_follows == "load" else 2 - other) * noise(0.03)
    values = np.column_stack(
        [
            40 * load * cpu_per_request * noise(0.03),
            100 * load * noise(0.03),
            500 * load * noise(0.05),
            80 * other * noise(0.03),
            log,
            300 * other * noise(0.03),
        ]
    )
    return CounterSamples(list(NAMES), values, label=f"run {seed}")


def baseline(count: int = 3, **kwargs) -> list[CounterSamples]:
    return [run(seed, **kwargs) for seed in range(count)]


def with_counter(samples: CounterSamples, name: str, values: np.ndarray) -> CounterSamples:
    return CounterSamples(
        [*samples.names, name], np.column_stack([samples.values, values]), samples.label
    )


def test_good_run_passes_and_cpu_regression_is_flagged() -> None:
    check = CounterRegressionCheck(decision="threshold", threshold=0.1).fit(baseline())
    good = check.check(run(10))
    assert not good.regression
    bad = check.check(run(11, cpu_per_request=1.5))
    assert bad.regression
    assert bad.flagged_clusters[0].dependent == "cpu" or "cpu" in bad.flagged_clusters[0].members
    assert bad.look_first[0] in {"cpu", "requests", "net"}
    assert bad.max_excess_error is not None and bad.max_excess_error > 0.1


def test_relationship_change_with_unchanged_means_is_flagged() -> None:
    check = CounterRegressionCheck(decision="threshold", threshold=0.1).fit(baseline())
    rewired = run(12, log_follows="disk")
    base_log = np.concatenate([r.column("log") for r in baseline()])
    assert abs(rewired.column("log").mean() / base_log.mean() - 1) < 0.05
    assert check.check(rewired).regression


def test_a_disturbance_of_a_few_blocks_is_trimmed_but_a_lasting_one_is_not() -> None:
    """A backup copy on the test machine sends five times the usual network traffic for
    15 of 300 samples (two blocks): it dominates a plain mean of the block errors (the
    models predict the load from the network), not the trimmed one."""
    check = CounterRegressionCheck(decision="threshold", threshold=0.1).fit(baseline())
    plain = CounterRegressionCheck(decision="threshold", threshold=0.1, error_trim=0.0).fit(
        baseline()
    )
    disturbed = run(13)
    values = disturbed.values.copy()
    values[140:155, NAMES.index("net")] *= 5.0
    disturbed = CounterSamples(disturbed.names, values, disturbed.label)
    assert plain.check(disturbed).regression
    assert not check.check(disturbed).regression
    lasting = values.copy()
    lasting[60:, NAMES.index("cpu")] *= 1.5  # the last four fifths of the run
    assert check.check(CounterSamples(disturbed.names, lasting, "lasting")).regression


def test_reported_model_is_the_statsmodels_ols_fit_and_its_error() -> None:
    check = CounterRegressionCheck(
        steady_state="off", block=1, decouple_strongest=False, robust_fit=False
    )
    runs = baseline()
    target = run(13, cpu_per_request=1.3)
    result = check.fit(runs).check(target)
    cluster = next(c for c in result.clusters if c.model == "ols")
    predictors = list(cluster.coefficients)
    pooled = np.vstack([r.values for r in runs])
    y = pooled[:, NAMES.index(cluster.dependent)]
    design = sm.add_constant(pooled[:, [NAMES.index(p) for p in predictors]])
    fitted = sm.OLS(y, design).fit()
    assert cluster.intercept == pytest.approx(fitted.params[0])
    assert list(cluster.coefficients.values()) == pytest.approx(list(fitted.params[1:]))
    assert cluster.r_squared == pytest.approx(fitted.rsquared)
    new = sm.add_constant(target.values[:, [NAMES.index(p) for p in predictors]])
    floor = 0.1 * np.mean(np.abs(y))
    actual = target.column(cluster.dependent)
    expected = percentage_error(actual, fitted.predict(new), float(floor), 0.2)
    assert cluster.error == pytest.approx(expected)
    # the trimmed mean: the worst fifth of the samples' percentage errors left out
    errors = np.sort(np.abs(actual - fitted.predict(new)) / np.maximum(np.abs(actual), floor))
    assert cluster.error == pytest.approx(errors[: errors.size - errors.size // 5].mean())


def test_seed_literal_selects_by_ks_and_flags_on_the_raw_error() -> None:
    check = CounterRegressionCheck.seed_literal(threshold=0.1, redundancy_r2=None)
    check.fit(baseline())
    result = check.check(run(14, cpu_per_request=1.6))
    assert result.parameters["dependent_selection"] == "ks"
    cpu_cluster = next(c for c in result.clusters if "cpu" in c.members)
    assert cpu_cluster.dependent == "cpu"  # its distribution moved most
    assert cpu_cluster.excess_error == cpu_cluster.error
    assert result.regression


def test_the_literal_redundancy_analysis_hides_a_cpu_regression() -> None:
    runs, target = baseline(), run(28, cpu_per_request=1.5)
    literal = CounterRegressionCheck(redundant_dependents=False).fit(runs)
    assert all("cpu" not in members for members in literal.clusters_)  # removed: redundant
    assert not literal.check(target).regression
    default = CounterRegressionCheck().fit(runs)
    assert any("cpu" in candidates for candidates in default.redundant_members_)
    assert default.check(target).regression


def test_lone_counters_under_each_rule() -> None:
    rng = np.random.default_rng(20)
    runs = [with_counter(r, "lonely", 50 + rng.normal(size=300)) for r in baseline()]
    target = with_counter(run(15), "lonely", 50 + rng.normal(size=300))
    # without the redundancy analysis and with every cut allowed, Calinski-Harabasz
    # peaks at six clusters of seven counters
    by_rule = {
        rule: CounterRegressionCheck(singletons=rule, redundancy_r2=None, max_clusters=6).fit(runs)
        for rule in ("merge", "intercept", "skip")
    }
    assert sorted(map(sorted, by_rule["merge"].clusters_)) == [
        ["cpu", "log", "net", "requests"],
        ["disk", "heap", "lonely"],
    ]
    intercept = by_rule["intercept"].check(target).clusters
    skip = by_rule["skip"].check(target).clusters
    lone = [c for c in intercept if len(c.members) == 1]
    assert len(lone) == 5 and all(c.model == "intercept" for c in lone)
    # an intercept-only "model" of a load counter measures the load's own variation,
    # ten times the error of the same counters modelled on each other
    merged = by_rule["merge"].check(target).clusters
    worst_merged = max(c.error for c in merged if c.error is not None)
    assert max(c.error for c in lone if c.error is not None) > 5 * worst_merged
    assert all(c.model == "none" and c.error is None for c in skip if len(c.members) == 1)


def test_constant_target_counter_and_zeros_in_the_dependent() -> None:
    runs = baseline()
    target = run(16)
    target.values[:, NAMES.index("disk")] = 80.0  # flat in the target only
    target.values[::7, NAMES.index("cpu")] = 0.0  # idle samples
    result = CounterRegressionCheck().fit(runs).check(target)
    assert all(c.error is None or math.isfinite(c.error) for c in result.clusters)
    assert all(c.error is None or c.error < 2 for c in result.clusters)


def test_a_target_no_cluster_model_can_be_judged_on_is_an_error_not_a_pass() -> None:
    """The target shares with the baseline only a counter that was constant there: nothing
    can be modelled, and a pass would read as a clean bill of health."""
    runs = [with_counter(r, "errors", np.zeros(300)) for r in baseline()]
    only = CounterSamples(["errors"], (np.arange(300) % 50 == 0).astype(float)[:, None], "t")
    check = CounterRegressionCheck().fit(runs)
    with pytest.raises(ValueError, match=r"t: no cluster model can be judged .* \(errors\)"):
        check.check(only)
    with pytest.raises(ValueError, match="errors: constant \\(0\\) in the baseline but varies"):
        check.check(only)
    threshold = CounterRegressionCheck(decision="threshold").fit(runs)
    with pytest.raises(ValueError, match="no cluster model can be judged"):
        threshold.check(only)


def test_a_target_sharing_no_counter_names_both_sides() -> None:
    other = CounterSamples(["gc_pauses", "queue"], np.ones((300, 2)), "other.csv")
    with pytest.raises(ValueError) as raised:
        CounterRegressionCheck().fit(baseline()).check(other)
    assert str(raised.value) == (
        "other.csv: no counter of the baseline to check (the target records gc_pauses, "
        "queue; the baseline models cpu, disk, heap and 3 more)"
    )


def test_a_counter_that_is_usually_zero_is_never_the_dependent() -> None:
    rng = np.random.default_rng(21)

    def bursts() -> np.ndarray:
        return np.where(rng.random(300) < 0.05, rng.exponential(100, 300), 0.0)

    runs = [with_counter(r, "pages", bursts()) for r in baseline()]
    target = with_counter(run(17), "pages", 3 * bursts())
    check = CounterRegressionCheck().fit(runs)
    assert "pages" in check.usually_zero_
    assert all(c.dependent != "pages" for c in check.check(target).clusters)


def test_runs_of_different_lengths() -> None:
    runs = [run(0, n=500), run(1, n=260), run(2, n=340)]
    result = CounterRegressionCheck().fit(runs).check(run(18, n=150))
    assert result.baseline_observations == 500 + 260 + 340
    assert result.target_observations == 150
    assert not result.regression


def test_counters_present_on_one_side_only() -> None:
    runs = baseline()
    runs[1] = with_counter(runs[1], "only_in_run_2", np.ones(300))
    runs = [with_counter(r, "dropped_later", r.column("cpu") * 2 + 1) for r in runs]
    target = with_counter(run(19), "new_counter", np.arange(300.0))
    target = CounterSamples(
        [n for n in target.names if n != "heap"],
        target.values[:, [i for i, n in enumerate(target.names) if n != "heap"]],
    )
    check = CounterRegressionCheck().fit(runs)
    reasons = {r.counter: r.reason for r in check.check(target).removed}
    assert reasons["only_in_run_2"] == MISSING_IN_BASELINE_RUN
    assert reasons["new_counter"] == NOT_IN_BASELINE
    assert reasons["heap"] == MISSING_IN_TARGET


def without(samples: CounterSamples, name: str) -> CounterSamples:
    keep = [i for i, n in enumerate(samples.names) if n != name]
    return CounterSamples([samples.names[i] for i in keep], samples.values[:, keep], samples.label)


def test_a_target_without_a_part_of_an_identity_is_judged_by_the_identity() -> None:
    """total = cpu + log is removed as a linear identity of its parts. A target that
    lacks cpu still records total, which carries the CPU regression: the check fits
    again on the target's counters, judges total, and says why."""

    def with_total(samples: CounterSamples) -> CounterSamples:
        return with_counter(samples, "total", samples.column("cpu") + samples.column("log"))

    check = CounterRegressionCheck().fit([with_total(r) for r in baseline(5)])
    assert {r.counter: r.reason for r in check.removed_}["total"] == IDENTITY
    slower = without(with_total(run(43, cpu_per_request=1.5)), "cpu")
    result = check.check(slower)
    assert result.regression and result.look_first[0] == "total"
    missing = next(r for r in result.removed if r.counter == "cpu")
    assert missing.reason == MISSING_IN_TARGET
    assert "fitted again without it, so total" in missing.detail
    assert {r.counter: r.reason for r in result.removed}.get("total") != IDENTITY
    # a good run without cpu passes, and a target with every counter is judged as before
    assert not check.check(without(with_total(run(40)), "cpu")).regression
    complete = check.check(with_total(run(43, cpu_per_request=1.5)))
    assert complete.regression and "cpu" in complete.look_first
    assert {r.counter: r.reason for r in complete.removed}["total"] == IDENTITY
    # a missing counter that no identity needs changes nothing in the fit
    without_disk = {r.counter: r for r in check.check(without(slower, "disk")).removed}
    assert without_disk["disk"].reason == MISSING_IN_TARGET


def only(samples: CounterSamples, names: list[str]) -> CounterSamples:
    columns = np.column_stack([samples.column(name) for name in names])
    return CounterSamples(names, columns, samples.label)


def test_a_target_with_a_few_of_the_counters_is_judged_by_models_of_those() -> None:
    """A target that records only cpu and requests: the models fitted on every counter
    explain them by counters it lacks, and would judge it by their means. Fitted again
    on its two counters, cpu per request is modelled and its regression seen."""
    check = CounterRegressionCheck().fit(baseline(5))
    pair = ["cpu", "requests"]
    slower = check.check(only(run(43, cpu_per_request=1.1), pair))
    assert slower.regression and "cpu" in slower.look_first
    missing = {r.counter: r for r in slower.removed}
    assert set(missing) >= {"net", "disk", "log", "heap"}
    assert all("fitted again without it" in missing[name].detail for name in ("net", "heap"))
    assert not check.check(only(run(40), pair)).regression


def test_a_missing_counter_that_no_model_uses_changes_no_model() -> None:
    def with_pid(samples: CounterSamples) -> CounterSamples:
        return with_counter(samples, "pid", np.full(samples.values.shape[0], 4242.0))

    check = CounterRegressionCheck().fit([with_pid(r) for r in baseline(5)])
    missing = {r.counter: r for r in check.check(run(43, cpu_per_request=1.5)).removed}
    assert missing["pid"].reason == MISSING_IN_TARGET
    assert "fitted again" not in missing["pid"].detail


def test_missing_samples() -> None:
    rng = np.random.default_rng(22)
    runs = baseline()
    for r in runs:
        r.values[rng.random(r.values.shape) < 0.01] = np.nan
    runs[0].values[:200, NAMES.index("net")] = np.nan  # 67% missing in one run
    target = run(23)
    target.values[rng.random(target.values.shape) < 0.01] = np.nan
    result = CounterRegressionCheck().fit(runs).check(target)
    assert not result.regression
    assert {r.counter: r.reason for r in result.removed}["net"] == MOSTLY_MISSING
    assert all(c.error is None or math.isfinite(c.error) for c in result.clusters)


def test_run_identities_clocks_identities_and_constants_are_removed() -> None:
    runs = []
    for seed, r in enumerate(baseline()):
        r = with_counter(r, "pid", np.full(300, 1000.0 + seed))
        r = with_counter(r, "elapsed", 5.0 * np.arange(300) + 17 * seed)
        r = with_counter(r, "total", r.column("cpu") + r.column("disk"))
        r = with_counter(r, "priority", np.full(300, 8.0))
        runs.append(with_counter(r, "errors", np.zeros(300)))
    target = run(24)
    target = with_counter(target, "pid", np.full(300, 4242.0))
    target = with_counter(target, "elapsed", 5.0 * np.arange(300))
    target = with_counter(target, "total", target.column("cpu") + target.column("disk"))
    target = with_counter(target, "priority", np.full(300, 8.0))
    target = with_counter(target, "errors", (np.arange(300) % 50 == 0).astype(float))
    result = CounterRegressionCheck().fit(runs).check(target)
    reasons = {r.counter: r.reason for r in result.removed}
    assert reasons["pid"] == CONSTANT_PER_RUN
    assert reasons["elapsed"] == CLOCK
    assert IDENTITY in {reasons.get(n) for n in ("total", "cpu", "disk")}
    assert reasons["priority"] == ZERO_VARIANCE
    assert reasons["errors"] == CONSTANT_IN_BASELINE
    assert "errors" in result.look_first or not result.regression


def test_more_counters_than_observations_still_runs() -> None:
    rng = np.random.default_rng(25)
    factors = rng.normal(size=(60, 5))
    loadings = rng.normal(size=(5, 150))

    def sample() -> CounterSamples:
        values = 100 + factors @ loadings + rng.normal(size=(60, 150))
        return CounterSamples([f"c{i:03d}" for i in range(150)], values)

    check = CounterRegressionCheck(block=1, steady_state="off").fit([sample()])
    result = check.check(sample())
    assert result.clusters
    assert all(c.error is None or math.isfinite(c.error) for c in result.clusters)


def test_result_is_json_ready_stable_and_deterministic() -> None:
    runs, target = baseline(), run(26, cpu_per_request=1.4)
    first = CounterRegressionCheck().fit(runs).check(target).to_dict()
    again = CounterRegressionCheck().fit(runs).check(target).to_dict()
    assert orjson.dumps(first) == orjson.dumps(again)  # no NaN: orjson would refuse inf
    assert list(first) == [
        "regression",
        "status",
        "decision",
        "alpha",
        "pvalue",
        "z",
        "tail_inflation",
        "threshold",
        "threshold_source",
        "max_error",
        "max_excess_error",
        "look_first",
        "blame",
        "clusters",
        "removed",
        "baseline",
        "target",
        "parameters",
    ]
    order = [3, 0, 5, 1, 4, 2]

    def shuffled(r: CounterSamples) -> CounterSamples:
        return CounterSamples([r.names[i] for i in order], r.values[:, order], r.label)

    permuted = CounterRegressionCheck().fit([shuffled(r) for r in runs]).check(shuffled(target))
    assert orjson.dumps(permuted.to_dict()) == orjson.dumps(first)


def test_the_default_cut_is_searched_over_up_to_half_the_counters() -> None:
    rng = np.random.default_rng(29)
    runs = [with_counter(r, "lonely", 50 + rng.normal(size=300)) for r in baseline()]
    check = CounterRegressionCheck(singletons="skip", redundancy_r2=None).fit(runs)
    assert len(check.clusters_) <= 7 // 2
    assert int(np.nanargmax(check.ch_scores_)) == 6  # where it would have cut


def test_calibration_is_leave_one_out_plus_the_margin() -> None:
    runs = baseline(4)
    check = CounterRegressionCheck(calibration_margin=0.02).calibrate(runs)
    expected = [
        CounterRegressionCheck(decision="threshold")
        .fit(runs[:i] + runs[i + 1 :])
        .check(runs[i])
        .max_excess_error
        for i in range(4)
    ]
    assert check.calibration_ is not None
    assert check.calibration_["largest_excess_errors"] == pytest.approx(expected)
    assert check.effective_threshold == pytest.approx(max(max(expected), 0) + 0.02)
    result = check.fit(runs).check(run(27, cpu_per_request=1.5))
    assert result.threshold_source == "calibrated" and result.regression


@pytest.mark.parametrize("selection", ["largest_excess", "beyond_baseline", "ks"])
def test_calibration_prepares_each_run_once_and_changes_nothing(selection: str) -> None:
    """The folds of a calibration share each run's preparation and leave out what is
    only reported (KS tests, the dependents' OLS, p-values; the baseline spread unless
    the dependent is chosen by it): every fold's result is exactly that of a complete fit
    and check of its own (calibration judges by the threshold rule), and the estimator's
    own fit is unaffected."""
    runs = baseline(4)
    prepared = PreparedRuns()
    check = CounterRegressionCheck(dependent_selection=selection)
    check.calibrate(runs, prepared_runs=prepared)
    for i in range(4):
        own = CounterRegressionCheck(decision="threshold", dependent_selection=selection)
        own.fit(runs[:i] + runs[i + 1 :])
        alone = own.check(runs[i])
        assert check.calibration_["largest_excess_errors"][i] == (alone.max_excess_error or 0.0)
    assert len(prepared) == 4 + 4  # the runs as baseline runs, and as held-out targets
    # a fit on the same runs after it, taking the runs the calibration prepared
    fitted = check.fit(runs, prepared_runs=prepared).check(run(27)).to_dict()
    fresh = CounterRegressionCheck(decision="threshold", dependent_selection=selection)
    fresh_result = fresh.fit(runs).check(run(27)).to_dict()
    assert fitted["clusters"] == fresh_result["clusters"]
    assert fitted["removed"] == fresh_result["removed"]
    assert check.usually_zero_ == fresh.usually_zero_
    assert check.baseline_constant_ == fresh.baseline_constant_


def test_a_fit_without_report_judges_alike_and_leaves_out_what_is_only_reported() -> None:
    runs, target = baseline(3), run(27, cpu_per_request=1.3)
    full = CounterRegressionCheck(decision="threshold").fit(runs).check(target)
    lean_check = CounterRegressionCheck(decision="threshold").fit(runs, report=False)
    lean = lean_check.check(target)
    assert (lean.regression, lean.max_excess_error) == (full.regression, full.max_excess_error)
    assert [c.excess_error for c in lean.clusters] == [c.excess_error for c in full.clusters]
    assert all(math.isnan(c.ks_pvalue) for c in lean.clusters)
    assert not any(math.isnan(c.ks_pvalue) for c in full.clusters)


def test_prepared_runs_are_shared_only_between_equal_preparations() -> None:
    """One ``PreparedRuns`` passed to several fits and checks prepares each run once per
    set of counters and preparation parameters, and gives every check the result of a
    fresh preparation, also when checks with another block size share it."""
    runs = baseline(3)
    target = run(27, cpu_per_request=1.2)
    shared = PreparedRuns()
    for block in (10, 5, 10):
        check = CounterRegressionCheck(block=block)
        reused = check.fit(runs, prepared_runs=shared).check(target, prepared_runs=shared)
        fresh = clone(check).fit(runs).check(target)
        assert reused.to_dict() == fresh.to_dict()
    # three baseline runs and the target, for each of the two block sizes
    assert len(shared) == 2 * 4


def test_bad_use_is_reported() -> None:
    with pytest.raises(RuntimeError, match="fit"):
        CounterRegressionCheck().check(run(0))
    with pytest.raises(ValueError, match="singletons"):
        CounterRegressionCheck(singletons="drop").fit(baseline())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least"):
        CounterRegressionCheck().fit([run(0, n=20)])
    with pytest.raises(ValueError, match="two good runs"):
        CounterRegressionCheck().calibrate([run(0)])
    with pytest.raises(ValueError, match="duplicate counter names"):
        CounterSamples(["a", "a"], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="2 names but 3"):
        CounterSamples(["a", "b"], np.zeros((3, 3)))


def test_workload_models_are_each_counter_on_the_workload_counters_alone() -> None:
    check = CounterRegressionCheck(
        steady_state="off", block=1, robust_fit=False, workload=["req*"]
    ).fit(baseline())
    result = check.check(run(13, cpu_per_request=1.3))
    (models,) = [c for c in result.clusters if c.workload]
    assert models.cluster == len(check.clusters_)
    assert models.members == ["requests"]
    candidates = models.redundant_members
    assert "requests" not in candidates and set(candidates) <= set(NAMES)
    assert models.tests == len(candidates), "no variant without the strongest predictor"
    assert models.left_out is None and list(models.coefficients) == ["requests"]
    pooled = np.vstack([r.values for r in baseline()])
    y = pooled[:, NAMES.index(models.dependent)]
    fitted = sm.OLS(y, sm.add_constant(pooled[:, NAMES.index("requests")])).fit()
    assert models.intercept == pytest.approx(fitted.params[0])
    assert models.coefficients["requests"] == pytest.approx(fitted.params[1])
    assert models.to_dict()["workload"] is True
    plain = CounterRegressionCheck(steady_state="off", block=1, robust_fit=False)
    without = plain.fit(baseline()).check(run(13, cpu_per_request=1.3))
    assert not any(c.workload for c in without.clusters)
    assert len(without.clusters) == len(result.clusters) - 1


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (["nope*"], "workload 'nope*': no counter of the baseline that varies matches it"),
        ("requests", "workload must be a sequence of counter names or patterns"),
    ],
)
def test_a_workload_that_names_no_counter_is_an_error(workload: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CounterRegressionCheck(workload=workload).fit(baseline())  # type: ignore[arg-type]


def test_a_workload_counter_the_reduction_removed_still_predicts() -> None:
    """A request rate that is a copy of another (a total of one kind) is removed by the
    paper's reduction, but the workload models use it."""
    runs = [with_counter(r, "requests_total", 2 * r.column("requests")) for r in baseline()]
    target = with_counter(run(13), "requests_total", 2 * run(13).column("requests"))
    result = CounterRegressionCheck(workload=["requests_total"]).fit(runs).check(target)
    (removed,) = [r for r in result.removed if r.counter == "requests_total"]
    assert removed.reason in (IDENTITY, REDUNDANT)
    assert removed.detail.endswith("; a predictor of the workload models")
    (models,) = [c for c in result.clusters if c.workload]
    assert models.members == ["requests_total"]
