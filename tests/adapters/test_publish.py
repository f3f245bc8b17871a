"""`perfwatch publish` and the Publisher API: dry runs, validation, and the real brokers."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pulsar
import pytest
from click.testing import CliRunner, Result

import _tool_reports
from perfwatch import Publisher
from perfwatch.adapters.publisher import PublishError
from perfwatch.brokers import open_broker
from perfwatch.brokers.embedded import EmbeddedBroker
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.cli.main import main
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RecordError

START = datetime(2024, 5, 1, tzinfo=UTC)
LOWER = "lower_is_better"


def _record(test: str, index: int) -> dict:
    return {
        "schema": "perfwatch.record/v1",
        "test": test,
        "run_id": f"{test}-run-{index}",
        "commit": f"{index:040x}",
        "timestamp": format_rfc3339(START + timedelta(seconds=index)),
        "metrics": {"latency": {"value": 10.0 + index, "unit": "ms", "direction": LOWER}},
    }


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    return path


def _publish(*args: str) -> Result:
    return CliRunner().invoke(main, ["publish", "--no-auto-identity", *args])


def _lines(result: Result) -> list[bytes]:
    return result.stdout_bytes.splitlines()


# --- without a broker ------------------------------------------------------------------------


def test_dry_run_prints_valid_files_and_rejects_invalid_ones(tmp_path: Path) -> None:
    good = _write_jsonl(tmp_path / "good.jsonl", [_record("a", 1), _record("a", 2)])
    bad_record = {**_record("b", 2), "metrics": {"latency": "slow"}}
    bad = _write_jsonl(tmp_path / "bad.jsonl", [_record("b", 1), bad_record])

    result = _publish("--dry-run", str(bad), str(good))

    assert result.exit_code == 2
    assert f"{bad}:2:1: $.metrics.latency: expected number or object" in result.stderr
    assert result.stderr.endswith(
        "perfwatch publish: error: 1 of 2 file(s) unreadable or invalid; "
        "nothing from them was sent\n"
    )
    # the valid file is printed exactly as the records it holds
    assert [orjson.loads(line) for line in _lines(result)] == [_record("a", 1), _record("a", 2)]


@pytest.mark.parametrize(
    ("name", "problem"),
    [("missing.json", "no such file"), ("results", "is a directory, not a file")],
)
def test_an_unreadable_file_is_one_line_then_the_count(
    name: str, problem: str, tmp_path: Path
) -> None:
    good = _write_jsonl(tmp_path / "good.jsonl", [_record("a", 1)])
    missing = tmp_path / name
    if name == "results":
        missing.mkdir()

    result = _publish("--dry-run", str(missing), str(good))

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"perfwatch publish: error: {missing}: {problem}",
        "perfwatch publish: error: 1 of 2 file(s) unreadable or invalid; "
        "nothing from them was sent",
    ]
    assert [orjson.loads(line) for line in _lines(result)] == [_record("a", 1)]


def test_invalid_completed_record_names_file_position_and_path(tmp_path: Path) -> None:
    csv = tmp_path / "search.csv"
    csv.write_text("time,commit,score\n2024-01-01T00:00:00Z,aaa,1\n2024-01-02T00:00:00Z,bbb,2\n")

    result = _publish("--dry-run", "--attr", f"note={'x' * 2000}", str(csv))

    assert result.exit_code == 2
    assert f"{csv}: row 2 in time order: $.attributes.note: " in result.stderr
    assert result.stdout_bytes == b""


def test_csv_rows_and_identity_flags(tmp_path: Path) -> None:
    csv = tmp_path / "search.csv"
    csv.write_text("time,commit,score\n2024-01-01T00:00:00Z,aaa,1\n2024-01-02T00:00:00Z,bbb,2\n")

    result = _publish(
        "--dry-run", "--test", "search-api", "--branch", "main", "--attr", "os=linux", str(csv)
    )

    assert result.exit_code == 0, result.output
    first, second = (orjson.loads(line) for line in _lines(result))
    assert first["test"] == "search-api"  # a CSV names no test of its own: replaced
    assert (first["commit"], second["commit"]) == ("aaa", "bbb")  # the file's, not a flag's
    assert first["branch"] == "main" and first["attributes"] == {"os": "linux"}
    assert first["run_id"] != second["run_id"]


def test_dash_reads_the_records_from_standard_input(
    tool_reports: list[Path], tmp_path: Path
) -> None:
    lines = _write_jsonl(tmp_path / "runs.jsonl", [_record("a", 1), _record("a", 2)])
    csv = "time,score\n2024-01-01T00:00:00Z,1\n"

    def piped(data: bytes, *args: str) -> Result:
        return CliRunner().invoke(
            main, ["publish", "--no-auto-identity", "--dry-run", *args], input=data
        )

    from_lines = piped(lines.read_bytes(), "-")
    from_report = piped(tool_reports[0].read_bytes(), "-")
    # a multi-line report behind a byte-order mark, as PowerShell pipes text
    report_text = tool_reports[0].read_text()
    marked = [piped(b"\xef\xbb\xbf" + report_text.encode(), "-")]
    marked.append(piped(report_text.encode("utf-16"), "-"))
    from_csv = piped(csv.encode(), "--format", "otava-csv", "--test", "search", "-")
    bad = piped(orjson.dumps({**_record("b", 1), "metrics": {"latency": "slow"}}), "-")
    csv_unnamed = piped(csv.encode(), "-")
    twice = piped(lines.read_bytes(), "-", "-")

    assert from_lines.exit_code == 0, from_lines.output
    assert from_lines.stdout_bytes == _publish("--dry-run", str(lines)).stdout_bytes
    assert from_report.exit_code == 0, from_report.output
    assert from_report.stdout_bytes == _publish("--dry-run", str(tool_reports[0])).stdout_bytes
    assert [r.stdout_bytes for r in marked] == [from_report.stdout_bytes] * 2, marked[0].output
    assert from_csv.exit_code == 0, from_csv.output
    assert orjson.loads(from_csv.stdout_bytes)["test"] == "search"
    assert bad.exit_code == 2
    assert bad.stderr.startswith(
        "perfwatch publish: error: -:1:1: $.metrics.latency: expected number or object"
    )
    assert csv_unnamed.exit_code == 2
    assert csv_unnamed.stderr.splitlines()[0].endswith(
        "; standard input is read as JSON or JSON Lines unless --format names another format"
    )
    assert twice.exit_code == 2
    assert twice.stderr.splitlines()[-1] == (
        "perfwatch publish: error: Invalid value for 'FILES': '-' (standard input) can be read "
        "once only"
    )


def test_a_report_without_benchmarks_is_a_warning(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.json"  # pytest-benchmark's when no benchmark ran
    report.write_bytes(orjson.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": []}))
    result = _publish("--dry-run", str(report))
    assert result.exit_code == 0, result.output
    assert result.stderr == f"perfwatch publish: warning: {report}: holds no records\n"


def test_run_id_flag_must_not_name_two_runs_of_one_test(tmp_path: Path) -> None:
    csv = tmp_path / "search.csv"
    csv.write_text("time,score\n2024-01-01T00:00:00Z,1\n2024-01-02T00:00:00Z,2\n")
    result = _publish("--dry-run", "--run-id", "build-7", str(csv))
    assert result.exit_code == 2
    assert "several runs of test 'search'" in result.stderr


@pytest.fixture(scope="module")
def tool_reports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Reports written by pytest-benchmark, Google Benchmark, hyperfine and JMH."""
    work = tmp_path_factory.mktemp("tool_reports")
    (work / "pytest-benchmark").mkdir()
    return [
        _tool_reports.pytest_benchmark_report(work / "pytest-benchmark")[0],
        _tool_reports.google_benchmark_report(work, 3),
        *_tool_reports.hyperfine_reports(work).values(),
        *_tool_reports.jmh_reports(work).values(),
    ]


