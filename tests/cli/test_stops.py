"""SIGTERM and SIGINT at every stage of the long-running commands end them by the
convention (src/perfwatch/cli/errors.py): SIGTERM is an orderly stop (exit status 0),
SIGINT an interruption (130), never a death by the signal nor a traceback."""

from __future__ import annotations

import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import orjson
import pytest

from perfwatch.brokers.handle import BrokerHandle

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]


def _lines_until(stream: IO[str], marker: str, timeout_s: float = 120) -> list[str]:
    """The lines of `stream` up to the first that contains `marker`."""
    deadline = time.monotonic() + timeout_s
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    lines: list[str] = []
    while not lines or marker not in lines[-1]:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and selector.select(remaining), f"no {marker!r} in {lines}"
        line = stream.readline()
        assert line, f"output ended without {marker!r}: {lines}"
        lines.append(line)
    return lines


def _started(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PERFWATCH, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ended(process: subprocess.Popen[str], received: signal.Signals) -> tuple[str, str]:
    """Send `received`, wait for the end; the rest of stdout and stderr."""
    process.send_signal(received)
    try:
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def silent_broker() -> Iterator[socket.socket]:
    """A listener that accepts connections and never answers: a broker that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    yield listener
    listener.close()


def _while_connecting(
    listener: socket.socket, command: list[str], received: signal.Signals
) -> tuple[int, str]:
    """Run `command` against `listener`; once it connected there (it waits for the broker's
    answer, for up to 120 s), send `received`; the exit status and stderr."""
    url = f"pulsar://127.0.0.1:{listener.getsockname()[1]}"
    process = _started([*command, "--pulsar-url", url, "--connect-timeout", "120"])
    connections: list[socket.socket] = []
    try:
        connections.append(listener.accept()[0])
    finally:
        _, stderr = _ended(process, received)
        for connection in connections:
            connection.close()
    return process.returncode, stderr


STOPPING_WHILE_CONNECTING = [
    (["watch"], signal.SIGTERM, 0),
    (["watch"], signal.SIGINT, 130),
    (["forward", "--webhook", "http://127.0.0.1:9/hook"], signal.SIGTERM, 0),
    (["serve", "--store", "sqlite:///{tmp}/state.db"], signal.SIGTERM, 0),
    (["serve", "--store", "sqlite:///{tmp}/state.db"], signal.SIGINT, 130),
]


@pytest.mark.parametrize(("command", "received", "status"), STOPPING_WHILE_CONNECTING)
def test_a_signal_while_connecting_ends_by_the_convention(
    silent_broker: socket.socket,
    tmp_path: Path,
    command: list[str],
    received: signal.Signals,
    status: int,
) -> None:
    arguments = [argument.format(tmp=tmp_path) for argument in command]
    returncode, stderr = _while_connecting(silent_broker, arguments, received)
    assert returncode == status, stderr
    assert "Traceback" not in stderr
    assert "error:" not in stderr


@pytest.mark.parametrize(("received", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_serve_names_its_subscription_type_plainly_and_stops_by_the_convention(
    embedded_broker: BrokerHandle,
    unique_topic: Callable[[str], str],
    tmp_path: Path,
    received: signal.Signals,
    status: int,
) -> None:
    serve = _started(
        [
            *("serve", "--pulsar-url", embedded_broker.service_url, "--store"),
            f"sqlite:///{tmp_path}/state.db",
            *("--records-topic", unique_topic("records"), "--verdicts-topic"),
            *(unique_topic("verdicts"), "--log-format", "json", "--log-level", "info"),
        ]
    )
    assert serve.stderr is not None
    try:
        started = _lines_until(serve.stderr, '"subscribed"')
    finally:
        _, stderr = _ended(serve, received)
    subscribed = orjson.loads(started[-1])
    # as the other fields: plain values, not a Python enum's repr
    assert subscribed["subscription_type"] in ("Shared", "KeyShared"), subscribed
    assert serve.returncode == status, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("received", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_to_a_running_dashboard_ends_it_by_the_convention(
    tmp_path: Path, received: signal.Signals, status: int
) -> None:
    pytest.importorskip("uvicorn")
    dashboard = _started(
        [
            *("dashboard", "--port", "0", "--no-follow-topic", "--log-level", "info"),
            *("--store", f"sqlite:///{tmp_path}/state.db"),
        ]
    )
    assert dashboard.stderr is not None
    try:
        _lines_until(dashboard.stderr, "Application startup complete")
    finally:
        _, stderr = _ended(dashboard, received)
    assert dashboard.returncode == status, stderr
    assert "Traceback" not in stderr
