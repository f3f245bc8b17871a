"""`perfwatch watch`: verdict lines, filters, and following the verdicts topic on the brokers."""

from __future__ import annotations

import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import orjson
import pulsar
import pytest
from click.testing import CliRunner

from _verdict_samples import COMMIT, EMITTED_AT, IncidentStream, verdict
from perfwatch.adapters.verdict_feed import (
    SeenVerdicts,
    VerdictFilter,
    is_regression,
    parse_since,
    summary_fields,
)
from perfwatch.brokers.admin import admin_request
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.cli.main import main
from perfwatch.cli.watch import verdict_line
from perfwatch.contract.codec import dumps
from perfwatch.contract.timestamps import format_rfc3339

PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]

# --- lines and filters ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            verdict(),
            "2024-05-01T12:00:00Z  REGRESSION  api/search p99 +12.3% p=0.0012 "
            "commit abc1234def56 [branch=main]  change_point.detected",
        ),
        (
            verdict(direction="improvement", change=-8.0),
            "2024-05-01T12:00:00Z  IMPROVEMENT api/search p99 -8.0% p=0.0012 "
            "commit abc1234def56 [branch=main]  change_point.detected",
        ),
        (
            verdict("change_point.updated"),
            "2024-05-01T12:00:00Z  REGRESSION  api/search p99 +12.3% p=0.0012 "
            "commit abc1234def56 (moved) [branch=main]  change_point.updated",
        ),
        (
            verdict("change_point.retracted"),
            "2024-05-01T12:00:00Z  RETRACTED   api/search p99 +6.2% p=0.0012 "
            "commit abc1234def56 (regression no longer seen) [branch=main]  change_point.retracted",
        ),
        (
            verdict("counter_regression.detected"),
            "2024-05-01T12:00:00Z  REGRESSION  api/search (counters: 1 of 2 cluster(s) flagged, "
            "p=0.00042, look first at cpu, requests, net and 1 more) "
            "[branch=main]  counter_regression.detected",
        ),
        (
            verdict("counter_check.passed"),
            "2024-05-01T12:00:00Z  PASSED      api/search (counters: 0 of 2 cluster(s) flagged, "
            "p=0.61) [branch=main]  counter_check.passed",
        ),
        (
            verdict("counter_check.insufficient_baseline"),
            "2024-05-01T12:00:00Z  NO VERDICT  api/search (counters: no verdict, a baseline of "
            "one run shows no run-to-run variation to judge by) "
            "[branch=main]  counter_check.insufficient_baseline",
        ),
        (
            verdict("recommendation"),
            "2024-05-01T12:00:00Z  RUN         api/search (67% of votes say run) "
            "[branch=main]  recommendation",
        ),
    ],
)
def test_verdict_line(document: dict, expected: str) -> None:
    line = verdict_line(document)
    assert click.unstyle(line) == expected
    assert line != expected  # coloured until click.echo strips it for a non-terminal


def test_a_counter_verdict_of_the_threshold_rule_names_its_threshold() -> None:
    document = verdict("counter_regression.detected")
    document["counter_check"].update(pvalue=None, decision="threshold", threshold=0.3)
    assert summary_fields(document)["detail"] == (
        "(counters: 1 of 2 cluster(s) flagged, threshold 30%, "
        "look first at cpu, requests, net and 1 more)"
    )


def test_regression_line_is_red() -> None:
    assert click.style("REGRESSION ", fg="red", bold=True) in verdict_line(verdict())


def test_filters() -> None:
    regression = verdict()
    improvement = verdict(direction="improvement", change=-5.0, test="db/write")
    counters = verdict("counter_regression.detected", test="db/read")
    retracted = verdict("change_point.retracted")
    everything = [regression, improvement, counters, retracted]

    def kept(verdict_filter: VerdictFilter) -> list[dict]:
        return [document for document in everything if verdict_filter.accepts(document)]

    assert kept(VerdictFilter()) == everything
    assert kept(VerdictFilter(tests=["db/*"])) == [improvement, counters]
    assert kept(VerdictFilter(kinds=["change_point"])) == [regression, improvement, retracted]
    assert kept(VerdictFilter(kinds=["change_point.retracted"])) == [retracted]
    assert kept(VerdictFilter(regressions_only=True)) == [regression, counters]
    assert [is_regression(document) for document in everything] == [True, False, True, False]
    later = verdict(emitted_at=EMITTED_AT + timedelta(hours=2))
    assert not VerdictFilter(since=EMITTED_AT + timedelta(hours=1)).accepts(regression)
    assert VerdictFilter(since=EMITTED_AT + timedelta(hours=1)).accepts(later)


