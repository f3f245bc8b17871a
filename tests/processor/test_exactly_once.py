"""Exactly once in effect, without a broker: the processor over the in-memory ports.

A crash is a `SimulatedCrash` raised by a port wrapper at a chosen call (on
entering it or on returning from it). The crashed processor is abandoned
without `close()`, and its connections are dropped as a broker notices a dead
connection: its unacknowledged records are redelivered and its producer names
are freed. Another processor then runs on the same store, topics and sink.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _processor_support import history, processor_config
from perfwatch.config import Config
from perfwatch.processor.loop import Processor
from perfwatch.processor.memory import (
    MemoryDeadLetterSink,
    MemoryRecordSource,
    MemoryRecordTopic,
    MemoryVerdictPublisher,
    MemoryVerdictSink,
)
from perfwatch.processor.ports import InboundMessage, Receipt
from perfwatch.state import SeriesKey, StateStore, open_store

BAD_RECORDS = (b"{not json", b'{"schema": "perfwatch.record/v1"}')
TOPICS = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letter"}


class SimulatedCrash(BaseException):
    """The process dies here (a BaseException: nothing in the processor catches it)."""


class CrashSwitch:
    """Counts port events (entering and leaving every port call) and raises
    SimulatedCrash at event number `at`, if given; `events` names each one."""

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.events: list[str] = []

    def event(self, name: str) -> None:
        if self.at is not None and len(self.events) == self.at:
            self.events.append(f"{name} (crash)")
            raise SimulatedCrash(name)
        self.events.append(name)

    def call(self, name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.event(f"{name}:enter")
        result = function(*args, **kwargs)
        self.event(f"{name}:exit")
        return result


class Connection:
    """One processor's ports, each call going through `switch`; `drop()` is what
    the broker does when the processor dies: its consumer and producers close."""

    def __init__(self, world: World, switch: CrashSwitch) -> None:
        self.world = world
        self.switch = switch
        self.source = world.records.source()
        self.publishers: list[MemoryVerdictPublisher] = []

    def drop(self) -> None:
        self.source.close()
        for publisher in self.publishers:
            publisher.close()


class CrashingSource:
    def __init__(self, connection: Connection) -> None:
        self._source: MemoryRecordSource = connection.source
        self._switch = connection.switch

    def open(self) -> None:
        self._switch.call("source.open", self._source.open)

    def receive_batch(self) -> list[InboundMessage]:
        batch: list[InboundMessage] = self._switch.call(
            "source.receive", self._source.receive_batch
        )
        return batch

    def connected(self) -> bool:
        return self._source.connected()

    def acknowledge(self, message: InboundMessage) -> None:
        self._switch.call("source.ack", self._source.acknowledge, message)

    def negative_acknowledge(self, message: InboundMessage) -> None:
        self._switch.call("source.nack", self._source.negative_acknowledge, message)

    def close(self) -> None:
        self._switch.call("source.close", self._source.close)


class CrashingPublisher:
    def __init__(self, publisher: MemoryVerdictPublisher, switch: CrashSwitch) -> None:
        self._publisher = publisher
        self._switch = switch

    def last_sequence_id(self) -> int:
        last: int = self._switch.call(
            "publisher.last_sequence_id", self._publisher.last_sequence_id
        )
        return last

    def send(
        self, payload: bytes, *, key: str, properties: Mapping[str, str], sequence_id: int
    ) -> None:
        send = self._publisher.send
        self._switch.call(
            "publisher.send", send, payload, key=key, properties=properties, sequence_id=sequence_id
        )

    def await_receipts(self, timeout_s: float) -> list[Receipt | None]:
        receipts: list[Receipt | None] = self._switch.call(
            "publisher.receipts", self._publisher.await_receipts, timeout_s
        )
        return receipts

    def close(self) -> None:
        self._switch.call("publisher.close", self._publisher.close)


class CrashingVerdictSink:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._sink = connection.world.verdicts
        self._switch = connection.switch

    def open_publisher(self, name: str) -> CrashingPublisher:
        self._switch.event("sink.open_publisher:enter")
        publisher = self._sink.open_publisher(name)
        self._connection.publishers.append(publisher)  # the broker knows it from here on
        self._switch.event("sink.open_publisher:exit")
        return CrashingPublisher(publisher, self._switch)

    def read_back(
        self, name: str, after: bytes | None, wanted: set[str]
    ) -> tuple[set[str], bytes | None]:
        found: tuple[set[str], bytes | None] = self._switch.call(
            "sink.read_back", self._sink.read_back, name, after, wanted
        )
        return found


class CrashingDeadLetters:
    def __init__(self, connection: Connection) -> None:
        self._sink = connection.world.dead_letters
        self._switch = connection.switch

    def open(self) -> None:
        self._switch.call("dead_letters.open", self._sink.open)

    def send(self, payload: bytes, *, key: str, properties: Mapping[str, str]) -> None:
        self._switch.call(
            "dead_letters.send", self._sink.send, payload, key=key, properties=properties
        )

    def close(self) -> None:
        self._switch.call("dead_letters.close", self._sink.close)


@dataclass
class World:
    """What outlives a processor: the store, the topics and the sinks."""

    store: StateStore
    records: MemoryRecordTopic
    verdicts: MemoryVerdictSink
    dead_letters: MemoryDeadLetterSink

    def processor(self, config: Config, switch: CrashSwitch) -> tuple[Processor, Connection]:
        connection = Connection(self, switch)
        processor = Processor(
            config,
            self.store,
            CrashingSource(connection),
            CrashingVerdictSink(connection),
            CrashingDeadLetters(connection),
        )
        return processor, connection

    def run(self, config: Config, switch: CrashSwitch | None = None) -> bool:
        """Run a processor until the records are drained, as `Processor.run` does
        (orphans adopted at start and between batches); True if it crashed."""
        processor, connection = self.processor(config, switch or CrashSwitch())
        try:
            processor.start()
            processor.adopt_orphans()
            while processor.poll_once():
                processor.adopt_orphans()
            processor.close()
        except SimulatedCrash:
            connection.drop()
            return True
        return False


@contextmanager
def world(messages: Sequence[tuple[str, bytes]], *, deduplication: bool) -> Iterator[World]:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{Path(folder) / 'state.db'}")
        try:
            records = MemoryRecordTopic(batch_size=7)
            for key, payload in messages:
                records.publish(payload, key=key)
            yield World(
                store,
                records,
                MemoryVerdictSink(deduplication=deduplication),
                MemoryDeadLetterSink(),
            )
        finally:
            store.close()


def config(name: str = "proc-a", **consumer: Any) -> Config:
    base = processor_config("sqlite:///unused", TOPICS, name=name, **consumer)
    consumer = base.consumer.model_copy(update={"subscription": "records-sub"})
    return base.model_copy(update={"consumer": consumer})


def messages_with_bad_ones(order_seed: int | None = None) -> list[tuple[str, bytes]]:
    """Two tests' records with change points, and two malformed messages among them."""
    messages, _ = history(tests=2, metrics=1, runs=30, seed=7)
    messages = [
        *messages[:10],
        ("bad", BAD_RECORDS[0]),
        *messages[10:40],
        ("bad", BAD_RECORDS[1]),
        *messages[40:],
    ]
    if order_seed is not None:
        random.Random(order_seed).shuffle(messages)
    return messages


