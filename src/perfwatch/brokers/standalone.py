"""A real Apache Pulsar standalone from the official Maven jars, without Docker.

`fetch_jars()` downloads ``org.apache.pulsar:pulsar-broker`` and its runtime
dependencies with Maven (the dependency list is ``deploy/pulsar/pom.xml``) into a
cache folder outside the repository, once. `PulsarStandalone` runs
``PulsarStandaloneStarter`` (broker + one in-process bookie, RocksDB metadata) on
loopback ports with the config and log4j2 files of ``deploy/pulsar/``, waits until
the cluster, ``public/default`` and the health check answer, and stops it by
unloading its namespaces, then SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

from perfwatch.brokers.admin import admin_request, readiness_problem
from perfwatch.brokers.handle import BrokerError
from perfwatch.brokers.process import (
    LOG_TAIL_LINES,
    ChildProcessBroker,
    free_loopback_ports,
    loopback_interface,
    port_is_free,
    resident_bytes,
    stop_process,
    tail,
)

log = logging.getLogger(__name__)

DEPLOY_DIR = Path(__file__).resolve().parents[3] / "deploy" / "pulsar"
HOME_ENV = "PERFWATCH_PULSAR_HOME"
STARTER_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"
FETCH_TIMEOUT = 1800.0  # the first fetch downloads about 270 MB
# Bookie registration loop detection on a restart (see _bookie_registration_flaps).
FLAP_CHECK_S = 2.0
MAX_FLAPS = 200
_FLAP_LINE = re.compile(rb"Lock on resource /ledgers/available/\S+ was invalidated")

# Flags Pulsar's own launcher passes on Java 17 (reflection into JDK internals used
# by netty, BookKeeper and the metrics code), plus a small footprint for a 2-core
# machine shared with other services: serial GC, C1 only, bounded direct memory.
_JVM_ACCESS_FLAGS = [
    *(
        f"--add-opens={module}=ALL-UNNAMED"
        for module in (
            "java.base/java.io",
            "java.base/java.util.zip",
            "java.base/java.nio",
            "java.base/jdk.internal.misc",
            "java.base/sun.net",
            "java.base/jdk.internal.platform",
            "java.management/sun.management",
            "jdk.management/com.sun.management.internal",
        )
    ),
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dbookkeeper.metadata.bookie.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
]
_JVM_FOOTPRINT_FLAGS = [
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
]
_PR_SET_PDEATHSIG = 1


class StandaloneError(BrokerError):
    """The standalone could not be fetched, started or stopped."""


def deploy_dir() -> Path:
    """The folder with pom.xml, standalone.conf and log4j2.xml (a source checkout)."""
    if not (DEPLOY_DIR / "pom.xml").is_file():
        raise StandaloneError(
            f"{DEPLOY_DIR} not found: the Pulsar standalone launcher needs a perfwatch "
            "source checkout (it reads deploy/pulsar/pom.xml, standalone.conf, log4j2.xml)"
        )
    return DEPLOY_DIR


def pulsar_version() -> str:
    """The `pulsar.version` property of deploy/pulsar/pom.xml."""
    pom = deploy_dir() / "pom.xml"
    match = re.search(r"<pulsar\.version>([^<]+)</pulsar\.version>", pom.read_text())
    if match is None:
        raise StandaloneError(f"{pom}: no <pulsar.version> property")
    return match.group(1).strip()


def pulsar_home() -> Path:
    """Cache folder of the jars: $PERFWATCH_PULSAR_HOME or ~/.cache/perfwatch/pulsar-<version>."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).expanduser()
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache_root / "perfwatch" / f"pulsar-{pulsar_version()}"


def _fetch_fingerprint() -> str:
    """Changes whenever the dependency list changes, so an edited pom refetches."""
    return hashlib.sha256((deploy_dir() / "pom.xml").read_bytes()).hexdigest()


def jars_ready(home: Path | None = None) -> bool:
    """True when `home`/lib holds a complete fetch of the current pom."""
    home = home or pulsar_home()
    marker = home / "lib.complete"
    return marker.is_file() and marker.read_text().strip() == _fetch_fingerprint()


