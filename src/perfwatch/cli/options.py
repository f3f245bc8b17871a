"""Click options several verbs share: one definition each, so a name means one thing.

Options that need no configuration model are in `perfwatch.cli.flags`.
Options that set a configuration key are made by `setting_option` from the
setting's declaration in `perfwatch.config`: help, type and shown default come
from there, and `load_command_config` applies the given ones over the file and
the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

import annotated_types
import click

from perfwatch.cli.errors import InputError, report
from perfwatch.cli.flags import Decorator, FiniteFloatRange, config_option
from perfwatch.config import LOG_LEVELS as LOG_LEVELS
from perfwatch.config import setting_field, unset_meaning

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

    from perfwatch.config import Config

SETTINGS_META_KEY = "perfwatch.settings"


def _click_type(info: FieldInfo) -> click.ParamType | None:
    """The click type of a setting: its choices or its numeric range, from the declaration."""
    annotation = info.annotation
    if get_origin(annotation) is Literal:
        return click.Choice(get_args(annotation))
    if annotation not in (int, float):
        return None
    bounds: dict[str, Any] = {}
    for constraint in info.metadata:
        if isinstance(constraint, annotated_types.Gt):
            bounds.update(min=constraint.gt, min_open=True)
        elif isinstance(constraint, annotated_types.Ge):
            bounds.update(min=constraint.ge)
        elif isinstance(constraint, annotated_types.Lt):
            bounds.update(max=constraint.lt, max_open=True)
        elif isinstance(constraint, annotated_types.Le):
            bounds.update(max=constraint.le)
    if annotation is int:
        return click.IntRange(**bounds) if bounds else click.INT
    return FiniteFloatRange(**bounds)


def _shown_default(key: str, info: FieldInfo) -> str:
    default = info.default
    shown = unset_meaning(info)
    if shown is None:
        shown = f"{default:g}" if isinstance(default, float) else str(default)
    return f"{key} in the config, else {shown}"


def _remember_setting(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def remember(context: click.Context, option: click.Parameter, value: Any) -> Any:
        context.meta.setdefault(SETTINGS_META_KEY, {})[key] = (option.opts[0], value)
        return value

    return remember


def setting_option(key: str, *param_decls: str, metavar: str | None = None) -> Decorator:
    """A flag setting the configuration key `key` ("section.key"), built from its declaration.

    Its help, type (choices, range) and shown default are the setting's; its value
    is not passed to the command but kept for `load_command_config`, which lays
    it over the file and the environment (absent: ``None``, which masks nothing).
    """
    info = setting_field(key)
    return click.option(
        *param_decls,
        type=_click_type(info),
        metavar=metavar,
        show_default=_shown_default(key, info),
        help=info.description,
        expose_value=False,
        callback=_remember_setting(key),
    )


_BROKER_OPTIONS = (
    setting_option("broker.url", "--pulsar-url", metavar="URL"),
    setting_option("broker.embedded_dir", "--embedded-dir", metavar="DIR"),
    setting_option("broker.auth_token", "--auth-token", metavar="TOKEN"),
    setting_option("broker.tls_trust_certs", "--tls-trust-certs", metavar="FILE"),
    setting_option("broker.tls_cert", "--tls-cert", metavar="FILE"),
    setting_option("broker.tls_key", "--tls-key", metavar="FILE"),
    setting_option("broker.connect_timeout", "--connect-timeout", metavar="SECONDS"),
    setting_option("broker.log_level", "--pulsar-log-level"),
)


def broker_options(command: Callable[..., Any]) -> Any:
    """The broker options of every command that talks to Pulsar, and ``--config``."""
    for option in reversed(_BROKER_OPTIONS):
        command = option(command)
    return config_option(command)


records_topic_option = setting_option("topics.records", "--records-topic", metavar="TOPIC")
verdicts_topic_option = setting_option("topics.verdicts", "--verdicts-topic", metavar="TOPIC")
store_option = setting_option("store.url", "--store", metavar="URL")
# ``--log-level`` of the long-running services
log_level_option = setting_option("observability.log_level", "--log-level")


def load_command_config(config_path: Path | str | None) -> Config:
    """The configuration with the command's setting flags applied; a bad value is an InputError."""
    from perfwatch.cli.broker import append_to_stderr
    from perfwatch.config import FILE_ONLY_PREFIXES, ConfigError, load_config, unknown_variables

    # A misspelt file section is an error; a misspelt variable is at least not silent.
    for name, nearest in unknown_variables(os.environ):
        hint = "" if nearest is None else f"; did you mean {nearest}?"
        if name.startswith(FILE_ONLY_PREFIXES):
            hint = ": [analyzer] and [directions] are read from the configuration file only"
        report(f"{name} is not a perfwatch setting and is ignored{hint}", level="warning")
    flags = click.get_current_context().meta.get(SETTINGS_META_KEY, {})
    try:
        config = load_config(
            config_path,
            overrides={key: value for key, (_, value) in flags.items()},
            flag_names={key: flag for key, (flag, _) in flags.items()},
        )
    except ConfigError as error:
        raise InputError(str(error)) from None
    append_to_stderr()  # the Pulsar client's log lines may be written there
    return config
