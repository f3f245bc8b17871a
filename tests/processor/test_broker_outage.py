"""Faults at the edges, over the in-memory ports: a broker or a store that stops answering,
a run id sent again with other values, text the store cannot hold. A processor must
outlive a broker outage of any length (it backs off and keeps its outbox) and a store
outage up to `store.outage_timeout_s`, and a record it cannot apply must reach the
dead-letter topic at once with a reason naming the field, not fail in the store until
its redeliveries run out.
"""

from __future__ import annotations

import itertools
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from _processor_support import (
    fresh_postgres_schema,
    history,
    processor_config,
    record_bytes,
    running_in_thread,
    wait_until,
)
from perfwatch.adapters.pulsar_admin import prepare_topics
from perfwatch.config import Config, TopicsConfig
from perfwatch.contract.models import Record, Verdict
from perfwatch.processor.handlers import build_handlers
from perfwatch.processor.loop import FIRST_BACKOFF_S, MAX_BACKOFF_S, Processor
from perfwatch.processor.memory import MemoryDeadLetterSink, MemoryRecordTopic, MemoryVerdictSink
from perfwatch.state import (
    SeriesKey,
    StateStore,
    StoreTransaction,
    StoreUnavailable,
    open_store,
)

TOPICS = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letter"}
BAD_RECORD = b'{"schema": "perfwatch.record/v1"}'


@dataclass
class Ports:
    store: StateStore
    records: MemoryRecordTopic
    verdicts: MemoryVerdictSink
    dead_letters: MemoryDeadLetterSink

    def processor(self, config: Config) -> Processor:
        return Processor(
            config, self.store, self.records.source(), self.verdicts, self.dead_letters
        )

    def unreachable(self, down: bool) -> None:
        self.records.unreachable = self.verdicts.unreachable = down
        self.dead_letters.unreachable = down


@contextmanager
def ports(
    messages: Sequence[tuple[str, bytes]], batch_size: int = 10, store_url: str = ""
) -> Iterator[Ports]:
    """In-memory broker ports holding `messages`, and a store (SQLite in a temporary
    folder unless `store_url` names one)."""
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(store_url or f"sqlite:///{Path(folder) / 'state.db'}")
        try:
            records = MemoryRecordTopic(batch_size=batch_size)
            for key, payload in messages:
                records.publish(payload, key=key)
            yield Ports(store, records, MemoryVerdictSink(), MemoryDeadLetterSink())
        finally:
            store.close()


def config() -> Config:
    return processor_config("sqlite:///unused", TOPICS, name="proc-a")


def outage_messages() -> list[tuple[str, bytes]]:
    messages, _ = history(tests=2, metrics=2, runs=40, seed=11)
    return [*messages, ("bad", BAD_RECORD)]


def drained(p: Ports) -> bool:
    return not p.records.unacknowledged() and not p.store.unpublished()


def process_all(p: Ports) -> None:
    """One processor handles every message on the topic, then stops."""
    processor = p.processor(config())
    processor.start()
    while processor.poll_once():
        pass
    processor.close()
    assert not p.records.unacknowledged()


FAILED = "the broker failed; retrying later"


