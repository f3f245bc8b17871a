"""Processor configuration: defaults < `perfwatch.toml` < `PERFWATCH_*` variables < flags.

Every setting is declared once below, in a section model (`[broker]`,
`[topics]`, ...), with its type, default, constraint and help text; the
command-line options, `perfwatch.example.toml` and the table in
`docs/deploy.md` follow from these declarations. A setting `section.key` can
be set from the environment as `PERFWATCH_SECTION_KEY` (lists comma-separated)
and from the command line through `overrides` ({"section.key": value}).
Analyzer rules and metric directions are tables and come from the file only.
"""

from __future__ import annotations

import fnmatch
import json
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from perfwatch.config_file import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, config_file_in_use

if TYPE_CHECKING:
    from pydantic.config import JsonDict

    from perfwatch.contract.verdicts import VerdictPolicy

Direction = Literal["higher_is_better", "lower_is_better"]
DIRECTIONS: tuple[str, ...] = get_args(Direction)
LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
# The Pulsar client's own lines can also be turned off: during an outage it writes one
# for each attempt to reconnect, and a processor reports the outage itself.
ClientLogLevel = Literal[LogLevel, "off"]
# The methods of perfwatch.detectors.inputs.InputClustering (not imported: it loads scikit-learn).
ClusteringMethod = Literal["dbscan", "kmeans", "gmm", "agglomerative"]
INPUT_CLUSTERING_METHODS: tuple[str, ...] = get_args(ClusteringMethod)
RecommendationRule = Literal["paired", "paper"]
# the counter check's decision rule (perfwatch.detectors.counters.Decision)
CounterDecision = Literal["pvalue", "threshold"]
ENV_PREFIX = "PERFWATCH_"
# PERFWATCH_ variables that are not settings: the file's path, the Pulsar jars' cache, the
# database password the deployments build the store URL from, and the Otava comparison's.
OTHER_VARIABLES = frozenset(
    {
        CONFIG_ENV_VAR,
        "PERFWATCH_PULSAR_HOME",
        "PERFWATCH_DB_PASSWORD",
        "PERFWATCH_OTAVA_BIN",
        "PERFWATCH_OTAVA_PYTHON",
    }
)
# Prefixes of the test suite's and the PostgreSQL start script's variables.
OTHER_PREFIXES = ("PERFWATCH_TEST_", "PERFWATCH_PG_")
# Variables that look like settings of the tables read from the file only.
FILE_ONLY_PREFIXES = ("PERFWATCH_ANALYZER_", "PERFWATCH_DIRECTIONS_")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


def default_store_url(env: Mapping[str, str]) -> str:
    """SQLite file under the user's data directory (XDG_DATA_HOME or ~/.local/share)."""
    data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(data_home) / 'perfwatch' / 'state.db'}"


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


# A string that may be left empty ("" in the file or the environment: not set).
OptionalStr = Annotated[str | None, BeforeValidator(_empty_is_none)]
OptionalInt = Annotated[int | None, BeforeValidator(_empty_is_none)]
# A topic or subscription name: the broker refuses an empty one only once connected.
Name = Annotated[str, AfterValidator(_not_blank)]
# A list of names; from the environment, comma-separated.
NameList = Annotated[tuple[str, ...], BeforeValidator(_split_commas)]


def setting(default: Any, description: str, *, unset: str | None = None, **constraints: Any) -> Any:
    """A setting's declaration: default, help text, constraints (`gt=0`, ...).

    `unset` says what the empty default stands for ("the embedded broker"); it is
    what help texts and the reference table show instead of the empty value.
    """
    extra: JsonDict | None = {"unset": unset} if unset is not None else None
    return Field(default, description=description, json_schema_extra=extra, **constraints)


