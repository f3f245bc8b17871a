"""`perfwatch forward`: post verdicts to a webhook, dead-lettering the ones it keeps refusing."""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

import click

from perfwatch.adapters.verdict_feed import receive_messages
from perfwatch.adapters.webhook import (
    DEFAULT_TEMPLATE,
    TEMPLATE_FIELDS,
    TemplateError,
    WebhookSender,
    check_template,
    forward_verdicts,
)
from perfwatch.cli.broker import connected_client
from perfwatch.cli.errors import InputError
from perfwatch.cli.watch import VerdictSource, verdict_source_options

if TYPE_CHECKING:
    import pulsar


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
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry; doubled for each next one.",
)
@click.option(
    "--max-backoff",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Longest wait in seconds between two tries.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the webhook's answer to one try.",
)
@click.option(
    "--subscription",
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
) -> None:
    """POST each verdict to --webhook, in order, retrying with exponential back-off.

    By default only what alerting acts on: one message per incident (the
    confirmed change points of all series at a commit) as it opens and grows,
    confirmed change points without a commit, their updates beyond the p-value,
    and the other detectors' verdicts (--all-events: every verdict).

    A verdict is acknowledged only once the webhook answered 2xx; one still
    refused after --max-attempts tries (or refused with a 4xx other than 408/429)
    goes to the dead-letter topic with the reason in its properties.
    """
    try:
        check_template(template)
    except TemplateError as error:
        raise InputError(f"--template: {error}") from None
    undeliverable_topic = undeliverable_topic or f"{source.topic}-{subscription}-DLQ"
    sender = WebhookSender(
        webhook,
        max_attempts=max_attempts,
        initial_backoff_s=backoff,
        max_backoff_s=max_backoff,
        timeout_s=timeout,
    )

    import pulsar

    def report(message: pulsar.Message, outcome: str) -> None:
        click.echo(f"{message.message_id()}: {outcome}", err=True)

    with connected_client(source.config, topic=source.topic) as client:
        consumer = client.subscribe(
            source.topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=source.initial_position,
        )
        dead_letter = client.create_producer(undeliverable_topic)
        click.echo(f"forwarding {source.topic} to the webhook", err=True)
        try:
            stats = forward_verdicts(
                islice(
                    receive_messages(consumer, idle_timeout_s=source.idle_timeout_s), source.limit
                ),
                consumer,
                sender,
                dead_letter,
                style="raw" if payload == "raw" else "slack",
                template=template,
                verdict_filter=source.verdict_filter,
                on_outcome=report,
            )
        finally:
            sender.close()
            consumer.close()
            dead_letter.close()
    click.echo(
        f"{stats.delivered} delivered, {stats.dead_lettered} dead-lettered to "
        f"{undeliverable_topic}, {stats.skipped} filtered out",
        err=True,
    )
