"""Forward verdicts to a webhook: Slack-style text or the raw verdict JSON.

A verdict is acknowledged on the verdicts topic only once the webhook accepted
it (any 2xx answer). Failures that may pass (no connection, timeouts, 5xx, 408,
429) are retried with exponential back-off; after `max_attempts` tries, or at
once for an answer that retrying cannot change (another 4xx), the verdict goes
to a dead-letter topic with the reason, and only then is it acknowledged. A stop
that cuts a back-off short leaves the verdict unacknowledged: it is delivered again.
"""

from __future__ import annotations

import string
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import httpx
import orjson

from perfwatch.adapters.alert_groups import AlertGroups, DueGroup
from perfwatch.adapters.verdict_feed import (
    MatchedTests,
    SeenVerdicts,
    VerdictFilter,
    summary_fields,
)

if TYPE_CHECKING:
    import pulsar

DEFAULT_TEMPLATE = "{summary}"
TEMPLATE_FIELDS = (
    "label",
    "kind",
    "test",
    "metric",
    "attributes",
    "change",
    "pvalue",
    "commit",
    "commits",
    "direction",
    "emitted_at",
    "verdict_id",
    "run_id",
    "detail",
    "summary",
)
_RETRYABLE_STATUS = {408, 429}
PayloadStyle = Literal["slack", "raw"]


class TemplateError(ValueError):
    pass


def check_template(template: str) -> str:
    """The template itself, or TemplateError naming the unknown field or the syntax error."""
    if not template.strip():
        # Slack refuses a message without text (400 no_text): every alert would be
        # dead-lettered.
        raise TemplateError("template is empty: a Slack message needs text")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise TemplateError(f"template {template!r}: {error}") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            raise TemplateError(
                f"template {template!r}: unknown field {{{name}}}; "
                f"use plain fields among {', '.join(TEMPLATE_FIELDS)}"
            )
        if spec or conversion:
            # the fields are strings: a numeric spec (:.1f) would fail only when posting
            raise TemplateError(
                f"template {template!r}: field {{{name}}} takes no format spec or "
                "conversion; write it plain"
            )
    return template


def slack_payload(verdict: Mapping[str, Any], template: str = DEFAULT_TEMPLATE) -> bytes:
    """A Slack-compatible incoming-webhook body: `{"text": ...}`."""
    return orjson.dumps({"text": template.format_map(summary_fields(verdict))})


@dataclass(frozen=True)
class Delivery:
    accepted: bool
    attempts: int
    error: str | None = None  # the last failure, when not accepted
    stopped: bool = False  # a stop ended the back-off before the next try


