"""The run-or-skip record handler: full-suite profiles in, baselines kept, recommendations out.

A record whose `inputs` block is a `full_suite` becomes its test's baseline: the
first is clustered; later ones join it through `InputClustering.update`
(re-profiled inputs replace their profile, new inputs are assigned to a
cluster, and the clustering is redone on every input once too many fit none).
A record whose `inputs` block is an `update_sample` is judged against that
baseline and yields one `recommendation` verdict.

A baseline belongs to the test and its identifying attributes, like a series
without a metric. Two blobs hold it:

- `input-baseline`, what the dashboard shows: `{"profiles", "labels", "method"}`;
- `input-clustering`, what rebuilds the clustering exactly as it was left, on
  any processor: the profiles it was last fitted on, the inputs assigned since
  (as they were assigned), every input's latest profile and the record that
  profile came from.

Idempotent: a profile replaces its input's stored one only when its record is
newer (timestamp, then run id), so a redelivered or late full-suite record
changes nothing it should not. A recommendation's id hashes the baseline key,
the sample's run id, the baseline revision it was judged against and the
parameters: the same record against the same baseline always gets the same id,
and the outbox's unique id drops the copy.

An update sample with no baseline yet, or none of whose inputs lies in a
cluster, cannot be judged: its verdict says "run" (nothing supports skipping
the suite), carries no votes and gives the reason.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

import orjson

from perfwatch.config import Config
from perfwatch.contract.models import InputProfile, Record, SeriesRef, Verdict
from perfwatch.detectors.inputs import (
    InputClustering,
    Method,
    Recommendation,
    RunOrSkipRecommender,
    input_table,
    sample_inputs,
)
from perfwatch.processor.handlers import record_baseline
from perfwatch.state import StoreTransaction

log = logging.getLogger("perfwatch.recommendations")

INPUT_BASELINE_NAMESPACE = "input-baseline"
CLUSTERING_NAMESPACE = "input-clustering"
# Written first by every full-suite record of a key: the row lock it takes (PostgreSQL)
# makes two processors apply full-suite records of one test one after the other.
BASELINE_LOCK_NAMESPACE = "input-baseline-lock"
RECOMMENDATION_KIND: Final = "recommendation"
TIME_ATTRIBUTE: Final = "cpu_time_s"
# Clusterings kept between records (LRU), valid while the stored revision is unchanged.
MAX_CACHED_CLUSTERINGS = 64


def _profile_dicts(profiles: Iterable[InputProfile]) -> list[dict[str, Any]]:
    return [profile.to_json() for profile in profiles]


def _profiles(items: Iterable[Mapping[str, Any]]) -> list[InputProfile]:
    return [InputProfile(**item) for item in items]


@dataclass(frozen=True)
class BaselineState:
    """Everything that rebuilds a test's clustering exactly (see the module docstring)."""

    method: str
    revision: int
    fitted: list[InputProfile]
    assigned: list[InputProfile]
    current: dict[str, InputProfile]
    sources: dict[str, tuple[float, str]]  # input id -> (timestamp, run id) of its record

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "method": self.method,
                "revision": self.revision,
                "fitted": _profile_dicts(self.fitted),
                "assigned": _profile_dicts(self.assigned),
                "current": _profile_dicts(self.current.values()),
                "sources": self.sources,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> BaselineState:
        document = orjson.loads(data)
        return cls(
            method=document["method"],
            revision=document["revision"],
            fitted=_profiles(document["fitted"]),
            assigned=_profiles(document["assigned"]),
            current={p.input_id: p for p in _profiles(document["current"])},
            sources={name: (stamp, run) for name, (stamp, run) in document["sources"].items()},
        )


