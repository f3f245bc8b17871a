"""The realistic-history evaluation (benchmarks/eval_edivisive_histories.py): its scores on
hand-checked cases, and its generator (benchmarks/perf_histories.py) keeping its word."""

from __future__ import annotations

import sys
from itertools import combinations, pairwise
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eval_edivisive_histories import (
    Tally,
    covering,
    least_squares_change_points,
    matched_truth,
)
from otava_reference import OtavaReference
from perf_histories import (
    EDGE,
    GROUPS,
    MIN_GAP_BETWEEN_CHANGES,
    NOISE_FAMILIES,
    history,
    unit_noise,
)


@pytest.mark.parametrize(
    ("truth", "found", "matched"),
    [
        ([10, 14], [12], {0}),  # one found point answers for one true point only
        ([10, 14], [12, 13], {0, 1}),
        ([10, 14], [20], set()),  # 6 runs away: outside the margin
        ([10, 14], [19], {1}),
        ([], [3], set()),
        ([50], [45, 50, 55], {0}),
    ],
)
def test_matching_is_one_to_one_within_the_margin(
    truth: list[int], found: list[int], matched: set[int]
) -> None:
    assert matched_truth(truth, found, margin=5) == matched


@pytest.mark.parametrize(
    ("truth", "found", "expected"),
    [
        ([50], [50], 1.0),
        ([50], [], 0.5),  # each half overlaps the whole with Jaccard 1/2
        ([50], [40], (50 * 40 / 50 + 50 * 50 / 60) / 100),
        ([], [25, 75], 0.5),  # the one true segment's best match is [25, 75)
    ],
)
def test_covering_by_hand(truth: list[int], found: list[int], expected: float) -> None:
    assert covering(truth, found, 100) == pytest.approx(expected)


def test_scores_pool_the_change_points_of_a_group() -> None:
    tally = Tally()
    tally.add(history("steps", 0), [history("steps", 0).truth[0] + 2, 7], margin=5)
    tally.add(history("null", 0), [], margin=5)
    scores = tally.scores()
    assert (scores["true"], scores["found"]) == (1, 2)
    assert (scores["precision"], scores["recall"]) == (0.5, 1.0)
    assert scores["f1"] == pytest.approx(2 / 3)
    runs = len(history("steps", 0).values) + len(history("null", 0).values)
    assert scores["fp_per_1000"] == pytest.approx(1000 / runs)


@pytest.mark.parametrize("family", NOISE_FAMILIES)
def test_noise_families_have_zero_mean_and_unit_variance(family: str) -> None:
    draws = unit_noise(np.random.default_rng(3), family, 400_000)
    assert abs(draws.mean()) < 0.01
    # t(3) has no fourth moment, so its sample variance converges slowly
    assert draws.var() == pytest.approx(1.0, rel=0.1 if family == "student_t3" else 0.01)


def test_families_differ_in_shape() -> None:
    rng = np.random.default_rng(4)
    skew = {f: float(np.mean(unit_noise(rng, f, 200_000) ** 3)) for f in NOISE_FAMILIES}
    assert abs(skew["gaussian"]) < 0.05
    assert skew["lognormal"] > 1.0 and skew["bimodal"] > 0.3


@pytest.mark.parametrize("group", GROUPS)
def test_histories_are_reproducible_and_their_truth_is_well_placed(group: str) -> None:
    for seed in range(30):
        first, again = history(group, seed), history(group, seed)
        np.testing.assert_array_equal(first.values, again.values)
        n = len(first.values)
        assert first.truth == sorted(first.truth)
        assert all(EDGE <= at < n for at in first.truth)
        if group != "mixed":
            assert len(first.truth) == (1 if group == "steps" else 0)
        assert np.isnan(first.values).mean() < 0.15


def test_a_step_is_where_the_truth_says_and_as_large() -> None:
    """Averaged over many histories, the level moves at the true run by the stated size."""
    ratios = []
    for seed in range(200):
        h = history("steps", seed)
        (change,) = h.changes
        before = np.nanmean(h.values[change.at - 25 : change.at])
        after = np.nanmean(h.values[change.at : change.at + 25])
        ratios.append((after / before - 1) / change.relative)
    assert np.median(ratios) == pytest.approx(1.0, abs=0.1)


def test_mixed_lasting_changes_keep_their_distance() -> None:
    for seed in range(50):
        h = history("mixed", seed)
        # the edges of a reverted regression are closer than MIN_GAP_BETWEEN_CHANGES
        starts = sorted({c.at for c in h.changes})
        gaps = np.diff(starts)
        assert (gaps >= 2).all()
        assert sum(gaps < MIN_GAP_BETWEEN_CHANGES) <= 2


def _least_squares_by_brute_force(x: np.ndarray, penalty: float, min_len: int) -> list[int]:
    """Every segmentation with segments of at least ``min_len`` tried, the cheapest kept."""
    n = len(x)
    centred = x - np.median(x)
    scale = np.median(np.abs(np.diff(centred))) / (0.6745 * np.sqrt(2.0))
    per_change = penalty * scale**2 * np.log(n)
    best_cost, best = np.inf, []
    for count in range(n // min_len):
        for points in combinations(range(min_len, n - min_len + 1), count):
            edges = [0, *points, n]
            if any(b - a < min_len for a, b in pairwise(edges)):
                continue
            cost = count * per_change + sum(
                float(((centred[a:b] - centred[a:b].mean()) ** 2).sum()) for a, b in pairwise(edges)
            )
            if cost < best_cost - 1e-9:
                best_cost, best = cost, list(points)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_least_squares_baseline_finds_the_cheapest_segmentation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    levels = np.repeat(rng.uniform(-3, 3, 3), [6, 5, 7])
    x = levels + rng.standard_normal(18)
    penalty = [0.5, 1.0, 3.0][seed % 3]
    assert least_squares_change_points(x, penalty) == _least_squares_by_brute_force(x, penalty, 3)


def test_least_squares_baseline_on_a_clear_step_and_on_noise() -> None:
    rng = np.random.default_rng(7)
    step = np.r_[rng.normal(100, 1, 60), rng.normal(104, 1, 60)]
    assert least_squares_change_points(step, penalty=6.0) == [60]
    assert least_squares_change_points(rng.normal(100, 1, 300), penalty=6.0) == []


def test_permutation_mode_with_its_own_count_is_otavas_function(otava: OtavaReference) -> None:
    """The worker's permutation detector, given Otava's own 100 permutations, finds what
    compute_change_points_orig finds; with 999 it can show p <= 0.001 and finds a clear step."""
    rng = np.random.default_rng(5)
    values = [float(v) for v in np.r_[rng.normal(10, 1, 40), rng.normal(13, 1, 40)]]
    plain = otava.change_points_orig(values, seed=3)
    assert otava.change_points_orig(values, seed=3, permutations=100) == plain
    assert otava.change_points_orig(values, seed=3, permutations=999, max_pvalue=0.001) == [40]
