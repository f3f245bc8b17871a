"""Input clustering, assignment of arriving inputs, reclustering and sampling."""

from __future__ import annotations

import numpy as np
import pytest

from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import (
    CLUSTER_ATTRIBUTES,
    NOISE,
    InputClustering,
    attribute_matrix,
    input_table,
    knee_index,
    sample_inputs,
)

CENTRES = {"small": 1_000, "medium": 5_000, "large": 12_000}


def behaviour(input_id: str, statements: float, rng: np.random.Generator) -> InputProfile:
    """A profile whose attributes follow the statement count, with a little spread."""
    jitter = rng.normal(1.0, 0.03, size=6)
    return InputProfile(
        input_id=input_id,
        size=statements * 3 * jitter[0],
        wall_time_s=statements * 1e-7 * jitter[1],
        cpu_time_s=statements * 1e-7 * jitter[1],
        peak_memory_bytes=statements * 8 * jitter[2],
        statements=int(statements),
        function_calls=int(statements / 20 * jitter[3]),
        loop_iterations=int(statements / 4 * jitter[4]),
        conditionals=int(statements / 3 * jitter[5]),
    )


def groups(per_group: int = 40, seed: int = 1) -> list[InputProfile]:
    rng = np.random.default_rng(seed)
    profiles = [
        behaviour(f"{name}-{i:03d}", rng.normal(centre, centre * 0.05), rng)
        for name, centre in CENTRES.items()
        for i in range(per_group)
    ]
    # two inputs unlike any other
    profiles.append(behaviour("odd-1", 30_000, rng))
    profiles.append(behaviour("odd-2", 45_000, rng))
    return profiles


def members_by_prefix(clustering: InputClustering) -> list[set[str]]:
    return [
        {member.split("-")[0] for member in cluster.members} for cluster in clustering.clusters_
    ]


def test_knee_index_of_rising_and_falling_curves() -> None:
    assert knee_index([1, 1.1, 1.2, 1.3, 1.4, 5, 10]) == 4
    assert knee_index([100, 40, 10, 8, 6, 4]) == 2
    assert knee_index([2, 2, 2]) == 0


def test_dbscan_finds_the_groups_and_keeps_noise_as_its_own_group() -> None:
    clustering = InputClustering().fit(*input_table(groups()))
    assert members_by_prefix(clustering) == [{"small"}, {"medium"}, {"large"}, {"odd"}]
    noise = clustering.clusters_[-1]
    assert noise.label == NOISE and noise.name == "noise" and noise.size == 2
    assert clustering.selection_["eps_rule"] == "knee of the sorted k-distances"
    assert clustering.selection_["eps"] > 0


@pytest.mark.parametrize(
    ("method", "rule"),
    [
        ("kmeans", "elbow of k-means inertia"),
        ("gmm", "lowest BIC"),
        ("agglomerative", "highest silhouette"),
    ],
)
def test_other_methods_choose_k_and_keep_the_groups_apart(method: str, rule: str) -> None:
    profiles = [p for p in groups() if not p.input_id.startswith("odd")]
    clustering = InputClustering(method).fit(*input_table(profiles))  # type: ignore[arg-type]
    assert clustering.selection_["rule"] == rule
    for prefixes in members_by_prefix(clustering):
        assert len(prefixes) == 1, f"{method} mixed {prefixes}"
    assert clustering.selection_["n_clusters"] == 3


def test_given_k_is_used() -> None:
    clustering = InputClustering("kmeans", n_clusters=2).fit(*input_table(groups()))
    assert len(clustering.clusters_) == 2 and clustering.selection_["rule"] == "given"


def test_clusters_are_numbered_by_statements_and_independent_of_input_order() -> None:
    profiles = groups()
    forward = InputClustering().fit(*input_table(profiles))
    backward = InputClustering().fit(*input_table(list(reversed(profiles))))
    assert forward.labels_ == backward.labels_
    centres = [c.centre["statements"] for c in forward.clusters_ if c.label != NOISE]
    assert centres == sorted(centres)


