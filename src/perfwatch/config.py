"""Processor configuration: defaults < `perfwatch.toml` < `PERFWATCH_*` variables < flags.

Every key lives in a section (`[broker]`, `[topics]`, ...). A scalar key
`section.key` can be set from the environment as `PERFWATCH_SECTION_KEY`
(lists comma-separated) and from the command line through `overrides`
({"section.key": value}). Analyzer rules and metric directions are tables and
come from the file only. `perfwatch.example.toml` documents every key.
"""

from __future__ import annotations

import fnmatch
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from perfwatch.contract.verdicts import VerdictPolicy

DIRECTIONS = ("higher_is_better", "lower_is_better")
LOG_LEVELS = ("debug", "info", "warning", "error")
CONFIG_ENV_VAR = "PERFWATCH_CONFIG"
DEFAULT_CONFIG_FILE = "perfwatch.toml"


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


def default_store_url(env: Mapping[str, str]) -> str:
    """SQLite file under the user's data directory (XDG_DATA_HOME or ~/.local/share)."""
    data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(data_home) / 'perfwatch' / 'state.db'}"


@dataclass(frozen=True)
class BrokerConfig:
    url: str | None = None  # None: start the embedded broker
    admin_url: str | None = None  # HTTP admin API, used to turn on verdict deduplication
    auth_token: str | None = None
    tls_trust_certs: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_allow_insecure: bool = False
    tls_validate_hostname: bool = True
    # Seconds to wait for the broker's first answer before giving up on it.
    connect_timeout: float = 10.0
    # Lowest level of the Pulsar client's own log lines (debug, info, warning, error).
    log_level: str = "warning"


@dataclass(frozen=True)
class TopicsConfig:
    records: str = "persistent://public/default/perfwatch-records"
    verdicts: str = "persistent://public/default/perfwatch-verdicts"
    dead_letter: str = "persistent://public/default/perfwatch-dead-letter"


@dataclass(frozen=True)
class ConsumerConfig:
    subscription: str = "perfwatch"
    # Names this process: consumer name, verdict producer name and outbox owner.
    # Two live processors must not share it.
    name: str = ""
    batch_size: int = 100
    batch_timeout_ms: int = 20
    receiver_queue_size: int = 1000
    max_redeliveries: int = 5
    nack_delay_ms: int = 1000
    # Larger records are dead-lettered as oversized.
    max_record_bytes: int = 1_048_576
    # Unpublished verdicts of another, silent owner are taken over after this long.
    orphan_after_s: float = 30.0


@dataclass(frozen=True)
class StoreConfig:
    url: str = ""


@dataclass(frozen=True)
class SeriesConfig:
    # Record fields or attributes that, with test and metric, identify a series.
    identifying_attributes: tuple[str, ...] = ("branch",)


@dataclass(frozen=True)
class ObservabilityConfig:
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no /metrics endpoint
    log_format: str = "text"  # text | json
    log_level: str = "info"


# The methods of perfwatch.detectors.inputs.InputClustering (not imported: it loads scikit-learn).
INPUT_CLUSTERING_METHODS = ("dbscan", "kmeans", "gmm", "agglomerative")


@dataclass(frozen=True)
class RecommendationConfig:
    """Run-or-skip on the stream; the defaults are those of `perfwatch recommend`."""

    method: str = "dbscan"
    per_cluster: int = 3
    acceptable_slowdown: float = 0.38
    time_tolerance: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in INPUT_CLUSTERING_METHODS:
            raise ConfigError(
                f"recommendation.method: expected one of {', '.join(INPUT_CLUSTERING_METHODS)}, "
                f"got {self.method!r}"
            )
        if self.per_cluster < 1:
            raise ConfigError(
                f"recommendation.per_cluster: must be at least 1, got {self.per_cluster}"
            )
        for name in ("acceptable_slowdown", "time_tolerance"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"recommendation.{name}: must be 0 or more, got {getattr(self, name)}"
                )


