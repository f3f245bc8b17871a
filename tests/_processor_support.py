"""Shared by the processor tests and the stream benchmark: records, runners, checks."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pulsar
import pytest

from perfwatch.adapters.pulsar import pulsar_processor
from perfwatch.brokers.admin import admin_request
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.config import Config
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points
from perfwatch.processor.loop import Processor
from perfwatch.processor.observability import ProcessorMetrics
from perfwatch.state import SeriesKey, StateStore

T0 = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
POSTGRES_URL_ENV = "PERFWATCH_TEST_POSTGRES_URL"


def fresh_postgres_schema() -> Iterator[str]:
    """For a fixture: a URL into a new schema of the test server, dropped afterwards.

    Skips when the server is not configured, except in CI where it must be."""
    base_url = os.environ.get(POSTGRES_URL_ENV)
    if not base_url:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{POSTGRES_URL_ENV} must be set in CI (scripts/start-postgres.sh)")
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    with postgres_schema(base_url) as url:
        yield url


@contextmanager
def postgres_schema(base_url: str, prefix: str = "t") -> Iterator[str]:
    """A URL into a new schema of the server at `base_url`, dropped afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in base_url else "?"
    try:
        yield f"{base_url}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base_url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def record_bytes(test: str, run: int, metrics: dict[str, float], branch: str = "main") -> bytes:
    return orjson.dumps(
        {
            "schema": RECORD_SCHEMA,
            "test": test,
            "run_id": f"{test}#{run}",
            "commit": f"c{run:05d}",
            "branch": branch,
            "timestamp": format_rfc3339(T0 + timedelta(hours=run)),
            "metrics": {
                name: {"value": value, "direction": "lower_is_better"}
                for name, value in metrics.items()
            },
        }
    )


def stepped_values(
    rng: random.Random, runs: int, steps: Sequence[tuple[int, float]]
) -> list[float]:
    """Noisy values around 100 that jump by the given factors at the given runs."""
    values = []
    level = 100.0
    pending = sorted(steps)
    for run in range(runs):
        while pending and pending[0][0] == run:
            level *= pending.pop(0)[1]
        values.append(round(level * (1 + rng.gauss(0, 0.01)), 4))
    return values


