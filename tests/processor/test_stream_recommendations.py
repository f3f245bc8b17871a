"""Run-or-skip on the stream: full-suite records become baselines, update samples verdicts.

Unit tests drive `InputsHandler` on a SQLite store; the integration tests run the
real processor on the embedded broker and on real Apache Pulsar. The profiles
are generated like those of `examples/config_service` (two payload kinds, 1 KB
to 130 KB, counts proportional to the payload, CPU time to the counts), so the
decisions are known; one test profiles the example service for real and checks
that the stream decides as `perfwatch recommend` does on the same profiles.
"""

from __future__ import annotations

import math
import random
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from _processor_support import (
    processor_config,
    publish,
    running_processor,
    settled,
    unique_topics,
    verdict_documents,
    verdicts_of_twice_published,
)
from perfwatch.adapters.identity import Identity, complete_record
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.cli.main import main
from perfwatch.config import INPUT_CLUSTERING_METHODS, Config, ConfigError, load_config
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import InputProfile, Record, Verdict
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA, validate_record, validate_verdict
from perfwatch.dashboard import queries
from perfwatch.detectors.inputs import (
    METHODS,
    InputClustering,
    RunOrSkipRecommender,
    input_table,
    sample_inputs,
)
from perfwatch.processor.handlers import baseline_key
from perfwatch.processor.recommendations import (
    CLUSTERING_NAMESPACE,
    INPUT_BASELINE_NAMESPACE,
    InputsHandler,
)
from perfwatch.readers.input_profile import InputProfileFile, profile_record, write_input_profile
from perfwatch.state import StateStore, open_store

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 6, 3, 2, 0, tzinfo=UTC)
MAIN = {"branch": "main"}
TEST = "uploader.perf"
TIMEOUT = 120.0


# --- profiles shaped like those of examples/config_service -------------------------------


def payload_profile(input_id: str, kind: str, size: int, seconds: float) -> InputProfile:
    """One input: counts follow the payload (by kind), CPU time is given."""
    per_byte, calls_per_statement = (0.5, 0.033) if kind == "alignment" else (0.18, 0.007)
    statements = int(per_byte * size) + 30
    return InputProfile(
        input_id=input_id,
        size=size,
        wall_time_s=seconds * 1.02,
        cpu_time_s=seconds,
        peak_memory_bytes=int(2.5 * size) + 1200,
        statements=statements,
        function_calls=int(calls_per_statement * statements) + 4,
        loop_iterations=int(0.38 * statements),
        conditionals=int(0.57 * statements),
    )


def suite(count: int = 90, seed: int = 7, prefix: str = "in") -> list[InputProfile]:
    """A full suite; CPU time per statement is the kind's cost with 3% timing noise."""
    rng = random.Random(seed)
    profiles = []
    for i in range(count):
        kind = rng.choice(("alignment", "calibration"))
        size = int(math.exp(rng.uniform(math.log(1_000), math.log(130_000))))
        cost = 6.2e-8 if kind == "alignment" else 1.6e-7
        statements = payload_profile("x", kind, size, 0.0).statements
        seconds = statements * cost * (1 + rng.gauss(0, 0.03))
        profiles.append(payload_profile(f"{prefix}-{kind}-{i:04d}", kind, size, seconds))
    return profiles


def retimed(
    profiles: Sequence[InputProfile], factor: float, seed: int, noise: float = 0.03
) -> list[InputProfile]:
    """The same inputs with their times scaled (and jittered): the counts stay."""
    rng = random.Random(seed)
    result = []
    for p in profiles:
        scale = factor * (1 + rng.gauss(0, noise))
        result.append(
            replace(p, cpu_time_s=p.cpu_time_s * scale, wall_time_s=p.wall_time_s * scale)
        )
    return result


def sampled(
    profiles: Sequence[InputProfile], per_cluster: int = 3, seed: int = 0
) -> list[InputProfile]:
    """The seeded sample `perfwatch recommend` would ask for, as baseline profiles."""
    by_id = {p.input_id: p for p in profiles}
    sample = sample_inputs(
        InputClustering().fit(*input_table(profiles)), per_cluster=per_cluster, seed=seed
    )
    return [by_id[i] for members in sample.values() for i in members]


