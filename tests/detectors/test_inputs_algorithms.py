"""Algorithms 1 and 2 of Javed et al. and the recommendation, on hand-made cases."""

from __future__ import annotations

import pytest

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import (
    Decision,
    InputClustering,
    RunOrSkipRecommender,
    decide,
    gradient_change,
    input_table,
    time_threshold,
)

# One cluster: statements -> baseline times (two inputs share 200 statements).
STATEMENTS = [100, 200, 200, 400]
TIMES = [1.0, 2.0, 2.5, 4.0]


def profile(input_id: str, statements: int, time: float, size: float = 1.0) -> InputProfile:
    return InputProfile(
        input_id=input_id,
        size=size,
        wall_time_s=time,
        cpu_time_s=time,
        peak_memory_bytes=1000,
        statements=statements,
        function_calls=statements // 10,
        loop_iterations=statements // 4,
        conditionals=statements // 5,
    )


# -- Algorithm 2: the time threshold --------------------------------------------------------


def test_equal_statement_count_takes_the_largest_time_among_equals() -> None:
    threshold = time_threshold(STATEMENTS, TIMES, 200)
    assert threshold.case == "equal_statements"
    assert threshold.value == 2.5


def test_between_neighbours_takes_the_midpoint_of_their_largest_times() -> None:
    threshold = time_threshold(STATEMENTS, TIMES, 300)
    assert threshold.case == "between_neighbours"
    assert (threshold.below_statements, threshold.above_statements) == (200, 400)
    assert threshold.value == (2.5 + 4.0) / 2


def test_beyond_the_upper_edge_takes_the_nearest_inputs_below() -> None:
    threshold = time_threshold(STATEMENTS, TIMES, 900)
    assert threshold.case == "beyond_upper_edge"
    assert (threshold.below_statements, threshold.value) == (400, 4.0)


def test_beyond_the_lower_edge_takes_the_nearest_inputs_above() -> None:
    threshold = time_threshold(STATEMENTS, TIMES, 50)
    assert threshold.case == "beyond_lower_edge"
    assert (threshold.above_statements, threshold.value) == (100, 1.0)


def test_beyond_the_lower_edge_uses_the_largest_time_of_tied_neighbours() -> None:
    threshold = time_threshold([200, 200, 400], [2.0, 2.5, 4.0], 150)
    assert threshold.value == 2.5


def test_an_empty_cluster_has_no_threshold() -> None:
    with pytest.raises(ValueError, match="at least one input"):
        time_threshold([], [], 10)


# -- Algorithm 1: the decision ----------------------------------------------------------------


def test_time_above_the_threshold_votes_run_without_the_gradient_check() -> None:
    decision = decide(3.0, 200, 2.5, previous_time=2.0, previous_statements=200)
    assert decision == Decision(True, True, None, None, None, None)


def test_time_within_the_threshold_and_a_steep_gradient_drop_votes_run() -> None:
    # 200 statements in 1.0 s before, 200 in 2.0 s after: the slope halves (a 50% drop).
    decision = decide(
        2.0, 200, 2.5, previous_time=1.0, previous_statements=200, acceptable_slowdown=0.38
    )
    assert decision.run and not decision.time_check and decision.gradient_check
    assert decision.gradient_before == 200 and decision.gradient_after == 100
    assert decision.gradient_change == pytest.approx(0.5)


def test_gradient_drop_within_the_acceptable_slowdown_votes_skip() -> None:
    # 1.0 s -> 1.5 s: the slope drops by a third, less than 38%.
    decision = decide(1.5, 200, 2.5, previous_time=1.0, previous_statements=200)
    assert not decision.run and decision.gradient_check is False
    assert decision.gradient_change == pytest.approx(1 / 3)


def test_the_acceptable_slowdown_is_tunable() -> None:
    decision = decide(
        1.5, 200, 2.5, previous_time=1.0, previous_statements=200, acceptable_slowdown=0.2
    )
    assert decision.run and decision.gradient_check


def test_time_tolerance_raises_the_threshold() -> None:
    assert decide(2.6, 200, 2.5, previous_time=2.6, previous_statements=200).time_check
    tolerant = decide(2.6, 200, 2.5, previous_time=2.6, previous_statements=200, time_tolerance=0.1)
    assert not tolerant.time_check and not tolerant.run


def test_no_previous_profile_means_no_gradient_check() -> None:
    decision = decide(1.0, 200, 2.5, previous_time=None, previous_statements=None)
    assert decision == Decision(False, False, None, None, None, None)


def test_gradient_is_undefined_without_time_or_statements() -> None:
    assert gradient_change(0.0, 100, 1.0, 100) is None
    assert gradient_change(1.0, 0, 1.0, 100) is None
    assert gradient_change(1.0, 100, 2.0, 100) == (100.0, 50.0, 0.5)


# -- the recommendation under the paper's rule ------------------------------------------------


def paper(**options: float) -> RunOrSkipRecommender:
    """The paper's literal reading: Algorithms 1 and 2, its 38% acceptable slow-down."""
    return RunOrSkipRecommender(rule="paper", acceptable_slowdown=0.38, **options)