def fetch_jars(home: Path | None = None, *, mvn: str = "mvn") -> Path:
    """Download the standalone's jars once; returns the lib folder (the classpath).

    A marker file records the pom it was fetched for; a partial or outdated fetch
    is redone from scratch. Concurrent callers wait for each other (file lock).
    """
    home = home or pulsar_home()
    lib_dir = home / "lib"
    if jars_ready(home):
        return lib_dir
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jars_ready(home):
            return lib_dir
        mvn_path = shutil.which(mvn)
        if mvn_path is None:
            raise StandaloneError(
                f"Maven ({mvn}) not found on PATH: it fetches the Pulsar jars into {home}; "
                "install it (e.g. apt-get install maven)"
            )
        partial = home / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        command = [
            mvn_path,
            "-B",
            "-q",
            "-f",
            str(deploy_dir() / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={partial}",
        ]
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=FETCH_TIMEOUT
            )
        except subprocess.TimeoutExpired as error:
            raise StandaloneError(
                f"fetching Pulsar {pulsar_version()} jars took over {FETCH_TIMEOUT:.0f} s: "
                f"{' '.join(command)}"
            ) from error
        if result.returncode != 0 or not any(partial.glob("pulsar-broker-*.jar")):
            output = (result.stdout + result.stderr).splitlines()
            raise StandaloneError(
                f"fetching Pulsar {pulsar_version()} jars failed (exit {result.returncode}): "
                f"{' '.join(command)}\n" + "\n".join(output[-LOG_TAIL_LINES:])
            )
        shutil.rmtree(lib_dir, ignore_errors=True)
        partial.rename(lib_dir)
        (home / "lib.complete").write_text(_fetch_fingerprint() + "\n")
    return lib_dir


def render_config(template: str, overrides: dict[str, str]) -> str:
    """`template` (a Java properties file) with `overrides` replacing or adding keys."""
    pending = dict(overrides)
    lines = []
    for line in template.splitlines():
        key = line.split("=", 1)[0].strip()
        if not line.lstrip().startswith("#") and key in pending:
            line = f"{key}={pending.pop(key)}"
        lines.append(line)
    lines.extend(f"{key}={value}" for key, value in pending.items())
    return "\n".join(lines) + "\n"


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook asking Linux to SIGTERM the child when this process dies.

    Without it a test run killed with SIGKILL would leave a 300 MB JVM behind. The
    signal fires when the *thread* that started the child exits, so start the
    standalone from a long-lived thread (the main thread in the CLI and tests).
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return hook


