"""The processor's ports over Apache Pulsar (`pulsar-client`).

The client is made elsewhere (`perfwatch.brokers`) and passed in. A call the
broker does not answer in time, or makes while the connection is down, raises
`BrokerUnavailable`: the processor backs off and tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pulsar

from perfwatch.config import Config
from perfwatch.processor.handlers import RecordHandler
from perfwatch.processor.loop import Processor
from perfwatch.processor.observability import ProcessorMetrics
from perfwatch.processor.ports import (
    BrokerUnavailable,
    InboundMessage,
    PublisherBusy,
    Receipt,
    TopicMissing,
)
from perfwatch.state import StateStore

log = logging.getLogger("perfwatch.processor")

_READ_BACK_TIMEOUT_MS = 10_000
_QUIET_MS = 1_000  # reading back a topic whose end the broker cannot report
_RECEIPT_GRACE_S = 1.0  # for the callbacks of sends a failed flush gave up on


@contextmanager
def _broker_call(doing: str) -> Iterator[None]:
    """Raise a failing client call as BrokerUnavailable, saying what was being done."""
    try:
        yield
    except pulsar.PulsarException as err:
        raise _unavailable(doing, err) from err


def _unavailable(doing: str, err: pulsar.PulsarException) -> BrokerUnavailable:
    """A failed client call as the processor's error, saying what was being done."""
    if isinstance(err, pulsar.TopicNotFound):
        return TopicMissing(f"{doing}: the broker has no such topic and does not create it")
    return BrokerUnavailable(f"{doing}: {type(err).__name__}: {err}")


def pulsar_processor(
    config: Config,
    store: StateStore,
    client: pulsar.Client,
    *,
    subscription_type: pulsar.ConsumerType,
    handlers: Sequence[RecordHandler] | None = None,
    metrics: ProcessorMetrics | None = None,
) -> Processor:
    """A processor on the topics of `config`, through `client`."""
    topics = config.topics
    return Processor(
        config,
        store,
        PulsarRecordSource(client, config, subscription_type),
        PulsarVerdictSink(client, topics.verdicts),
        PulsarDeadLetterSink(client, topics.dead_letter, f"{config.consumer.name}-dead-letter"),
        handlers=handlers,
        metrics=metrics,
    )


class PulsarRecordSource:
    """The processor's subscription to the records topic."""

    def __init__(
        self, client: pulsar.Client, config: Config, subscription_type: pulsar.ConsumerType
    ) -> None:
        self._client = client
        self._topic = config.topics.records
        self._settings = config.consumer
        self._subscription_type = subscription_type
        self._consumer: pulsar.Consumer | None = None

    def open(self) -> None:
        settings = self._settings
        with _broker_call(f"subscribing to {self._topic}"):
            self._consumer = self._client.subscribe(
                self._topic,
                settings.subscription,
                consumer_type=self._subscription_type,
                consumer_name=settings.name,
                receiver_queue_size=settings.receiver_queue_size,
                negative_ack_redelivery_delay_ms=settings.nack_delay_ms,
                initial_position=pulsar.InitialPosition.Earliest,
                batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(
                    settings.batch_size, -1, settings.batch_timeout_ms
                ),
            )
        log.info(
            "subscribed",
            extra={"topic": self._topic, "subscription_type": self._subscription_type.name},
        )

    def receive_batch(self) -> list[InboundMessage]:
        assert self._consumer is not None, "open() first"
        with _broker_call("receiving records"):
            received = self._consumer.batch_receive()
        return [
            InboundMessage(
                payload=message.data(),
                key=message.partition_key(),
                properties=message.properties(),
                redelivery_count=message.redelivery_count(),
                message_id=str(message.message_id()),
                topic=message.topic_name(),
                publish_time_ms=message.publish_timestamp(),
                handle=message,
            )
            for message in received
        ]

    def connected(self) -> bool:
        return self._consumer is not None and self._consumer.is_connected()

    def acknowledge(self, message: InboundMessage) -> None:
        assert self._consumer is not None
        with _broker_call("acknowledging a record"):
            self._consumer.acknowledge(message.handle)

    def negative_acknowledge(self, message: InboundMessage) -> None:
        assert self._consumer is not None
        with _broker_call("negatively acknowledging a record"):
            self._consumer.negative_acknowledge(message.handle)

    def close(self) -> None:
        if self._consumer is None:
            return
        # Kept until closed: a consumer left open would keep the messages it holds.
        with _broker_call("closing the subscription"):
            self._consumer.close()
        self._consumer = None


