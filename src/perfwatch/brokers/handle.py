"""What every kind of broker hands out: where it listens, what it supports, a client for it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the Pulsar client is loaded where it is used, not for --help
    import pulsar


BrokerKind = Literal["embedded", "standalone", "container", "external"]


class BrokerError(RuntimeError):
    """A broker could not be started, reached or asked to do something."""


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
        import pulsar

        if self.supports_key_shared:
            return pulsar.ConsumerType.KeyShared
        return pulsar.ConsumerType.Shared


def make_client(
    broker: BrokerHandle | str,
    *,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
    tls_allow_insecure: bool = False,
    operation_timeout_seconds: int = 30,
    logger: logging.Logger | pulsar.ConsoleLogger | pulsar.FileLogger | None = None,
    **client_options: Any,
) -> pulsar.Client:
    """A `pulsar.Client` for a handle or a service URL.

    TLS is used for ``pulsar+ssl://`` URLs. The client library's own console
    logger at WARN level is the default: its INFO output (a few lines per producer,
    consumer and reconnect) drowns a command's output. A Python `logging.Logger`
    can be passed instead, but the client calls it from its own threads under the
    GIL, which has caused hangs in past client releases.
    """
    import pulsar

    service_url = broker.service_url if isinstance(broker, BrokerHandle) else broker
    if logger is None:
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    return pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(auth_token) if auth_token else None,
        operation_timeout_seconds=operation_timeout_seconds,
        tls_trust_certs_file_path=str(tls_trust_certs_file) if tls_trust_certs_file else None,
        tls_allow_insecure_connection=tls_allow_insecure,
        logger=logger,
        **client_options,
    )
