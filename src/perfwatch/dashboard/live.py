"""Live verdicts for the browsers: the verdicts topic and the state store, fanned out.

Two sources feed one hub. A background thread consumes the verdicts topic and
hands each verdict over at once; a poller reads the store's verdict history
every few seconds, so the page stays live when the broker is unreachable and
also shows verdicts committed but not yet published. The hub drops a verdict
it has already sent (verdict ids are deterministic), and keeps one queue per
connected browser.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
import pulsar

from perfwatch.config import BrokerConfig

log = logging.getLogger("perfwatch.dashboard")

# Verdict ids remembered to drop the second copy (topic and store both deliver).
_REMEMBERED_IDS = 20_000
# A browser that stops reading loses events beyond this many rather than growing memory.
_CLIENT_QUEUE_SIZE = 1000


class VerdictHub:
    """Fan-out of verdict events to subscribers, usable from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queues: set[asyncio.Queue[dict[str, Any]]] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_CLIENT_QUEUE_SIZE)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._queues.discard(queue)

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    def first_sighting(self, verdict_id: str) -> bool:
        """True the first time a verdict id is offered (thread-safe)."""
        with self._lock:
            if verdict_id in self._seen:
                return False
            self._seen[verdict_id] = None
            if len(self._seen) > _REMEMBERED_IDS:
                self._seen.popitem(last=False)
            return True

    def publish(self, event: dict[str, Any]) -> None:
        """Queue `event` for every subscriber; callable from any thread."""
        self._loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: dict[str, Any]) -> None:
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                log.warning("a dashboard client is not reading; dropping a live event")


@dataclass(frozen=True)
class TopicSettings:
    """Where the verdicts topic is and how to connect (`broker`: credentials, TLS, timeout).

    `service_url` is a Pulsar URL, or a function asked before each connection
    attempt that returns one or None (no broker yet), e.g. to find the embedded
    broker a processor runs.
    """

    service_url: str | Callable[[], str | None]
    topic: str
    # None: read with a Pulsar reader, which leaves nothing on the broker.
    subscription: str | None = None
    broker: BrokerConfig = field(default_factory=BrokerConfig)


class TopicListener:
    """Consume the verdicts topic in a thread; reconnect with back-off when the broker is away.

    By default it reads with a Pulsar reader from the latest verdict on: a live
    page needs only what is new, and a reader holds no subscription, so a
    dashboard that is stopped or killed leaves no backlog behind. A named
    subscription (Shared, the only kind the embedded broker delivers reliably)
    is durable instead: a restarted dashboard resumes from it.
    """

    def __init__(self, settings: TopicSettings, on_verdict: Callable[[bytes], None]) -> None:
        self.settings = settings
        self._on_verdict = on_verdict
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verdicts-topic", daemon=True)
        self.connected = threading.Event()
        self.last_error: str | None = None
        self._outage_reported = False

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        from perfwatch.brokers.handle import unreachable_reason

        delay = 0.5
        while not self._stop.is_set():
            service_url = self._locate()
            if service_url is None:
                self.last_error = "no broker found yet"
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            # No client while nothing listens: each of its connection attempts would log
            # a line of its own; the outage is reported here, once.
            reason = unreachable_reason(service_url, self.settings.broker, retry=False)
            if reason is not None:
                self._unavailable(f"no connection ({reason})")
            elif self._follow_topic(service_url):
                delay = 0.5  # it was following: start the back-off again
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)

    def _follow_topic(self, service_url: str) -> bool:
        """Follow the topic with a client of its own until stopped or the broker fails;
        whether it was following when that happened."""
        from perfwatch.brokers.handle import client_options, make_client

        broker = self.settings.broker
        client = make_client(
            service_url,
            operation_timeout_seconds=max(1, math.ceil(broker.connect_timeout)),
            **client_options(broker),
        )
        try:
            if self.settings.subscription is None:
                reader = client.create_reader(self.settings.topic, pulsar.MessageId.latest)
                self._follow(
                    partial(reader.read_next, timeout_millis=250),
                    lambda _: None,
                    reader.is_connected,
                )
                reader.close()
            else:
                consumer = client.subscribe(
                    self.settings.topic,
                    self.settings.subscription,
                    consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=pulsar.InitialPosition.Latest,
                )
                self._follow(
                    partial(consumer.receive, timeout_millis=250),
                    consumer.acknowledge,
                    consumer.is_connected,
                )
                consumer.close()
        except pulsar.PulsarException as err:
            self._unavailable(f"{type(err).__name__}: {err}")
        finally:
            following = self.connected.is_set()
            self.connected.clear()
            client.close()
        return following

    def _locate(self) -> str | None:
        target = self.settings.service_url
        return target if isinstance(target, str) else target()

    def _follow(
        self,
        next_message: Callable[[], pulsar.Message],
        done: Callable[[pulsar.Message], None],
        is_connected: Callable[[], bool],
    ) -> None:
        """Hand each message over until stopped or the broker is lost; `done` after each
        (a consumer's ack).

        A lost broker ends the following: the client would otherwise reconnect by
        itself, with a log line of its own for each attempt."""
        self.connected.set()
        self.last_error = None
        self._outage_reported = False
        log.info("following the verdicts topic", extra={"topic": self.settings.topic})
        while not self._stop.is_set():
            try:
                message = next_message()
            except pulsar.Timeout:
                if not is_connected():
                    self._unavailable("connection to the broker lost")
                    return
                continue
            try:
                self._on_verdict(message.data())
            except Exception:
                # A verdict the page cannot show must not stop the feed.
                log.exception("a verdict from the topic could not be shown")
            done(message)

    def _unavailable(self, error: str) -> None:
        """Record why the topic cannot be followed: a warning for an outage's first
        failure, each retry after it at debug level."""
        self.last_error = error
        (log.debug if self._outage_reported else log.warning)(
            "verdicts topic unavailable; retrying (the store is still polled)",
            extra={"topic": self.settings.topic, "error": error},
        )
        self._outage_reported = True


def decode_verdict(data: bytes) -> dict[str, Any] | None:
    """The verdict document in a message, or None when it is not a JSON object."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None