def record_doc(
    test: str,
    run_id: str,
    kind: str,
    profiles: Sequence[InputProfile],
    *,
    at: datetime = T0,
    reference: Sequence[InputProfile] | None = None,
    branch: str = "main",
    metrics: dict[str, float] | None = None,
) -> dict[str, Any]:
    inputs: dict[str, Any] = {"kind": kind, "profiles": [p.to_json() for p in profiles]}
    if reference is not None:
        inputs["reference_profiles"] = [p.to_json() for p in reference]
    return {
        "schema": RECORD_SCHEMA,
        "test": test,
        "run_id": run_id,
        "commit": f"c-{run_id}",
        "branch": branch,
        "timestamp": format_rfc3339(at),
        "metrics": metrics or {},
        "inputs": inputs,
    }


def record(*args: Any, **kwargs: Any) -> Record:
    return Record.from_json(record_doc(*args, **kwargs))


# --- driving the handler like the processor does --------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        yield store


def config_with(**settings: Any) -> Config:
    base = Config()
    return base.model_copy(
        update={"recommendation": base.recommendation.model_copy(update=settings)}
    )


def handle(store: StateStore, handler: InputsHandler, rec: Record) -> tuple[list[Verdict], int]:
    """The handler's verdicts for one record, and how many of them entered the outbox."""
    queued = 0
    with store.transaction() as tx:
        verdicts = handler.handle(rec, tx, T0 + timedelta(days=1))
        for verdict in verdicts:
            outcome = tx.add_verdict(
                verdict.verdict_id, verdict.kind, dumps(verdict), "unit", rec.test, ""
            )
            queued += outcome not in (None, False)
    return verdicts, queued


def only_verdict(store: StateStore, handler: InputsHandler, rec: Record) -> Verdict:
    verdicts, queued = handle(store, handler, rec)
    assert len(verdicts) == 1 and queued == 1
    assert validate_verdict(verdicts[0].to_json()) == []
    return verdicts[0]


def blob(store: StateStore, namespace: str, test: str = TEST) -> dict[str, Any] | None:
    data = store.get_blob(namespace, baseline_key(test, MAIN))
    return None if data is None else orjson.loads(data)


BASELINE = suite()
DRIFT = 1.12  # the machine is slower now than when the baseline was profiled


def update_records(baseline: Sequence[InputProfile]) -> dict[str, Record]:
    """Update samples of the baseline's seeded sample, old code profiled next to each."""
    chosen = sampled(baseline)
    reference = retimed(chosen, DRIFT, seed=1)
    bottleneck = retimed(chosen, DRIFT * 1.9, seed=2)  # each Iov pickled and hashed
    harmless = retimed(chosen, DRIFT, seed=3)  # same work, loops rewritten
    return {
        "bottleneck": record(
            TEST, "bottleneck-1", "update_sample", bottleneck, reference=reference
        ),
        "harmless": record(TEST, "harmless-1", "update_sample", harmless, reference=reference),
    }


# --- unit tests -----------------------------------------------------------------------------


def test_a_full_suite_becomes_the_baseline_the_dashboard_shows(store: StateStore) -> None:
    handler = InputsHandler(Config())
    verdicts, _ = handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    assert verdicts == []
    expected = InputClustering().fit(*input_table(BASELINE))
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored == {
        "profiles": [p.to_json() for p in sorted(BASELINE, key=lambda p: p.input_id)],
        "labels": expected.labels_,
        "method": "dbscan",
    }
    rows, labels = queries.baseline_inputs(store, TEST, MAIN)
    assert [row["input_id"] for row in rows] == sorted(p.input_id for p in BASELINE)
    assert labels == [expected.labels_[row["input_id"]] for row in rows]
    assert len(expected.clusters_) >= 2


def test_a_bottleneck_runs_and_a_harmless_change_skips(store: StateStore) -> None:
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    clustering = InputClustering().fit(*input_table(BASELINE))
    for name, decision in (("bottleneck", "run"), ("harmless", "skip")):
        sample = update_records(BASELINE)[name]
        verdict = only_verdict(store, handler, sample)
        assert verdict.kind == "recommendation"
        assert verdict.series.to_json() == {"test": TEST, "attributes": MAIN}
        assert verdict.record_run_id == sample.run_id
        block = verdict.recommendation
        assert block is not None and block["decision"] == decision, block
        assert sample.inputs is not None
        library = RunOrSkipRecommender().recommend(
            clustering,
            BASELINE,
            sample.inputs.profiles,
            reference=sample.inputs.reference_profiles,
        )
        assert block == library.to_dict()
        assert block["drift"] == pytest.approx(DRIFT, rel=0.05)
    assert verdict.parameters["method"] == "dbscan" and verdict.parameters["per_cluster"] == 3


