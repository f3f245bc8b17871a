"""The stream processor: receive a batch -> validate -> store -> detect -> publish -> ack.

The handlers' state changes for a batch of records and the verdicts they produce
are committed in one store transaction (the verdicts into an outbox; if that
transaction fails, the batch's records are handled one transaction each), and
the outbox relay publishes them right away. The processor acknowledges the batch
only once the broker's receipts are in and recorded. docs/processor.md gives the
argument for why this yields every verdict exactly once in effect across crashes
of the processor, the broker and redelivery.

Bad input (undecodable, invalid JSON, schema, non-finite, oversized, unknown
version) goes to the dead-letter sink at once with the reason in properties. A
valid record whose processing raises is negatively acknowledged (redelivered
later) and dead-lettered with its traceback once its redelivery count reaches
`max_redeliveries`. A record whose run id is stored already with other values is
dead-lettered as a run conflict naming both, and one that gives a metric in
another unit than its series' as a unit conflict. No record is dead-lettered for
an outage of the store: a store that stops answering makes the processor let go
of the broker as a stopped processor would (its unacknowledged records go back
to the subscription), wait for the store (doubling the wait up to
`MAX_BACKOFF_S`) and start again once it answers, as a restart would; after
`store.outage_timeout_s` it stops. A broker that cannot be reached never stops
it: the batch in hand is negatively acknowledged, its verdicts stay in the
outbox, and the processor waits (doubling the wait up to `MAX_BACKOFF_S`) before
trying again. Once the broker answers again the processor subscribes anew, as a
restart would: a negative acknowledgement made while the connection was down can
be lost, and its message would otherwise stay with the old consumer.

The processor reaches the broker only through the ports of
`perfwatch.processor.ports`.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from perfwatch.config import Config
from perfwatch.contract.codec import dumps, parse_record
from perfwatch.contract.models import Record, Verdict
from perfwatch.contract.validation import RecordError
from perfwatch.processor.handlers import RecordHandler, build_handlers
from perfwatch.processor.metric_info import UnitConflict
from perfwatch.processor.observability import ProcessorMetrics
from perfwatch.processor.outbox import OutboxRelay, PublishError
from perfwatch.processor.ports import (
    BrokerUnavailable,
    DeadLetterSink,
    InboundMessage,
    PublisherBusy,
    RecordSource,
    TopicMissing,
    VerdictPublisher,
    VerdictSink,
)
from perfwatch.state import OutboxEntry, RunConflict, SeriesKey, StateStore, StoreUnavailable

log = logging.getLogger("perfwatch.processor")

PROCESSING_ERROR = "processing_error"
RUN_CONFLICT = "run_conflict"
UNIT_CONFLICT = "unit_conflict"
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
_MAX_PROPERTY_CHARS = 8192
_HOUSEKEEPING_INTERVAL_S = 5.0


# How long a connection must hold, with nothing received, to count as back.
RECONNECTED_AFTER_S = 5.0


class ProcessorError(RuntimeError):
    """The processor cannot start or continue as configured."""


def _doubled(wait: float) -> float:
    """The wait after one more failure in a row: twice the last, from FIRST_BACKOFF_S up to
    MAX_BACKOFF_S."""
    return min(max(2 * wait, FIRST_BACKOFF_S), MAX_BACKOFF_S)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_PROPERTY_CHARS else text[: _MAX_PROPERTY_CHARS - 3] + "..."


class Processor:
    """One consumer of the records. `run(stop)` until `stop` is set."""

    def __init__(
        self,
        config: Config,
        store: StateStore,
        records: RecordSource,
        verdicts: VerdictSink,
        dead_letters: DeadLetterSink,
        *,
        handlers: Sequence[RecordHandler] | None = None,
        metrics: ProcessorMetrics | None = None,
    ) -> None:
        self.config = config
        self.name = config.consumer.name
        self.store = store
        self.metrics = metrics or ProcessorMetrics.create()
        self.outbox = OutboxRelay(store, verdicts, self.metrics)
        self._records = records
        self._dead_letters = dead_letters
        self._handlers = list(handlers) if handlers is not None else build_handlers(config)
        self._publisher: VerdictPublisher | None = None
        self._next_housekeeping = 0.0
        self._outbox_dirty = False  # a publication failed: the outbox has leftovers
        self._backoff_s = 0.0  # the current wait after a broker failure (0: none)
        self._resume_at = 0.0  # monotonic time before which the broker is left alone
        self._settled: set[str] = set()  # ids of the batch's messages acked or nacked
        self._subscribe_again = False  # a broker failure since the last subscription
        self._lost_at: float | None = None  # when the subscription's connection was lost
        self._back_at: float | None = None  # since when it has been connected again

    # --- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Open the verdict publisher, publish what a previous run left in the outbox,
        open the dead-letter sink and subscribe."""
        try:
            self._publisher = self.outbox.open(self.name)
        except PublisherBusy:
            raise ProcessorError(
                f"another processor named {self.name!r} is connected to "
                f"{self.config.topics.verdicts}; give each processor its own consumer name"
            ) from None
        self._outbox_dirty = True  # what recovery could not publish goes first
        self._dead_letters.open()
        self._records.open()
        self._subscribe_again = False
        self.metrics.broker_connected.set(1)
        log.info(
            "processor started",
            extra={
                "consumer": self.name,
                "topic": self.config.topics.records,
                "subscription": self.config.consumer.subscription,
                "store": self.store.url.split("@")[-1],
            },
        )

    def run(self, stop: threading.Event) -> None:
        """Process batches until `stop` is set, then finish the batch in hand and close.

        A broker that cannot be reached at the start is waited for, as during the run;
        a store that stops answering during the run, up to `store.outage_timeout_s`."""
        if not self._start_when_the_broker_answers(stop):
            return
        try:
            while not stop.is_set():
                wait = self._resume_at - time.monotonic()
                if wait > 0:
                    stop.wait(wait)
                    continue
                try:
                    self.poll_once()
                    self._housekeeping()
                except StoreUnavailable as err:
                    if not self._wait_for_the_store(err, stop):
                        return
        finally:
            self.close()

    def close(self) -> None:
        """Close the publishers and the source (unacknowledged messages are redelivered)."""
        self._close_ports()
        log.info("processor stopped", extra={"consumer": self.name})

    def _start_when_the_broker_answers(self, stop: threading.Event) -> bool:
        """`start`, retried while the broker does not answer; False if stopped first."""
        while not stop.is_set():
            try:
                self.start()
                return True
            except TopicMissing as err:
                self._close_ports()
                raise ProcessorError(
                    f"{err}; check that its tenant and namespace exist (docs/deploy.md, "
                    '"Topics, retention and subscriptions")'
                ) from None
            except BrokerUnavailable as err:
                self._close_ports()
                self._back_off("starting", err)
                stop.wait(self._backoff_s)
        return False

    def _wait_for_the_store(self, failure: StoreUnavailable, stop: threading.Event) -> bool:
        """The store stopped answering: let go of the broker, wait for the store and start
        again once it answers, as a restart would (the outbox is settled again, the batch
        in hand is redelivered). False if stopped first; raises the store's last error
        once it has not answered for `store.outage_timeout_s`."""
        self.metrics.store_failures.inc()
        timeout = self.config.store.outage_timeout_s
        if timeout <= 0:
            raise failure
        log.error(
            "the state store failed; waiting for it",
            extra={"error": str(failure), "stop_after_s": timeout},
        )
        self._close_ports()  # unacknowledged records go back to the subscription
        began = time.monotonic()
        delay = 0.0
        while True:
            delay = _doubled(delay)
            stop.wait(min(delay, max(began + timeout - time.monotonic(), 0.0)))
            if stop.is_set():
                return False
            try:
                self.store.series_count()
                started = self._start_when_the_broker_answers(stop)
            except StoreUnavailable as err:
                if time.monotonic() - began >= timeout:
                    raise StoreUnavailable(f"{err} (for {timeout:g} s)") from err
                self._close_ports()
                log.debug("the state store still fails", extra={"error": str(err)})
                continue
            if started:
                log.info(
                    "the state store answers again",
                    extra={"outage_s": round(time.monotonic() - began, 1)},
                )
            return started

    def _close_ports(self) -> None:
        """Close what `start` opened; nothing when it opened nothing (the publisher opens
        first, and closes itself if settling the outbox fails) or was closed since."""
        if self._publisher is None:
            return
        self.metrics.broker_connected.set(0)
        self._lost_at = self._back_at = None  # let go of, not lost
        for port in (self._publisher, self._dead_letters, self._records):
            try:
                port.close()
            except Exception as err:  # closing the others matters more
                log.warning("closing a connection failed", extra={"error": str(err)})
        self._publisher = None

    def adopt_orphans(self) -> None:
        """Publish verdicts other processors committed but never published (they died)."""
        stale_before = time.time() - self.config.consumer.orphan_after_s
        self.outbox.adopt_orphans(self.name, stale_before)

    # --- one batch ---------------------------------------------------------------------

    def poll_once(self) -> int:
        """Receive and process one batch; the number of messages handled."""
        assert self._publisher is not None, "start() first"
        if self._outbox_dirty:  # earlier verdicts go out first, in order
            try:
                self.outbox.publish_outbox(self.name, self._publisher)
            except (PublishError, BrokerUnavailable) as err:
                self._back_off("publishing the outbox", err)
                return 0
            self._outbox_dirty = False
            self._backoff_s = 0.0
        if self._subscribe_again:
            try:
                self._records.close()  # what it holds goes back to the subscription
                self._records.open()
            except BrokerUnavailable as err:
                self._back_off("subscribing again", err)
                return 0
            self._subscribe_again = False
            log.info("subscribed again after the broker failed", extra={"consumer": self.name})
        try:
            messages = self._records.receive_batch()
        except BrokerUnavailable as err:
            self._back_off("receiving records", err)
            return 0
        self._note_connection(self._records.connected(), receiving=bool(messages))
        if not messages:
            return 0
        received = time.monotonic()
        self._settled = set()
        valid: list[InboundMessage] = []
        try:
            parsed = []
            for message in messages:
                if message.redelivery_count > 0:
                    self.metrics.redelivered.inc()
                record = self._parse(message)
                if record is not None:
                    parsed.append((message, record))
            entries: list[OutboxEntry] = []
            published_ms: dict[str, int] = {}  # verdict id -> its record's publish time
            for message, queued in self._process(parsed):
                valid.append(message)
                entries += queued
                for entry in queued:
                    published_ms[entry.verdict_id] = message.publish_time_ms
            self.outbox.publish(self.name, self._publisher, entries, published_ms)
            for message in valid:
                self._settle(message, self._records.acknowledge)
        except (PublishError, BrokerUnavailable) as err:
            # The state is committed; redelivered records change nothing and are
            # acknowledged once the outbox has been published.
            self._outbox_dirty = True
            self._back_off("handling a batch", err)
            self._negative_acknowledge_unsettled(messages)
            return len(messages)
        self._backoff_s = 0.0
        elapsed = time.monotonic() - received
        for _ in messages:
            self.metrics.latency.observe(elapsed)
        return len(messages)

    def _settle(self, message: InboundMessage, how: Callable[[InboundMessage], None]) -> None:
        """Acknowledge or negatively acknowledge, remembering the message is settled."""
        how(message)
        self._settled.add(message.message_id)

    def _negative_acknowledge_unsettled(self, messages: Sequence[InboundMessage]) -> None:
        for message in messages:
            if message.message_id in self._settled:
                continue
            try:
                self._settle(message, self._records.negative_acknowledge)
            except BrokerUnavailable:
                return  # unacknowledged, they are redelivered once the connection is back

    def _note_connection(self, connected: bool, *, receiving: bool) -> None:
        """Say when the subscription's connection is lost and when it is back: the client
        reconnects by itself, and receives nothing and raises nothing meanwhile.

        Back means receiving, or connected for `RECONNECTED_AFTER_S`: a broker shutting
        down lets the client connect once more before it goes, one outage, not two."""
        now = time.monotonic()
        if self._lost_at is None:
            if connected or receiving:
                self.metrics.broker_connected.set(1)
                return
            self._lost_at = now
            self.metrics.broker_connected.set(0)
            self.metrics.broker_failures.inc()
            log.error(
                "the connection to the broker was lost; the client reconnects",
                extra={"topic": self.config.topics.records},
            )
            return
        if not (connected or receiving):
            self._back_at = None
            return
        if self._back_at is None:
            self._back_at = now
        if receiving or now - self._back_at >= RECONNECTED_AFTER_S:
            log.info(
                "the connection to the broker is back",
                extra={"outage_s": round(self._back_at - self._lost_at, 1)},
            )
            self._lost_at = self._back_at = None
            self.metrics.broker_connected.set(1)

    def _back_off(self, doing: str, err: Exception) -> None:
        """Leave the broker alone for a while, longer after each failure in a row."""
        self._backoff_s = _doubled(self._backoff_s)
        self._resume_at = time.monotonic() + self._backoff_s
        self._subscribe_again = self._publisher is not None  # started: subscribed once
        self.metrics.broker_failures.inc()
        self.metrics.broker_connected.set(0)
        log.error(
            "the broker failed; retrying later",
            extra={"doing": doing, "error": str(err), "retry_in_s": self._backoff_s},
        )

    def _parse(self, message: InboundMessage) -> Record | None:
        """The message's record, or None once a bad one has been dead-lettered."""
        try:
            return parse_record(message.payload, max_bytes=self.config.consumer.max_record_bytes)
        except RecordError as err:
            self._dead_letter(message, str(err.kind), err.path, err.located_message)
            return None

    def _process(
        self, parsed: Sequence[tuple[InboundMessage, Record]]
    ) -> list[tuple[InboundMessage, list[OutboxEntry]]]:
        """Handle valid records; for each one whose state committed, the verdicts it
        put in the outbox (the others are dead-lettered or negatively acknowledged).

        A batch commits in one transaction (one commit and a few statements per
        batch instead of per record); if that fails, its records are handled one
        transaction each, so only a record that fails on its own is held back.
        """
        if len(parsed) > 1:
            try:
                return self._commit(parsed)
            except StoreUnavailable:
                raise
            except Exception as err:
                log.info(
                    "a batch's transaction failed; handling its records one at a time",
                    extra={"records": len(parsed), "error": f"{type(err).__name__}: {err}"},
                )
        committed = []
        for message, record in parsed:
            try:
                committed += self._commit([(message, record)])
            except StoreUnavailable:
                raise
            except RunConflict as conflict:  # at odds with a stored run: retrying cannot help
                self._dead_letter(message, RUN_CONFLICT, conflict.path, str(conflict))
            except UnitConflict as conflict:  # no continuation of its series: nor can this
                self._dead_letter(message, UNIT_CONFLICT, conflict.path, str(conflict))
            except Exception as err:
                self._hold_back(message, err, traceback.format_exc())
        return committed

    def _commit(
        self, parsed: Sequence[tuple[InboundMessage, Record]]
    ) -> list[tuple[InboundMessage, list[OutboxEntry]]]:
        """Run every handler on the records in one transaction, verdicts into the outbox."""
        produced_by: list[tuple[InboundMessage, list[OutboxEntry]]] = []
        with self.store.transaction() as tx:
            records = [record for _, record in parsed]
            for handler in self._handlers:
                handler.prepare(records, tx)
            for message, record in parsed:
                emitted_at = datetime.now(UTC)
                produced: list[Verdict] = []
                for handler in self._handlers:
                    produced += handler.handle(record, tx, emitted_at, tuple(produced))
                entries = [self._outbox_entry(verdict, record.test) for verdict in produced]
                produced_by.append((message, entries))
            numbers = iter(tx.add_verdicts([e for _, entries in produced_by for e in entries]))
        self.metrics.records_processed.inc(len(parsed))
        committed = []
        for message, entries in produced_by:
            # None: the verdict id was in the outbox already (a redelivered record)
            numbered = [(entry, next(numbers)) for entry in entries]
            committed.append(
                (message, [replace(entry, seq=seq) for entry, seq in numbered if seq is not None])
            )
        return committed

    def _hold_back(self, message: InboundMessage, err: Exception, trace: str) -> None:
        """A valid record whose processing raised: redelivered later, or dead-lettered
        with the traceback once it has been redelivered `max_redeliveries` times."""
        if message.redelivery_count >= self.config.consumer.max_redeliveries:
            self._dead_letter(
                message, PROCESSING_ERROR, "$", f"{type(err).__name__}: {err}", trace=trace
            )
            return
        log.warning(
            "processing a record failed; it will be redelivered",
            extra={
                "message_id": message.message_id,
                "redelivery_count": message.redelivery_count,
                "error": f"{type(err).__name__}: {err}",
            },
        )
        self._settle(message, self._records.negative_acknowledge)

    def _outbox_entry(self, verdict: Verdict, partition_key: str) -> OutboxEntry:
        series = verdict.series
        series_key = (
            SeriesKey.of(series.test, series.metric, series.attributes).canonical
            if series.metric is not None
            else ""
        )
        return OutboxEntry(
            seq=0,  # given by the store
            verdict_id=verdict.verdict_id,
            owner=self.name,
            kind=verdict.kind,
            series_key=series_key,
            partition_key=partition_key,
            document=dumps(verdict),
            created_at=time.time(),
        )

    def _dead_letter(
        self, message: InboundMessage, reason: str, path: str, detail: str, trace: str = ""
    ) -> None:
        """Send the original bytes to the dead-letter sink, then acknowledge."""
        properties = dict(message.properties)
        properties.update(
            {
                "perfwatch.error.kind": reason,
                "perfwatch.error.path": path,
                "perfwatch.error.message": _clip(detail),
                "perfwatch.source.topic": message.topic,
                "perfwatch.source.message_id": message.message_id,
                "perfwatch.source.redelivery_count": str(message.redelivery_count),
                "perfwatch.consumer": self.name,
            }
        )
        if trace:
            properties["perfwatch.error.traceback"] = _clip(trace)
        self._dead_letters.send(message.payload, key=message.key, properties=properties)
        self._settle(message, self._records.acknowledge)
        self.metrics.dead_lettered.labels(reason).inc()
        log.warning(
            "record dead-lettered",
            extra={
                "reason": reason,
                "path": path,
                "error": detail,
                "message_id": message.message_id,
            },
        )

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now < self._next_housekeeping:
            return
        self._next_housekeeping = now + _HOUSEKEEPING_INTERVAL_S
        self.metrics.series.set(self.store.series_count())
        self.adopt_orphans()