def test_a_broker_outage_with_verdicts_in_flight_never_stops_the_processor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    messages = outage_messages()
    with ports(messages) as reference:
        with running_in_thread(reference.processor(config())) as runner:
            runner.wait_until(lambda: drained(reference), "the reference run", 60)
        expected_ids = [v.properties["verdict_id"] for v in reference.verdicts.verdicts]
        expected_points = points(reference.store)
    assert expected_ids, "the data must produce verdicts"

    caplog.set_level(logging.INFO, logger="perfwatch")
    half = (len(messages) - 1) // 2
    with ports(messages[:half]) as p:
        p.unreachable(True)  # down from the start: the processor waits for it
        with running_in_thread(p.processor(config())) as runner:
            wait_until(lambda: failures(caplog) >= 2, 30, "two failed starts")
            p.unreachable(False)
            wait_until(lambda: drained(p), 30, "the first half")
            # The verdicts topic stops answering; the records keep coming, so
            # verdicts are in flight when the sends time out.
            p.verdicts.unreachable = True
            before = failures(caplog)
            for key, payload in messages[half:-1]:
                p.records.publish(payload, key=key)
            wait_until(lambda: failures(caplog) >= before + 3, 60, "three failed retries")
            assert p.store.unpublished(), "the outbox keeps what the broker did not confirm"
            assert not runner.errors, runner.errors
            p.verdicts.unreachable = False
            wait_until(lambda: drained(p), 60, "the second half after the outage")
            # The dead-letter topic stops answering when a bad record comes.
            p.dead_letters.unreachable = True
            before = failures(caplog)
            p.records.publish(messages[-1][1], key=messages[-1][0])
            wait_until(lambda: failures(caplog) >= before + 2, 60, "two failed retries")
            p.dead_letters.unreachable = False
            wait_until(lambda: drained(p), 60, "all records")

        ids = [v.properties["verdict_id"] for v in p.verdicts.verdicts]
        assert sorted(ids) == sorted(expected_ids)
        assert len(ids) == len(set(ids)), "a verdict published twice"
        assert points(p.store) == expected_points
        assert set(p.records.acknowledgements.values()) == {1}
        assert [payload for payload, _, _ in p.dead_letters.messages] == [BAD_RECORD]

    logged = [r for r in caplog.records if r.getMessage() == FAILED]
    assert runner.metrics.broker_failures_total() == len(logged)
    waits = [r.__dict__["retry_in_s"] for r in logged]
    assert waits[0] == FIRST_BACKOFF_S and 4 * FIRST_BACKOFF_S in waits
    for previous, wait in itertools.pairwise(waits):
        # doubling after each failure in a row, from the start after a success
        assert wait in (FIRST_BACKOFF_S, min(2 * previous, MAX_BACKOFF_S))
    doing = {r.__dict__["doing"] for r in logged}
    assert doing == {"starting", "handling a batch", "publishing the outbox"}


class OnFirstVerdict:
    """A record handler that calls `act` once, in the middle of the transaction of the
    record that gives the stream's first verdict: a fault with that record in hand."""

    def __init__(self, act: Callable[[], object]) -> None:
        self.act = act
        self.done = False

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        pass

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        if earlier and not self.done:
            self.done = True
            self.act()
        return []


