"""What every kind of broker hands out: where it listens, what it supports, a client for it."""

from __future__ import annotations

import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import pulsar

BrokerKind = Literal["embedded", "standalone", "container", "external"]


class BrokerError(RuntimeError):
    """A broker could not be started, reached or asked to do something."""


class InvalidBrokerURL(BrokerError):
    """A broker URL of no known kind."""


class BrokerUnreachable(BrokerError):
    """The broker did not answer, or refused the client, within the connect timeout."""

    def __init__(self, service_url: str, problem: str) -> None:
        super().__init__(f"Pulsar broker {service_url}: {problem}")
        self.service_url = service_url
        self.problem = problem


# What a command says of a topic whose namespace is missing (or where topics are not
# created automatically): a mistake in the configuration, not an outage.
NO_SUCH_TOPIC = (
    "the broker has no such topic and does not create it; check that its tenant and namespace exist"
)


class UnknownTopic(BrokerError):
    """The broker answered that the topic does not exist and it does not create it there."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic}: {NO_SUCH_TOPIC}")


class BrokerCapabilityError(BrokerError):
    """The broker lacks a feature the caller needs (e.g. no admin API on pulsar-lite)."""


@dataclass(frozen=True)
class BrokerHandle:
    """Where a broker listens and what it supports."""

    service_url: str
    admin_url: str | None
    kind: BrokerKind

    @property
    def supports_key_shared(self) -> bool:
        # pulsar-lite 0.2.0 stalls deliveries and sticks keys after negative acks on
        # Key_Shared (measured in tests/brokers/test_embedded_broker.py); real Pulsar does not.
        return self.kind != "embedded"

    def subscription_type(self) -> pulsar.ConsumerType:
        """Key_Shared on real Pulsar (per-key order across consumers), Shared on pulsar-lite.

        With Shared, several consumers may process records of one key out of order,
        so on the embedded broker perfwatch runs a single processor.
        """
        if self.supports_key_shared:
            return pulsar.ConsumerType.KeyShared
        return pulsar.ConsumerType.Shared


class ClientSettings(Protocol):
    """How to reach a broker: the ``[broker]`` settings (``perfwatch.config.BrokerConfig``)."""

    @property
    def auth_token(self) -> str | None: ...
    @property
    def tls_trust_certs(self) -> str | None: ...
    @property
    def tls_allow_insecure(self) -> bool: ...
    @property
    def tls_validate_hostname(self) -> bool: ...
    @property
    def tls_cert(self) -> str | None: ...
    @property
    def tls_key(self) -> str | None: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def log_level(self) -> str: ...


# Where the Pulsar client writes its own log lines: stderr, next to perfwatch's messages.
# Not its console logger, which writes to stdout among a command's output; not a Python
# logging.Logger, with which destroying a client at times aborts the interpreter
# ("terminate called without an active exception", apache/pulsar-client-python#256,
# reproduced with 3.13). Opened in append mode, so a redirected stderr is not overwritten.
CLIENT_LOG_PATH = "/dev/stderr"
_CLIENT_LOG_LEVELS = {
    "debug": pulsar.LoggerLevel.Debug,
    "info": pulsar.LoggerLevel.Info,
    "warning": pulsar.LoggerLevel.Warn,
    "error": pulsar.LoggerLevel.Error,
}
# Ports a service URL without one means (Pulsar's defaults).
_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651}
# The levels at which a client's own line for each failed connection attempt is wanted.
_VERBOSE_LOG_LEVELS = frozenset({"debug", "info"})


def make_client(
    broker: BrokerHandle | str,
    *,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
    tls_allow_insecure: bool = False,
    operation_timeout_seconds: int = 30,
    log_level: str = "warning",
    **client_options: Any,
) -> pulsar.Client:
    """A `pulsar.Client` for a handle or a service URL; every perfwatch client is made here.

    TLS is used for ``pulsar+ssl://`` URLs. The client's own log lines of
    `log_level` (debug, info, warning, error) and above go to stderr; "off": nowhere.
    The Pulsar client keeps the logger of a process's first client (level and file) for
    every later one, so every client of a command gets the same level.
    """
    service_url = broker.service_url if isinstance(broker, BrokerHandle) else broker
    if log_level == "off":
        logger = pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)
    else:
        logger = pulsar.FileLogger(_CLIENT_LOG_LEVELS[log_level], CLIENT_LOG_PATH)
    return pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(auth_token) if auth_token else None,
        operation_timeout_seconds=operation_timeout_seconds,
        tls_trust_certs_file_path=str(tls_trust_certs_file) if tls_trust_certs_file else None,
        tls_allow_insecure_connection=tls_allow_insecure,
        logger=logger,
        **client_options,
    )


def unreachable_reason(
    service_url: str, settings: ClientSettings, *, retry: bool = True
) -> str | None:
    """Why no host of `service_url` accepts a TCP connection, trying again until the
    connect timeout has passed (once, without `retry`); None as soon as one does.

    Checked before a client is made, so that a broker nothing listens for is perfwatch's
    own one line: a client's failed attempts would each write a log line, and a quiet
    logger for them would stay the logger of every later client of the process. At the
    debug and info levels those lines are wanted: None at once, the client tries.
    """
    if settings.log_level in _VERBOSE_LOG_LEVELS:
        return None
    deadline = time.monotonic() + settings.connect_timeout
    while True:
        reason = _refusal(service_url, max(0.1, deadline - time.monotonic()))
        if reason is None or not retry or time.monotonic() >= deadline:
            return reason
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def _refusal(service_url: str, timeout_s: float) -> str | None:
    scheme, _, hosts = service_url.partition("://")
    problems = []
    for host in hosts.rstrip("/").split(","):
        address = urlsplit(f"{scheme}://{host}")
        try:
            port = address.port or _DEFAULT_PORTS.get(scheme, 6650)
            with socket.create_connection((address.hostname or "", port), timeout=timeout_s):
                return None
        except (OSError, ValueError) as error:
            problems.append(f"{host}: {error}")
    return "; ".join(problems) or "no host"


def client_options(settings: ClientSettings) -> dict[str, Any]:
    """`make_client` options for the configured credentials, TLS, timeout and log level."""
    return {
        "log_level": settings.log_level,
        "auth_token": settings.auth_token,
        "tls_trust_certs_file": settings.tls_trust_certs,
        "tls_allow_insecure": settings.tls_allow_insecure,
        "tls_validate_hostname": settings.tls_validate_hostname,
        "tls_certificate_file_path": settings.tls_cert,
        "tls_private_key_file_path": settings.tls_key,
        "connection_timeout_ms": max(1, round(settings.connect_timeout * 1000)),
    }


def connect_client(broker: BrokerHandle, settings: ClientSettings, *, topic: str) -> pulsar.Client:
    """A client with `settings`' credentials and TLS, once the broker answered a lookup of
    `topic` within ``settings.connect_timeout`` seconds; BrokerUnreachable otherwise.

    The lookup runs on a probe client whose operation timeout is the connect timeout,
    so the client returned keeps the usual timeout for a working broker's slower
    operations. Ctrl-C during the probe raises KeyboardInterrupt (the client reports
    it as its own `pulsar.Interrupted`).

    A broker nothing listens for is reported before any client is made, as one
    BrokerUnreachable without the client's log line for each connection attempt
    (:func:`unreachable_reason`).
    """
    reason = unreachable_reason(broker.service_url, settings)
    if reason is not None:
        raise BrokerUnreachable(
            broker.service_url, f"no answer within {settings.connect_timeout:g} s ({reason})"
        )
    options = client_options(settings)
    probe = make_client(
        broker, operation_timeout_seconds=max(1, math.ceil(settings.connect_timeout)), **options
    )
    try:
        probe.get_topic_partitions(topic)
    except pulsar.Interrupted:
        raise KeyboardInterrupt from None
    except pulsar.TopicNotFound:
        raise UnknownTopic(topic) from None
    except (pulsar.Timeout, pulsar.ConnectError) as error:
        raise BrokerUnreachable(
            broker.service_url,
            f"no answer within {settings.connect_timeout:g} s ({error})",
        ) from None
    except pulsar.PulsarException as error:
        raise BrokerUnreachable(broker.service_url, f"refused the client: {error}") from None
    finally:
        probe.close()
    return make_client(broker, **options)
