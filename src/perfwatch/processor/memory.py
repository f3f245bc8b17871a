"""The processor's ports in memory: a records topic with one subscription, a
verdicts topic and a dead-letter topic, for tests that need no broker.

They keep the broker semantics the exactly-once argument relies on:

- a message delivered but neither acknowledged nor negatively acknowledged is
  redelivered, with its redelivery count one higher, once the source that
  received it is closed (a crashed processor's connection is closed by the
  test, as a broker notices a dead connection); a negatively acknowledged one
  is redelivered the same way at once;
- one open publisher per producer name on the verdicts topic (PublisherBusy);
- with `deduplication`, a verdict whose sequence id is not above the last one
  stored under its producer name is dropped and `last_sequence_id` reports
  that last one, as Pulsar's broker deduplication does; without it, every send
  is stored and `last_sequence_id` is -1, as on pulsar-lite;
- a verdict is stored when it is sent; its receipt is handed out by
  `await_receipts`;
- a topic whose `unreachable` is set stands for a broker that does not answer:
  its calls raise BrokerUnavailable (a timeout) and what was sent to it is lost;
- a records topic whose `reconnecting` is set stands for a connection the
  client lost and is re-establishing by itself: a source receives nothing,
  raises nothing and is not `connected()`, as with Pulsar's client.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfwatch.processor.ports import BrokerUnavailable, InboundMessage, PublisherBusy, Receipt


def _check_reachable(topic: MemoryRecordTopic | MemoryVerdictSink | MemoryDeadLetterSink) -> None:
    if topic.unreachable:
        raise BrokerUnavailable("TimeOut: the broker did not answer")


if TYPE_CHECKING:
    from perfwatch.config import Config
    from perfwatch.state import StateStore


@dataclass
class _Subscribed:
    """One message of the records topic and where it stands in the subscription."""

    message_id: str
    payload: bytes
    key: str
    properties: dict[str, str]
    publish_time_ms: int
    redelivery_count: int = 0
    holder: MemoryRecordSource | None = None  # the source it is delivered to
    acknowledged: bool = False


class MemoryRecordTopic:
    """A records topic and the one subscription its sources share."""

    def __init__(self, name: str = "records", batch_size: int = 100) -> None:
        self.name = name
        self.batch_size = batch_size
        self._messages: list[_Subscribed] = []
        self.acknowledgements: Counter[str] = Counter()  # message id -> acks received
        self.unreachable = False
        self.reconnecting = False

    def publish(
        self, payload: bytes, key: str = "", properties: Mapping[str, str] | None = None
    ) -> str:
        """Append a message; its message id."""
        message_id = f"{self.name}:{len(self._messages)}"
        self._messages.append(
            _Subscribed(message_id, payload, key, dict(properties or {}), int(time.time() * 1000))
        )
        return message_id

    def source(self) -> MemoryRecordSource:
        return MemoryRecordSource(self)

    def unacknowledged(self) -> list[str]:
        """Ids of the messages not acknowledged yet, in publication order."""
        return [m.message_id for m in self._messages if not m.acknowledged]

    def _deliver(self, source: MemoryRecordSource) -> list[InboundMessage]:
        batch: list[InboundMessage] = []
        for message in self._messages:
            if len(batch) == self.batch_size:
                break
            if message.acknowledged or message.holder is not None:
                continue
            message.holder = source
            batch.append(
                InboundMessage(
                    payload=message.payload,
                    key=message.key,
                    properties=dict(message.properties),
                    redelivery_count=message.redelivery_count,
                    message_id=message.message_id,
                    topic=self.name,
                    publish_time_ms=message.publish_time_ms,
                    handle=message,
                )
            )
        return batch

    def _release(self, message: _Subscribed) -> None:
        message.holder = None
        message.redelivery_count += 1


class MemoryRecordSource:
    """A consumer on a `MemoryRecordTopic`'s subscription."""

    def __init__(self, topic: MemoryRecordTopic) -> None:
        self._topic = topic
        self._open = False

    def open(self) -> None:
        self._open = True

    def receive_batch(self) -> list[InboundMessage]:
        self._check_open()
        _check_reachable(self._topic)
        if self._topic.reconnecting:
            return []
        return self._topic._deliver(self)

    def connected(self) -> bool:
        return self._open and not (self._topic.unreachable or self._topic.reconnecting)

    def acknowledge(self, message: InboundMessage) -> None:
        held = self._held(message)
        held.acknowledged = True
        held.holder = None
        self._topic.acknowledgements[held.message_id] += 1

    def negative_acknowledge(self, message: InboundMessage) -> None:
        held = self._held(message)
        if self._topic.unreachable:
            # As with Pulsar's client: the redelivery request is dropped, and the
            # message stays with this source until it is closed.
            return
        self._topic._release(held)

    def close(self) -> None:
        """Disconnect: what this source holds unacknowledged is redelivered."""
        for message in self._topic._messages:
            if message.holder is self:
                self._topic._release(message)
        self._open = False

    def _held(self, message: InboundMessage) -> _Subscribed:
        self._check_open()
        held = message.handle
        assert isinstance(held, _Subscribed) and held.holder is self, "not delivered here"
        return held

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the source is not open")


