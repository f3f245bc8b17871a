"""The stream processor: correctness against batch analysis, redelivery, bad input, outbox.

Most tests run on the embedded broker; those taking `each_broker` also on real Pulsar.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import orjson
import pulsar
import pytest
from click.testing import CliRunner

from _processor_support import (
    ServeProcess,
    analyze_beliefs,
    batch_beliefs,
    beliefs_from_verdicts,
    free_port,
    history,
    processor_config,
    publish,
    read_all,
    record_bytes,
    running_processor,
    settled,
    stored_beliefs,
    unique_topics,
    verdict_documents,
    wait_until,
    without_empty,
)
from _verdict_samples import EMITTED_AT, evidence
from perfwatch.brokers import open_broker
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.cli.main import main
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import Record, SeriesRef, Verdict
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import DETECTED, BeliefChange, make_verdict
from perfwatch.processor.changepoints import ChangePointHandler
from perfwatch.processor.observability import (
    SERVICE_LOGGERS,
    ProcessorMetrics,
    configure_logging,
)
from perfwatch.state import StateStore, StoreTransaction, open_store

TIMEOUT = 120.0


@pytest.fixture
def client(embedded_broker: BrokerHandle) -> Iterator[pulsar.Client]:
    client = make_client(embedded_broker)
    yield client
    client.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        yield store


@pytest.fixture
def topics(unique_topic: Callable[[str], str]) -> dict[str, str]:
    return unique_topics(unique_topic)


def test_stream_gives_the_change_points_of_perfwatch_analyze(
    each_broker: BrokerHandle, store: StateStore, topics: dict[str, str], tmp_path: Path
) -> None:
    messages, _ = history(tests=3, metrics=2, runs=120, seed=3)
    records_file = tmp_path / "records.jsonl"
    records_file.write_bytes(b"\n".join(payload for _, payload in messages))
    config = processor_config(store.url, topics)
    client = make_client(each_broker)
    try:
        publish(client, topics["records"], messages)
        with running_processor(config, store, client, each_broker) as runner:
            runner.wait_until(settled(runner.metrics, len(messages)), "all records")
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox")
        documents = verdict_documents(client, topics["verdicts"])
    finally:
        client.close()
    expected = without_empty(analyze_beliefs(store, records_file))
    assert len(expected) >= 5  # nearly every series has a step
    assert without_empty(batch_beliefs(store)) == expected
    assert without_empty(stored_beliefs(store)) == expected
    assert without_empty(beliefs_from_verdicts(documents)) == expected
    ids = [document["verdict_id"] for document in documents]
    assert len(ids) == len(set(ids))
    assert all(validate_verdict(document) == [] for document in documents)
    assert {document["record_run_id"] for document in documents} <= {
        orjson.loads(payload)["run_id"] for _, payload in messages
    }
    assert runner.metrics.records_processed_total() == len(messages)


def test_redelivered_and_replayed_records_change_nothing(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    messages, series = history(tests=2, metrics=2, runs=80, seed=5)
    config = processor_config(store.url, topics)
    publish(client, topics["records"], messages)
    with running_processor(config, store, client, embedded_broker) as runner:
        runner.wait_until(settled(runner.metrics, len(messages)), "first pass")
        runner.wait_until(lambda: not store.unpublished(), "an empty outbox")
        first_verdicts = len(list(store.verdicts()))
        publish(client, topics["records"], messages)  # the whole stream again
        runner.wait_until(settled(runner.metrics, 2 * len(messages)), "second pass")
    assert len(list(store.verdicts())) == first_verdicts
    assert len(verdict_documents(client, topics["verdicts"])) == first_verdicts
    for key in store.series_keys():
        assert [p.value for p in store.series_points(key)] == series[(key.test, key.metric)]


def test_late_records_are_placed_by_timestamp(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    messages, series = history(tests=2, metrics=2, runs=100, seed=11)
    rng = random.Random(2)
    late = rng.sample(range(20, len(messages) - 30), 12)
    reordered = [m for i, m in enumerate(messages) if i not in late]
    for i in late:  # each arrives about ten runs after its time
        reordered.insert(min(i + rng.randrange(15, 25), len(reordered)), messages[i])
    config = processor_config(store.url, topics)
    publish(client, topics["records"], reordered)
    with running_processor(config, store, client, embedded_broker) as runner:
        runner.wait_until(settled(runner.metrics, len(messages)), "all records")
        runner.wait_until(lambda: not store.unpublished(), "an empty outbox")
    for key in store.series_keys():
        points = store.series_points(key)
        assert [p.value for p in points] == series[(key.test, key.metric)]
        assert [p.timestamp for p in points] == sorted(p.timestamp for p in points)
    expected = without_empty(batch_beliefs(store))
    assert without_empty(stored_beliefs(store)) == expected
    documents = verdict_documents(client, topics["verdicts"])
    assert without_empty(beliefs_from_verdicts(documents)) == expected


def test_identifying_attributes_split_series(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    messages = [
        ("t", record_bytes("t", run, {"m": 100.0 + run % 3}, branch=branch))
        for run in range(5)
        for branch in ("main", "feature")
    ]
    config = processor_config(store.url, topics)
    publish(client, topics["records"], messages)
    with running_processor(config, store, client, embedded_broker) as runner:
        runner.wait_until(settled(runner.metrics, len(messages)), "all records")
    assert sorted(dict(key.attributes)["branch"] for key in store.series_keys()) == [
        "feature",
        "main",
    ]


BAD_MESSAGES = {
    "undecodable": b"\xff\xfeoops",
    "invalid_json": b'{"schema": "perfwatch.record/v1",',
    "non_finite": b'{"schema": "perfwatch.record/v1", "test": "t", "run_id": "x",'
    b' "timestamp": "2024-01-01T00:00:00Z", "metrics": {"m": Infinity}}',
    "schema": b'{"schema": "perfwatch.record/v1", "test": "t", "run_id": "x",'
    b' "timestamp": "2024-01-01T00:00:00Z", "metrics": {"m": {"value": 1, "direction": "up"}}}',
    "unknown_version": b'{"schema": "perfwatch.record/v7", "test": "t"}',
    "oversized": orjson.dumps(
        {
            "schema": "perfwatch.record/v1",
            "test": "t",
            "run_id": "big",
            "timestamp": "2024-01-01T00:00:00Z",
            "metrics": {"m": 1.0},
            "attributes": {"blob": "x" * 3000},
        }
    ),
}
BAD_PATHS = {
    "schema": "$.metrics.m.direction",
    "unknown_version": "$.schema",
    "non_finite": "$.metrics.m",
}


def test_bad_input_is_dead_lettered_with_its_reason(
    each_broker: BrokerHandle, store: StateStore, topics: dict[str, str]
) -> None:
    good, _ = history(tests=1, metrics=1, runs=10)
    messages = list(good[:5])
    for kind, payload in BAD_MESSAGES.items():
        messages.append((f"bad-{kind}", payload))
    messages.extend(good[5:])
    # A small size limit makes the "oversized" message oversized (and nothing else).
    config = processor_config(store.url, topics, max_record_bytes=2000)
    client = make_client(each_broker)
    try:
        publish(client, topics["records"], messages)
        with running_processor(config, store, client, each_broker) as runner:
            runner.wait_until(settled(runner.metrics, len(messages)), "all messages")
        dead_letters = read_all(client, topics["dead_letter"])
    finally:
        client.close()
    assert runner.metrics.records_processed_total() == len(good)
    assert runner.metrics.dead_lettered_total() == len(BAD_MESSAGES)
    dead = {m.properties()["perfwatch.error.kind"]: m for m in dead_letters}
    assert set(dead) == set(BAD_MESSAGES)
    for kind, message in dead.items():
        properties = message.properties()
        assert message.data() == BAD_MESSAGES[kind]
        assert message.partition_key() == f"bad-{kind}"
        assert properties["perfwatch.error.path"] == BAD_PATHS.get(kind, "$")
        assert properties["perfwatch.error.message"]
        assert properties["perfwatch.source.topic"] == topics["records"]
        assert properties["perfwatch.consumer"] == config.consumer.name
    assert len(store.series_points(store.series_keys()[0])) == len(good)
    # a syntax error says where, as `publish` does for a file
    assert (
        dead["invalid_json"].properties()["perfwatch.error.message"].endswith("(line 1 column 34)")
    )

    # What an operator reads of them: `perfwatch dead-letters`, oldest first.
    command = ["dead-letters", "--pulsar-url", each_broker.service_url]
    command += ["--dead-letter-topic", topics["dead_letter"], "--idle-timeout", "1"]
    text = CliRunner().invoke(main, command)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [
        m.properties()["perfwatch.error.kind"] for m in dead_letters
    ]
    for line, message in zip(lines, dead_letters, strict=True):
        properties = message.properties()
        reason = f"{properties['perfwatch.error.path']}: {properties['perfwatch.error.message']}"
        assert reason in line
        assert f"from message {properties['perfwatch.source.message_id']}" in line
    assert f"{len(dead_letters)} dead letter(s)" in text.stderr
    as_json = CliRunner().invoke(main, [*command, "--format", "json"])
    documents = [orjson.loads(line) for line in as_json.stdout_bytes.splitlines()]
    assert [d["properties"] for d in documents] == [m.properties() for m in dead_letters]
    assert [d["key"] for d in documents] == [m.partition_key() for m in dead_letters]
    payloads = [
        d["payload"].encode() if "payload" in d else base64.b64decode(d["payload_base64"])
        for d in documents
    ]
    assert payloads == [m.data() for m in dead_letters]


class FailingHandler:
    """A handler with a bug that shows on one particular run."""

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        pass  # it locks nothing

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        if record.run_id.endswith("#3"):
            raise ZeroDivisionError("a bug in a handler")
        return []


def test_a_failing_record_is_retried_then_dead_lettered_with_its_traceback(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    messages, _ = history(tests=1, metrics=1, runs=8)
    config = processor_config(store.url, topics, max_redeliveries=2, nack_delay_ms=100)
    handlers = [ChangePointHandler(config), FailingHandler()]
    publish(client, topics["records"], messages)
    with running_processor(config, store, client, embedded_broker, handlers=handlers) as runner:
        # A negative acknowledgement may bring the rest of its broker batch back
        # too (harmless: those records change nothing the second time).
        runner.wait_until(lambda: runner.metrics.dead_lettered_total() == 1, "the DLQ")
        runner.wait_until(settled(runner.metrics, len(messages)), "all messages")
    assert runner.metrics.redelivered._value.get() >= 2
    (dead,) = read_all(client, topics["dead_letter"])
    properties = dead.properties()
    assert properties["perfwatch.error.kind"] == "processing_error"
    assert properties["perfwatch.source.redelivery_count"] == "2"
    assert "ZeroDivisionError: a bug in a handler" in properties["perfwatch.error.message"]
    assert "in handle" in properties["perfwatch.error.traceback"]
    assert "test_processor.py" in properties["perfwatch.error.traceback"]
    # The failed record's transaction was rolled back: its point is not in the series.
    (key,) = store.series_keys()
    stored = [p.run_id for p in store.series_points(key)]
    assert stored == [f"test0000#{run}" for run in range(8) if run != 3]


def queue_verdicts(store: StateStore, owner: str, count: int) -> list[Verdict]:
    """Commit verdicts to the outbox as a processor would, without publishing them."""
    verdicts = []
    with store.transaction() as tx:
        for i in range(count):
            verdict = make_verdict(
                BeliefChange(DETECTED, evidence(), None),
                series=SeriesRef("t", f"m{i}", {}),
                series_key=f"t/m{i}",
                series_length=60,
                record_run_id="t#59",
                parameters={},
                emitted_at=EMITTED_AT,
            )
            tx.add_verdict(verdict.verdict_id, verdict.kind, dumps(verdict), owner, "t", "")
            verdicts.append(verdict)
    return verdicts


def test_outbox_left_by_a_crash_is_published_exactly_once(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    config = processor_config(store.url, topics)
    owner = config.consumer.name
    first, second = queue_verdicts(store, owner, 2)
    # The crash came after the broker stored the first verdict, before the store
    # marked it: it is on the topic and still unpublished in the outbox.
    producer = client.create_producer(topics["verdicts"], producer_name=owner)
    producer.send(dumps(first), properties={"verdict_id": first.verdict_id}, partition_key="t")
    producer.close()
    with running_processor(config, store, client, embedded_broker) as runner:
        runner.wait_until(lambda: not store.unpublished(), "an empty outbox")
    ids = Counter(d["verdict_id"] for d in verdict_documents(client, topics["verdicts"]))
    assert ids == {first.verdict_id: 1, second.verdict_id: 1}


def test_a_dead_processors_outbox_is_adopted(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    config = processor_config(store.url, topics, orphan_after_s=0.0)
    orphans = queue_verdicts(store, "a-processor-that-died", 3)
    with running_processor(config, store, client, embedded_broker) as runner:
        runner.wait_until(lambda: not store.unpublished(), "adoption of the orphans")
    messages = read_all(client, topics["verdicts"])
    assert sorted(m.properties()["verdict_id"] for m in messages) == sorted(
        v.verdict_id for v in orphans
    )
    assert {m.producer_name() for m in messages} == {"a-processor-that-died"}


def test_metrics_endpoint_serves_the_processor_metrics(
    embedded_broker: BrokerHandle, client: pulsar.Client, store: StateStore, topics: dict[str, str]
) -> None:
    messages, _ = history(tests=1, metrics=2, runs=60, seed=4)
    messages.append(("bad", b"not json"))
    config = processor_config(store.url, topics)
    metrics = ProcessorMetrics.create()
    port = free_port()
    stop_server = metrics.serve("127.0.0.1", port)
    try:
        publish(client, topics["records"], messages)
        with running_processor(config, store, client, embedded_broker, metrics=metrics) as runner:
            runner.wait_until(settled(metrics, len(messages)), "all messages")
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        stop_server()
    assert f"perfwatch_records_processed_total {len(messages) - 1}.0" in text
    assert 'perfwatch_records_dead_lettered_total{reason="invalid_json"} 1.0' in text
    assert 'perfwatch_verdicts_published_total{kind="change_point.detected"}' in text
    assert "perfwatch_series 2.0" in text
    assert f"perfwatch_processing_latency_seconds_count {len(messages)}.0" in text
    assert "perfwatch_verdict_lag_seconds_count" in text
    check_prometheus_conventions(text)


def check_prometheus_conventions(text: str) -> None:
    """One HELP and TYPE per family, counters ending in _total, times in seconds, and no
    `_created` gauges repeating every counter's and histogram's HELP."""
    helps = re.findall(r"^# HELP (\S+) ", text, re.MULTILINE)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert len(helps) == len(set(helps)), helps
    assert sorted(helps) == sorted(types)
    assert not [name for name in helps if name.endswith("_created")]
    for name, kind in types.items():
        assert name.startswith("perfwatch_")
        assert (kind == "counter") == name.endswith("_total"), (name, kind)
        if any(word in name for word in ("latency", "lag", "duration")):
            assert name.endswith("_seconds"), name


def _restore_loggers() -> None:
    """Undo `configure_logging`: its handlers write to this test's captured stderr."""
    for name in SERVICE_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