class InputsHandler:
    def __init__(self, config: Config) -> None:
        settings = config.recommendation
        self._identifying = config.series.identifying_attributes
        self._method: Method = settings.method  # a ClusteringMethod, checked by the config
        self._per_cluster = settings.per_cluster
        self._seed = settings.seed
        self._recommender = RunOrSkipRecommender(
            rule=settings.rule,
            acceptable_slowdown=settings.acceptable_slowdown,
            confidence=settings.confidence,
            time_tolerance=settings.time_tolerance,
            time_attribute=TIME_ATTRIBUTE,
        )
        self._parameters: dict[str, Any] = {
            "method": settings.method,
            "per_cluster": settings.per_cluster,
            "seed": settings.seed,
            "rule": settings.rule,
            "acceptable_slowdown": settings.acceptable_slowdown,
            "confidence": settings.confidence,
            "time_tolerance": settings.time_tolerance,
            "time_attribute": TIME_ATTRIBUTE,
        }
        self._clusterings: OrderedDict[str, tuple[int, InputClustering]] = OrderedDict()

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        keys = {
            record_baseline(r, self._identifying)[0]
            for r in records
            if r.inputs is not None and r.inputs.kind == "full_suite"
        }
        for key in sorted(keys):
            tx.put_blob(BASELINE_LOCK_NAMESPACE, key, b"")

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        if record.inputs is None:
            return []
        key, attributes = record_baseline(record, self._identifying)
        if record.inputs.kind == "full_suite":
            tx.put_blob(BASELINE_LOCK_NAMESPACE, key, b"")
            self._add_full_suite(record, key, tx)
            return []
        return [self._recommendation(record, key, attributes, tx, emitted_at)]

    # -- full suites -------------------------------------------------------------------------

    def _add_full_suite(self, record: Record, key: str, tx: StoreTransaction) -> None:
        assert record.inputs is not None
        stored = tx.get_blob(CLUSTERING_NAMESPACE, key)
        state = None if stored is None else BaselineState.from_bytes(stored)
        source = (record.timestamp.timestamp(), record.run_id)
        known = {} if state is None else state.sources
        newer = [
            p
            for p in record.inputs.profiles
            if p.input_id not in known or known[p.input_id] < source
        ]
        if not newer:
            return  # a redelivery, or profiles older than the stored ones
        if state is None:
            clustering = InputClustering(self._method).fit(*input_table(newer))
            current = {p.input_id: p for p in sorted(newer, key=_input_id)}
            state = BaselineState(self._method, 0, list(current.values()), [], {}, {})
            how = "clustered"
        else:
            clustering, state = self._take_clustering(key, state)
            outcome = clustering.update(*input_table(newer))
            current = {**state.current, **{p.input_id: p for p in newer}}
            how = outcome.reason
            if outcome.refitted:
                current = dict(sorted(current.items()))
                state = replace(state, fitted=list(current.values()), assigned=[])
            else:
                added = [p for p in newer if p.input_id in outcome.assigned]
                state = replace(state, assigned=state.assigned + added)
        state = replace(
            state,
            revision=state.revision + 1,
            current=current,
            sources={**state.sources, **{p.input_id: source for p in newer}},
        )
        tx.put_blob(CLUSTERING_NAMESPACE, key, state.to_bytes())
        tx.put_blob(
            INPUT_BASELINE_NAMESPACE,
            key,
            orjson.dumps(
                {
                    "profiles": _profile_dicts(sorted(state.current.values(), key=_input_id)),
                    "labels": clustering.labels_,
                    "method": self._method,
                }
            ),
        )
        self._remember_after_commit(tx, key, state.revision, clustering)
        log.info(
            "input baseline updated",
            extra={
                "baseline": key,
                "run_id": record.run_id,
                "revision": state.revision,
                "inputs": len(state.current),
                "profiles_applied": len(newer),
                "clustering": how,
            },
        )

    def _take_clustering(
        self, key: str, state: BaselineState
    ) -> tuple[InputClustering, BaselineState]:
        """The key's clustering at the stored revision, and the state it stands for.

        Taken out of the cache: the caller may change it, and if the transaction
        rolls back, a changed clustering must not be found again.
        """
        cached = self._clusterings.pop(key, None)
        if state.method != self._method:
            # The configured method changed: cluster the stored profiles again with it.
            fitted = list(state.current.values())
            state = replace(state, method=self._method, fitted=fitted, assigned=[])
        if cached is not None and cached[0] == state.revision:
            return cached[1], state
        clustering = InputClustering(self._method).fit(*input_table(state.fitted))
        if state.assigned:
            clustering.update(*input_table(state.assigned))
        applied = {p.input_id: p for p in [*state.fitted, *state.assigned]}
        reprofiled = [p for name, p in state.current.items() if applied[name] != p]
        if reprofiled:
            clustering.update(*input_table(reprofiled))
        return clustering, state

    def _remember_after_commit(
        self, tx: StoreTransaction, key: str, revision: int, clustering: InputClustering
    ) -> None:
        def remember() -> None:
            self._clusterings[key] = (revision, clustering)
            self._clusterings.move_to_end(key)
            if len(self._clusterings) > MAX_CACHED_CLUSTERINGS:
                self._clusterings.popitem(last=False)

        tx.after_commit(remember)

    # -- update samples -----------------------------------------------------------------------

    def _recommendation(
        self,
        record: Record,
        key: str,
        attributes: dict[str, str],
        tx: StoreTransaction,
        emitted_at: datetime,
    ) -> Verdict:
        assert record.inputs is not None
        sample = record.inputs.profiles
        stored = tx.get_blob(CLUSTERING_NAMESPACE, key)
        revision = None
        if stored is None:
            unjudged = Recommendation(
                votes=[],
                parameters=self._parameters,
                drift=None,
                close_band=self._recommender.close_band,
                per_cluster=self._per_cluster,
                outside_inputs=sorted(p.input_id for p in sample),
                rule=self._recommender.rule,
            )
            where = ", ".join(f"{name} {value}" for name, value in attributes.items())
            block = self._undecided(
                unjudged,
                f"no baseline for test {record.test!r}{f' ({where})' if where else ''}: "
                "publish a full-suite profile of it first; until then every update needs "
                "the full suite",
            )
        else:
            state = BaselineState.from_bytes(stored)
            revision = state.revision
            clustering, _ = self._take_clustering(key, state)
            self._remember_after_commit(tx, key, revision, clustering)
            recommendation = self._recommender.recommend(
                clustering,
                state.current.values(),
                sample,
                reference=record.inputs.reference_profiles,
                per_cluster=self._per_cluster,
            )
            block = recommendation.to_dict()
            if not recommendation.votes:
                block = self._undecided(
                    recommendation,
                    f"none of the {len(sample)} sampled inputs lies in a cluster of the "
                    f"baseline ({len(state.current)} inputs): there is nothing to judge them by",
                )
            elif block["advice"] is not None:
                larger = sample_inputs(
                    clustering, per_cluster=block["advice"]["per_cluster"], seed=self._seed
                )
                block["advice"]["inputs"] = [i for members in larger.values() for i in members]
        return Verdict(
            verdict_id=recommendation_id(key, record.run_id, revision, self._parameters),
            kind=RECOMMENDATION_KIND,
            emitted_at=emitted_at,
            series=SeriesRef(record.test, None, attributes),
            record_run_id=record.run_id,
            parameters=dict(self._parameters),
            recommendation=block,
        )

    @staticmethod
    def _undecided(recommendation: Recommendation, reason: str) -> dict[str, Any]:
        """A recommendation without votes: run the suite, and why nothing was judged."""
        return {
            **recommendation.to_dict(),
            "decision": "run",
            "reason": reason,
            "summary": f"RUN: {reason}",
        }


def _input_id(profile: InputProfile) -> str:
    return profile.input_id


def recommendation_id(
    key: str, run_id: str, revision: int | None, parameters: Mapping[str, Any]
) -> str:
    """Hash of the baseline key, the sample's run id, the baseline revision (None: no
    baseline) and the parameters; 32 hex digits, like every verdict id."""
    payload = orjson.dumps(
        [RECOMMENDATION_KIND, key, run_id, revision, parameters], option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(payload).hexdigest()[:32]
