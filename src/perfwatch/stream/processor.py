"""The stream processor: receive a batch -> validate -> store -> detect -> publish -> ack.

The handlers' state changes for a batch of records and the verdicts they
produce are committed in one store transaction (the verdicts into an outbox;
if that transaction fails, the batch's records are handled one transaction
each), and the verdicts are handed to the producer right away. The processor
then waits for the broker's receipts, records what was published and only then
acknowledges the batch. docs/processor.md gives the argument for why this
yields every verdict exactly once in effect across crashes of the processor,
the broker and redelivery.

Bad input (undecodable, invalid JSON, schema, non-finite, oversized, unknown
version) goes to the dead-letter topic at once with the reason in properties.
A valid record whose processing raises is negatively acknowledged (redelivered
after `nack_delay_ms`) and dead-lettered with its traceback once its
redelivery count reaches `max_redeliveries`. A store that cannot be reached
stops the processor instead: no record is dead-lettered for an outage.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson
import pulsar
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from perfwatch.config import Config
from perfwatch.processor.handlers import RecordHandler, build_handlers
from perfwatch.records import Record, RecordError, Verdict, dumps, parse_record
from perfwatch.store import (
    CURSOR_NAMESPACE,
    SEQUENCE_OFFSET_NAMESPACE,
    OutboxEntry,
    SeriesKey,
    StateStore,
    StoreUnavailable,
)
from perfwatch.stream.brokers import admin_request

log = logging.getLogger("perfwatch.processor")

PROCESSING_ERROR = "processing_error"
_MAX_PROPERTY_CHARS = 8192
_HOUSEKEEPING_INTERVAL_S = 5.0
_PUBLISH_TIMEOUT_S = 60.0
_READ_BACK_TIMEOUT_MS = 10_000
_QUIET_MS = 1_000  # reading back a topic whose end the broker cannot report


class ProcessorError(RuntimeError):
    """The processor cannot start or continue as configured."""


class PublishError(RuntimeError):
    """The broker did not confirm a verdict."""


@dataclass
class Pending:
    """A verdict handed to the producer; `receipt` is (result, message id, time)."""

    entry: OutboxEntry
    receipt: tuple[pulsar.Result, pulsar.MessageId, float] | None = None


@dataclass(frozen=True)
class ProcessorMetrics:
    """The processor's Prometheus metrics, in their own registry."""

    registry: CollectorRegistry
    records_processed: Counter
    dead_lettered: Counter
    redelivered: Counter
    verdicts: Counter
    series: Gauge
    latency: Histogram
    verdict_lag: Histogram

    @classmethod
    def create(cls) -> ProcessorMetrics:
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            records_processed=Counter(
                "perfwatch_records_processed",
                "Valid records processed (state committed)",
                registry=registry,
            ),
            dead_lettered=Counter(
                "perfwatch_records_dead_lettered",
                "Messages sent to the dead-letter topic, by reason",
                ["reason"],
                registry=registry,
            ),
            redelivered=Counter(
                "perfwatch_records_redelivered",
                "Messages received with a redelivery count above zero",
                registry=registry,
            ),
            verdicts=Counter(
                "perfwatch_verdicts_published",
                "Verdicts published, by kind",
                ["kind"],
                registry=registry,
            ),
            series=Gauge("perfwatch_series", "Series in the state store", registry=registry),
            latency=Histogram(
                "perfwatch_processing_latency_seconds",
                "From receiving a message to acknowledging it",
                registry=registry,
            ),
            verdict_lag=Histogram(
                "perfwatch_verdict_lag_seconds",
                "From the record's publication to the broker's receipt of its verdict",
                buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                registry=registry,
            ),
        )

    def _total(self, name: str) -> float:
        return sum(
            sample.value
            for metric in self.registry.collect()
            if metric.name == name
            for sample in metric.samples
            if sample.name == f"{name}_total"
        )

    def records_processed_total(self) -> float:
        return self._total("perfwatch_records_processed")

    def dead_lettered_total(self) -> float:
        return self._total("perfwatch_records_dead_lettered")

    def settled(self) -> float:
        """Messages finished for good: processed, or dead-lettered."""
        return self.records_processed_total() + self.dead_lettered_total()

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Expose /metrics on host:port; returns the function that stops it."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop


