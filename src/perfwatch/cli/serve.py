"""`perfwatch serve`: run a stream processor until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfwatch.cli.errors import InputError, ServiceUnavailable, check_port_free
from perfwatch.cli.options import (
    broker_options,
    load_command_config,
    log_level_option,
    records_topic_option,
    store_option,
    verdicts_topic_option,
)
from perfwatch.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from perfwatch.config import Config


def run_processor(config: Config, embedded_dir: Path | None = None) -> None:
    """Connect broker and store as configured and process until SIGTERM or SIGINT.

    The signals stop the processor gracefully only once it runs: before, Ctrl-C
    interrupts the connection attempts. Either way Ctrl-C ends in KeyboardInterrupt
    (exit status 130); SIGTERM, the orderly stop, returns.
    """
    from perfwatch.adapters.pulsar import pulsar_processor
    from perfwatch.adapters.pulsar_admin import enable_verdict_deduplication
    from perfwatch.cli.broker import connected_broker
    from perfwatch.processor.observability import ProcessorMetrics
    from perfwatch.state import open_store

    broker_config = config.broker
    observability = config.observability
    if observability.metrics_port:
        check_port_free(observability.metrics_host, observability.metrics_port, "--metrics-port")
    with connected_broker(config, topic=config.topics.records, embedded_dir=embedded_dir) as (
        handle,
        client,
    ):
        if handle.admin_url:
            enable_verdict_deduplication(
                handle.admin_url, config.topics.verdicts, broker_config.auth_token
            )
        metrics = ProcessorMetrics.create()
        stop_metrics = None
        if observability.metrics_port:
            stop_metrics = metrics.serve(observability.metrics_host, observability.metrics_port)
        try:
            with open_store(config.store.url) as store:
                processor = pulsar_processor(
                    config,
                    store,
                    client,
                    subscription_type=handle.subscription_type(),
                    metrics=metrics,
                )
                with stop_on_signals() as stop:
                    processor.run(stop)
                if stop.signal == signal.SIGINT:
                    raise KeyboardInterrupt  # stopped cleanly, and reported as interrupted
        finally:
            if stop_metrics is not None:
                stop_metrics()


@click.command()
@broker_options
@click.option(
    "--admin-url",
    metavar="URL",
    show_default="broker.admin_url in the config, else none",
    help="Pulsar admin URL (turns on verdict deduplication).",
)
@records_topic_option
@verdicts_topic_option
@click.option(
    "--dead-letter-topic",
    metavar="TOPIC",
    show_default="topics.dead_letter in the config, else "
    "persistent://public/default/perfwatch-dead-letter",
    help="Topic the records that cannot be processed go to, with the reason.",
)
@click.option(
    "--subscription",
    show_default="consumer.subscription in the config, else perfwatch",
    help="Subscription shared by all processors.",
)
@click.option(
    "--name",
    show_default="consumer.name in the config, else perfwatch-<hostname>",
    help="This processor's unique name.",
)
@store_option
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    show_default="observability.metrics_port in the config, else 0: none",
    help="Serve Prometheus /metrics on this port.",
)
@click.option(
    "--metrics-host",
    show_default="observability.metrics_host in the config, else 127.0.0.1",
    help="Address /metrics listens on.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    show_default="observability.log_format in the config, else text",
    help="Format of perfwatch's log lines.",
)
@log_level_option
@click.option(
    "--embedded-dir",
    type=click.Path(file_okay=False, path_type=Path),
    show_default="~/.local/share/perfwatch/embedded",
    help="Data folder of the embedded broker.",
)
def serve(
    broker_settings: dict[str, Any],
    config_path: Path | None,
    embedded_dir: Path | None,
    **flags: Any,
) -> None:
    """Consume records, detect change points and publish verdicts until stopped.

    Settings come from perfwatch.toml, PERFWATCH_* variables and these flags
    (later wins); see perfwatch.example.toml. SIGTERM or SIGINT finishes the
    batch in hand, flushes the producers and exits.
    """
    from perfwatch.processor.loop import ProcessorError
    from perfwatch.processor.observability import configure_logging
    from perfwatch.state import StoreError, StoreUnavailable

    overrides = {
        **broker_settings,
        "broker.admin_url": flags["admin_url"],
        "topics.records": flags["records_topic"],
        "topics.verdicts": flags["verdicts_topic"],
        "topics.dead_letter": flags["dead_letter_topic"],
        "consumer.subscription": flags["subscription"],
        "consumer.name": flags["name"],
        "store.url": flags["store_url"],
        "observability.metrics_port": flags["metrics_port"],
        "observability.metrics_host": flags["metrics_host"],
        "observability.log_format": flags["log_format"],
        "observability.log_level": flags["log_level"],
    }
    config = load_command_config(config_path, overrides)
    configure_logging(config.observability.log_format, config.observability.log_level)
    try:
        run_processor(config, embedded_dir)
    except StoreUnavailable as error:
        raise ServiceUnavailable(f"state store unavailable: {error}") from None
    except (StoreError, ProcessorError) as error:
        raise InputError(str(error)) from None
