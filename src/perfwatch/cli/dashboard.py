"""`perfwatch dashboard`: serve the live web dashboard."""

from __future__ import annotations

import logging
import signal
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click

from perfwatch._optional import require
from perfwatch.cli.broker import sole_embedded_consumer
from perfwatch.cli.errors import InputError, ServiceUnavailable, bound_socket
from perfwatch.cli.flags import FiniteFloatRange, NonBlankText
from perfwatch.cli.options import (
    broker_options,
    load_command_config,
    log_level_option,
    store_option,
    verdicts_topic_option,
)
from perfwatch.cli.signals import stop_on_signals

# What the dashboard imports from the `dashboard` extra.
DASHBOARD_MODULES = ("starlette", "uvicorn", "jinja2", "plotly")


@click.command()
@click.option("--host", default="127.0.0.1", help="Address to listen on.")
@click.option("--port", default=8050, type=click.IntRange(0, 65535), help="Port to listen on.")
@broker_options
@verdicts_topic_option
@store_option
@click.option(
    "--subscription",
    type=NonBlankText(),
    help="Follow the verdicts topic through this durable subscription, kept on exit: a "
    "restarted dashboard resumes from it. Without it the dashboard reads with a Pulsar "
    "reader and leaves nothing on the broker.",
)
@click.option(
    "--follow-topic/--no-follow-topic",
    default=True,
    help="Follow the verdicts topic; without it new verdicts come from polling the store.",
)
@click.option(
    "--poll-interval",
    default=2.0,
    type=FiniteFloatRange(min=0.1),
    help="Seconds between reads of the store's new verdicts (30 at least while the "
    "verdicts topic is followed).",
)
@log_level_option
def dashboard(
    host: str,
    port: int,
    config_path: Path | None,
    subscription: str | None,
    follow_topic: bool,
    poll_interval: float,
) -> None:
    """Serve the web dashboard: series and their status, change points, counter checks,
    run-or-skip votes, per-test time and memory, and verdicts live as they arrive.

    It reads the processor's state store and follows the verdicts topic. With
    the embedded broker it joins the broker a running `perfwatch serve` owns and
    never starts one; until it finds one, new verdicts come from the store. A
    broker that does not answer is retried in the background; the store is
    still read.
    """
    # SIGTERM at any stage is an orderly stop, exit status 0: the web server's own handler
    # shuts it down, then raises the signal again, which ends here instead of the process.
    with stop_on_signals((signal.SIGTERM,)):
        for module in DASHBOARD_MODULES:
            require(module, "dashboard", feature="the dashboard")
        config = load_command_config(config_path)
        # Bound here, not by the server: a port in use is bad input, and --port 0's port is known.
        listening = bound_socket(host, port, "--port")
        click.get_current_context().call_on_close(listening.close)

        import uvicorn

        from perfwatch.dashboard.app import DashboardSettings, create_app
        from perfwatch.dashboard.live import TopicSettings
        from perfwatch.processor.observability import SERVICE_LOGGERS, configure_logging

        level = config.observability.log_level
        # The web server's lines in the same format (JSON logs are one object per line).
        configure_logging(config.observability.log_format, level, (*SERVICE_LOGGERS, "uvicorn"))

        topic = None
        if follow_topic:
            broker = config.broker
            if broker.url not in (None, "embedded") and not broker.url.startswith("pulsar"):
                raise click.BadParameter(
                    f"{broker.url!r}: the dashboard joins a broker, it does not start one; "
                    "give pulsar://host:port, pulsar+ssl://host:port or 'embedded'",
                    param_hint="'--pulsar-url' / broker.url",
                )
            topic = TopicSettings(
                service_url=_embedded_locator(broker.embedded_data_dir)
                if broker.url in (None, "embedded")
                else broker.url,
                topic=config.topics.verdicts,
                subscription=subscription,
                broker=broker,
            )
        check_store(config.store.url)
        settings = DashboardSettings(
            store_url=config.store.url, topic=topic, poll_interval_s=poll_interval, config=config
        )
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings),
                host=host,
                port=port,
                log_level=level,
                log_config=None,
                # Event streams never end by themselves: give them a moment, then close them.
                timeout_graceful_shutdown=2,
                access_log=level == "debug",
            )
        )
        url_host = f"[{host}]" if ":" in host else host
        logging.getLogger("perfwatch.dashboard").info(
            "dashboard starting",
            extra={
                "url": f"http://{url_host}:{listening.getsockname()[1]}/",
                "store": config.store.url.split("@")[-1],
            },
        )
        with (
            nullcontext()
            if topic is None or subscription is None
            else sole_embedded_consumer(
                config,
                topic=topic.topic,
                subscription=subscription,
                command="dashboard",
            )
        ):
            server.run(sockets=[listening])


def check_store(url: str) -> None:
    """Open the store once, to fail clearly before serving (the application opens it again
    at start-up). A SQLite file that was not there is made, empty: a warning says so,
    since a mistyped path would otherwise look like a system with no history."""
    from perfwatch.state import StoreError, StoreUnavailable, open_store
    from perfwatch.state.sqlite import sqlite_path

    new_file = url.startswith("sqlite:///") and not sqlite_path(url).exists()
    try:
        open_store(url).close()
    except StoreUnavailable as error:
        raise ServiceUnavailable(f"state store unavailable: {error}") from None
    except StoreError as error:
        raise InputError(str(error)) from None
    if new_file:
        logging.getLogger("perfwatch.dashboard").warning(
            "no state store was at %s: a new, empty one shows nothing until a processor "
            "writes to it (perfwatch serve --store %s); check the path if a history was "
            "expected",
            sqlite_path(url),
            url,
        )


def _embedded_locator(embedded_dir: Path | None) -> Any:
    """Finds the embedded broker a `perfwatch serve` runs, at each connection attempt."""
    from perfwatch.brokers.embedded import find_running_broker

    def locate() -> str | None:
        return find_running_broker(embedded_dir)

    return locate
