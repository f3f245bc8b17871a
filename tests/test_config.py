"""Configuration: defaults < perfwatch.toml < PERFWATCH_* variables < flags."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from perfwatch.config import (
    SECTIONS,
    Config,
    ConfigError,
    load_config,
    setting_keys,
    setting_variable,
    unknown_variables,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "perfwatch.example.toml"
# A whole variable name, not the start of a pattern such as PERFWATCH_PG_*.
VARIABLE = re.compile(r"PERFWATCH_[A-Z_]*[A-Z](?![A-Z_*])")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "perfwatch.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(env={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert config.broker.url is None
    assert config.topics.records == "persistent://public/default/perfwatch-records"
    assert config.topics.verdicts == "persistent://public/default/perfwatch-verdicts"
    assert config.topics.dead_letter == "persistent://public/default/perfwatch-dead-letter"
    assert config.store.url == f"sqlite:///{tmp_path / 'data' / 'perfwatch' / 'state.db'}"
    assert config.consumer.name.startswith("perfwatch-")
    assert config.series.identifying_attributes == ("branch",)
    assert config.observability.metrics_host == "127.0.0.1"


def test_example_file_documents_every_key_with_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for section, section_cls in SECTIONS.items():
        assert set(document[section]) == set(section_cls.model_fields), section
    monkeypatch.chdir(tmp_path)
    env = {"XDG_DATA_HOME": str(tmp_path)}
    from_example = load_config(EXAMPLE, env=env)
    from_defaults = load_config(env=env)
    from perfwatch.detectors.edivisive import EDivisiveParams

    documented = {k: v for k, v in EDivisiveParams().to_dict().items() if v is not None}
    assert from_example.analyzer == documented
    for section in SECTIONS:
        assert getattr(from_example, section) == getattr(from_defaults, section), section


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [store]
        url = "sqlite:///from-file.db"
        [consumer]
        subscription = "file-sub"
        batch_size = 7
        [broker]
        url = "pulsar://file:6650"
        """,
    )
    env = {
        "PERFWATCH_STORE_URL": "postgresql://env/db",
        "PERFWATCH_CONSUMER_SUBSCRIPTION": "env-sub",
    }
    config = load_config(
        path,
        env=env,
        overrides={"consumer.subscription": "flag-sub", "broker.url": None},
    )
    assert config.consumer.batch_size == 7  # file only
    assert config.store.url == "postgresql://env/db"  # env beats file
    assert config.consumer.subscription == "flag-sub"  # flag beats env
    assert config.broker.url == "pulsar://file:6650"  # an unset flag masks nothing


def test_config_file_from_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[topics]\nrecords = "persistent://t/n/r"\n')
    config = load_config(env={"PERFWATCH_CONFIG": str(path)})
    assert config.topics.records == "persistent://t/n/r"


def test_environment_values_are_converted(tmp_path: Path) -> None:
    config = load_config(
        env={
            "PERFWATCH_CONFIG": str(write(tmp_path, "")),
            "PERFWATCH_SERIES_IDENTIFYING_ATTRIBUTES": "branch, environment",
            "PERFWATCH_BROKER_TLS_ALLOW_INSECURE": "yes",
            "PERFWATCH_OBSERVABILITY_METRICS_PORT": "9464",
            "PERFWATCH_VERDICTS_PVALUE_DECADES": "2.5",
        },
    )
    assert config.series.identifying_attributes == ("branch", "environment")
    assert config.broker.tls_allow_insecure is True
    assert config.observability.metrics_port == 9464
    assert config.verdicts.pvalue_decades == 2.5