def test_records_whose_negative_acknowledgement_was_lost_are_handled_after_the_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sends time out and the negative acknowledgements of the batch are dropped
    (Pulsar's client drops a redelivery request it cannot send): the messages stay
    with the consumer. Once the broker answers, the processor subscribes again and
    every record is handled once."""
    caplog.set_level(logging.INFO, logger="perfwatch")
    messages = outage_messages()[:-1]
    with ports(messages) as p:
        freeze = OnFirstVerdict(lambda: p.unreachable(True))  # the whole broker stops
        processor = Processor(
            config(),
            p.store,
            p.records.source(),
            p.verdicts,
            p.dead_letters,
            handlers=[*build_handlers(config()), freeze],
        )
        processor.start()
        while not freeze.done:
            processor.poll_once()
        assert p.store.unpublished(), "the batch's verdicts were not confirmed"
        p.unreachable(False)
        for _ in range(len(messages)):
            if drained(p):
                break
            processor.poll_once()
        processor.close()
        assert drained(p), "records held by the old subscription were never redelivered"
        assert set(points(p.store).values()) == {40}
    resubscribed = "subscribed again after the broker failed"
    assert any(r.getMessage() == resubscribed for r in caplog.records)


def points(store: StateStore) -> dict[SeriesKey, int]:
    return {key: len(store.series_points(key)) for key in store.series_keys()}


def failures(caplog: pytest.LogCaptureFixture) -> int:
    return sum(r.getMessage() == FAILED for r in caplog.records)


def test_recovery_at_start_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    messages, _ = history(tests=1, metrics=2, runs=40, seed=3)
    with ports(messages, batch_size=len(messages)) as p:
        first = p.processor(config())
        first.start()
        p.verdicts.unreachable = True  # the verdicts are committed but never confirmed
        assert first.poll_once() == len(messages)
        first.close()
        committed = len(p.store.unpublished())
        assert committed > 0
        p.verdicts.unreachable = False

        caplog.set_level(logging.INFO, logger="perfwatch")
        second = p.processor(config())
        second.start()
        second.close()
        assert not p.store.unpublished()
    [recovered] = [r.__dict__ for r in caplog.records if r.getMessage() == "outbox recovered"]
    assert (recovered["found"], recovered["already_on_topic"], recovered["published"]) == (
        committed,
        0,
        committed,
    )
    assert recovered["left_for_later"] == 0


def test_a_lost_connection_is_logged_and_counted_once_and_its_return_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pulsar's client reconnects by itself, receiving nothing and raising nothing
    meanwhile: without a look at the connection an outage would pass unsaid. A broker
    shutting down lets the client connect once more before it goes: one outage."""
    messages, _ = history(tests=1, metrics=1, runs=10, seed=5)
    with ports(messages[:-1], batch_size=len(messages)) as p:
        processor = p.processor(config())
        sample = processor.metrics.registry.get_sample_value
        assert sample("perfwatch_broker_connected") == 0
        processor.start()
        assert processor.poll_once() == len(messages) - 1
        assert sample("perfwatch_broker_connected") == 1
        caplog.set_level(logging.INFO, logger="perfwatch")
        for reconnecting in (True, True, False, True):  # down, down, briefly up, down
            p.records.reconnecting = reconnecting
            assert processor.poll_once() == 0
            assert sample("perfwatch_broker_connected") == 0
        assert sample("perfwatch_broker_failures_total") == 1
        p.records.reconnecting = False
        p.records.publish(messages[-1][1], key=messages[-1][0])
        assert processor.poll_once() == 1  # receiving: back at once
        assert sample("perfwatch_broker_connected") == 1
        processor.close()
        assert sample("perfwatch_broker_connected") == 0
    said = [r for r in caplog.records if "connection to the broker" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        "the connection to the broker was lost; the client reconnects",
        "the connection to the broker is back",
    ]
    assert said[0].levelno == logging.ERROR
    assert said[1].__dict__["outage_s"] >= 0


def test_a_run_id_sent_again_with_other_values_is_dead_lettered_as_a_conflict() -> None:
    first = record_bytes("api", 1, {"p99": 100.0, "p50": 50.0})
    copy = record_bytes("api", 1, {"p99": 100.0, "p50": 50.0})
    other = record_bytes("api", 1, {"p99": 120.0, "p50": 50.0})
    moved = orjson.loads(first)
    moved["commit"] = "c99999"
    later = record_bytes("api", 2, {"p99": 101.0, "p50": 51.0})
    messages = [("api", first), ("api", copy), ("api", other), ("api", orjson.dumps(moved))]
    with ports([*messages, ("api", later)]) as p:
        process_all(p)
        reasons = [
            (
                props["perfwatch.error.kind"],
                props["perfwatch.error.path"],
                props["perfwatch.error.message"],
            )
            for _, _, props in p.dead_letters.messages
        ]
        assert [payload for payload, _, _ in p.dead_letters.messages] == [
            other,
            orjson.dumps(moved),
        ]
        (kind, path, message), (kind2, path2, message2) = reasons
        assert (kind, path) == ("run_conflict", "$.metrics.p99.value")
        assert "'api#1'" in message and "stored 100.0, now 120.0" in message
        assert (kind2, path2) == ("run_conflict", "$.commit")
        assert "stored 'c00001', now 'c99999'" in message2
        # The first record's values stay; the copy changed nothing; the later run went in.
        for key in p.store.series_keys():
            values = [point.value for point in p.store.series_points(key)]
            assert values == ([100.0, 101.0] if key.metric == "p99" else [50.0, 51.0])


@pytest.mark.parametrize(
    ("field", "path"),
    [("test", "$.test"), ("run_id", "$.run_id"), ("metric", '$.metrics["p\\u000099"]')],
)
def test_a_nul_character_is_dead_lettered_at_once_naming_the_field(field: str, path: str) -> None:
    document = orjson.loads(record_bytes("api", 1, {"p99": 100.0}))
    if field == "metric":
        document["metrics"] = {"p\x0099": document["metrics"]["p99"]}
    else:
        document[field] = document[field] + "\x00x"
    payload = orjson.dumps(document)
    with ports([("api", payload)]) as p:
        processor = p.processor(config())
        processor.start()
        processor.poll_once()
        processor.close()
        [(_, _, props)] = p.dead_letters.messages
        assert props["perfwatch.error.kind"] == "schema"
        assert props["perfwatch.error.path"] == path
        assert "NUL" in props["perfwatch.error.message"]
        assert props["perfwatch.source.redelivery_count"] == "0"
        assert p.store.series_keys() == []


def test_an_admin_api_that_does_not_answer_is_logged_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    topics = TopicsConfig(verdicts="persistent://t/n/verdicts", dead_letter="persistent://t/n/dlq")
    prepare_topics(url, topics)
    warned = [(r.getMessage(), r.__dict__["topic"]) for r in caplog.records]
    assert warned == [
        ("could not create the topic; its policies cannot be set before it exists", topic)
        for topic in (topics.verdicts, topics.verdicts, topics.dead_letter)
    ]


def test_a_metric_given_in_another_unit_is_dead_lettered_and_stores_nothing() -> None:
    def with_unit(run: int, p99: float, unit: str) -> bytes:
        record = orjson.loads(record_bytes("api", run, {"p99": p99, "p50": 50.0}))
        record["metrics"]["p99"]["unit"] = unit
        return orjson.dumps(record)

    moved = with_unit(2, 101_000.0, "us")  # the benchmark now reports microseconds
    messages = [with_unit(1, 100.0, "ms"), moved, with_unit(3, 102.0, "ms")]
    with ports([("api", m) for m in messages], batch_size=len(messages)) as p:
        process_all(p)
        [(payload, _, props)] = p.dead_letters.messages
        assert payload == moved
        assert props["perfwatch.error.kind"] == "unit_conflict"
        assert props["perfwatch.error.path"] == "$.metrics.p99.unit"
        assert "'api#2'" in props["perfwatch.error.message"]
        assert "in 'us'" in props["perfwatch.error.message"]
        # The whole record stays out, its other metric too; the runs around it went in.
        for key in p.store.series_keys():
            values = [point.value for point in p.store.series_points(key)]
            assert values == ([100.0, 102.0] if key.metric == "p99" else [50.0, 50.0])


# --- a state store that stops answering ---------------------------------------------------


class FlakyStore:
    """A store that, while `down`, raises StoreUnavailable on every call, as the
    PostgreSQL store does while its server restarts."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.down = False
        self.refused = 0  # calls refused while down

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                raise StoreUnavailable(LOST)
            return attribute(*args, **kwargs)

        return call


LOST = "postgresql://perfwatch:***@db/perfwatch: server closed the connection unexpectedly"
STORE_FAILED = "the state store failed; waiting for it"


def lose_the_store(store: FlakyStore) -> OnFirstVerdict:
    """The store goes down in the middle of a transaction."""

    def act() -> None:
        store.down = True
        raise StoreUnavailable(LOST)

    return OnFirstVerdict(act)


def faulty_processor(
    p: Ports, store: StateStore | FlakyStore, fault: OnFirstVerdict, outage_timeout_s: float
) -> Processor:
    """A processor on `p`'s broker ports and `store`, with `fault` among its handlers."""
    base = config()
    settings = base.store.model_copy(update={"outage_timeout_s": outage_timeout_s})
    return Processor(
        base.model_copy(update={"store": settings}),
        cast(StateStore, store),
        p.records.source(),
        p.verdicts,
        p.dead_letters,
        handlers=[*build_handlers(base), fault],
    )


def test_a_store_outage_mid_transaction_is_waited_out_and_every_verdict_published_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A PostgreSQL restart used to stop every processor (exit 3) until a supervisor
    started them again. Now the processor lets go of its batch, waits, and starts again
    as a restart would: every record handled once, every verdict published once."""
    messages = outage_messages()[:-1]
    with ports(messages) as reference:
        process_all(reference)
        expected_ids = [v.properties["verdict_id"] for v in reference.verdicts.verdicts]
        expected_points = points(reference.store)
    assert expected_ids, "the data must produce verdicts"

    caplog.set_level(logging.DEBUG, logger="perfwatch")
    with ports(messages) as p:
        flaky = FlakyStore(p.store)
        processor = faulty_processor(p, flaky, lose_the_store(flaky), 60.0)
        with running_in_thread(processor) as runner:
            runner.wait_until(lambda: flaky.refused >= 2, "two refused calls while down")
            assert p.records.unacknowledged(), "the batch in hand waits for the store"
            flaky.down = False
            runner.wait_until(lambda: drained(p), "every record after the outage", 60)

        ids = [v.properties["verdict_id"] for v in p.verdicts.verdicts]
        assert sorted(ids) == sorted(expected_ids)
        assert len(ids) == len(set(ids)), "a verdict published twice"
        assert points(p.store) == expected_points
        assert set(p.records.acknowledgements.values()) == {1}
        assert not p.dead_letters.messages, "an outage dead-letters no record"
    assert runner.metrics.store_failures_total() == 1
    said = [r.getMessage() for r in caplog.records]
    assert said.count(STORE_FAILED) == 1, "one error line per outage"
    assert "the state store still fails" in said  # each retry at debug level
    assert said.count("the state store answers again") == 1


def test_a_store_that_stays_away_stops_the_processor_after_the_timeout() -> None:
    with ports(outage_messages()[:-1]) as p:
        flaky = FlakyStore(p.store)
        processor = faulty_processor(p, flaky, lose_the_store(flaky), 0.5)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"unexpectedly \(for 0\.5 s\)"):
            processor.run(threading.Event())
        assert time.monotonic() - started < 30
        assert flaky.refused >= 1, "the store was asked again before giving up"
        assert p.records.unacknowledged() and not p.dead_letters.messages


def test_an_outage_timeout_of_zero_stops_at_once() -> None:
    with ports(outage_messages()[:-1]) as p:
        flaky = FlakyStore(p.store)
        processor = faulty_processor(p, flaky, lose_the_store(flaky), 0.0)
        with pytest.raises(StoreUnavailable) as raised:
            processor.run(threading.Event())
        assert str(raised.value) == LOST
        assert flaky.refused == 0, "no retry"
        assert p.records.unacknowledged() and not p.dead_letters.messages


def terminate_the_backend(store: StateStore, admin_url: str) -> OnFirstVerdict:
    """PostgreSQL ends the store's connection in the middle of a transaction."""

    def act() -> None:
        import psycopg

        backend = store._connection.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))

    return OnFirstVerdict(act)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_schema()


