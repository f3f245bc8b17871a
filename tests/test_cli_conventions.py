"""Every command fails the same way: `perfwatch CMD: error: MESSAGE` on stderr, exit status
2 for bad input, 3 for a broker or store that cannot be reached, 130 for Ctrl-C; the same
option names mean the same thing everywhere (README, "Exit status")."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from perfwatch.cli import options
from perfwatch.cli.main import main
from perfwatch.config import LOG_LEVELS
from perfwatch.contract.models import InputProfile
from perfwatch.readers.input_profile import InputProfileFile, write_input_profile
from perfwatch.state import open_store

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]
CLOSED_PORT_URL = "pulsar://127.0.0.1:1"  # nothing listens on port 1 of loopback
PULSAR_COMMANDS = ("publish", "watch", "forward", "serve", "profile", "dashboard", "dead-letters")
BROKER_OPTIONS = {
    "--pulsar-url",
    "--auth-token",
    "--tls-trust-certs",
    "--tls-cert",
    "--tls-key",
    "--connect-timeout",
    "--pulsar-log-level",
}
# The commands reading the configuration file: those talking to Pulsar, and analyze
# for its [analyzer] rules and [directions].
CONFIG_COMMANDS = (*PULSAR_COMMANDS, "analyze")
# Options that several commands share: one definition, the same help everywhere.
SHARED_OPTIONS = BROKER_OPTIONS | {
    "--config",
    "--records-topic",
    "--verdicts-topic",
    "--log-level",
    "--store",
}


def _error_line(stderr: str, command: str) -> str:
    """The convention's error line (after click's usage lines for usage errors)."""
    lines = [line for line in stderr.splitlines() if line.startswith(f"perfwatch {command}: ")]
    assert lines, f"no 'perfwatch {command}: error:' line in:\n{stderr}"
    assert lines[-1].startswith(f"perfwatch {command}: error: "), stderr
    return lines[-1]


def _invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(main, list(args))


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PERFWATCH, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    record = {
        "schema": "perfwatch.record/v1",
        "test": "svc/load",
        "run_id": "run-1",
        "commit": "abc123",
        "timestamp": "2024-05-01T00:00:00Z",
        "metrics": {"latency_ms": 12.5},
    }
    path.write_bytes(orjson.dumps(record) + b"\n")
    return path


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    generator = random.Random(3)
    profiles = [
        InputProfile(
            f"test_case[{i}]", size, size * 1e-4, size * 1e-4, 1e6, int(size) * 10, 5, 3, 2
        )
        for i, size in enumerate(generator.uniform(10, 1000) for _ in range(40))
    ]
    path = tmp_path / "baseline.json"
    write_input_profile(path, InputProfileFile.create(kind="full_suite", profiles=profiles))
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


# --- bad input: exit status 2 ----------------------------------------------------------------


BAD_INPUT = {
    "analyze": ["analyze", "missing.csv"],
    "publish": ["publish", "--dry-run", "{bad}"],
    "watch": ["watch", "--kind", "change"],
    "forward": ["forward", "--webhook", "http://127.0.0.1:9/", "--template", "{nope}"],
    "serve": ["serve", "--store", "mysql://db/x"],
    "compare": ["compare", "--baseline", "missing.csv", "--target", "missing.csv"],
    "profile": ["profile", "--reference", "{bad}"],
    "recommend": ["recommend", "--baseline", "{bad}"],
    "dashboard": ["dashboard", "--store", "mysql://db/x"],
    "dead-letters": ["dead-letters", "--limit", "0"],
    "demo": ["demo", "--runs", "many"],
    "dev pulsar": ["dev", "pulsar", "--port", "70000"],
    "dev embedded": ["dev", "embedded", "--port", "0"],
}


@pytest.mark.parametrize("command", sorted(BAD_INPUT))
def test_bad_input_is_exit_status_2_with_the_command_named(command: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "perfwatch.record/v1", "test": 3}\n')
    args = [arg.replace("{bad}", str(bad)) for arg in BAD_INPUT[command]]
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    _error_line(result.stderr, command)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("variable", "why"),
    [
        # misspelt: the nearest setting is named
        ("PERFWATCH_BROKR_URL", "; did you mean PERFWATCH_BROKER_URL?"),
        (
            "PERFWATCH_ANALYZER_WINDOW_LEN",
            ": [analyzer] and [directions] are read from the configuration file only",
        ),
    ],
)
def test_an_ignored_variable_is_one_warning_saying_why(
    variable: str, why: str, record_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "30")
    monkeypatch.setenv("PERFWATCH_TEST_ANYTHING", "1")  # the tests' own: no warning
    result = _invoke("publish", "--dry-run", str(record_file))
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"perfwatch publish: warning: {variable} is not a perfwatch setting and is ignored{why}\n"
    )


def test_a_bad_variable_is_named_also_where_a_flag_sets_the_same_setting() -> None:
    result = CliRunner().invoke(
        main, ["watch", "--idle-timeout", "0"], env={"PERFWATCH_BROKER_CONNECT_TIMEOUT": "soon"}
    )
    assert result.exit_code == 2
    line = _error_line(result.stderr, "watch")
    assert line.startswith("perfwatch watch: error: PERFWATCH_BROKER_CONNECT_TIMEOUT=soon: ")


def test_no_number_option_takes_nan_or_an_infinity() -> None:
    """NaN passes every bound check, and an infinite threshold or time-out means nothing."""
    numeric = [
        (f"perfwatch {path} {name}", option)
        for path, command in _commands()
        for name, option in _options(command).items()
        if isinstance(option.type, click.types.FloatParamType)
    ]
    assert len(numeric) > 10
    for label, option in numeric:
        for text in ("nan", "inf", "-inf", "1e400"):
            with pytest.raises(click.BadParameter):
                option.type.convert(text, option, None)
                pytest.fail(f"{label} took {text}")


def test_a_webhook_that_is_no_http_url_is_bad_input() -> None:
    for url in ("hooks.slack.com/services/T0", "ftp://host/", "http://", "http://host:port/"):
        result = _invoke("forward", "--webhook", url, "--pulsar-url", CLOSED_PORT_URL)
        assert result.exit_code == 2, result.output
        line = _error_line(result.stderr, "forward")
        assert line.endswith("--webhook: not an http:// or https:// URL with a host name")


@pytest.mark.parametrize(
    "dead_letters",
    ["perfwatch-verdicts", "persistent://public/default/perfwatch-verdicts"],
)
def test_forward_refuses_to_dead_letter_into_the_topic_it_forwards(dead_letters: str) -> None:
    """A verdict the webhook refused would be read back from there and posted again."""
    result = _invoke(
        "forward",
        "--webhook",
        "http://127.0.0.1:9/",
        "--undeliverable-topic",
        dead_letters,
        "--pulsar-url",
        CLOSED_PORT_URL,
    )
    assert result.exit_code == 2, result.output
    line = _error_line(result.stderr, "forward")
    assert line.endswith(
        f"--undeliverable-topic {dead_letters}: must be another topic than the verdicts "
        "topic it forwards"
    )


IDENTITY_OPTIONS = {
    "publish": ("--test", "--run-id", "--commit", "--branch"),
    "profile": ("--test", "--branch"),
}


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command, names in sorted(IDENTITY_OPTIONS.items())
        for option in names
        for value in ("", " ")
    ],
)
def test_a_blank_identity_flag_is_a_usage_error_naming_it(
    command: str, option: str, value: str, record_file: Path, tmp_path: Path
) -> None:
    # A blank commit or branch would replace the report's, or CI's, with none at all.
    if command == "publish":
        arguments = [str(record_file), "--dry-run"]
    else:  # an empty folder: no suite to run, should the option be let through
        (tmp_path / "suite").mkdir()
        arguments = ["-o", str(tmp_path / "inputs.json"), "--", str(tmp_path / "suite")]
    result = _invoke(command, option, value, *arguments)
    assert result.exit_code == 2, result.output
    assert _error_line(result.stderr, command).endswith(
        f"Invalid value for '{option}': must not be empty; leave the option out for its default"
    )


@pytest.mark.parametrize(
    "command",
    [["watch"], ["forward", "--webhook", "http://127.0.0.1:9/"], ["dashboard", "--port", "0"]],
)
def test_a_blank_subscription_is_a_usage_error_naming_it(command: list[str]) -> None:
    """The broker refused it only once connected: exit status 3, "InvalidConfiguration"."""
    result = _invoke(*command, "--subscription", "", "--pulsar-url", CLOSED_PORT_URL)
    assert result.exit_code == 2, result.output
    assert _error_line(result.stderr, command[0]).endswith(
        "Invalid value for '--subscription': must not be empty; leave the option out for "
        "its default"
    )


@pytest.mark.parametrize("command", [["watch"], ["forward", "--webhook", "http://127.0.0.1:9/"]])
def test_a_blank_test_glob_is_a_usage_error_naming_it(command: list[str]) -> None:
    """`forward --test "$SERVICE"` with the variable unset matched no test and filtered out
    every alert, silently."""
    result = _invoke(*command, "--test", "", "--pulsar-url", CLOSED_PORT_URL)
    assert result.exit_code == 2, result.output
    assert _error_line(result.stderr, command[0]).endswith(
        "Invalid value for '--test': must not be empty; leave the option out for its default"
    )


def test_a_blank_attribute_value_is_a_usage_error_naming_it(record_file: Path) -> None:
    # `--attr runner=$RUNNER` with the variable unset would blank the record's own runner
    result = _invoke("publish", "--dry-run", "--attr", "runner=", str(record_file))
    assert result.exit_code == 2, result.output
    assert _error_line(result.stderr, "publish").endswith(
        "Invalid value for '--attr': 'runner=': the value of runner is empty"
    )


def test_recommend_reference_without_update_is_a_usage_error(profile_file: Path) -> None:
    result = _invoke("recommend", "--baseline", str(profile_file), "--reference", str(profile_file))
    assert result.exit_code == 2
    assert "--reference is the old code's side of --update" in _error_line(
        result.stderr, "recommend"
    )


def test_profile_without_pytest_says_to_install_it(tmp_path: Path) -> None:
    # A module named pytest that cannot be imported stands for an environment without pytest.
    (tmp_path / "pytest.py").write_text("raise ImportError('no pytest in this environment')\n")
    (tmp_path / "test_tiny.py").write_text("def test_one():\n    pass\n")
    result = subprocess.run(
        [*PERFWATCH, "profile", "-o", str(tmp_path / "p.json"), "--", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 2, result.stderr
    line = _error_line(result.stderr, "profile")
    assert line.endswith("does not have: pip install pytest")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("group", [[], ["dev"]])
def test_a_group_without_a_command_shows_its_help(group: list[str]) -> None:
    result = _invoke(*group)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Usage: perfwatch {' '.join([*group, ''])}[OPTIONS] COMMAND")
    assert "error:" not in result.stderr


NOT_UTF8 = [
    ("image.png", b"\x89PNG\r\n\x1a\n", "1:1: not UTF-8 text (byte 0x89)"),
    ("latin.csv", "time,x\n1,caf\xe9\n".encode("latin-1"), "2:6: not UTF-8 text (byte 0xe9)"),
    ("latin.jsonl", b'{"test": "caf\xe9"}\n', "1:14: not UTF-8 text (byte 0xe9)"),
    ("latin.json", b'{"test": "caf\xe9"}', "1:14: not UTF-8 text (byte 0xe9)"),
]


@pytest.mark.parametrize(
    ("command", "name", "content", "where"),
    [(command, *case) for command in ("analyze", "publish") for case in NOT_UTF8]
    + [("compare", *case) for case in NOT_UTF8 if case[0].endswith(".csv")],
)
def test_text_that_is_not_utf8_is_located_alike_by_every_command(
    tmp_path: Path, command: str, name: str, content: bytes, where: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    args = {
        "analyze": [str(path)],
        "publish": ["--dry-run", str(path)],
        "compare": ["--baseline", str(path), "--target", str(path)],
    }[command]
    result = _invoke(command, *args)
    assert result.exit_code == 2, result.output
    first = result.stderr.splitlines()[0]  # publish then counts the files it refused
    assert first == f"perfwatch {command}: error: {path}:{where}; save it as UTF-8"


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        (["analyse"], "perfwatch: error: No such command 'analyse'. Did you mean 'analyze'?"),
        (["serv"], "perfwatch: error: No such command 'serv'. Did you mean 'serve'?"),
        (["dev", "embeded"], "error: No such command 'embeded'. Did you mean 'embedded'?"),
        (["zzz"], "perfwatch: error: No such command 'zzz'."),
    ],
)
def test_a_mistyped_command_gets_the_closest_one_suggested(typed: list[str], hint: str) -> None:
    result = _invoke(*typed)
    assert result.exit_code == 2
    assert result.stderr.rstrip().endswith(hint)


def test_profile_with_a_failing_test_is_exit_status_1(tmp_path: Path) -> None:
    suite = tmp_path / "test_suite.py"
    suite.write_text("def test_passes():\n    pass\n\ndef test_fails():\n    assert False\n")
    output = tmp_path / "inputs.json"
    result = _invoke(
        *("profile", "--repeats", "1", "--warmup", "0", "-o", str(output), "--"),
        *(str(suite), "-q", "-p", "no:cacheprovider"),
    )
    assert result.exit_code == 1, result.output
    assert output.exists()  # the passing test's profile is still written


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("--publsh", "; perfwatch profile has no option --publsh: did you mean --publish?"),
        # pytest's own option, refused for another reason (no such file): no hint
        (f"--rootdir={Path.cwd()}", ""),
    ],
)
def test_profile_says_which_of_its_options_a_mistyped_one_pytest_refused_meant(
    tmp_path: Path, option: str, hint: str
) -> None:
    output = tmp_path / "inputs.json"
    missing = tmp_path / "no_such_tests.py" if hint == "" else tmp_path
    result = _invoke("profile", "-o", str(output), option, "--", str(missing))
    assert result.exit_code == 2, result.output
    assert _error_line(result.stderr, "profile").endswith(
        f"pytest exited with status 4 (a usage error in the pytest arguments) and profiled "
        f"no test; {output} was not written{hint}"
    )


def test_profile_of_a_suite_that_does_not_import_is_bad_input_not_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text("import not_installed_anywhere\n")
    result = _invoke(
        *("profile", "-o", str(tmp_path / "inputs.json"), "--", str(tmp_path), "-q"),
        *("-p", "no:cacheprovider"),
    )
    assert result.exit_code == 2, result.output
    line = _error_line(result.stderr, "profile")
    assert "status 2 (errors while collecting the tests, or interrupted)" in line


def test_profile_old_dir_whose_suite_does_not_import_says_where_to_look(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for tree, module in ((old, "not_installed_anywhere"), (new, "os")):
        tree.mkdir()
        (tree / "test_suite.py").write_text(f"import {module}\n\ndef test_one():\n    pass\n")
    sample = tmp_path / "sample.txt"
    sample.write_text("test_suite.py::test_one\n")
    options = ["--only", str(sample), "--old-dir", str(old), "--rounds", "1", "--repeats", "1"]
    result = subprocess.run(
        [*PERFWATCH, "profile", *options, "-o", str(tmp_path / "u.json"), "--", "test_suite.py"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=new,
    )
    assert result.returncode == 2, result.stderr
    line = _error_line(result.stderr, "profile")
    assert f"round 1 on the old code ({old}): pytest exited with status 2" in line
    assert "-m pytest test_suite.py` there shows why" in line


def test_every_command_is_covered() -> None:
    commands = set(main.list_commands(click.Context(main))) - {"dev"}
    commands |= {"dev pulsar", "dev embedded"}
    assert set(BAD_INPUT) == commands


# --- a broker that does not answer: exit status 3 within the connect timeout ---------------


BROKER_COMMANDS = {
    "publish": ["publish", "{records}"],
    "watch": ["watch"],
    "forward": ["forward", "--webhook", "http://127.0.0.1:9/"],
    "serve": ["serve", "--store", "sqlite:///{tmp}/state.db"],
    "dead-letters": ["dead-letters"],
}


@pytest.mark.parametrize("command", sorted(BROKER_COMMANDS))
def test_unreachable_broker_is_exit_status_3_naming_the_url(
    command: str, record_file: Path, tmp_path: Path
) -> None:
    args = [
        arg.replace("{records}", str(record_file)).replace("{tmp}", str(tmp_path))
        for arg in BROKER_COMMANDS[command]
    ]
    completed = _run(*args, "--pulsar-url", CLOSED_PORT_URL, "--connect-timeout", "2")
    assert completed.returncode == 3, completed.stderr
    line = _error_line(completed.stderr, command)
    assert CLOSED_PORT_URL in line and "check that the broker runs" in line
    # The wait is the one asked for (wall-clock bounds would measure the machine's load).
    assert "no answer within 2 s" in line
    # perfwatch's line is all: not the client's own line for every connection attempt.
    assert completed.stderr.splitlines() == [line]
    assert completed.stdout == ""


def test_unreachable_broker_gives_up_within_the_default_10_s(record_file: Path) -> None:
    began = time.monotonic()
    completed = _run("publish", str(record_file), "--pulsar-url", CLOSED_PORT_URL)
    elapsed = time.monotonic() - began
    assert completed.returncode == 3, completed.stderr
    assert "no answer within 10 s" in _error_line(completed.stderr, "publish")
    assert elapsed > 9  # it did wait (a busy machine only makes it longer)
    assert completed.stdout == ""


def test_profile_publish_to_an_unreachable_broker(tmp_path: Path) -> None:
    (tmp_path / "test_tiny.py").write_text("def test_one():\n    assert sum(range(9)) == 36\n")
    completed = _run(
        *("profile", "--publish", "--repeats", "1", "--warmup", "0"),
        *("--pulsar-url", CLOSED_PORT_URL, "--connect-timeout", "2"),
        *("-o", str(tmp_path / "inputs.json"), "--", str(tmp_path / "test_tiny.py"), "-q"),
        timeout=120,
    )
    assert completed.returncode == 3, completed.stderr
    assert CLOSED_PORT_URL in _error_line(completed.stderr, "profile")
    assert "ClientConnection" not in completed.stdout + completed.stderr


def test_client_log_level_is_the_users_choice(record_file: Path) -> None:
    unreachable = ("publish", str(record_file), "--pulsar-url", CLOSED_PORT_URL)
    default = _run(*unreachable, "--connect-timeout", "1")
    chosen = _run(*unreachable, "--connect-timeout", "1", "--pulsar-log-level", "debug")
    assert default.returncode == chosen.returncode == 3
    assert default.stderr.splitlines() == [_error_line(default.stderr, "publish")]
    # Asked for, the client's lines show each attempt, on stderr.
    assert " DEBUG [" in chosen.stderr and "Connection refused" in chosen.stderr
    assert default.stdout == chosen.stdout == ""


# A command's clients, as `publish` makes them: the connection check first, then the
# client it works with, following a topic while the broker goes away.
CLIENTS_AFTER_THE_CHECK = """
import sys, time, pulsar
from perfwatch.brokers.handle import BrokerHandle, connect_client
from perfwatch.config import BrokerConfig
handle, settings = BrokerHandle(sys.argv[1], None, "embedded"), BrokerConfig(log_level=sys.argv[2])
client = connect_client(handle, settings, topic="lost")
reader = client.create_reader("lost", pulsar.MessageId.latest)
print("following", flush=True)
sys.stdin.readline()  # the broker is stopped: the client's reconnection attempts fail
time.sleep(3)
"""


@pytest.mark.parametrize("level", ["warning", "off"])
def test_client_log_lines_after_the_connection_check_keep_the_chosen_level(
    tmp_path: Path, level: str
) -> None:
    """The Pulsar client keeps a process's first logger for all its clients: a quiet
    connection check would silence every client after it. Turned off, none of them
    writes a line for its failed reconnections."""
    from perfwatch.brokers import open_broker

    with open_broker(None, data_dir=tmp_path / "broker") as broker:
        process = subprocess.Popen(
            [sys.executable, "-c", CLIENTS_AFTER_THE_CHECK, broker.service_url, level],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdout.readline() == "following\n"
    _, stderr = process.communicate("\n", timeout=60)
    if level == "off":
        assert stderr == ""
    else:
        assert " ERROR [" in stderr and "Connection refused" in stderr, stderr


def _dashboard_run(
    tmp_path: Path, *args: str, until: Callable[[list[str]], bool]
) -> tuple[str, int]:
    """Run `perfwatch dashboard --port 0` against the closed broker port and Ctrl-C it once
    its stderr lines satisfy `until` (or it ended): its stderr, and the status of a health
    request to the URL it logged, sent just before. The store exists already, as a
    processor's would: a new one's warning is not what these tests are about."""
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    open_store(store_url).close()
    process = subprocess.Popen(
        [*PERFWATCH, "dashboard", "--port", "0", "--pulsar-url", CLOSED_PORT_URL,
         "--connect-timeout", "1", "--store", store_url, *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    # Read in a thread: a dashboard that never logs enough must not hang the test.
    reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not until(lines) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    status = 0
    urls = re.findall(r"dashboard starting url=(\S+)", "".join(lines))
    if urls and process.poll() is None:
        with urllib.request.urlopen(f"{urls[0]}healthz", timeout=30) as response:
            status = response.status
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    reader.join(timeout=10)
    return "".join(lines), status


def test_dashboard_reports_an_unreachable_broker_once_and_its_real_port(tmp_path: Path) -> None:
    def retried_twice(lines: list[str]) -> bool:
        retries = "DEBUG perfwatch.dashboard: verdicts topic unavailable"
        return sum(retries in line for line in lines) >= 2

    stderr, health = _dashboard_run(tmp_path, "--log-level", "debug", until=retried_twice)
    assert retried_twice(stderr.splitlines()), stderr
    # Three connection attempts failed: one warning, the retries at debug level, and
    # none of the client's own lines (one per attempt) at its default level.
    warnings = [line for line in stderr.splitlines() if "WARNING perfwatch.dashboard" in line]
    assert len(warnings) == 1 and "verdicts topic unavailable" in warnings[0], stderr
    assert "ClientConnection" not in stderr  # (perfwatch's own lines name the refusal)
    # --port 0: the URL logged is the one the dashboard answers on.
    assert "url=http://127.0.0.1:0/" not in stderr
    assert health == 200, stderr


def test_dashboard_shows_the_clients_log_lines_at_info(tmp_path: Path) -> None:
    def refused(lines: list[str]) -> bool:
        return any("Connection refused" in line for line in lines)

    stderr, _ = _dashboard_run(tmp_path, "--pulsar-log-level", "info", until=refused)
    assert refused(stderr.splitlines()), stderr


def test_client_log_lines_and_messages_share_a_redirected_stderr(
    record_file: Path, tmp_path: Path
) -> None:
    """Both append: neither overwrites the other's lines in a file opened by `2> file`."""
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        subprocess.run(
            [*PERFWATCH, "publish", str(record_file), "--pulsar-url", CLOSED_PORT_URL,
             "--connect-timeout", "1", "--pulsar-log-level", "info"],
            stderr=stderr, stdout=subprocess.DEVNULL, timeout=60, check=False,
        )  # fmt: skip
    lines = log.read_text().splitlines()
    assert any("Connection refused" in line for line in lines)
    assert lines[-1].startswith(f"perfwatch publish: error: Pulsar broker {CLOSED_PORT_URL}")


