"""`perfwatch dead-letters`: what the processor could not process, and why."""

from __future__ import annotations

import base64
import signal
import sys
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from perfwatch.adapters.verdict_feed import ReaderFeed, receive_messages
from perfwatch.cli.broker import connected_client
from perfwatch.cli.flags import FiniteFloatRange, output_format_option
from perfwatch.cli.options import broker_options, load_command_config, setting_option
from perfwatch.cli.signals import stop_on_signals
from perfwatch.contract.timestamps import format_rfc3339

if TYPE_CHECKING:
    import pulsar

# How long a reader that has caught up waits for one more message before it ends.
_CAUGHT_UP_S = 2.0
_PAYLOAD_SHOWN = 80  # characters of the payload a text line shows


@click.command("dead-letters")
@broker_options
@setting_option("topics.dead_letter", "--dead-letter-topic", metavar="TOPIC")
@output_format_option(
    "text: a line per dead letter (when, why, where, the start of the message); json: one "
    "object per line with the message's properties and its bytes."
)
@click.option("--follow", is_flag=True, help="Keep printing new dead letters as they come.")
@click.option(
    "--idle-timeout",
    type=FiniteFloatRange(min=0),
    help="Stop after this many seconds without a dead letter "
    f"[default: {_CAUGHT_UP_S:g}; with --follow, never].",
)
@click.option("--limit", type=click.IntRange(min=1), help="Stop after N dead letters.")
def dead_letters(
    config_path: Path | None,
    output_format: str,
    follow: bool,
    idle_timeout: float | None,
    limit: int | None,
) -> None:
    """Print the dead letters kept on the broker, oldest first, with their reasons.

    The processor's: each record it could not process, with the error's kind,
    JSON path and message, and the message it came from. --dead-letter-topic
    may also name forward's topic of undeliverable verdicts
    (<verdicts topic>-<subscription>-DLQ). Reads with a Pulsar reader: removes
    nothing and leaves nothing on the broker.
    """
    config = load_command_config(config_path)
    source = config.topics.dead_letter
    if idle_timeout is None and not follow:
        idle_timeout = _CAUGHT_UP_S
    stdout = sys.stdout.buffer
    with (
        stop_on_signals((signal.SIGTERM,)) as stop,
        connected_client(config, topic=source) as client,
    ):
        import pulsar

        reader = ReaderFeed(client.create_reader(source, pulsar.MessageId.earliest))
        click.echo(f"reading the dead letters of {source}", err=True)
        shown = 0
        try:
            with stop.polled():
                for message in receive_messages(reader, idle_timeout_s=idle_timeout, stop=stop):
                    if output_format == "json":
                        stdout.write(orjson.dumps(dead_letter_document(message)) + b"\n")
                        stdout.flush()
                    else:
                        click.echo(dead_letter_line(message))
                    shown += 1
                    if limit is not None and shown >= limit:
                        break
        finally:
            with suppress(pulsar.PulsarException):
                reader.close()
        click.echo(f"{shown} dead letter(s)", err=True)


def _published(message: pulsar.Message) -> str:
    return format_rfc3339(datetime.fromtimestamp(message.publish_timestamp() / 1000, UTC))


def dead_letter_document(message: pulsar.Message) -> dict[str, Any]:
    """The dead letter as JSON: broker message id, publication time, key (the test id of
    a record), properties (the reason among them) and the bytes, as text when they are
    UTF-8, else base64."""
    document: dict[str, Any] = {
        "message_id": str(message.message_id()),
        "published_at": _published(message),
        "key": message.partition_key(),
        "properties": message.properties(),
    }
    data = message.data()
    try:
        document["payload"] = data.decode("utf-8")
    except UnicodeDecodeError:
        document["payload_base64"] = base64.b64encode(data).decode("ascii")
    return document


def dead_letter_line(message: pulsar.Message) -> str:
    """`<published>  <kind>  <where>: <why>  from <source>  <payload start>`, for the
    processor's dead letters and forward's undeliverable verdicts alike."""
    properties = message.properties()
    if "perfwatch.error.kind" in properties:
        why = (
            f"{properties['perfwatch.error.kind']}  {properties.get('perfwatch.error.path', '$')}"
            f": {properties.get('perfwatch.error.message', '')}"
        )
        origin = properties.get("perfwatch.source.message_id", "?")
    else:
        attempts = properties.get("perfwatch-attempts")
        tried = f" after {attempts} attempt(s)" if attempts else ""
        why = f"undeliverable{tried}: {properties.get('perfwatch-error', 'no reason given')}"
        origin = properties.get("ORIGIN_MESSAGE_ID", "?")
    text = message.data().decode("utf-8", errors="backslashreplace").replace("\n", " ")
    if len(text) > _PAYLOAD_SHOWN:
        text = text[: _PAYLOAD_SHOWN - 1] + "…"
    return f"{_published(message)}  {why}  from message {origin}  {text}"
