"""The real Apache Pulsar side: the standalone launcher and what perfwatch needs from Pulsar.

The launcher tests start their own standalone from the Maven jars (restart on the
same data after an orderly stop); the others run on the `pulsar_broker`
fixture, whichever kind of real Pulsar it is.
"""

from __future__ import annotations

import socket
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from click.testing import CliRunner

from _pulsar_helpers import drain, drain_concurrently, numbers
from perfwatch.brokers.admin import ensure_partitioned_topic, readiness_problem
from perfwatch.brokers.handle import BrokerError, BrokerHandle, make_client
from perfwatch.brokers.process import is_loopback, listening_addresses
from perfwatch.brokers.standalone import (
    PulsarStandalone,
    StandaloneError,
    fetch_jars,
    jars_ready,
    render_config,
)
from perfwatch.cli.main import main

Topic = Callable[[str], str]


# --- launcher pieces that need no running broker --------------------------------------


def test_render_config_replaces_existing_keys_and_appends_new_ones() -> None:
    template = "# brokerServicePort=1\nbrokerServicePort=6650\nclusterName=standalone\n"
    rendered = render_config(template, {"brokerServicePort": "7001", "allowEphemeralPorts": "true"})
    assert rendered.splitlines() == [
        "# brokerServicePort=1",
        "brokerServicePort=7001",
        "clusterName=standalone",
        "allowEphemeralPorts=true",
    ]


def test_fetch_is_skipped_when_the_cache_marker_matches(tmp_path: Path) -> None:
    assert not jars_ready(tmp_path)
    (tmp_path / "lib.complete").write_text("outdated\n")
    assert not jars_ready(tmp_path)
    with pytest.raises(StandaloneError, match=r"Maven \(no-such-mvn\) not found"):
        fetch_jars(tmp_path, mvn="no-such-mvn")


def test_cached_fetch_does_not_run_maven(pulsar_jars: Path) -> None:
    assert fetch_jars(pulsar_jars.parent, mvn="no-such-mvn") == pulsar_jars
    result = CliRunner().invoke(main, ["dev", "pulsar", "--fetch-only"])
    assert result.exit_code == 0, result.output
    assert f"Jars ready in {pulsar_jars}" in result.output