def test_without_the_reference_the_drift_makes_a_harmless_change_run(store: StateStore) -> None:
    """Why the record carries reference profiles: 12% slower machine, no reference."""
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    slower = retimed(sampled(BASELINE), 1.3, seed=3)
    verdict = only_verdict(store, handler, record(TEST, "u", "update_sample", slower))
    assert verdict.recommendation is not None and verdict.recommendation["decision"] == "run"
    assert verdict.recommendation["drift"] is None


def test_the_same_record_gets_the_same_verdict_id_and_enters_the_outbox_once(
    store: StateStore,
) -> None:
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    sample = update_records(BASELINE)["bottleneck"]
    first = only_verdict(store, handler, sample)
    again, queued = handle(store, handler, sample)
    assert [v.verdict_id for v in again] == [first.verdict_id] and queued == 0
    cold, queued = handle(store, InputsHandler(Config()), sample)  # another processor
    assert [v.verdict_id for v in cold] == [first.verdict_id] and queued == 0
    assert len(list(store.verdicts(kind="recommendation"))) == 1
    other = only_verdict(store, handler, update_records(BASELINE)["harmless"])
    assert other.verdict_id != first.verdict_id


def test_a_sample_without_a_baseline_says_run_and_why(store: StateStore) -> None:
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    chosen = sampled(BASELINE)
    for test, branch in (("other.suite", "main"), (TEST, "feature-x")):
        sample = record(test, f"{test}-{branch}", "update_sample", chosen, branch=branch)
        verdict = only_verdict(store, handler, sample)
        block = verdict.recommendation
        assert block is not None
        assert block["decision"] == "run" and block["votes"] == []
        assert block["reason"].startswith(f"no baseline for test {test!r} (branch {branch})")
        assert block["outside_inputs"] == sorted(p.input_id for p in chosen)
        assert verdict.series.attributes == {"branch": branch}


def test_a_sample_outside_every_cluster_says_run_and_why(store: StateStore) -> None:
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    alien = [payload_profile(f"huge-{i}", "alignment", 5_000_000 + 1000 * i, 0.5) for i in range(3)]
    block = only_verdict(store, handler, record(TEST, "u", "update_sample", alien)).recommendation
    assert block is not None and block["decision"] == "run" and block["votes"] == []
    assert block["outside_inputs"] == [p.input_id for p in alien]
    assert block["reason"].startswith("none of the 3 sampled inputs lies in a cluster")


def test_later_full_suites_join_the_baseline_as_the_clustering_update_says(
    store: StateStore,
) -> None:
    handler = InputsHandler(Config())
    library = InputClustering().fit(*input_table(BASELINE))
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))

    # Night 2: every input profiled again, and four new inputs like the others.
    night2 = retimed(BASELINE, 1.0, seed=11) + suite(4, seed=8, prefix="new")
    outcome = library.update(*input_table(night2))
    assert not outcome.refitted and len(outcome.assigned) == 4
    handle(store, handler, record(TEST, "suite-2", "full_suite", night2, at=T0 + timedelta(1)))
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored is not None and stored["labels"] == library.labels_
    assert {p["input_id"]: p for p in stored["profiles"]} == {
        p.input_id: p.to_json() for p in [*BASELINE, *night2]
    }

    # Night 3: a new kind of input, far from the others: too many misfits, refit.
    night3 = [
        payload_profile(f"tar-{i}", "alignment", 2_000_000 + 9_000 * i, 0.2) for i in range(20)
    ]
    outcome = library.update(*input_table(night3))
    assert outcome.refitted
    handle(store, handler, record(TEST, "suite-3", "full_suite", night3, at=T0 + timedelta(2)))
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored is not None and stored["labels"] == library.labels_
    state = blob(store, CLUSTERING_NAMESPACE)
    assert state is not None and state["revision"] == 3 and state["assigned"] == []
    assert len(state["fitted"]) == len(BASELINE) + 4 + 20


