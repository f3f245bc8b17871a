"""What the embedded broker (pulsar-lite) does and does not do, measured.

The capability tests run on the embedded broker and on real Apache Pulsar (the
reference: a test that fails there is a wrong test, not a broker gap). The gaps
perfwatch works around are recorded here too: Key_Shared (strict xfail on
pulsar-lite), no admin API, and the process-level safety of the embedded broker
(loopback only, orphan recovery, data folder in use).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from _pulsar_helpers import IDLE_MS, drain, drain_concurrently, numbers
from perfwatch.brokers import open_broker
from perfwatch.brokers.admin import ensure_partitioned_topic
from perfwatch.brokers.embedded import (
    CONFIG_NAME,
    PID_NAME,
    DataFolderInUse,
    EmbeddedBroker,
    EmbeddedBrokerError,
    find_running_broker,
)
from perfwatch.brokers.handle import BrokerCapabilityError, BrokerHandle, make_client
from perfwatch.brokers.process import listening_addresses

Topic = Callable[[str], str]
RECEIVE_MS = 10_000  # generous: the machine running the tests may be busy


@pytest.fixture
def client(each_broker: BrokerHandle) -> Iterator[pulsar.Client]:
    client = make_client(each_broker)
    yield client
    client.close()


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """An embedded broker of the test's own, for restarts and misbehaving features."""
    with EmbeddedBroker(tmp_path / "broker") as broker:
        yield broker


def send_numbers(producer: pulsar.Producer, values: range, **send_options: object) -> None:
    for value in values:
        producer.send(str(value).encode(), **send_options)


# --- capabilities perfwatch relies on (both brokers) ------------------------------------


def test_shared_subscription_two_consumers_no_loss_no_duplicates(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic = unique_topic("records")
    consumers = [
        client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
        for _ in range(2)
    ]
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=100, block_if_queue_full=True
    )
    total = 3000
    for value in range(total):
        producer.send_async(str(value).encode(), None)
    producer.flush()

    received = [numbers(messages) for messages in drain_concurrently(consumers)]
    everything = received[0] + received[1]
    assert sorted(everything) == list(range(total))  # nothing lost, nothing twice
    assert all(received), "both consumers of the Shared subscription got messages"