@dataclass(frozen=True)
class Outcome:
    verdict_ids: list[str]
    contents: list[bytes]  # the documents without the clock
    points: dict[SeriesKey, int]
    dead_letters: set[bytes]
    acknowledgements: dict[str, int]
    unacknowledged: list[str]
    unpublished: int


def outcome(w: World) -> Outcome:
    documents = [orjson.loads(v.payload) for v in w.verdicts.verdicts]
    return Outcome(
        verdict_ids=[v.properties["verdict_id"] for v in w.verdicts.verdicts],
        contents=[
            orjson.dumps(
                {k: v for k, v in d.items() if k != "emitted_at"}, option=orjson.OPT_SORT_KEYS
            )
            for d in documents
        ],
        points={key: len(w.store.series_points(key)) for key in w.store.series_keys()},
        dead_letters={payload for payload, _, _ in w.dead_letters.messages},
        acknowledgements=dict(w.records.acknowledgements),
        unacknowledged=w.records.unacknowledged(),
        unpublished=len(w.store.unpublished()),
    )


def reference(messages: Sequence[tuple[str, bytes]]) -> Outcome:
    with world(messages, deduplication=True) as w:
        assert not w.run(config())
        return outcome(w)


def check(result: Outcome, expected: Outcome) -> None:
    assert expected.verdict_ids, "the data must produce verdicts"
    assert len(set(result.verdict_ids)) == len(result.verdict_ids), "a verdict id published twice"
    assert len(set(result.contents)) == len(result.contents), "a verdict's content published twice"
    assert sorted(result.verdict_ids) == sorted(expected.verdict_ids), "verdicts lost or new"
    assert result.points == expected.points, "a record's effect applied other than once"
    assert result.dead_letters == set(BAD_RECORDS), "a dead letter lost"
    assert result.unacknowledged == [] and result.unpublished == 0
    assert set(result.acknowledgements.values()) == {1}, "a record acknowledged twice"