def test_an_incident_passes_the_filters_of_any_of_its_series() -> None:
    """Confirmed findings with a commit alert only through their incident: a filter
    on regressions or on a test must judge the incident by its members."""
    stream = IncidentStream()
    faster = stream.change(joined=["cache"], change=-6.0, direction="improvement")
    slower = stream.change(joined=["search"])
    emptied = stream.change(left=["cache", "search"])
    alerts = VerdictFilter(regressions_only=True, alerts_only=True)
    # emptied, the incident has no member to judge: it passes as the incident it was
    assert [alerts.accepts(document) for document in (faster, slower, emptied)] == [
        False,
        True,
        True,
    ]
    # svc/search caused the update; svc/cache, the first member, is in it too
    assert VerdictFilter(tests=["svc/cache"]).accepts(slower)
    assert not VerdictFilter(tests=["svc/other"]).accepts(slower)
    assert not VerdictFilter(tests=["svc/search"]).accepts(faster)


def test_a_filter_follows_the_incidents_it_kept_until_they_empty() -> None:
    stream = IncidentStream()
    slower = stream.change(joined=["search"])
    faster = stream.change(joined=["cache"], change=-6.0, direction="improvement")
    only_faster = stream.change(left=["search"])
    emptied = stream.change(left=["cache"])
    reopened = stream.change(joined=["cache"], change=-6.0, direction="improvement")
    history = [slower, faster, only_faster, emptied, reopened]

    def kept(verdict_filter: VerdictFilter, documents: list[dict]) -> list[bool]:
        return [verdict_filter.accepts(document) for document in documents]

    # told of the regression, a reader hears every change of its incident until it empties
    assert kept(VerdictFilter(regressions_only=True), history) == [True] * 4 + [False]
    assert kept(VerdictFilter(tests=["svc/search"]), history) == [True] * 4 + [False]
    # one that never saw the incident is not told it emptied
    assert kept(VerdictFilter(regressions_only=True), [emptied]) == [False]
    assert kept(VerdictFilter(tests=["svc/other"]), history) == [False] * 5
    # a filter kept out of the time range still follows the incident from what it was shown
    since = VerdictFilter(regressions_only=True, since=EMITTED_AT + timedelta(hours=1))
    assert kept(since, [slower, emptied]) == [False, False]
    later = {**emptied, "emitted_at": format_rfc3339(EMITTED_AT + timedelta(hours=2))}
    assert kept(since, [slower, later]) == [False, True]


def test_alerts_only_keeps_confirmed_findings_and_verdicts_without_a_lifecycle() -> None:
    def with_finding(document: dict, confirmed: bool, changed: list[str] | None = None) -> dict:
        finding = {"id": "ab" * 16, "state": "x", "confirmed": confirmed}
        return {**document, "finding": {**finding, **({"changed": changed} if changed else {})}}

    unconfirmed = with_finding(verdict(), False)
    confirmed = with_finding(verdict("change_point.confirmed"), True)
    pvalue_only = with_finding(verdict("change_point.updated"), True, ["pvalue"])
    resized = with_finding(verdict("change_point.updated"), True, ["size", "pvalue"])
    old_style = verdict("change_point.updated")  # from a perfwatch before the lifecycle
    counters = verdict("counter_regression.detected")
    # a check that found nothing is no problem to page anyone for (docs/counters-stream.md)
    passed = verdict("counter_check.passed")
    unjudged = verdict("counter_check.insufficient_baseline")
    advice = verdict("recommendation")
    everything = [unconfirmed, confirmed, pvalue_only, resized, old_style, counters]
    alerts = VerdictFilter(alerts_only=True)
    assert [d for d in [*everything, passed, unjudged, advice] if alerts.accepts(d)] == [
        confirmed,
        resized,
        old_style,
        counters,
        advice,
    ]
    assert [summary_fields(d)["detail"] for d in everything[:5]] == [
        "(unconfirmed)",
        "(confirmed)",
        "(updated: pvalue)",
        "(updated: size, pvalue)",
        "(moved)",
    ]


