"""Clustered-counter regression check, after Shang, Hassan, Nasser and Flora,
"Automated Detection of Performance Regressions Using Regression Models on
Clustered Performance Counters".

A run's performance counters are compared with a baseline of good runs of the same test:

1. reduce the counters (zero variance, redundancy analysis),
2. measure a Pearson-correlation distance between counters,
3. cluster them (average linkage, dendrogram cut where Calinski-Harabasz peaks),
4. per cluster, pick the dependent counter whose baseline and target distributions
   differ most (two-sample Kolmogorov-Smirnov) and fit an OLS model of it on the
   cluster's other counters using the baseline,
5. predict the target with each model; a cluster whose mean absolute percentage error
   (trimmed of its worst blocks: ``error_trim``) exceeds the threshold flags a
   regression.

Real counter data breaks a literal reading of those steps: warm-up and
cool-down dominate the variance, identity counters (a PID) and counters whose level
differs from run to run always look "most different", exact identities make distances
zero, the redundancy analysis can remove every counter of a resource, lone counters get
intercept-only "models" and near-zero samples blow up a percentage. Each remedy is a
named constructor option with its reason; ``CounterRegressionCheck.seed_literal()`` turns
them all off.

Structure (reduction, clusters) is learnt from the baseline alone in ``fit`` so a
regression cannot reshape the clusters meant to detect it, and one fit serves many
targets. Everything is deterministic: counters are processed in name order, no RNG.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

import numpy as np
import statsmodels.api as sm
from scipy.stats import chi2, ks_2samp
from sklearn.base import BaseEstimator, clone
from sklearn.covariance import ledoit_wolf_shrinkage
from statsmodels.tools.sm_exceptions import SingularMatrixWarning

from perfwatch.detectors.counter_decision import (
    VariancePrior,
    block_exceedances,
    deflate,
    error_statistics,
    excess_error_tests,
    familywise,
    pvalue_to_z,
    tail_inflation,
    variance_prior,
)
from perfwatch.detectors.counter_steps import (
    Distance,
    RedundancyStep,
    block_means,
    cluster_counters,
    correlation_distance,
    correlation_inverse,
    correlation_matrix,
    fill_missing,
    ks_statistics,
    merge_singletons,
    pairwise_redundancy,
    percentage_error_blocks,
    pooled_correlation,
    redundancy_analysis,
    shrink_correlation,
    standardize,
    steady_state_window,
)

SingletonRule = Literal["merge", "intercept", "skip"]
SteadyState = Literal["auto", "off"]
DependentSelection = Literal["largest_excess", "beyond_baseline", "ks"]
Decision = Literal["pvalue", "threshold"]
TestedScore = Literal["error", "exceedance"]
Status = Literal["regression", "pass", "insufficient_baseline"]

# Why a counter left the analysis (RemovedCounter.reason).
MISSING_IN_BASELINE_RUN = "missing_in_baseline_run"
MISSING_IN_TARGET = "missing_in_target"
NOT_IN_BASELINE = "not_in_baseline"
MOSTLY_MISSING = "mostly_missing"
ZERO_VARIANCE = "zero_variance"
CONSTANT_IN_BASELINE = "constant_in_baseline"
CONSTANT_PER_RUN = "constant_per_run"
CLOCK = "clock"
IDENTITY = "identity"
REDUNDANT = "redundant"

# Ridge that keeps a correlation matrix with exact identities invertible; it moves an
# R^2 by about this much, far below any threshold.
_MIN_RIDGE = 1e-9
# A counter whose R^2 on the sample index is at least this in every run is a clock.
_CLOCK_R2 = 0.9999
# robust_fit: baseline blocks beyond this chi-square quantile of the squared Mahalanobis
# distance among a cluster's counters are left out of its models' fits
_TYPICAL_QUANTILE = 0.99
# The inverse of a correlation matrix is downdated to that of its counters less some
# only while no counter's variance inflation 1 / (1 - R^2) on the others exceeds this:
# rounding in the downdate grows with it (about 1e-12 relative at 1e3); a near-exact
# identity (1e9 with the ridge) would leave errors of 1e-7, so it is inverted afresh.
_DOWNDATE_INFLATION = 1e5


@dataclass(frozen=True)
class CounterSamples:
    """Counter samples of one run: ``values[observation, counter]``, NaN where missing."""

    names: list[str]
    values: np.ndarray
    label: str = ""

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(f"{self._who}: values must be observations x counters (2-D)")
        if values.shape[1] != len(self.names):
            raise ValueError(
                f"{self._who}: {len(self.names)} names but {values.shape[1]} counter columns"
            )
        if len(set(self.names)) != len(self.names):
            duplicates = sorted(n for n, count in Counter(self.names).items() if count > 1)
            raise ValueError(f"{self._who}: duplicate counter names {duplicates}")
        if np.isinf(values).any():
            row, column = np.argwhere(np.isinf(values))[0]
            raise ValueError(
                f"{self._who}: infinite value at observation {row + 1}, "
                f"counter {self.names[column]!r}"
            )
        object.__setattr__(self, "names", list(self.names))
        object.__setattr__(self, "values", values)

    @property
    def _who(self) -> str:
        return self.label or "counter samples"

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.names.index(name)]


@dataclass(frozen=True)
class RemovedCounter:
    """A counter left out of the models, why, and (for identities and redundancy) its R^2
    and the counters that explain it most (standardized coefficients)."""

    counter: str
    reason: str
    detail: str
    r_squared: float | None = None
    explained_by: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "reason": self.reason,
            "detail": self.detail,
            "r_squared": _json_float(self.r_squared),
            "explained_by": {name: _json_float(v) for name, v in self.explained_by.items()},
        }


@dataclass(frozen=True)
class ClusterResult:
    """One cluster's model and how well it predicts the target."""

    cluster: int
    members: list[str]  # every counter of the cluster
    redundant_members: list[str]  # may be the dependent, never a predictor
    dependent: str
    ks_statistic: float
    ks_pvalue: float
    baseline_ks_statistic: float  # largest KS statistic between good runs (0: one run)
    # "ols": dependent on the other members; "intercept": the baseline mean (a lone counter
    # under singletons="intercept"); "none": not modelled (lone counter under "skip").
    model: Literal["ols", "intercept", "none"]
    left_out: str | None  # the member left out of the predictors (decouple_strongest)
    intercept: float | None
    coefficients: dict[str, float]
    r_squared: float | None
    error: float | None  # mean absolute percentage error on the target
    good_run_error: float | None  # the same model's mean error on held-out good runs
    excess_error: float | None  # what is compared with the threshold
    flagged: bool
    baseline_mean: float
    target_mean: float
    # decision="pvalue": how unusual the error is against the good runs' errors (z), its
    # one-sided p-value, and the p-value corrected for every model judged in the run
    z: float | None = None
    pvalue: float | None = None
    run_pvalue: float | None = None
    tests: int = 0  # models judged for this cluster (candidates x variants)
    candidate_z: dict[str, float] = field(default_factory=dict)  # z of each candidate's model
    # the workload models (``workload``): members are the workload counters, the
    # predictors; redundant_members the counters modelled on them
    workload: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "members": self.members,
            "redundant_members": self.redundant_members,
            "dependent": self.dependent,
            "ks_statistic": _json_float(self.ks_statistic),
            "ks_pvalue": _json_float(self.ks_pvalue),
            "baseline_ks_statistic": _json_float(self.baseline_ks_statistic),
            "model": self.model,
            "left_out": self.left_out,
            "intercept": _json_float(self.intercept),
            "coefficients": {name: _json_float(v) for name, v in self.coefficients.items()},
            "r_squared": _json_float(self.r_squared),
            "error": _json_float(self.error),
            "good_run_error": _json_float(self.good_run_error),
            "excess_error": _json_float(self.excess_error),
            "flagged": self.flagged,
            "baseline_mean": _json_float(self.baseline_mean),
            "target_mean": _json_float(self.target_mean),
            "z": _json_float(self.z),
            "pvalue": _json_float(self.pvalue),
            "familywise_pvalue": _json_float(self.run_pvalue),
            "tests": self.tests,
            "workload": self.workload,
        }