def one_cluster(profiles: list[InputProfile]) -> InputClustering:
    return InputClustering("kmeans", n_clusters=1).fit(*input_table(profiles))


BASELINE = [
    profile("a", 100, 1.0),
    profile("b", 200, 2.0),
    profile("c", 300, 3.0),
    profile("d", 400, 4.0),
]


def test_votes_carry_their_reason_and_numbers() -> None:
    update = [profile("a", 100, 1.5), profile("b", 200, 2.05), profile("d", 400, 6.5)]
    recommendation = paper(time_tolerance=0.1).recommend(one_cluster(BASELINE), BASELINE, update)
    votes = {vote.input_id: vote for vote in recommendation.votes}
    assert [vote.label for vote in recommendation.votes] == ["C11", "C12", "C13"]
    assert votes["a"].run and votes["a"].time_check
    assert "time 1.5 s > limit 1.1 s" in votes["a"].reason
    assert not votes["b"].run and votes["b"].gradient_check is False
    assert "slope statements/time fell 2.4%, within the acceptable 38%" in votes["b"].reason
    assert votes["d"].numbers["threshold_case"] == "equal_statements"
    assert votes["d"].numbers["time_change"] == pytest.approx(0.625)
    assert recommendation.run_votes == 2 and recommendation.decision == "run"
    assert recommendation.to_dict()["votes"][0]["decision"] == "run"


def test_all_votes_skip_gives_skip_and_no_advice() -> None:
    update = [profile(p.input_id, p.statements, p.cpu_time_s * 0.97) for p in BASELINE]
    recommendation = paper().recommend(one_cluster(BASELINE), BASELINE, update)
    assert recommendation.decision == "skip" and recommendation.run_share == 0
    assert recommendation.advice is None
    assert recommendation.seed_table().splitlines()[1:] == [
        "Timethreshold  False  False  False  False",
        "Gradient       False  False  False  False",
    ]


def test_a_close_vote_advises_a_larger_sample() -> None:
    update = [profile("a", 100, 2.0), profile("b", 200, 2.0)]
    recommendation = paper().recommend(one_cluster(BASELINE), BASELINE, update, per_cluster=3)
    assert recommendation.run_share == 0.5 and recommendation.close
    assert recommendation.decision == "run"  # a tie runs the suite
    assert recommendation.advice == {
        "message": "the vote is close (50% run): profile a larger sample, 6 inputs per "
        "cluster with the same seed, and decide again",
        "per_cluster": 6,
    }
    assert recommendation.seed_table().splitlines() == [
        "Checks         C11   C12",
        "Timethreshold  True  False",
        "Gradient       x     False",
    ]


def test_reference_profiles_remove_machine_drift() -> None:
    # Today the machine runs everything 30% slower; the update itself changes nothing.
    slower = [profile(p.input_id, p.statements, p.cpu_time_s * 1.3) for p in BASELINE]
    clustering = one_cluster(BASELINE)
    without = paper().recommend(clustering, BASELINE, slower)
    assert without.decision == "run"
    corrected = paper().recommend(clustering, BASELINE, slower, reference=slower)
    assert corrected.drift == pytest.approx(1.3)
    assert corrected.decision == "skip"
    assert all(vote.numbers["gradient_change"] == pytest.approx(0) for vote in corrected.votes)
    assert corrected.votes[0].numbers["previous_time_s"] == pytest.approx(1.3)


def test_each_input_is_corrected_by_its_own_drift() -> None:
    # The load rose while input "a" was profiled: old and new code alike took 30% longer.
    now = [
        profile("a", 100, 1.3),
        *(profile(p.input_id, p.statements, p.cpu_time_s) for p in BASELINE[1:]),
    ]
    recommendation = paper().recommend(one_cluster(BASELINE), BASELINE, now, reference=now)
    assert recommendation.drift == pytest.approx(1.0)
    assert recommendation.votes[0].numbers["drift"] == pytest.approx(1.3)
    assert recommendation.run_votes == 0


def test_a_new_input_is_judged_in_the_cluster_it_falls_in() -> None:
    recommendation = paper().recommend(
        one_cluster(BASELINE), BASELINE, [profile("new", 250, 2.4, size=1.0)]
    )
    (vote,) = recommendation.votes
    assert vote.numbers["threshold_case"] == "between_neighbours"
    assert "no earlier profile of this input" in vote.reason and not vote.run


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"acceptable_slowdown": -0.1}, "acceptable_slowdown"),
        ({"time_tolerance": -1}, "time_tolerance"),
        ({"time_attribute": "size"}, "time_attribute"),
        ({"close_band": (0.6, 0.4)}, "close_band"),
        ({"rule": "vote"}, "rule"),
        ({"confidence": 1.0}, "confidence"),
    ],
)
def test_bad_parameters_are_rejected(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunOrSkipRecommender(**options).recommend(one_cluster(BASELINE), BASELINE, BASELINE)
