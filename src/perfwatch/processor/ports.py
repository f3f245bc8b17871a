"""What the processor needs from a message broker, as small protocols.

The processor (`perfwatch.processor.loop`) talks to the outside only through
these ports: records come from a `RecordSource`, bad input goes to a
`DeadLetterSink`, verdicts go to a `VerdictSink`. `perfwatch.adapters.pulsar`
implements them over Apache Pulsar; `perfwatch.processor.memory` implements
them in memory for tests that crash the processor at every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class PublisherBusy(RuntimeError):
    """Another live connection already publishes under this producer name."""


class BrokerUnavailable(RuntimeError):
    """The broker did not answer in time or the connection is down: the same call may
    succeed later. Any port method may raise it."""


class TopicMissing(BrokerUnavailable):
    """The topic does not exist and the broker does not create it (its tenant or
    namespace is missing, or topics are not created automatically there). At the start
    a configuration mistake; later, a broker's passing state."""


@dataclass(frozen=True)
class InboundMessage:
    """A record message as received; `handle` is the source's own reference to it."""

    payload: bytes
    key: str
    properties: Mapping[str, str]
    redelivery_count: int
    message_id: str
    topic: str
    publish_time_ms: int
    handle: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Receipt:
    """The broker's answer to one verdict sent.

    `position`: where the broker stored it (serialised, for `VerdictSink.read_back`),
    or None when the broker dropped it as a duplicate of one it already stored.
    """

    ok: bool
    position: bytes | None
    stored_at: float
    error: str = ""


class RecordSource(Protocol):
    """A subscription to the records topic.

    A message neither acknowledged nor negatively acknowledged is redelivered
    once the source is closed or its connection is lost; a negatively
    acknowledged one is redelivered later with its redelivery count one higher.
    """

    def open(self) -> None:
        """Subscribe; messages are received from here on."""
        ...

    def receive_batch(self) -> Sequence[InboundMessage]:
        """The next messages (possibly none, after the source's batch timeout)."""
        ...

    def connected(self) -> bool:
        """Whether the subscription is connected to the broker now (False while the
        client reconnects: it receives nothing then, and says nothing)."""
        ...

    def acknowledge(self, message: InboundMessage) -> None: ...

    def negative_acknowledge(self, message: InboundMessage) -> None: ...

    def close(self) -> None: ...


class DeadLetterSink(Protocol):
    """Where messages that will never be processed go, with the reason in properties."""

    def open(self) -> None: ...

    def send(self, payload: bytes, *, key: str, properties: Mapping[str, str]) -> None:
        """Store the message before returning (the source message is acknowledged next)."""
        ...

    def close(self) -> None: ...


class VerdictPublisher(Protocol):
    """One named producer on the verdicts topic.

    With broker deduplication, a message whose sequence id is not above the
    last one stored under the producer's name is dropped (receipt position None).
    """

    def last_sequence_id(self) -> int:
        """The last sequence id the broker stored under this name; -1 if unknown."""
        ...

    def send(
        self, payload: bytes, *, key: str, properties: Mapping[str, str], sequence_id: int
    ) -> None:
        """Hand a verdict over asynchronously; `await_receipts` waits for it."""
        ...

    def await_receipts(self, timeout_s: float) -> list[Receipt | None]:
        """Flush, then the receipts of everything sent since the last call, in send
        order; None for a verdict without a receipt within `timeout_s`."""
        ...

    def close(self) -> None: ...


class VerdictSink(Protocol):
    """The verdicts topic."""

    def open_publisher(self, name: str) -> VerdictPublisher:
        """A producer named `name`; PublisherBusy if a live connection holds the name."""
        ...

    def read_back(
        self, name: str, after: bytes | None, wanted: set[str]
    ) -> tuple[set[str], bytes | None]:
        """Of the `wanted` verdict ids, those producer `name` published after
        position `after` (from the start if None), and the position of the last
        of them found (None if none)."""
        ...