def test_json_logs_carry_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "info")
    try:
        logging.getLogger("perfwatch.processor").warning(
            "record dead-lettered", extra={"reason": "schema", "path": "$.test"}
        )
    finally:
        _restore_loggers()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "record dead-lettered"
    assert line["level"] == "warning" and line["logger"] == "perfwatch.processor"
    assert line["reason"] == "schema" and line["path"] == "$.test"


def test_json_logs_take_in_the_database_drivers_warnings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """psycopg warns of a connection lost mid-batch; that line was bare text among JSON."""
    configure_logging("json", "info")
    try:
        logging.getLogger("psycopg").warning("error ignored terminating %r: %s", "pipe", "lost")
    finally:
        _restore_loggers()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "error ignored terminating 'pipe': lost"
    assert line["level"] == "warning" and line["logger"] == "psycopg"


def test_serve_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    broker_dir = tmp_path / "broker"
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    messages, _ = history(tests=2, metrics=2, runs=40, seed=8)
    with open_broker(None, data_dir=broker_dir) as handle:
        client = make_client(handle)
        try:
            publish(client, "persistent://public/default/perfwatch-records", messages)
            serve = ServeProcess(
                ["--embedded-dir", str(broker_dir), "--store", store_url, "--name", "graceful"],
                tmp_path / "serve.log",
            ).start()
            with open_store(store_url) as store:

                def all_points_stored() -> bool:
                    return sum(len(store.series_points(k)) for k in store.series_keys()) == 160

                wait_until(all_points_stored, TIMEOUT, "the processor")
                assert serve.terminate() == 0, serve.log()
                assert not store.unpublished()
            assert "processor stopped" in serve.log()
        finally:
            client.close()