class Section(BaseModel):
    """A table of scalar settings: immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class BrokerConfig(Section):
    url: OptionalStr = setting(
        None,
        "Pulsar service URL: pulsar://host:6650 or pulsar+ssl://host:6651.",
        unset="the embedded broker",
    )
    embedded_dir: OptionalStr = setting(
        None,
        "Data folder of the embedded broker: every command given the same folder uses the "
        "same broker.",
        unset="$XDG_DATA_HOME/perfwatch/embedded",
    )
    admin_url: OptionalStr = setting(
        None,
        "Pulsar admin URL: `serve` turns on verdict deduplication and sets retention on "
        "its topics through it, `forward` retention on its topic of undeliverable verdicts.",
        unset="none",
    )
    auth_token: OptionalStr = setting(
        None,
        "Pulsar authentication token (prefer PERFWATCH_BROKER_AUTH_TOKEN: "
        "flags are visible to other users).",
        unset="none",
    )
    tls_trust_certs: OptionalStr = setting(
        None, "CA bundle trusted for pulsar+ssl:// URLs.", unset="none"
    )
    tls_cert: OptionalStr = setting(
        None, "Client certificate for TLS authentication.", unset="none"
    )
    tls_key: OptionalStr = setting(None, "Client private key for TLS authentication.", unset="none")
    tls_allow_insecure: bool = setting(False, "Accept any server certificate.")
    tls_validate_hostname: bool = setting(True, "Check the server certificate's host name.")
    connect_timeout: float = setting(
        10.0,
        "How long to wait for the broker's first answer before giving up (exit status 3).",
        gt=0,
    )
    log_level: ClientLogLevel = setting(
        "warning",
        "Lowest level of the Pulsar client's own log lines (written to stderr); off: none. "
        "Those of the connection attempts perfwatch reports itself (the first connection: one "
        "error line; the dashboard's: one warning per outage) only at debug or info.",
    )

    @property
    def embedded_data_dir(self) -> Path | None:
        """`embedded_dir` as a path (None: the embedded broker's default folder)."""
        return None if self.embedded_dir is None else Path(self.embedded_dir).expanduser()


class TopicsConfig(Section):
    records: Name = setting(
        "persistent://public/default/perfwatch-records",
        "Topic of the records (`publish` sends them there, `serve` reads them).",
    )
    verdicts: Name = setting(
        "persistent://public/default/perfwatch-verdicts",
        "Topic of the verdicts (`serve` publishes them there; `watch`, `forward` and "
        "`dashboard` read them).",
    )
    dead_letter: Name = setting(
        "persistent://public/default/perfwatch-dead-letter",
        "Topic the records that cannot be processed go to, with the reason.",
    )
    retention_minutes: int = setting(
        40_320,
        "Minutes the broker keeps verdicts and dead letters (-1: forever; set through the "
        "admin URL by `serve` on its verdicts and dead-letter topics, by `forward` on its "
        "topic of undeliverable verdicts).",
        ge=-1,
    )
    retention_mb: int = setting(
        4096,
        "Megabytes the broker keeps on each of those topics (-1: no limit).",
        ge=-1,
    )

    @field_validator("verdicts", "dead_letter")
    @classmethod
    def _differs_from_earlier_topics(cls, topic: str, info: ValidationInfo) -> str:
        # `serve` reads the records topic and `watch` the verdicts topic: a dead letter
        # written to the records topic would be read back and dead-lettered for ever.
        for other in ("records", "verdicts"):
            if other == info.field_name:
                break
            if other in info.data and same_topic(topic, info.data[other]):
                raise ValueError(f"must be another topic than topics.{other}")
        return topic


def same_topic(first: str, second: str) -> bool:
    """Whether two names are one topic, once Pulsar completes the short ones."""
    return full_topic_name(first) == full_topic_name(second)


def full_topic_name(topic: str) -> str:
    """`name` -> `persistent://public/default/name`, `tenant/ns/name` -> `persistent://...`."""
    if "://" in topic:
        return topic
    if topic.count("/") == 2:
        return f"persistent://{topic}"
    return f"persistent://public/default/{topic}"


class ConsumerConfig(Section):
    subscription: Name = setting("perfwatch", "Subscription shared by all processors.")
    name: str = setting(
        "",
        "This processor's unique name: consumer name, verdict producer name and owner "
        "of its unpublished verdicts.",
        unset="perfwatch-<hostname>",
    )
    batch_size: int = setting(100, "Messages taken per receive.", gt=0)
    batch_timeout_ms: int = setting(20, "Milliseconds to wait to fill a batch.", ge=0)
    receiver_queue_size: int = setting(1000, "Messages prefetched by the client.", gt=0)
    max_redeliveries: int = setting(
        5, "Failed processing attempts of a record before it is dead-lettered.", gt=0
    )
    nack_delay_ms: int = setting(
        1000, "Milliseconds before a record whose processing failed is redelivered.", ge=0
    )
    max_record_bytes: int = setting(
        1_048_576, "Larger records (bytes) are dead-lettered as oversized.", gt=0
    )
    orphan_after_s: float = setting(
        30.0,
        "Seconds after which another, silent processor's unpublished verdicts are taken over.",
        ge=0,
    )


class StoreConfig(Section):
    url: str = setting(
        "",
        "State store: sqlite:///PATH or postgresql://...",
        unset="sqlite:///$XDG_DATA_HOME/perfwatch/state.db",
    )

    outage_timeout_s: float = setting(
        300.0,
        "A processor whose state store stops answering waits this many seconds for it "
        "(retrying, its records left to the broker) before it stops with exit status 3; "
        "0 stops at once.",
        ge=0,
    )

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        if url and not url.startswith(("sqlite://", "postgresql://", "postgres://")):
            raise ValueError("expected sqlite:///PATH or postgresql://...")
        return url


class SeriesConfig(Section):
    identifying_attributes: NameList = setting(
        ("branch",),
        "Record fields or attributes that, with test and metric, identify a series.",
    )


class VerdictsConfig(Section):
    """When a change point is confirmed, and when one found again is reported as updated."""

    max_move: int = setting(
        5, "A change point moved at most this many runs (same sign) is updated.", ge=0
    )
    confirm_runs: int = setting(
        5, "Runs a detected change point must stay at its run before it is confirmed.", ge=0
    )
    confirm_max_pvalue: float = setting(
        1e-6, "... and the p-value it must have then at most.", gt=0, le=1
    )
    change_rel_tolerance: float = setting(
        0.1, "Relative change of the forward change that counts as updated.", ge=0
    )
    change_abs_tolerance_pct: float = setting(
        0.5, "... and absolute change, in percentage points.", ge=0
    )
    pvalue_decades: float = setting(
        1.0, "P-value move, in orders of magnitude, that counts as updated.", ge=0
    )
    pvalue_floor: float = setting(1e-9, "P-values below count as this.", gt=0)
    fix_share: float = setting(
        0.5,
        "An improvement back to within the noise and this share of a regression's step fixes it.",
        gt=0,
        le=1,
    )
    early_warning: bool = setting(
        True,
        "Publish change_point.suspected at once for a run far outside its segment "
        "(and change_point.withdrawn when the next run is back).",
    )
    early_warning_false_alarm_rate: float = setting(
        0.001, "Suspicions per stable run with Gaussian noise.", gt=0, lt=1
    )
    incident_open_days: float = setting(
        90.0,
        "An incident closes when its newest member's first changed run is this many days "
        "older than the newest confirmed finding's: findings confirmed later do not join it.",
        gt=0,
    )

    def policy(self) -> VerdictPolicy:
        from perfwatch.contract.verdicts import VerdictPolicy

        return VerdictPolicy(
            **self.model_dump(
                exclude={"early_warning", "early_warning_false_alarm_rate", "incident_open_days"}
            )
        )


class ObservabilityConfig(Section):
    metrics_host: str = setting("127.0.0.1", "Address /metrics listens on.")
    metrics_port: int = setting(
        0, "Serve Prometheus /metrics on this port (0: none).", ge=0, le=65535
    )
    log_format: Literal["text", "json"] = setting(
        "text", "Format of perfwatch's log lines (json: one object per line)."
    )
    log_level: LogLevel = setting(
        "info", "Lowest level of perfwatch's own log lines (written to stderr)."
    )


class RecommendationConfig(Section):
    """Run-or-skip on the stream; the defaults are those of `perfwatch recommend`."""

    method: ClusteringMethod = setting(
        "dbscan", "Input clustering of a test's full-suite profiles."
    )
    per_cluster: int = setting(
        3, "Inputs per cluster in a sample (a close vote lists a sample twice as large).", ge=1
    )
    rule: RecommendationRule = setting(
        "paired",
        "paired: each sampled input against itself on the old code, per cluster; paper: "
        "the paper's time thresholds and slope check, one pooled vote.",
    )
    acceptable_slowdown: float = setting(
        0.05,
        "Largest acceptable slow-down of a sampled input (paper rule: drop of its slope "
        "statements/time; the paper used 0.38).",
        ge=0,
    )
    confidence: float = setting(
        0.95, "Confidence of each input's interval of its paired change.", gt=0, lt=1
    )
    time_tolerance: float = setting(
        0.1,
        "Noise allowance of an input without repeated timings (paper rule: share by which "
        "its time may exceed its cluster's threshold).",
        ge=0,
    )
    seed: int = setting(0, "Sampling seed of the larger sample a close vote lists.")


class CountersConfig(Section):
    """The counter-cluster check on the stream (docs/counters-stream.md)."""

    baseline_runs: int = setting(
        5, "Runs without a regression verdict kept as a test's baseline.", ge=2
    )
    decision: CounterDecision = setting(
        "pvalue",
        "pvalue: flag a cluster whose error is unusual for the baseline runs (p-value below "
        "alpha, as perfwatch compare judges); threshold: flag an error beyond threshold.",
    )
    alpha: float = setting(
        0.01, "False-alarm rate of the p-value rule (per run, all clusters).", gt=0, lt=1
    )
    min_baseline_runs: OptionalInt = setting(
        None,
        "With fewer stored runs a record joins the baseline unjudged (from 1 to "
        "baseline_runs; at least 2 for the threshold rule).",
        unset="1 with the p-value rule, 3 with the threshold rule",
        ge=1,
    )
    threshold: float = setting(
        0.30,
        "Prediction error (beyond a cluster's usual error) that flags a regression "
        "(threshold rule).",
        gt=0,
    )
    calibrate: bool = setting(
        False,
        "Threshold rule with a threshold calibrated on the stored baseline runs "
        "(leave-one-out, + 5 points; docs/counters-stream.md).",
    )
    publish_passed: bool = setting(False, "Also publish counter_check.passed verdicts.")
    block: int = setting(10, "Samples per block for the models and errors.", ge=1)
    workload: NameList = setting(
        (),
        "Counters that describe the offered work (request rates; names or fnmatch patterns): "
        "every other counter is also modelled on these alone (perfwatch compare --workload).",
    )

    @property
    def threshold_rule(self) -> bool:
        """Whether records are judged by a threshold (fixed or calibrated)."""
        return self.decision == "threshold" or self.calibrate

    @property
    def effective_min_baseline_runs(self) -> int:
        if self.min_baseline_runs is not None:
            return self.min_baseline_runs
        return 3 if self.threshold_rule else 1

    @model_validator(mode="after")
    def _baseline_large_enough(self) -> CountersConfig:
        lowest = 2 if self.threshold_rule else 1
        runs = self.effective_min_baseline_runs
        if not lowest <= runs <= self.baseline_runs:
            rule = "the threshold rule" if self.threshold_rule else "the p-value rule"
            raise ValueError(
                f"min_baseline_runs must be from {lowest} to baseline_runs "
                f"({self.baseline_runs}) with {rule}, got {runs}"
            )
        return self


@dataclass(frozen=True)
class AnalyzerRule:
    """Analyzer parameters for the series whose test and metric match the globs."""

    test: str = "*"
    metric: str = "*"
    params: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, test: str, metric: str) -> bool:
        return fnmatch.fnmatchcase(test, self.test) and fnmatch.fnmatchcase(metric, self.metric)


