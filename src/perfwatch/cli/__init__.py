"""Command-line interface: one thin module per verb."""

import sys
from types import TracebackType

_report_uncaught = sys.excepthook


def _quiet_interrupt(
    kind: type[BaseException], error: BaseException, traceback: TracebackType | None
) -> None:
    # Ctrl-C while Python still imports the command line (click alone takes a tenth of a
    # second), before `CommandLineGroup.main` handles it: the process still ends by SIGINT
    # (status 130 in a shell), without a traceback, as at any later moment.
    if not issubclass(kind, KeyboardInterrupt):
        _report_uncaught(kind, error, traceback)


sys.excepthook = _quiet_interrupt