def test_republishing_the_same_report_gives_the_same_run_ids(tool_reports: list[Path]) -> None:
    report = tool_reports[0]
    first = _publish("--dry-run", "--test", "suite", str(report))
    os.utime(report, (0, 0))  # as a copy of the file would: another modification time
    second = _publish("--dry-run", "--test", "suite", str(report))
    assert first.exit_code == second.exit_code == 0
    assert first.stdout_bytes == second.stdout_bytes
    tests = [orjson.loads(line)["test"] for line in _lines(first)]
    assert tests[0] == "suite/test_speed.py::test_sum"  # a tool report: --test is a prefix


def test_jmh_report_is_published_as_its_benchmarks(tmp_path: Path) -> None:
    reports = _tool_reports.jmh_reports(tmp_path)
    timestamp = "2024-05-02T03:04:05Z"

    identity = ("--test", "nightly", "--commit", "c" * 40, "--timestamp", timestamp)

    result = _publish("--dry-run", *identity, str(reports["current"]))

    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in _lines(result)]
    assert [record["test"] for record in records] == [
        "nightly/org.example.bench.SortBench.sort[order=random,size=1000]",
        "nightly/org.example.bench.SortBench.sort[order=random,size=100000]",
        "nightly/org.example.bench.HashBench.murmur",
        "nightly/org.example.bench.CacheBench.lookup[entries=65536]",
        "nightly/org.example.bench.StartupBench.loadConfiguration",
    ]
    assert {record["timestamp"] for record in records} == {timestamp}  # JMH writes no time
    assert {record["commit"] for record in records} == {"c" * 40}
    assert len({record["run_id"] for record in records}) == len(records)
    assert records[2]["metrics"]["avgt"]["direction"] == LOWER
    assert records[2]["metrics"]["thrpt"]["direction"] == "higher_is_better"
    # named explicitly, the same records
    named = _publish("--dry-run", "--format", "jmh", *identity, str(reports["current"]))
    assert named.exit_code == 0 and named.stdout_bytes == result.stdout_bytes


