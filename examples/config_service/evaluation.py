"""The run-or-skip evaluation on the uploader: profile, cluster, sample, judge two updates.

1. Profile every generated payload on the baseline code (the full suite), in
   interleaved rounds so that the times of different inputs are comparable.
2. Cluster the inputs (DBSCAN by default) and draw a seeded sample per cluster.
3. For each update, profile the sampled inputs on the old and the new code,
   alternating their passes (many of them: the sample is small), and let the
   recommender vote.
4. Optionally profile every input on the old and the new code in the same
   rounds, to show the suite's real slowdown (measured under the same load)
   and the profiling time the sample saved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import ModuleType

from config_service import versions
from perfwatch.contract.models import InputProfile
from perfwatch.detectors.inputs import (
    InputClustering,
    Recommendation,
    RunOrSkipRecommender,
    sample_inputs,
)
from perfwatch.profiler.core import profile_inputs, profile_versions

Payloads = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class FullSuite:
    profiles: list[InputProfile]
    seconds: float


@dataclass(frozen=True)
class PairedSuite:
    """Every input profiled on the old and the new code, in the same interleaved rounds."""

    old: list[InputProfile]
    new: list[InputProfile]
    seconds: float

    @property
    def slowdown(self) -> float:
        """Total CPU time of every input on the new code over that on the old, minus 1."""
        return sum(p.cpu_time_s for p in self.new) / sum(p.cpu_time_s for p in self.old) - 1


@dataclass(frozen=True)
class UpdateEvaluation:
    update: str
    sample: dict[int, list[str]]
    updated: list[InputProfile]
    reference: list[InputProfile]
    recommendation: Recommendation
    sample_seconds: float
    full_suite: PairedSuite | None


def _upload_call(module: ModuleType, text: str) -> Callable[[], object]:
    return lambda: module.upload(text, {})


def profile_suite(version: str, inputs: Payloads, *, repeats: int) -> FullSuite:
    """Profile every input on one version of the uploader, in interleaved rounds."""
    module = versions.load(version)
    started = time.perf_counter()
    profiles = profile_inputs(
        {input_id: _upload_call(module, text) for input_id, text in inputs},
        sizes={input_id: len(text) for input_id, text in inputs},
        repeats=repeats,
    )
    return FullSuite(list(profiles.values()), time.perf_counter() - started)


def profile_paired_suite(update: str, inputs: Payloads, *, repeats: int) -> PairedSuite:
    """Profile every input on the baseline and on the update, all in the same rounds."""
    modules = {version: versions.load(version) for version in (versions.BASELINE, update)}
    calls = {
        f"{version}/{input_id}": _upload_call(module, text)
        for input_id, text in inputs
        for version, module in modules.items()
    }
    sizes = {f"{version}/{input_id}": len(text) for input_id, text in inputs for version in modules}
    started = time.perf_counter()
    profiles = profile_inputs(calls, sizes=sizes, repeats=repeats)
    seconds = time.perf_counter() - started
    old, new = (
        [replace(profiles[f"{version}/{input_id}"], input_id=input_id) for input_id, _ in inputs]
        for version in modules
    )
    return PairedSuite(old, new, seconds)


def judge_update(
    update: str,
    clustering: InputClustering,
    baseline: Sequence[InputProfile],
    inputs: Payloads,
    *,
    per_cluster: int = 3,
    seed: int = 0,
    repeats: int = 15,
    suite_repeats: int = 7,
    recommender: RunOrSkipRecommender | None = None,
    profile_every_input: bool = False,
) -> UpdateEvaluation:
    """Profile a seeded sample on old and new code alternately and recommend run or skip
    against the clustered ``baseline`` profiles.

    ``repeats`` timing passes per sampled input and version; ``suite_repeats``
    per input and version when every input is profiled on both as well.
    """
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
        clustering, baseline, updated, reference=reference, per_cluster=per_cluster
    )
    full_suite = (
        profile_paired_suite(update, inputs, repeats=suite_repeats) if profile_every_input else None
    )
    return UpdateEvaluation(
        update, sample, updated, reference, recommendation, sample_seconds, full_suite
    )
