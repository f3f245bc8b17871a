"""`perfwatch dev`: run a local broker in the foreground for development.

``perfwatch dev pulsar`` runs a real Apache Pulsar standalone from the Maven jars
(downloaded once into a cache folder); ``perfwatch dev embedded`` runs the small
pulsar-lite broker. Both print the service URL once ready and stop cleanly on
Ctrl-C or SIGTERM at any stage: a stop during start-up kills the broker at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click

from perfwatch.cli.errors import (
    InputError,
    ServiceUnavailable,
    SuggestingGroup,
    check_port_free,
)
from perfwatch.cli.signals import StopRequest, stop_on_signals


@click.group(cls=SuggestingGroup)
def dev() -> None:
    """Run a local Pulsar broker for development and tests."""


def _serve_until_stopped(
    stop: StopRequest,
    announce: Callable[[], None],
    is_running: Callable[[], bool],
    log_file: Path,
) -> None:
    """Print the broker's URLs, then block until `stop` is requested.

    The URLs are printed inside the polled stretch, so a caller that signals as soon
    as it reads them is answered by an orderly stop. Fails if the broker process dies
    first: it runs in a process group of its own, so no Ctrl-C reaches it.
    """
    with stop.polled():
        announce()
        while not stop.wait(1.0):
            if not is_running():
                from perfwatch.brokers.process import tail

                raise ServiceUnavailable(
                    f"the broker process exited unexpectedly; its log:\n{tail(log_file)}"
                )
        click.echo("Stopping ...", err=True)


@dev.command("pulsar")
@click.option(
    "--fetch-only", is_flag=True, help="Download the jars into the cache and exit (for CI)."
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep data here across runs (ports are then remembered) [default: a fresh temp folder].",
)
@click.option("--port", type=click.IntRange(1, 65535), help="Broker port [default: a free one].")
@click.option("--web-port", type=click.IntRange(1, 65535), help="Admin/HTTP port [default: free].")
@click.option(
    "--heap-mb",
    type=click.IntRange(min=128),
    default=512,
    show_default=True,
    help="Java heap of the standalone, in MiB.",
)
def pulsar_standalone(
    fetch_only: bool,
    data_dir: Path | None,
    port: int | None,
    web_port: int | None,
    heap_mb: int,
) -> None:
    """Run an Apache Pulsar standalone (broker + bookie) on loopback until Ctrl-C."""
    from perfwatch.brokers.handle import BrokerError
    from perfwatch.brokers.standalone import (
        PulsarStandalone,
        fetch_jars,
        jars_ready,
        pulsar_home,
        pulsar_version,
    )

    for option, chosen in (("--port", port), ("--web-port", web_port)):
        if chosen is not None:
            check_port_free("127.0.0.1", chosen, option)
    # From the start: a signal at any stage stops the command by the convention, and
    # an interrupted start-up kills the standalone at once.
    with stop_on_signals() as stop:
        try:
            home = pulsar_home()
            if not jars_ready(home):
                click.echo(
                    f"Fetching Apache Pulsar {pulsar_version()} jars with Maven into {home} "
                    "(about 270 MB the first time) ...",
                    err=True,
                )
            began = time.monotonic()
            lib_dir = fetch_jars(home)
            click.echo(f"Jars ready in {lib_dir} ({time.monotonic() - began:.1f} s)", err=True)
            if fetch_only:
                return
            standalone = PulsarStandalone(
                lib_dir=lib_dir,
                data_dir=data_dir,
                broker_port=port,
                web_port=web_port,
                heap_mb=heap_mb,
            )
            click.echo("Starting the Pulsar standalone ...", err=True)
            with standalone:
                rss = standalone.rss_bytes()
                click.echo(
                    f"Pulsar standalone ready in {standalone.startup_seconds:.1f} s "
                    f"(pid {standalone.pid}"
                    + (f", {rss / 2**20:.0f} MB resident" if rss else "")
                    + f", log {standalone.log_file})",
                    err=True,
                )

                def announce() -> None:
                    click.echo(f"service URL: {standalone.service_url}")
                    click.echo(f"admin URL:   {standalone.admin_url}")

                _serve_until_stopped(
                    stop, announce, lambda: standalone.running, standalone.log_file
                )
        except BrokerError as error:
            raise ServiceUnavailable(str(error)) from error


@dev.command("embedded")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Broker data folder [default: $XDG_DATA_HOME/perfwatch/embedded, else "
    "~/.local/share/perfwatch/embedded].",
)
@click.option("--port", type=click.IntRange(1, 65535), help="Broker port [default: a free one].")
def embedded(data_dir: Path | None, port: int | None) -> None:
    """Run the embedded pulsar-lite broker on loopback until Ctrl-C."""
    from perfwatch.brokers.embedded import DataFolderInUse, EmbeddedBroker
    from perfwatch.brokers.handle import BrokerError

    if port is not None:
        check_port_free("127.0.0.1", port, "--port")
    with stop_on_signals() as stop:
        try:
            with EmbeddedBroker(data_dir, port=port) as broker:
                click.echo(
                    f"Embedded broker ready (pid {broker.pid}, data {broker.data_dir}, "
                    f"log {broker.log_file})",
                    err=True,
                )
                _serve_until_stopped(
                    stop,
                    lambda: click.echo(f"service URL: {broker.service_url}"),
                    lambda: broker.running,
                    broker.log_file,
                )
        except DataFolderInUse as error:
            raise InputError(str(error)) from error
        except BrokerError as error:
            raise ServiceUnavailable(str(error)) from error