@dataclass(frozen=True)
class CounterCheckResult:
    """Everything a person needs to act on one target run."""

    regression: bool
    threshold: float
    threshold_source: Literal["fixed", "calibrated"]
    clusters: list[ClusterResult]  # largest excess error first; unmodelled clusters last
    removed: list[RemovedCounter]
    look_first: list[str]
    baseline_runs: int
    baseline_observations: int
    target_observations: int
    target_window: tuple[int, int]  # steady-state [start, end) of the target's samples
    target_label: str
    parameters: dict[str, Any]
    decision: Decision = "threshold"
    # "insufficient_baseline": one good run shows no run-to-run variation, so no verdict
    status: Status = "pass"
    alpha: float | None = None  # the false-alarm rate of decision="pvalue"
    pvalue: float | None = None  # the run's p-value, corrected for every model judged
    blame: list[tuple[str, float]] = field(default_factory=list)  # (counter, z), largest z first
    tail_inflation: float = 1.0  # the good runs' tail over the assumed one (counter_decision)

    @property
    def z(self) -> float | None:
        """The run's p-value as a standard normal score (comparable across studies)."""
        return None if self.pvalue is None else _json_float(pvalue_to_z(self.pvalue))

    @property
    def max_error(self) -> float | None:
        """The largest prediction error of any cluster (the paper's per-run figure)."""
        errors = [c.error for c in self.clusters if c.error is not None]
        return max(errors) if errors else None

    @property
    def max_excess_error(self) -> float | None:
        """The largest error compared with the threshold."""
        errors = [c.excess_error for c in self.clusters if c.excess_error is not None]
        return max(errors) if errors else None

    @property
    def flagged_clusters(self) -> list[ClusterResult]:
        return [c for c in self.clusters if c.flagged]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, stable key order (the ``counter_check`` block of a verdict)."""
        return {
            "regression": self.regression,
            "status": self.status,
            "decision": self.decision,
            "alpha": self.alpha,
            "pvalue": _json_float(self.pvalue),
            "z": self.z,
            "tail_inflation": self.tail_inflation,
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "max_error": _json_float(self.max_error),
            "max_excess_error": _json_float(self.max_excess_error),
            "look_first": self.look_first,
            "blame": [{"counter": name, "z": _json_float(z)} for name, z in self.blame],
            "clusters": [c.to_dict() for c in self.clusters],
            "removed": [r.to_dict() for r in self.removed],
            "baseline": {
                "runs": self.baseline_runs,
                "observations": self.baseline_observations,
            },
            "target": {
                "label": self.target_label,
                "observations": self.target_observations,
                "steady_state": list(self.target_window),
            },
            "parameters": self.parameters,
        }


# --- the detector ------------------------------------------------------------------------


@dataclass(frozen=True)
class _PreparedRun:
    """One run's counters aligned to names and cut to steady state: the raw samples
    (filled) and their block means, each with a mask of what was really observed."""

    samples: np.ndarray
    sample_observed: np.ndarray
    values: np.ndarray  # block means of the filled samples
    observed: np.ndarray  # False for a block without one real sample
    window: tuple[int, int]  # the steady-state [start, end) of the raw samples

    def observed_values(self) -> np.ndarray:
        return np.where(self.observed, self.values, np.nan)

    @functools.cached_property
    def extremes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per column of the samples: smallest, largest and largest absolute value. The
        extremes of runs stacked are those of their extremes, exactly, so each fold of a
        calibration takes its constant counters from these (computed once per run)."""
        return self.samples.min(axis=0), self.samples.max(axis=0), _largest_magnitude(self.samples)

    @functools.cached_property
    def magnitudes(self) -> tuple[np.ndarray, np.ndarray]:
        """Per column of the samples' absolute values: an order statistic with at least
        three quarters of the run at or above it, and the sum (``_usually_zero``)."""
        magnitude = np.abs(self.samples)
        quarter = magnitude.shape[0] // 4
        return np.partition(magnitude, quarter, axis=0)[quarter], magnitude.sum(axis=0)

    @functools.cached_property
    def moments(self) -> tuple[int, np.ndarray, np.ndarray]:
        """Samples, column means and centred cross-products of the samples (computed once
        however many fits pool this run: ``pooled_correlation``)."""
        mean = self.samples.mean(axis=0)
        centred = self.samples - mean
        return self.samples.shape[0], mean, centred.T @ centred


class PreparedRuns:
    """Runs already cut to steady state and averaged in blocks, for several fits and
    checks over the same runs to share (the leave-one-out folds of
    ``CounterRegressionCheck.calibrate``): pass one instance as ``prepared_runs`` to each
    ``fit`` and ``check``. A run is prepared again only for other counters or other
    preparation parameters (``steady_state``, ``steady_state_z``, ``max_trim_fraction``,
    ``block``), so one instance may serve differently configured checks."""

    def __init__(self) -> None:
        # keyed by the run's identity; the run itself is kept so the identity stays its own
        self._runs: dict[tuple[Any, ...], tuple[CounterSamples, _PreparedRun]] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def get(
        self, check: CounterRegressionCheck, run: CounterSamples, names: list[str], index: int
    ) -> _PreparedRun:
        """``run`` prepared for ``names`` as ``check`` prepares it (``index`` names the
        run in errors when it has no label)."""
        key = (
            id(run),
            tuple(names),
            check.steady_state,
            check.steady_state_z,
            check.max_trim_fraction,
            check.block,
        )
        if key not in self._runs:
            self._runs[key] = (run, check._prepare_run(run, names, index))
        return self._runs[key][1]


class _Scores:
    """Per candidate dependent: error on the target, usual error on good runs, the
    excess compared with the threshold, how unusual the error is (z, p-value), and the
    predictor its model leaves out."""

    def __init__(self, size: int) -> None:
        self.error = np.full(size, np.nan)
        self.usual = np.full(size, np.nan)
        self.excess = np.full(size, -math.inf)
        self.z = np.full(size, -math.inf)
        self.pvalue = np.full(size, np.nan)
        self.tests = 0
        self.fitted_rows = np.ones(0, dtype=bool)  # the baseline blocks the models fit
        # p-values of the good runs, each checked against the others, for every model
        self.null: list[float] = []
        self.left_out: list[str | None] = [None] * size


@dataclass
class _ModelErrors:
    """Errors of a cluster's models, two per candidate dependent (on all the other
    members; without the strongest predictor, NaN where there is none), flattened
    candidate-major: on the target, and on each baseline run (models x runs)."""

    members: list[str]
    strongest: np.ndarray  # per candidate: the design column left out (0: none)
    fitted_rows: np.ndarray  # the baseline blocks the models fit
    error: np.ndarray
    good: np.ndarray
    # what the decision rule tests (tested_score): the errors above, or the share of
    # blocks beyond the good runs' usual block errors; its sampling variance and the
    # target's effective number of blocks (``error_statistics``)
    score: np.ndarray
    score_variance: np.ndarray
    score_blocks: np.ndarray
    good_score: np.ndarray
    good_score_variances: np.ndarray

    @property
    def exists(self) -> np.ndarray:
        return np.column_stack(
            [np.ones(self.strongest.size, dtype=bool), self.strongest > 0]
        ).ravel()


@dataclass
class _Cluster:
    members: list[str]  # predictors, and dependents
    redundant: list[str] = field(default_factory=list)  # dependents only
    # the workload models: every dependent on all the members, none left out
    workload: bool = False