def test_a_date_as_timestamp_is_midnight_utc_and_a_time_needs_its_offset(
    tmp_path: Path,
) -> None:
    report = _tool_reports.jmh_reports(tmp_path)["current"]  # JMH writes no time

    dated = _publish("--dry-run", "--timestamp", "2026-12-01", str(report))
    unzoned = _publish("--dry-run", "--timestamp", "2026-12-01T02:00:00", str(report))

    assert dated.exit_code == 0, dated.output
    assert {orjson.loads(line)["timestamp"] for line in _lines(dated)} == {"2026-12-01T00:00:00Z"}
    assert unzoned.exit_code == 2
    assert unzoned.stderr.splitlines()[-1] == (
        "perfwatch publish: error: Invalid value for '--timestamp': '2026-12-01T02:00:00' is "
        "neither an RFC 3339 time with its offset (2024-05-01T02:00:00Z, "
        "2024-05-01T04:00:00+02:00) nor a date (2024-05-01, midnight UTC)"
    )


def test_bad_jmh_report_names_the_result(tmp_path: Path) -> None:
    report = tmp_path / "jmh.json"
    result = {"benchmark": "org.example.Bench.run", "mode": "avgt"}
    report.write_bytes(
        orjson.dumps([{**result, "primaryMetric": {"score": "slow", "scoreUnit": "us/op"}}])
    )

    published = _publish("--dry-run", str(report))

    assert published.exit_code == 2
    assert published.stderr.splitlines() == [
        f"perfwatch publish: error: {report}: $[0].primaryMetric.score: expected a number "
        '(or "NaN", "+INF", "-INF"), got "slow"',
        "perfwatch publish: error: 1 of 1 file(s) unreadable or invalid; "
        "nothing from them was sent",
    ]
    assert published.stdout_bytes == b""