class Config(BaseModel):
    """The whole configuration; `Config()` is the built-in defaults (no file, no environment)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    broker: BrokerConfig = BrokerConfig()
    topics: TopicsConfig = TopicsConfig()
    consumer: ConsumerConfig = ConsumerConfig()
    store: StoreConfig = StoreConfig()
    series: SeriesConfig = SeriesConfig()
    verdicts: VerdictsConfig = VerdictsConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    recommendation: RecommendationConfig = RecommendationConfig()
    counters: CountersConfig = CountersConfig()
    # [analyzer] scalar keys: the defaults for every series.
    analyzer: dict[str, Any] = Field(default_factory=dict)
    # [[analyzer.rules]]: later matching rules override earlier ones key by key.
    analyzer_rules: tuple[AnalyzerRule, ...] = ()
    # [directions]: metric-name glob -> direction, first match wins.
    directions: tuple[tuple[str, Direction], ...] = ()

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


# Sections holding only scalar settings, settable from file, environment and flags.
SECTIONS: dict[str, type[Section]] = {
    name: info.annotation
    for name, info in Config.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, Section)
}


def setting_field(key: str) -> FieldInfo:
    """The declaration of the setting "section.key"."""
    section, _, name = key.partition(".")
    if section not in SECTIONS or name not in SECTIONS[section].model_fields:
        raise KeyError(f"unknown setting {key!r}")
    return SECTIONS[section].model_fields[name]


def setting_keys() -> list[str]:
    """Every setting, as "section.key", in declaration order."""
    return [
        f"{section}.{name}" for section, model in SECTIONS.items() for name in model.model_fields
    ]


def unset_meaning(info: FieldInfo) -> str | None:
    """What the setting's empty default stands for, if it says."""
    extra = info.json_schema_extra
    unset = extra.get("unset") if isinstance(extra, dict) else None
    return unset if isinstance(unset, str) else None


