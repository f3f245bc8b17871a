"""`perfwatch watch`: follow the verdicts topic, one readable line per verdict."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable, Mapping
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
import orjson

from perfwatch.adapters.verdict_feed import (
    KINDS,
    MatchedTests,
    ReaderFeed,
    SeenVerdicts,
    VerdictFilter,
    parse_since,
    receive_messages,
    summary_fields,
    unknown_kind_error,
)
from perfwatch.cli.broker import connected_client, sole_embedded_consumer
from perfwatch.cli.errors import report
from perfwatch.cli.flags import FiniteFloatRange, NonBlankText, output_format_option
from perfwatch.cli.options import broker_options, load_command_config, verdicts_topic_option
from perfwatch.cli.signals import stop_on_signals
from perfwatch.config import Config
from perfwatch.contract.timestamps import format_rfc3339

if TYPE_CHECKING:
    import pulsar

    from perfwatch.config import Config


_COLOURS = {
    "REGRESSION": "red",
    "IMPROVEMENT": "green",
    "FIXED": "green",
    "PASSED": "green",
    "SKIP": "green",
    "RUN": "yellow",
    "RETRACTED": "yellow",
    "CHANGE": "cyan",
}


def verdict_line(verdict: Mapping[str, Any]) -> str:
    """`<emitted_at>  <LABEL> <test> <metric> <change> p=<p> commit <sha> (...)  <kind>`,
    styled with ANSI colours (`click.echo` removes them when not writing to a terminal)."""
    fields = summary_fields(verdict)
    label = fields["label"]
    rest = fields["summary"].removeprefix(label).lstrip()
    styled = click.style(f"{label:<11}", fg=_COLOURS.get(label), bold=label == "REGRESSION")
    return f"{fields['emitted_at']}  {styled} {rest}  {click.style(fields['kind'], dim=True)}"


@dataclass(frozen=True)
class VerdictSource:
    """What `watch` and `forward` read: broker and topic, which verdicts, when to stop."""

    config: Config
    verdict_filter: VerdictFilter
    from_earliest: bool
    limit: int | None
    idle_timeout_s: float | None

    @property
    def topic(self) -> str:
        return self.config.topics.verdicts

    @property
    def reads_kept_verdicts(self) -> bool:
        """Whether reading starts at the oldest verdict the broker kept: --from-earliest,
        or --since, which asks for verdicts already published (the filter drops older ones)."""
        return self.from_earliest or self.verdict_filter.since is not None

    @property
    def initial_position(self) -> pulsar.InitialPosition:
        import pulsar

        if self.reads_kept_verdicts:
            return pulsar.InitialPosition.Earliest
        return pulsar.InitialPosition.Latest

    def describe_start(self) -> str:
        """Where reading starts, for the line a command writes once connected."""
        if self.verdict_filter.since is not None:
            return f"the verdicts emitted since {format_rfc3339(self.verdict_filter.since)}"
        return "the oldest verdict" if self.from_earliest else "the next verdict"


def verdict_source_options(
    *, alerts_only: bool
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the options shared by `watch` and `forward`; the command gets them as one
    `source: VerdictSource` argument. `alerts_only`: the default of --alerts-only."""
    return functools.partial(_with_source_options, alerts_only=alerts_only)


def _with_source_options(command: Callable[..., Any], *, alerts_only: bool) -> Callable[..., Any]:
    @functools.wraps(command)
    def with_source(
        *,
        config_path: str | None,
        tests: tuple[str, ...],
        kinds: tuple[str, ...],
        regressions_only: bool,
        alerts: bool,
        since: str | None,
        from_earliest: bool,
        limit: int | None,
        idle_timeout: float | None,
        **options: Any,
    ) -> Any:
        config = load_command_config(config_path)
        verdict_filter = _build_filter(tests, kinds, regressions_only, since, alerts)
        source = VerdictSource(config, verdict_filter, from_earliest, limit, idle_timeout)
        return command(source=source, **options)

    shared_options = [
        broker_options,
        verdicts_topic_option,
        click.option(
            "--test",
            "tests",
            multiple=True,
            # `--test "$UNSET"` would match no test and filter out every alert
            type=NonBlankText(),
            metavar="GLOB",
            help="Only these tests (an incident: if any of its series is one; then its later "
            "events too).",
        ),
        click.option(
            "--kind",
            "kinds",
            multiple=True,
            help=f"Only these kinds or families (change_point, ...): {', '.join(KINDS)}.",
        ),
        click.option(
            "--regressions-only",
            is_flag=True,
            help="Only regressions (an incident: if any of its series regressed; then its "
            "later events, up to the one that empties it, too).",
        ),
        click.option(
            "--alerts-only/--all-events",
            "alerts",
            default=alerts_only,
            show_default=True,
            help="Only what alerting acts on: incidents, confirmed change points and their "
            "updates beyond the p-value (docs/verdicts.md); or every event.",
        ),
        click.option(
            "--since",
            help="Only verdicts emitted since: 2024-05-01T02:00:00Z, 2024-05-01 or 2h; those "
            "already published too (reading starts at the oldest verdict kept).",
        ),
        click.option("--from-earliest", is_flag=True, help="Start at the oldest verdict kept."),
        click.option(
            "--limit",
            type=click.IntRange(min=1),
            # forward counts what it reads: a group's alerts are posted after later reads
            help="Stop after N verdicts shown."
            if not alerts_only
            else "Stop after reading N verdicts, those filtered out included.",
        ),
        click.option(
            "--idle-timeout",
            type=FiniteFloatRange(min=0),
            help="Stop after this many seconds without a message.",
        ),
    ]
    for option in reversed(shared_options):
        with_source = option(with_source)
    return with_source