class PulsarStandalone(ChildProcessBroker):
    """One Pulsar standalone process; a context manager that starts and stops it.

    Without `data_dir`, each start uses a fresh temporary folder deleted on stop.
    With `data_dir`, data survives stops and `restart()`; the ports are chosen once
    and written to `data_dir`/ports.json so later starts reuse them.
    """

    def __init__(
        self,
        *,
        lib_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        broker_port: int | None = None,
        web_port: int | None = None,
        heap_mb: int = 512,
        direct_memory_mb: int = 256,
        java: str = "java",
        startup_timeout: float = 240.0,
        stop_grace: float = 30.0,
        config_overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.lib_dir = Path(lib_dir) if lib_dir is not None else pulsar_home() / "lib"
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self.heap_mb = heap_mb
        self.direct_memory_mb = direct_memory_mb
        self.java = java
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        # standalone.conf keys set over deploy/pulsar's, e.g. a shorter retention check
        self.config_overrides = dict(config_overrides or {})
        self._requested_ports = (broker_port, web_port)
        self._ports: tuple[int, int, int] | None = None
        self._run_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    # --- addresses ------------------------------------------------------------------

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self._require_ports()[0]}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self._require_ports()[1]}"

    @property
    def log_file(self) -> Path:
        if self._run_dir is None:
            raise StandaloneError("the standalone has not been started")
        return self._run_dir / "logs" / "pulsar.log"

    def _require_ports(self) -> tuple[int, int, int]:
        if self._ports is None:
            raise StandaloneError("the standalone has not been started")
        return self._ports

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> Self:
        """Start and wait until ready; on failure stop it and raise with the log tail."""
        if self._process is not None:
            raise StandaloneError(f"the standalone is already running (pid {self._process.pid})")
        java = self._check_prerequisites()
        began = time.monotonic()
        try:
            run_dir = self._prepare_run_dir()
            reused = (run_dir / "bookkeeper").is_dir()
            for attempt in (1, 2):
                log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
                self._launch(java, run_dir)
                self._wait_until_ready(began)
                if not reused or not self._bookie_registration_flaps(log_offset):
                    break
                if attempt == 2:
                    raise StandaloneError(
                        "the bookie's registration keeps flapping after an orderly restart"
                        f"\n{self._log_tails()}"
                    )
                # An orderly stop removes the registration; the next start is clean.
                log.warning("bookie registration flapping after an unclean stop; restarting")
                self.stop()
        except BaseException as error:
            self._abandon_start(error)  # also removes a temporary data folder
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _bookie_registration_flaps(self, log_offset: int) -> bool:
        """Whether the bookie's registration is caught in a delete/re-create loop.

        Seen after a SIGKILL on old data (1 start in about 15 here): the RocksDB
        metadata store still holds the dead bookie's registration, and the new
        bookie and its lock watcher delete and re-create it hundreds of times a
        second, while no topic can be opened. A healthy start logs a few such
        revalidations at most.
        """
        time.sleep(FLAP_CHECK_S)
        with self.log_file.open("rb") as pulsar_log:
            pulsar_log.seek(log_offset)
            logged = pulsar_log.read()
        return len(_FLAP_LINE.findall(logged)) > MAX_FLAPS

    def _launch(self, java: str, run_dir: Path) -> None:
        broker_port, web_port, bookie_port = self._choose_ports(run_dir)
        template = (deploy_dir() / "standalone.conf").read_text()
        config = render_config(
            template,
            {
                "brokerServicePort": str(broker_port),
                "webServicePort": str(web_port),
                # Without these the bookie takes a random port on all interfaces.
                "allowEphemeralPorts": "true",
                "listeningInterface": loopback_interface(),
                **self.config_overrides,
            },
        )
        (run_dir / "standalone.conf").write_text(config)
        (run_dir / "logs").mkdir(exist_ok=True)
        command = [
            java,
            "-cp",
            f"{self.lib_dir}/*",
            f"-Xmx{self.heap_mb}m",
            f"-XX:MaxDirectMemorySize={self.direct_memory_mb}m",
            *_JVM_FOOTPRINT_FLAGS,
            *_JVM_ACCESS_FLAGS,
            f"-Dlog4j.configurationFile={deploy_dir() / 'log4j2.xml'}",
            f"-Dpulsar.log.dir={run_dir / 'logs'}",
            STARTER_CLASS,
            "--config",
            str(run_dir / "standalone.conf"),
            "--no-functions-worker",
            "--no-stream-storage",
            "--advertised-address",
            "127.0.0.1",
            "--metadata-dir",
            str(run_dir / "metadata"),
            "--bookkeeper-dir",
            str(run_dir / "bookkeeper"),
            "--bookkeeper-port",
            str(bookie_port),
        ]
        # The child keeps its own copy of the log file descriptor.
        with open(run_dir / "logs" / "stdout.log", "ab") as stdout:
            self._spawn(
                command,
                cwd=run_dir,  # the starter resolves a few relative default paths here
                stdout=stdout,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent(),
            )

    def _check_prerequisites(self) -> str:
        java = shutil.which(self.java)
        if java is None:
            raise StandaloneError(
                f"Java ({self.java}) not found on PATH: the Pulsar standalone needs Java 17+"
            )
        if not any(self.lib_dir.glob("pulsar-broker-*.jar")):
            raise StandaloneError(
                f"no Pulsar jars in {self.lib_dir}: run `perfwatch dev pulsar --fetch-only`"
            )
        return java

    def _prepare_run_dir(self) -> Path:
        if self.data_dir is None:
            # Ctrl-C or SIGTERM between making the folder and remembering it would leave it
            # behind: the signal waits until stop() can find the folder
            stopping = {signal.SIGINT, signal.SIGTERM}
            before = signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
            try:
                self._run_dir = Path(tempfile.mkdtemp(prefix="perfwatch-pulsar-"))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._run_dir = self.data_dir
        return self._run_dir

    def _choose_ports(self, run_dir: Path) -> tuple[int, int, int]:
        ports_file = run_dir / "ports.json"
        if self._ports is None:
            # Requested ports first, then the ones this data folder used before.
            saved = json.loads(ports_file.read_text()) if ports_file.is_file() else {}
            taken = {*self._requested_ports, *saved.values()}
            fresh = iter(p for p in free_loopback_ports(3 + len(taken)) if p not in taken)
            self._ports = (
                self._requested_ports[0] or saved.get("broker") or next(fresh),
                self._requested_ports[1] or saved.get("web") or next(fresh),
                saved.get("bookie") or next(fresh),
            )
        busy = [port for port in self._ports if not port_is_free(port)]
        if busy:
            raise StandaloneError(
                f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use; the standalone "
                f"in {run_dir} needs ports {self._ports} (broker, web, bookie)"
            )
        if self.data_dir is not None:
            broker, web, bookie = self._ports
            ports_file.write_text(json.dumps({"broker": broker, "web": web, "bookie": bookie}))
        return self._ports

    def _wait_until_ready(self, began: float) -> None:
        assert self._process is not None
        deadline = began + self.startup_timeout
        while (problem := readiness_problem(self.admin_url)) is not None:
            if self._process.poll() is not None:
                raise StandaloneError(
                    f"Pulsar standalone exited with code {self._process.returncode} during "
                    f"start-up ({problem})\n{self._log_tails()}"
                )
            if time.monotonic() > deadline:
                raise StandaloneError(
                    f"Pulsar standalone not ready after {self.startup_timeout:.0f} s "
                    f"({problem})\n{self._log_tails()}"
                )
            time.sleep(0.25)

    def _log_tails(self) -> str:
        logs = self.log_file.parent
        return (
            f"--- {logs / 'pulsar.log'} (tail)\n{tail(logs / 'pulsar.log')}\n"
            f"--- {logs / 'stdout.log'} (tail)\n{tail(logs / 'stdout.log')}"
        )

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM, then SIGKILL after `stop_grace` s; `kill=True` sends SIGKILL at once.

        A temporary data folder is deleted; a given `data_dir` is kept.
        """
        process, self._process = self._process, None
        if process is not None:
            try:
                if not kill:
                    self._unload_namespaces()
            finally:
                stop_process(process, 0 if kill else self.stop_grace)
        if self.data_dir is None and self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
            self._ports = None

    def _unload_namespaces(self) -> None:
        """Close every topic while the bookie still runs, before SIGTERM.

        On SIGTERM the JVM runs the bookie's own shutdown hook alongside the
        standalone's; a cursor closed after the bookie went down cannot write its
        position, and its acknowledgements come back after the restart. Unloading
        first persists the cursors. Best effort: SIGTERM follows whatever happens.
        """
        try:
            for tenant in self._admin_list("/admin/v2/tenants"):
                for namespace in self._admin_list(f"/admin/v2/namespaces/{tenant}"):
                    admin_request(self.admin_url, "PUT", f"/admin/v2/namespaces/{namespace}/unload")
        except (OSError, ValueError):
            pass

    def _admin_list(self, path: str) -> list[str]:
        status, body = admin_request(self.admin_url, "GET", path)
        return json.loads(body) if status == 200 else []

    def restart(self, *, kill: bool = False) -> Self:
        if self.data_dir is None:
            raise StandaloneError("restart() needs a data_dir: a temporary one is deleted on stop")
        return super().restart(kill=kill)

    def rss_bytes(self) -> int | None:
        """Resident memory of the running JVM, or None."""
        return None if self._process is None else resident_bytes(self._process.pid)
