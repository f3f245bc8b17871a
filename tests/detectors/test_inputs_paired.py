"""The paired run-or-skip rule on constructed profiles, one case per way it used to fail.

Each case builds a baseline, the sampled inputs profiled on the old code (the
reference) and on the new code, with every timing pass kept, the two versions
alternated pass by pass: a round's machine load hits both alike, and each pass
adds a few percent of independent jitter.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import (
    InputClustering,
    PairedChange,
    RunOrSkipRecommender,
    input_table,
    judge_change,
    paired_change,
    round_logs,
    sample_inputs,
)

PASSES = 15


def profile(
    input_id: str,
    statements: float,
    times: np.ndarray,
    *,
    size: float,
    calls_every: float = 10,
    memory_per_byte: float = 8,
) -> InputProfile:
    cpu = [float(t) for t in times]
    return InputProfile(
        input_id=input_id,
        size=size,
        wall_time_s=min(cpu),
        cpu_time_s=min(cpu),
        peak_memory_bytes=size * memory_per_byte,
        statements=int(statements),
        function_calls=int(statements / calls_every),
        loop_iterations=int(statements / 4),
        conditionals=int(statements / 5),
        cpu_times_s=cpu,
        wall_times_s=cpu,
    )


# kind -> (statements per byte, statements per call, bytes of memory per byte)
KINDS = {"parse": (3.0, 12, 40), "render": (0.4, 60, 8), "query": (9.0, 6, 200)}


class Suite:
    """Inputs of a few kinds; per-pass times = work x round load x jitter."""

    def __init__(self, per_kind: int = 40, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.work: dict[str, tuple[float, float, str]] = {}
        for kind, (per_byte, _, _) in KINDS.items():
            for i in range(per_kind):
                size = float(np.exp(self.rng.uniform(np.log(1e3), np.log(4e3))))
                self.work[f"{kind}-{i:03d}"] = (size, size * per_byte, kind)

    def times(self, seconds: float, load: np.ndarray) -> np.ndarray:
        return seconds * load * self.rng.lognormal(0, 0.03, load.size)

    def load(self) -> np.ndarray:
        # a shared machine: most rounds near idle, some much slower
        return 1 + self.rng.exponential(0.15, PASSES)

    def profiles(
        self, ids: list[str], load: np.ndarray, slowdown: dict[str, float], extra: float = 1.0
    ) -> list[InputProfile]:
        profiles = []
        for input_id in ids:
            size, statements, kind = self.work[input_id]
            _, calls_every, memory = KINDS[kind]
            seconds = statements * 2e-7 * slowdown.get(kind, 1.0)
            profiles.append(
                profile(
                    input_id,
                    statements * (extra if slowdown.get(kind, 1.0) != 1.0 else 1.0),
                    self.times(seconds, load),
                    size=size,
                    calls_every=calls_every,
                    memory_per_byte=memory,
                )
            )
        return profiles

    def baseline(self) -> list[InputProfile]:
        return self.profiles(list(self.work), self.load(), {})

    def judge(
        self,
        slowdown: dict[str, float],
        *,
        extra_statements: float = 1.0,
        recommender: RunOrSkipRecommender | None = None,
    ) -> tuple[object, InputClustering]:
        baseline = self.baseline()
        clustering = InputClustering().fit(*input_table(baseline))
        sample = [i for ids in sample_inputs(clustering, per_cluster=3).values() for i in ids]
        load = self.load()  # old and new passes alternate: both see this round's load
        reference = self.profiles(sample, load, {})
        update = self.profiles(sample, load, slowdown, extra_statements)
        judge = recommender or RunOrSkipRecommender()
        return judge.recommend(clustering, baseline, update, reference=reference), clustering


def test_a_patch_that_adds_statements_cannot_excuse_itself() -> None:
    # An inner loop: every input executes 2.4 times the statements and takes 3.3 times as long.
    recommendation, _ = Suite(seed=1).judge({kind: 3.3 for kind in KINDS}, extra_statements=2.4)
    assert recommendation.decision == "run"
    assert recommendation.run_share == 1.0
    assert recommendation.summary().startswith("RUN: slower with confidence in")
    (driver, *_) = recommendation.drivers
    assert driver.change is not None and driver.change.estimate == pytest.approx(2.3, abs=0.15)
    assert (
        "+2" in driver.reason
        and "slower beyond the acceptable 5%, the interval above 2.5%" in driver.reason
    )


def test_a_slowdown_confined_to_one_kind_of_input_runs() -> None:
    recommendation, clustering = Suite(seed=2).judge({"render": 1.12})
    assert recommendation.decision == "run"
    assert recommendation.run_share < 0.5  # pooled, the other clusters would outvote it
    running = [c for c in recommendation.clusters if c.decision == "run"]
    assert running
    for cluster in running:
        assert {member.split("-")[0] for member in clustering.cluster(cluster.label).members} == {
            "render"
        }
        assert cluster.change is not None and cluster.change.low is not None
        assert cluster.change.low > 0
    assert {vote.input_id.split("-")[0] for vote in recommendation.drivers} == {"render"}
    document = recommendation.to_dict()
    assert document["decision"] == "run" and document["rule"] == "paired"
    assert {c["decision"] for c in document["clusters"]} == {"run", "skip"}


@pytest.mark.parametrize("seed", range(10))
def test_noise_alone_never_runs(seed: int) -> None:
    recommendation, _ = Suite(seed=100 + seed).judge({})
    assert recommendation.decision == "skip", recommendation.summary()
    assert not recommendation.faster


def test_a_speedup_skips_and_says_so() -> None:
    recommendation, _ = Suite(seed=3).judge({kind: 0.8 for kind in KINDS})
    assert recommendation.decision == "skip" and recommendation.faster
    assert recommendation.summary() == "SKIP: the update is faster in every cluster"
    assert all(vote.verdict == "faster" for vote in recommendation.votes)


def test_a_small_slowdown_within_the_acceptable_one_skips() -> None:
    recommendation, _ = Suite(seed=4).judge({kind: 1.02 for kind in KINDS})
    assert recommendation.decision == "skip"


def test_a_skip_on_too_wide_an_interval_advises_a_larger_sample() -> None:
    # median ratio 1.12, but the 4th smallest of 15 (the interval's low end) is 1.0
    ratios = [0.9, 0.95, 1.0, 1.0, 1.12, 1.12, 1.12, 1.12, 1.12, 1.2, 1.3, 1.3, 1.3, 1.4, 1.5]
    baseline = [
        profile(f"in-{i}", 1000 * i, np.full(15, 0.001 * i), size=100.0 * i) for i in (1, 2, 3, 4)
    ]
    clustering = InputClustering("kmeans", n_clusters=1).fit(*input_table(baseline))
    old = profile("in-2", 2000, np.full(15, 0.002), size=200.0)
    new = profile("in-2", 2000, 0.002 * np.array(ratios), size=200.0)
    recommendation = RunOrSkipRecommender().recommend(
        clustering, baseline, [new], reference=[old], per_cluster=3
    )
    (vote,) = recommendation.votes
    assert vote.change is not None and vote.change.estimate == pytest.approx(0.12)
    assert vote.change.low == pytest.approx(0.0) and vote.verdict == "unchanged"
    assert recommendation.decision == "skip" and recommendation.close
    assert recommendation.advice == {
        "message": "an input looked slower than acceptable, its interval too wide to tell: "
        "profile a larger sample, 6 inputs per cluster with the same seed, and decide again",
        "per_cluster": 6,
    }


# -- one giant cluster ---------------------------------------------------------------------


def kinds_with_giants(seed: int) -> list[InputProfile]:
    """Four kinds of small inputs and three huge inputs of each kind: on raw attributes
    the giants stretch every scale and the small inputs of all kinds fall together."""
    rng = np.random.default_rng(seed)
    kinds = {**KINDS, "validate": (1.2, 25, 15)}
    profiles = []
    for kind, (per_byte, calls_every, memory) in kinds.items():
        for i in range(100):
            low, high = (2e5, 1e6) if i < 3 else (1e3, 4e3)
            size = float(np.exp(rng.uniform(np.log(low), np.log(high))))
            statements = size * per_byte * rng.normal(1, 0.05)
            times = np.full(3, statements * 2e-8 * rng.normal(1, 0.05))
            profiles.append(
                profile(
                    f"{kind}-{i:03d}",
                    statements,
                    times,
                    size=size,
                    calls_every=calls_every,
                    memory_per_byte=memory * rng.normal(1, 0.05),
                )
            )
    return profiles


def kind_mix(clustering: InputClustering) -> list[Counter[str]]:
    return [
        Counter(member.split("-")[0] for member in cluster.members)
        for cluster in clustering.clusters_
        if cluster.label != -1
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_log_scaling_separates_what_raw_attributes_lump_together(seed: int) -> None:
    profiles = kinds_with_giants(seed)
    raw = InputClustering(scaling="linear").fit(*input_table(profiles))
    assert max(len(mix) for mix in kind_mix(raw)) >= 3  # the giant cluster

    clustering = InputClustering().fit(*input_table(profiles))
    mixes = kind_mix(clustering)
    assert all(len(mix) == 1 for mix in mixes)  # no cluster mixes kinds
    assert set().union(*mixes) == {"parse", "render", "query", "validate"}
    assert clustering.silhouette_ is not None and clustering.silhouette_ > 0.3
    document = clustering.to_dict()
    assert document["silhouette"] == clustering.silhouette_
    assert "size" in document["log_scaled"] and "statements" in document["log_scaled"]
    sample = sample_inputs(clustering, per_cluster=3)
    assert set(sample) == {cluster.label for cluster in clustering.clusters_}


# -- the paired change itself --------------------------------------------------------------


def test_the_sign_test_interval_takes_the_hand_checked_order_statistics() -> None:
    # 15 pairs: P(B <= 3) = 576 / 32768 = 0.0176 <= 0.025 < P(B <= 4), so the 95%
    # interval runs from the 4th to the 12th smallest ratio.
    assert binom.cdf(3, 15, 0.5) == pytest.approx(576 / 32768)
    ratios = 1 + np.arange(1, 16) / 100  # 1.01 .. 1.15, shuffled below
    order = np.random.default_rng(0).permutation(15)
    change = paired_change(np.ones(15), ratios[order], paired=True)
    assert change.method == "paired_passes" and change.passes == 15
    assert change.estimate == pytest.approx(0.08)
    assert (change.low, change.high) == (pytest.approx(0.04), pytest.approx(0.12))


def test_a_round_is_the_median_of_its_paired_passes_not_the_ratio_of_fastest() -> None:
    # round 1: pass ratios 1.3, 1.05, 1.0 (median 1.05; fastest 1.1 / 1.0 = 1.1);
    # round 2: 1.1, 1.1, 0.8 (median 1.1; fastest 2.0 / 2.0 = 1.0)
    old = np.array([1.0, 1.2, 1.1, 2.0, 2.0, 2.5])
    new = np.array([1.3, 1.26, 1.1, 2.2, 2.2, 2.0])
    assert round_logs(old, new, 2) == pytest.approx(np.log([1.05, 1.1]))
    # ln 1.05 = 0.04879, ln 1.1 = 0.09531: mean 0.07205, sd 0.03290, half-width
    # 12.706 * 0.03290 / sqrt(2) = 0.2956: exp(0.07205 -+ 0.2956) - 1
    change = paired_change(old, new, paired=True, rounds=2)
    assert change.method == "paired_rounds" and change.passes == 2
    assert change.estimate == pytest.approx(np.sqrt(1.05 * 1.1) - 1)
    assert change.low == pytest.approx(-0.2002, abs=1e-4)
    assert change.high == pytest.approx(0.4442, abs=1e-4)


def test_too_few_pairs_give_no_interval() -> None:
    # 5 pairs cannot reach 95%: P(B = 0) = 1/32 > 0.025
    change = paired_change([1.0] * 5, [1.5] * 5, paired=True)
    assert change.low is None and change.estimate == pytest.approx(0.5)
    assert judge_change(change, 0.05, 0.10)[0] == "slower"  # clears 1.05 x 1.10
    assert judge_change(PairedChange(0.12, None, None, "minima", 1), 0.05, 0.10)[0] == ("unchanged")


def test_unpaired_timings_use_the_hodges_lehmann_shift() -> None:
    change = paired_change([1.0, 1.1, 1.2, 1.05] * 4, [1.3, 1.4, 1.5, 1.35] * 4, paired=False)
    assert change.method == "unpaired_passes"
    assert change.low is not None and change.low > 0.15
    # the 16 distinct ratios new/old: the 8th and 9th smallest are 1.4/1.1 and 1.35/1.05,
    # and the median of their logs is the log of their geometric mean
    assert change.estimate == pytest.approx(np.sqrt(14 / 11 * 9 / 7) - 1)


positive_times = st.lists(
    st.floats(min_value=1e-4, max_value=10.0, allow_nan=False), min_size=6, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(positive_times, st.floats(min_value=0.2, max_value=5.0), st.floats(0.1, 10.0))
def test_paired_change_is_scale_free_and_brackets_its_estimate(
    old: list[float], factor: float, scale: float
) -> None:
    new = [t * factor for t in old]
    change = paired_change(old, new, paired=True)
    assert change.estimate == pytest.approx(factor - 1, rel=1e-9, abs=1e-9)
    rescaled = paired_change([t * scale for t in old], [t * scale for t in new], paired=True)
    assert rescaled.estimate == pytest.approx(change.estimate, rel=1e-9, abs=1e-9)
    if change.low is not None and change.high is not None:
        assert change.low <= change.estimate + 1e-12 <= change.high + 2e-12


@settings(max_examples=60, deadline=None)
@given(positive_times, positive_times)
def test_swapping_versions_inverts_the_paired_ratio(old: list[float], new: list[float]) -> None:
    n = min(len(old), len(new))
    forward = paired_change(old[:n], new[:n], paired=True)
    backward = paired_change(new[:n], old[:n], paired=True)
    assert (1 + forward.estimate) * (1 + backward.estimate) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(
    ("estimate", "low", "high", "verdict"),
    [
        (0.08, 0.03, 0.12, "slower"),  # beyond 5%, interval above 2.5%
        (0.08, 0.02, 0.12, "unchanged"),  # the interval reaches a negligible change
        (0.04, 0.03, 0.05, "unchanged"),  # surely slower, but within the acceptable 5%
        (-0.10, -0.14, -0.06, "faster"),
        (-0.10, -0.14, 0.01, "unchanged"),
    ],
)
def test_an_input_is_slower_only_with_its_interval_above_half_the_acceptable_slowdown(
    estimate: float, low: float, high: float, verdict: str
) -> None:
    change = PairedChange(estimate, low, high, "paired_passes", 15)
    assert judge_change(change, 0.05, 0.10)[0] == verdict