class CounterRegressionCheck(BaseEstimator):
    """Clustered-counter regression check: ``fit(baseline_runs).check(target)``.

    The paper's parameters:

    threshold: a cluster whose (excess) prediction error exceeds it flags a regression
        (0.30, the paper's example); ``calibrate`` replaces it with one learnt from good
        runs, as the paper recommends.
    redundancy_r2: redundancy analysis threshold (0.9); None turns the analysis off.
    distance: "1-|rho|" (default) or "1-rho".
    max_clusters: the dendrogram is cut where Calinski-Harabasz peaks among 2 to this
        many clusters; None (default): half the counters. Beyond that most clusters are
        lone counters, and on noisy counters the index keeps rising as they are split
        off one by one, up to n - 1 clusters of which one is a pair.

    The deviations, each with its reason (``seed_literal()`` turns them all off):

    steady_state: "auto" cuts each run's warm-up and cool-down first (see
        ``steady_state_window``), because a ramp dominates every load counter's variance
        and makes them all predict each other; "off" keeps every sample.
        steady_state_z and max_trim_fraction tune it.
    drop_run_identities: drop counters that identify a run rather than measure it:
        constant within every baseline run but different between runs (a process id),
        or a clock (R^2 on the sample index of at least 0.9999 in every baseline run:
        elapsed time, uptime). The KS test would always pick a process id as "most
        different", and a clock "predicted" from trending counters measures their trend.
    identity_r2: before the redundancy analysis, remove exact and near-exact linear
        identities (sums and copies such as % Processor = % User + % Privileged): counters
        whose adjusted R^2 on the others, without shrinkage, is at least this, judged on
        the samples observed in full. They make distances zero (an infinite
        Calinski-Harabasz index) and a model of a sum on its parts predicts it perfectly
        whatever regresses. Skipped when there are not more samples than counters.
    shrinkage: the redundancy analysis works on the correlation matrix shrunk towards the
        identity, (1 - s) C + s I. As counters approach the number of samples every plain
        R^2 tends to 1 by overfitting alone (the paper's system had thousands of counters),
        and shrinkage keeps the analysis meaningful. None (default): with more than twice
        as many samples as counters, the plain R^2 adjusted for the number of counters
        (Ledoit-Wolf over-shrinks when bursty counters give heavy tails); otherwise first
        the counters one other counter predicts above the threshold (well measured at any
        size, see ``pairwise_redundancy``), then the Ledoit-Wolf estimate of s for the
        rest. 0: always the plain R^2.
    redundant_dependents: a counter removed by the redundancy analysis stays a candidate
        dependent (never a predictor) of the cluster it is closest to. The analysis
        removes the counters that others predict well, which are the best dependents
        there are: on steady-state data it can remove every CPU counter because load
        counters predict CPU, and a CPU regression then goes unseen. (A copy of a kept
        counter is harmless as a candidate: its model has no excess error to win with.)
    dependent_selection: which counter of a cluster is the dependent.
        "largest_excess" (default) models every candidate on the others and keeps the one
        with the largest excess error: a regression that changes only how counters relate
        (every mean within a few percent) moves no distribution, so no KS rule finds the
        counter it broke. "beyond_baseline": the counter whose KS statistic against the
        target most exceeds the largest one between a good run and the other good runs
        (counters whose level differs from good run to good run, such as handle counts,
        otherwise always look "most different"). "ks": the paper's rule, the largest KS
        statistic (the smallest p-value at equal sample sizes; p-values underflow to 0).
    decouple_strongest: each candidate is also modelled without its strongest predictor
        (largest standardized coefficient), and the model with the larger excess error
        counts. A regression that scales a counter together with one it mechanically
        drives (log writes and the kernel CPU they cost) keeps their relationship intact:
        the model of one on the other cannot see it, the model without it can.
    singletons: what a cluster of one counter gets. "merge" (default) continues the
        average-linkage agglomeration for lone counters until none is left, so each is
        modelled with the counters it is closest to; "intercept" is the literal
        intercept-only model (the baseline mean), which measures the counter's own drift
        rather than a broken relationship; "skip" reports it unmodelled.
    error_floor: the denominator of each percentage error is at least this fraction of
        the dependent counter's mean absolute baseline value, so values near zero cannot
        blow the error up; and a counter whose baseline median sample is below that floor
        (zero most of the time: pages/sec, queue lengths) is never a dependent, as a
        percentage of it means nothing; a cluster of such counters only is reported
        unjudged. 0: values equal to zero are left out instead (the paper's plain MAPE).
    error_trim: each prediction error (on the target and on held-out good runs alike)
        averages the blocks' percentage errors without the worst ``error_trim`` share of
        them (20%, the customary trimmed mean, trimmed on the large side only). A
        disturbance that lasts a few blocks (a background job on the test machine, a
        warm-up remnant) breaks every model for those blocks and, in a plain mean,
        outweighs the whole rest of the run; a regression in the system under test acts
        on most of the run. 0: the plain mean.
    block: models, KS tests and errors work on the means of consecutive blocks of this
        many steady-state samples, as if the counters had been sampled that much less
        often (the reduction still judges the samples). Bursty counters (page faults at
        each garbage collection) are unpredictable sample by sample and follow the load
        only over a block, where the number of collections does. 1: the paper's samples.
    subtract_good_run_error: compare with the threshold the error in excess of the same
        model's usual error on good runs it was not fitted on (each baseline run left out
        in turn; mean + 2 standard deviations): "larger than usual modelling errors" in
        the paper's words. A model of a noisy counter misses good runs by 15% too; its 20%
        on the target is no regression, while 20% from a model that misses by 1% is.
    calibration_margin: a calibrated threshold is the largest excess error of any good
        run checked against the others, plus this many points (absolute): the paper's
        "calibrate on a good run", with room for a good run a little worse than all of
        the calibration runs. (A prediction bound from the few leave-one-out values was
        too tight: they understate the tail of a maximum over many candidate models.)
    max_missing_fraction: a counter missing in more than this share of a run's samples is
        left out; the remaining gaps are filled by linear interpolation in time for the
        models (KS tests and errors use only blocks with a real sample).
    look_first: how many counters the result names to look at first.
    workload: counters that describe the offered work rather than how it is served
        (request rates per kind, queries asked per request; ``fnmatch`` patterns, case
        sensitive). Every other counter whose level is not run-specific is also
        modelled on these alone, as one more cluster (``ClusterResult.workload``)
        judged with the others under one correction. A regression that moves several
        correlated counters together (more allocation per request moves allocations,
        heap, GC time and private bytes at once) leaves the cluster that holds them
        consistent with itself; a model on the workload sees them move for the same
        work. Empty (default): the paper's clusters only.
    moderate_variance: under ``decision="pvalue"``, each model's between-run variance
        (from a handful of good runs) is shrunk toward a prior fitted across all models of
        the check (an empirical Bayes moderated t, ``variance_prior``), which adds the
        prior's degrees of freedom to the model's few.
    tested_score: what the p-value rule tests per model. "error" (default): the trimmed
        mean error itself. "exceedance": the share of the run's blocks whose error lies
        beyond the ``exceedance_quantile`` quantile of the good runs' block errors (the
        good runs other than the one judged), tested the same way against the good runs'
        own shares; a changed relationship that breaks the model in a part of the run
        shows even when the mean error hardly moves, and one good run's large errors
        count once per block, not by their size. The reported errors are the trimmed
        means either way.
    exceedance_quantile: the good runs' block-error quantile a block must exceed
        (``tested_score="exceedance"``).
    """

    def __init__(
        self,
        *,
        threshold: float = 0.30,
        redundancy_r2: float | None = 0.9,
        distance: Distance = "1-|rho|",
        max_clusters: int | None = None,
        steady_state: SteadyState = "auto",
        steady_state_z: float = 2.0,
        max_trim_fraction: float = 0.25,
        drop_run_identities: bool = True,
        identity_r2: float | None = 0.999,
        shrinkage: float | None = None,
        redundant_dependents: bool = True,
        dependent_selection: DependentSelection = "largest_excess",
        decouple_strongest: bool = True,
        singletons: SingletonRule = "merge",
        error_floor: float = 0.1,
        error_trim: float = 0.2,
        block: int = 10,
        subtract_good_run_error: bool = True,
        calibration_margin: float = 0.05,
        robust_fit: bool = True,
        drop_run_level_predictors: bool = True,
        moderate_variance: bool = False,
        tested_score: TestedScore = "error",
        exceedance_quantile: float = 0.9,
        decision: Decision = "pvalue",
        alpha: float = 0.01,
        max_missing_fraction: float = 0.5,
        look_first: int = 5,
        workload: Sequence[str] = (),
    ) -> None:
        self.threshold = threshold
        self.redundancy_r2 = redundancy_r2
        self.distance = distance
        self.max_clusters = max_clusters
        self.steady_state = steady_state
        self.steady_state_z = steady_state_z
        self.max_trim_fraction = max_trim_fraction
        self.drop_run_identities = drop_run_identities
        self.identity_r2 = identity_r2
        self.shrinkage = shrinkage
        self.redundant_dependents = redundant_dependents
        self.dependent_selection = dependent_selection
        self.decouple_strongest = decouple_strongest
        self.singletons = singletons
        self.error_floor = error_floor
        self.error_trim = error_trim
        self.block = block
        self.subtract_good_run_error = subtract_good_run_error
        self.calibration_margin = calibration_margin
        self.robust_fit = robust_fit
        self.drop_run_level_predictors = drop_run_level_predictors
        self.moderate_variance = moderate_variance
        self.tested_score = tested_score
        self.exceedance_quantile = exceedance_quantile
        self.decision = decision
        self.alpha = alpha
        self.max_missing_fraction = max_missing_fraction
        self.look_first = look_first
        self.workload = workload

    @classmethod
    def seed_literal(cls, **overrides: Any) -> CounterRegressionCheck:
        """The paper's steps with every deviation turned off (for comparison)."""
        params: dict[str, Any] = {
            "steady_state": "off",
            "drop_run_identities": False,
            "identity_r2": None,
            "shrinkage": 0.0,
            "redundant_dependents": False,
            "dependent_selection": "ks",
            "decouple_strongest": False,
            "singletons": "intercept",
            "error_floor": 0.0,
            "error_trim": 0.0,
            "block": 1,
            "subtract_good_run_error": False,
            "decision": "threshold",
            "robust_fit": False,
            "drop_run_level_predictors": False,
        }
        params.update(overrides)
        return cls(**params)

    @property
    def effective_decision(self) -> Decision:
        """``decision``, except that a calibrated threshold (``calibrate``) is a
        threshold rule."""
        return "threshold" if hasattr(self, "calibration_") else self.decision

    @property
    def effective_threshold(self) -> float:
        if hasattr(self, "calibration_"):
            return float(self.calibration_["threshold"])
        return self.threshold

    # --- fit ---------------------------------------------------------------------------

    def fit(
        self,
        baseline_runs: Sequence[CounterSamples],
        *,
        prepared_runs: PreparedRuns | None = None,
        report: bool = True,
    ) -> CounterRegressionCheck:
        """Learn the counter reduction and the clusters from good runs.

        prepared_runs: runs prepared by earlier fits or checks over some of the same runs,
        reused and added to (see ``PreparedRuns``); None prepares every run afresh.
        report: False leaves out, in this fit and the checks after it, the numbers that
        are only reported (KS tests, the OLS of each dependent, the baseline spread, and
        the p-values the threshold rule does not judge by): a calibration's folds use
        only the excess errors.
        """
        self._validate_params()
        if not baseline_runs:
            raise ValueError("the baseline needs at least one run")
        removed: list[RemovedCounter] = []
        names = sorted(set.intersection(*(set(run.names) for run in baseline_runs)))
        for name in sorted(set().union(*(run.names for run in baseline_runs)) - set(names)):
            missing_in = [
                _run_label(run, i) for i, run in enumerate(baseline_runs) if name not in run.names
            ]
            removed.append(
                RemovedCounter(
                    name, MISSING_IN_BASELINE_RUN, f"not recorded in {', '.join(missing_in)}"
                )
            )
        names, mostly_missing = self._drop_mostly_missing(names, baseline_runs, "baseline run")
        removed += mostly_missing
        if not names:
            raise ValueError("no counter is recorded in every baseline run")
        prepare = (PreparedRuns() if prepared_runs is None else prepared_runs).get
        runs = [prepare(self, run, names, i) for i, run in enumerate(baseline_runs)]
        # the reduction judges the samples themselves, like the paper: block means average
        # noise away and would make many more counters look redundant
        samples = np.vstack([run.samples for run in runs])
        blocks = np.vstack([run.values for run in runs])

        lowest, highest, magnitudes = zip(*(run.extremes for run in runs), strict=True)
        spread = np.max(highest, axis=0) - np.min(lowest, axis=0)  # np.ptp of the samples
        constant = spread <= _constant_tolerance(np.max(magnitudes, axis=0))
        analysed = np.flatnonzero(~constant)
        if self.drop_run_identities:
            analysed, run_identities = _drop_run_identities(runs, analysed, names)
            removed += run_identities
        complete = np.vstack([run.sample_observed for run in runs])[:, analysed].all(axis=1)
        # identities hold on real samples; interpolated gaps would blur them
        exact_rows = samples if complete.all() or complete.mean() < 0.5 else samples[complete]
        pooled = _Correlations(samples, analysed, runs)
        identity_rows = pooled if exact_rows is samples else _Correlations(exact_rows, analysed)
        analysed, identities = self._collapse_identities(identity_rows, analysed, names)
        removed += identities
        kept, redundant = self._remove_redundant(pooled, analysed, names)
        removed += redundant

        correlation = correlation_matrix(blocks[:, kept]) if kept.size else np.zeros((0, 0))
        distance = correlation_distance(correlation, self.distance)
        labels, scores = cluster_counters(distance, self.max_clusters)
        if self.singletons == "merge" and labels.size:
            labels = merge_singletons(labels, distance)
        clusters = [
            _Cluster([names[i] for i in kept[labels == label]])
            for label in range(int(labels.max()) + 1 if labels.size else 0)
        ]
        if self.redundant_dependents and clusters:
            removed = self._attach(removed, blocks, kept, labels, names, clusters)
        self.run_level_ = []
        if self.drop_run_level_predictors and len(runs) > 1:
            self.run_level_ = _run_level([run.values for run in runs], names)
            for cluster in clusters:
                moved = [m for m in cluster.members if m in self.run_level_]
                cluster.members = [m for m in cluster.members if m not in moved]
                cluster.redundant = moved + cluster.redundant

        self.names_ = names
        self.recorded_ = set().union(*(run.names for run in baseline_runs))
        # kept to fit again on the counters a target has (``_fit_to_target``)
        self._fitted_runs = list(baseline_runs)
        self.kept_ = [names[i] for i in kept]
        self.clusters_ = [c.members for c in clusters]
        self.redundant_members_ = [c.redundant for c in clusters]
        self.ch_scores_ = scores
        self.removed_ = removed
        self.baseline_constant_ = {names[i]: float(samples[0, i]) for i in np.flatnonzero(constant)}
        self.baseline_windows_ = [run.window for run in runs]
        self.workload_ = self._workload_counters(
            [name for name, fixed in zip(names, constant, strict=True) if not fixed]
        )
        # the workload counters are kept for the workload models even where the paper's
        # reduction removed them (a request rate that is the sum of others)
        modelled = [name for c in clusters for name in c.members + c.redundant]
        modelled += [name for name in self.workload_ if name not in modelled]
        position = {name: i for i, name in enumerate(names)}
        columns = [position[name] for name in modelled]
        observed = [run.observed_values()[:, columns] for run in runs]
        self._baseline = dict(zip(modelled, blocks[:, columns].T, strict=True))
        self._baseline_observed = dict(zip(modelled, np.vstack(observed).T, strict=True))
        spread = np.full(len(modelled), np.nan)
        self.report_ = report
        if report or self.dependent_selection == "beyond_baseline":
            spread = self._spread(observed)
        self.baseline_spread_ = dict(zip(modelled, spread, strict=True))
        below = _usually_zero(samples, runs, np.array(columns, dtype=np.intp), self.error_floor)
        self.usually_zero_ = {modelled[i] for i in np.flatnonzero(below)}
        edges = np.cumsum([0] + [run.values.shape[0] for run in runs])
        self._run_slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]
        return self

    def _workload_counters(self, varying: list[str]) -> list[str]:
        """The baseline's varying counters that ``workload`` names; an error when it names
        none (a constant counter describes no work)."""
        if not self.workload:
            return []
        matched = [n for n in varying if any(fnmatchcase(n, p) for p in self.workload)]
        if not matched:
            patterns = ", ".join(repr(p) for p in self.workload)
            raise ValueError(
                f"workload {patterns}: no counter of the baseline that varies matches it "
                f"(they are {_some(varying)})"
            )
        return matched

    def _workload_cluster(self, values: dict[str, np.ndarray]) -> tuple[int, _Cluster] | None:
        """The workload models' cluster, numbered after the paper's clusters: the workload
        counters as members, and as candidates (``redundant``: dependents, never
        predictors) every modelled counter of the target that is not a workload counter,
        nor usually zero, nor run-specific in level (its level is the run's, not the
        work's); None without workload counters or candidates."""
        workload = [n for n in self.workload_ if n in values]
        candidates = [
            n
            for n in values
            if n in self._baseline
            and n not in self.workload_
            and n not in self.usually_zero_
            and n not in self.run_level_
        ]
        if not workload or not candidates:
            return None
        return len(self.clusters_), _Cluster(workload, candidates, workload=True)

    def _collapse_identities(
        self, samples: _Correlations, analysed: np.ndarray, names: list[str]
    ) -> tuple[np.ndarray, list[RemovedCounter]]:
        observations = samples.observations
        if self.identity_r2 is None or analysed.size < 2 or observations <= analysed.size + 1:
            return analysed, []
        correlation, inverse = samples.shrunk(analysed, _MIN_RIDGE)
        steps = redundancy_analysis(
            correlation, self.identity_r2, observations=observations, inverse=inverse
        )
        removed = [_removal(step, names, analysed, IDENTITY, "a linear identity") for step in steps]
        return np.delete(analysed, [step.index for step in steps]), removed

    def _remove_redundant(
        self, samples: _Correlations, analysed: np.ndarray, names: list[str]
    ) -> tuple[np.ndarray, list[RemovedCounter]]:
        if self.redundancy_r2 is None or analysed.size < 2:
            return analysed, []
        observations = samples.observations
        removed: list[RemovedCounter] = []
        amount = self.shrinkage
        if amount is None:
            amount = 0.0
            if observations <= 2 * analysed.size:
                # every plain R^2 is inflated here, but one counter predicting another is
                # still well measured: take those out first, then shrink
                correlation = samples.of(analysed)
                twins = pairwise_redundancy(correlation, self.redundancy_r2)
                removed = [
                    RemovedCounter(
                        names[analysed[gone]],
                        REDUNDANT,
                        f"redundant: R^2 {correlation[gone, kept] ** 2:.4f} on "
                        f"{names[analysed[kept]]} alone",
                        r_squared=float(correlation[gone, kept] ** 2),
                        explained_by={names[analysed[kept]]: float(correlation[gone, kept])},
                    )
                    for gone, kept in twins
                ]
                analysed = np.delete(analysed, [gone for gone, _ in twins])
                values = standardize(samples.values[:, analysed])
                amount = float(ledoit_wolf_shrinkage(values, assume_centered=True))
        counters = analysed.size
        correlation, inverse = samples.shrunk(analysed, max(amount, _MIN_RIDGE))
        adjust = amount <= _MIN_RIDGE and observations > counters + 1
        steps = redundancy_analysis(
            correlation,
            self.redundancy_r2,
            observations=observations if adjust else None,
            inverse=inverse,
        )
        removed += [_removal(step, names, analysed, REDUNDANT, "redundant") for step in steps]
        return np.delete(analysed, [step.index for step in steps]), removed

    def _attach(
        self,
        removed: list[RemovedCounter],
        blocks: np.ndarray,
        kept: np.ndarray,
        labels: np.ndarray,
        names: list[str],
        clusters: list[_Cluster],
    ) -> list[RemovedCounter]:
        """Make each redundant counter a dependent candidate of the cluster at the
        smallest mean distance."""
        positions = [i for i, removal in enumerate(removed) if removal.reason == REDUNDANT]
        if not positions:
            return removed
        columns = [names.index(removed[i].counter) for i in positions]
        correlation = standardize(blocks[:, columns]).T @ standardize(blocks[:, kept])
        correlation /= blocks.shape[0]
        gaps = 1.0 - (np.abs(correlation) if self.distance == "1-|rho|" else correlation)
        membership = (labels[:, None] == np.arange(len(clusters))[None, :]).astype(np.float64)
        nearest = np.argmin(gaps @ membership / membership.sum(axis=0), axis=1)
        attached = list(removed)
        for i, cluster in zip(positions, nearest, strict=True):
            clusters[cluster].redundant.append(removed[i].counter)
            attached[i] = RemovedCounter(
                removed[i].counter,
                removed[i].reason,
                f"{removed[i].detail}; still a dependent candidate of cluster {cluster}",
                removed[i].r_squared,
                removed[i].explained_by,
            )
        return attached

    def _spread(self, blocks: list[np.ndarray]) -> np.ndarray:
        """Per counter: the largest KS statistic between one good run and the others
        (zeros with a single run)."""
        width = blocks[0].shape[1]
        if len(blocks) < 2 or width == 0:
            return np.zeros(width)
        return np.max(
            [
                ks_statistics(held_out, np.vstack(blocks[:i] + blocks[i + 1 :]))
                for i, held_out in enumerate(blocks)
            ],
            axis=0,
        )

    # --- check -------------------------------------------------------------------------

    def check(
        self, target: CounterSamples, *, prepared_runs: PreparedRuns | None = None
    ) -> CounterCheckResult:
        """Predict the target with one model per cluster and flag the clusters whose
        (excess) prediction error exceeds the threshold. ``prepared_runs``: as in ``fit``."""
        if not hasattr(self, "clusters_"):
            raise RuntimeError("call fit(baseline_runs) before check(target)")
        refit = self._fit_to_target(target)
        if refit is not None:
            return refit.check(target)
        removed = [
            dataclasses.replace(r, detail=f"{r.detail}; a predictor of the workload models")
            if r.counter in self.workload_
            else r
            for r in self.removed_
        ]
        present = set(target.names)
        for name in sorted(present - self.recorded_):
            removed.append(RemovedCounter(name, NOT_IN_BASELINE, "recorded in the target only"))
        used = list(self._baseline) + sorted(self.baseline_constant_)
        for name in used:
            if name not in present:
                removed.append(
                    RemovedCounter(name, MISSING_IN_TARGET, "not recorded in the target")
                )
        wanted, mostly_missing = self._drop_mostly_missing(
            [name for name in used if name in present], [target], "target"
        )
        removed += mostly_missing
        if not wanted:
            raise ValueError(
                f"{_run_label(target, 0)}: no counter of the baseline to check (the target "
                f"records {_some(sorted(target.names))}; the baseline "
                f"models {_some(sorted(used))})"
            )
        shared = PreparedRuns() if prepared_runs is None else prepared_runs
        prepared = shared.get(self, target, wanted, 0)
        values = dict(zip(wanted, prepared.values.T, strict=True))
        observed = dict(zip(wanted, prepared.observed_values().T, strict=True))

        new_activity: list[str] = []
        for name, level in self.baseline_constant_.items():
            if name not in values:
                continue
            column = prepared.samples[:, wanted.index(name)]
            if np.ptp(column) <= _constant_tolerance(_largest_magnitude(column[:, None]))[0]:
                removed.append(
                    RemovedCounter(name, ZERO_VARIANCE, "zero variance in baseline and target")
                )
                continue
            new_activity.append(name)
            removed.append(
                RemovedCounter(
                    name,
                    CONSTANT_IN_BASELINE,
                    f"constant ({level:g}) in the baseline but varies in the target "
                    f"({column.min():g} to {column.max():g}); no model can predict it",
                )
            )

        threshold = self.effective_threshold
        clusters = [
            (
                number,
                _Cluster(
                    [m for m in members if m in values], [m for m in redundant if m in values]
                ),
            )
            for number, (members, redundant) in enumerate(
                zip(self.clusters_, self.redundant_members_, strict=True)
            )
        ]
        clusters = [(n, c) for n, c in clusters if c.members or c.redundant]
        pools = [self._pool(cluster, observed) for _, cluster in clusters]
        workload = self._workload_cluster(values)
        if workload is not None:
            clusters.append(workload)
            pools.append((workload[1].redundant, True))
        # every model's errors first: the moderating prior is fitted across all of them
        errors = [
            self._model_errors(cluster, pool, values, observed) if modelled else None
            for (_, cluster), (pool, modelled) in zip(clusters, pools, strict=True)
        ]
        prior = self._variance_prior([e for e in errors if e is not None])
        results = []
        null: list[float] = []
        for (number, cluster), (pool, _), model_errors in zip(clusters, pools, errors, strict=True):
            scores = None if model_errors is None else self._score_models(model_errors, prior)
            if scores is not None:
                null += scores.null
            results.append(
                self._check_cluster(number, cluster, pool, scores, values, observed, threshold)
            )
        runs = len(self._run_slices)
        tests = sum(c.tests for c in results)
        inflation = tail_inflation(null)
        results = [
            dataclasses.replace(c, pvalue=_finite(deflate(c.pvalue, inflation)))
            if c.pvalue is not None
            else c
            for c in results
        ]
        run_pvalue = familywise([c.pvalue for c in results if c.pvalue is not None], tests)
        if self.effective_decision == "pvalue":
            results = [
                dataclasses.replace(
                    c,
                    run_pvalue=_finite(familywise([c.pvalue], tests))
                    if c.pvalue is not None
                    else None,
                    flagged=runs > 1 and c.pvalue is not None and c.pvalue * tests < self.alpha,
                )
                for c in results
            ]
        if self._ranks_by_z:
            results.sort(
                key=lambda c: (c.pvalue is None, c.pvalue or 0.0, -(c.z or 0.0), c.cluster)
            )
        else:
            results.sort(
                key=lambda c: (c.excess_error is None, -(c.excess_error or 0.0), c.cluster)
            )
        if all(c.excess_error is None for c in results):
            # a pass that judged nothing would read as a clean bill of health
            why = [f"{r.counter}: {r.detail}" for r in removed if r.counter in wanted]
            raise ValueError(
                f"{_run_label(target, 0)}: no cluster model can be judged on the counters it "
                f"shares with the baseline ({_some(wanted)}); it needs the counters of at "
                "least one cluster" + (f" ({'; '.join(why)})" if why else "")
            )
        flagged = [c for c in results if c.flagged]
        blame = _blame(results)
        if self.effective_decision == "pvalue":
            # counters whose own models miss by more than usual, most unusual first, of
            # every cluster: a changed predictor can break another cluster's model first
            look_first = [
                name for rank, (name, z) in enumerate(blame) if flagged and (rank == 0 or z > 0)
            ]
        else:
            look_first = [c.dependent for c in flagged]
            look_first += [m for c in flagged for m in c.members if m != c.dependent]
        look_first = list(dict.fromkeys(look_first + new_activity))[: self.look_first]
        status: Status = "regression" if flagged else "pass"
        if self.effective_decision == "pvalue" and runs < 2:
            status = "insufficient_baseline"
        return CounterCheckResult(
            regression=bool(flagged),
            threshold=threshold,
            threshold_source="calibrated" if hasattr(self, "calibration_") else "fixed",
            clusters=results,
            removed=removed,
            look_first=look_first,
            baseline_runs=len(self._run_slices),
            baseline_observations=sum(end - start for start, end in self.baseline_windows_),
            target_observations=prepared.window[1] - prepared.window[0],
            target_window=prepared.window,
            target_label=target.label,
            parameters=self.get_params(),
            decision=self.effective_decision,
            status=status,
            alpha=self.alpha if self.effective_decision == "pvalue" else None,
            pvalue=_finite(run_pvalue) if self.effective_decision == "pvalue" else None,
            tail_inflation=inflation,
            blame=blame[: self.look_first],
        )

    def _fit_to_target(self, target: CounterSamples) -> CounterRegressionCheck | None:
        """This check fitted again on the counters the target has, when it lacks one the
        fit had: a model whose predictors the target lacks would judge it by its mean
        alone (a CPU-per-request regression unseen once the counters that explained
        the requests are gone), and an identity removed in favour of its parts (% Processor
        Time for a missing % User Time) would go unjudged. None when the target has every
        counter, or when too few of them are left to fit (judged as fitted, without them)."""
        identities = {r.counter for r in self.removed_ if r.reason == IDENTITY}
        present = set(target.names)
        usable, mostly_missing = self._drop_mostly_missing(
            [name for name in self.names_ if name in present], [target], "target"
        )
        absent = [name for name in self.names_ if name not in usable]
        # the fit on the target's counters has no absent counter: it never fits again; a
        # counter no model uses (constant in the baseline, say) changes no model
        if not any(name in self._baseline for name in absent):
            return None
        runs = [
            CounterSamples(usable, run.values[:, _columns(run, usable)], run.label)
            for run in self._fitted_runs
        ]
        refit = clone(self)
        if hasattr(self, "calibration_"):
            refit.calibration_ = self.calibration_
        try:
            refit.fit(runs, report=self.report_)
        except ValueError:
            return None  # too few counters left to fit: judged as fitted, without them
        recovered = sorted(identities & set(refit._baseline))
        refitted = "the baseline was fitted again without it"
        if recovered:
            refitted += (
                f", so {', '.join(recovered)}, which the first fit removed as a linear "
                "identity of it and other counters, is judged in its place"
            )
        why = {r.counter: r.detail for r in mostly_missing}
        # what the baseline recorded stays known: counters left out before the fit's
        # analysis (missing in a baseline run) keep their reason, the absent ones get theirs
        refit.recorded_ = self.recorded_
        earlier = [r for r in self.removed_ if r.counter not in self.names_]
        lacking = [
            RemovedCounter(
                name,
                MOSTLY_MISSING if name in why else MISSING_IN_TARGET,
                f"{why.get(name, 'not recorded in the target')}; {refitted}",
            )
            for name in absent
        ]
        refit.removed_ = earlier + lacking + refit.removed_
        return refit

    def _pool(
        self, cluster: _Cluster, target_observed: dict[str, np.ndarray]
    ) -> tuple[list[str], bool]:
        """The candidate dependents of a cluster that are modelled (every one that can be,
        or the one a KS rule picks), and whether they get models at all."""
        everyone = cluster.members + cluster.redundant
        # a percentage of a counter that is zero most of the time means nothing
        candidates = [c for c in everyone if c not in self.usually_zero_]
        modelable = [
            c
            for c in candidates
            if self.singletons == "intercept"
            or not cluster.members
            or any(m != c for m in cluster.members)
        ]
        if self.dependent_selection == "largest_excess":
            return modelable, bool(modelable)
        pool = candidates or everyone
        statistics = ks_statistics(
            np.column_stack([self._baseline_observed[c] for c in pool]),
            np.column_stack([target_observed[c] for c in pool]),
        )
        if self.dependent_selection == "beyond_baseline":
            statistics = statistics - np.array([self.baseline_spread_[c] for c in pool])
        chosen = pool[int(np.argmax(statistics))]
        return [chosen], chosen in modelable

    def _check_cluster(
        self,
        number: int,
        cluster: _Cluster,
        pool: list[str],
        scores: _Scores | None,
        target: dict[str, np.ndarray],
        target_observed: dict[str, np.ndarray],
        threshold: float,
    ) -> ClusterResult:
        everyone = cluster.members + cluster.redundant
        if scores is not None:
            ranking = scores.z if self._ranks_by_z else scores.excess
            position = int(np.argmax(ranking))
            dependent = pool[position]
        else:
            candidates = [c for c in everyone if c not in self.usually_zero_]
            dependent = (pool or candidates or everyone)[0]
        ks_statistic = ks_pvalue = math.nan
        if self.report_:
            ks = ks_2samp(
                _present(self._baseline_observed[dependent]), _present(target_observed[dependent])
            )
            ks_statistic, ks_pvalue = float(ks.statistic), float(ks.pvalue)
        y_base = self._baseline[dependent]
        intercept: float | None = None
        coefficients: dict[str, float] = {}
        r_squared = error = good_run_error = excess = left_out = z = pvalue = None
        candidate_z: dict[str, float] = {}
        model: Literal["ols", "intercept", "none"] = "none"
        if scores is not None:
            left_out = scores.left_out[position]
            predictors = [m for m in cluster.members if m not in (dependent, left_out)]
            model = "ols" if predictors else "intercept"
            if self.report_:
                rows = scores.fitted_rows
                with warnings.catch_warnings():
                    # a predictor constant over the fitted blocks (a thread count in the
                    # steady state) leaves the design rank-deficient; the fit is then the
                    # minimum-norm one, as in the scores
                    warnings.simplefilter("ignore", SingularMatrixWarning)
                    fitted = sm.OLS(y_base[rows], _design(self._baseline, predictors)[rows]).fit()
                intercept = float(fitted.params[0])
                coefficients = dict(zip(predictors, map(float, fitted.params[1:]), strict=True))
                # a dependent constant over the fitted blocks has no variance to explain
                explained = predictors and np.ptp(y_base[rows]) > 0
                r_squared = float(fitted.rsquared) if explained else None
            error = _finite(scores.error[position])
            good_run_error = _finite(scores.usual[position])
            excess = _finite(scores.excess[position])
            z = _finite(scores.z[position])
            pvalue = _finite(scores.pvalue[position])
            candidate_z = {
                name: float(value)
                for name, value in zip(pool, scores.z, strict=True)
                if math.isfinite(value)
            }
        return ClusterResult(
            cluster=number,
            # the workload models name the workload counters they are fitted on
            members=cluster.members if cluster.workload else sorted(everyone),
            redundant_members=cluster.redundant,
            dependent=dependent,
            ks_statistic=ks_statistic,
            ks_pvalue=ks_pvalue,
            baseline_ks_statistic=float(self.baseline_spread_[dependent]),
            model=model,
            left_out=left_out,
            intercept=intercept,
            coefficients=coefficients,
            r_squared=r_squared,
            error=error,
            good_run_error=good_run_error,
            excess_error=excess,
            flagged=self.effective_decision == "threshold"
            and excess is not None
            and excess > threshold,
            baseline_mean=float(np.mean(y_base)),
            target_mean=float(np.mean(target[dependent])),
            z=z,
            pvalue=pvalue,
            tests=scores.tests if scores is not None else 0,
            candidate_z=candidate_z,
            workload=cluster.workload,
        )

    def _model_errors(
        self,
        cluster: _Cluster,
        candidates: list[str],
        target: dict[str, np.ndarray],
        target_observed: dict[str, np.ndarray],
    ) -> _ModelErrors:
        """Per candidate, of its model on all the other members of the cluster and (with
        decouple_strongest, but for the workload models: no workload counter is driven by
        what they model) of the model without the strongest of them: the prediction
        error on the target and on each baseline run, fitted on the others (with one
        baseline run, on that run), with their within-run statistics.

        A member is modelled on the other members, a redundant counter on all members.
        All models of one fit come from a single inverse Gram matrix instead of one
        regression each: for the design A = [1, members] and H = (A'A)^-1, member j
        regressed on the others predicts x_j - (x H)_j / H_jj for a row x, and leaving out
        column q as well is the rank-one downdate H - H[:, q] H[q, :] / H_qq.
        """
        members = cluster.members
        names = list(dict.fromkeys(members + candidates))
        width = len(members)
        columns = np.array([names.index(c) for c in candidates], dtype=np.intp)
        base = np.column_stack([self._baseline[n] for n in names])
        centre, scale = base.mean(axis=0), base.std(axis=0)
        scale[scale == 0] = 1.0
        z_base = (base - centre) / scale
        z_target = (np.column_stack([target[n] for n in names]) - centre) / scale

        # training sets: the fitted rows of every baseline run, then each run left out in turn
        everything = np.ones(z_base.shape[0], dtype=bool)
        if self.robust_fit:
            everything = _typical_rows(z_base)
        trains, designs, inverses = _leave_one_run_out(
            z_base[:, :width], everything, self._run_slices
        )

        # the strongest predictor of each candidate (a design column; 0: none), from the
        # full fit: -H[1:, j] / H_jj for a member j, the coefficients (A'A)^-1 A'y otherwise
        design, inverse = designs[0], inverses[0]
        member = columns < width
        inside, outside = np.flatnonzero(member), np.flatnonzero(~member)
        betas = np.zeros((width, columns.size))
        diagonal = columns[inside] + 1
        betas[:, inside] = -inverse[1:, diagonal] / inverse[diagonal, diagonal]
        betas[columns[inside], inside] = 0.0
        betas[:, outside] = (inverse @ (design.T @ z_base[everything][:, columns[outside]]))[1:]
        decouple = self.decouple_strongest and not cluster.workload
        enough = np.where(member, width >= 3, width >= 2) & decouple
        strongest = np.zeros(columns.size, dtype=np.intp)
        if width:
            strongest = np.where(enough, np.argmax(np.abs(betas), axis=0) + 1, 0)

        def predict(fit: int, rows: np.ndarray) -> np.ndarray:
            """(rows, candidates, 2): predictions of the full and the decoupled models
            trained on ``trains[fit]`` (NaN where a candidate has no decoupled model)."""
            train, design, inverse = trains[fit], designs[fit], inverses[fit]
            new = np.column_stack([np.ones(rows.shape[0]), rows[:, :width]])
            projected = new @ inverse
            predicted = np.full((rows.shape[0], columns.size, 2), np.nan)
            j = columns[inside] + 1
            predicted[:, inside, 0] = rows[:, j - 1] - projected[:, j] / inverse[j, j]
            decoupled = inside[strongest[inside] > 0]
            j, q = columns[decoupled] + 1, strongest[decoupled]
            shrunk = projected[:, j] - projected[:, q] * inverse[q, j] / inverse[q, q]
            pivot = inverse[j, j] - inverse[q, j] ** 2 / inverse[q, q]
            predicted[:, decoupled, 1] = rows[:, j - 1] - shrunk / pivot
            moments = design.T @ z_base[train][:, columns[outside]]
            predicted[:, outside, 0] = new @ (inverse @ moments)
            has = strongest[outside] > 0
            decoupled, q = outside[has], strongest[outside[has]]
            downdate = np.einsum("ij,ji->i", inverse[q], moments[:, has]) / inverse[q, q]
            predicted[:, decoupled, 1] = predicted[:, decoupled, 0] - projected[:, q] * downdate
            return predicted * scale[columns][None, :, None] + centre[columns][None, :, None]

        runs = self._run_slices if len(self._run_slices) > 1 else [slice(None)]
        fits = range(1, len(runs) + 1) if len(self._run_slices) > 1 else [0]
        observed = np.column_stack([self._baseline_observed[name] for name in candidates])
        actual = [np.column_stack([target_observed[name] for name in candidates])]
        actual += [observed[run] for run in runs]
        predicted = [predict(0, z_target)] + [
            predict(fit, z_base[run]) for fit, run in zip(fits, runs, strict=True)
        ]
        floor = self.error_floor * np.abs(base[:, columns]).mean(axis=0)[:, None]
        # every model on every run (the target first) as one column of block errors
        length = max(a.shape[0] for a in actual)
        blocks = np.full((length, len(actual), columns.size, 2), np.nan)
        for i, (values, prediction) in enumerate(zip(actual, predicted, strict=True)):
            blocks[: values.shape[0], i] = percentage_error_blocks(
                values[:, :, None], prediction, floor
            )
        means, variances, effective = (
            statistic.reshape(len(actual), -1)
            for statistic in error_statistics(blocks.reshape(length, -1), self.error_trim)
        )
        score, score_variances, score_blocks = means, variances, effective
        if self.tested_score == "exceedance":
            exceeds = block_exceedances(
                blocks.reshape(length, len(actual), -1), self.exceedance_quantile
            )
            score, score_variances, score_blocks = (
                statistic.reshape(len(actual), -1)
                for statistic in error_statistics(exceeds.reshape(length, -1), 0.0)
            )
        return _ModelErrors(
            members=members,
            strongest=strongest,
            fitted_rows=everything,
            error=means[0],
            good=means[1:].T,
            score=score[0],
            score_variance=score_variances[0],
            score_blocks=score_blocks[0],
            good_score=score[1:].T,
            good_score_variances=score_variances[1:].T,
        )

    @property
    def _ranks_by_z(self) -> bool:
        """Whether models and clusters are ranked by z (the p-value rule) rather than by
        excess error: with one baseline run there is no z (no run-to-run spread to judge
        against), so the paper's excess error ranks them."""
        return self.effective_decision == "pvalue" and len(self._run_slices) > 1

    def _tested(self) -> bool:
        return self.report_ or self.effective_decision == "pvalue"

    def _variance_prior(self, errors: list[_ModelErrors]) -> VariancePrior | None:
        """The prior of every model's between-run variance (``variance_prior``) fitted to
        all models of the check; None without ``moderate_variance`` or a test."""
        if not (self.moderate_variance and self._tested() and errors):
            return None
        good = np.vstack([e.good_score[e.exists] for e in errors])
        good_variances = np.vstack([e.good_score_variances[e.exists] for e in errors])
        return variance_prior(good, good_variances)

    def _score_models(self, errors: _ModelErrors, prior: VariancePrior | None) -> _Scores:
        """Per candidate: its model's error on the target, the model's usual error on good
        runs (``_usual_errors``), what is compared with the threshold, and how unusual the
        error is (z, p-value; the between-run variance moderated by ``prior``). With
        decouple_strongest, the better of the model on all the other members and the
        model without the strongest of them."""
        members, strongest = errors.members, errors.strongest
        exists, error, good = errors.exists, errors.error, errors.good
        good_score, good_variances = errors.good_score, errors.good_score_variances
        z: np.ndarray = np.full(error.shape, np.nan)
        pvalue: np.ndarray = np.full(error.shape, np.nan)
        tested = self._tested()
        if tested:
            z, pvalue, _ = excess_error_tests(
                errors.score,
                errors.score_variance,
                good_score,
                good_variances,
                errors.score_blocks,
                prior,
            )
        usual = _usual_errors(good)
        excess = error - np.where(np.isfinite(usual), usual, 0.0)
        if not self.subtract_good_run_error:
            excess = error
        excess = np.where(np.isfinite(excess), excess, -math.inf).reshape(-1, 2)
        z = np.where(np.isfinite(z), z, -math.inf).reshape(-1, 2)

        size = strongest.size
        scores = _Scores(size)
        scores.fitted_rows = errors.fitted_rows
        scores.tests = int(exists.sum())
        if tested:
            scores.null = _null_pvalues(good_score[exists], good_variances[exists], prior)
        ranking = z if self._ranks_by_z else excess
        chosen = np.where((strongest > 0) & (ranking[:, 1] > ranking[:, 0]), 1, 0)
        pick = (np.arange(size), chosen)
        scores.error = error.reshape(-1, 2)[pick]
        scores.usual = usual.reshape(-1, 2)[pick]
        scores.excess, scores.z = excess[pick], z[pick]
        scores.pvalue = pvalue.reshape(-1, 2)[pick]
        scores.left_out = [
            members[q - 1] if variant else None
            for q, variant in zip(strongest.tolist(), chosen.tolist(), strict=True)
        ]
        return scores

    # --- calibration -------------------------------------------------------------------

    def calibrate(
        self, good_runs: Sequence[CounterSamples], *, prepared_runs: PreparedRuns | None = None
    ) -> CounterRegressionCheck:
        """Learn the threshold from good runs by leave-one-out: each run is checked against
        a baseline of the others; threshold = largest excess error + calibration_margin.
        Call before or after ``fit``; ``fit`` keeps it.

        prepared_runs: as in ``fit``; passing the same instance to a ``fit`` on the same
        runs next (as compare and the stream do) spares that fit preparing them again.
        """
        if len(good_runs) < 2:
            raise ValueError("calibration needs at least two good runs")
        largest: list[float] = []
        # each run is a baseline run in every fold but its own: prepare it once
        prepared = PreparedRuns() if prepared_runs is None else prepared_runs
        for held_out, run in enumerate(good_runs):
            others = [r for i, r in enumerate(good_runs) if i != held_out]
            check = clone(self).set_params(decision="threshold")
            check.fit(others, prepared_runs=prepared, report=False)
            result = check.check(run, prepared_runs=prepared)
            largest.append(result.max_excess_error or 0.0)
        self.calibration_: dict[str, Any] = {
            "runs": [_run_label(run, i) for i, run in enumerate(good_runs)],
            "largest_excess_errors": largest,
            "margin": self.calibration_margin,
            "threshold": max(max(largest), 0.0) + self.calibration_margin,
        }
        return self

    # --- helpers -----------------------------------------------------------------------

    def _validate_params(self) -> None:
        choices = {
            "distance": ("1-|rho|", "1-rho"),
            "singletons": ("merge", "intercept", "skip"),
            "steady_state": ("auto", "off"),
            "dependent_selection": ("largest_excess", "beyond_baseline", "ks"),
            "decision": ("pvalue", "threshold"),
            "tested_score": ("error", "exceedance"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        for name in ("redundancy_r2", "identity_r2"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value < 1.0:
                raise ValueError(f"{name} must be between 0 and 1 (exclusive) or None")
        if self.shrinkage is not None and not 0.0 <= self.shrinkage <= 1.0:
            raise ValueError("shrinkage must be between 0 and 1 or None")
        if self.threshold <= 0:
            raise ValueError("threshold must be positive")
        if self.error_floor < 0:
            raise ValueError("error_floor must not be negative")
        if not 0.0 <= self.error_trim < 1.0:
            raise ValueError("error_trim must be from 0 (inclusive) to 1 (exclusive)")
        if self.block < 1:
            raise ValueError("block must be at least 1 sample")
        if not 0.0 < self.exceedance_quantile < 1.0:
            raise ValueError("exceedance_quantile must be between 0 and 1 (exclusive)")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError("alpha must be between 0 and 1 (exclusive)")
        if self.calibration_margin < 0:
            raise ValueError("calibration_margin must not be negative")
        if isinstance(self.workload, str) or not all(isinstance(p, str) for p in self.workload):
            raise ValueError("workload must be a sequence of counter names or patterns")

    def _drop_mostly_missing(
        self, names: list[str], runs: Sequence[CounterSamples], what: str
    ) -> tuple[list[str], list[RemovedCounter]]:
        removed = []
        keep = []
        # one pass over each run's matrix, not a column lookup per counter per run
        missing = np.max(
            [np.isnan(run.values).mean(axis=0)[_columns(run, names)] for run in runs], axis=0
        )
        for name, worst in zip(names, missing.tolist(), strict=True):
            if worst > self.max_missing_fraction:
                removed.append(
                    RemovedCounter(
                        name,
                        MOSTLY_MISSING,
                        f"{worst:.0%} of the samples of a {what} are missing "
                        f"(limit {self.max_missing_fraction:.0%})",
                    )
                )
            else:
                keep.append(name)
        return keep, removed

    def _prepare_run(self, run: CounterSamples, names: list[str], index: int) -> _PreparedRun:
        raw = run.values[:, _columns(run, names)]
        filled = fill_missing(raw)
        start, end = 0, filled.shape[0]
        if self.steady_state == "auto":
            start, end = steady_state_window(
                filled, z_limit=self.steady_state_z, max_trim_fraction=self.max_trim_fraction
            )
        # whole blocks only: a shorter last block would average a different stretch
        end = start + (end - start) // self.block * self.block
        if end - start < 3 * self.block:
            raise ValueError(
                f"{_run_label(run, index)}: {end - start} steady-state sample(s); at least "
                f"{3 * self.block} ({3} blocks of {self.block}) needed"
            )
        observed = ~np.isnan(raw[start:end])
        return _PreparedRun(
            samples=filled[start:end],
            sample_observed=observed,
            # averaging filled samples keeps linear identities exact across single gaps
            values=block_means(filled[start:end], self.block),
            observed=block_means(observed.astype(float), self.block) > 0,
            window=(start, end),
        )


class _Correlations:
    """Correlation matrices of column subsets of one sample matrix: the matrix of the
    first subset asked for is computed once (from the runs' cross-products when the
    samples are those runs stacked), later (smaller) subsets are cut from it; and the
    inverse of the last shrunk matrix, which the identity and redundancy steps share:
    as it is when the identities removed nothing, downdated to the remaining counters
    otherwise (``_DOWNDATE_INFLATION``)."""

    def __init__(
        self, values: np.ndarray, columns: np.ndarray, runs: list[_PreparedRun] | None = None
    ) -> None:
        self.values = values
        self.observations = values.shape[0]
        self._columns = columns
        self._runs = runs
        self._matrix: np.ndarray | None = None
        self._inverse: tuple[np.ndarray, float, np.ndarray] | None = None
        self.inversions = 0  # matrices inverted, not downdated

    def of(self, columns: np.ndarray) -> np.ndarray:
        if self._matrix is None:
            if self._runs is None:
                self._matrix = correlation_matrix(self.values[:, self._columns])
            else:
                counts, means, scatters = zip(*(run.moments for run in self._runs), strict=True)
                # summed first, then cut once: the same sums, one copy instead of one per run
                total = sum(scatters, np.zeros_like(scatters[0]))[
                    np.ix_(self._columns, self._columns)
                ]
                self._matrix = pooled_correlation(
                    counts, [m[self._columns] for m in means], [total]
                )
        if np.array_equal(columns, self._columns):
            return self._matrix  # callers never modify it
        position = np.searchsorted(self._columns, columns)
        return self._matrix[np.ix_(position, position)]

    def shrunk(self, columns: np.ndarray, amount: float) -> tuple[np.ndarray, np.ndarray]:
        """``shrink_correlation`` of the columns' matrix and its ``correlation_inverse``."""
        correlation = shrink_correlation(self.of(columns), amount)
        if self._inverse is not None and self._inverse[1] == amount:
            known, _, inverse = self._inverse
            if np.array_equal(known, columns):
                return correlation, inverse
            if np.isin(columns, known).all() and np.diag(inverse).max() <= _DOWNDATE_INFLATION:
                # the shrunk matrix of a subset is the subset of the shrunk matrix, whose
                # inverse is the Schur complement of the removed counters in the inverse
                kept = np.searchsorted(known, columns)
                gone = np.setdiff1d(np.arange(known.size), kept)
                downdated = inverse[np.ix_(kept, kept)] - inverse[np.ix_(kept, gone)] @ (
                    np.linalg.solve(inverse[np.ix_(gone, gone)], inverse[np.ix_(gone, kept)])
                )
                self._inverse = (columns.copy(), amount, (downdated + downdated.T) / 2)
                return correlation, self._inverse[2]
        self.inversions += 1
        self._inverse = (columns.copy(), amount, correlation_inverse(correlation))
        return correlation, self._inverse[2]


def _drop_run_identities(
    runs: list[_PreparedRun], analysed: np.ndarray, names: list[str]
) -> tuple[np.ndarray, list[RemovedCounter]]:
    """Split off counters constant within every run but not across runs, and clocks."""
    values = [run.samples[:, analysed] for run in runs]
    constant = np.all(
        [
            (highest - lowest)[analysed] <= _constant_tolerance(magnitude[analysed])
            for lowest, highest, magnitude in (run.extremes for run in runs)
        ],
        axis=0,
    )
    clock = ~constant & np.all([_r2_on_index(v) >= _CLOCK_R2 for v in values], axis=0)
    removed = []
    for position in np.flatnonzero(constant):
        levels = sorted({float(v[0, position]) for v in values})
        removed.append(
            RemovedCounter(
                names[analysed[position]],
                CONSTANT_PER_RUN,
                "constant within each baseline run, different between runs "
                f"({_format_levels(levels)}): identifies a run, measures nothing",
            )
        )
    for position in np.flatnonzero(clock):
        removed.append(
            RemovedCounter(
                names[analysed[position]],
                CLOCK,
                f"grows linearly with the sample index in every baseline run (R^2 >= "
                f"{_CLOCK_R2}): a clock, measures nothing",
            )
        )
    return analysed[~constant & ~clock], removed


def _r2_on_index(values: np.ndarray) -> np.ndarray:
    """R^2 of each column's linear fit on the sample index (0 for a constant column)."""
    index = np.arange(values.shape[0], dtype=np.float64)
    index = (index - index.mean()) / index.std()
    centred = values - values.mean(axis=0)
    spread = centred.std(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        correlation = (index @ centred) / values.shape[0] / spread
    return np.where(spread > 0, correlation**2, 0.0)


def _columns(run: CounterSamples, names: list[str]) -> np.ndarray:
    """The column of each name in ``run`` (a dict lookup each, not a list search)."""
    position = {name: i for i, name in enumerate(run.names)}
    return np.array([position[name] for name in names], dtype=np.intp)


def _removal(
    step: RedundancyStep, names: list[str], analysed: np.ndarray, reason: str, kind: str
) -> RemovedCounter:
    # the three largest |beta| (ties: lower index) without sorting a thousand Python pairs
    indices, betas = step.predictors, step.betas
    strongest = np.lexsort((indices, -np.abs(betas)))[:3]
    explained_by = {names[analysed[indices[i]]]: float(betas[i]) for i in strongest}
    return RemovedCounter(
        names[analysed[step.index]],
        reason,
        f"{kind}: R^2 {step.r_squared:.4f} on the remaining counters, mostly "
        + ", ".join(explained_by),
        r_squared=step.r_squared,
        explained_by=explained_by,
    )


def _run_level(blocks: list[np.ndarray], names: list[str]) -> list[str]:
    """Counters whose run means differ more between good runs than their blocks do
    within a run (handle counts, free memory, a heap's live set)."""
    means = np.array([np.nanmean(run, axis=0) for run in blocks])
    within = np.nanmean([np.nanvar(run, axis=0, ddof=1) for run in blocks], axis=0)
    between = np.var(means, axis=0, ddof=1)
    return [names[i] for i in np.flatnonzero(between > within)]


def _leave_one_run_out(
    predictors: np.ndarray, fitted: np.ndarray, runs: list[slice]
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The training rows of a cluster's models (the ``fitted`` rows, then with each run
    left out in turn when there are several runs), their designs (intercept and
    predictors) and inverse Gram matrices."""
    trains = [fitted]
    for run in runs if len(runs) > 1 else []:
        trains.append(fitted.copy())
        trains[-1][run] = False
    designs = [np.column_stack([np.ones(int(t.sum())), predictors[t]]) for t in trains]
    # all inverse Gram matrices in one stacked call: the same matrices as one call each,
    # without the per-call overhead that dominated many small clusters
    return trains, designs, np.linalg.pinv(np.stack([d.T @ d for d in designs]), hermitian=True)


def _typical_rows(values: np.ndarray) -> np.ndarray:
    """Rows that are not multivariate outliers: squared Mahalanobis distance from the
    mean within the chi-square quantile ``_TYPICAL_QUANTILE`` (twice, the second time with
    the mean and covariance of the rows the first pass kept). All rows when there are too
    few for a covariance."""
    rows, width = values.shape
    keep = np.ones(rows, dtype=bool)
    if rows <= 4 * width:
        return keep
    limit = _typical_limit(width)
    for _ in range(2):
        centred = values - values[keep].mean(axis=0)
        covariance = np.atleast_2d(np.cov(centred[keep], rowvar=False))
        precision = np.linalg.pinv(covariance, hermitian=True)
        keep = np.einsum("ij,jk,ik->i", centred, precision, centred) <= limit
    return keep


@functools.cache
def _typical_limit(width: int) -> float:
    """``_typical_rows``' chi-square quantile, once per width (a scipy call costs more
    than the screening of a small cluster)."""
    return float(chi2.ppf(_TYPICAL_QUANTILE, width))


def _usually_zero(
    samples: np.ndarray, runs: list[_PreparedRun], columns: np.ndarray, floor: float
) -> np.ndarray:
    """Per column of ``samples`` (the runs stacked), whether the median of its absolute
    values is below ``floor`` times their mean. A column whose lower-quarter order
    statistic in every run (``_PreparedRun.magnitudes``) is above that mean cannot be:
    three quarters of the stacked values lie above it, the median among them. Only the
    other columns need the median of the stacked samples."""
    bound = np.min([run.magnitudes[0][columns] for run in runs], axis=0)
    mean = np.sum([run.magnitudes[1][columns] for run in runs], axis=0) / samples.shape[0]
    # the margin covers the rounding of a mean summed in another order
    doubt = np.flatnonzero(~(bound > floor * mean * (1 + 1e-9)))
    below = np.zeros(columns.size, dtype=bool)
    if doubt.size:
        # one counter per row: the median's partition then runs along contiguous memory
        magnitude = np.abs(samples[:, columns[doubt]].T)
        below[doubt] = np.median(magnitude, axis=1) < floor * magnitude.mean(axis=1)
    return below


def _blame(clusters: list[ClusterResult]) -> list[tuple[str, float]]:
    """Counters ranked by how unusual their own model's error is (z against the good
    runs' errors), largest first; ties in name order."""
    best: dict[str, float] = {}
    for cluster in clusters:
        for name, z in cluster.candidate_z.items():
            best[name] = max(z, best.get(name, -math.inf))
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def _usual_errors(errors: np.ndarray) -> np.ndarray:
    """Per model (row), the upper end of its usual error on good runs: mean + 2 standard
    deviations of its finite errors on the held-out runs (the error itself with one run;
    NaN with none)."""
    finite = np.isfinite(errors)
    count = finite.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(finite, errors, 0.0).sum(axis=1) / count
        deviations = np.where(finite, errors - mean[:, None], 0.0)
        spread = np.sqrt(np.einsum("ij,ij->i", deviations, deviations) / (count - 1))
    return mean + 2.0 * np.where(count > 1, spread, 0.0)


def _null_pvalues(
    errors: np.ndarray, variances: np.ndarray, prior: VariancePrior | None
) -> list[float]:
    """p-values of the good runs, each checked against the others, of every model
    (row) with at least three finite errors: every (model, run) pair in one batch."""
    tested = (np.isfinite(errors).sum(axis=1) >= 3)[:, None] & np.isfinite(errors)
    model, run = np.nonzero(tested)
    others = errors[model].copy()
    others[np.arange(model.size), run] = np.nan
    _, pvalues, _ = excess_error_tests(
        errors[model, run],
        variances[model, run],
        others,
        variances[model],
        np.full(model.size, math.inf),
        prior,
    )
    return pvalues.tolist()


def _design(columns: dict[str, np.ndarray], predictors: list[str]) -> np.ndarray:
    """Intercept column, then one column per predictor."""
    rows = next(iter(columns.values())).shape[0]
    return np.column_stack([np.ones(rows)] + [columns[p] for p in predictors])


def _present(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)]


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _largest_magnitude(values: np.ndarray) -> np.ndarray:
    """Per column, the largest absolute value (0 for no rows)."""
    return np.abs(values).max(axis=0, initial=0.0)


def _constant_tolerance(magnitude: np.ndarray) -> np.ndarray:
    """Spread below which a column of this largest absolute value counts as constant:
    float noise around its level."""
    return 1e-12 * np.maximum(1.0, magnitude)


def _run_label(run: CounterSamples, index: int) -> str:
    return run.label or f"run {index + 1}"


def _some(names: list[str]) -> str:
    """The first three names, then how many more (a message's glimpse of a list)."""
    shown = ", ".join(names[:3]) or "nothing"
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _format_levels(levels: list[float]) -> str:
    shown = ", ".join(f"{level:g}" for level in levels[:4])
    return shown + (", ..." if len(levels) > 4 else "")


def _json_float(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)