def _config(directory: Path, broker_section: str) -> Path:
    path = directory / "perfwatch.toml"
    path.write_text(f"[broker]\n{broker_section}\n")
    return path


def test_connect_timeout_comes_from_the_config_file(record_file: Path) -> None:
    config = _config(record_file.parent, "connect_timeout = 1.5")
    completed = _run(
        "publish", str(record_file), "--pulsar-url", CLOSED_PORT_URL, "--config", str(config)
    )
    assert completed.returncode == 3
    assert "no answer within 1.5 s" in completed.stderr


@pytest.mark.parametrize(
    "command", [["dashboard", "--port", "0", "--no-follow-topic"], ["serve", "--name", "unreached"]]
)
def test_unreachable_postgresql_store_is_exit_status_3_and_one_line(
    command: list[str], tmp_path: Path
) -> None:
    store = "postgresql://perfwatch@127.0.0.1:1/perfwatch"
    # a folder of its own: a `perfwatch serve` of the user's holds the default one's lock
    result = _invoke(*command, "--store", store, "--embedded-dir", str(tmp_path))
    assert result.exit_code == 3, result.output
    line = _error_line(result.stderr, command[0])
    assert "state store unavailable" in line and "127.0.0.1" in line
    # libpq's message has a hint on a line of its own: still one line.
    assert result.stderr.strip().splitlines() == [line]