def history(
    tests: int, metrics: int, runs: int, seed: int = 1
) -> tuple[list[tuple[str, bytes]], dict[tuple[str, str], list[float]]]:
    """Messages (key, payload) in run order and the values of every series.

    Each series gets one or two steps at seeded places."""
    rng = random.Random(seed)
    series: dict[tuple[str, str], list[float]] = {}
    for t in range(tests):
        for m in range(metrics):
            first = rng.randrange(runs // 4, runs // 2)
            steps = [(first, rng.choice((1.15, 0.85)))]
            if rng.random() < 0.5 and first + 10 < runs - 5:
                steps.append((rng.randrange(first + 10, runs - 5), rng.choice((1.2, 0.8))))
            series[(f"test{t:04d}", f"metric{m:02d}")] = stepped_values(rng, runs, steps)
    messages = []
    for run in range(runs):
        for t in range(tests):
            test = f"test{t:04d}"
            values = {
                f"metric{m:02d}": series[(test, f"metric{m:02d}")][run] for m in range(metrics)
            }
            messages.append((test, record_bytes(test, run, values)))
    return messages, series


def processor_config(store_url: str, topics: dict[str, str], **consumer: Any) -> Config:
    base = Config()
    consumer = {
        "subscription": f"sub-{uuid.uuid4().hex[:8]}",
        "name": f"proc-{uuid.uuid4().hex[:8]}",
        **consumer,
    }
    return base.model_copy(
        update={
            "store": base.store.model_copy(update={"url": store_url}),
            "topics": base.topics.model_copy(update=topics),
            "consumer": base.consumer.model_copy(update=consumer),
        }
    )


def unique_topics(make: Callable[[str], str]) -> dict[str, str]:
    return {"records": make("records"), "verdicts": make("verdicts"), "dead_letter": make("dlq")}


class RunningProcessor:
    """A processor consuming in a thread (see `running_processor`)."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self.metrics = processor.metrics
        self.errors: list[BaseException] = []

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
        """Like `wait_until`, failing at once if the processor thread died."""

        def done() -> bool:
            assert not self.errors, f"the processor failed: {self.errors[0]!r}"
            return condition()

        wait_until(done, timeout, what)


@contextmanager
def running_processor(
    config: Config, store: StateStore, client: pulsar.Client, broker: BrokerHandle, **kwargs: Any
) -> Iterator[RunningProcessor]:
    """A processor consuming in a thread; stopped (gracefully) on exit."""
    processor = pulsar_processor(
        config, store, client, subscription_type=broker.subscription_type(), **kwargs
    )
    with running_in_thread(processor) as runner:
        yield runner


@contextmanager
def running_in_thread(processor: Processor) -> Iterator[RunningProcessor]:
    """`processor.run` in a thread; stopped (gracefully) on exit, failing if it raised."""
    runner = RunningProcessor(processor)
    stop = threading.Event()

    def run() -> None:
        try:
            runner.processor.run(stop)
        except BaseException as err:
            runner.errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        thread.join(60)
    assert not runner.errors, runner.errors


def verdicts_of_twice_published(
    config: Config,
    store: StateStore,
    broker: BrokerHandle,
    messages: Sequence[tuple[str, bytes]],
    timeout: float,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run a processor on `messages`, then on the same messages again: the verdicts
    topic after the first pass and after the second. Fails on any dead letter."""
    client = make_client(broker)
    try:
        publish(client, config.topics.records, messages)
        with running_processor(config, store, client, broker) as runner:
            runner.wait_until(settled(runner.metrics, len(messages)), "every record", timeout)
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox", timeout)
            first = verdict_documents(client, config.topics.verdicts)
            publish(client, config.topics.records, messages)  # the same records again
            runner.wait_until(settled(runner.metrics, 2 * len(messages)), "the copies", timeout)
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox", timeout)
        assert runner.metrics.dead_lettered_total() == 0
        return first, verdict_documents(client, config.topics.verdicts)
    finally:
        client.close()


def publish(client: pulsar.Client, topic: str, messages: Sequence[tuple[str, bytes]]) -> None:
    # Key-based batches: a Key_Shared subscription can hand each key to its consumer.
    producer = client.create_producer(
        topic,
        block_if_queue_full=True,
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
    )
    try:
        for key, payload in messages:
            producer.send_async(payload, None, partition_key=key)
        producer.flush()
    finally:
        producer.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def applied(admin_url: str, topic: str, policy: str) -> object:
    """The topic's policy as the broker applies it (its own or the namespace's)."""
    path = "/admin/v2/" + topic.replace("://", "/", 1) + f"/{policy}?applied=true"
    status, body = admin_request(admin_url, "GET", path)
    assert status == 200, (path, status, body)
    return orjson.loads(body)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def stored_points(store: StateStore) -> int:
    return sum(len(store.series_points(key)) for key in store.series_keys())


def settled(metrics: ProcessorMetrics, expected: int) -> Callable[[], bool]:
    return lambda: metrics.settled() >= expected


def read_all(client: pulsar.Client, topic: str, idle_ms: int = 1500) -> list[pulsar.Message]:
    """Every message on a topic, from the start (a fresh Shared subscription)."""
    consumer = client.subscribe(
        topic,
        f"read-{uuid.uuid4().hex[:8]}",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    messages = []
    try:
        while True:
            try:
                message = consumer.receive(timeout_millis=idle_ms)
            except pulsar.Timeout:
                return messages
            consumer.acknowledge(message)
            messages.append(message)
    finally:
        consumer.close()


def read_in_order(client: pulsar.Client, topic: str) -> list[pulsar.Message]:
    """Every message kept on a topic, in the order the broker stored them.

    A reader from the earliest message to the last one the broker reports: no
    quiet spell ends it early, no redelivery reorders it, and it leaves no
    cursor that would itself hold messages back."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    messages = []
    try:
        while reader.has_message_available():
            messages.append(reader.read_next(timeout_millis=30_000))
    finally:
        reader.close()
    return messages


def check_verdicts_on_topic(store: StateStore, messages: Sequence[pulsar.Message]) -> None:
    """The verdicts topic holds every verdict the store committed, none twice and
    none it did not commit, each processor name's in the order it committed them.

    `messages`: the topic in its order (`read_in_order`); messages without a
    verdict_id property (probes) are passed over."""
    on_topic = [
        (message.producer_name(), message.properties()["verdict_id"])
        for message in messages
        if "verdict_id" in message.properties()
    ]
    repeated = sorted(v for v, n in Counter(v for _, v in on_topic).items() if n > 1)
    assert not repeated, f"verdict ids on the topic more than once: {repeated}"
    committed = list(store.verdicts())  # oldest first
    described = {
        e.verdict_id: f"{e.kind} of {e.series_key or e.partition_key} ({e.verdict_id}, "
        f"outbox number {e.seq} of {e.owner})"
        for e in committed
    }
    published = {verdict_id for _, verdict_id in on_topic}
    missing = [described[e.verdict_id] for e in committed if e.verdict_id not in published]
    assert not missing, "committed verdicts missing from the topic:\n" + "\n".join(missing)
    unknown = [verdict_id for _, verdict_id in on_topic if verdict_id not in described]
    assert not unknown, f"verdicts on the topic that the store never committed: {unknown}"
    for owner in sorted({e.owner for e in committed}):
        in_commit_order = [e.verdict_id for e in committed if e.owner == owner]
        in_topic_order = [v for producer, v in on_topic if producer == owner]
        assert sorted(in_topic_order) == sorted(in_commit_order), f"{owner}: sent by another"
        pairs = zip(in_commit_order, in_topic_order, strict=True)
        for position, (expected, found) in enumerate(pairs):
            assert found == expected, (
                f"{owner}'s verdicts reached the topic out of commit order: at position "
                f"{position}, {described[found]} before {described[expected]}"
            )


def verdict_documents(client: pulsar.Client, topic: str) -> list[dict[str, Any]]:
    """The verdicts on `topic`: the processor sends each with its verdict_id property."""
    return [
        orjson.loads(message.data())
        for message in read_all(client, topic)
        if "verdict_id" in message.properties()
    ]


def beliefs_from_verdicts(documents: Sequence[dict[str, Any]]) -> dict[SeriesKey, set[str]]:
    """Apply verdicts in order: the run ids each series' change points are at."""
    beliefs: dict[SeriesKey, set[str]] = {}
    for document in documents:
        series = document["series"]
        key = SeriesKey.of(series["test"], series["metric"], series["attributes"])
        runs = beliefs.setdefault(key, set())
        if "previous" in document:
            previous = document["previous"]["run_id"]
            assert previous in runs, (
                f"{document['kind']} {document['verdict_id']} of {key.canonical} follows no "
                f"published change point at {previous}"
            )
            runs.remove(previous)
        if "change_point" in document:
            runs.add(document["change_point"]["run_id"])
    return beliefs


def batch_beliefs(
    store: StateStore, params: EDivisiveParams | None = None
) -> dict[SeriesKey, set[str]]:
    """What a batch analysis of every stored series finds: the run ids of its change points."""
    found = {}
    for key in store.series_keys():
        points = store.series_points(key)
        change_points = detect_change_points([p.value for p in points], params)
        found[key] = {points[cp.index].run_id for cp in change_points}
    return found


def analyze_beliefs(store: StateStore, records_file: Path) -> dict[SeriesKey, set[str]]:
    """What `perfwatch analyze --format json` finds in a file of the same records."""
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    result = CliRunner().invoke(main, ["analyze", str(records_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    keys = {(key.test, key.metric): key for key in store.series_keys()}
    found = {}
    for series in orjson.loads(result.output)["series"]:
        key = keys[(series["test"], series["metric"])]
        points = store.series_points(key)
        found[key] = {points[cp["index"]].run_id for cp in series["change_points"]}
    return found


def stored_beliefs(store: StateStore) -> dict[SeriesKey, set[str]]:
    return {
        key: {cp["run_id"] for cp in store.published_change_points(key)}
        for key in store.series_keys()
    }


def without_empty(beliefs: dict[SeriesKey, set[str]]) -> dict[SeriesKey, set[str]]:
    return {key: runs for key, runs in beliefs.items() if runs}


class ServeProcess:
    """`perfwatch serve` as a child process (to kill it for real)."""

    def __init__(self, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        entry = "from perfwatch.cli.main import main; main()"
        self.args = [sys.executable, "-c", entry, "serve", *args]
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServeProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        log.close()
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def kill_if_running(self) -> None:
        """Cleanup after a failed test: a `serve` left running would outlive the test."""
        if self.process is not None and self.process.poll() is None:
            self.kill()

    def terminate(self, timeout: float = 60) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