class PulsarDeadLetterSink:
    """A producer on the dead-letter topic."""

    def __init__(self, client: pulsar.Client, topic: str, producer_name: str) -> None:
        self._client = client
        self._topic = topic
        self._producer_name = producer_name
        self._producer: pulsar.Producer | None = None

    def open(self) -> None:
        with _broker_call(f"opening the dead-letter producer on {self._topic}"):
            self._producer = self._client.create_producer(
                self._topic, producer_name=self._producer_name, block_if_queue_full=True
            )

    def send(self, payload: bytes, *, key: str, properties: Mapping[str, str]) -> None:
        assert self._producer is not None, "open() first"
        options: dict[str, Any] = {"properties": dict(properties)}
        if key:
            options["partition_key"] = key
        with _broker_call("sending a dead letter"):
            self._producer.send(payload, **options)

    def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            _flush_and_close(producer)


def _flush_and_close(producer: pulsar.Producer) -> None:
    """Flush, then close even if the flush failed (what is unsent is sent again later)."""
    try:
        with _broker_call("flushing a producer"):
            producer.flush()
    finally:
        producer.close()


@dataclass
class _InFlight:
    """A verdict handed to the producer; its receipt arrives on the client's thread."""

    receipt: Receipt | None = None


class PulsarVerdictPublisher:
    """A named producer on the verdicts topic, one message per verdict (no batching)."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self._producer = producer
        self._in_flight: list[_InFlight] = []
        self._receipts = threading.Condition()

    def last_sequence_id(self) -> int:
        return int(self._producer.last_sequence_id())

    def send(
        self, payload: bytes, *, key: str, properties: Mapping[str, str], sequence_id: int
    ) -> None:
        item = _InFlight()
        try:
            with _broker_call("sending a verdict"):
                self._producer.send_async(
                    payload,
                    lambda result, message_id: self._on_sent(item, result, message_id),
                    properties=dict(properties),
                    partition_key=key,
                    sequence_id=sequence_id,
                )
        except BrokerUnavailable:
            # The caller sends these verdicts again from its outbox: the receipts of
            # the ones already handed over must not be mistaken for those of later sends.
            self._in_flight = []
            raise
        self._in_flight.append(item)

    def _on_sent(self, item: _InFlight, result: pulsar.Result, message_id: Any) -> None:
        # Runs on the client's I/O thread. A ledger id of -1: dropped as a duplicate.
        ok = result == pulsar.Result.Ok
        stored = ok and message_id.ledger_id() >= 0
        receipt = Receipt(
            ok=ok,
            position=message_id.serialize() if stored else None,
            stored_at=time.time(),
            error="" if ok else str(result),
        )
        with self._receipts:
            item.receipt = receipt
            self._receipts.notify_all()

    def await_receipts(self, timeout_s: float) -> list[Receipt | None]:
        in_flight, self._in_flight = self._in_flight, []
        if not in_flight:
            return []
        try:
            self._producer.flush()
        except pulsar.PulsarException as err:
            # The sends that timed out have their failed receipts already; the
            # ones without a receipt count as not stored.
            log.warning("flushing the verdicts failed", extra={"error": f"{err!r}"})
            timeout_s = min(timeout_s, _RECEIPT_GRACE_S)
        with self._receipts:
            self._receipts.wait_for(
                lambda: all(item.receipt is not None for item in in_flight), timeout_s
            )
            return [item.receipt for item in in_flight]

    def close(self) -> None:
        _flush_and_close(self._producer)


class PulsarVerdictSink:
    """The verdicts topic: named publishers and reading back what one published."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self._client = client
        self._topic = topic

    def open_publisher(self, name: str) -> PulsarVerdictPublisher:
        # On a broker with deduplication, (name, sequence id) makes a re-send a
        # no-op; Pulsar admits one producer per name, fencing a second publisher.
        try:
            producer = self._client.create_producer(
                self._topic, producer_name=name, block_if_queue_full=True, batching_enabled=False
            )
        except pulsar.ProducerBusy:
            raise PublisherBusy(name) from None
        except pulsar.PulsarException as err:
            doing = f"opening the verdict producer {name!r} on {self._topic}"
            raise _unavailable(doing, err) from err
        return PulsarVerdictPublisher(producer)

    def read_back(
        self, name: str, after: bytes | None, wanted: set[str]
    ) -> tuple[set[str], bytes | None]:
        start = pulsar.MessageId.earliest if after is None else pulsar.MessageId.deserialize(after)
        with _broker_call("reading the verdicts back"):
            reader = self._client.create_reader(self._topic, start)
        found: set[str] = set()
        last: bytes | None = None
        try:
            with _broker_call("reading the verdicts back"):
                while True:
                    try:
                        available: bool | None = reader.has_message_available()
                    except pulsar.PulsarException:
                        available = None  # pulsar-lite cannot tell on a topic never written to
                    if available is False:
                        break
                    try:
                        message = reader.read_next(
                            timeout_millis=_READ_BACK_TIMEOUT_MS if available else _QUIET_MS
                        )
                    except pulsar.Timeout:
                        break
                    verdict_id = message.properties().get("verdict_id")
                    if message.producer_name() == name and verdict_id in wanted:
                        found.add(verdict_id)
                        last = message.message_id().serialize()
        finally:
            reader.close()
        return found, last