@pytest.mark.postgres
def test_a_postgresql_connection_ended_mid_transaction_is_waited_out(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the processor's connection in the middle of a transaction (as
    a restart or a failover does): the processor connects again and goes on, and every
    record is handled and every verdict published once."""
    messages = outage_messages()[:-1]
    with ports(messages) as reference:
        process_all(reference)
        expected_ids = sorted(v.properties["verdict_id"] for v in reference.verdicts.verdicts)
        expected_points = points(reference.store)

    caplog.set_level(logging.INFO, logger="perfwatch")
    with ports(messages, store_url=postgres_url) as p:
        terminate = terminate_the_backend(p.store, postgres_url)
        processor = faulty_processor(p, p.store, terminate, 60.0)
        with running_in_thread(processor) as runner:
            runner.wait_until(lambda: terminate.done and drained(p), "every record", 60)
        assert sorted(v.properties["verdict_id"] for v in p.verdicts.verdicts) == expected_ids
        assert points(p.store) == expected_points
        assert set(p.records.acknowledgements.values()) == {1}
        assert not p.dead_letters.messages
    assert runner.metrics.store_failures_total() == 1
    said = [r.getMessage() for r in caplog.records]
    assert said.count(STORE_FAILED) == 1
    assert said.count("the state store answers again") == 1
