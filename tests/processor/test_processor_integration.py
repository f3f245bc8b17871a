"""`perfwatch serve` under crashes, broker restarts and scale-out (real Pulsar in CI).

Each test publishes a stream, disturbs the processing, lets it finish, and then
checks the same three things: every record is in its series exactly once, the
change points equal a batch analysis of the final series, and the verdicts
topic holds every verdict the store committed, once each and in the order each
processor committed them, which replayed arrive at the same change points.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import orjson
import pulsar
import pytest
from click.testing import CliRunner

from _processor_support import (
    ServeProcess,
    applied,
    batch_beliefs,
    beliefs_from_verdicts,
    check_verdicts_on_topic,
    free_port,
    fresh_postgres_schema,
    history,
    processor_config,
    publish,
    read_in_order,
    running_processor,
    settled,
    stored_beliefs,
    stored_points,
    unique_topics,
    verdict_documents,
    wait_until,
    without_empty,
)
from perfwatch.adapters.pulsar_admin import enable_verdict_deduplication, prepare_topics
from perfwatch.brokers import open_broker
from perfwatch.brokers.admin import admin_request
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.brokers.standalone import PulsarStandalone
from perfwatch.cli.main import main
from perfwatch.config import TopicsConfig
from perfwatch.state import StateStore, open_store

TIMEOUT = 300.0
pytestmark = pytest.mark.slow  # each starts processes or brokers: tens of seconds


def check_outcome(
    store: StateStore,
    broker: BrokerHandle,
    verdicts_topic: str,
    series: dict[tuple[str, str], list[float]],
) -> None:
    for key in store.series_keys():
        assert [p.value for p in store.series_points(key)] == series[(key.test, key.metric)]
    assert len(store.series_keys()) == len(series)
    assert not store.unpublished()
    expected = without_empty(batch_beliefs(store))
    assert expected, "the stream should contain change points"
    assert without_empty(stored_beliefs(store)) == expected
    client = make_client(broker)
    try:
        messages = read_in_order(client, verdicts_topic)
    finally:
        client.close()
    check_verdicts_on_topic(store, messages)
    documents = [orjson.loads(m.data()) for m in messages if "verdict_id" in m.properties()]
    assert without_empty(beliefs_from_verdicts(documents)) == expected


def serve_arguments(
    broker: BrokerHandle, topics: dict[str, str], subscription: str, store_url: str
) -> list[str]:
    arguments = [
        "--records-topic", topics["records"],
        "--verdicts-topic", topics["verdicts"],
        "--dead-letter-topic", topics["dead_letter"],
        "--subscription", subscription,
        "--store", store_url,
    ]  # fmt: skip
    if broker.kind == "embedded":
        return arguments
    arguments += ["--pulsar-url", broker.service_url]
    if broker.admin_url:
        arguments += ["--admin-url", broker.admin_url]
    return arguments


@pytest.fixture
def empty_config(tmp_path: Path) -> Path:
    """An empty configuration file, so a perfwatch.toml nearby cannot leak in."""
    path = tmp_path / "perfwatch.toml"
    path.write_text("")
    return path


@pytest.fixture(params=["embedded", "pulsar_broker"])
def serve_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Callable[[], AbstractContextManager[BrokerHandle]], list[str]]:
    """How the test reaches the broker, and the `serve` flags that reach the same one.

    The embedded broker runs only while the test holds it open, so that `serve`
    starts its own on the folder and owns it, as it does by default."""
    if request.param == "pulsar_broker":
        handle = request.getfixturevalue("pulsar_broker")
        return (lambda: nullcontext(handle)), []
    folder = tmp_path / "embedded"
    return (lambda: open_broker(None, data_dir=folder)), ["--embedded-dir", str(folder)]


def test_kill_9_mid_stream_then_restart(
    serve_broker: tuple[Callable[[], AbstractContextManager[BrokerHandle]], list[str]],
    tmp_path: Path,
    empty_config: Path,
    unique_topic: Callable[[str], str],
) -> None:
    """`serve` killed twice mid-stream; the third one finishes the stream.

    On the embedded broker each `serve` owns the broker, so the next one ends the
    broker its killed predecessor left and starts it again: pulsar-lite keeps a
    consumer whose connection was reset (docs/brokers.md), and only a restart
    lets the subscription deliver again."""
    connect, extra = serve_broker
    topics = unique_topics(unique_topic)
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    messages, series = history(tests=6, metrics=4, runs=150, seed=21)
    total = sum(len(values) for values in series.values())
    with connect() as broker:
        arguments = [
            "--config", str(empty_config), "--name", "crashy",
            *serve_arguments(broker, topics, f"sub-{uuid.uuid4().hex[:8]}", store_url), *extra,
        ]  # fmt: skip
        client = make_client(broker)
        try:
            publish(client, topics["records"], messages)
        finally:
            client.close()
    log = tmp_path / "serve.log"
    serve = ServeProcess(arguments, log).start()
    try:
        with open_store(store_url) as store:
            for fraction in (0.25, 0.6):
                target = fraction * total
                wait_until(lambda t=target: stored_points(store) >= t, TIMEOUT, "progress")
                serve.kill()
                serve = ServeProcess(arguments, log).start()
            wait_until(lambda: stored_points(store) == total, TIMEOUT, "all records")
            wait_until(lambda: not store.unpublished(), TIMEOUT, "an empty outbox")
            assert serve.terminate() == 0, serve.log()
            with connect() as broker:
                check_outcome(store, broker, topics["verdicts"], series)
    finally:
        serve.kill_if_running()
    assert serve.log().count("processor started") == 3


# The broker's clean-up within seconds instead of minutes, so that it happens in
# every run: a deduplication snapshot moves the verdicts topic's only cursor past
# the ledger the restart closed, and the retention check deletes such a ledger
# unless the topic's retention keeps it.
PROMPT_CLEAN_UP = {
    "brokerDeduplicationSnapshotFrequencyInSeconds": "1",
    "brokerDeduplicationSnapshotIntervalSeconds": "1",
    "retentionCheckIntervalInSeconds": "2",
}


@contextmanager
def restartable_standalone(
    pulsar_jars: Path, folder: Path
) -> Iterator[tuple[PulsarStandalone, BrokerHandle, StateStore]]:
    """A standalone of its own (to restart), with a SQLite store beside it."""
    with (
        PulsarStandalone(
            lib_dir=pulsar_jars, data_dir=folder / "pulsar", config_overrides=PROMPT_CLEAN_UP
        ) as standalone,
        open_store(f"sqlite:///{folder / 'state.db'}") as store,
    ):
        broker = BrokerHandle(standalone.service_url, standalone.admin_url, "standalone")
        yield standalone, broker, store


def test_broker_restart_mid_stream(
    pulsar_jars: Path, tmp_path: Path, unique_topic: Callable[[str], str]
) -> None:
    """The standalone is killed with verdicts in flight and started again on the same
    data folder and ports; the rest of the stream is published after the restart."""
    topics = unique_topics(unique_topic)
    messages, series = history(tests=4, metrics=3, runs=120, seed=33)
    total = sum(len(values) for values in series.values())
    half = len(messages) // 2
    with restartable_standalone(pulsar_jars, tmp_path) as (standalone, broker, store):
        client = make_client(broker)
        try:
            # Without deduplication a verdict whose receipt the killed broker never
            # sent is stored twice when the client re-sends it; without retention the
            # broker deletes the ledger it closed on restarting, verdicts and all, once
            # no cursor holds it.
            prepare_topics_as_serve_does(client, standalone.admin_url, topics)
            # and, as docs/deploy.md asks, on the namespace: a topic policy reaches the
            # topic only some time after the restarted broker loads it
            set_namespace_retention(standalone.admin_url, topics["verdicts"])
            config = processor_config(store.url, topics)
            with running_processor(config, store, client, broker) as runner:
                publish(client, topics["records"], messages[:half])
                runner.wait_until(
                    lambda: any(v.published_at for v in store.verdicts()), "a verdict", TIMEOUT
                )
                # Frozen, the broker confirms none of the verdicts the processor goes on
                # committing from the records it has prefetched: they are in flight when
                # it is killed.
                assert standalone.pid is not None
                os.kill(standalone.pid, signal.SIGSTOP)
                try:
                    runner.wait_until(lambda: bool(store.unpublished()), "verdicts in flight")
                except BaseException:
                    os.kill(standalone.pid, signal.SIGCONT)
                    raise
                standalone.restart(kill=True)
                publish(client, topics["records"], messages[half:])
                runner.wait_until(lambda: stored_points(store) == total, "all records", TIMEOUT)
                runner.wait_until(lambda: not store.unpublished(), "an empty outbox", TIMEOUT)
        finally:
            client.close()
        check_outcome(store, broker, topics["verdicts"], series)


def test_an_idle_processor_says_when_the_broker_goes_and_when_it_is_back(
    pulsar_jars: Path,
    tmp_path: Path,
    unique_topic: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Waiting for records, the processor gets no error from the client while it
    reconnects: the restart is said in two lines (and on /metrics), not passed over."""
    caplog.set_level(logging.INFO, logger="perfwatch")
    topics = unique_topics(unique_topic)
    messages, _ = history(tests=1, metrics=1, runs=20, seed=7)
    with restartable_standalone(pulsar_jars, tmp_path) as (standalone, broker, store):
        client = make_client(broker)
        try:
            config = processor_config(store.url, topics)
            with running_processor(config, store, client, broker) as runner:
                connected = runner.metrics.registry.get_sample_value
                runner.wait_until(lambda: connected("perfwatch_broker_connected") == 1, "start")
                standalone.restart(kill=True)
                publish(client, topics["records"], messages)
                runner.wait_until(lambda: stored_points(store) == len(messages), "the records")
        finally:
            client.close()
    said = [r.getMessage() for r in caplog.records if "connection to the broker" in r.getMessage()]
    assert said == [
        "the connection to the broker was lost; the client reconnects",
        "the connection to the broker is back",
    ]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_schema()