@dataclass(frozen=True)
class CountersConfig:
    """The counter-cluster check on the stream (docs/counters-stream.md)."""

    # Baseline: the counter samples of this many latest runs without a regression verdict.
    baseline_runs: int = 5
    # Fewer stored runs than this: the record joins the baseline unjudged.
    min_baseline_runs: int = 3
    threshold: float = 0.30
    # Replace the threshold with one calibrated on the baseline runs (leave-one-out).
    calibrate: bool = False
    publish_passed: bool = False
    block: int = 10

    def __post_init__(self) -> None:
        if self.baseline_runs < 2:
            raise ConfigError(
                f"counters.baseline_runs: must be at least 2, got {self.baseline_runs}"
            )
        if not 2 <= self.min_baseline_runs <= self.baseline_runs:
            raise ConfigError(
                "counters.min_baseline_runs: must be from 2 to counters.baseline_runs "
                f"({self.baseline_runs}), got {self.min_baseline_runs}"
            )
        if not self.threshold > 0:
            raise ConfigError(f"counters.threshold: must be above 0, got {self.threshold}")
        if self.block < 1:
            raise ConfigError(f"counters.block: must be at least 1, got {self.block}")


@dataclass(frozen=True)
class AnalyzerRule:
    """Analyzer parameters for the series whose test and metric match the globs."""

    test: str = "*"
    metric: str = "*"
    params: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, test: str, metric: str) -> bool:
        return fnmatch.fnmatchcase(test, self.test) and fnmatch.fnmatchcase(metric, self.metric)


@dataclass(frozen=True)
class Config:
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    series: SeriesConfig = field(default_factory=SeriesConfig)
    verdicts: VerdictPolicy = field(default_factory=VerdictPolicy)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    recommendation: RecommendationConfig = field(default_factory=RecommendationConfig)
    counters: CountersConfig = field(default_factory=CountersConfig)
    # [analyzer] scalar keys: the defaults for every series.
    analyzer: Mapping[str, Any] = field(default_factory=dict)
    # [[analyzer.rules]]: later matching rules override earlier ones key by key.
    analyzer_rules: tuple[AnalyzerRule, ...] = ()
    # [directions]: metric-name glob -> direction, first match wins.
    directions: tuple[tuple[str, str], ...] = ()

    def analyzer_params_for(self, test: str, metric: str) -> dict[str, Any]:
        params = dict(self.analyzer)
        for rule in self.analyzer_rules:
            if rule.matches(test, metric):
                params.update(rule.params)
        return params

    def direction_for(self, metric: str) -> str | None:
        for pattern, direction in self.directions:
            if fnmatch.fnmatchcase(metric, pattern):
                return direction
        return None


# Sections holding only scalar keys, settable from file, environment and flags.
_SCALAR_SECTIONS: dict[str, type] = {
    "broker": BrokerConfig,
    "topics": TopicsConfig,
    "consumer": ConsumerConfig,
    "store": StoreConfig,
    "series": SeriesConfig,
    "verdicts": VerdictPolicy,
    "observability": ObservabilityConfig,
    "recommendation": RecommendationConfig,
    "counters": CountersConfig,
}


def _field_types(section_cls: type) -> dict[str, str]:
    # Annotations are strings under `from __future__ import annotations`.
    return {f.name: str(f.type) for f in fields(section_cls)}


def _coerce(value: Any, type_name: str, where: str) -> Any:
    """Convert a file/env/flag value to the field's type, or raise naming `where`."""
    optional = type_name.endswith("| None")
    base = type_name.removesuffix("| None").strip()
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{where}: a value is required")
    try:
        if base == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if base == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if base == "str":
            if not isinstance(value, str):
                raise ValueError(value)
            return value
        if base == "tuple[str, ...]":
            if isinstance(value, str):
                return tuple(item.strip() for item in value.split(",") if item.strip())
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                return tuple(value)
            raise ValueError(value)
    except ValueError:
        raise ConfigError(f"{where}: expected {base}, got {value!r}") from None
    raise AssertionError(f"unhandled config type {type_name}")