def test_batched_producer_delivers_every_message_in_order_within_batches(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic = unique_topic("batched")
    consumer = client.subscribe(topic, "reader", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=50
    )
    acknowledged: list[pulsar.Result] = []
    for value in range(500):
        producer.send_async(str(value).encode(), lambda result, _id: acknowledged.append(result))
    producer.flush()
    messages = drain(consumer)
    assert acknowledged == [pulsar.Result.Ok] * 500
    assert numbers(messages) == list(range(500))
    # Messages really travelled in batches: several share one entry.
    assert max(message.message_id().batch_index() for message in messages) > 0


def test_unacknowledged_messages_are_redelivered_to_the_next_consumer(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic = unique_topic("redelivery")
    consumer = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
    send_numbers(client.create_producer(topic), range(10))
    for _ in range(10):
        message = consumer.receive(RECEIVE_MS)
        if int(message.data()) % 2 == 0:
            consumer.acknowledge(message)
    consumer.close()  # a processor crash: the odd ones were never acknowledged

    successor = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(numbers(drain(successor))) == [1, 3, 5, 7, 9]


def test_negative_ack_redelivers_with_a_redelivery_count(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic = unique_topic("nack")
    consumer = client.subscribe(
        topic,
        "processors",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=200,
    )
    client.create_producer(topic).send(b"7")
    first = consumer.receive(RECEIVE_MS)
    consumer.negative_acknowledge(first)
    again = consumer.receive(RECEIVE_MS)
    consumer.acknowledge(again)
    assert (again.data(), first.redelivery_count(), again.redelivery_count()) == (b"7", 0, 1)


def test_client_dead_letter_policy_moves_the_message_with_its_properties(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic, dead_letters = unique_topic("records"), unique_topic("dlq")
    dlq_consumer = client.subscribe(
        dead_letters,
        "inspect",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    consumer = client.subscribe(
        topic,
        "processors",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dead_letters
        ),
    )
    client.create_producer(topic).send(b"poison", properties={"reason": "test"})
    attempts = 0
    while True:
        try:
            message = consumer.receive(3000)
        except pulsar.Timeout:
            break
        attempts += 1
        consumer.negative_acknowledge(message)
    dead = dlq_consumer.receive(RECEIVE_MS)
    dlq_consumer.acknowledge(dead)
    assert attempts == 3  # first delivery + max_redeliver_count redeliveries
    assert dead.data() == b"poison"
    assert dead.properties()["reason"] == "test"
    assert dead.properties()["REAL_TOPIC"] == topic


# --- subscription types pulsar-lite gets wrong: real Pulsar passes, pulsar-lite must fail --


def real_pulsar_or_a_gap(reason: str) -> list[Any]:
    """Fixture params: real Pulsar, which must pass, and an embedded broker of the test's
    own, which must fail for `reason`."""
    gap = pytest.mark.xfail(strict=True, reason=reason)
    return ["pulsar_broker", pytest.param("private_embedded", marks=gap)]


@pytest.fixture(
    params=real_pulsar_or_a_gap(
        "pulsar-lite 0.2.0: on Key_Shared a key is never redelivered after its second negative "
        "ack; on Exclusive and Failover a negative ack is never redelivered. perfwatch uses "
        "Shared there"
    )
)
def nack_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerHandle]:
    # Its own broker: a stuck Key_Shared dispatcher keeps a core busy afterwards.
    yield from real_or_private_broker(request, tmp_path)


def real_or_private_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[BrokerHandle]:
    """Real Pulsar, or an embedded broker of the test's own (one a gap may leave stuck)."""
    if request.param == "pulsar_broker":
        yield request.getfixturevalue("pulsar_broker")
        return
    with open_broker(None, data_dir=tmp_path / "broker") as handle:
        yield handle


@pytest.mark.parametrize(
    "consumer_type",
    [pulsar.ConsumerType.KeyShared, pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover],
    ids=["key_shared", "exclusive", "failover"],
)
def test_negative_acks_keep_redelivering(
    nack_broker: BrokerHandle, unique_topic: Topic, consumer_type: pulsar.ConsumerType
) -> None:
    client = make_client(nack_broker)
    try:
        topic = unique_topic("nack")
        consumer = client.subscribe(
            topic,
            "processors",
            consumer_type=consumer_type,
            negative_ack_redelivery_delay_ms=100,
        )
        client.create_producer(topic).send(b"x", partition_key="test-a")
        deliveries = []
        for _ in range(4):  # (Pulsar counts redeliveries only on shared subscriptions)
            message = consumer.receive(3000)
            deliveries.append(message.data())
            consumer.negative_acknowledge(message)
        assert deliveries == [b"x"] * 4
    finally:
        client.close()


@pytest.fixture(
    params=real_pulsar_or_a_gap(
        "pulsar-lite 0.2.0 keeps a consumer whose connection was reset: its messages stay with "
        "it and a new consumer of the same id is refused, until the broker restarts. perfwatch "
        "serve restarts a broker it owns (docs/brokers.md)"
    )
)
def reset_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerHandle]:
    yield from real_or_private_broker(request, tmp_path)


# A consumer in a process of its own, to be stopped and killed for real.
KILLED_CONSUMER = """
import sys, pulsar
client = pulsar.Client(sys.argv[1], logger=pulsar.FileLogger(pulsar.LoggerLevel.Error, "/dev/null"))
consumer = client.subscribe(sys.argv[2], "processors", consumer_type=pulsar.ConsumerType.Shared,
                            initial_position=pulsar.InitialPosition.Earliest)
for count in range(1, 3001):
    consumer.acknowledge(consumer.receive())
    if count == 100:
        print("acknowledged 100", flush=True)
"""


def test_a_reset_consumers_messages_reach_the_next_consumer(
    reset_broker: BrokerHandle, unique_topic: Topic
) -> None:
    """A processor stopped (SIGSTOP) while messages stream to it, then killed: the
    unread messages in its socket make the kernel reset the connection."""
    topic = unique_topic("reset")
    client = make_client(reset_broker, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, block_if_queue_full=True)
        for value in range(3000):
            producer.send_async(str(value).encode(), None)
        producer.flush()
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_CONSUMER, reset_broker.service_url, topic],
            stdout=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"acknowledged 100\n"
        child.send_signal(signal.SIGSTOP)
        time.sleep(1)  # the broker's next messages wait unread in the stopped consumer's socket
        child.kill()
        child.wait()
        successor = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
        received = numbers(drain(successor))
        # the killed consumer's acknowledgements may not all have reached the broker
        assert set(received) >= set(range(100, 3000))
    finally:
        client.close()


def test_reader_reads_from_earliest_and_after_a_saved_message_id(
    client: pulsar.Client, unique_topic: Topic
) -> None:
    topic = unique_topic("verdicts")
    producer = client.create_producer(topic)
    ids = [producer.send(str(value).encode()) for value in range(20)]

    def read_from(start: pulsar.MessageId) -> list[int]:
        reader = client.create_reader(topic, start)
        values = []
        try:
            while True:
                try:
                    values.append(int(reader.read_next(IDLE_MS).data()))
                except pulsar.Timeout:
                    return values
        finally:
            reader.close()

    assert read_from(pulsar.MessageId.earliest) == list(range(20))
    saved = pulsar.MessageId.deserialize(ids[9].serialize())
    assert read_from(saved) == list(range(10, 20))


def test_embedded_handle_never_asks_for_key_shared(embedded_broker: BrokerHandle) -> None:
    assert embedded_broker.kind == "embedded"
    assert not embedded_broker.supports_key_shared
    assert embedded_broker.subscription_type() == pulsar.ConsumerType.Shared


# --- gaps that must fail loudly ------------------------------------------------------


def test_partitioned_topic_on_embedded_broker_is_a_clear_error(
    embedded_broker: BrokerHandle, unique_topic: Topic
) -> None:
    with pytest.raises(BrokerCapabilityError, match="no admin REST API"):
        ensure_partitioned_topic(embedded_broker, unique_topic("partitioned"), 3)


# --- persistence and process safety of the embedded broker ------------------------------


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_messages_and_cursor_survive_a_broker_restart(
    private_broker: EmbeddedBroker, unique_topic: Topic, kill: bool
) -> None:
    topic = unique_topic("durable")
    client = make_client(private_broker.service_url)
    try:
        consumer = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        send_numbers(producer, range(100))
        for _ in range(40):
            consumer.acknowledge(consumer.receive(RECEIVE_MS))
        consumer.close()
        port = private_broker.port

        private_broker.restart(kill=kill)

        assert private_broker.port == port
        # The open client reconnects to the same port; the producer keeps working.
        send_numbers(producer, range(100, 110))
        consumer = client.subscribe(topic, "processors", consumer_type=pulsar.ConsumerType.Shared)
        assert sorted(numbers(drain(consumer))) == list(range(40, 110))
    finally:
        client.close()


def test_embedded_broker_listens_only_on_its_loopback_port(
    private_broker: EmbeddedBroker,
) -> None:
    assert private_broker.pid is not None
    assert listening_addresses(private_broker.pid) == [f"127.0.0.1:{private_broker.port}"]
    config = (private_broker.data_dir / CONFIG_NAME).read_text()
    assert 'log_level = "warn"' in config
    assert "enabled = false" in config


def test_data_folder_in_use_is_refused_and_shared_through_open_broker(
    private_broker: EmbeddedBroker,
) -> None:
    with pytest.raises(EmbeddedBrokerError, match=f"pid {private_broker.pid}"):
        EmbeddedBroker(private_broker.data_dir).start()
    assert find_running_broker(private_broker.data_dir) == private_broker.service_url
    with open_broker(None, data_dir=private_broker.data_dir) as handle:
        assert handle.service_url == private_broker.service_url
    assert private_broker.running  # the sharing side did not stop it


def test_broker_orphaned_by_a_killed_parent_is_ended_on_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "broker"
    parent_script = (
        "import sys, time\n"
        "from perfwatch.brokers.embedded import EmbeddedBroker\n"
        "from perfwatch.brokers.handle import make_client\n"
        "broker = EmbeddedBroker(sys.argv[1]).start()\n"
        "client = make_client(broker.service_url)\n"
        "client.create_producer('kept').send(b'before')\n"
        "client.close()\n"
        "print(broker.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_script, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    orphan_pid = 0
    try:
        assert parent.stdout is not None
        orphan_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
    try:
        assert Path(f"/proc/{orphan_pid}").exists(), "the broker outlived its parent"
        with caplog.at_level(logging.WARNING), EmbeddedBroker(data_dir) as broker:
            assert not Path(f"/proc/{orphan_pid}").exists()
            assert f"orphaned embedded broker pid {orphan_pid}" in caplog.text
            client = make_client(broker.service_url)
            try:
                reader = client.subscribe(
                    "kept",
                    "check",
                    consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=pulsar.InitialPosition.Earliest,
                )
                assert reader.receive(RECEIVE_MS).data() == b"before"
            finally:
                client.close()
        assert not (data_dir / PID_NAME).exists()
    finally:
        if orphan_pid and Path(f"/proc/{orphan_pid}").exists():
            os.kill(orphan_pid, signal.SIGKILL)


def test_a_new_broker_on_the_folder_takes_its_last_port_and_clients_reconnect(
    tmp_path: Path, unique_topic: Topic
) -> None:
    """A restarted `serve` starts a new broker on its folder: on a new port, the `watch`
    and `forward` still running kept retrying the old one and never read again."""
    data_dir = tmp_path / "broker"
    topic = unique_topic("restarted")
    with EmbeddedBroker(data_dir) as first:
        client = make_client(first.service_url)
        port = first.port
    try:
        with EmbeddedBroker(data_dir) as second:
            assert second.port == port
            client.create_producer(topic).send(b"after the restart")
    finally:
        client.close()
    with socket.socket() as occupied:  # a port taken meanwhile: another one, as before
        occupied.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        occupied.bind(("127.0.0.1", port))
        occupied.listen()
        with EmbeddedBroker(data_dir) as third:
            assert third.port != port


def test_busy_port_is_named_before_starting(tmp_path: Path) -> None:
    with socket.socket() as occupied:
        occupied.bind(("127.0.0.1", 0))
        port = occupied.getsockname()[1]
        with pytest.raises(EmbeddedBrokerError, match=f"port {port} .* in use"):
            EmbeddedBroker(tmp_path / "broker", port=port).start()


def test_start_failure_names_the_exit_code_and_shows_the_log(
    private_broker: EmbeddedBroker,
) -> None:
    # A broker the pid file does not know about (e.g. started by hand) holds the lock.
    (private_broker.data_dir / PID_NAME).unlink()
    second = EmbeddedBroker(private_broker.data_dir)
    with pytest.raises(EmbeddedBrokerError, match="exited with code") as failure:
        second.start()
    assert "LOCK" in str(failure.value)  # RocksDB's lock error, from the log tail
    assert not second.running
    assert private_broker.running


def test_a_folder_held_by_a_running_process_is_a_usage_error(
    private_broker: EmbeddedBroker,
) -> None:
    """Like a port in use: the user stops the other process or picks another folder."""
    with pytest.raises(DataFolderInUse, match="is in use by the embedded broker pid"):
        EmbeddedBroker(private_broker.data_dir).start()
    run_cli = "from perfwatch.cli.main import main; main()"
    command = [sys.executable, "-c", run_cli, "dev", "embedded"]
    done = subprocess.run(
        [*command, "--data-dir", str(private_broker.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("perfwatch dev embedded: error: ")
    assert "stop that process or use another data folder" in done.stderr
    assert private_broker.running


def test_dev_embedded_command_serves_until_sigterm(tmp_path: Path) -> None:
    run_cli = "from perfwatch.cli.main import main; main()"
    command = subprocess.Popen(
        [sys.executable, "-c", run_cli, "dev", "embedded", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert command.stdout is not None
        line = command.stdout.readline()
        assert line.startswith("service URL: pulsar://127.0.0.1:"), line
        client = make_client(line.split(": ", 1)[1].strip())
        try:
            client.create_producer("dev-check").send(b"ok")
        finally:
            client.close()
        broker_pid = json.loads((tmp_path / PID_NAME).read_text())["pid"]
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=30) == 0
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert not Path(f"/proc/{broker_pid}").exists()
    assert not (tmp_path / PID_NAME).exists()