# Attributes every LogRecord has; anything else was passed in `extra=`.
_LOG_RECORD_ATTRIBUTES = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
)


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _LOG_RECORD_ATTRIBUTES}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extra_fields(record),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


class TextLogFormatter(logging.Formatter):
    """`time level logger: message key=value ...`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extra_fields(record).items())
        text = super().format(record)
        return f"{text} {fields}" if fields else text


def configure_logging(log_format: str, level: str) -> None:
    """Send perfwatch's logs to stderr as text or JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    root = logging.getLogger("perfwatch")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def enable_verdict_deduplication(admin_url: str, topic: str, auth_token: str | None = None) -> bool:
    """Turn on broker deduplication for the verdicts topic (topic policy); True on success.

    With it, a verdict re-sent after a crash under the same producer name and
    sequence id is dropped by the broker.
    """
    path = "/admin/v2/" + topic.replace("://", "/", 1) + "/deduplicationEnabled"
    try:
        status, body = admin_request(admin_url, "POST", path, body=True, auth_token=auth_token)
    except OSError as err:
        status, body = 0, str(err).encode()
    if status in (200, 204):
        return True
    log.warning(
        "could not enable deduplication on the verdicts topic; the outbox read-back "
        "still prevents duplicates after a processor crash",
        extra={"topic": topic, "status": status, "answer": body[:200].decode(errors="replace")},
    )
    return False


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_PROPERTY_CHARS else text[: _MAX_PROPERTY_CHARS - 3] + "..."


