"""The embedded default broker: pulsar-lite as a child process on a loopback port.

pulsar-lite (PyPI ``pulsar-lite``) ships a small Rust broker that speaks the Pulsar
binary protocol, so perfwatch uses the same `pulsar-client` code against it as
against Apache Pulsar. What it does and does not support is measured in
tests/brokers/test_embedded_broker.py and summarised in docs/brokers.md.

Layout of the data folder (default ``$XDG_DATA_HOME/perfwatch/embedded``, else
``~/.local/share/perfwatch/embedded``)::

    pulsar-lite.toml   written before every start: warn-level logs, metrics off
    broker.rocksdb/    the broker's data (RocksDB; locked while a broker runs)
    broker.pid         JSON: broker pid, port, and the pid of the process that owns it
    broker.port        the port of the last start, taken again by the next one when free
    broker.log         the broker's output

Without the config file pulsar-lite opens a Prometheus server on 0.0.0.0:8080 and
logs every message at info level; a missing config file is silently ignored, so
after start-up the broker's listening sockets are checked to be loopback only.
A broker whose owner died (e.g. SIGKILL) keeps the RocksDB lock: the next start
finds it through the pid file and ends it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

import pulsar
from pulsar_lite.binary_finder import find_pulsar_lite_binary

from perfwatch.brokers.handle import BrokerError, make_client
from perfwatch.brokers.process import (
    ChildProcessBroker,
    command_line,
    end_process,
    free_loopback_ports,
    is_loopback,
    listening_addresses,
    parent_pid,
    port_is_free,
    stop_process,
    tail,
)

logger = logging.getLogger(__name__)

CONFIG_NAME = "pulsar-lite.toml"
DB_NAME = "broker.db"  # pulsar-lite stores it as broker.rocksdb/
DB_FOLDER = "broker.rocksdb"
PID_NAME = "broker.pid"
PORT_NAME = "broker.port"
LOG_NAME = "broker.log"

BROKER_CONFIG = """\
# Written by perfwatch before each start of the embedded broker; edits are lost.
# Metrics off: pulsar-lite's default is a Prometheus server on 0.0.0.0:8080.
log_level = "warn"