MESSAGES = messages_with_bad_ones()


@pytest.fixture(scope="module")
def expected() -> Outcome:
    return reference(MESSAGES)


def port_events(deduplication: bool) -> list[str]:
    """Every port event of one uninterrupted run over MESSAGES."""
    switch = CrashSwitch()
    with world(MESSAGES, deduplication=deduplication) as w:
        w.run(config(), switch)
    return switch.events


def crash_then_recover(
    at: int,
    *,
    deduplication: bool,
    then_at: int | None = None,
    messages: Sequence[tuple[str, bytes]] = MESSAGES,
) -> Outcome:
    """Crash a processor at event `at`; restart it (crashing again at event `then_at`
    of the restart, if given, and restarting once more); the outcome."""
    with world(messages, deduplication=deduplication) as w:
        assert w.run(config(), CrashSwitch(at)), "the run ended before event `at`"
        if then_at is not None:
            w.run(config(), CrashSwitch(then_at))  # it may finish before event `then_at`
        assert not w.run(config())
        return outcome(w)


def event_number(events: Sequence[str], name: str, occurrence: int = 0) -> int:
    return [i for i, event in enumerate(events) if event == name][occurrence]


NAMED_POINTS = {
    # after the store commit, before anything is published
    "committed, not published": "publisher.send:enter",
    # the broker stored the verdicts, the processor never learnt it
    "published, no receipts": "publisher.receipts:enter",
    # receipts in hand, not yet marked published in the store
    "receipts, not marked": "publisher.receipts:exit",
    # marked published, the records not acknowledged
    "marked, not acknowledged": "source.ack:enter",
    # half a batch acknowledged
    "part acknowledged": "source.ack:exit",
    # a dead letter sent, its message not acknowledged
    "dead-lettered, not acknowledged": "dead_letters.send:exit",
}


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "read-back"])
@pytest.mark.parametrize("point", sorted(NAMED_POINTS))
def test_a_crash_at_each_step_loses_and_repeats_nothing(
    point: str, deduplication: bool, expected: Outcome
) -> None:
    events = port_events(deduplication)
    at = event_number(events, NAMED_POINTS[point], occurrence=1)  # the second such event of the run
    check(crash_then_recover(at, deduplication=deduplication), expected)


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "read-back"])
def test_a_crash_at_every_port_event_loses_and_repeats_nothing(
    deduplication: bool, expected: Outcome
) -> None:
    events = port_events(deduplication)
    for at in range(len(events)):
        check(crash_then_recover(at, deduplication=deduplication), expected)


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "read-back"])
def test_a_crash_during_recovery_loses_and_repeats_nothing(
    deduplication: bool, expected: Outcome
) -> None:
    events = port_events(deduplication)
    first = event_number(events, "publisher.receipts:enter", occurrence=1)
    # The restart's own events up to its first receive: opening, last sequence id,
    # read-back, re-sending the outbox and its receipts.
    with world(MESSAGES, deduplication=deduplication) as w:
        assert w.run(config(), CrashSwitch(first))
        restart = CrashSwitch()
        processor, connection = w.processor(config(), restart)
        processor.start()
        connection.drop()
    recovery = restart.events[: event_number(restart.events, "source.open:enter")]
    assert "sink.read_back:enter" in recovery
    for then_at in range(len(recovery)):
        check(crash_then_recover(first, deduplication=deduplication, then_at=then_at), expected)


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "read-back"])
def test_another_processor_adopts_a_dead_ones_outbox(
    deduplication: bool, expected: Outcome
) -> None:
    events = port_events(deduplication)
    at = event_number(events, "publisher.send:enter", occurrence=1)
    with world(MESSAGES, deduplication=deduplication) as w:
        assert w.run(config("proc-a"), CrashSwitch(at))
        assert w.store.unpublished(), "the crash must leave verdicts in the outbox"
        assert not w.run(config("proc-b", orphan_after_s=0.0))
        result = outcome(w)
        adopted = {v.producer for v in w.verdicts.verdicts}
    assert adopted == {"proc-a", "proc-b"}
    check(result, expected)


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "read-back"])
def test_a_crash_during_adoption_loses_and_repeats_nothing(
    deduplication: bool, expected: Outcome
) -> None:
    events = port_events(deduplication)
    at = event_number(events, "publisher.receipts:enter", occurrence=1)
    with world(MESSAGES, deduplication=deduplication) as w:
        assert w.run(config("proc-a"), CrashSwitch(at))
        adopter = CrashSwitch()
        processor, connection = w.processor(config("proc-b", orphan_after_s=0.0), adopter)
        processor.start()
        processor.adopt_orphans()
        connection.drop()
    adoption = adopter.events[event_number(adopter.events, "source.open:exit") :]
    assert "sink.read_back:enter" in adoption
    for then_at in range(len(adoption)):
        with world(MESSAGES, deduplication=deduplication) as w:
            assert w.run(config("proc-a"), CrashSwitch(at))
            b_config = config("proc-b", orphan_after_s=0.0)
            start_events = event_number(adopter.events, "source.open:exit") + 1
            assert w.run(b_config, CrashSwitch(start_events + then_at))
            assert not w.run(config("proc-c", orphan_after_s=0.0))
            check(outcome(w), expected)