# --- the layers -------------------------------------------------------------------------------


def setting_variable(key: str) -> str:
    """The environment variable of the setting "section.key": PERFWATCH_SECTION_KEY."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def unknown_variables(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The `PERFWATCH_*` variables of `env` that perfwatch does not read, sorted, each with
    the nearest variable it does read (None when none is close)."""
    from difflib import get_close_matches

    known = {setting_variable(key) for key in setting_keys()} | OTHER_VARIABLES
    unknown = sorted(
        name
        for name in env
        if name.startswith(ENV_PREFIX) and name not in known and not name.startswith(OTHER_PREFIXES)
    )
    return [
        (name, next(iter(get_close_matches(name, sorted(known), n=1, cutoff=0.8)), None))
        for name in unknown
    ]


def _environment_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """The `PERFWATCH_<SECTION>_<KEY>` variables of the declared settings, as raw strings,
    and the variable of each (section, key) found."""
    values: dict[str, Any] = {}
    names: dict[tuple[str, str], str] = {}
    for key in setting_keys():
        section, _, name = key.partition(".")
        variable = setting_variable(key)
        if variable in env:
            values.setdefault(section, {})[name] = env[variable]
            names[(section, name)] = variable
    return values, names


def _read_file(path: Path) -> dict[str, Any]:
    """The TOML file's tables, read by pydantic-settings (imported here: `--help` needs none
    of it)."""
    from pydantic_settings import BaseSettings, TomlConfigSettingsSource

    if not path.exists():
        raise ConfigError(f"{path}: configuration file not found")

    class Tables(BaseSettings):
        """Read for nothing in particular: the tables are taken whole and checked by Config."""

    try:
        source = TomlConfigSettingsSource(Tables, toml_file=path)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML: {err}") from None
    return dict(source.toml_data)


