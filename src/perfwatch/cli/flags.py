"""Click options several verbs share that need no configuration model.

Kept apart from `perfwatch.cli.options`, whose setting flags are built from
`perfwatch.config` (pydantic) when it is imported: `perfwatch analyze` takes
its options from here and loads the configuration only when a file is in use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from perfwatch.config_file import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE
from perfwatch.contract.timestamps import RFC3339, format_rfc3339, parse_time_or_date

Decorator = Callable[[Callable[..., Any]], Any]


def output_format_option(help: str | None = None) -> Decorator:
    """``--format text|json`` (default text), passed as ``output_format``."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=help or "text: a report for people; json: one document for programs.",
    )


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange refusing NaN and the infinities: NaN passes every bound check,
    and an infinite time-out or threshold is no setting anyone means."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def config_option(command: Callable[..., Any]) -> Any:
    """``--config FILE``, passed as ``config_path``: one help for every command."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        show_default=f"${CONFIG_ENV_VAR}, else ./{DEFAULT_CONFIG_FILE} if present",
        help="perfwatch.toml to read; these flags override it, and so do PERFWATCH_* "
        "variables except for analyze, which takes only its [directions] and [analyzer].",
    )(command)


class NonBlankText(click.ParamType):
    """A name given on the command line that must not be blank: a test id, run id, commit
    or branch (a blank one would replace the report's own, or CI's, with nothing), a test
    glob (it would match no test), or a subscription (the broker refuses an empty one only
    once connected, as if it failed)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not str(value).strip():
            self.fail("must not be empty; leave the option out for its default", param, ctx)
        return value


class RecordTime(click.ParamType):
    """A record's time: RFC 3339 with its offset, or a date (midnight UTC), given as the
    record's RFC 3339 text."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        try:
            moment = parse_time_or_date(text)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        # a time is kept as written: it is part of the content a run id is derived from
        return text if RFC3339.match(text) else format_rfc3339(moment)


def identity_option(*param_decls: str, **attributes: Any) -> Decorator:
    """An option naming the test, run id, commit or branch of the records a command sends."""
    return click.option(*param_decls, type=NonBlankText(), **attributes)


branch_option = identity_option(
    "--branch",
    help="Branch of the records [default: the record's, else from CI variables or git].",
)
commit_option = identity_option(
    "--commit", help="Commit [default: the record's, else from CI variables or git]."
)
attributes_option = click.option(
    "--attr", "attrs", multiple=True, metavar="NAME=VALUE", help="Attribute (repeatable)."
)
