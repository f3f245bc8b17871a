"""`perfwatch serve`: run a stream processor until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from perfwatch.config import Config, ConfigError, load_config


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (restoring the previous handlers afterwards)."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    for sig in previous:
        signal.signal(sig, request_stop)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_processor(config: Config, stop: threading.Event, embedded_dir: Path | None = None) -> None:
    """Connect broker and store as configured and process until `stop` is set."""
    from perfwatch.adapters.pulsar import pulsar_processor as Processor
    from perfwatch.adapters.pulsar_admin import enable_verdict_deduplication
    from perfwatch.brokers import open_broker
    from perfwatch.brokers.handle import make_client
    from perfwatch.processor.observability import ProcessorMetrics
    from perfwatch.state import open_store

    broker_config = config.broker
    with open_broker(
        broker_config.url, data_dir=embedded_dir, admin_url=broker_config.admin_url
    ) as handle:
        client = make_client(
            handle,
            auth_token=broker_config.auth_token,
            tls_trust_certs_file=broker_config.tls_trust_certs,
            tls_allow_insecure=broker_config.tls_allow_insecure,
            tls_validate_hostname=broker_config.tls_validate_hostname,
            tls_certificate_file_path=broker_config.tls_cert,
            tls_private_key_file_path=broker_config.tls_key,
        )
        if handle.admin_url:
            enable_verdict_deduplication(
                handle.admin_url, config.topics.verdicts, broker_config.auth_token
            )
        metrics = ProcessorMetrics.create()
        stop_metrics = None
        if config.observability.metrics_port:
            stop_metrics = metrics.serve(
                config.observability.metrics_host, config.observability.metrics_port
            )
        try:
            with open_store(config.store.url) as store:
                processor = Processor(
                    config,
                    store,
                    client,
                    subscription_type=handle.subscription_type(),
                    metrics=metrics,
                )
                processor.run(stop)
        finally:
            if stop_metrics is not None:
                stop_metrics()
            client.close()


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file (default: $PERFWATCH_CONFIG, else ./perfwatch.toml if present).",
)
@click.option("--pulsar-url", help="Pulsar service URL; without one the embedded broker runs.")
@click.option("--admin-url", help="Pulsar admin URL (turns on verdict deduplication).")
@click.option("--auth-token", help="Pulsar token (prefer PERFWATCH_BROKER_AUTH_TOKEN).")
@click.option("--tls-trust-certs", help="CA bundle for pulsar+ssl:// URLs.")
@click.option("--tls-cert", help="Client certificate for TLS authentication.")
@click.option("--tls-key", help="Client private key for TLS authentication.")
@click.option("--records-topic", help="Topic the records arrive on.")
@click.option("--verdicts-topic", help="Topic verdicts are published to.")
@click.option("--dead-letter-topic", help="Topic bad input goes to.")
@click.option("--subscription", help="Subscription shared by all processors.")
@click.option("--name", help="This processor's unique name (default perfwatch-<hostname>).")
@click.option("--store", "store_url", help="sqlite:///PATH or postgresql://... state store.")
@click.option("--metrics-port", type=int, help="Serve Prometheus /metrics on this port.")
@click.option("--metrics-host", help="Address for /metrics (default 127.0.0.1).")
@click.option("--log-format", type=click.Choice(["text", "json"]), help="Log line format.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option(
    "--embedded-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Data folder of the embedded broker (default ~/.local/share/perfwatch/embedded).",
)
def serve(config_path: Path | None, embedded_dir: Path | None, **flags: Any) -> None:
    """Consume records, detect change points and publish verdicts until stopped.

    Settings come from perfwatch.toml, PERFWATCH_* variables and these flags
    (later wins); see perfwatch.example.toml. SIGTERM or SIGINT finishes the
    batch in hand, flushes the producers and exits.
    """
    import pulsar

    from perfwatch.brokers.handle import BrokerError
    from perfwatch.processor.loop import ProcessorError
    from perfwatch.processor.observability import configure_logging
    from perfwatch.state import StoreError

    overrides = {
        "broker.url": flags["pulsar_url"],
        "broker.admin_url": flags["admin_url"],
        "broker.auth_token": flags["auth_token"],
        "broker.tls_trust_certs": flags["tls_trust_certs"],
        "broker.tls_cert": flags["tls_cert"],
        "broker.tls_key": flags["tls_key"],
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
    try:
        config = load_config(config_path, overrides=overrides)
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    configure_logging(config.observability.log_format, config.observability.log_level)
    with stop_on_signals() as stop:
        try:
            run_processor(config, stop, embedded_dir)
        except (BrokerError, StoreError, ProcessorError, pulsar.PulsarException) as err:
            click.echo(f"perfwatch serve: {err}", err=True)
            sys.exit(1)
