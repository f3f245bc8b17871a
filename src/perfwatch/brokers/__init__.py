"""One way to get a Pulsar broker, whatever runs it.

Every command and test calls `open_broker()`, which yields a `BrokerHandle`:

- no URL (or ``"embedded"``): the embedded pulsar-lite broker, started as a child
  process on a loopback port with a persistent data folder (or reused when another
  perfwatch process already runs it on that folder);
- ``"standalone"``: a real Apache Pulsar standalone from the Maven jars
  (`perfwatch.brokers.standalone`), on free loopback ports and a fresh data folder;
- ``"container"``: the ``apachepulsar/pulsar`` image through testcontainers (needs a
  Docker engine);
- ``pulsar://host:port`` or ``pulsar+ssl://...``: an existing cluster; pass
  `admin_url` to enable the admin REST API (partitioned topics).

All kinds are reached through the same `pulsar-client` code path (`make_client`).
The handle says what the broker can do: the embedded broker has no admin API and
its Key_Shared dispatcher is unreliable (docs/brokers.md), so consumers subscribe
with `handle.subscription_type()`, which is Shared there and Key_Shared elsewhere.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from perfwatch.brokers.admin import readiness_problem
from perfwatch.brokers.handle import BrokerError, BrokerHandle, InvalidBrokerURL
from perfwatch.brokers.process import free_loopback_ports

# Image used when a Docker engine is available; same Pulsar line as the jars.
CONTAINER_IMAGE = "apachepulsar/pulsar:4.0.7"
CONTAINER_START_TIMEOUT = 300.0

_SERVICE_SCHEMES = ("pulsar://", "pulsar+ssl://")


@contextlib.contextmanager
def open_broker(
    url: str | None,
    *,
    data_dir: str | Path | None = None,
    admin_url: str | None = None,
) -> Iterator[BrokerHandle]:
    """Yield a handle to a broker; brokers started here are stopped on exit.

    `data_dir` is the embedded broker's folder (default
    ``$XDG_DATA_HOME/perfwatch/embedded``) or the standalone's data folder (default:
    a fresh temporary folder, deleted on exit).
    """
    if url is None or url == "embedded":
        yield from _embedded(data_dir)
    elif url == "standalone":
        yield from _standalone(data_dir)
    elif url == "container":
        yield from _container()
    elif url.startswith(_SERVICE_SCHEMES):
        yield BrokerHandle(service_url=url, admin_url=admin_url, kind="external")
    else:
        raise InvalidBrokerURL(
            f"broker URL {url!r}: expected pulsar://host:port, pulsar+ssl://host:port, "
            "'embedded', 'standalone' or 'container'"
        )


def _embedded(data_dir: str | Path | None) -> Iterator[BrokerHandle]:
    from perfwatch.brokers.embedded import EmbeddedBroker, find_running_broker

    broker_dir = Path(data_dir) if data_dir is not None else None
    running_url = find_running_broker(broker_dir)
    if running_url is not None:
        # Another perfwatch process (e.g. `perfwatch serve`) owns the broker on this
        # folder: share it rather than fail on the data folder's lock.
        yield BrokerHandle(service_url=running_url, admin_url=None, kind="embedded")
        return
    with EmbeddedBroker(broker_dir) as broker:
        yield BrokerHandle(service_url=broker.service_url, admin_url=None, kind="embedded")


def _standalone(data_dir: str | Path | None) -> Iterator[BrokerHandle]:
    from perfwatch.brokers.standalone import PulsarStandalone, fetch_jars

    lib_dir = fetch_jars()
    with PulsarStandalone(lib_dir=lib_dir, data_dir=data_dir) as broker:
        yield BrokerHandle(
            service_url=broker.service_url, admin_url=broker.admin_url, kind="standalone"
        )


def _container() -> Iterator[BrokerHandle]:
    from testcontainers.core.container import DockerContainer

    # The broker tells clients to reconnect to its advertised host and port, so the
    # container listens on the same port numbers that are published on the host.
    broker_port, web_port = free_loopback_ports(2)
    container = DockerContainer(CONTAINER_IMAGE)
    host = container.get_docker_client().host()
    container = (
        container.with_bind_ports(broker_port, broker_port)
        .with_bind_ports(web_port, web_port)
        .with_env("brokerServicePort", str(broker_port))
        .with_env("webServicePort", str(web_port))
        .with_env("brokerDeleteInactiveTopicsEnabled", "false")
        .with_env("PULSAR_MEM", "-Xms64m -Xmx512m -XX:MaxDirectMemorySize=256m")
        .with_command(
            [
                "sh",
                "-c",
                "bin/apply-config-from-env.py conf/standalone.conf && exec bin/pulsar "
                f"standalone --no-functions-worker --no-stream-storage --advertised-address {host}",
            ]
        )
    )
    container.start()
    try:
        admin_url = f"http://{host}:{web_port}"
        deadline = time.monotonic() + CONTAINER_START_TIMEOUT
        while (problem := readiness_problem(admin_url)) is not None:
            if time.monotonic() > deadline:
                stdout, stderr = container.get_logs()
                tail = (stdout + stderr).decode(errors="replace").splitlines()[-40:]
                raise BrokerError(
                    f"Pulsar container {CONTAINER_IMAGE} not ready after "
                    f"{CONTAINER_START_TIMEOUT:.0f} s ({problem}); log tail:\n" + "\n".join(tail)
                )
            time.sleep(0.5)
        yield BrokerHandle(
            service_url=f"pulsar://{host}:{broker_port}", admin_url=admin_url, kind="container"
        )
    finally:
        container.stop()
