"""Talking to Pulsar from the command line: one way to connect, one way to fail."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.cli.errors import InputError, ServiceUnavailable

if TYPE_CHECKING:
    import pulsar

    from perfwatch.config import Config
    from perfwatch.stream.brokers import BrokerHandle

UNREACHABLE_ADVICE = (
    "check that the broker runs and that the URL, port, TLS and token settings are right "
    "(--pulsar-url, --auth-token, --tls-trust-certs or the [broker] section of perfwatch.toml); "
    "--connect-timeout waits longer"
)


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a line is logged (test runners replace it)."""

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def configure_client_log(level: str) -> None:
    """The Pulsar client's lines at `level` and above, on stderr with perfwatch's logs."""
    from perfwatch.stream.brokers import PULSAR_CLIENT_LOG

    PULSAR_CLIENT_LOG.setLevel(level.upper())
    perfwatch_log = logging.getLogger("perfwatch")
    if not perfwatch_log.handlers:  # `serve` and `dashboard` configure their own
        handler = _CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        perfwatch_log.addHandler(handler)


def broker_failure(error: Exception, config: Config) -> ServiceUnavailable | InputError:
    """The command-line error for a broker failure: which broker, what went wrong, what to do."""
    from perfwatch.stream.brokers import BrokerUnreachable, InvalidBrokerURL

    if isinstance(error, BrokerUnreachable):
        return ServiceUnavailable(f"{error}; {UNREACHABLE_ADVICE}")
    if isinstance(error, InvalidBrokerURL):
        return InputError(str(error))
    return ServiceUnavailable(f"{config.broker.url or 'the embedded broker'}: {error}")


@contextmanager
def connected_broker(
    config: Config, *, topic: str, embedded_dir: Path | None = None
) -> Iterator[tuple[BrokerHandle, pulsar.Client]]:
    """The configured broker and a client of it, which has answered a lookup of `topic`.

    Broker failures, while connecting or later, become the convention's errors;
    Ctrl-C while the client waits ends the command with exit status 130.
    """
    import pulsar

    from perfwatch.stream.brokers import BrokerError, connect_client, open_broker

    try:
        with open_broker(
            config.broker.url, data_dir=embedded_dir, admin_url=config.broker.admin_url
        ) as handle:
            client = connect_client(handle, config.broker, topic=topic)
            try:
                yield handle, client
            finally:
                client.close()
    except pulsar.Interrupted:
        raise KeyboardInterrupt from None
    except (BrokerError, pulsar.PulsarException) as error:
        raise broker_failure(error, config) from None


@contextmanager
def connected_client(config: Config, *, topic: str) -> Iterator[pulsar.Client]:
    """`connected_broker`'s client, for commands that need nothing else of the broker."""
    with connected_broker(config, topic=topic) as (_, client):
        yield client