def test_commit_and_branch_from_ci_variables(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("time,score\n2024-01-01T00:00:00Z,1\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_SHA": "f" * 40, "GITHUB_REF_NAME": "release"}
    result = CliRunner(env=env).invoke(main, ["publish", "--dry-run", str(csv)])
    assert result.exit_code == 0, result.output
    record = orjson.loads(result.stdout_bytes)
    assert (record["commit"], record["branch"]) == ("f" * 40, "release")


# --- through the brokers ---------------------------------------------------------------------


@pytest.fixture
def client(each_broker: BrokerHandle) -> Iterator[pulsar.Client]:
    client = make_client(each_broker)
    yield client
    client.close()


def _subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "reader",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def _receive(consumer: pulsar.Consumer, count: int) -> list[pulsar.Message]:
    messages = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        messages.append(message)
    with pytest.raises(pulsar.Timeout):  # and nothing more
        consumer.receive(timeout_millis=500)
    return messages


def test_every_format_reads_back_as_dry_run_prints(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    unique_topic: Callable[[], str],
    tool_reports: list[Path],
    tmp_path: Path,
) -> None:
    jsonl = _write_jsonl(tmp_path / "records.jsonl", [_record("json-lines", i) for i in range(3)])
    json_array = tmp_path / "records.json"
    json_array.write_bytes(orjson.dumps([_record("json-array", i) for i in range(2)]))
    csv = tmp_path / "runs.csv"
    csv.write_text("time,commit,ops\n2024-01-01T00:00:00Z,aaa,100\n2024-01-02T00:00:00Z,bbb,90\n")
    files = [jsonl, json_array, csv, *tool_reports]
    paths = [str(path) for path in files]

    dry = _publish("--dry-run", *paths)
    assert dry.exit_code == 0, dry.output
    expected = _lines(dry)
    assert len(expected) == 3 + 2 + 2 + 3 + 3 + 3 + 5 + 1

    topic = unique_topic()
    consumer = _subscribe(client, topic)
    sent = _publish("--pulsar-url", each_broker.service_url, "--records-topic", topic, *paths)
    assert sent.exit_code == 0, sent.output
    assert f"published {len(expected)} record(s) to {topic}; all acknowledged" in sent.stderr

    messages = _receive(consumer, len(expected))
    assert sorted(m.data() for m in messages) == sorted(expected)
    # keyed by test, and each test's runs in the order of the files
    by_key: dict[str, list[bytes]] = defaultdict(list)
    for message in messages:
        assert message.partition_key() == orjson.loads(message.data())["test"]
        by_key[message.partition_key()].append(message.data())
    for key, payloads in by_key.items():
        assert payloads == [line for line in expected if orjson.loads(line)["test"] == key]


def test_profile_publishes_its_record_with_the_identity_flags(
    embedded_broker: BrokerHandle,
    unique_topic: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "test_tiny.py").write_text("def test_one():\n    assert sum(range(9)) == 36\n")
    monkeypatch.chdir(tmp_path)
    topic = unique_topic()
    client = make_client(embedded_broker)
    try:
        consumer = _subscribe(client, topic)
        result = CliRunner().invoke(
            main,
            [
                *("profile", "--publish", "--repeats", "1", "--warmup", "0"),
                *("--pulsar-url", embedded_broker.service_url, "--records-topic", topic),
                *("--commit", "c0ffee1", "--branch", "release-2"),
                *("--attr", "machine=ci-large", "--attr", "python=3.11"),
                *("-o", str(tmp_path / "inputs.json"), "--", "test_tiny.py", "-q"),
            ],
        )
        assert result.exit_code == 0, result.output
        (message,) = _receive(consumer, 1)
    finally:
        client.close()
    record = orjson.loads(message.data())
    assert (record["commit"], record["branch"]) == ("c0ffee1", "release-2")
    assert record["attributes"] == {"machine": "ci-large", "python": "3.11"}
    assert record["inputs"]["kind"] == "full_suite"


def test_ten_thousand_records_all_acknowledged(
    pulsar_broker: BrokerHandle, unique_topic: Callable[[], str], tmp_path: Path
) -> None:
    client = make_client(pulsar_broker)
    count = 10_000
    path = _write_jsonl(tmp_path / "many.jsonl", [_record(f"t{i % 100}", i) for i in range(count)])
    topic = unique_topic()
    consumer = _subscribe(client, topic)

    result = _publish(
        "--pulsar-url", pulsar_broker.service_url, "--records-topic", topic, str(path)
    )

    assert result.exit_code == 0, result.output
    assert f"published {count} record(s)" in result.stderr
    run_ids = {orjson.loads(m.data())["run_id"] for m in _receive(consumer, count)}
    client.close()
    assert len(run_ids) == count


def test_publisher_api_waits_for_every_ack(
    each_broker: BrokerHandle, client: pulsar.Client, unique_topic: Callable[[], str]
) -> None:
    topic = unique_topic()
    consumer = _subscribe(client, topic)
    with Publisher(each_broker.service_url, topic=topic) as publisher:
        for index in range(50):
            publisher.publish(_record("api", index))
        with pytest.raises(RecordError, match=r"\$\.run_id: required property is missing"):
            publisher.publish({key: v for key, v in _record("api", 99).items() if key != "run_id"})
    assert publisher.acknowledged == 50
    received = [orjson.loads(m.data())["run_id"] for m in _receive(consumer, 50)]
    assert received == [f"api-run-{index}" for index in range(50)]


def test_refused_message_is_named_with_the_broker_error(
    client: pulsar.Client, unique_topic: Callable[[], str]
) -> None:
    topic = unique_topic()
    consumer = _subscribe(client, topic)
    too_big = b"x" * (6 * 1024 * 1024)  # over the broker's 5 MiB message limit
    with pytest.raises(PublishError) as caught, Publisher(client=client, topic=topic) as publisher:
        publisher.send(b"{}", key="k", label="first")
        publisher.send(too_big, key="k", label="records.jsonl line 2")
        publisher.send(b"{}", key="k", label="third")
    assert [(f.label, f.error) for f in caught.value.failures] == [
        ("records.jsonl line 2", "MessageTooBig")
    ]
    assert "records.jsonl line 2: MessageTooBig" in str(caught.value)
    assert publisher.acknowledged == 2
    assert len(_receive(consumer, 2)) == 2


# The variables that tell publish it runs in a CI job (which it warns of), unset.
NOT_IN_CI: dict[str, str | None] = dict.fromkeys(
    ("CI", "JENKINS_URL", "TF_BUILD", "TEAMCITY_VERSION", "CODEBUILD_BUILD_ID")
)


def test_without_a_url_the_embedded_broker_is_used(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "runs.jsonl", [_record("local", i) for i in range(3)])
    env = {
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PERFWATCH_BROKER_URL": "",
        **NOT_IN_CI,
    }
    arguments = ["publish", "--no-auto-identity", "--records-topic", "local-records", str(path)]
    result = CliRunner(env=env).invoke(main, arguments)
    assert result.exit_code == 0, result.output
    assert "published 3 record(s)" in result.stderr
    assert "warning" not in result.stderr
    # in a CI job a broker URL is most likely missing: said, the records sent all the same
    in_ci = CliRunner(env={**env, "CI": "true"}).invoke(
        main, [*arguments, "--records-topic", "ci-records"]
    )
    assert in_ci.exit_code == 0, in_ci.output
    assert in_ci.stderr.splitlines()[-1] == (
        "perfwatch publish: warning: no broker URL is set (--pulsar-url, PERFWATCH_BROKER_URL, "
        f"[broker] url): the records went to the embedded broker in {tmp_path}/data/perfwatch/"
        "embedded on this CI machine, which only a perfwatch serve on this machine reads"
    )
    # Jenkins sets no CI variable; the folder named is the one the records went to
    jenkins = CliRunner(env={**env, "JENKINS_URL": "http://ci.example.org/"}).invoke(
        main, [*arguments, "--embedded-dir", str(tmp_path / "job")]
    )
    assert jenkins.exit_code == 0, jenkins.output
    assert f"the records went to the embedded broker in {tmp_path}/job on this CI" in (
        jenkins.stderr
    )
    # the broker was stopped with the command; its data folder kept the records
    with open_broker(None, data_dir=tmp_path / "data" / "perfwatch" / "embedded") as handle:
        client = make_client(handle)
        consumer = _subscribe(client, "persistent://public/default/local-records")
        received = [orjson.loads(m.data()) for m in _receive(consumer, 3)]
        client.close()
    assert received == [_record("local", i) for i in range(3)]


def test_a_broker_folder_no_broker_ran_on_is_said(tmp_path: Path) -> None:
    """A mistyped --embedded-dir starts a broker nobody serves: said once, not refused
    (the records wait there for a `perfwatch serve` given the folder)."""
    path = _write_jsonl(tmp_path / "runs.jsonl", [_record("typo", 0)])
    folder = tmp_path / "brokr"
    arguments = ["publish", "--no-auto-identity", "--embedded-dir", str(folder), str(path)]
    first, again = (CliRunner(env=NOT_IN_CI).invoke(main, arguments) for _ in range(2))
    assert first.exit_code == again.exit_code == 0, first.output
    assert (
        f"perfwatch publish: warning: no embedded broker ever ran on {folder}: started an "
        "empty one there for this command (a mistyped --embedded-dir?)"
    ) in first.stderr
    assert "warning" not in again.stderr


def test_once_the_broker_is_gone_the_records_left_are_not_sent(tmp_path: Path) -> None:
    """A send that times out says the broker is gone: the messages after it are reported
    unsent at once, instead of each waiting out a send timeout of its own behind a full
    queue (minutes for a large file)."""
    with (
        EmbeddedBroker(tmp_path / "broker") as broker,
        pytest.raises(PublishError) as caught,
        Publisher(
            broker.service_url, topic="gone", send_timeout_ms=1000, max_pending_messages=10
        ) as publisher,
    ):
        publisher.publish(_record("gone", 0))
        publisher.flush()
        broker.stop(kill=True)
        for index in range(1, 101):
            publisher.publish(_record("gone", index))
    errors = [failure.error for failure in caught.value.failures]
    assert len(errors) == 100
    gone = [error for error in errors if not error.startswith("not sent: ")]
    assert gone and set(gone) <= {"Timeout", "NotConnected", "ConnectError"}, errors
    assert set(errors) - set(gone) == {f"not sent: an earlier message got {gone[0]}"}
    assert len(gone) <= 20, errors  # those in the queue when the first send timed out
