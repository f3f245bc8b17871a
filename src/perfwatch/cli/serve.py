"""`perfwatch serve`: run a stream processor until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfwatch.cli.errors import InputError, ServiceUnavailable, check_port_free
from perfwatch.cli.options import (
    broker_options,
    load_command_config,
    log_level_option,
    records_topic_option,
    setting_option,
    store_option,
    verdicts_topic_option,
)
from perfwatch.cli.signals import StopRequest, stop_on_signals

if TYPE_CHECKING:
    from perfwatch.config import Config

log = logging.getLogger("perfwatch.processor")


def run_processor(config: Config, stop: StopRequest) -> None:
    """Connect broker and store as configured and process until `stop` is set.

    The signals stop the processor gracefully only once it runs: before, they
    interrupt the connection attempts (see `stop_on_signals`).
    """
    from perfwatch.adapters.pulsar import pulsar_processor
    from perfwatch.adapters.pulsar_admin import prepare_topics
    from perfwatch.cli.broker import connected_broker, sole_embedded_consumer
    from perfwatch.processor.observability import ProcessorMetrics
    from perfwatch.state import open_store

    broker_config = config.broker
    observability = config.observability
    if observability.metrics_port:
        check_port_free(observability.metrics_host, observability.metrics_port, "--metrics-port")
    records, subscription = config.topics.records, config.consumer.subscription
    with (
        sole_embedded_consumer(
            config,
            topic=records,
            subscription=subscription,
            command="serve",
        ),
        connected_broker(config, topic=records, serving=True) as (handle, client),
    ):
        if handle.admin_url:
            prepare_topics(handle.admin_url, config.topics, broker_config.auth_token)
        elif handle.kind != "embedded":  # the embedded broker deletes nothing
            log.warning(
                "no admin URL: verdicts are not deduplicated by the broker, and verdicts and "
                "dead letters are kept only as long as the namespace's retention says",
                extra={"topics": [config.topics.verdicts, config.topics.dead_letter]},
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
                with stop.polled():
                    processor.run(stop)
        finally:
            if stop_metrics is not None:
                stop_metrics()


@click.command()
@broker_options
@setting_option("broker.admin_url", "--admin-url", metavar="URL")
@records_topic_option
@verdicts_topic_option
@setting_option("topics.dead_letter", "--dead-letter-topic", metavar="TOPIC")
@setting_option("topics.retention_minutes", "--retention-minutes", metavar="MINUTES")
@setting_option("topics.retention_mb", "--retention-mb", metavar="MB")
@setting_option("consumer.subscription", "--subscription")
@setting_option("consumer.name", "--name")
@store_option
@setting_option("observability.metrics_port", "--metrics-port")
@setting_option("observability.metrics_host", "--metrics-host")
@setting_option("observability.log_format", "--log-format")
@log_level_option
def serve(config_path: Path | None) -> None:
    """Consume records, detect change points and publish verdicts until stopped.

    Settings come from perfwatch.toml, PERFWATCH_* variables and these flags
    (later wins); see perfwatch.example.toml. SIGTERM or SIGINT finishes the
    batch in hand, flushes the producers and exits.
    """
    # From the start: the imports and settings take a second or more on a busy machine,
    # and a service manager's stop then is an orderly stop too, not a death by SIGTERM.
    with stop_on_signals() as stop:
        from perfwatch.processor.loop import ProcessorError
        from perfwatch.processor.observability import configure_logging
        from perfwatch.state import StoreError, StoreUnavailable

        config = load_command_config(config_path)
        configure_logging(config.observability.log_format, config.observability.log_level)
        try:
            run_processor(config, stop)
        except StoreUnavailable as error:
            raise ServiceUnavailable(f"state store unavailable: {error}") from None
        except (StoreError, ProcessorError) as error:
            raise InputError(str(error)) from None
