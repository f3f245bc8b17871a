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
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:  # the Pulsar client is loaded where it is used, not for --help
    import pulsar


BrokerKind = Literal["embedded", "standalone", "container", "external"]

# Image used when a Docker engine is available; same Pulsar line as the jars.
CONTAINER_IMAGE = "apachepulsar/pulsar:4.0.7"
CONTAINER_START_TIMEOUT = 300.0

_SERVICE_SCHEMES = ("pulsar://", "pulsar+ssl://")
_PERSISTENT_PREFIX = "persistent://"


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
        # Key_Shared (measured in tests/test_embedded_broker.py); real Pulsar does not.
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


@contextlib.contextmanager
def open_broker(
    url: str | None,
    *,
    data_dir: str | Path | None = None,
    admin_url: str | None = None,
) -> Iterator[BrokerHandle]:
    """Yield a handle to a broker; brokers started here are stopped on exit.

    `data_dir` is the embedded broker's folder (default
    ``~/.local/share/perfwatch/embedded``) or the standalone's data folder (default:
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
        raise BrokerError(
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


def readiness_problem(admin_url: str, *, cluster: str = "standalone") -> str | None:
    """None when a Pulsar broker is ready to serve `public/default`, else what is missing.

    The web port answers before the standalone has created its cluster and default
    namespace; the health check then writes and reads a heartbeat topic, which
    proves the bookie works too.
    """
    checks = (
        ("/admin/v2/clusters", lambda body: cluster in json.loads(body)),
        ("/admin/v2/namespaces/public", lambda body: "public/default" in json.loads(body)),
        ("/admin/v2/brokers/health", lambda body: body.strip() == b"ok"),
    )
    for path, passes in checks:
        try:
            status, body = admin_request(admin_url, "GET", path, timeout=30.0)
        except OSError as error:
            return f"GET {path}: {error}"
        if status != 200:
            return f"GET {path}: HTTP {status}"
        try:
            if not passes(body):
                return f"GET {path}: not yet ({body[:200].decode(errors='replace')})"
        except ValueError:
            return f"GET {path}: unexpected answer {body[:200]!r}"
    return None


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


def admin_request(
    admin_url: str,
    method: str,
    path: str,
    *,
    body: Any = None,
    timeout: float = 10.0,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
) -> tuple[int, bytes]:
    """Call the Pulsar admin REST API; returns (HTTP status, body).

    Connection failures raise OSError (callers polling for readiness retry on it).
    """
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(admin_url.rstrip("/") + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if auth_token:
        request.add_header("Authorization", f"Bearer {auth_token}")
    context = None
    if admin_url.startswith("https://"):
        context = ssl.create_default_context(
            cafile=str(tls_trust_certs_file) if tls_trust_certs_file else None
        )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def full_topic_name(topic: str) -> str:
    """``name`` -> ``persistent://public/default/name``; full names are checked."""
    if "://" not in topic:
        if "/" in topic:
            raise BrokerError(
                f"topic {topic!r}: give a bare name or persistent://tenant/namespace/name"
            )
        return f"{_PERSISTENT_PREFIX}public/default/{topic}"
    if not topic.startswith(_PERSISTENT_PREFIX) or topic.count("/") != 4:
        raise BrokerError(
            f"topic {topic!r}: partitioned topics must be persistent://tenant/namespace/name"
        )
    return topic


def ensure_partitioned_topic(
    broker: BrokerHandle,
    topic: str,
    partitions: int,
    *,
    auth_token: str | None = None,
    tls_trust_certs_file: str | Path | None = None,
) -> str:
    """Create `topic` with `partitions` partitions unless it exists with that many.

    Returns the full topic name. Raises BrokerCapabilityError on a broker without
    the admin API (the embedded broker, or an external one given no admin URL), and
    BrokerError when the topic exists with another partition count.
    """
    if partitions < 1:
        raise BrokerError(f"topic {topic!r}: partitions must be at least 1, got {partitions}")
    if broker.admin_url is None:
        if broker.kind == "embedded":
            reason = (
                "the embedded broker (pulsar-lite) has no admin REST API and cannot "
                "create partitioned topics; use a real Apache Pulsar broker "
                "(--pulsar-url pulsar://..., or `perfwatch dev pulsar`) for partitions"
            )
        else:
            reason = "no admin URL was given for this broker (pass admin_url)"
        raise BrokerCapabilityError(
            f"cannot create partitioned topic {topic!r} ({partitions} partitions): {reason}"
        )
    name = full_topic_name(topic)
    path = "/admin/v2/persistent/" + name.removeprefix(_PERSISTENT_PREFIX) + "/partitions"
    options = {"auth_token": auth_token, "tls_trust_certs_file": tls_trust_certs_file}
    status, body = admin_request(broker.admin_url, "PUT", path, body=partitions, **options)
    if status in (200, 204):
        return name
    if status != 409:
        raise BrokerError(
            f"creating partitioned topic {name} at {broker.admin_url} failed: "
            f"HTTP {status} {body.decode(errors='replace').strip()}"
        )
    status, body = admin_request(broker.admin_url, "GET", path, **options)
    if status != 200:
        raise BrokerError(
            f"topic {name} exists but its partition count could not be read: "
            f"HTTP {status} {body.decode(errors='replace').strip()}"
        )
    existing = json.loads(body).get("partitions", 0)
    if existing != partitions:
        raise BrokerError(
            f"topic {name} already exists with {existing} partitions, not {partitions}"
            + (" (it is not partitioned)" if existing == 0 else "")
        )
    return name


# --- helpers for brokers run as local child processes -------------------------------


class ChildProcessBroker(ABC):
    """Lifecycle shared by brokers run as a child process; a context manager."""

    _process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @abstractmethod
    def start(self) -> Self:
        """Start the process and return once the broker serves clients."""

    @abstractmethod
    def stop(self, *, kill: bool = False) -> None:
        """Stop the process: SIGTERM then SIGKILL after a grace period, or SIGKILL at once."""

    def restart(self, *, kill: bool = False) -> Self:
        """Stop (SIGKILL when `kill`) and start again on the same data and ports."""
        self.stop(kill=kill)
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


LOG_TAIL_LINES = 40


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 right now (the OS picks them)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:`port`.

    SO_REUSEADDR, as servers set it, so that connections of a just-stopped broker
    lingering in TIME_WAIT do not count as "in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Last `lines` lines of a text file, or a note that it does not exist."""
    if not path.is_file():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def stop_process(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL (at once if `grace` <= 0); reaps it."""
    if process.poll() is None:
        if grace <= 0:
            process.kill()
        else:
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
    process.wait()


def listening_addresses(pid: int) -> list[str]:
    """Local addresses of the TCP sockets `pid` listens on (Linux /proc), e.g. 127.0.0.1:6650."""
    inodes = set()
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    for fd in descriptors:
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A = LISTEN
                continue
            host_hex, port_hex = fields[1].split(":")
            packed = bytes.fromhex(host_hex)
            if sys.byteorder == "little":  # /proc prints each 32-bit word in host order
                packed = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
            addresses.append(f"{socket.inet_ntop(family, packed)}:{int(port_hex, 16)}")
    return addresses


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return host.startswith("127.") or host == "::1"