def _check_analyzer_params(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Raise ConfigError unless `params` are valid E-Divisive parameters."""
    from perfwatch.detectors.edivisive import EDivisiveParams

    try:
        EDivisiveParams.from_dict(params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None
    return dict(params)


def _file_tables(document: dict[str, Any], source: str) -> dict[str, Any]:
    """Take [analyzer] and [directions] out of `document` as Config fields."""
    tables: dict[str, Any] = {}
    analyzer = document.pop("analyzer", None)
    if analyzer is not None:
        if not isinstance(analyzer, dict):
            raise ConfigError(f"{source}: [analyzer]: expected a table")
        scalars = {k: v for k, v in analyzer.items() if k != "rules"}
        tables["analyzer"] = _check_analyzer_params(scalars, f"{source}: [analyzer]")
        rules = []
        for i, rule in enumerate(analyzer.get("rules", [])):
            where = f"{source}: analyzer.rules[{i}]"
            if not isinstance(rule, dict):
                raise ConfigError(f"{where}: expected a table")
            test = rule.get("test", "*")
            metric = rule.get("metric", "*")
            if not isinstance(test, str) or not isinstance(metric, str):
                raise ConfigError(f"{where}: test and metric must be glob strings")
            params = {k: v for k, v in rule.items() if k not in ("test", "metric")}
            _check_analyzer_params({**tables["analyzer"], **params}, where)
            rules.append(AnalyzerRule(test, metric, params))
        tables["analyzer_rules"] = tuple(rules)
    directions = document.pop("directions", None)
    if directions is not None:
        if not isinstance(directions, dict):
            raise ConfigError(f"{source}: [directions]: expected a table")
        for pattern, direction in directions.items():
            if direction not in DIRECTIONS:
                raise ConfigError(
                    f"{source}: directions.{pattern}: expected one of {DIRECTIONS}, "
                    f"got {direction!r}"
                )
        tables["directions"] = tuple(directions.items())
    return tables


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | list | tuple | dict):
        return json.dumps(value)
    return repr(value)


def _reason(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown section" if len(error["loc"]) == 1 else "unknown key"
    message = str(error["msg"]).removeprefix("Value error, ")
    if message.startswith("Input should be"):
        message = "must be" + message.removeprefix("Input should be")
    return message


class _Origins:
    """Where each value came from, to name it in an error."""

    def __init__(self) -> None:
        self.where: dict[tuple[str, ...], tuple[str, str]] = {}  # loc -> (kind, source)

    def merge(self, into: dict[str, Any], layer: Mapping[str, Any], kind: str, source: str) -> None:
        for section, table in layer.items():
            if isinstance(table, dict) and isinstance(into.get(section, {}), dict):
                into.setdefault(section, {}).update(table)
                for key in table:
                    self.where[(section, key)] = (kind, source)
            else:
                into[section] = table
            self.where.setdefault((section,), (kind, source))

    def describe(
        self,
        error: Mapping[str, Any],
        variables: Mapping[tuple[str, str], str],
        flags: Mapping[tuple[str, str], str],
    ) -> str:
        """The error naming where the bad value came from: its variable, flag or file."""
        loc = tuple(str(part) for part in error["loc"])
        reason = _reason(error)
        section = loc[0] if loc else ""
        key = loc[1] if len(loc) > 1 else ""
        kind, source = self.where.get(loc[:2], self.where.get(loc[:1], ("", "defaults")))
        if kind == "environment" and (section, key) in variables:
            return f"{variables[(section, key)]}={error['input']}: {reason}"
        if kind == "flags" and (section, key) in flags:
            return f"{flags[(section, key)]} {error['input']}: {reason}"
        if not key:
            return f"{source}: [{section}]: {reason}"
        if error["type"] == "extra_forbidden":
            return f"{source}: [{section}] {key}: {reason}"
        return f"{source}: [{section}] {key} = {_toml_value(error['input'])}: {reason}"


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Config:
    """Build the configuration from defaults, a TOML file, the environment and flags.

    `path` None means `$PERFWATCH_CONFIG`, else `./perfwatch.toml` when it exists
    (`perfwatch.config_file.config_file_in_use`).
    `overrides` maps "section.key" to a flag's value; None values are ignored so
    unset flags do not mask the file or the environment. `flag_names` maps
    "section.key" to the flag that set it, for error messages.
    """
    env = os.environ if env is None else env
    file_path = config_file_in_use(path, env)
    document = {} if file_path is None else _read_file(file_path)
    source = str(file_path or DEFAULT_CONFIG_FILE)
    tables = _file_tables(document, source)
    environment, variables = _environment_layer(env)
    flag_of: dict[tuple[str, str], str] = {}
    for dotted, flag in (flag_names or {}).items():
        section, _, key = dotted.partition(".")
        flag_of[(section, key)] = flag
    flags: dict[str, dict[str, Any]] = {}
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or not key:
            raise ConfigError(f"command line: unknown setting {dotted!r}")
        if value is not None:
            flags.setdefault(section, {})[key] = value

    merged: dict[str, Any] = {}
    origins = _Origins()
    origins.merge(merged, document, "file", source)
    origins.merge(merged, environment, "environment", "environment")
    origins.merge(merged, flags, "flags", "command line")
    try:
        config = Config.model_validate({**merged, **tables})
    except ValidationError as error:
        first = error.errors()[0]
        raise ConfigError(origins.describe(first, variables, flag_of)) from None
    return _fill_derived_defaults(config, env)


def _fill_derived_defaults(config: Config, env: Mapping[str, str]) -> Config:
    updates: dict[str, Any] = {}
    if not config.store.url:
        updates["store"] = config.store.model_copy(update={"url": default_store_url(env)})
    if not config.consumer.name:
        name = f"perfwatch-{socket.gethostname()}"
        updates["consumer"] = config.consumer.model_copy(update={"name": name})
    return config.model_copy(update=updates)
