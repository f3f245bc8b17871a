"""Click options several verbs share: one definition each, so a name means one thing.

Options that set a configuration key pass `None` when absent, so the file and
the environment still apply; their help shows the key and its built-in default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfwatch.cli.errors import InputError

if TYPE_CHECKING:
    from perfwatch.config import Config

Decorator = Callable[[Callable[..., Any]], Any]
LOG_LEVELS = ("debug", "info", "warning", "error")


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


def config_option(command: Callable[..., Any]) -> Any:
    """``--config FILE``, passed as ``config_path``."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        show_default="$PERFWATCH_CONFIG, else ./perfwatch.toml if present",
        help="perfwatch.toml to read (then PERFWATCH_* variables, then these flags).",
    )(command)


def _setting(key: str, default: str) -> str:
    return f"{key} in the config, else {default}"


# flag name -> configuration key, for every command that talks to Pulsar
_BROKER_SETTINGS = {
    "pulsar_url": "broker.url",
    "auth_token": "broker.auth_token",
    "tls_trust_certs": "broker.tls_trust_certs",
    "tls_cert": "broker.tls_cert",
    "tls_key": "broker.tls_key",
    "connect_timeout": "broker.connect_timeout",
    "pulsar_log_level": "broker.log_level",
}

_BROKER_OPTIONS = (
    click.option(
        "--pulsar-url",
        metavar="URL",
        show_default=_setting("broker.url", "the embedded broker"),
        help="Pulsar service URL: pulsar://host:6650 or pulsar+ssl://host:6651.",
    ),
    click.option(
        "--auth-token",
        metavar="TOKEN",
        help="Pulsar authentication token (prefer PERFWATCH_BROKER_AUTH_TOKEN: "
        "flags are visible to other users).",
    ),
    click.option(
        "--tls-trust-certs",
        metavar="FILE",
        help="CA bundle trusted for pulsar+ssl:// URLs.",
    ),
    click.option("--tls-cert", metavar="FILE", help="Client certificate for TLS authentication."),
    click.option("--tls-key", metavar="FILE", help="Client private key for TLS authentication."),
    click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        show_default=_setting("broker.connect_timeout", "10"),
        help="How long to wait for the broker's first answer before giving up (exit status 3).",
    ),
    click.option(
        "--pulsar-log-level",
        type=click.Choice(LOG_LEVELS),
        show_default=_setting("broker.log_level", "warning"),
        help="Lowest level of the Pulsar client's own log lines (written to stderr).",
    ),
)


def broker_options(command: Callable[..., Any]) -> Any:
    """The broker options of every command that talks to Pulsar, and ``--config``.

    The command gets ``config_path`` and ``broker_settings``: the given flags as
    {"broker.KEY": value} overrides for `load_command_config`.
    """

    @functools.wraps(command)
    def with_broker(**options: Any) -> Any:
        settings = {key: options.pop(name) for name, key in _BROKER_SETTINGS.items()}
        return command(broker_settings=settings, **options)

    for option in reversed(_BROKER_OPTIONS):
        with_broker = option(with_broker)
    return config_option(with_broker)


def records_topic_option(command: Callable[..., Any]) -> Any:
    return click.option(
        "--records-topic",
        metavar="TOPIC",
        show_default=_setting("topics.records", "persistent://public/default/perfwatch-records"),
        help="Topic of the records (`publish` sends them there, `serve` reads them).",
    )(command)


def verdicts_topic_option(command: Callable[..., Any]) -> Any:
    return click.option(
        "--verdicts-topic",
        metavar="TOPIC",
        show_default=_setting("topics.verdicts", "persistent://public/default/perfwatch-verdicts"),
        help="Topic of the verdicts (`serve` publishes them there; `watch`, `forward` and "
        "`dashboard` read them).",
    )(command)


def store_option(command: Callable[..., Any]) -> Any:
    """``--store URL``, passed as ``store_url``."""
    return click.option(
        "--store",
        "store_url",
        metavar="URL",
        show_default=_setting("store.url", "sqlite:///~/.local/share/perfwatch/state.db"),
        help="State store: sqlite:///PATH or postgresql://...",
    )(command)


def log_level_option(command: Callable[..., Any]) -> Any:
    """``--log-level`` of the long-running services (``observability.log_level``)."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS),
        show_default=_setting("observability.log_level", "info"),
        help="Lowest level of perfwatch's own log lines (written to stderr).",
    )(command)


def load_command_config(config_path: Path | str | None, overrides: Mapping[str, Any]) -> Config:
    """The configuration with the command's flags applied; a bad value is an InputError."""
    from perfwatch.cli.broker import append_to_stderr
    from perfwatch.config import ConfigError, load_config

    try:
        config = load_config(config_path, overrides=overrides)
    except ConfigError as error:
        raise InputError(str(error)) from None
    append_to_stderr()  # the Pulsar client's log lines may be written there
    return config
