"""Talking to Pulsar from the command line: one way to connect, one way to fail."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.cli.errors import InputError, ServiceUnavailable

if TYPE_CHECKING:
    import pulsar

    from perfwatch.brokers.handle import BrokerHandle
    from perfwatch.config import Config

STDERR = 2  # the descriptor the Pulsar client writes to (sys.stderr may be a stand-in)
UNREACHABLE_ADVICE = (
    "check that the broker runs and that the URL, port, TLS and token settings are right "
    "(--pulsar-url, --auth-token, --tls-trust-certs or the [broker] section of perfwatch.toml); "
    "--connect-timeout waits longer"
)


def append_to_stderr() -> None:
    """Make writes to a stderr redirected to a file append (``2> file``), as the Pulsar
    client's log writes do: otherwise each overwrites the other's lines."""
    try:
        if stat.S_ISREG(os.fstat(STDERR).st_mode):
            fcntl.fcntl(STDERR, fcntl.F_SETFL, fcntl.fcntl(STDERR, fcntl.F_GETFL) | os.O_APPEND)
    except OSError:
        pass  # no usable stderr: nothing to protect


def broker_failure(error: Exception, config: Config) -> ServiceUnavailable | InputError:
    """The command-line error for a broker failure: which broker, what went wrong, what to do."""
    from perfwatch.brokers.handle import BrokerUnreachable, InvalidBrokerURL

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

    from perfwatch.brokers import open_broker
    from perfwatch.brokers.handle import BrokerError, connect_client

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