def test_malformed_broker_url_is_bad_input(record_file: Path) -> None:
    result = _invoke("publish", str(record_file), "--pulsar-url", "http://broker:8080")
    assert result.exit_code == 2
    assert "expected pulsar://host:port" in _error_line(result.stderr, "publish")


# --- Ctrl-C: exit status 130, no traceback ---------------------------------------------------


@pytest.mark.parametrize("command", ["publish", "watch", "serve"])
def test_ctrl_c_while_the_broker_does_not_answer(
    command: str, record_file: Path, tmp_path: Path
) -> None:
    args = [
        arg.replace("{records}", str(record_file)).replace("{tmp}", str(tmp_path))
        for arg in BROKER_COMMANDS[command]
    ]
    process = subprocess.Popen(
        [*PERFWATCH, *args, "--pulsar-url", CLOSED_PORT_URL, "--connect-timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.5)  # well into the connection attempts
    process.send_signal(signal.SIGINT)
    began = time.monotonic()
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    # Well before the 60 s connect timeout: the signal ended the wait, not the timeout.
    assert time.monotonic() - began < 30
    assert "Traceback" not in stderr
    assert stdout == ""


def _profile_interrupted_at(marker: Path, args: list[str], *, cwd: Path) -> tuple[int, str]:
    """Run `perfwatch profile ARGS`, Ctrl-C it once `marker` exists (or it ended); its exit
    status and stderr."""
    process = subprocess.Popen(
        [*PERFWATCH, "profile", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,  # a process group of its own, as a terminal's Ctrl-C reaches
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def test_ctrl_c_during_alternating_rounds_leaves_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C reaches perfwatch and both pytest processes: they end before the scratch
    directory their profiles go to is removed."""
    marker = tmp_path / "second-test-running"
    suite = (
        "import pathlib, time\n\ndef test_first():\n    pass\n\n"
        f"def test_second():\n    pathlib.Path({str(marker)!r}).touch()\n    time.sleep(0.05)\n"
    )
    for tree in ("old", "new"):
        (tmp_path / tree).mkdir()
        (tmp_path / tree / "test_suite.py").write_text(suite)
    sample = tmp_path / "sample.txt"
    sample.write_text("test_suite.py::test_first\ntest_suite.py::test_second\n")
    options = ["--only", str(sample), "--old-dir", str(tmp_path / "old"), "--repeats", "1000"]
    options += ["-o", str(tmp_path / "u.json"), "--", "test_suite.py"]
    status, stderr = _profile_interrupted_at(marker, options, cwd=tmp_path / "new")
    assert status == 130, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("alternating", [False, True], ids=["suite", "old-dir"])
def test_ctrl_c_while_pytest_starts_leaves_no_traceback(alternating: bool, tmp_path: Path) -> None:
    """Ctrl-C while pytest still loads its plugins, before it handles Ctrl-C itself."""
    marker = tmp_path / "plugin-loading"
    plugin = f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(600)\n"
    for tree in ("old", "new"):
        (tmp_path / tree).mkdir()
        (tmp_path / tree / "slow_plugin.py").write_text(plugin)
        (tmp_path / tree / "test_suite.py").write_text("def test_one():\n    pass\n")
    sample = tmp_path / "sample.txt"
    sample.write_text("test_suite.py::test_one\n")
    options = ["--only", str(sample), "--old-dir", str(tmp_path / "old")] if alternating else []
    options += ["-o", str(tmp_path / "u.json"), "--", "-p", "slow_plugin", "test_suite.py"]
    status, stderr = _profile_interrupted_at(marker, options, cwd=tmp_path / "new")
    assert status == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


def test_ctrl_c_while_python_imports_the_command_line_leaves_no_traceback() -> None:
    """The signal arrives where a Ctrl-C in the first tenth of a second lands: after the
    `perfwatch.cli` package, while the command modules and click are still imported."""
    interrupted_start = (
        "import os, signal, perfwatch.cli\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "from perfwatch.cli.main import main\n"
        "main()\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", interrupted_start, "analyze", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == -signal.SIGINT  # ended by the signal: 130 in a shell
    assert completed.stderr == completed.stdout == ""


def test_ctrl_c_stops_a_running_command_cleanly(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*PERFWATCH, "dev", "embedded", "--data-dir", str(tmp_path / "broker")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("service URL: pulsar://127.0.0.1:")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr


# --- a port already in use: exit status 2 ----------------------------------------------------


def test_dashboard_port_in_use(busy_port: int, tmp_path: Path) -> None:
    result = _invoke(
        *("dashboard", "--port", str(busy_port), "--store", f"sqlite:///{tmp_path / 's.db'}")
    )
    assert result.exit_code == 2
    line = _error_line(result.stderr, "dashboard")
    assert f"port {busy_port} on 127.0.0.1 is already in use" in line and "--port" in line


def test_serve_metrics_port_in_use(busy_port: int, tmp_path: Path) -> None:
    result = _invoke(
        *("serve", "--metrics-port", str(busy_port), "--pulsar-url", CLOSED_PORT_URL),
        *("--store", f"sqlite:///{tmp_path / 's.db'}"),
    )
    assert result.exit_code == 2
    line = _error_line(result.stderr, "serve")
    assert f"port {busy_port} on 127.0.0.1 is already in use" in line and "--metrics-port" in line


# --- analyze given another format ------------------------------------------------------------


TOOL_REPORTS = {
    "pytest-benchmark": {"benchmarks": [], "machine_info": {}},
    "Google Benchmark": {"benchmarks": [], "context": {}},
    "hyperfine": {"results": [{"command": "sleep 0.1", "mean": 0.1}]},
    "JMH": [
        {
            "benchmark": "org.example.Bench.run",
            "mode": "avgt",
            "primaryMetric": {"score": 1.5, "scoreUnit": "us/op"},
        }
    ],
}


@pytest.mark.parametrize("tool", sorted(TOOL_REPORTS))
def test_analyze_names_a_tool_report_and_what_to_do(tool: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_bytes(orjson.dumps(TOOL_REPORTS[tool]))
    result = _invoke("analyze", str(report))
    assert result.exit_code == 2
    line = _error_line(result.stderr, "analyze")
    assert f"this is a {tool} report: it holds one run" in line
    assert f"perfwatch publish {report}" in line


@pytest.mark.parametrize("tool", sorted(TOOL_REPORTS))
@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("compare", "`perfwatch compare` judges performance-counter samples: perfmon or typeperf"),
        ("recommend", "`perfwatch recommend` reads the per-input profiles `perfwatch profile`"),
    ],
)
def test_compare_and_recommend_name_a_tool_report(
    command: str, reads: str, tool: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    report.write_bytes(orjson.dumps(TOOL_REPORTS[tool]))
    args = ["--baseline", str(report)]
    if command == "compare":
        args += ["--target", str(report)]
    result = _invoke(command, *args)
    assert result.exit_code == 2
    line = _error_line(result.stderr, command)
    assert line.startswith(f"perfwatch {command}: error: {report}: ")
    assert f"this is a {tool} report (one run's timings); {reads}" in line


# --- optional dependencies -------------------------------------------------------------------


@pytest.mark.parametrize("module", ["starlette", "uvicorn", "jinja2", "plotly"])
def test_dashboard_without_its_extra(
    module: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    result = _invoke("dashboard", "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2
    line = _error_line(result.stderr, "dashboard")
    assert f"needs the optional dependency {module}: pip install 'perfwatch[dashboard]'" in line


def test_postgresql_store_without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "perfwatch.state.postgres", raising=False)
    result = _invoke("dashboard", "--port", "0", "--store", "postgresql://db/perfwatch")
    assert result.exit_code == 2
    line = _error_line(result.stderr, "dashboard")
    assert "needs the optional dependency psycopg: pip install 'perfwatch[postgres]'" in line


def test_recommend_plot_without_matplotlib(
    profile_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = _invoke("recommend", "--baseline", str(profile_file), "--plot", str(tmp_path / "p"))
    assert result.exit_code == 2, result.output
    line = _error_line(result.stderr, "recommend")
    assert "needs the optional dependency matplotlib: pip install 'perfwatch[plot]'" in line


# --- one vocabulary --------------------------------------------------------------------------


def _commands() -> Iterator[tuple[str, click.Command]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(click.Context(command)):
                sub = command.get_command(click.Context(command), name)
                assert sub is not None
                yield from walk(sub, f"{path} {name}".strip())

    yield from walk(main, "")


def _options(command: click.Command) -> dict[str, click.Option]:
    return {
        name: param
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
        if name.startswith("--")
    }


def test_every_option_has_help() -> None:
    missing = [
        f"perfwatch {path} {name}"
        for path, command in _commands()
        for name, option in _options(command).items()
        if not (option.help or "").strip()
    ]
    assert missing == []


def test_every_command_talking_to_pulsar_has_the_same_broker_options() -> None:
    commands = dict(_commands())
    for name in PULSAR_COMMANDS:
        assert set(_options(commands[name])) >= BROKER_OPTIONS, name
    # ... and nothing else offers them: a flag that would be ignored
    for path, command in commands.items():
        if path not in PULSAR_COMMANDS:
            assert not BROKER_OPTIONS & set(_options(command)), path


def test_the_commands_reading_the_configuration_file_offer_config() -> None:
    offering = {path for path, command in _commands() if "--config" in _options(command)}
    assert offering == set(CONFIG_COMMANDS)


def test_a_shared_option_means_the_same_in_every_command() -> None:
    seen: dict[str, tuple[str, str | None, object]] = {}
    for path, command in _commands():
        for name, option in _options(command).items():
            if name not in SHARED_OPTIONS:
                continue
            described = (option.help, option.type.to_info_dict(), option.show_default)
            if name in seen:
                assert described == seen[name][1:], f"{name}: {path} vs {seen[name][0]}"
            else:
                seen[name] = (path, *described)
    assert set(seen) == SHARED_OPTIONS


def test_topic_options_follow_one_scheme() -> None:
    for path, command in _commands():
        names = set(_options(command))
        assert "--topic" not in names, path
        if "--dead-letter-topic" in names:
            # only records that cannot be processed are dead-lettered, and read back
            assert path in ("serve", "dead-letters"), path


def test_log_levels_are_the_configs() -> None:
    assert options.LOG_LEVELS == LOG_LEVELS


def test_defaults_are_shown() -> None:
    result = _invoke("publish", "--help")
    shown = " ".join(result.output.split())
    assert "[default: (broker.connect_timeout in the config, else 10); x>0]" in shown


def test_output_to_a_reader_that_went_away_ends_with_status_0() -> None:
    """`perfwatch watch | head -1`: click ended the broken pipe with status 1, which a
    script under `set -o pipefail` takes for a failure."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "nightly.jsonl"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        ended = subprocess.run(
            [*PERFWATCH, "analyze", str(examples)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert ended.returncode == 0, ended.stderr
    assert ended.stderr == ""


def test_the_limit_says_what_it_counts() -> None:
    """`forward --limit 1` read one verdict, mostly one it filters out, and posted nothing,
    where its help said it stopped after one verdict as `watch` does."""
    helps = {
        name: " ".join(_invoke(name, "--help").output.split()) for name in ("watch", "forward")
    }
    assert "Stop after N verdicts shown." in helps["watch"]
    assert "Stop after reading N verdicts, those filtered out included." in helps["forward"]