[metrics]
enabled = false
"""


class EmbeddedBrokerError(BrokerError):
    """The embedded broker could not be started or its data folder is in use."""


class DataFolderInUse(EmbeddedBrokerError):
    """Another running process's embedded broker holds the data folder: a conflict the
    user resolves (as a port in use), not a broker failure."""


def default_data_dir() -> Path:
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "perfwatch" / "embedded"


class _PidFile:
    """The broker.pid record: which process runs the broker on a folder, for whom."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / PID_NAME
        self.db_path = str(data_dir / DB_NAME)

    def write(self, pid: int, port: int) -> None:
        record = {"pid": pid, "port": port, "owner_pid": os.getpid()}
        self.path.write_text(json.dumps(record) + "\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def live_broker(self) -> dict[str, int] | None:
        """The recorded broker if it still runs on this folder; a stale file is removed."""
        try:
            record = json.loads(self.path.read_text())
            pid, port, owner = int(record["pid"]), int(record["port"]), int(record["owner_pid"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring unreadable embedded-broker pid file %s", self.path)
            self.remove()
            return None
        arguments = command_line(pid)
        # The pid may have been reused: only a pulsar-lite on this data path counts.
        if arguments is None or self.db_path not in arguments:
            self.remove()
            return None
        return {"pid": pid, "port": port, "owner_pid": owner}


def _owned(record: dict[str, int]) -> bool:
    """True while the process that started the broker is its parent and still alive."""
    return parent_pid(record["pid"]) == record["owner_pid"]


def holds_broker_data(data_dir: Path) -> bool:
    """Whether a broker ever ran on `data_dir`: it has data."""
    return (data_dir / DB_FOLDER).exists()


def find_running_broker(data_dir: str | Path | None = None) -> str | None:
    """Service URL of a broker another live perfwatch process runs on `data_dir`, if any."""
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    record = _PidFile(folder.resolve()).live_broker()
    if record is None or not _owned(record):
        return None
    return f"pulsar://127.0.0.1:{record['port']}"


class EmbeddedBroker(ChildProcessBroker):
    """A pulsar-lite child process; a context manager that starts and stops it."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        port: int | None = None,
        startup_timeout: float = 15.0,
        stop_grace: float = 10.0,
    ) -> None:
        self.data_dir = (Path(data_dir) if data_dir is not None else default_data_dir()).resolve()
        self.port = port
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self._pid_file = _PidFile(self.data_dir)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def service_url(self) -> str:
        if self.port is None:
            raise EmbeddedBrokerError("the embedded broker has not been started")
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / LOG_NAME

    def start(self) -> Self:
        """Start on `port` (default: a free one), wait for a real client round trip."""
        if self._process is not None:
            raise EmbeddedBrokerError(f"already running (pid {self._process.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._reclaim_orphan()
        config = self.data_dir / CONFIG_NAME
        config.write_text(BROKER_CONFIG)
        if self.port is None:
            self.port = self._last_port_if_free() or free_loopback_ports(1)[0]
        elif not port_is_free(self.port):
            raise EmbeddedBrokerError(f"port {self.port} on 127.0.0.1 is already in use")
        (self.data_dir / PORT_NAME).write_text(f"{self.port}\n")
        command = [
            find_pulsar_lite_binary(),
            "--config",
            str(config),
            "--addr",
            f"127.0.0.1:{self.port}",
            "--db-path",
            str(self.data_dir / DB_NAME),
            "--log-level",
            "warn",
        ]
        environment = {name: value for name, value in os.environ.items() if name != "RUST_LOG"}
        try:
            with open(self.log_file, "ab") as log:
                process = self._spawn(
                    command,
                    cwd=self.data_dir,
                    env=environment,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            # Recorded at once, so a broker orphaned even during start-up is found later.
            self._pid_file.write(process.pid, self.port)
            self._wait_until_ready()
            self._check_loopback_only()
        except BaseException as error:
            self._abandon_start(error)
            raise
        return self

    def _last_port_if_free(self) -> int | None:
        """The port this folder's broker had before: the clients of a restarted `serve`'s
        broker (`watch`, `forward`, `dashboard`) keep retrying that URL, and reconnect."""
        try:
            port = int((self.data_dir / PORT_NAME).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return port if 0 < port < 65536 and port_is_free(port) else None

    def _reclaim_orphan(self) -> None:
        record = self._pid_file.live_broker()
        if record is None:
            return
        if _owned(record):
            raise DataFolderInUse(
                f"{self.data_dir} is in use by the embedded broker pid {record['pid']} "
                f"(pulsar://127.0.0.1:{record['port']}) of running process "
                f"{record['owner_pid']}; stop that process or use another data folder"
            )
        logger.warning(
            "ending orphaned embedded broker pid %d on %s (the process %d that started "
            "it is gone) so that its data folder lock is released",
            record["pid"],
            self.data_dir,
            record["owner_pid"],
        )
        end_process(record["pid"], self.stop_grace)
        self._pid_file.remove()

    def _wait_until_ready(self) -> None:
        assert self._process is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        problem: str | None = "not started"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedBrokerError(
                    f"embedded broker exited with code {self._process.returncode} during "
                    f"start-up on {self.data_dir}; log tail ({self.log_file}):\n"
                    f"{tail(self.log_file)}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError as error:
                problem = f"port {self.port}: {error}"
                time.sleep(0.05)
                continue
            problem = self._client_round_trip()
            if problem is None:
                return
            time.sleep(0.1)
        raise EmbeddedBrokerError(
            f"embedded broker on port {self.port} not ready after {self.startup_timeout:.0f} s "
            f"({problem}); log tail ({self.log_file}):\n{tail(self.log_file)}"
        )

    def _client_round_trip(self) -> str | None:
        """None when a real Pulsar client can connect and look a topic up."""
        client = make_client(
            self.service_url,
            operation_timeout_seconds=5,
            connection_timeout_ms=2000,
            log_level="error",
        )
        try:
            client.get_topic_partitions("persistent://public/default/perfwatch-readiness")
        except pulsar.Interrupted:
            raise KeyboardInterrupt from None  # a stop, not a broker that is not ready yet
        except Exception as error:  # any client failure means "not ready yet"
            return f"client lookup: {error}"
        finally:
            client.close()
        return None

    def _check_loopback_only(self) -> None:
        assert self._process is not None
        exposed = [
            address
            for address in listening_addresses(self._process.pid)
            if not is_loopback(address)
        ]
        if exposed:
            raise EmbeddedBrokerError(
                f"embedded broker listens on non-loopback address(es) {', '.join(exposed)} "
                f"despite {self.data_dir / CONFIG_NAME}; refusing to run it"
            )

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM then SIGKILL after `stop_grace` s; `kill=True` sends SIGKILL at once."""
        process, self._process = self._process, None
        if process is None:
            return
        stop_process(process, 0 if kill else self.stop_grace)
        self._pid_file.remove()