def scrape_processed(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return 0.0
    match = re.search(r"^perfwatch_records_processed_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.postgres
def test_two_processors_share_the_keys_and_survive_losing_one(
    pulsar_broker: BrokerHandle,
    postgres_url: str,
    tmp_path: Path,
    empty_config: Path,
    unique_topic: Callable[[str], str],
) -> None:
    topics = unique_topics(unique_topic)
    subscription = f"sub-{uuid.uuid4().hex[:8]}"
    messages, series = history(tests=16, metrics=3, runs=120, seed=45)
    total = sum(len(values) for values in series.values())
    common = ["--config", str(empty_config)]
    common += serve_arguments(pulsar_broker, topics, subscription, postgres_url)
    ports = {"a": free_port(), "b": free_port()}
    processors = {
        name: ServeProcess(
            [*common, "--name", f"scale-{name}", "--metrics-port", str(port)],
            tmp_path / f"serve-{name}.log",
            env={"PERFWATCH_CONSUMER_ORPHAN_AFTER_S": "3"},
        ).start()
        for name, port in ports.items()
    }
    try:
        for process in processors.values():
            wait_until(lambda p=process: "processor started" in p.log(), TIMEOUT, "start-up")
        publish_thread = threading.Thread(
            target=lambda: _publish_with_own_client(pulsar_broker, topics["records"], messages)
        )
        publish_thread.start()
        with open_store(postgres_url) as store:
            wait_until(lambda: stored_points(store) >= 0.3 * total, TIMEOUT, "progress")
            shares = {name: scrape_processed(port) for name, port in ports.items()}
            assert all(share > 0 for share in shares.values()), shares
            processors["a"].kill()
            publish_thread.join(TIMEOUT)
            wait_until(lambda: stored_points(store) == total, TIMEOUT, "all records on b")
            wait_until(lambda: not store.unpublished(), TIMEOUT, "adoption of a's outbox")
            assert processors["b"].terminate() == 0, processors["b"].log()
            check_outcome(store, pulsar_broker, topics["verdicts"], series)
    finally:
        for process in processors.values():
            process.kill_if_running()


def _publish_with_own_client(broker: BrokerHandle, topic: str, messages: list) -> None:
    client = make_client(broker)
    try:
        publish(client, topic, messages)
    finally:
        client.close()


def set_namespace_retention(admin_url: str, topic: str) -> None:
    """The retention `perfwatch serve` gives the topic, on the topic's namespace."""
    namespace = "/".join(topic.removeprefix("persistent://").split("/")[:2])
    config = TopicsConfig()
    wanted = {
        "retentionTimeInMinutes": config.retention_minutes,
        "retentionSizeInMB": config.retention_mb,
    }
    path = f"/admin/v2/namespaces/{namespace}/retention"
    status, answer = admin_request(admin_url, "POST", path, body=wanted)
    assert status in (200, 204), answer
    wait_until(
        lambda: orjson.loads(admin_request(admin_url, "GET", path)[1]) == wanted,
        60,
        "the namespace's retention",
    )


def prepare_topics_as_serve_does(
    client: pulsar.Client, admin_url: str, topics: dict[str, str]
) -> None:
    """The policies `perfwatch serve` sets at start, once the broker applies them:
    retention on the verdicts and dead-letter topics, deduplication on the verdicts."""
    config = TopicsConfig(**topics)
    client.create_producer(config.verdicts).close()
    prepare_topics(admin_url, config)
    wanted = {
        "retentionTimeInMinutes": config.retention_minutes,
        "retentionSizeInMB": config.retention_mb,
    }
    for topic in (config.verdicts, config.dead_letter):
        wait_until(lambda t=topic: applied(admin_url, t, "retention") == wanted, 60, "retention")
    assert applied(admin_url, config.verdicts, "deduplicationEnabled") is True

    # The topic policy reaches the broker's topic asynchronously. The probes
    # carry no verdict_id property, so readers of verdicts pass over them.
    def resend_is_dropped() -> bool:
        name = f"probe-{uuid.uuid4().hex}"
        producer = client.create_producer(config.verdicts, producer_name=name)
        try:
            producer.send(b"first", sequence_id=1)
            return producer.send(b"again", sequence_id=1).ledger_id() < 0
        finally:
            producer.close()

    wait_until(resend_is_dropped, 60, "deduplication to take effect")


def test_verdict_topic_deduplicates_resent_verdicts(
    pulsar_broker: BrokerHandle, unique_topic: Callable[[str], str]
) -> None:
    if pulsar_broker.admin_url is None:
        pytest.skip("the test broker was given without its admin URL")
    client = make_client(pulsar_broker)
    try:
        prepare_topics_as_serve_does(client, pulsar_broker.admin_url, unique_topics(unique_topic))
    finally:
        client.close()


def test_a_new_state_store_under_an_old_processor_name_still_publishes(
    pulsar_broker: BrokerHandle, tmp_path: Path, unique_topic: Callable[[str], str]
) -> None:
    """With deduplication on, a replaced store must not reuse sequence ids the broker saw."""
    if pulsar_broker.admin_url is None:
        pytest.skip("the test broker was given without its admin URL")
    topics = unique_topics(unique_topic)
    client = make_client(pulsar_broker)
    try:
        client.create_producer(topics["verdicts"]).close()
        assert enable_verdict_deduplication(pulsar_broker.admin_url, topics["verdicts"])
        published = 0
        for attempt in ("old", "new"):
            messages, _ = history(tests=1, metrics=2, runs=80, seed=51)
            topics["records"] = unique_topic(f"records-{attempt}")
            config = processor_config(
                f"sqlite:///{tmp_path / attempt}.db", topics, name="same-name"
            )
            with (
                open_store(config.store.url) as store,
                running_processor(config, store, client, pulsar_broker) as runner,
            ):
                publish(client, topics["records"], messages)
                runner.wait_until(settled(runner.metrics, len(messages)), "all records")
                runner.wait_until(lambda s=store: not s.unpublished(), "an empty outbox")
                queued = len(list(store.verdicts()))
            assert queued > 0
            published += queued
            on_topic = len(verdict_documents(client, topics["verdicts"]))
            assert on_topic == published, f"{attempt} store: verdicts dropped as duplicates"
    finally:
        client.close()


def test_a_topic_in_a_namespace_that_does_not_exist_is_a_usage_error(
    pulsar_broker: BrokerHandle, tmp_path: Path, unique_topic: Callable[[str], str]
) -> None:
    """Neither a broker failure to wait out nor one to report as unreachable: serve and
    publish end at once with exit status 2, naming the topic and what to check."""
    topics = unique_topics(unique_topic)
    missing = f"persistent://public/missing-{uuid.uuid4().hex[:8]}/verdicts"
    (tmp_path / "perfwatch.toml").write_text("")
    arguments = serve_arguments(
        pulsar_broker, {**topics, "verdicts": missing}, "s", f"sqlite:///{tmp_path / 's.db'}"
    )
    config = ["--config", str(tmp_path / "perfwatch.toml"), "--name", "perfwatch-test"]
    served = ServeProcess([*config, *arguments], tmp_path / "serve.log").start()
    assert served.process is not None
    try:
        assert served.process.wait(120) == 2, served.log()
    finally:
        served.kill_if_running()
    assert (
        f"perfwatch serve: error: opening the verdict producer 'perfwatch-test' on {missing}: "
        "the broker has no such topic and does not create it; check that its tenant and "
        "namespace exist"
    ) in served.log()

    records = tmp_path / "records.jsonl"
    records.write_bytes(history(tests=1, metrics=1, runs=2, seed=1)[0][0][1] + b"\n")
    published = CliRunner().invoke(
        main,
        ["publish", str(records), "--pulsar-url", pulsar_broker.service_url,
         "--records-topic", missing],
    )  # fmt: skip
    assert published.exit_code == 2, published.output
    assert (
        f"perfwatch publish: error: topic {missing}: the broker has no such topic and does "
        "not create it; check that its tenant and namespace exist"
    ) in published.stderr