@pytest.fixture
def unusable_lib(tmp_path: Path) -> Path:
    """A lib folder whose broker jar is empty: java starts and exits at once."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "pulsar-broker-0.jar").write_bytes(b"")
    return lib


def test_start_failure_shows_the_log_tail_and_cleans_up(
    unusable_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the fresh data folder goes
    standalone = PulsarStandalone(lib_dir=unusable_lib, startup_timeout=60)
    with pytest.raises(StandaloneError, match="exited with code 1") as failure:
        standalone.start()
    assert "Could not find or load main class" in str(failure.value)  # java's, from the log
    assert not standalone.running
    assert not list(tmp_path.glob("perfwatch-pulsar-*")), "the temporary data folder is removed"


def test_busy_port_is_named_before_starting(unusable_lib: Path, tmp_path: Path) -> None:
    with socket.socket() as occupied:
        occupied.bind(("127.0.0.1", 0))
        port = occupied.getsockname()[1]
        standalone = PulsarStandalone(lib_dir=unusable_lib, data_dir=tmp_path, broker_port=port)
        with pytest.raises(StandaloneError, match=f"port.*{port}.* in use"):
            standalone.start()


def test_a_flapping_bookie_registration_is_recognised_after_the_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("perfwatch.brokers.standalone.FLAP_CHECK_S", 0.0)
    standalone = PulsarStandalone(data_dir=tmp_path)
    standalone._prepare_run_dir()
    standalone.log_file.parent.mkdir(parents=True)
    line = (
        "2026-11-29T16:49:08,758 INFO  [metadata-store-1-1] o.a.p.m.c.i.ResourceLockImpl - "
        "Lock on resource /ledgers/available/127.0.0.1:37083 was invalidated. state Valid\n"
    )
    earlier_run = line * 500
    standalone.log_file.write_text(earlier_run + line * 5)
    offset = len(earlier_run.encode())
    assert not standalone._bookie_registration_flaps(offset)
    with standalone.log_file.open("a") as log:
        log.write(line * 300)
    assert standalone._bookie_registration_flaps(offset)


def test_missing_jars_point_to_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(StandaloneError, match="perfwatch dev pulsar --fetch-only"):
        PulsarStandalone(lib_dir=tmp_path).start()


# --- the real standalone: start, restart on the same data, stop ----------------------------


def test_restart_on_same_data_keeps_messages_cursor_and_ports(
    pulsar_jars: Path, tmp_path: Path
) -> None:
    topic = "persistent://public/default/durable"

    def connect(standalone: PulsarStandalone) -> tuple[pulsar.Client, pulsar.Consumer]:
        client = make_client(standalone.service_url)
        consumer = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
        return client, consumer

    with PulsarStandalone(lib_dir=pulsar_jars, data_dir=tmp_path / "data") as standalone:
        assert readiness_problem(standalone.admin_url) is None
        assert standalone.pid is not None
        addresses = listening_addresses(standalone.pid)
        assert len(addresses) == 3, addresses  # broker, web, bookie
        assert all(is_loopback(address) for address in addresses), addresses
        urls = (standalone.service_url, standalone.admin_url)

        client, consumer = connect(standalone)
        producer = client.create_producer(topic)
        for value in range(50):
            producer.send(str(value).encode())
        for _ in range(20):
            consumer.acknowledge(consumer.receive(10_000))
        client.close()

        standalone.restart()  # orderly: unload, then SIGTERM
        assert (standalone.service_url, standalone.admin_url) == urls
        client, consumer = connect(standalone)
        producer = client.create_producer(topic)
        for value in range(50, 60):
            producer.send(str(value).encode())
        assert sorted(numbers(drain(consumer))) == list(range(20, 60))
        client.close()
        pid = standalone.pid
    assert not standalone.running
    assert not Path(f"/proc/{pid}").exists()
    assert (tmp_path / "data" / "ports.json").is_file()


# --- what perfwatch needs from real Pulsar --------------------------------------------------


def test_real_pulsar_handle_asks_for_key_shared(pulsar_broker: BrokerHandle) -> None:
    assert pulsar_broker.kind in {"standalone", "container", "external"}
    assert pulsar_broker.supports_key_shared
    assert pulsar_broker.subscription_type() == pulsar.ConsumerType.KeyShared


def test_partitioned_topic_is_created_once_and_checked(
    pulsar_broker: BrokerHandle, unique_topic: Topic
) -> None:
    if pulsar_broker.admin_url is None:
        pytest.fail(
            "the real Pulsar test broker needs an admin URL (PERFWATCH_TEST_PULSAR_ADMIN_URL)"
        )
    topic = unique_topic("records")
    assert ensure_partitioned_topic(pulsar_broker, topic, 3) == topic
    assert ensure_partitioned_topic(pulsar_broker, topic, 3) == topic  # idempotent
    with pytest.raises(BrokerError, match="already exists with 3 partitions, not 4"):
        ensure_partitioned_topic(pulsar_broker, topic, 4)

    client = make_client(pulsar_broker)
    try:
        assert len(client.get_topic_partitions(topic)) == 3
        plain = unique_topic("plain")
        client.create_producer(plain).send(b"x")  # auto-created, not partitioned
        with pytest.raises(BrokerError, match="it is not partitioned"):
            ensure_partitioned_topic(pulsar_broker, plain, 2)
    finally:
        client.close()


def test_key_shared_spreads_keys_and_keeps_each_key_in_order(
    pulsar_broker: BrokerHandle, unique_topic: Topic
) -> None:
    topic = unique_topic("records")
    ensure_partitioned_topic(pulsar_broker, topic, 2)
    client = make_client(pulsar_broker)
    try:
        consumers = [
            client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.KeyShared)
            for _ in range(2)
        ]
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_type=pulsar.BatchingType.KeyBased,
            block_if_queue_full=True,  # otherwise send_async drops past 1000 pending
        )
        keys = [f"test-{index}" for index in range(20)]
        for value in range(2000):
            producer.send_async(str(value).encode(), None, partition_key=keys[value % 20])
        producer.flush()

        received = drain_concurrently(consumers)
    finally:
        client.close()
    seen: list[dict[str, list[int]]] = [defaultdict(list), defaultdict(list)]
    for index, messages in enumerate(received):
        for message in messages:
            seen[index][message.partition_key()].append(int(message.data()))
    assert not set(seen[0]) & set(seen[1]), "a key went to both consumers"
    assert seen[0] and seen[1], "both consumers got keys"
    per_key = {**seen[0], **seen[1]}
    assert sorted(per_key) == sorted(keys)
    for key, values in per_key.items():
        expected = [value for value in range(2000) if keys[value % 20] == key]
        assert values == expected, f"key {key} out of order or incomplete"
