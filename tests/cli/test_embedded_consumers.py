"""One consumer a subscription on the embedded broker: a second `serve`, `forward`,
`watch --subscription` or `dashboard --subscription` is told so at once, and a first
one killed leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import orjson
import psutil
import pytest

from perfwatch.brokers.process import end_process

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]
REFUSAL = "perfwatch {command}: error: the embedded broker in {folder} already has a consumer "


def _started(tmp_path: Path, name: str, arguments: list[str]) -> tuple[subprocess.Popen, Path]:
    """`perfwatch ARGUMENTS` running with its data under `tmp_path`, and its stderr's file."""
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [*PERFWATCH, *arguments],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")},
        )
    return process, log


def _wait_for(process: subprocess.Popen, log: Path, marker: str) -> None:
    deadline = time.monotonic() + 120
    while marker not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {marker!r} in: {log.read_text()}"
        time.sleep(0.2)


def _refusal(
    tmp_path: Path, arguments: list[str], **variables: str
) -> subprocess.CompletedProcess[str]:
    """`perfwatch ARGUMENTS` run to its end while another consumer holds the subscription."""
    return subprocess.run(
        [*PERFWATCH, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), **variables},
    )


def _end_all(started: list[subprocess.Popen], embedded: Path) -> None:
    """Kill what still runs, and the broker on `embedded` if a process killed with SIGKILL
    left it behind (its pid file names it while it runs on that folder)."""
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
    pid_file = embedded / "broker.pid"
    if pid_file.exists():
        pid = orjson.loads(pid_file.read_text())["pid"]
        with suppress(psutil.NoSuchProcess):
            if str(embedded) in " ".join(psutil.Process(pid).cmdline()):
                end_process(pid, 10)


def test_a_second_processor_on_the_embedded_broker_is_refused_until_the_first_ends(
    tmp_path: Path,
) -> None:
    """pulsar-lite refuses a second process's consumer on the records subscription and the
    client would retry forever without a word: the second `serve` is refused at once,
    with the way out, and a first one killed with SIGKILL leaves nothing in the way."""
    embedded = tmp_path / "embedded"

    def serve(name: str) -> list[str]:
        store = f"sqlite:///{tmp_path / name}.db"
        return ["serve", "--name", name, "--embedded-dir", str(embedded), "--store", store]

    first, first_log = _started(tmp_path, "first", serve("first"))
    started = [first]
    try:
        _wait_for(first, first_log, "processor started")
        second = _refusal(tmp_path, serve("second"))
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith(
            REFUSAL.format(command="serve", folder=embedded)
            + "on subscription 'perfwatch' of persistent://public/default/perfwatch-records "
            f"(perfwatch serve, pid {first.pid}) and takes one only"
        ), second.stderr
        assert "--pulsar-url" in second.stderr

        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=120) == -signal.SIGKILL
        third, third_log = _started(tmp_path, "third", serve("third"))
        started.append(third)
        _wait_for(third, third_log, "processor started")
        third.send_signal(signal.SIGTERM)
        assert third.wait(timeout=120) == 0, third_log.read_text()
    finally:
        _end_all(started, embedded)


def test_a_second_forwarder_or_watch_on_one_subscription_is_refused(tmp_path: Path) -> None:
    embedded = tmp_path / "data" / "perfwatch" / "embedded"
    forward = ["forward", "--webhook", "http://127.0.0.1:9/hook", "--idle-timeout", "1"]
    first, first_log = _started(tmp_path, "first", forward[:3])
    try:
        _wait_for(first, first_log, "forwarding ")
        second = _refusal(tmp_path, forward)
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith(
            REFUSAL.format(command="forward", folder=embedded) + "on subscription "
            f"'perfwatch-forward' of persistent://public/default/perfwatch-verdicts "
            f"(perfwatch forward, pid {first.pid})"
        ), second.stderr
        watch = _refusal(tmp_path, ["watch", "--subscription", "perfwatch-forward"])
        assert watch.returncode == 2, watch.stderr
        assert watch.stderr.startswith(REFUSAL.format(command="watch", folder=embedded))
        # Another subscription is another consumer's to hold.
        other = _refusal(tmp_path, [*forward, "--subscription", "second-team"])
        assert other.returncode == 0, other.stderr
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0, first_log.read_text()
    finally:
        _end_all([first], embedded)


def test_every_command_finds_the_broker_in_the_folder_it_is_given(tmp_path: Path) -> None:
    """`--embedded-dir` and PERFWATCH_BROKER_EMBEDDED_DIR name the folder for `forward`
    and `watch` as for `serve`: the second one meets the first one's consumer there."""
    embedded = tmp_path / "team-broker"
    forward = ["forward", "--webhook", "http://127.0.0.1:9/hook", "--embedded-dir", str(embedded)]
    first, first_log = _started(tmp_path, "first", forward)
    try:
        _wait_for(first, first_log, "forwarding ")
        assert (embedded / "broker.pid").exists()
        watch = _refusal(
            tmp_path,
            ["watch", "--subscription", "perfwatch-forward"],
            PERFWATCH_BROKER_EMBEDDED_DIR=str(embedded),
        )
        assert watch.returncode == 2, watch.stderr
        assert watch.stderr.startswith(REFUSAL.format(command="watch", folder=embedded))
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0, first_log.read_text()
    finally:
        _end_all([first], embedded)


def test_a_second_dashboard_on_one_subscription_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    embedded = tmp_path / "embedded"

    def dashboard(name: str, subscription: str) -> list[str]:
        store = f"sqlite:///{tmp_path / name}.db"
        return [
            *("dashboard", "--port", "0", "--log-level", "info", "--store", store),
            *("--embedded-dir", str(embedded), "--subscription", subscription),
        ]

    first, first_log = _started(tmp_path, "first", dashboard("first", "screens"))
    started = [first]
    try:
        _wait_for(first, first_log, "Application startup complete")
        second = _refusal(tmp_path, dashboard("second", "screens"))
        assert second.returncode == 2, second.stderr
        assert (
            REFUSAL.format(command="dashboard", folder=embedded)
            + (
                "on subscription 'screens' of persistent://public/default/perfwatch-verdicts "
                f"(perfwatch dashboard, pid {first.pid})"
            )
            in second.stderr
        ), second.stderr
        other, other_log = _started(tmp_path, "other", dashboard("other", "wall"))
        started.append(other)
        _wait_for(other, other_log, "Application startup complete")
        for process in (first, other):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=120) == 0
    finally:
        _end_all(started, embedded)
