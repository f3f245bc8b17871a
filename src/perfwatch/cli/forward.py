"""`perfwatch forward`: post verdicts to a webhook, dead-lettering the ones it keeps refusing."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click
import orjson

from perfwatch.adapters.alert_groups import AlertGroups
from perfwatch.adapters.pulsar_admin import set_retention
from perfwatch.adapters.verdict_feed import receive_polls, summary_fields
from perfwatch.adapters.webhook import (
    DEFAULT_TEMPLATE,
    TEMPLATE_FIELDS,
    TemplateError,
    WebhookSender,
    check_template,
    forward_verdicts,
)
from perfwatch.cli.broker import connected_broker, sole_embedded_consumer
from perfwatch.cli.errors import InputError, report
from perfwatch.cli.flags import FiniteFloatRange, NonBlankText
from perfwatch.cli.options import setting_option
from perfwatch.cli.signals import stop_on_signals
from perfwatch.cli.watch import VerdictSource, verdict_source_options
from perfwatch.config import Config, same_topic

if TYPE_CHECKING:
    import pulsar

    from perfwatch.brokers.handle import BrokerHandle


@click.command("forward")
@click.option("--webhook", required=True, help="URL the verdicts are POSTed to.")
@click.option(
    "--payload",
    type=click.Choice(["slack", "raw"]),
    default="slack",
    show_default=True,
    help='slack: {"text": <template>}; raw: the verdict JSON as published.',
)
@click.option(
    "--template",
    default=DEFAULT_TEMPLATE,
    show_default=True,
    help="Text of a Slack message, with fields "
    + ", ".join("{" + field + "}" for field in TEMPLATE_FIELDS),
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Tries per verdict before it goes to the dead-letter topic.",
)
@click.option(
    "--backoff",
    type=FiniteFloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry; doubled for each next one.",
)
@click.option(
    "--max-backoff",
    type=FiniteFloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Longest wait in seconds between two tries.",
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the webhook's answer to one try.",
)
@click.option(
    "--subscription",
    type=NonBlankText(),
    default="perfwatch-forward",
    show_default=True,
    help="Durable subscription: a restarted forwarder resumes where it stopped.",
)
@click.option(
    "--undeliverable-topic",
    metavar="TOPIC",
    show_default="<verdicts topic>-<subscription>-DLQ",
    help="Topic the verdicts the webhook keeps refusing go to.",
)
@click.option(
    "--group-wait",
    type=FiniteFloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds an incident's first message waits, collecting its updates, before one "
    "message says the incident as it stands (0: post each alert as it comes).",
)
@click.option(
    "--group-interval",
    type=FiniteFloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds between two messages of one incident: later changes are batched, and "
    "posted only if it has at least doubled or emptied since the last message.",
)
@setting_option("broker.admin_url", "--admin-url", metavar="URL")
@setting_option("topics.retention_minutes", "--retention-minutes", metavar="MINUTES")
@setting_option("topics.retention_mb", "--retention-mb", metavar="MB")
@verdict_source_options(alerts_only=True)
def forward(
    source: VerdictSource,
    webhook: str,
    payload: str,
    template: str,
    max_attempts: int,
    backoff: float,
    max_backoff: float,
    timeout: float,
    subscription: str,
    undeliverable_topic: str | None,
    group_wait: float,
    group_interval: float,
) -> None:
    """POST verdicts to --webhook, in order, retrying with exponential back-off.

    By default only what alerting acts on: incidents (the confirmed change
    points of all series at a commit), confirmed change points without a commit,
    their updates beyond the p-value, counter regressions and recommendations
    (--all-events: every verdict, each as it comes).

    An incident's verdicts are grouped as Alertmanager groups alerts: its first
    message waits --group-wait seconds and says the incident as it stands; later
    changes go out at most once per --group-interval, when it has at least
    doubled or emptied since the last message. When the input ends (--limit,
    --idle-timeout) the groups still waiting are posted at once.

    A verdict is acknowledged only once the webhook answered 2xx to its message;
    a message still refused after --max-attempts tries (or refused with a 4xx
    other than 408/429) sends its verdicts to the dead-letter topic with the
    reason in their properties. A forwarder stopped while it holds a group gets
    its verdicts again when restarted. With --admin-url that topic gets the
    retention `serve` gives its own (--retention-minutes, --retention-mb).
    """
    if not _is_http_url(webhook):
        # found now rather than when every verdict has been dead-lettered by it
        raise InputError("--webhook: not an http:// or https:// URL with a host name")
    try:
        check_template(template)
    except TemplateError as error:
        raise InputError(f"--template: {error}") from None
    undeliverable_topic = undeliverable_topic or f"{source.topic}-{subscription}-DLQ"
    if same_topic(undeliverable_topic, source.topic):
        # a refused verdict would be read back and posted again, for ever
        raise InputError(
            f"--undeliverable-topic {undeliverable_topic}: must be another topic than the "
            "verdicts topic it forwards"
        )

    import pulsar

    from perfwatch.brokers.handle import NO_SUCH_TOPIC

    def tell_outcome(message: pulsar.Message, outcome: str) -> None:
        click.echo(f"{_verdict_name(message)}: {outcome}", err=True)

    # SIGTERM (a service manager stopping it) ends the input as --limit does: the verdict
    # in hand is finished (a retry's back-off is cut short, leaving it unacknowledged),
    # waiting groups are posted, exit status 0. Before the broker answers it ends the
    # connection attempts.
    with (
        stop_on_signals((signal.SIGTERM,)) as stop,
        sole_embedded_consumer(
            source.config, topic=source.topic, subscription=subscription, command="forward"
        ),
        connected_broker(source.config, topic=source.topic) as (handle, client),
    ):
        _keep_undeliverable(handle, source.config, undeliverable_topic)
        consumer = client.subscribe(
            source.topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=source.initial_position,
        )
        try:
            dead_letter = client.create_producer(undeliverable_topic)
        except pulsar.TopicNotFound:
            consumer.close()
            raise InputError(
                f"--undeliverable-topic {undeliverable_topic}: {NO_SUCH_TOPIC}"
            ) from None
        sender = WebhookSender(
            webhook,
            max_attempts=max_attempts,
            initial_backoff_s=backoff,
            max_backoff_s=max_backoff,
            timeout_s=timeout,
            wait=stop.wait,
        )
        click.echo(f"forwarding {source.topic} to the webhook", err=True)
        try:
            with stop.polled():
                grouping = source.verdict_filter.alerts_only and group_wait > 0
                stats = forward_verdicts(
                    _first_messages(
                        receive_polls(consumer, idle_timeout_s=source.idle_timeout_s, stop=stop),
                        source.limit,
                    ),
                    consumer,
                    sender,
                    dead_letter,
                    style="raw" if payload == "raw" else "slack",
                    template=template,
                    verdict_filter=source.verdict_filter,
                    on_outcome=tell_outcome,
                    groups=AlertGroups(group_wait, group_interval) if grouping else None,
                )
        finally:
            sender.close()
            consumer.close()
            dead_letter.close()
        summary = (
            f"{stats.delivered} delivered, {stats.dead_lettered} dead-lettered to "
            f"{undeliverable_topic}, {stats.skipped} filtered out, {stats.grouped} grouped "
            "into incident messages"
        )
        if stats.left_unacknowledged:
            summary += (
                f"; stopped while retrying: {stats.left_unacknowledged} verdict(s) left "
                "unacknowledged, delivered again when forwarding resumes"
            )
        click.echo(summary, err=True)
        if (unmatched := stats.tests.unmatched()) is not None:
            report(unmatched, level="warning")


def _keep_undeliverable(handle: BrokerHandle, config: Config, topic: str) -> None:
    """Retention on the topic of undeliverable verdicts, so that they stay there for
    whoever reads them later: without it the broker may delete the messages of a topic
    nobody subscribes to."""
    if handle.kind == "embedded":  # deletes nothing
        return
    if handle.admin_url is None:
        report(
            f"no --admin-url: {topic} keeps undeliverable verdicts only as long as its "
            "namespace's retention says, which on a new Pulsar namespace is not at all; "
            "give --admin-url (broker.admin_url) to set the topic's retention",
            level="warning",
        )
        return

    def warn(message: str, details: dict[str, Any]) -> None:
        answer = f"HTTP {details['status']}" if details["status"] else "no answer"
        report(f"{topic}: {message} ({answer}: {details['answer']})", level="warning")

    topics = config.topics
    set_retention(
        handle.admin_url,
        topic,
        topics.retention_minutes,
        topics.retention_mb,
        config.broker.auth_token,
        on_failure=warn,
    )


def _verdict_name(message: pulsar.Message) -> str:
    """What an outcome line calls a message: the verdict's kind, id and series, which
    `watch --format json` and the dead-letter topic show too; a message that is no verdict
    by the broker's message id (the ORIGIN_MESSAGE_ID of its dead letter)."""
    try:
        verdict = orjson.loads(message.data())
    except orjson.JSONDecodeError:
        verdict = None
    if not isinstance(verdict, dict) or not verdict.get("verdict_id"):
        return f"message {message.message_id()}"
    fields = summary_fields(verdict)
    series = " ".join(part for part in (fields["test"], fields["metric"]) if part)
    return f"{fields['kind']} {fields['verdict_id']} ({series})"


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # an unbalanced bracket or a bad port
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _first_messages(
    polls: Iterator[pulsar.Message | None], limit: int | None
) -> Iterator[pulsar.Message | None]:
    """The polls up to the `limit`-th message (None: all)."""
    taken = 0
    for poll in polls:
        yield poll
        taken += poll is not None
        if limit is not None and taken >= limit:
            return