def test_forward_alerts_by_default_and_watch_shows_every_event() -> None:
    forward_help = CliRunner().invoke(main, ["forward", "--help"], terminal_width=200).output
    watch_help = CliRunner().invoke(main, ["watch", "--help"], terminal_width=200).output
    assert "[default: alerts-only]" in forward_help
    assert "[default: all-events]" in watch_help


def test_a_repeated_verdict_id_is_seen_once() -> None:
    seen = SeenVerdicts(capacity=2)
    first, second, third = verdict(test="a"), verdict(test="b"), verdict(test="c")
    assert [seen.first_time(v) for v in (first, second, first, second)] == [
        True,
        True,
        False,
        False,
    ]
    assert seen.first_time(third)  # pushes the oldest id (first's) out
    assert seen.first_time(first)
    assert seen.first_time({"kind": "no id"}) and seen.first_time({"kind": "no id"})
    with pytest.raises(ValueError, match="capacity"):
        SeenVerdicts(capacity=0)


def test_replay_shows_a_verdict_published_twice_once(
    each_broker: BrokerHandle, client: pulsar.Client, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("verdicts")
    once, twice = dumps(verdict(test="svc/once")), dumps(verdict(test="svc/twice"))
    _produce(client, topic, [twice, once, twice])
    arguments = ["watch", *_on(each_broker, topic), "--from-earliest", "--idle-timeout", "1"]
    result = CliRunner().invoke(main, [*arguments, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes.splitlines() == [twice, once]


def test_a_test_glob_that_matches_no_verdict_read_is_named_at_the_end(
    each_broker: BrokerHandle, client: pulsar.Client, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("verdicts")
    _produce(client, topic, [dumps(verdict(test="svc/search")), dumps(verdict(test="svc/io"))])
    arguments = ["watch", *_on(each_broker, topic), "--from-earliest", "--idle-timeout", "1"]
    typo = CliRunner().invoke(main, [*arguments, "--test", "svc/serach", "--test", "web/*"])
    assert typo.exit_code == 0, typo.output
    assert typo.stdout == ""
    assert "0 verdict(s) shown of 2 read" in typo.stderr
    assert "no verdict of the 2 read is of a test matching --test 'svc/serach', 'web/*'" in (
        typo.stderr
    )
    found = CliRunner().invoke(main, [*arguments, "--test", "svc/s*"])
    assert found.exit_code == 0, found.output
    assert len(found.stdout.splitlines()) == 1
    assert "1 verdict(s) shown of 2 read" in found.stderr
    assert "no verdict" not in found.stderr


def test_parse_since() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("90s", now) == now - timedelta(seconds=90)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("1w", now) == now - timedelta(days=7)
    assert parse_since("2024-04-30", now) == datetime(2024, 4, 30, tzinfo=UTC)
    assert parse_since("2024-04-30T10:00:00+02:00", now) == datetime(2024, 4, 30, 8, tzinfo=UTC)
    with pytest.raises(ValueError, match="neither a time"):
        parse_since("yesterday", now)


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--kind", "change"], "unknown kind 'change'"), (["--since", "soon"], "neither a time")],
)
def test_bad_options_are_usage_errors(option: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["watch", "--pulsar-url", "pulsar://127.0.0.1:1", *option])
    assert result.exit_code == 2
    assert message in result.stderr


# --- on the brokers -----------------------------------------------------------------------


@pytest.fixture
def client(each_broker: BrokerHandle) -> Iterator[pulsar.Client]:
    client = make_client(each_broker)
    yield client
    client.close()


def _on(broker: BrokerHandle, topic: str, kind: str = "verdicts") -> list[str]:
    return ["--pulsar-url", broker.service_url, f"--{kind}-topic", topic]


def _produce(client: pulsar.Client, topic: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(topic)
    for payload in payloads:
        producer.send(payload)
    producer.close()


def test_replay_as_json_passes_documents_through(
    each_broker: BrokerHandle, client: pulsar.Client, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("verdicts")
    documents = [
        verdict(),
        verdict(direction="improvement", change=-5.0),
        verdict("counter_regression.detected"),
        verdict("recommendation"),
        verdict(emitted_at=EMITTED_AT - timedelta(days=30)),
    ]
    payloads = [dumps(document) for document in documents]
    _produce(client, topic, [*payloads[:2], b"not a verdict", *payloads[2:]])
    base = ["watch", *_on(each_broker, topic), "--from-earliest", "--idle-timeout", "1"]
    base += ["--format", "json"]

    everything = CliRunner().invoke(main, base)
    assert everything.exit_code == 0, everything.output
    assert everything.stdout_bytes.splitlines() == payloads
    assert "perfwatch watch: warning: message " in everything.stderr
    assert "not JSON" in everything.stderr

    regressions = CliRunner().invoke(
        main, [*base, "--regressions-only", "--since", format_rfc3339(EMITTED_AT)]
    )
    assert regressions.exit_code == 0, regressions.output
    assert regressions.stdout_bytes.splitlines() == [payloads[0], payloads[2]]


def test_since_reads_the_verdicts_already_published_since_then(
    each_broker: BrokerHandle, client: pulsar.Client, unique_topic: Callable[[str], str]
) -> None:
    """`--since 2h` asks for the last two hours: watch starts at the oldest verdict kept
    (not at the next one, which would show none of them) and drops the older ones."""
    topic = unique_topic("verdicts")
    now = datetime.now(UTC)
    recent = dumps(verdict(test="svc/recent", emitted_at=now - timedelta(hours=1)))
    old = dumps(verdict(test="svc/old", emitted_at=now - timedelta(days=3)))
    _produce(client, topic, [old, recent])
    command = ["watch", *_on(each_broker, topic), "--since", "2h", "--format", "json"]
    result = CliRunner().invoke(main, [*command, "--idle-timeout", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes.splitlines() == [recent]
    assert f"watching {topic} from the verdicts emitted since " in result.stderr


def _read_line(stream: object, timeout_s: float) -> str:
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    if not selector.select(timeout_s):
        raise AssertionError(f"no output within {timeout_s} s")
    return stream.readline()  # type: ignore[attr-defined]


def test_publish_then_a_processor_then_watch(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Records published with `perfwatch publish` reach a consumer standing in for the
    processor; the verdicts it emits show up in a running `perfwatch watch`."""
    records_topic, verdicts_topic = unique_topic("records"), unique_topic("verdicts")
    records = tmp_path / "runs.csv"
    records.write_text(
        f"time,commit,latency\n2024-05-01T00:00:00Z,{COMMIT},100\n"
        "2024-05-02T00:00:00Z,fedcba9876543210,112\n"
    )
    processor = client.subscribe(
        records_topic,
        "processor",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    watcher = subprocess.Popen(
        [*PERFWATCH, "watch", "--no-color", "--limit", "2", *_on(each_broker, verdicts_topic)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _read_line(watcher.stderr, 60).startswith(f"watching {verdicts_topic}")
        published = CliRunner().invoke(
            main,
            [
                "publish",
                "--no-auto-identity",
                *_on(each_broker, records_topic, "records"),
                str(records),
            ],
        )
        assert published.exit_code == 0, published.output

        verdicts = client.create_producer(verdicts_topic)
        for direction in ("regression", "improvement"):
            message = processor.receive(timeout_millis=30_000)
            record = orjson.loads(message.data())
            document = verdict(test=record["test"], metric="latency", direction=direction)
            document["change_point"]["commit"] = record["commit"]
            verdicts.send(dumps(document))
            processor.acknowledge(message)

        lines = [_read_line(watcher.stdout, 30).rstrip("\n") for _ in range(2)]
        assert watcher.wait(timeout=30) == 0
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert lines == [
        "2024-05-01T12:00:00Z  REGRESSION  runs latency +12.3% p=0.0012 "
        "commit abc1234def56 [branch=main]  change_point.detected",
        "2024-05-01T12:00:00Z  IMPROVEMENT runs latency +12.3% p=0.0012 "
        "commit fedcba987654 [branch=main]  change_point.detected",
    ]


def _subscriptions(broker: BrokerHandle, topic: str) -> list[str]:
    assert broker.admin_url is not None
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/subscriptions"
    status, body = admin_request(broker.admin_url, "GET", path)
    assert status == 200, body
    return sorted(orjson.loads(body))


def _eventually_subscriptions(broker: BrokerHandle, topic: str, expected: list[str]) -> None:
    deadline = time.monotonic() + 15
    while _subscriptions(broker, topic) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _subscriptions(broker, topic) == expected


def test_watch_leaves_no_subscription_behind(
    pulsar_broker: BrokerHandle, unique_topic: Callable[[str], str]
) -> None:
    topic = unique_topic("verdicts")
    client = make_client(pulsar_broker)
    _produce(client, topic, [dumps(verdict())])
    client.close()
    result = CliRunner().invoke(
        main,
        ["watch", *_on(pulsar_broker, topic), "--from-earliest", "--limit", "1"],
    )
    assert result.exit_code == 0, result.output
    _eventually_subscriptions(pulsar_broker, topic, [])


def _watching_one_verdict(
    broker: BrokerHandle, topic: str, client: pulsar.Client
) -> subprocess.Popen[str]:
    """A `watch --from-earliest` process that has printed the one verdict published."""
    _produce(client, topic, [dumps(verdict())])
    watcher = subprocess.Popen(
        [*PERFWATCH, "watch", "--no-color", *_on(broker, topic), "--from-earliest"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "REGRESSION" in _read_line(watcher.stdout, 60)
    except BaseException:
        watcher.kill()
        watcher.wait()
        raise
    return watcher


def test_sigterm_stops_watch_cleanly(
    embedded_broker: BrokerHandle, unique_topic: Callable[[str], str]
) -> None:
    """A service manager's stop ends watch as --limit does: exit status 0, no traceback."""
    client = make_client(embedded_broker)
    try:
        watcher = _watching_one_verdict(embedded_broker, unique_topic("verdicts"), client)
    finally:
        client.close()
    watcher.send_signal(signal.SIGTERM)
    _, stderr = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, stderr
    assert "Traceback" not in stderr


def test_a_killed_watch_leaves_nothing_and_a_named_subscription_is_kept(
    pulsar_broker: BrokerHandle, unique_topic: Callable[[str], str]
) -> None:
    """Without --subscription, watch reads with a reader: SIGKILL leaves no durable
    subscription behind. With one, it is kept and the next watch resumes from it."""
    topic = unique_topic("verdicts")
    client = make_client(pulsar_broker)
    watcher = _watching_one_verdict(pulsar_broker, topic, client)
    watcher.kill()
    watcher.wait()
    _eventually_subscriptions(pulsar_broker, topic, [])

    named = [*_on(pulsar_broker, topic), "--subscription", "mine", "--idle-timeout", "2"]
    first = CliRunner().invoke(main, ["watch", *named, "--from-earliest", "--format", "json"])
    assert first.exit_code == 0, first.output
    assert len(first.stdout_bytes.splitlines()) == 1
    assert _subscriptions(pulsar_broker, topic) == ["mine"]
    _produce(client, topic, [dumps(verdict(direction="improvement", change=-4.0))])
    client.close()
    resumed = CliRunner().invoke(main, ["watch", *named, "--format", "json"])
    assert resumed.exit_code == 0, resumed.output
    [line] = resumed.stdout_bytes.splitlines()
    assert orjson.loads(line)["change_point"]["direction"] == "improvement"
    assert pulsar_broker.admin_url is not None
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/subscription/mine"
    assert admin_request(pulsar_broker.admin_url, "DELETE", path)[0] in (200, 204)


@pytest.mark.parametrize(
    ("arguments", "warned"),
    [
        (["watch", "--alerts-only", "--kind", "change_point.confirmed"], True),
        (["forward", "--webhook", "http://127.0.0.1:9/", "--kind", "change_point"], True),
        (
            [
                "forward",
                "--webhook",
                "http://127.0.0.1:9/",
                "--kind",
                "change_point",
                "--kind",
                "incident",
            ],
            False,
        ),
        (["watch", "--kind", "change_point.confirmed"], False),  # every event: none is left out
    ],
)
def test_a_kind_filter_that_leaves_out_the_incidents_alerts_says_so(
    arguments: list[str], warned: bool
) -> None:
    unreachable = ["--pulsar-url", "pulsar://127.0.0.1:1", "--connect-timeout", "0.1"]
    result = CliRunner().invoke(main, [*arguments, *unreachable])
    assert result.exit_code == 3, result.stderr
    command = " ".join(arguments[:1])
    assert (
        f"perfwatch {command}: warning: a confirmed finding of a series with commits alerts "
        "through its incident" in result.stderr
    ) is warned