def _check_analyzer_params(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Raise ConfigError unless `params` are valid E-Divisive parameters."""
    from perfwatch.detectors.edivisive import EDivisiveParams

    try:
        EDivisiveParams.from_dict(params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None
    return dict(params)


def _apply_file(config: Config, document: Mapping[str, Any], source: str) -> Config:
    sections: dict[str, Any] = {}
    for section, table in document.items():
        where = f"{source}: [{section}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table")
        if section in _SCALAR_SECTIONS:
            sections[section] = _apply_scalars(getattr(config, section), table, where)
        elif section == "analyzer":
            scalars = {k: v for k, v in table.items() if k != "rules"}
            sections["analyzer"] = _check_analyzer_params(scalars, f"{source}: [analyzer]")
            rules = []
            for i, rule in enumerate(table.get("rules", [])):
                rule_where = f"{source}: analyzer.rules[{i}]"
                if not isinstance(rule, dict):
                    raise ConfigError(f"{rule_where}: expected a table")
                test = rule.get("test", "*")
                metric = rule.get("metric", "*")
                if not isinstance(test, str) or not isinstance(metric, str):
                    raise ConfigError(f"{rule_where}: test and metric must be glob strings")
                params = {k: v for k, v in rule.items() if k not in ("test", "metric")}
                _check_analyzer_params({**sections["analyzer"], **params}, rule_where)
                rules.append(AnalyzerRule(test, metric, params))
            sections["analyzer_rules"] = tuple(rules)
        elif section == "directions":
            directions = []
            for pattern, direction in table.items():
                if direction not in DIRECTIONS:
                    raise ConfigError(
                        f"{source}: directions.{pattern}: expected one of {DIRECTIONS}, "
                        f"got {direction!r}"
                    )
                directions.append((pattern, direction))
            sections["directions"] = tuple(directions)
        else:
            raise ConfigError(f"{where}: unknown section")
    return replace(config, **sections)


def _apply_scalars(section_value: Any, values: Mapping[str, Any], where: str) -> Any:
    types = _field_types(type(section_value))
    updates = {}
    for key, value in values.items():
        if key not in types:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(types)})")
        updates[key] = _coerce(value, types[key], f"{where} {key}")
    return replace(section_value, **updates)


def _env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    overrides = {}
    for section, section_cls in _SCALAR_SECTIONS.items():
        for key in _field_types(section_cls):
            name = f"PERFWATCH_{section}_{key}".upper()
            if name in env:
                overrides[f"{section}.{key}"] = env[name]
    return overrides


def _apply_dotted(config: Config, overrides: Mapping[str, Any], source: str) -> Config:
    by_section: dict[str, dict[str, Any]] = {}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if section not in _SCALAR_SECTIONS or not key:
            raise ConfigError(f"{source}: unknown setting {dotted!r}")
        by_section.setdefault(section, {})[key] = value
    updates = {
        section: _apply_scalars(getattr(config, section), values, f"{source}: [{section}]")
        for section, values in by_section.items()
    }
    return replace(config, **updates)


def _finish(config: Config, env: Mapping[str, str]) -> Config:
    """Fill derived defaults and check cross-field constraints."""
    if not config.store.url:
        config = replace(config, store=replace(config.store, url=default_store_url(env)))
    if not config.consumer.name:
        name = f"perfwatch-{socket.gethostname()}"
        config = replace(config, consumer=replace(config.consumer, name=name))
    if config.observability.log_format not in ("text", "json"):
        raise ConfigError(
            f"observability.log_format: expected 'text' or 'json', "
            f"got {config.observability.log_format!r}"
        )
    if config.broker.log_level not in LOG_LEVELS:
        raise ConfigError(
            f"broker.log_level: expected one of {', '.join(LOG_LEVELS)}, "
            f"got {config.broker.log_level!r}"
        )
    if not config.broker.connect_timeout > 0:
        raise ConfigError(
            f"broker.connect_timeout: must be above 0 seconds, got {config.broker.connect_timeout}"
        )
    if not config.store.url.startswith(("sqlite://", "postgresql://", "postgres://")):
        raise ConfigError(
            f"store.url: expected sqlite:///PATH or postgresql://..., got {config.store.url!r}"
        )
    for key in ("batch_size", "receiver_queue_size", "max_redeliveries", "max_record_bytes"):
        if getattr(config.consumer, key) < 1:
            raise ConfigError(f"consumer.{key}: must be at least 1")
    return config


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the configuration from defaults, a TOML file, the environment and flags.

    `path` None means `$PERFWATCH_CONFIG`, else `./perfwatch.toml` when it exists.
    `overrides` maps "section.key" to a flag's value; None values are ignored so
    unset flags do not mask the file or the environment.
    """
    env = os.environ if env is None else env
    config = Config()
    explicit = path is not None or CONFIG_ENV_VAR in env
    file_path = Path(path if path is not None else env.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE))
    if explicit or file_path.exists():
        try:
            document = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{file_path}: configuration file not found") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{file_path}: invalid TOML: {err}") from None
        config = _apply_file(config, document, str(file_path))
    config = _apply_dotted(config, _env_overrides(env), "environment")
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    config = _apply_dotted(config, flags, "command line")
    return _finish(config, env)