def test_to_dict_lists_members_centres_and_sizes() -> None:
    document = InputClustering().fit(*input_table(groups())).to_dict()
    assert document["method"] == "dbscan" and document["inputs"] == 122
    first = document["clusters"][0]
    assert first["size"] == len(first["members"]) == 40
    assert set(first["centre"]) == set(document["attributes"])


def test_inputs_that_fit_are_assigned_and_the_clusters_kept() -> None:
    rng = np.random.default_rng(7)
    clustering = InputClustering().fit(*input_table(groups()))
    arriving = [behaviour(f"new-{i}", rng.normal(5_000, 150), rng) for i in range(5)]
    update = clustering.update(*input_table(arriving))
    assert not update.refitted and update.misfits == []
    assert set(update.assigned.values()) == {1}
    assert "clusters kept" in update.reason
    assert clustering.cluster(1).size == 45


def test_too_many_misfits_redo_the_clustering() -> None:
    rng = np.random.default_rng(7)
    clustering = InputClustering().fit(*input_table(groups()))
    arriving = [behaviour(f"huge-{i}", rng.normal(80_000, 2_000), rng) for i in range(30)]
    update = clustering.update(*input_table(arriving))
    assert update.refitted and len(update.misfits) == 30
    assert "clustering redone on all 152 inputs" in update.reason
    assert {"huge"} in members_by_prefix(clustering)


def test_misfits_accumulate_across_updates() -> None:
    rng = np.random.default_rng(3)
    clustering = InputClustering(max_misfit_share=0.3).fit(*input_table(groups()))
    fitting = [behaviour(f"fit-{i}", rng.normal(1_000, 30), rng) for i in range(4)]
    assert not clustering.update(*input_table(fitting)).refitted
    outliers = [behaviour(f"far-{i}", 200_000 * (i + 1), rng) for i in range(2)]
    assert not clustering.update(*input_table(outliers[:1])).refitted  # 1 of 5
    assert clustering.update(*input_table(outliers[1:])).refitted  # 2 of 6 > 30%


def test_a_known_input_is_replaced_not_added() -> None:
    profiles = groups()
    clustering = InputClustering().fit(*input_table(profiles))
    update = clustering.update(*input_table([profiles[0]]))
    assert update.replaced == [profiles[0].input_id] and update.assigned == {}


def test_predict_places_inputs_of_centroid_methods() -> None:
    rng = np.random.default_rng(5)
    clustering = InputClustering("kmeans", n_clusters=3).fit(*input_table(groups()[:120]))
    labels, inside = clustering.predict(
        attribute_matrix(
            [behaviour("s", 1_000, rng), behaviour("far", 90_000, rng)], CLUSTER_ATTRIBUTES
        )
    )
    assert labels.tolist()[0] == 0 and inside.tolist() == [True, False]


def test_sampling_is_seeded_per_cluster_and_nested() -> None:
    clustering = InputClustering().fit(*input_table(groups()))
    three = sample_inputs(clustering, per_cluster=3, seed=11)
    assert three == sample_inputs(clustering, per_cluster=3, seed=11)
    assert three != sample_inputs(clustering, per_cluster=3, seed=12)
    assert [len(ids) for ids in three.values()] == [3, 3, 3, 2]  # noise holds two inputs
    six = sample_inputs(clustering, per_cluster=6, seed=11)
    assert all(six[label][:3] == ids[:3] for label, ids in three.items())
    for label, ids in three.items():
        assert set(ids) <= set(clustering.cluster(label).members)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "spectral"}, "unknown clustering method"),
        ({"attributes": ("size", "colour")}, "unknown attribute 'colour'"),
        ({"eps": 0.0}, "eps must be positive"),
        ({"n_clusters": 500}, "n_clusters must be between 1"),
    ],
)
def test_bad_parameters_are_rejected(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InputClustering(**options).fit(*input_table(groups()))


def test_repeated_input_ids_are_rejected() -> None:
    profiles = groups()
    with pytest.raises(ValueError, match="appears more than once"):
        InputClustering().fit(*input_table([*profiles, profiles[0]]))
