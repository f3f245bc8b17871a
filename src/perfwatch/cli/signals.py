"""Stopping long-running commands cleanly on SIGTERM and SIGINT."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class StopRequest(threading.Event):
    """Set by SIGTERM or SIGINT; `signal` is the first of them received."""

    signal: int | None = None


@contextmanager
def stop_on_signals(
    signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
) -> Iterator[StopRequest]:
    """A request set by `signals` (restoring the previous handlers afterwards)."""
    stop = StopRequest()
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def request_stop(signum: int, frame: Any) -> None:
        if stop.signal is None:
            stop.signal = signum
        stop.set()

    for sig in previous:
        signal.signal(sig, request_stop)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