def _build_filter(
    tests: tuple[str, ...],
    kinds: tuple[str, ...],
    regressions_only: bool,
    since: str | None,
    alerts_only: bool,
) -> VerdictFilter:
    for kind in kinds:
        if (error := unknown_kind_error(kind)) is not None:
            raise click.BadParameter(error, param_hint="'--kind'")
    chosen_families = {kind.partition(".")[0] for kind in kinds}
    if alerts_only and "change_point" in chosen_families and "incident" not in chosen_families:
        report(
            "a confirmed finding of a series with commits alerts through its "
            "incident (incident.opened, incident.updated), which --kind leaves out: add "
            "--kind incident, or --all-events for the change points' own verdicts",
            level="warning",
        )
    try:
        since_time = None if since is None else parse_since(since, datetime.now(UTC))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'--since'") from None
    return VerdictFilter(tests, kinds, regressions_only, since_time, alerts_only)


def decode_verdict(message: pulsar.Message) -> dict[str, Any] | None:
    """The message's verdict document, or None (with a warning) when it is not one."""
    try:
        verdict = orjson.loads(message.data())
    except orjson.JSONDecodeError as error:
        report(f"message {message.message_id()}: not JSON: {error}", level="warning")
        return None
    if not isinstance(verdict, dict):
        report(f"message {message.message_id()}: not a verdict object", level="warning")
        return None
    return verdict


@click.command("watch")
@verdict_source_options(alerts_only=False)
@output_format_option("text: a coloured line per verdict; json: the verdict documents as they are.")
@click.option("--color/--no-color", default=None, help="Colour the lines [default: on a terminal].")
@click.option(
    "--subscription",
    type=NonBlankText(),
    help="Read through this durable subscription, kept on exit: the next watch with it "
    "resumes where this one stopped. Without it, watch reads without a subscription.",
)
def watch(
    source: VerdictSource, output_format: str, color: bool | None, subscription: str | None
) -> None:
    """Print verdicts as they are published: test, metric, change, p-value, commit, direction.

    Starts at the latest verdict (--from-earliest replays what the broker kept,
    --since what it kept from that time on).
    It reads with a Pulsar reader, which leaves nothing on the broker, unless
    --subscription names a durable subscription to resume from.
    """
    import pulsar

    stdout = sys.stdout.buffer
    # SIGTERM (a service manager stopping it) ends the output as --limit does, exit status
    # 0; before the broker answers it ends the connection attempts.
    with (
        stop_on_signals((signal.SIGTERM,)) as stop,
        nullcontext()
        if subscription is None
        else sole_embedded_consumer(
            source.config, topic=source.topic, subscription=subscription, command="watch"
        ),
        connected_client(source.config, topic=source.topic) as client,
    ):
        feed: pulsar.Consumer | ReaderFeed
        if subscription is None:
            start_at = (
                pulsar.MessageId.earliest if source.reads_kept_verdicts else pulsar.MessageId.latest
            )
            feed = ReaderFeed(client.create_reader(source.topic, start_at))
        else:
            feed = client.subscribe(
                source.topic,
                subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=source.initial_position,
            )
        click.echo(f"watching {source.topic} from {source.describe_start()}", err=True)
        shown = 0
        seen = SeenVerdicts()
        tests = MatchedTests(source.verdict_filter.tests)
        try:
            with stop.polled():
                for message in receive_messages(
                    feed, idle_timeout_s=source.idle_timeout_s, stop=stop
                ):
                    verdict = decode_verdict(message)
                    if verdict is not None:
                        tests.note(verdict)
                        if source.verdict_filter.accepts(verdict) and seen.first_time(verdict):
                            if output_format == "json":
                                stdout.write(message.data() + b"\n")
                                stdout.flush()
                            else:
                                click.echo(verdict_line(verdict), color=color)
                            shown += 1
                    feed.acknowledge(message)
                    if source.limit is not None and shown >= source.limit:
                        break
        finally:
            with suppress(pulsar.PulsarException):
                feed.close()
        click.echo(f"{shown} verdict(s) shown of {tests.read} read", err=True)
        if (unmatched := tests.unmatched()) is not None:
            report(unmatched, level="warning")