def test_analyzer_rules_override_key_by_key_in_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [analyzer]
        window_len = 40
        max_pvalue = 0.01
        [[analyzer.rules]]
        test = "db.*"
        max_pvalue = 0.0001
        [[analyzer.rules]]
        test = "db.*"
        metric = "p99*"
        min_magnitude = 0.05
        """,
    )
    config = load_config(path, env={})
    assert config.analyzer_params_for("web.home", "p99_ms") == {
        "window_len": 40,
        "max_pvalue": 0.01,
    }
    assert config.analyzer_params_for("db.insert", "mean_ms") == {
        "window_len": 40,
        "max_pvalue": 0.0001,
    }
    assert config.analyzer_params_for("db.insert", "p99_ms") == {
        "window_len": 40,
        "max_pvalue": 0.0001,
        "min_magnitude": 0.05,
    }


def test_directions_first_matching_pattern_wins(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [directions]
        "throughput_peak" = "lower_is_better"
        "throughput*" = "higher_is_better"
        "*_ms" = "lower_is_better"
        """,
    )
    config = load_config(path, env={})
    assert config.direction_for("throughput_peak") == "lower_is_better"
    assert config.direction_for("throughput_rps") == "higher_is_better"
    assert config.direction_for("p99_ms") == "lower_is_better"
    assert config.direction_for("memory") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[broker]\nurll = 'x'\n", "[broker] urll: unknown key"),
        ("[brokers]\nurl = 'x'\n", "[brokers]: unknown section"),
        ("[consumer]\nbatch_size = 'many'\n", '[consumer] batch_size = "many": must be a valid'),
        ("[consumer]\nbatch_size = 0\n", "[consumer] batch_size = 0: must be greater than 0"),
        ("[analyzer]\nwindow = 3\n", "[analyzer]: unknown E-Divisive parameter(s): window"),
        ("[analyzer]\nmax_pvalue = -2.0\n", "[analyzer]: max_pvalue must be a finite number"),
        ("[[analyzer.rules]]\ntest = 'a'\nwindow_len = 1\n", "analyzer.rules[0]: window_len"),
        ("[directions]\nlatency = 'down'\n", "directions.latency: expected one of"),
        ("[store]\nurl = 'mysql://x'\n", '[store] url = "mysql://x": expected sqlite:///PATH'),
        ("[observability]\nlog_format = 'xml'\n", "log_format = \"xml\": must be 'text' or 'json'"),
        ("[broker\n", "invalid TOML"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert message in str(raised.value)
    assert str(path) in str(raised.value)


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^PERFWATCH_CONSUMER_MAX_REDELIVERIES=lots: must be"):
        load_config(write(tmp_path, ""), env={"PERFWATCH_CONSUMER_MAX_REDELIVERIES": "lots"})


def test_a_bad_variable_of_a_setting_that_has_a_flag_names_the_variable(tmp_path: Path) -> None:
    """Commands pass the flag of every setting they have a flag for, given or not: a bad
    value that came from the environment is still the variable's."""
    with pytest.raises(ConfigError, match=r"^PERFWATCH_CONSUMER_BATCH_SIZE=abc: must be"):
        load_config(
            write(tmp_path, ""),
            env={"PERFWATCH_CONSUMER_BATCH_SIZE": "abc"},
            overrides={"consumer.batch_size": None},
            flag_names={"consumer.batch_size": "--batch"},
        )


def test_unknown_variables_are_named_with_the_nearest_known_one() -> None:
    env = {
        "PERFWATCH_BROKR_URL": "pulsar://x:6650",
        "PERFWATCH_STORE_URL": "sqlite:///x.db",
        "PERFWATCH_CONFG": "x.toml",
        "PERFWATCH_NOTHING_LIKE_IT": "1",
        "PERFWATCH_TEST_POSTGRES_URL": "postgresql://x",
        "PERFWATCH_PG_PORT": "25432",
        "PERFWATCHER": "1",
        "HYPOTHESIS_PROFILE": "ci",
    }
    assert unknown_variables(env) == [
        ("PERFWATCH_BROKR_URL", "PERFWATCH_BROKER_URL"),
        ("PERFWATCH_CONFG", "PERFWATCH_CONFIG"),
        ("PERFWATCH_NOTHING_LIKE_IT", None),
    ]


def test_no_variable_the_project_itself_uses_is_unknown() -> None:
    used = {setting_variable(key) for key in setting_keys()}
    for folder in ("src", "scripts", ".ci", "tests", "deploy", "docs", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix not in {".pyc", ".so", ".c"}:
                used |= set(VARIABLE.findall(path.read_text(errors="ignore")))
    for path in (ROOT / "README.md", ROOT / "docker-compose.yml", ROOT / "Dockerfile"):
        used |= set(VARIABLE.findall(path.read_text()))
    # The placeholder of the naming rule and the unknown names these tests warn about.
    placeholders = {
        "PERFWATCH_SECTION_KEY",
        "PERFWATCH_BROKR_URL",
        "PERFWATCH_CONFG",
        "PERFWATCH_NOTHING_LIKE_IT",
        "PERFWATCH_ANALYZER_WINDOW_LEN",
    }
    assert unknown_variables(dict.fromkeys(used - placeholders, "")) == []


def test_unknown_flag_setting_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="command line: unknown setting 'consumer'"):
        load_config(write(tmp_path, ""), env={}, overrides={"consumer": "x"})


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_defaults_are_a_valid_config() -> None:
    assert isinstance(Config(), Config)


def test_errors_say_where_the_value_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "[consumer]\nbatch_size = -3\n")
    cases = [
        ({}, {}, f"{path}: [consumer] batch_size = -3: must be greater than 0"),
        ({"PERFWATCH_CONSUMER_BATCH_SIZE": "-3"}, {}, "PERFWATCH_CONSUMER_BATCH_SIZE=-3: must be"),
        ({}, {"consumer.batch_size": 0}, "command line: [consumer] batch_size = 0: must be"),
    ]
    for env, overrides, message in cases:
        with pytest.raises(ConfigError) as raised:
            load_config(path, env=env, overrides=overrides)
        assert str(raised.value).startswith(message)
    with pytest.raises(ConfigError, match=r"^--batch 0: must be greater than 0$"):
        load_config(
            path,
            env={},
            overrides={"consumer.batch_size": 0},
            flag_names={"consumer.batch_size": "--batch"},
        )
    write(tmp_path, "[consumer]\nbach_size = 3\n")
    with pytest.raises(
        ConfigError, match=r"^.*perfwatch.toml: \[consumer\] bach_size: unknown key$"
    ):
        load_config(path, env={})