def test_a_restored_clustering_judges_like_the_live_one(store: StateStore) -> None:
    """A processor with nothing cached rebuilds the clustering from the store exactly,
    down to an input that joined as noise and keeps that label when profiled again."""
    live = InputsHandler(Config())
    by_id = {p.input_id: p for p in BASELINE}
    members = [by_id[i] for i in InputClustering().fit(*input_table(BASELINE)).cluster(0).members]
    newcomers = retimed([replace(p, input_id=f"new-{p.input_id}") for p in members[:10]], 1, 9)
    odd = payload_profile("odd", "calibration", 900_000, 0.4)  # fits no cluster
    nights = [
        BASELINE,
        [*newcomers, odd],  # 1 misfit of 11 new inputs: clusters kept
        [replace(members[0], input_id="odd"), *retimed(newcomers[:4], 1.05, seed=13)],
    ]
    for night, profiles in enumerate(nights):
        at = T0 + timedelta(days=night)
        handle(store, live, record(TEST, f"suite-{night}", "full_suite", profiles, at=at))
    state = blob(store, CLUSTERING_NAMESPACE)
    assert state is not None and len(state["assigned"]) == 11 and state["revision"] == 3
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored is not None and stored["labels"]["odd"] == -1
    chosen = [
        *sampled(BASELINE, per_cluster=4),
        *newcomers[2:6],
        replace(members[0], input_id="odd"),
    ]
    for seed, factor in ((20, 1.0), (21, 1.5)):
        sample = record(TEST, f"u-{seed}", "update_sample", retimed(chosen, factor, seed=seed))
        warm, _ = handle(store, live, sample)
        cold, _ = handle(store, InputsHandler(Config()), sample)
        assert warm[0].verdict_id == cold[0].verdict_id
        assert warm[0].recommendation == cold[0].recommendation


def test_redelivered_and_older_full_suites_replace_no_newer_profile(store: StateStore) -> None:
    handler = InputsHandler(Config())
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    night2 = retimed(BASELINE, 1.0, seed=14)
    handle(store, handler, record(TEST, "suite-2", "full_suite", night2, at=T0 + timedelta(2)))
    before = {ns: blob(store, ns) for ns in (INPUT_BASELINE_NAMESPACE, CLUSTERING_NAMESPACE)}

    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))  # redelivered
    handle(store, handler, record(TEST, "suite-2", "full_suite", night2, at=T0 + timedelta(2)))
    assert {ns: blob(store, ns) for ns in before} == before

    # A late record from between the two nights: its new input joins, the rest is older.
    late = [*retimed(BASELINE[:10], 1.2, seed=15), *suite(1, seed=16, prefix="late")]
    handle(store, handler, record(TEST, "suite-1b", "full_suite", late, at=T0 + timedelta(1)))
    after = blob(store, INPUT_BASELINE_NAMESPACE)
    assert after is not None and before[INPUT_BASELINE_NAMESPACE] is not None
    profiles = {p["input_id"]: p for p in after["profiles"]}
    assert profiles == {
        **{p["input_id"]: p for p in before[INPUT_BASELINE_NAMESPACE]["profiles"]},
        late[-1].input_id: late[-1].to_json(),
    }


def test_a_changed_method_clusters_the_stored_profiles_again(store: StateStore) -> None:
    handle(store, InputsHandler(Config()), record(TEST, "suite-1", "full_suite", BASELINE))
    sample = update_records(BASELINE)["harmless"]
    by_dbscan = only_verdict(store, InputsHandler(Config()), sample)
    kmeans = InputsHandler(config_with(method="kmeans"))
    by_kmeans = only_verdict(store, kmeans, sample)
    assert by_kmeans.verdict_id != by_dbscan.verdict_id
    assert sample.inputs is not None
    library = RunOrSkipRecommender().recommend(
        InputClustering("kmeans").fit(*input_table(BASELINE)),
        BASELINE,
        sample.inputs.profiles,
        reference=sample.inputs.reference_profiles,
    )
    assert by_kmeans.recommendation == library.to_dict()
    assert by_kmeans.parameters["method"] == "kmeans"
    night2 = retimed(BASELINE, 1.0, seed=17)
    handle(store, kmeans, record(TEST, "suite-2", "full_suite", night2, at=T0 + timedelta(1)))
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored is not None and stored["method"] == "kmeans"
    assert stored["labels"] == InputClustering("kmeans").fit(*input_table(BASELINE)).labels_


