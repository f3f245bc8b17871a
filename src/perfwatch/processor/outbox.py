"""The outbox relay: from committed outbox entries to verdicts on the topic, once.

Verdicts enter the store's outbox in the transaction of the state change that
caused them. The relay sends an owner's entries in commit order under a
producer named after the owner, with sequence id = offset + outbox number,
waits for the broker's receipts and marks what was stored as published,
remembering the last message position. After a crash it settles the outbox
first: what the broker reports (deduplication's last sequence id) or what
reading the topic back from the remembered position finds is marked, the rest
is sent (if the broker fails meanwhile, they stay in the outbox for the next
try; the processor logs what recovery found, marked and published). Entries a
dead processor left behind are adopted by another one under
the dead one's name, which the broker admits once that owner is disconnected.
docs/processor.md gives the argument.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from perfwatch.processor.observability import ProcessorMetrics
from perfwatch.processor.ports import (
    BrokerUnavailable,
    PublisherBusy,
    VerdictPublisher,
    VerdictSink,
)
from perfwatch.state import CURSOR_NAMESPACE, SEQUENCE_OFFSET_NAMESPACE, OutboxEntry, StateStore

log = logging.getLogger("perfwatch.processor")

PUBLISH_TIMEOUT_S = 60.0


class PublishError(RuntimeError):
    """The broker did not confirm a verdict."""


class OutboxRelay:
    """Publishes outbox entries of any owner through `verdicts`."""

    def __init__(
        self,
        store: StateStore,
        verdicts: VerdictSink,
        metrics: ProcessorMetrics,
        *,
        publish_timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.verdicts = verdicts
        self.metrics = metrics
        self._publish_timeout_s = publish_timeout_s
        self._offsets: dict[str, int] = {}  # outbox owner -> sequence id offset

    def open(self, owner: str) -> VerdictPublisher:
        """The owner's publisher, its outbox settled (PublisherBusy if the name is taken)."""
        publisher = self.verdicts.open_publisher(owner)
        try:
            self.recover(owner, publisher)
        except BaseException:
            publisher.close()
            raise
        return publisher

    def publish(
        self,
        owner: str,
        publisher: VerdictPublisher,
        entries: Sequence[OutboxEntry],
        published_ms: Mapping[str, int] | None = None,
    ) -> None:
        """Send the entries in order, wait for the receipts and mark the verdicts
        published up to the first one not stored; PublishError if any was not.

        `published_ms`: verdict id -> its record's publish time, for the lag metric.
        """
        if not entries:
            return
        offset = self._offsets[owner]
        for entry in entries:
            publisher.send(
                entry.document,
                key=entry.partition_key,
                properties={"verdict_id": entry.verdict_id, "kind": entry.kind},
                sequence_id=offset + entry.seq,
            )
        receipts = publisher.await_receipts(self._publish_timeout_s)
        confirmed: list[OutboxEntry] = []
        last_position: bytes | None = None
        for entry, receipt in zip(entries, receipts, strict=True):
            if receipt is None or not receipt.ok:
                break  # keep order: later ones are re-sent after this one
            confirmed.append(entry)
            if receipt.position is not None:  # None: dropped as a duplicate
                last_position = receipt.position
            self.metrics.verdicts.labels(entry.kind).inc()
            if published_ms and entry.verdict_id in published_ms:
                lag = receipt.stored_at - published_ms[entry.verdict_id] / 1000.0
                self.metrics.verdict_lag.observe(max(lag, 0.0))
        if confirmed:
            self._mark_published(owner, [entry.verdict_id for entry in confirmed], last_position)
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
        if len(confirmed) < len(entries):
            failed = receipts[len(confirmed)]
            reason = "no receipt" if failed is None else failed.error
            raise PublishError(
                f"{len(entries) - len(confirmed)} verdict(s) not published: {reason}"
            )

    def publish_outbox(self, owner: str, publisher: VerdictPublisher) -> None:
        """Publish all of the owner's unpublished verdicts in commit order."""
        self.publish(owner, publisher, self.store.unpublished(owner=owner))

    def recover(self, owner: str, publisher: VerdictPublisher) -> None:
        """Settle `owner`'s outbox after a crash: mark what reached the topic, send the
        rest. A broker failing meanwhile leaves them in the outbox for the next try."""
        offset = self._sequence_offset(owner, publisher)
        entries = self.store.unpublished(owner=owner)
        on_topic: set[str] = set()
        if entries:
            pending = {entry.verdict_id for entry in entries}
            # A broker with deduplication reports the last sequence id it stored.
            last = publisher.last_sequence_id()
            on_topic = {e.verdict_id for e in entries if offset + e.seq <= last}
            cursor = self.store.get_blob(CURSOR_NAMESPACE, owner)
            found, last_position = self.verdicts.read_back(owner, cursor, pending)
            on_topic |= found
            if on_topic:
                self._mark_published(owner, sorted(on_topic), last_position)
        rest = [entry for entry in entries if entry.verdict_id not in on_topic]
        failure = ""
        try:
            self.publish(owner, publisher, rest)
        except (PublishError, BrokerUnavailable) as err:
            failure = str(err)
        left = len(self.store.unpublished(owner=owner)) if failure else 0
        log.log(
            logging.WARNING if failure else logging.INFO,
            "outbox recovered",
            extra={
                "owner": owner,
                "found": len(entries),
                "already_on_topic": len(on_topic),
                "published": len(rest) - left,
                "left_for_later": left,
                **({"error": failure} if failure else {}),
            },
        )

    def adopt_orphans(self, own_name: str, stale_before: float) -> None:
        """Publish verdicts other processors committed before `stale_before` (a Unix
        time) but never published: they died."""
        owners = {e.owner for e in self.store.unpublished(created_before=stale_before)}
        for owner in sorted(owners - {own_name}):
            try:
                publisher = self.open(owner)
            except PublisherBusy:
                continue  # its owner is alive and connected: it will publish them
            except BrokerUnavailable as err:
                log.warning(
                    "cannot adopt a silent processor's verdicts yet",
                    extra={"owner": owner, "error": str(err)},
                )
                return
            try:
                publisher.close()
            except BrokerUnavailable as err:
                log.warning("closing an adopted producer failed", extra={"error": str(err)})

    def _mark_published(
        self, owner: str, verdict_ids: Sequence[str], last_position: bytes | None
    ) -> None:
        cursor = None if last_position is None else (owner, last_position)
        self.store.mark_published(verdict_ids, cursor=cursor)

    def _sequence_offset(self, owner: str, publisher: VerdictPublisher) -> int:
        """What to add to the owner's outbox numbers to get its sequence ids.

        Every sequence id this owner's producer sent is offset + an outbox
        number of this store. A broker (with deduplication) remembering a
        larger one therefore heard of another store under the same name, e.g.
        one that was deleted: its numbers would look like duplicates and be
        dropped, so the offset moves past them.
        """
        offset_blob = self.store.get_blob(SEQUENCE_OFFSET_NAMESPACE, owner)
        offset = int(offset_blob) if offset_blob else 0
        broker_last = publisher.last_sequence_id()
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
