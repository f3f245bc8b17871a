"""SIGTERM and SIGINT at every stage of the long-running commands end them by the
convention (src/perfwatch/cli/errors.py): SIGTERM is an orderly stop (exit status 0),
SIGINT an interruption (130), never a death by the signal nor a traceback."""

from __future__ import annotations

import os
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
import psutil
import pytest

from perfwatch.brokers.handle import BrokerHandle

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]


def _lines_until(stream: IO[str], marker: str, timeout_s: float = 120) -> list[str]:
    """The lines of `stream` up to the first that contains `marker`.

    Read a byte at a time straight from the pipe: a buffered readline would keep a
    second line already written out of sight of select. The rest stays in the pipe.
    """
    deadline = time.monotonic() + timeout_s
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    lines: list[str] = []
    line = b""
    while not lines or marker not in lines[-1]:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and selector.select(remaining), f"no {marker!r} in {lines}"
        byte = os.read(stream.fileno(), 1)
        assert byte, f"output ended without {marker!r}: {lines}"
        line += byte
        if byte == b"\n":
            lines.append(line.decode())
            line = b""
    return lines


def _started(command: list[str], tmpdir: Path | None = None) -> subprocess.Popen[str]:
    """`command` running; its temporary folders in `tmpdir` when given."""
    return subprocess.Popen(
        [*PERFWATCH, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)},
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


class _KilledBySigterm(Exception):
    """What SIGTERM's default action, the process's death (status 143), is in the test."""


def test_serve_stopped_while_it_loads_its_settings_ends_by_the_convention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its imports and settings take a second or more on a busy machine, and a SIGTERM
    then killed it (status 143) instead of stopping it (0)."""
    from click.testing import CliRunner

    from perfwatch.cli import serve
    from perfwatch.cli.main import main

    def stopped_while_loading(config_path: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the stop ends the command before the settings are read")

    def die(signum: int, frame: object) -> None:
        raise _KilledBySigterm

    monkeypatch.setattr(serve, "load_command_config", stopped_while_loading)
    previous = signal.signal(signal.SIGTERM, die)
    try:
        result = CliRunner().invoke(main, ["serve"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.exception is None, result.exception
    assert result.exit_code == 0, result.output


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


# --- perfwatch dev: a signal at any stage of the broker's start-up, and once it runs --------


def _first_child(process: subprocess.Popen[str], timeout_s: float = 120) -> psutil.Process:
    """The first child process `process` starts (the broker)."""
    deadline = time.monotonic() + timeout_s
    while not (children := psutil.Process(process.pid).children(recursive=True)):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no child process started"
        time.sleep(0.05)
    return children[0]


def _survivors(folder: Path) -> list[str]:
    """Command lines of live processes that name `folder` (where the broker's data is)."""
    found = []
    for candidate in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(candidate.info["cmdline"] or ())
        if str(folder) in cmdline and candidate.pid != os.getpid():
            found.append(f"{candidate.pid}: {cmdline[:200]}")
    return found


def _assert_stopped_by_the_convention(
    process: subprocess.Popen[str], stderr: str, status: int, folder: Path
) -> None:
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr
    assert "error:" not in stderr
    assert _survivors(folder) == []  # no broker left behind, seen or not


SIGNALS = [(signal.SIGTERM, 0), (signal.SIGINT, 130)]


@pytest.mark.pulsar
@pytest.mark.parametrize(("received", "status"), SIGNALS)
def test_dev_pulsar_stopped_right_after_starting_leaves_no_java(
    pulsar_jars: Path, tmp_path: Path, received: signal.Signals, status: int
) -> None:
    # At once after the marker: the signal lands before, inside or after starting Java.
    command = _started(["dev", "pulsar"], tmpdir=tmp_path)
    assert command.stderr is not None
    try:
        _lines_until(command.stderr, "Starting the Pulsar standalone")
    finally:
        _, stderr = _ended(command, received)
    _assert_stopped_by_the_convention(command, stderr, status, tmp_path)
    assert "standalone ready" not in stderr
    assert not list(tmp_path.glob("perfwatch-pulsar-*")), "the temporary data folder is removed"


@pytest.mark.pulsar
@pytest.mark.parametrize(("received", "status"), SIGNALS)
def test_dev_pulsar_stopped_while_java_starts_does_not_wait_for_it(
    pulsar_jars: Path, tmp_path: Path, received: signal.Signals, status: int
) -> None:
    command = _started(["dev", "pulsar"], tmpdir=tmp_path)
    try:
        java = _first_child(command)
    finally:
        _, stderr = _ended(command, received)
    _assert_stopped_by_the_convention(command, stderr, status, tmp_path)
    assert not java.is_running()
    # Java runs seconds before the standalone is ready: the stop did not wait for that.
    assert "standalone ready" not in stderr


@pytest.mark.pulsar
@pytest.mark.parametrize(("received", "status"), SIGNALS)
def test_dev_pulsar_stopped_once_ready_stops_the_standalone(
    pulsar_jars: Path, tmp_path: Path, received: signal.Signals, status: int
) -> None:
    command = _started(["dev", "pulsar"], tmpdir=tmp_path)
    assert command.stdout is not None
    try:
        java = _first_child(command)
        _lines_until(command.stdout, "admin URL:", timeout_s=300)
    finally:
        _, stderr = _ended(command, received)
    _assert_stopped_by_the_convention(command, stderr, status, tmp_path)
    assert "Stopping ..." in stderr
    assert not java.is_running()


@pytest.mark.parametrize(("received", "status"), SIGNALS)
def test_dev_embedded_stopped_while_starting_leaves_no_broker(
    tmp_path: Path, received: signal.Signals, status: int
) -> None:
    command = _started(["dev", "embedded", "--data-dir", str(tmp_path / "broker")])
    try:
        broker = _first_child(command)
    finally:
        _, stderr = _ended(command, received)
    _assert_stopped_by_the_convention(command, stderr, status, tmp_path)
    assert not broker.is_running()


def test_demo_interrupted_while_the_processor_runs_ends_quietly(tmp_path: Path) -> None:
    """Ctrl-C with the processor mid-run: it stops and closes its producers before the
    client closes, so neither it nor the Pulsar client logs an error on the way out."""
    command = _started(["demo", "--keep", str(tmp_path / "demo")], tmp_path)
    try:
        assert command.stdout is not None
        _lines_until(command.stdout, "Verdicts as the processor publishes them")
    finally:
        _, stderr = _ended(command, signal.SIGINT)
    _assert_stopped_by_the_convention(command, stderr, 130, tmp_path)
    assert "ERROR" not in stderr and "AlreadyClosed" not in stderr, stderr