def test_demo_finds_the_scripted_changes(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    result = CliRunner().invoke(main, ["demo", "--keep", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Scripted changes not found: none" in result.output
    assert "dead-lettered 6 messages" in result.output
    for reason in BAD_MESSAGES:
        assert f"\n  {reason} " in result.output
    assert result.output.count("DETECTED") >= 5
    # the tables say which column is what was found and which is the scripted truth
    headers = [
        [name.strip() for name in line.split("  ") if name.strip()]
        for line in result.output.splitlines()
        if line.split()[:1] in (["test"], ["reason"])
    ]
    assert headers == [
        ["test", "metric", "found at", "change", "found as", "scripted (the truth)"],
        ["reason", "where", "problem"],
    ]
    assert "this perfwatch reads 'perfwatch.record/v1'" in result.output  # not cut short
    # the kept state is where the output says, and the next steps use it
    store_url = f"sqlite:///{tmp_path.resolve() / 'state.db'}"
    assert f"{tmp_path.resolve()} (kept)" in result.output
    assert (tmp_path / "state.db").is_file()
    next_steps = result.output.split("\nNext steps:\n")[1]
    broker = tmp_path.resolve() / "broker"
    assert f"perfwatch dashboard --store {store_url} --embedded-dir {broker}\n" in next_steps
    assert f"perfwatch serve --store {store_url} --embedded-dir {broker}\n" in next_steps
    assert f"perfwatch publish --embedded-dir {broker} results.json\n" in next_steps
    assert "perfwatch demo --keep" not in next_steps
    # the same folder again would replay old news into the kept store: refused, naming it
    again = CliRunner().invoke(main, ["demo", "--keep", str(tmp_path)])
    assert again.exit_code == 2, again.output
    assert f"{tmp_path} already holds a demo's state" in again.stderr


def test_demo_keep_in_a_folder_it_cannot_make_is_a_usage_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    a_file = tmp_path / "a-file"
    a_file.write_text("")
    result = CliRunner().invoke(main, ["demo", "--keep", str(a_file / "sub")])
    assert result.exit_code == 2, result.output
    assert "--keep" in result.stderr and f"cannot make the folder {a_file / 'sub'}" in result.stderr
    assert "Traceback" not in result.output


def test_demo_without_keep_names_no_folder_and_says_how_to_keep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perfwatch.cli.demo import _next_steps

    _next_steps(Path("/tmp/gone-after-the-demo"), kept=False)
    output = capsys.readouterr().out
    assert "gone-after-the-demo" not in output
    keep = Path("perfwatch-demo").resolve()
    assert f"perfwatch demo --keep {keep}\n" in output
    assert (
        f"perfwatch dashboard --store sqlite:///{keep / 'state.db'} --embedded-dir "
        f"{keep / 'broker'}\n"
    ) in output
