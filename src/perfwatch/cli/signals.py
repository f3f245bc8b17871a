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
    # True while the command checks the request itself (see `polled`).
    is_polled: bool = False

    @contextmanager
    def polled(self) -> Iterator[StopRequest]:
        """A stretch of the command that checks the request itself and finishes what it
        holds: a signal only sets it. Elsewhere the first signal also interrupts what the
        command does (connecting, retrying), which `stop_on_signals` ends as a stop."""
        if self.is_set():
            raise KeyboardInterrupt  # stopped before this stretch began
        self.is_polled = True
        try:
            yield self
        finally:
            self.is_polled = False


@contextmanager
def stop_on_signals(
    signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
) -> Iterator[StopRequest]:
    """A request set by `signals` (restoring the previous handlers afterwards), for the
    whole of a command, from its start.

    A stop ends the block without an error, and so the command with exit status 0,
    unless it was a SIGINT: that is reported as an interruption (KeyboardInterrupt,
    exit status 130) once the command has stopped cleanly.
    """
    stop = StopRequest()
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def request_stop(signum: int, frame: Any) -> None:
        first = stop.signal is None
        if first:
            stop.signal = signum
        stop.set()
        if first and not stop.is_polled:
            # The Pulsar client and the waits all give way to it, as to Ctrl-C.
            raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, request_stop)
    try:
        yield stop
    except KeyboardInterrupt:
        if stop.signal in (None, signal.SIGINT):
            raise
    else:
        if stop.signal == signal.SIGINT:
            raise KeyboardInterrupt  # stopped cleanly, and reported as interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
