"""The run-or-skip evaluation on the uploader: profile, cluster, sample, judge two updates.

1. Profile every generated payload on the baseline code (the full suite).
2. Cluster the inputs (DBSCAN by default) and draw a seeded sample per cluster.
3. For each update, profile the sampled inputs on the old and the new code,
   alternating their passes, and let the recommender vote.
4. Optionally profile every input on the new code as well, to show the time
   the sample saved and the suite's real slowdown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

from config_service import versions
from perfwatch.detectors.inputs import (
    InputClustering,
    Recommendation,
    RunOrSkipRecommender,
    sample_inputs,
)
from perfwatch.profiler.core import profile_versions
from perfwatch.records import InputProfile

Payloads = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class FullSuite:
    profiles: list[InputProfile]
    seconds: float


@dataclass(frozen=True)
class UpdateEvaluation:
    update: str
    sample: dict[int, list[str]]
    updated: list[InputProfile]
    reference: list[InputProfile]
    recommendation: Recommendation
    sample_seconds: float
    full_suite: FullSuite | None

    def suite_slowdown(self, baseline: FullSuite) -> float | None:
        """Total CPU time of every input on the new code over that on the old, minus 1."""
        if self.full_suite is None:
            return None
        before = sum(p.cpu_time_s for p in baseline.profiles)
        after = sum(p.cpu_time_s for p in self.full_suite.profiles)
        return after / before - 1


def _upload_call(module: ModuleType, text: str) -> Callable[[], object]:
    return lambda: module.upload(text, {})


def profile_suite(version: str, inputs: Payloads, *, repeats: int) -> FullSuite:
    """Profile every input on one version of the uploader."""
    module = versions.load(version)
    started = time.perf_counter()
    profiles = [
        profile_versions(
            {version: _upload_call(module, text)},
            input_id=input_id,
            size=len(text),
            repeats=repeats,
        )[version]
        for input_id, text in inputs
    ]
    return FullSuite(profiles, time.perf_counter() - started)


def judge_update(
    update: str,
    clustering: InputClustering,
    inputs: Payloads,
    *,
    per_cluster: int = 3,
    seed: int = 0,
    repeats: int = 7,
    recommender: RunOrSkipRecommender | None = None,
    profile_every_input: bool = False,
) -> UpdateEvaluation:
    """Profile a seeded sample on old and new code alternately and recommend run or skip."""
    old, new = versions.load(versions.BASELINE), versions.load(update)
    texts = dict(inputs)
    sample = sample_inputs(clustering, per_cluster=per_cluster, seed=seed)
    started = time.perf_counter()
    updated: list[InputProfile] = []
    reference: list[InputProfile] = []
    for input_id in (i for members in sample.values() for i in members):
        text = texts[input_id]
        pair = profile_versions(
            {"old": _upload_call(old, text), "new": _upload_call(new, text)},
            input_id=input_id,
            size=len(text),
            repeats=repeats,
        )
        reference.append(pair["old"])
        updated.append(pair["new"])
    sample_seconds = time.perf_counter() - started
    recommendation = (recommender or RunOrSkipRecommender()).recommend(
        clustering, updated, reference=reference, per_cluster=per_cluster
    )
    full_suite = profile_suite(update, inputs, repeats=repeats) if profile_every_input else None
    return UpdateEvaluation(
        update, sample, updated, reference, recommendation, sample_seconds, full_suite
    )
