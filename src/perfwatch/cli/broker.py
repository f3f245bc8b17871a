"""Talking to Pulsar from the command line: one way to connect, one way to fail."""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from perfwatch.cli.errors import InputError, ServiceUnavailable, report

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
    from perfwatch.brokers.embedded import DataFolderInUse
    from perfwatch.brokers.handle import BrokerUnreachable, InvalidBrokerURL, UnknownTopic

    if isinstance(error, BrokerUnreachable):
        return ServiceUnavailable(f"{error}; {UNREACHABLE_ADVICE}")
    if isinstance(error, InvalidBrokerURL | DataFolderInUse | UnknownTopic):
        return InputError(str(error))
    return ServiceUnavailable(f"{config.broker.url or 'the embedded broker'}: {error}")


@contextmanager
def connected_broker(
    config: Config, *, topic: str, serving: bool = False
) -> Iterator[tuple[BrokerHandle, pulsar.Client]]:
    """The configured broker and a client of it, which has answered a lookup of `topic`.

    Broker failures, while connecting or later, become the convention's errors;
    Ctrl-C while the client waits ends the command with exit status 130. A command
    other than the processor (`serving`) that starts the embedded broker on a named
    folder no broker ever ran on says so: a mistyped --embedded-dir would otherwise
    pass unnoticed, its records waiting where no processor looks.
    """
    import pulsar

    from perfwatch.brokers import open_broker
    from perfwatch.brokers.embedded import holds_broker_data
    from perfwatch.brokers.handle import BrokerError, connect_client

    folder = config.broker.embedded_data_dir  # named, so possibly mistyped
    new_folder = (
        config.broker.url in (None, "embedded")
        and folder is not None
        and not serving
        and not holds_broker_data(folder)
    )
    try:
        with open_broker(
            config.broker.url, data_dir=folder, admin_url=config.broker.admin_url
        ) as handle:
            if new_folder:
                report(
                    f"no embedded broker ever ran on {folder}: started an empty one there "
                    "for this command (a mistyped --embedded-dir?); records sent there wait "
                    "for a `perfwatch serve` given the same folder",
                    level="warning",
                )
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


def embedded_folder(config: Config) -> Path:
    """The data folder of the embedded broker the configuration names (its default
    when none)."""
    from perfwatch.brokers.embedded import default_data_dir

    return config.broker.embedded_data_dir or default_data_dir()


@contextmanager
def sole_embedded_consumer(
    config: Config,
    *,
    topic: str,
    subscription: str,
    command: str,
) -> Iterator[None]:
    """Hold the lock of `subscription` on the embedded broker while `command` consumes.

    pulsar-lite refuses a second process's consumer on a subscription ("Consumer 0
    already exists"), which the client would retry forever without a word. A lock file
    per topic and subscription in the broker's data folder finds the first consumer at
    once; the system releases it however that process ends, `kill -9` included. On any
    other broker there is nothing to hold: consumers share a subscription there.
    """
    if config.broker.url not in (None, "embedded"):
        yield
        return
    folder = embedded_folder(config)
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{topic}\0{subscription}".encode()).hexdigest()[:16]
    with open(folder / f"consumer-{key}.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise InputError(
                f"the embedded broker in {folder} already has a consumer on subscription "
                f"{subscription!r} of {topic} ({holder}) and takes one only: stop that one, "
                "or share the subscription on Apache Pulsar (--pulsar-url; `perfwatch dev "
                "pulsar` locally)"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"perfwatch {command}, pid {os.getpid()}\n")
        lock.flush()
        yield