def test_a_close_vote_lists_the_larger_sample_to_profile(store: StateStore) -> None:
    # the paper's pooled vote: half the sample slower is a close vote
    handler = InputsHandler(
        config_with(seed=5, per_cluster=2, rule="paper", acceptable_slowdown=0.38)
    )
    handle(store, handler, record(TEST, "suite-1", "full_suite", BASELINE))
    chosen = sampled(BASELINE, per_cluster=2, seed=5)
    half = len(chosen) // 2
    mixed = retimed(chosen[:half], 2.5, seed=18) + retimed(chosen[half:], 1.0, seed=19)
    block = only_verdict(store, handler, record(TEST, "u", "update_sample", mixed)).recommendation
    assert block is not None and block["close"], block
    larger = sample_inputs(InputClustering().fit(*input_table(BASELINE)), per_cluster=4, seed=5)
    assert block["advice"]["per_cluster"] == 4
    assert block["advice"]["inputs"] == [i for members in larger.values() for i in members]
    assert {p.input_id for p in chosen} <= set(block["advice"]["inputs"])


# --- records, configuration, publishing -------------------------------------------------------


def test_reference_profiles_travel_with_an_update_sample_only() -> None:
    chosen = sampled(BASELINE)
    doc = record_doc(TEST, "u", "update_sample", chosen, reference=retimed(chosen, 1.1, seed=1))
    parsed = Record.from_json(doc)
    assert parsed.inputs is not None and parsed.inputs.reference_profiles is not None
    assert parsed.to_json() == doc
    assert Record.from_json(record_doc(TEST, "s", "full_suite", chosen)).to_json()["inputs"] == {
        "kind": "full_suite",
        "profiles": [p.to_json() for p in chosen],
    }
    full = record_doc(TEST, "s", "full_suite", chosen, reference=chosen)
    assert [str(p) for p in validate_record(full)] == [
        "$.inputs.reference_profiles: only an update_sample carries reference profiles"
    ]
    doubled = record_doc(TEST, "u", "update_sample", chosen, reference=[chosen[0], chosen[0]])
    assert [str(p) for p in validate_record(doubled)] == [
        f"$.inputs.reference_profiles[1].input_id: duplicate input_id {chosen[0].input_id!r} "
        "(first at reference_profiles[0])"
    ]