@dataclass(frozen=True)
class StoredVerdict:
    """A message on the verdicts topic."""

    position: int
    producer: str
    sequence_id: int
    payload: bytes
    key: str
    properties: Mapping[str, str] = field(default_factory=dict)


class MemoryVerdictPublisher:
    """A named producer on a `MemoryVerdictSink`."""

    def __init__(self, sink: MemoryVerdictSink, name: str) -> None:
        self._sink = sink
        self.name = name
        self._receipts: list[Receipt | None] = []

    def last_sequence_id(self) -> int:
        if not self._sink.deduplication:
            return -1
        return self._sink._last_sequence_ids.get(self.name, -1)

    def send(
        self, payload: bytes, *, key: str, properties: Mapping[str, str], sequence_id: int
    ) -> None:
        self._sink._check_holder(self)
        if self._sink.unreachable:
            self._receipts.append(None)  # lost on the way
            return
        position = self._sink._store(self.name, payload, key, properties, sequence_id)
        stored = None if position is None else str(position).encode()
        self._receipts.append(Receipt(ok=True, position=stored, stored_at=time.time()))

    def await_receipts(self, timeout_s: float) -> list[Receipt | None]:
        receipts, self._receipts = self._receipts, []
        _check_reachable(self._sink)
        return receipts

    def close(self) -> None:
        if self._sink._publishers.get(self.name) is self:
            del self._sink._publishers[self.name]


class MemoryVerdictSink:
    """A verdicts topic: every stored verdict in `verdicts`, in order."""

    def __init__(self, *, deduplication: bool = True) -> None:
        self.deduplication = deduplication
        self.verdicts: list[StoredVerdict] = []
        self.unreachable = False
        self._publishers: dict[str, MemoryVerdictPublisher] = {}
        self._last_sequence_ids: dict[str, int] = {}

    def open_publisher(self, name: str) -> MemoryVerdictPublisher:
        _check_reachable(self)
        if name in self._publishers:
            raise PublisherBusy(name)
        publisher = MemoryVerdictPublisher(self, name)
        self._publishers[name] = publisher
        return publisher

    def read_back(
        self, name: str, after: bytes | None, wanted: set[str]
    ) -> tuple[set[str], bytes | None]:
        _check_reachable(self)
        start = 0 if after is None else int(after) + 1
        found: set[str] = set()
        last: bytes | None = None
        for verdict in self.verdicts[start:]:
            verdict_id = verdict.properties.get("verdict_id")
            if verdict.producer == name and verdict_id in wanted:
                found.add(verdict_id)
                last = str(verdict.position).encode()
        return found, last

    def _check_holder(self, publisher: MemoryVerdictPublisher) -> None:
        if self._publishers.get(publisher.name) is not publisher:
            raise RuntimeError(f"publisher {publisher.name!r} is closed")

    def _store(
        self,
        producer: str,
        payload: bytes,
        key: str,
        properties: Mapping[str, str],
        sequence_id: int,
    ) -> int | None:
        """The stored verdict's position; None when deduplication dropped it."""
        last = self._last_sequence_ids.get(producer, -1)
        if self.deduplication and sequence_id <= last:
            return None
        self._last_sequence_ids[producer] = max(last, sequence_id)
        position = len(self.verdicts)
        self.verdicts.append(
            StoredVerdict(position, producer, sequence_id, payload, key, dict(properties))
        )
        return position


class MemoryDeadLetterSink:
    """A dead-letter topic: every message sent, in `messages`."""

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, str, dict[str, str]]] = []
        self.unreachable = False

    def open(self) -> None:
        """Nothing to connect."""

    def send(self, payload: bytes, *, key: str, properties: Mapping[str, str]) -> None:
        _check_reachable(self)
        self.messages.append((payload, key, dict(properties)))

    def close(self) -> None:
        """Nothing to flush: every send is stored at once."""


def drain(
    config: Config, store: StateStore, records: MemoryRecordTopic, verdicts: MemoryVerdictSink
) -> MemoryDeadLetterSink:
    """Run one processor over `records` until none is left; its dead letters."""
    from perfwatch.processor.loop import Processor

    dead_letters = MemoryDeadLetterSink()
    processor = Processor(config, store, records.source(), verdicts, dead_letters)
    processor.start()
    while processor.poll_once():
        pass
    processor.close()
    return dead_letters
