"""Brokers run as local child processes: lifecycle, ports, logs, and what the OS says (psutil)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

import psutil


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
        """Start the process and return once the broker serves clients.

        Safe against an interrupt (KeyboardInterrupt) at any point: the process is
        recorded as soon as it exists (`_spawn`), and an interrupted start kills it.
        """

    def _spawn(self, command: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start the broker's process, in a process group of its own, and record it.

        Signals are held back until it is recorded, so a stop never loses the child
        (an interrupt inside `subprocess.Popen` would). In its own group the broker is
        not reached by a terminal's Ctrl-C: this process stops it, in order.
        """
        with signals_deferred():
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, process_group=0, **options
            )
        return self._process

    def _abandon_start(self, error: BaseException) -> None:
        """Stop after a failed start; at once when interrupted, not waiting for the broker."""
        self.stop(kill=isinstance(error, KeyboardInterrupt))

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


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def signals_deferred(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Hold `signals` back during the block, then hand them to the handlers in place before.

    For a step that must not be cut in two, such as starting a child and recording it.
    Only the main thread runs signal handlers; in another thread this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    try:
        with ExitStack() as restore:
            for sig in signals:
                restore.callback(signal.signal, sig, signal.signal(sig, hold))
            yield
    finally:
        for signum in received:
            signal.raise_signal(signum)


def stop_process(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL (at once if `grace` <= 0); reaps it.

    The SIGKILL goes to the child's whole process group when it leads one. Interrupted
    while waiting, it still kills the child: no process outlives its stop.
    """
    try:
        if process.poll() is None and grace > 0:
            process.terminate()
            process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            _kill(process)
        process.wait()


def _kill(process: subprocess.Popen[bytes]) -> None:
    # Not yet reaped, so its pid (and a group of that id) cannot belong to another process.
    if os.getpgid(process.pid) == process.pid:
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()


def listening_addresses(pid: int) -> list[str]:
    """Local addresses of the TCP sockets `pid` listens on, e.g. ``127.0.0.1:6650``."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [
        f"{connection.laddr.ip}:{connection.laddr.port}"
        for connection in connections
        if connection.status == psutil.CONN_LISTEN
    ]


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return host.startswith("127.") or host == "::1"


def command_line(pid: int) -> list[str] | None:
    """Arguments of a live process, or None if there is no such process (or it is a zombie)."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def parent_pid(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def end_process(pid: int, grace: float) -> None:
    """SIGTERM a process that need not be our child, SIGKILL it after `grace` seconds;
    returns once it is gone."""
    try:
        process = psutil.Process(pid)
        process.terminate()
        try:
            process.wait(timeout=grace)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait()
    except psutil.NoSuchProcess:
        return


def resident_bytes(pid: int) -> int | None:
    """Resident memory of a live process, or None."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def loopback_interface() -> str:
    """Name of the interface that carries 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(
            address.family == socket.AF_INET and address.address.startswith("127.")
            for address in addresses
        ):
            return name
    return "lo"