def test_recommendation_settings_come_from_the_file_and_are_checked(tmp_path: Path) -> None:
    assert INPUT_CLUSTERING_METHODS == METHODS
    path = tmp_path / "perfwatch.toml"
    path.write_text(
        '[recommendation]\nmethod = "gmm"\nper_cluster = 5\nacceptable_slowdown = 0.3\n'
    )
    settings = load_config(path, env={}).recommendation
    assert (settings.method, settings.per_cluster, settings.acceptable_slowdown) == ("gmm", 5, 0.3)
    assert (settings.time_tolerance, settings.seed) == (0.1, 0)
    example = tomllib.loads((REPO / "perfwatch.example.toml").read_text())["recommendation"]
    assert example == Config().recommendation.model_dump()
    for text, message in (
        (
            'method = "optics"',
            "\\[recommendation\\] method = \"optics\": must be 'dbscan', 'kmeans'",
        ),
        (
            "per_cluster = 0",
            "\\[recommendation\\] per_cluster = 0: must be greater than or equal to 1",
        ),
        (
            "time_tolerance = -0.1",
            "\\[recommendation\\] time_tolerance = -0.1: must be greater than or",
        ),
    ):
        path.write_text(f"[recommendation]\n{text}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path, env={})


def test_a_published_sample_carries_its_reference_and_no_suite_totals() -> None:
    chosen = sampled(BASELINE)
    sample = InputProfileFile.create(kind="update_sample", profiles=chosen)
    reference = InputProfileFile.create(kind="update_sample", profiles=retimed(chosen, 1, seed=1))
    doc = complete_record(
        profile_record(sample, TEST, reference),
        explicit=Identity(branch="main"),
        defaults=Identity(),
    )
    assert validate_record(doc) == []
    parsed = Record.from_json(doc)
    assert parsed.metrics == {} and parsed.branch == "main"
    assert parsed.inputs is not None and parsed.inputs.reference_profiles == reference.profiles


def test_profile_refuses_a_reference_it_would_not_send(tmp_path: Path) -> None:
    reference = tmp_path / "old.json"
    write_input_profile(
        reference, InputProfileFile.create(kind="update_sample", profiles=BASELINE[:2])
    )
    result = CliRunner().invoke(main, ["profile", "--reference", str(reference), "--", "tests"])
    assert result.exit_code == 2
    assert "--reference is sent with the record: it needs --publish" in result.output
    identity = ["profile", "--commit", "abc1234", "--attr", "machine=big", "--", "tests"]
    result = CliRunner().invoke(main, identity)
    assert result.exit_code == 2
    assert "--commit and --attr are sent with the record: they need --publish" in result.output


# --- through the processor and a broker ------------------------------------------------------


def test_recommendations_through_the_broker_once_each(
    each_broker: BrokerHandle, store: StateStore, unique_topic: Callable[[str], str]
) -> None:
    topics = unique_topics(unique_topic)
    updates = update_records(BASELINE)
    totals = {"inputs_cpu_time_s": sum(p.cpu_time_s for p in BASELINE)}
    orphan = record_doc("other.suite", "orphan-1", "update_sample", BASELINE[:3])
    messages = [
        (TEST, orjson.dumps(record_doc(TEST, "suite-1", "full_suite", BASELINE, metrics=totals))),
        (TEST, dumps(updates["bottleneck"])),
        (TEST, dumps(updates["harmless"])),
        ("other.suite", orjson.dumps(orphan)),
    ]
    config = processor_config(store.url, topics)
    first, documents = verdicts_of_twice_published(config, store, each_broker, messages, TIMEOUT)
    assert documents == first
    decisions = {d["record_run_id"]: d["recommendation"]["decision"] for d in documents}
    assert decisions == {"bottleneck-1": "run", "harmless-1": "skip", "orphan-1": "run"}
    assert len({d["verdict_id"] for d in documents}) == 3
    assert all(validate_verdict(d) == [] for d in documents)
    assert len(list(store.verdicts(kind="recommendation"))) == 3
    stored = blob(store, INPUT_BASELINE_NAMESPACE)
    assert stored is not None and len(stored["profiles"]) == len(BASELINE)
    view = queries.inputs_view(store, test=TEST)
    assert len(view["recommendations"]) == 2 and len(view["profiles"]) == len(BASELINE)


@pytest.fixture(scope="module")
def example_service() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "examples"))
        from config_service import evaluation

        yield evaluation


def test_real_profiles_of_the_example_service_are_judged_as_offline(
    pulsar_broker: BrokerHandle,
    store: StateStore,
    unique_topic: Callable[[str], str],
    example_service: ModuleType,
) -> None:
    """The uploader profiled for real, its two real updates judged from a sample: the
    processor's verdicts are the recommendations `perfwatch recommend` computes."""
    from config_service import payloads, versions

    inputs = payloads.generate(48, seed=3)
    baseline = example_service.profile_suite(versions.BASELINE, inputs, repeats=3).profiles
    clustering = InputClustering().fit(*input_table(baseline))
    judged = {
        update: example_service.judge_update(update, clustering, baseline, inputs, repeats=5)
        for update in versions.UPDATES
    }
    messages = [(TEST, orjson.dumps(record_doc(TEST, "suite", "full_suite", baseline)))]
    for update, evaluation in judged.items():
        doc = record_doc(
            TEST, update, "update_sample", evaluation.updated, reference=evaluation.reference
        )
        messages.append((TEST, orjson.dumps(doc)))
    topics = unique_topics(unique_topic)
    client = make_client(pulsar_broker)
    try:
        publish(client, topics["records"], messages)
        config = processor_config(store.url, topics)
        with running_processor(config, store, client, pulsar_broker) as runner:
            runner.wait_until(settled(runner.metrics, len(messages)), "every record", TIMEOUT)
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox", TIMEOUT)
        documents = verdict_documents(client, topics["verdicts"])
    finally:
        client.close()
    found = {d["record_run_id"]: d["recommendation"] for d in documents}
    assert sorted(found) == sorted(versions.UPDATES)
    for update, evaluation in judged.items():
        block = found[update]
        if block["advice"] is not None:
            block["advice"].pop("inputs")
        assert block == orjson.loads(orjson.dumps(evaluation.recommendation.to_dict()))
