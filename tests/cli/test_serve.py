"""`perfwatch serve` on the embedded broker: one processor, and a second one told so."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]
STARTED = "processor started"


def _serving(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A `serve` on the embedded broker of `tmp_path / "embedded"`, and its log file."""
    log = tmp_path / f"{name}.log"
    command = [*PERFWATCH, "serve", "--name", name, "--embedded-dir", str(tmp_path / "embedded")]
    command += ["--store", f"sqlite:///{tmp_path / name}.db"]
    with open(log, "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    return process, log


def _wait_for_start(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while STARTED not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {STARTED!r} in: {log.read_text()}"
        time.sleep(0.2)


def _end_orphaned_broker(embedded: Path) -> None:
    """End the broker a processor killed with SIGKILL left behind, if no later one did."""
    from perfwatch.brokers.embedded import find_running_broker
    from perfwatch.brokers.process import end_process

    if find_running_broker(embedded) is not None:
        end_process(orjson.loads((embedded / "broker.pid").read_text())["pid"], 10)


def _stop(process: subprocess.Popen[bytes], received: signal.Signals) -> int:
    process.send_signal(received)
    return process.wait(timeout=120)


def test_a_second_processor_on_the_embedded_broker_is_refused_until_the_first_ends(
    tmp_path: Path,
) -> None:
    """The embedded broker refuses a second consumer on the records subscription; without
    a word, the second `serve` would retry forever. It is refused at once instead, with
    the way out, and a first processor killed with SIGKILL leaves nothing in the way."""
    embedded = tmp_path / "embedded"
    first, first_log = _serving(tmp_path, "first")
    started = [first]
    try:
        _wait_for_start(first, first_log)
        second_store = f"sqlite:///{tmp_path / 'second.db'}"
        second = subprocess.run(
            [*PERFWATCH, "serve", "--embedded-dir", str(embedded), "--store", second_store],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith(
            f"perfwatch serve: error: the embedded broker in {embedded} already has a "
            f"processor (perfwatch serve, pid {first.pid}) and serves one only"
        ), second.stderr
        assert "--pulsar-url" in second.stderr

        assert _stop(first, signal.SIGKILL) == -signal.SIGKILL
        third, third_log = _serving(tmp_path, "third")
        started.append(third)
        _wait_for_start(third, third_log)
        assert _stop(third, signal.SIGTERM) == 0, third_log.read_text()
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
        _end_orphaned_broker(embedded)
