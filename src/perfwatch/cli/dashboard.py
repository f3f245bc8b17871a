"""`perfwatch dashboard`: serve the live web dashboard."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import click

from perfwatch.config import ConfigError, load_config


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file (default: $PERFWATCH_CONFIG, else ./perfwatch.toml if present).",
)
@click.option("--store", "store_url", help="sqlite:///PATH or postgresql://... state store.")
@click.option("--pulsar-url", help="Pulsar service URL; default: configured, else embedded.")
@click.option("--auth-token", help="Pulsar token (prefer PERFWATCH_BROKER_AUTH_TOKEN).")
@click.option("--tls-trust-certs", help="CA bundle for pulsar+ssl:// URLs.")
@click.option("--verdicts-topic", help="Topic the verdicts are published to.")
@click.option(
    "--subscription",
    help="Subscription on the verdicts topic [default: perfwatch-dashboard-<hostname>].",
)
@click.option(
    "--follow-topic/--no-follow-topic",
    default=True,
    show_default=True,
    help="Follow the verdicts topic; without it new verdicts come from polling the store.",
)
@click.option(
    "--poll-interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between reads of the store's new verdicts (30 at least while the "
    "verdicts topic is followed).",
)
@click.option(
    "--embedded-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Data folder of the embedded broker (default ~/.local/share/perfwatch/embedded).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def dashboard(
    host: str,
    port: int,
    config_path: Path | None,
    store_url: str | None,
    pulsar_url: str | None,
    auth_token: str | None,
    tls_trust_certs: str | None,
    verdicts_topic: str | None,
    subscription: str | None,
    follow_topic: bool,
    poll_interval: float,
    embedded_dir: Path | None,
    log_level: str,
) -> None:
    """Serve the web dashboard: series and their status, change points, counter checks,
    run-or-skip votes, per-test time and memory, and verdicts live as they arrive.

    It reads the processor's state store and follows the verdicts topic. With
    the embedded broker it joins the broker a running `perfwatch serve` owns and
    never starts one; until it finds one, new verdicts come from the store.
    """
    import uvicorn

    from perfwatch.dashboard.app import DashboardSettings, create_app
    from perfwatch.dashboard.live import TopicSettings
    from perfwatch.processor.observability import configure_logging

    overrides: dict[str, Any] = {
        "store.url": store_url,
        "broker.url": pulsar_url,
        "broker.auth_token": auth_token,
        "broker.tls_trust_certs": tls_trust_certs,
        "topics.verdicts": verdicts_topic,
    }
    try:
        config = load_config(config_path, overrides=overrides)
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    configure_logging(config.observability.log_format, log_level)

    topic = None
    if follow_topic:
        broker = config.broker
        if broker.url not in (None, "embedded") and not broker.url.startswith("pulsar"):
            raise click.BadParameter(
                f"{broker.url!r}: the dashboard joins a broker, it does not start one; "
                "give pulsar://host:port, pulsar+ssl://host:port or 'embedded'",
                param_hint="--pulsar-url / broker.url",
            )
        topic = TopicSettings(
            service_url=_embedded_locator(embedded_dir)
            if broker.url in (None, "embedded")
            else broker.url,
            topic=config.topics.verdicts,
            subscription=subscription or f"perfwatch-dashboard-{socket.gethostname()}",
            auth_token=broker.auth_token,
            tls_trust_certs=broker.tls_trust_certs,
            tls_allow_insecure=broker.tls_allow_insecure,
        )
    settings = DashboardSettings(
        store_url=config.store.url, topic=topic, poll_interval_s=poll_interval
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=host,
            port=port,
            log_level=log_level,
            # Event streams never end by themselves: give them a moment, then close them.
            timeout_graceful_shutdown=2,
            access_log=log_level == "debug",
        )
    )
    logging.getLogger("perfwatch.dashboard").info(
        "dashboard starting",
        extra={"url": f"http://{host}:{port}/", "store": config.store.url.split("@")[-1]},
    )
    server.run()


def _embedded_locator(embedded_dir: Path | None) -> Any:
    """Finds the embedded broker a `perfwatch serve` runs, at each connection attempt."""
    from perfwatch.brokers.embedded import find_running_broker

    def locate() -> str | None:
        return find_running_broker(embedded_dir)

    return locate