class WebhookSender:
    """POSTs a body to a URL, retrying with exponential back-off.

    `wait(seconds)` waits out a back-off and is true when a stop cut it short (a
    `threading.Event`'s wait): the delivery then ends at once, not accepted and
    `stopped`.
    """

    def __init__(
        self,
        url: str,
        *,
        max_attempts: int = 5,
        initial_backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        timeout_s: float = 10.0,
        client: httpx.Client | None = None,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.url = url
        self.max_attempts = max_attempts
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self._client = client or httpx.Client(timeout=timeout_s)
        self._wait = wait or threading.Event().wait  # an event never set: the full wait

    def close(self) -> None:
        self._client.close()

    def backoff_s(self, failed_attempts: int, retry_after: str | None = None) -> float:
        """Wait before the next try: doubling from the initial wait, capped; a server's
        Retry-After (seconds) is honoured up to the cap."""
        wait = self.initial_backoff_s * 2 ** (failed_attempts - 1)
        if retry_after is not None and retry_after.strip().isdigit():
            wait = max(wait, float(retry_after))
        return min(wait, self.max_backoff_s)

    def deliver(self, body: bytes, content_type: str = "application/json") -> Delivery:
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            retry_after = None
            try:
                response = self._client.post(
                    self.url, content=body, headers={"Content-Type": content_type}
                )
            except httpx.HTTPError as failure:
                error = f"{type(failure).__name__}: {failure}"
            else:
                if response.is_success:
                    return Delivery(True, attempt)
                error = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
                # one line of the answer (often an HTML error page): the reason is logged
                # per verdict and kept in a dead letter's properties
                text = " ".join(response.text.split())
                if text:
                    error += f": {text[:200]}"
                status = response.status_code
                if 400 <= status < 500 and status not in _RETRYABLE_STATUS:
                    return Delivery(False, attempt, f"{error} (not retried)")
                retry_after = response.headers.get("Retry-After")
            if attempt < self.max_attempts and self._wait(self.backoff_s(attempt, retry_after)):
                return Delivery(False, attempt, error, stopped=True)
        return Delivery(False, self.max_attempts, error)


@dataclass
class ForwardStats:
    delivered: int = 0  # messages the webhook accepted
    dead_lettered: int = 0
    skipped: int = 0
    grouped: int = 0  # verdicts acknowledged with their incident's message (or its no news)
    left_unacknowledged: int = 0  # held by a message whose retries a stop cut short
    tests: MatchedTests = field(default_factory=lambda: MatchedTests(()))


def forward_verdicts(
    messages: Iterable[pulsar.Message | None],
    consumer: pulsar.Consumer,
    sender: WebhookSender,
    dead_letter: pulsar.Producer,
    *,
    style: PayloadStyle = "slack",
    template: str = DEFAULT_TEMPLATE,
    verdict_filter: VerdictFilter | None = None,
    on_outcome: Callable[[pulsar.Message, str], None] | None = None,
    groups: AlertGroups[pulsar.Message] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ForwardStats:
    """Deliver each message's verdict, one at a time so the webhook sees them in order.

    `messages` yields None when a wait for one ended without: time passed, and
    groups may be due. With `groups`, the alerts of an incident are held in its
    group and posted as one message when it is due (see `AlertGroups`); the rest
    pass at once. Whatever groups hold when `messages` ends is posted then.

    A message is acknowledged once it is delivered (alone or in its group's
    message), filtered out, or safely on the dead-letter topic; if even the
    dead-letter send fails, the error propagates and the message stays
    unacknowledged for redelivery. So does a stop that cuts a retry's back-off short
    (`sender.deliver` answers `stopped`): forwarding ends there, the message (or its
    group's messages) unacknowledged and the groups still held not posted, all of
    them delivered again when forwarding resumes. `on_outcome(message, text)` is told what
    happened to each message posted, grouped or dead-lettered; those filtered out or
    forwarded already are only counted (`stats.skipped`).
    """
    verdict_filter = verdict_filter or VerdictFilter()
    grouping_filter = replace(verdict_filter, alerts_only=False)
    seen = SeenVerdicts()
    stats = ForwardStats(tests=MatchedTests(verdict_filter.tests))

    def settle(message: pulsar.Message, outcome: str | None) -> None:
        """Acknowledge; `on_outcome` hears of it unless `outcome` is None (a verdict left
        out, most of them when only alerts are forwarded: counted in `stats` instead)."""
        consumer.acknowledge(message)
        if on_outcome is not None and outcome is not None:
            on_outcome(message, outcome)

    def post(body: bytes, held: list[pulsar.Message]) -> str:
        delivery = sender.deliver(body)
        if delivery.stopped:
            stats.left_unacknowledged += len(held)
            raise _RetriesStopped
        if delivery.accepted:
            stats.delivered += 1
            return f"delivered after {delivery.attempts} attempt(s)"
        outcome = reason = delivery.error or "not accepted"
        for message in held:
            outcome = _dead_letter(dead_letter, message, reason, delivery.attempts)
            stats.dead_lettered += 1
        return outcome

    def post_groups(due: list[DueGroup[pulsar.Message]]) -> None:
        for group in due:
            outcome = "acknowledged: no news of its incident since the last message"
            if group.message is not None:
                body = orjson.dumps(group.message)
                outcome = post(
                    body if style == "raw" else slack_payload(group.message, template), group.held
                )
            for message in group.held:
                stats.grouped += 1
                settle(message, f"in its incident's group: {outcome}")

    def take(message: pulsar.Message) -> None:
        payload = message.data()
        try:
            verdict = orjson.loads(payload)
            if not isinstance(verdict, dict):
                raise ValueError(f"a JSON {type(verdict).__name__}, not a verdict object")
        except ValueError as error:
            settle(message, _dead_letter(dead_letter, message, f"not a verdict: {error}", 0))
            stats.dead_lettered += 1
        else:
            stats.tests.note(verdict)
            if not seen.first_time(verdict):
                stats.skipped += 1
                settle(message, None)  # this verdict id was already forwarded
            elif (
                groups is not None
                and grouping_filter.accepts(verdict)
                and groups.offer(verdict, message, clock())
            ):
                pass  # acknowledged when its group is due
            elif verdict_filter.accepts(verdict):
                settle(
                    message,
                    post(
                        payload if style == "raw" else slack_payload(verdict, template),
                        [message],
                    ),
                )
            else:
                stats.skipped += 1
                settle(message, None)

    try:
        for message in messages:
            if message is not None:
                take(message)
            if groups is not None:
                post_groups(groups.due(clock()))
        if groups is not None:
            post_groups(groups.flush())
    except _RetriesStopped:
        pass  # the messages held stay unacknowledged
    return stats


class _RetriesStopped(Exception):
    """A stop cut a delivery's back-off short: forwarding ends, nothing more settled."""


def _dead_letter(
    producer: pulsar.Producer, message: pulsar.Message, reason: str, tries: int
) -> str:
    """Send the original bytes and properties to the dead-letter topic; waits for the ack."""
    properties = dict(message.properties())
    properties.update(
        {
            "ORIGIN_MESSAGE_ID": str(message.message_id()),
            "REAL_TOPIC": message.topic_name(),
            "perfwatch-error": reason,
            "perfwatch-attempts": str(tries),
        }
    )
    producer.send(message.data(), properties=properties, partition_key=message.partition_key())
    return f"dead-lettered after {tries} attempt(s): {reason}"