def test_flags_get_help_type_and_default_from_the_declarations() -> None:
    from perfwatch.cli.serve import serve

    options = {param.opts[0]: param for param in serve.params}
    port = options["--metrics-port"]
    assert port.help == "Serve Prometheus /metrics on this port (0: none)."
    assert port.type.to_info_dict()["min"] == 0 and port.type.to_info_dict()["max"] == 65535
    assert options["--log-format"].type.to_info_dict()["choices"] == ("text", "json")
    assert options["--subscription"].show_default == (
        "consumer.subscription in the config, else perfwatch"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"topics.records": ""}, '[topics] records = "": must not be empty'),
        ({"consumer.subscription": " "}, '[consumer] subscription = " ": must not be empty'),
        (
            {"topics.dead_letter": "persistent://public/default/perfwatch-records"},
            'dead_letter = "persistent://public/default/perfwatch-records": must be another '
            "topic than topics.records",
        ),
        (
            {"topics.verdicts": "perfwatch-records"},
            "must be another topic than topics.records",
        ),
        (
            {"topics.records": "t/n/in", "topics.dead_letter": "persistent://t/n/in"},
            'dead_letter = "persistent://t/n/in": must be another topic than topics.records',
        ),
        (
            {"topics.dead_letter": "perfwatch-verdicts"},
            "must be another topic than topics.verdicts",
        ),
    ],
)
def test_topics_and_subscription_are_checked_before_connecting(
    tmp_path: Path, overrides: dict[str, str], message: str
) -> None:
    """An empty name was refused by the broker only after connecting (exit status 3, as if
    it were down), and a dead-letter topic that is the records topic made `serve` read its
    own dead letters back and dead-letter them again, for ever."""
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, ""), env={}, overrides=overrides)
    assert message in str(raised.value)
