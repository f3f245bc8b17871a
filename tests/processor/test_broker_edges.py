"""The processor at the edges of a real Pulsar standalone: a broker frozen for a
minute with verdict sends in flight, and the retention of what it published.

One standalone for the module, whose retention check runs every few seconds
(the default is every two minutes) so that a message the broker may delete is
deleted while the test watches.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from _processor_support import (
    batch_beliefs,
    beliefs_from_verdicts,
    history,
    processor_config,
    publish,
    read_in_order,
    running_processor,
    stored_points,
    unique_topics,
    verdict_documents,
    wait_until,
    without_empty,
)
from _verdict_samples import verdict
from perfwatch.adapters.pulsar_admin import prepare_topics
from perfwatch.brokers.admin import admin_request
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.brokers.standalone import PulsarStandalone
from perfwatch.cli.main import main
from perfwatch.config import TopicsConfig
from perfwatch.contract.codec import dumps
from perfwatch.state import open_store

pytestmark = [pytest.mark.slow, pytest.mark.pulsar]

RETENTION_CHECK_S = 2
OUTAGE_S = 60
TIMEOUT = 300.0


@pytest.fixture(scope="module")
def standalone(pulsar_jars: Path) -> Iterator[PulsarStandalone]:
    overrides = {"retentionCheckIntervalInSeconds": str(RETENTION_CHECK_S)}
    with PulsarStandalone(lib_dir=pulsar_jars, config_overrides=overrides) as broker:
        yield broker


@pytest.fixture
def broker(standalone: PulsarStandalone) -> BrokerHandle:
    return BrokerHandle(standalone.service_url, standalone.admin_url, "standalone")


def admin_path(topic: str, suffix: str = "") -> str:
    return "/admin/v2/" + topic.replace("://", "/", 1) + suffix


def admin_json(broker: BrokerHandle, method: str, path: str) -> object:
    assert broker.admin_url is not None
    status, body = admin_request(broker.admin_url, method, path)
    assert status in (200, 204), (status, body)
    return orjson.loads(body) if body else None


def test_a_frozen_broker_with_verdicts_in_flight_stops_no_processor(
    standalone: PulsarStandalone,
    broker: BrokerHandle,
    tmp_path: Path,
    unique_topic: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGSTOP for a minute: sends time out (the client gives up after 30 s), the
    processor backs off and resumes; every record counts once, no verdict twice."""
    caplog.set_level(logging.INFO, logger="perfwatch")
    topics = unique_topics(unique_topic)
    messages, series = history(tests=4, metrics=3, runs=150, seed=61)
    total = sum(len(values) for values in series.values())
    config = processor_config(f"sqlite:///{tmp_path / 'state.db'}", topics)
    prepare_topics(standalone.admin_url, config.topics)
    client = make_client(broker)
    try:
        with (
            open_store(config.store.url) as store,
            running_processor(config, store, client, broker) as runner,
        ):
            publish(client, topics["records"], messages)
            runner.wait_until(lambda: stored_points(store) >= 0.2 * total, "progress", TIMEOUT)
            assert standalone.pid is not None
            os.kill(standalone.pid, signal.SIGSTOP)
            try:
                time.sleep(OUTAGE_S)
            finally:
                os.kill(standalone.pid, signal.SIGCONT)
            runner.wait_until(lambda: stored_points(store) == total, "all records", TIMEOUT)
            runner.wait_until(lambda: not store.unpublished(), "an empty outbox", TIMEOUT)
            expected = without_empty(batch_beliefs(store))
            for key in store.series_keys():
                assert [p.value for p in store.series_points(key)] == series[(key.test, key.metric)]
        documents = verdict_documents(client, topics["verdicts"])
    finally:
        client.close()
    failures = [r for r in caplog.records if r.getMessage() == "the broker failed; retrying later"]
    assert failures, "the outage should have been met and logged"
    ids = [document["verdict_id"] for document in documents]
    assert len(ids) == len(set(ids)), "a verdict id was published twice"
    assert expected and without_empty(beliefs_from_verdicts(documents)) == expected


def test_retention_keeps_verdicts_and_dead_letters_the_broker_would_delete(
    broker: BrokerHandle, unique_topic: Callable[[str], str]
) -> None:
    """A fresh verdicts topic gets deduplication and retention; a topic without a
    retention policy (the control) loses its first ledger once the topic moved to a
    new one, the verdicts and dead-letter topics keep theirs."""
    assert broker.admin_url is not None
    topics = TopicsConfig(
        verdicts=unique_topic("verdicts"),
        dead_letter=unique_topic("dlq"),
        retention_minutes=60,
        retention_mb=64,
    )
    control = unique_topic("control")
    prepare_topics(broker.admin_url, topics)
    wanted = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 64}
    for topic in (topics.verdicts, topics.dead_letter):
        path = admin_path(topic, "/retention?applied=true")
        wait_until(lambda p=path: admin_json(broker, "GET", p) == wanted, 60, "retention")
    dedup = admin_path(topics.verdicts, "/deduplicationEnabled?applied=true")
    wait_until(lambda: admin_json(broker, "GET", dedup) is True, 60, "deduplication")

    document = verdict()
    client = make_client(broker)
    try:
        for topic, payload in (
            (topics.verdicts, dumps(document)),
            (topics.dead_letter, b"{not json"),
            (control, b"first"),
        ):
            producer = client.create_producer(topic)
            producer.send(payload)
            producer.close()
            # A closed ledger is what the retention check deletes: unload the topic
            # so its next use opens a new one, then use it.
            admin_json(broker, "PUT", admin_path(topic, "/unload"))
            producer = client.create_producer(topic)
            producer.send(b"second" if topic == control else payload)
            producer.close()
        wait_until(
            lambda: len(read_in_order(client, control)) < 2,
            20 * RETENTION_CHECK_S + 30,
            "the retention check to delete the control topic's first ledger",
        )
        assert len(read_in_order(client, topics.dead_letter)) == 2
        assert len(read_in_order(client, topics.verdicts)) == 2
    finally:
        client.close()

    watched = CliRunner().invoke(
        main,
        [
            "watch",
            "--pulsar-url",
            broker.service_url,
            "--verdicts-topic",
            topics.verdicts,
            "--from-earliest",
            "--idle-timeout",
            "2",
            "--format",
            "json",
        ],
    )
    assert watched.exit_code == 0, watched.output
    assert [orjson.loads(line) for line in watched.stdout_bytes.splitlines()] == [document]
