"""How every command fails: one message format and one exit status per kind of failure.

Failures are reported on stderr as ``perfwatch CMD: error: MESSAGE`` and end the
command with

- 0: success;
- 1: the command ran and found what it was asked to fail on (``compare``: a
  regression; ``profile``: a failing test; ``recommend --exit-code``: run the suite);
- 2: bad input or usage (unreadable or invalid files, bad options, a missing
  optional dependency, a port already in use, a second processor on the embedded
  broker);
- 3: a service unreachable or refusing (Pulsar broker, database, webhook);
- 130: interrupted (Ctrl-C).

Commands raise `InputError` or `ServiceUnavailable`; `CommandLineGroup.main` turns
those, click's own usage errors, Ctrl-C and the library's known failures into the
message and status above, once for every command.
"""

from __future__ import annotations

import difflib
import errno
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_INPUT = 2
EXIT_SERVICE = 3
EXIT_INTERRUPTED = 130

PROGRAM = "perfwatch"
# click >= 8.2 raises it for a group run without a command; its message is the help.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class CommandError(click.ClickException):
    """A failure reported as ``perfwatch CMD: error: MESSAGE`` with `exit_code`."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        # Raised inside a command: remember which one, the context is gone by the report.
        context = click.get_current_context(silent=True)
        self.command_path = context.command_path if context is not None else PROGRAM

    def show(self, file: Any = None) -> None:
        report(self.format_message(), self.command_path)


class InputError(CommandError):
    """Bad input files, option values or environment: exit status 2."""

    exit_code = EXIT_INPUT


class ServiceUnavailable(CommandError):
    """A broker, database or webhook could not be reached or refused: exit status 3."""

    exit_code = EXIT_SERVICE


def report(message: str, command_path: str | None = None, *, level: str = "error") -> None:
    """``perfwatch CMD: error: MESSAGE`` on stderr (CMD: the command running now); `level`
    "warning" for a problem the command goes on despite."""
    if command_path is None:
        context = click.get_current_context(silent=True)
        command_path = context.command_path if context is not None else PROGRAM
    click.echo(f"{command_path}: {level}: {message}", err=True)


def _command_path(error: BaseException) -> str:
    """The path of the command that failed: ``perfwatch dev pulsar``."""
    if isinstance(error, CommandError):
        return error.command_path
    context = getattr(error, "ctx", None)
    if isinstance(context, click.Context):
        return context.command_path
    # Otherwise the innermost command the error passed through: click's frames hold
    # each command's context as `ctx` (the contexts themselves are closed by now).
    path = PROGRAM
    trace = error.__traceback__
    while trace is not None:
        frame_context = trace.tb_frame.f_locals.get("ctx")
        if isinstance(frame_context, click.Context):
            path = frame_context.command_path
        trace = trace.tb_next
    return path


def _show(error: click.ClickException, failed: BaseException) -> None:
    """Click's usage line and help hint for usage errors, then the one-line error naming
    the command `failed` in."""
    context = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and context is not None:
        click.echo(context.get_usage(), err=True)
        click.echo(f"Try '{context.command_path} --help' for help.", err=True)
    report(error.format_message(), _command_path(failed))


def _library_failure(error: Exception) -> CommandError | None:
    """The convention's error for a library failure a command let through, else None."""
    from perfwatch._optional import MissingDependency

    if isinstance(error, MissingDependency):
        return InputError(str(error))
    return None


def _interrupted(error: BaseException) -> bool:
    """Ctrl-C, also when the Pulsar client turned it into its own exception."""
    if isinstance(error, KeyboardInterrupt | click.Abort):
        return True
    pulsar = sys.modules.get("pulsar")
    return pulsar is not None and isinstance(error, pulsar.Interrupted)


class SuggestingGroup(click.Group):
    """A group that answers a mistyped command with the closest one, alike on every click
    version perfwatch supports (click suggests from 8.4 on, among the commands it loaded)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            if close:
                raise click.UsageError(f"No such command {name!r}. Did you mean {close[0]!r}?", ctx)
        return super().resolve_command(ctx, args)


class CommandLineGroup(SuggestingGroup):
    """A click group whose `main` applies the failure convention to every command."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        sys.exit(self._run(args, prog_name or PROGRAM, complete_var, **extra))

    def invoke(self, ctx: click.Context) -> Any:
        # Here rather than around `main`: click's `main` ends a broken pipe with status 1.
        try:
            return super().invoke(ctx)
        except OSError as error:
            if error.errno != errno.EPIPE:
                raise
            # The reader of stdout went away (`perfwatch watch | head`): nothing is wrong,
            # and nothing more can be written there, not even at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str,
        complete_var: str | None,
        **extra: Any,
    ) -> int:
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as error:
            if isinstance(error, _NO_ARGS_IS_HELP):
                error.show()
            else:
                _show(error, error)
            return error.exit_code
        except BaseException as error:
            if _interrupted(error):
                return EXIT_INTERRUPTED
            failure = _library_failure(error) if isinstance(error, Exception) else None
            if failure is None:
                raise
            _show(failure, error)
            return failure.exit_code
        # Without standalone mode click returns the code of an explicit `ctx.exit(code)`.
        return result if isinstance(result, int) else EXIT_OK


def check_port_free(host: str, port: int, option: str) -> None:
    """InputError unless a server could listen on `host`:`port` now (port 0 is always free)."""
    if port != 0:
        bound_socket(host, port, option).close()


def bound_socket(host: str, port: int, option: str) -> socket.socket:
    """A socket bound to `host`:`port` (port 0: one the system picks), for a server to
    listen on; InputError naming `option` when the address cannot be bound."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as error:
        raise InputError(f"{option}: cannot listen on {host!r}: {error.strerror}") from None
    bound = socket.socket(family, socket.SOCK_STREAM)
    # As servers bind: connections of a just-stopped server in TIME_WAIT do not count.
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        bound.bind((host, port))
    except OSError as error:
        bound.close()
        if error.errno == errno.EADDRINUSE:
            raise InputError(
                f"port {port} on {host} is already in use (another perfwatch or another "
                f"server?); stop it or choose another port with {option}"
            ) from None
        problem = error.strerror
        raise InputError(f"{option}: cannot listen on {host}:{port}: {problem}") from None
    return bound


def check_writable(path: Path, option: str) -> None:
    """InputError naming ``option`` unless a file can be written at ``path``: checked
    before the work, so a long run does not end on a mistyped folder."""
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{option}: cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{option}: cannot write {path}: no permission to write in {folder}")