class Processor:
    """One consumer of the records topic. `run(stop)` until `stop` is set."""

    def __init__(
        self,
        config: Config,
        store: StateStore,
        client: pulsar.Client,
        *,
        subscription_type: pulsar.ConsumerType,
        handlers: Sequence[RecordHandler] | None = None,
        metrics: ProcessorMetrics | None = None,
    ) -> None:
        self.config = config
        self.name = config.consumer.name
        self.store = store
        self.client = client
        self.metrics = metrics or ProcessorMetrics.create()
        self._subscription_type = subscription_type
        self._handlers = list(handlers) if handlers is not None else build_handlers(config)
        self._consumer: pulsar.Consumer | None = None
        self._verdict_producer: pulsar.Producer | None = None
        self._dead_letter_producer: pulsar.Producer | None = None
        self._next_housekeeping = 0.0
        self._offsets: dict[str, int] = {}  # outbox owner -> sequence id offset
        self._receipts = threading.Condition()  # broker receipts of verdicts sent
        self._outbox_dirty = False  # a publication failed: the outbox has leftovers

    # --- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Connect producers, publish what a previous run left in the outbox, subscribe."""
        topics = self.config.topics
        consumer = self.config.consumer
        try:
            self._verdict_producer = self._open_verdict_producer(self.name)
        except pulsar.ProducerBusy:
            raise ProcessorError(
                f"another processor named {self.name!r} is connected to {topics.verdicts}; "
                "give each processor its own consumer name"
            ) from None
        self._dead_letter_producer = self.client.create_producer(
            topics.dead_letter,
            producer_name=f"{self.name}-dead-letter",
            block_if_queue_full=True,
        )
        self._recover(self.name, self._verdict_producer)
        self._consumer = self.client.subscribe(
            topics.records,
            consumer.subscription,
            consumer_type=self._subscription_type,
            consumer_name=self.name,
            receiver_queue_size=consumer.receiver_queue_size,
            negative_ack_redelivery_delay_ms=consumer.nack_delay_ms,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(
                consumer.batch_size, -1, consumer.batch_timeout_ms
            ),
        )
        log.info(
            "processor started",
            extra={
                "consumer": self.name,
                "topic": topics.records,
                "subscription": consumer.subscription,
                "subscription_type": str(self._subscription_type),
                "store": self.store.url.split("@")[-1],
            },
        )

    def run(self, stop: threading.Event) -> None:
        """Process batches until `stop` is set, then finish the batch in hand and close."""
        self.start()
        try:
            while not stop.is_set():
                self.poll_once()
                self._housekeeping()
        finally:
            self.close()

    def close(self) -> None:
        """Flush producers and close the consumer (unacknowledged messages are redelivered)."""
        for producer in (self._verdict_producer, self._dead_letter_producer):
            if producer is not None:
                try:
                    producer.flush()
                    producer.close()
                except pulsar.PulsarException as err:
                    log.warning("closing a producer failed", extra={"error": str(err)})
        if self._consumer is not None:
            try:
                self._consumer.close()
            except pulsar.PulsarException as err:
                log.warning("closing the consumer failed", extra={"error": str(err)})
        self._consumer = self._verdict_producer = self._dead_letter_producer = None
        log.info("processor stopped", extra={"consumer": self.name})

    # --- one batch ---------------------------------------------------------------------

    def poll_once(self) -> int:
        """Receive and process one batch; the number of messages handled."""
        assert self._consumer is not None and self._verdict_producer is not None
        messages = self._consumer.batch_receive()
        if not messages:
            return 0
        received = time.monotonic()
        producer = self._verdict_producer
        valid: list[pulsar.Message] = []
        unsettled = messages  # until processing starts, none of them is settled
        try:
            if self._outbox_dirty:  # earlier verdicts go out first, in order
                self._publish_outbox(self.name, producer)
                self._outbox_dirty = False
            unsettled = valid
            parsed = []
            for message in messages:
                if message.redelivery_count() > 0:
                    self.metrics.redelivered.inc()
                record = self._parse(message)
                if record is not None:
                    parsed.append((message, record))
            in_flight: list[Pending] = []
            published_ms: dict[str, int] = {}  # verdict id -> its record's publish time
            for message, queued in self._process(parsed):
                valid.append(message)
                # Sent at once, confirmed with the batch: one mark for all.
                in_flight += self._send(self.name, producer, queued)
                for entry in queued:
                    published_ms[entry.verdict_id] = message.publish_timestamp()
            self._confirm(self.name, producer, in_flight, published_ms)
        except PublishError as err:
            # The state is committed; redelivered records change nothing and are
            # acknowledged once the outbox has been published.
            self._outbox_dirty = True
            log.error("publishing verdicts failed", extra={"error": str(err)})
            for message in unsettled:
                self._consumer.negative_acknowledge(message)
            return len(messages)
        for message in valid:
            self._consumer.acknowledge(message)
        elapsed = time.monotonic() - received
        for _ in messages:
            self.metrics.latency.observe(elapsed)
        return len(messages)

    def _parse(self, message: pulsar.Message) -> Record | None:
        """The message's record, or None once a bad one has been dead-lettered."""
        try:
            return parse_record(message.data(), max_bytes=self.config.consumer.max_record_bytes)
        except RecordError as err:
            self._dead_letter(message, str(err.kind), err.path, err.message)
            return None

    def _process(
        self, parsed: Sequence[tuple[pulsar.Message, Record]]
    ) -> list[tuple[pulsar.Message, list[OutboxEntry]]]:
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
            except Exception as err:
                self._hold_back(message, err, traceback.format_exc())
        return committed

    def _commit(
        self, parsed: Sequence[tuple[pulsar.Message, Record]]
    ) -> list[tuple[pulsar.Message, list[OutboxEntry]]]:
        """Run every handler on the records in one transaction, verdicts into the outbox."""
        produced_by: list[tuple[pulsar.Message, list[OutboxEntry]]] = []
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

    def _hold_back(self, message: pulsar.Message, err: Exception, trace: str) -> None:
        """A valid record whose processing raised: redelivered later, or dead-lettered
        with the traceback once it has been redelivered `max_redeliveries` times."""
        assert self._consumer is not None
        if message.redelivery_count() >= self.config.consumer.max_redeliveries:
            self._dead_letter(
                message, PROCESSING_ERROR, "$", f"{type(err).__name__}: {err}", trace=trace
            )
            return
        log.warning(
            "processing a record failed; it will be redelivered",
            extra={
                "message_id": str(message.message_id()),
                "redelivery_count": message.redelivery_count(),
                "error": f"{type(err).__name__}: {err}",
            },
        )
        self._consumer.negative_acknowledge(message)

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
        self, message: pulsar.Message, reason: str, path: str, detail: str, trace: str = ""
    ) -> None:
        """Send the original bytes to the dead-letter topic, then acknowledge."""
        assert self._consumer is not None and self._dead_letter_producer is not None
        properties = dict(message.properties())
        properties.update(
            {
                "perfwatch.error.kind": reason,
                "perfwatch.error.path": path,
                "perfwatch.error.message": _clip(detail),
                "perfwatch.source.topic": message.topic_name(),
                "perfwatch.source.message_id": str(message.message_id()),
                "perfwatch.source.redelivery_count": str(message.redelivery_count()),
                "perfwatch.consumer": self.name,
            }
        )
        if trace:
            properties["perfwatch.error.traceback"] = _clip(trace)
        send: dict[str, Any] = {"properties": properties}
        if message.partition_key():
            send["partition_key"] = message.partition_key()
        self._dead_letter_producer.send(message.data(), **send)
        self._consumer.acknowledge(message)
        self.metrics.dead_lettered.labels(reason).inc()
        log.warning(
            "record dead-lettered",
            extra={
                "reason": reason,
                "path": path,
                "error": detail,
                "message_id": str(message.message_id()),
            },
        )

    # --- the outbox ----------------------------------------------------------------------

    def _open_verdict_producer(self, owner: str) -> pulsar.Producer:
        # The producer is named after the outbox owner: on a broker with
        # deduplication, (name, sequence id = outbox seq) makes a re-send a no-op,
        # and Pulsar admits one producer per name, fencing a second publisher.
        return self.client.create_producer(
            self.config.topics.verdicts,
            producer_name=owner,
            block_if_queue_full=True,
            batching_enabled=False,
        )

    def _sequence_offset(self, owner: str, producer: pulsar.Producer) -> int:
        """What to add to the owner's outbox numbers to get its Pulsar sequence ids.

        Every sequence id this owner's producer sent is offset + an outbox
        number of this store. A broker (with deduplication) remembering a
        larger one therefore heard of another store under the same name, e.g.
        one that was deleted: its numbers would look like duplicates and be
        dropped, so the offset moves past them.
        """
        offset_blob = self.store.get_blob(SEQUENCE_OFFSET_NAMESPACE, owner)
        offset = int(offset_blob) if offset_blob else 0
        broker_last = producer.last_sequence_id()
        if broker_last > offset + self.store.max_verdict_seq(owner):
            log.warning(
                "the broker knows later verdict sequence ids of this processor name than "
                "this state store issued; continuing after them",
                extra={"owner": owner, "broker_last_sequence_id": broker_last},
            )
            offset = broker_last
            with self.store.transaction() as tx:
                tx.put_blob(SEQUENCE_OFFSET_NAMESPACE, owner, str(offset).encode())
        self._offsets[owner] = offset
        return offset

    def _send(
        self, owner: str, producer: pulsar.Producer, entries: Sequence[OutboxEntry]
    ) -> list[Pending]:
        """Hand outbox entries to the producer, in order; `_confirm` waits for them."""
        pending = [Pending(entry) for entry in entries]
        for item in pending:
            producer.send_async(
                item.entry.document,
                functools.partial(self._on_sent, item),
                properties={"verdict_id": item.entry.verdict_id, "kind": item.entry.kind},
                partition_key=item.entry.partition_key,
                sequence_id=self._offsets[owner] + item.entry.seq,
            )
        return pending

    def _on_sent(self, item: Pending, result: pulsar.Result, message_id: pulsar.MessageId) -> None:
        # Runs on the client's I/O thread.
        with self._receipts:
            item.receipt = (result, message_id, time.time())
            self._receipts.notify_all()

    def _confirm(
        self,
        owner: str,
        producer: pulsar.Producer,
        pending: list[Pending],
        published_ms: dict[str, int] | None = None,
    ) -> None:
        """Wait for the broker's receipts and mark the verdicts published, in order up
        to the first one not stored; PublishError if any was not."""
        if not pending:
            return
        producer.flush()
        with self._receipts:
            self._receipts.wait_for(
                lambda: all(item.receipt is not None for item in pending), _PUBLISH_TIMEOUT_S
            )
        confirmed: list[OutboxEntry] = []
        last_id: pulsar.MessageId | None = None
        for item in pending:
            if item.receipt is None or item.receipt[0] != pulsar.Result.Ok:
                break  # keep order: later ones are re-sent after this one
            _, message_id, stored_at = item.receipt
            confirmed.append(item.entry)
            if message_id.ledger_id() >= 0:  # -1: the broker dropped it as a duplicate
                last_id = message_id
            self.metrics.verdicts.labels(item.entry.kind).inc()
            if published_ms and item.entry.verdict_id in published_ms:
                lag = stored_at - published_ms[item.entry.verdict_id] / 1000.0
                self.metrics.verdict_lag.observe(max(lag, 0.0))
        if confirmed:
            cursor = None if last_id is None else (owner, last_id.serialize())
            self.store.mark_published([entry.verdict_id for entry in confirmed], cursor=cursor)
            for entry in confirmed:
                log.info(
                    "verdict published",
                    extra={
                        "verdict_id": entry.verdict_id,
                        "kind": entry.kind,
                        "series": entry.series_key,
                        "owner": owner,
                    },
                )
        if len(confirmed) < len(pending):
            failed = pending[len(confirmed)].receipt
            reason = "no receipt" if failed is None else str(failed[0])
            missing = len(pending) - len(confirmed)
            raise PublishError(f"{missing} verdict(s) not published: {reason}")

    def _publish_outbox(self, owner: str, producer: pulsar.Producer) -> None:
        """Publish all of the owner's unpublished verdicts in commit order."""
        entries = self.store.unpublished(owner=owner)
        self._confirm(owner, producer, self._send(owner, producer, entries))

    def _recover(self, owner: str, producer: pulsar.Producer) -> None:
        """Settle `owner`'s outbox after a crash: mark what reached the topic, send the rest."""
        offset = self._sequence_offset(owner, producer)
        entries = self.store.unpublished(owner=owner)
        if not entries:
            return
        pending = {entry.verdict_id for entry in entries}
        # A broker with deduplication reports the last sequence id it stored.
        last = producer.last_sequence_id()
        on_topic = {e.verdict_id for e in entries if offset + e.seq <= last}
        found, last_id = self._verdict_ids_on_topic(owner, pending)
        on_topic |= found
        if on_topic:
            cursor = None if last_id is None else (owner, last_id.serialize())
            self.store.mark_published(sorted(on_topic), cursor=cursor)
        log.info(
            "outbox recovered",
            extra={
                "owner": owner,
                "already_published": len(on_topic),
                "to_publish": len(pending - on_topic),
            },
        )
        self._publish_outbox(owner, producer)

    def _verdict_ids_on_topic(
        self, owner: str, wanted: set[str]
    ) -> tuple[set[str], pulsar.MessageId | None]:
        """Verdict ids `owner` published after its last recorded message (read back)."""
        cursor = self.store.get_blob(CURSOR_NAMESPACE, owner)
        start = (
            pulsar.MessageId.earliest if cursor is None else pulsar.MessageId.deserialize(cursor)
        )
        reader = self.client.create_reader(self.config.topics.verdicts, start)
        found: set[str] = set()
        last_id = None
        try:
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
                if message.producer_name() == owner and verdict_id in wanted:
                    found.add(verdict_id)
                    last_id = message.message_id()
        finally:
            reader.close()
        return found, last_id

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now < self._next_housekeeping:
            return
        self._next_housekeeping = now + _HOUSEKEEPING_INTERVAL_S
        self.metrics.series.set(self.store.series_count())
        self._adopt_orphans()

    def _adopt_orphans(self) -> None:
        """Publish verdicts other processors committed but never published (they died)."""
        stale_before = time.time() - self.config.consumer.orphan_after_s
        owners = {e.owner for e in self.store.unpublished(created_before=stale_before)}
        for owner in sorted(owners - {self.name}):
            try:
                producer = self._open_verdict_producer(owner)
            except pulsar.ProducerBusy:
                continue  # its owner is alive and connected: it will publish them
            try:
                self._recover(owner, producer)
            finally:
                producer.close()
