"""Send records to the records topic and make sure the broker has every one.

    with Publisher("pulsar://broker:6650") as publisher:
        for record in records:
            publisher.publish(record)
    # here every record is acknowledged, or PublishError named the ones that are not

Records are validated against the record schema before they are sent, keyed
by test id (one test's runs stay in order on a partitioned topic and go to one
consumer of a Key_Shared subscription, hence key-based batching), sent
asynchronously in batches, and the sender blocks while the producer's queue
is full rather than failing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import pulsar

from perfwatch.adapters.identity import record_label
from perfwatch.contract.codec import dumps
from perfwatch.contract.validation import RecordError, validate_record

DEFAULT_RECORDS_TOPIC = "persistent://public/default/perfwatch-records"


# The outcomes of a send that say the broker is gone, not that it refused the message
# (as the callback's result, or as the exception of a send the client refused at once).
_BROKER_GONE = frozenset(
    {pulsar.Result.Timeout, pulsar.Result.NotConnected, pulsar.Result.ConnectError}
)
_BROKER_GONE_ERRORS = (pulsar.Timeout, pulsar.NotConnected, pulsar.ConnectError)


@dataclass(frozen=True)
class SendFailure:
    """A message the broker did not acknowledge, and the broker's (or client's) reason."""

    label: str
    error: str

    def __str__(self) -> str:
        return f"{self.label}: {self.error}"


class PublishError(RuntimeError):
    """Some messages were not acknowledged; `failures` names each one."""

    def __init__(self, failures: list[SendFailure]) -> None:
        self.failures = failures
        shown = "\n  ".join(str(failure) for failure in failures[:20])
        more = f"\n  ... and {len(failures) - 20} more" if len(failures) > 20 else ""
        super().__init__(f"{len(failures)} message(s) not acknowledged:\n  {shown}{more}")


class Publisher:
    """A context manager that publishes records and, on exit, waits for every acknowledgement.

    `pulsar_url` None starts (or reuses) the embedded broker. Pass `client` to
    publish through a Pulsar client you manage; it is left open.
    """

    def __init__(
        self,
        pulsar_url: str | None = None,
        *,
        topic: str = DEFAULT_RECORDS_TOPIC,
        client: pulsar.Client | None = None,
        auth_token: str | None = None,
        tls_trust_certs_file: str | None = None,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: int = 10,
        max_pending_messages: int = 1000,
        send_timeout_ms: int = 30_000,
    ) -> None:
        self.pulsar_url = pulsar_url
        self.topic = topic
        self._client = client
        self._auth_token = auth_token
        self._tls_trust_certs_file = tls_trust_certs_file
        self._producer_options = {
            "batching_enabled": True,
            "batching_type": pulsar.BatchingType.KeyBased,
            "batching_max_messages": batching_max_messages,
            "batching_max_publish_delay_ms": batching_max_publish_delay_ms,
            "max_pending_messages": max_pending_messages,
            "block_if_queue_full": True,
            "send_timeout_millis": send_timeout_ms,
        }
        self._send_timeout_s = send_timeout_ms / 1000
        self._resources = ExitStack()
        self._producer: pulsar.Producer | None = None
        self._lock = threading.Condition()
        self._pending: dict[int, str] = {}  # sequence -> label of unacknowledged messages
        self._failures: list[SendFailure] = []
        self._broker_gone: str | None = None  # the client's error that said so
        self._sent = 0
        self.acknowledged = 0

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._producer is not None:
                # Even when the body failed, what was already handed to the broker is
                # waited for, so nothing is left in an unknown state.
                self.flush()
        except PublishError:
            if exc_type is None:
                raise
        finally:
            self.close()

    def open(self) -> None:
        if self._producer is not None:
            return
        try:
            if self._client is None:
                from perfwatch.brokers import open_broker
                from perfwatch.brokers.handle import make_client

                handle = self._resources.enter_context(open_broker(self.pulsar_url))
                client = make_client(
                    handle,
                    auth_token=self._auth_token,
                    tls_trust_certs_file=self._tls_trust_certs_file,
                )
                self._resources.callback(client.close)
                self._client = client
            self._producer = self._client.create_producer(self.topic, **self._producer_options)
            self._resources.callback(self._producer.close)
        except BaseException:
            self._resources.close()
            raise

    def close(self) -> None:
        self._resources.close()
        self._producer = None

    # --- sending ----------------------------------------------------------------------------

    def publish(self, record: Mapping[str, Any], *, label: str | None = None) -> None:
        """Validate a record and send it; RecordError (nothing sent) when it is invalid.

        `label` names the message in error reports (default: its place in this
        publisher's sequence, test and run id).
        """
        problems = validate_record(record)
        if problems:
            raise RecordError.from_problems(problems)
        self.send(
            dumps(record),
            key=record["test"],
            label=label or record_label(record, f"record {self._sent + 1}"),
        )

    def send(self, payload: bytes, *, key: str, label: str) -> None:
        """Send bytes already known to be a valid record; returns once the producer holds them."""
        if self._producer is None:
            raise RuntimeError("the publisher is not open; use it in a with statement")
        with self._lock:
            sequence = self._sent
            self._sent += 1
            if self._broker_gone is not None:
                # Each message would wait out its own send timeout behind a full queue.
                self._failures.append(
                    SendFailure(label, f"not sent: an earlier message got {self._broker_gone}")
                )
                return
            self._pending[sequence] = label
        try:
            self._producer.send_async(
                payload, lambda result, _id: self._on_result(sequence, result), partition_key=key
            )
        except pulsar.PulsarException as error:
            self._on_result(sequence, error)

    def _on_result(self, sequence: int, result: pulsar.Result | Exception) -> None:
        # Runs on the client's I/O thread: record the outcome, never raise.
        with self._lock:
            label = self._pending.pop(sequence, None)
            if label is None:
                return  # flush already gave up on this message and reported it
            if result == pulsar.Result.Ok:
                self.acknowledged += 1
            else:
                reason = result.name if isinstance(result, pulsar.Result) else str(result)
                self._failures.append(SendFailure(label, reason))
                if result in _BROKER_GONE or isinstance(result, _BROKER_GONE_ERRORS):
                    self._broker_gone = self._broker_gone or reason
            self._lock.notify_all()

    def flush(self) -> int:
        """Wait until the broker acknowledged or refused every message sent so far.

        Returns how many messages were acknowledged in all; raises PublishError
        naming every refused message (each failure is reported once).
        """
        if self._producer is None:
            return self.acknowledged
        with suppress(pulsar.PulsarException):  # the per-message callbacks carry the details
            self._producer.flush()
        with self._lock:
            # Every callback fires by the send timeout; allow as much again before giving up.
            deadline_s = 2 * self._send_timeout_s + 10
            if not self._lock.wait_for(lambda: not self._pending, timeout=deadline_s):
                for label in self._pending.values():
                    self._failures.append(SendFailure(label, "no answer from the client"))
                self._pending.clear()
            failures, self._failures = self._failures, []
        if failures:
            raise PublishError(failures)
        return self.acknowledged
