"""Click options several verbs share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def output_format_option(help: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """``--format text|json`` (default text), passed as ``output_format``."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=help,
    )