def test_a_live_owner_keeps_its_outbox(expected: Outcome) -> None:
    """Adoption waits while the owner is connected (its producer name is taken)."""
    events = port_events(deduplication=False)
    at = event_number(events, "publisher.send:enter", occurrence=1)
    with world(MESSAGES, deduplication=False) as w:
        owner, _ = w.processor(config("proc-a"), CrashSwitch(at))
        owner.start()
        with pytest.raises(SimulatedCrash):
            while owner.poll_once():
                pass
        left = len(w.store.unpublished())
        adopter, _ = w.processor(config("proc-b", orphan_after_s=0.0), CrashSwitch())
        adopter.start()
        adopter.adopt_orphans()
        assert len(w.store.unpublished()) == left > 0


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    order_seed=st.integers(0, 2**32 - 1),
    crash=st.floats(0, 1, exclude_max=True),
    again=st.one_of(st.none(), st.integers(0, 40)),
    deduplication=st.booleans(),
)
def test_any_crash_point_and_record_order(
    order_seed: int, crash: float, again: int | None, deduplication: bool
) -> None:
    messages = messages_with_bad_ones(order_seed)
    expected = reference(messages)
    switch = CrashSwitch()
    with world(messages, deduplication=deduplication) as w:
        w.run(config(), switch)
    at = int(crash * len(switch.events))
    result = crash_then_recover(at, deduplication=deduplication, then_at=again, messages=messages)
    check(result, expected)
