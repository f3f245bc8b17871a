"""`perfwatch forward`: retries, back-off and dead-lettering against a real local HTTP server."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pulsar
import pytest
from click.testing import CliRunner, Result

from _processor_support import applied, wait_until
from _verdict_samples import INCIDENT_COMMIT, IncidentStream, verdict
from perfwatch.adapters.alert_groups import AlertGroups
from perfwatch.adapters.verdict_feed import VerdictFilter, summary_fields
from perfwatch.adapters.webhook import (
    TemplateError,
    WebhookSender,
    check_template,
    forward_verdicts,
    slack_payload,
)
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.cli.main import main
from perfwatch.contract.codec import dumps

REFUSAL = "failing on purpose"
PERFWATCH = [sys.executable, "-c", "from perfwatch.cli.main import main; main()"]


class Webhook:
    """An HTTP server that answers each request by a plan: for the first plan key found in
    the body, the next status of its list (then 200); it records every request."""

    def __init__(
        self, plan: dict[str, list[int | tuple[int, dict[str, str]]]], refusal: str = REFUSAL
    ) -> None:
        self.plan = {key: list(answers) for key, answers in plan.items()}
        self.requests: list[tuple[bytes, str]] = []  # body, content type
        self.accepted: list[bytes] = []
        self.attempts: dict[str, int] = defaultdict(int)
        self.requested = threading.Event()  # set by the first request
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, headers = webhook._answer(body, self.headers["Content-Type"])
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                text = b"ok" if status == 200 else refusal.encode()
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _answer(self, body: bytes, content_type: str) -> tuple[int, dict[str, str]]:
        self.requests.append((body, content_type))
        self.requested.set()
        key = next((key for key in self.plan if key.encode() in body), None)
        if key is not None:
            self.attempts[key] += 1
        answer = self.plan[key].pop(0) if key is not None and self.plan[key] else 200
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        if status == 200:
            self.accepted.append(body)
        return status, headers


@pytest.fixture
def webhook_factory() -> Iterator[Callable[..., Webhook]]:
    started: list[Webhook] = []

    def start(
        plan: dict[str, list[int | tuple[int, dict[str, str]]]], refusal: str = REFUSAL
    ) -> Webhook:
        webhook = Webhook(plan, refusal)
        webhook.thread.start()
        started.append(webhook)
        return webhook

    yield start
    for webhook in started:
        webhook.server.shutdown()
        webhook.server.server_close()


def _sender(url: str, sleeps: list[float], **options: float) -> WebhookSender:
    """A sender whose back-offs are recorded in `sleeps` instead of waited out."""

    def wait(seconds: float) -> bool:
        sleeps.append(seconds)
        return False  # not stopped

    return WebhookSender(
        url,
        max_attempts=int(options.get("max_attempts", 3)),
        initial_backoff_s=options.get("initial_backoff_s", 0.5),
        max_backoff_s=options.get("max_backoff_s", 1.5),
        wait=wait,
    )


# --- delivery ---------------------------------------------------------------------------


def test_retries_with_exponential_backoff_until_accepted(webhook_factory: Callable) -> None:
    webhook = webhook_factory({"flaky": [500, 503]})
    sleeps: list[float] = []
    delivery = _sender(webhook.url, sleeps).deliver(b'{"text": "flaky"}')
    assert (delivery.accepted, delivery.attempts) == (True, 3)
    assert sleeps == [0.5, 1.0]
    assert webhook.accepted == [b'{"text": "flaky"}']


def test_gives_up_after_max_attempts_with_the_last_error(webhook_factory: Callable) -> None:
    webhook = webhook_factory({"down": [500] * 10})
    sleeps: list[float] = []
    delivery = _sender(webhook.url, sleeps, max_attempts=4).deliver(b'{"text": "down"}')
    assert (delivery.accepted, delivery.attempts) == (False, 4)
    assert delivery.error == "HTTP 500 Internal Server Error: failing on purpose"
    assert sleeps == [0.5, 1.0, 1.5]  # doubling, capped at the maximum
    assert webhook.attempts["down"] == 4


def test_an_error_page_is_reported_as_one_short_line(webhook_factory: Callable) -> None:
    page = "<html>\n  <body>\n    <h1>Bad   gateway</h1>\n  </body>\n</html>\n" + "x" * 300
    webhook = webhook_factory({"down": [502]}, refusal=page)
    delivery = _sender(webhook.url, [], max_attempts=1).deliver(b'{"text": "down"}')
    one_line = "<html> <body> <h1>Bad gateway</h1> </body> </html> " + "x" * 300
    assert delivery.error == f"HTTP 502 Bad Gateway: {one_line[:200]}"


def test_client_errors_are_not_retried_but_429_is(webhook_factory: Callable) -> None:
    webhook = webhook_factory(
        {"bad": [400], "busy": [(429, {"Retry-After": "1"}), (503, {"Retry-After": "7"})]}
    )
    sleeps: list[float] = []
    sender = _sender(webhook.url, sleeps, initial_backoff_s=0.1, max_backoff_s=5)
    refused = sender.deliver(b"bad")
    assert (refused.accepted, refused.attempts) == (False, 1)
    assert refused.error == "HTTP 400 Bad Request: failing on purpose (not retried)"
    assert sleeps == []
    busy = sender.deliver(b"busy")
    assert (busy.accepted, busy.attempts) == (True, 3)
    assert sleeps == [1.0, 5.0]  # Retry-After honoured, up to the maximum back-off


def test_unreachable_webhook_is_retried() -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps: list[float] = []
    delivery = _sender(f"http://127.0.0.1:{port}/hook", sleeps).deliver(b"{}")
    assert (delivery.accepted, delivery.attempts) == (False, 3)
    assert delivery.error is not None and delivery.error.startswith("ConnectError")
    assert sleeps == [0.5, 1.0]


def test_slack_payload_and_template() -> None:
    document = verdict()
    assert orjson.loads(slack_payload(document)) == {"text": summary_fields(document)["summary"]}
    text = orjson.loads(slack_payload(document, "{label}: {test}/{metric} {change} at {commit}"))
    assert text == {"text": "REGRESSION: api/search/p99 +12.3% at abc1234def56"}
    with pytest.raises(TemplateError, match=r"unknown field \{owner\}"):
        check_template("{owner} look at {test}")
    # a known field with a format spec: said as such, not as an unknown field
    with pytest.raises(TemplateError, match=r"field \{change\} takes no format spec"):
        check_template("{change:>10}")
    with pytest.raises(TemplateError, match=r"field \{test\} takes no format spec"):
        check_template("{test!r}")
    with pytest.raises(TemplateError, match="Single '}'"):
        check_template("oops }")


def test_an_incidents_template_fields_carry_the_change_of_the_series_that_caused_it() -> None:
    stream = IncidentStream()
    stream.change(joined=["a"], change=7.5)
    document = stream.change(joined=["b"], change=-4.0, direction="improvement")
    document["series"]["attributes"] = {"branch": "main"}  # as the processor names it
    template = "{label} {test} {change} {direction} run {run_id} at {commit}"
    text = orjson.loads(slack_payload(document, template))["text"]
    assert text == f"INCIDENT svc/b -4.0% improvement run nightly-074 at {INCIDENT_COMMIT[:12]}"


def test_a_counter_verdicts_template_fields_carry_its_p_value_and_commit() -> None:
    document = verdict("counter_regression.detected")
    document["counter_check"]["target"] = {"time": "2024-05-01T01:00:00Z", "commit": "c0ffee" * 7}
    text = orjson.loads(slack_payload(document, "{label} {test} p={pvalue} commit={commit}"))
    assert text == {"text": "REGRESSION api/search p=0.00042 commit=c0ffeec0ffee"}
    # the line says the p-value once, in the detail, next to the rule that judged it
    summary = summary_fields(document)["summary"]
    assert summary.count("p=0.00042") == 1
    assert summary.startswith("REGRESSION api/search commit c0ffeec0ffee (counters: 1 of 2")


@pytest.mark.parametrize("template", ["", "  "])
def test_an_empty_template_is_refused_at_start(template: str) -> None:
    """Slack answers 400 to a message without text: every alert went to the dead letters."""
    command = ["forward", "--webhook", "http://127.0.0.1:9/", "--template", template]
    # a broker nothing listens for: without the check the command fails there, later
    command += ["--pulsar-url", "pulsar://127.0.0.1:9", "--connect-timeout", "1"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().endswith(
        "--template: template is empty: a Slack message needs text"
    )


# --- through the brokers -----------------------------------------------------------------


def test_a_stop_during_a_back_off_ends_the_delivery_at_once(webhook_factory: Callable) -> None:
    webhook = webhook_factory({"down": [500] * 10})
    stop = threading.Event()
    stop.set()
    sender = WebhookSender(webhook.url, max_attempts=5, initial_backoff_s=600, wait=stop.wait)
    delivery = sender.deliver(b'{"text": "down"}')
    assert (delivery.accepted, delivery.stopped, delivery.attempts) == (False, True, 1)
    assert delivery.error == "HTTP 500 Internal Server Error: failing on purpose"
    assert webhook.attempts["down"] == 1


@pytest.fixture
def client(each_broker: BrokerHandle) -> Iterator[pulsar.Client]:
    client = make_client(each_broker)
    yield client
    client.close()


def _subscribe(client: pulsar.Client, topic: str, name: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        name,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def test_forward_retries_dead_letters_and_acknowledges(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    webhook_factory: Callable,
) -> None:
    topic = unique_topic("verdicts")
    dead_letter_topic = f"{topic}-hooks-DLQ"
    dead_letters = _subscribe(client, dead_letter_topic, "inspect")
    webhook = webhook_factory({"svc/flaky": [500, 502], "svc/down": [500] * 10, "svc/fine": []})
    producer = client.create_producer(topic)
    flaky, down, fine = (verdict(test=name) for name in ("svc/flaky", "svc/down", "svc/fine"))
    improvement = verdict(test="svc/faster", direction="improvement", change=-9.0)
    for payload in (dumps(flaky), dumps(down), b"<html>not a verdict</html>"):
        producer.send(payload, partition_key="k")
    producer.send(dumps(improvement))
    producer.send(dumps(fine))
    command = ["forward", "--webhook", webhook.url, "--pulsar-url", each_broker.service_url]
    command += ["--verdicts-topic", topic, "--subscription", "hooks", "--from-earliest"]
    command += ["--max-attempts", "3", "--backoff", "0.01", "--regressions-only"]

    result = CliRunner().invoke(main, [*command, "--idle-timeout", "1.5"])

    assert result.exit_code == 0, result.output
    assert f"2 delivered, 2 dead-lettered to {dead_letter_topic}, 1 filtered out" in result.stderr
    # A line for each verdict posted or dead-lettered, naming it by kind, id and series
    # (a message that is no verdict by its message id); the one filtered out only counted.
    outcomes = [line for line in result.stderr.splitlines() if "attempt(s)" in line]
    assert [line.partition(": ")[0] for line in outcomes[:2]] == [
        f"change_point.detected {flaky['verdict_id']} (svc/flaky p99)",
        f"change_point.detected {down['verdict_id']} (svc/down p99)",
    ]
    assert outcomes[2].startswith("message (") and "not a verdict" in outcomes[2]
    assert outcomes[3].startswith(f"change_point.detected {fine['verdict_id']} (svc/fine p99)")
    assert len(outcomes) == 4, result.stderr
    assert webhook.attempts == {"svc/flaky": 3, "svc/down": 3, "svc/fine": 1}
    assert [orjson.loads(body)["text"].split()[1] for body in webhook.accepted] == [
        "svc/flaky",
        "svc/fine",
    ]
    assert {content_type for _, content_type in webhook.requests} == {"application/json"}

    dead = [dead_letters.receive(timeout_millis=10_000) for _ in range(2)]
    assert [message.data() for message in dead] == [dumps(down), b"<html>not a verdict</html>"]
    down_properties = dead[0].properties()
    assert down_properties["perfwatch-attempts"] == "3"
    assert (
        down_properties["perfwatch-error"] == "HTTP 500 Internal Server Error: failing on purpose"
    )
    assert down_properties["REAL_TOPIC"].startswith(topic)
    assert dead[0].partition_key() == "k"
    assert dead[1].properties()["perfwatch-error"].startswith("not a verdict")

    # Everything was acknowledged: a restarted forwarder finds nothing to do.
    requests_before = len(webhook.requests)
    again = CliRunner().invoke(main, [*command, "--idle-timeout", "1"])
    assert again.exit_code == 0, again.output
    assert "0 delivered, 0 dead-lettered" in again.stderr
    assert len(webhook.requests) == requests_before


def test_raw_payload_is_the_published_verdict(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    webhook_factory: Callable,
) -> None:
    topic = unique_topic("verdicts")
    webhook = webhook_factory({})
    payload = dumps(verdict("recommendation"))
    client.create_producer(topic).send(payload)
    result = _forward_raw(each_broker, topic, webhook, "--from-earliest", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert webhook.requests == [(payload, "application/json")]
    assert "no verdict" not in result.stderr
    # a --test that matches nothing read would never post: said when forwarding ends
    client.create_producer(topic).send(dumps(verdict("recommendation")))
    typo = _forward_raw(
        each_broker,
        topic,
        webhook,
        "--from-earliest",
        "--idle-timeout",
        "1",
        "--all-events",
        "--test",
        "nope",
    )
    assert typo.exit_code == 0, typo.output
    assert len(webhook.requests) == 1
    assert "no verdict of the 1 read is of a test matching --test 'nope'" in typo.stderr


def _forward_raw(broker: BrokerHandle, topic: str, webhook: Webhook, *options: str) -> Result:
    """`perfwatch forward --payload raw` from `topic` to `webhook`, with `options`."""
    command = ["forward", "--webhook", webhook.url, "--payload", "raw", *options]
    return CliRunner().invoke(
        main, [*command, "--pulsar-url", broker.service_url, "--verdicts-topic", topic]
    )


def test_since_posts_the_verdicts_published_since_then_on_a_new_subscription(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    webhook_factory: Callable,
) -> None:
    now = datetime.now(UTC)
    old = verdict("recommendation", test="svc/old", emitted_at=now - timedelta(days=3))
    recent = verdict("recommendation", test="svc/recent", emitted_at=now - timedelta(hours=1))
    topic = unique_topic("verdicts")
    _publish(client, topic, [old, recent])
    webhook = webhook_factory({})
    result = _forward_raw(each_broker, topic, webhook, "--since", "2h", "--idle-timeout", "1")
    assert result.exit_code == 0, result.output
    assert webhook.requests == [(dumps(recent), "application/json")]


def test_verdict_stays_unacknowledged_when_it_cannot_be_dead_lettered(
    client: pulsar.Client, unique_topic: Callable[[str], str], webhook_factory: Callable
) -> None:
    topic = unique_topic("verdicts")
    webhook = webhook_factory({"svc/down": [500] * 10})
    payload = dumps(verdict(test="svc/down"))
    client.create_producer(topic).send(payload)
    consumer = _subscribe(client, topic, "hooks")
    dead_letter = client.create_producer(unique_topic("dlq"))
    dead_letter.close()  # the dead-letter send fails

    with pytest.raises(pulsar.PulsarException):
        forward_verdicts(
            [consumer.receive(timeout_millis=10_000)],
            consumer,
            _sender(webhook.url, [], max_attempts=2),
            dead_letter,
        )
    consumer.close()

    redelivered = _subscribe(client, topic, "hooks").receive(timeout_millis=10_000)
    assert redelivered.data() == payload


# --- grouping (time passed in by the test) ---------------------------------------------


def _timed(
    now: list[float], items: Sequence[tuple[float, pulsar.Message | None]]
) -> Iterator[pulsar.Message | None]:
    """The items, setting the clock `now[0]` to each one's time as it comes."""
    for at, item in items:
        now[0] = at
        yield item


def _publish(client: pulsar.Client, topic: str, documents: Sequence[dict]) -> None:
    producer = client.create_producer(topic)
    for document in documents:
        producer.send(dumps(document))
    producer.close()


@pytest.fixture
def incident_feed(
    unique_topic: Callable[[str], str], webhook_factory: Callable
) -> tuple[str, Webhook, IncidentStream]:
    """A verdicts topic, a webhook accepting everything, and an incident to publish."""
    return unique_topic("verdicts"), webhook_factory({}), IncidentStream()


def test_an_incidents_verdicts_are_posted_as_one_message_after_the_group_wait(
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    incident_feed: tuple[str, Webhook, IncidentStream],
) -> None:
    topic, webhook, stream = incident_feed
    documents = [
        stream.change(joined=["a"]),
        stream.change(joined=["b"]),
        verdict("counter_regression.detected"),
        stream.change(joined=["c", "d"]),
    ]
    _publish(client, topic, documents)
    consumer = _subscribe(client, topic, "hooks")
    received = [consumer.receive(timeout_millis=10_000) for _ in documents]
    now = [0.0]
    arrivals: list[tuple[float, pulsar.Message | None]] = list(
        zip((0, 10, 20, 25), received, strict=True)
    )

    stats = forward_verdicts(
        _timed(now, [*arrivals, (29.9, None), (30, None)]),
        consumer,
        _sender(webhook.url, []),
        client.create_producer(unique_topic("dlq")),
        verdict_filter=VerdictFilter(alerts_only=True),
        groups=AlertGroups(wait_s=30, interval_s=300),
        clock=lambda: now[0],
    )

    texts = [orjson.loads(body)["text"] for body in webhook.accepted]
    assert texts == [
        summary_fields(documents[2])["summary"],
        f"INCIDENT (commit {INCIDENT_COMMIT}: 4 series: REGRESSION svc/a p99_ms +5.0%, "
        "REGRESSION svc/b p99_ms +5.0%, REGRESSION svc/c p99_ms +5.0%, "
        "REGRESSION svc/d p99_ms +5.0%)",
    ]
    assert (stats.delivered, stats.grouped, stats.skipped) == (2, 3, 0)
    consumer.close()
    with pytest.raises(pulsar.Timeout):  # all acknowledged
        _subscribe(client, topic, "hooks").receive(timeout_millis=1500)


@pytest.mark.parametrize("group_wait", [30, 0])
def test_regressions_only_posts_that_a_posted_incident_emptied(
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    incident_feed: tuple[str, Webhook, IncidentStream],
    group_wait: float,
) -> None:
    """The emptied incident has no member left to be a regression: it is posted because
    the forwarder posted the incident."""
    topic, webhook, stream = incident_feed
    documents = [stream.change(joined=["a"]), stream.change(left=["a"])]
    _publish(client, topic, documents)
    consumer = _subscribe(client, topic, "hooks")
    received = [consumer.receive(timeout_millis=10_000) for _ in documents]
    now = [0.0]
    stats = forward_verdicts(
        _timed(now, [(0, received[0]), (30, None), (100, received[1]), (330, None)]),
        consumer,
        _sender(webhook.url, []),
        client.create_producer(unique_topic("dlq")),
        verdict_filter=VerdictFilter(regressions_only=True, alerts_only=True),
        groups=AlertGroups(wait_s=group_wait, interval_s=300) if group_wait else None,
        clock=lambda: now[0],
    )
    texts = [orjson.loads(body)["text"] for body in webhook.accepted]
    assert len(texts) == 2 and stats.delivered == 2, texts
    assert texts[0].startswith("INCIDENT") and "REGRESSION svc/a" in texts[0]
    assert texts[1] == summary_fields(documents[1])["summary"]
    assert "0 series" in texts[1], texts[1]


def test_a_forwarder_stopped_while_holding_a_group_gets_its_verdicts_again(
    client: pulsar.Client,
    unique_topic: Callable[[str], str],
    incident_feed: tuple[str, Webhook, IncidentStream],
) -> None:
    topic, webhook, stream = incident_feed
    _publish(client, topic, [stream.change(joined=["a"]), stream.change(joined=["b"])])
    consumer = _subscribe(client, topic, "hooks")
    dead_letter = client.create_producer(unique_topic("dlq"))

    def stopped() -> Iterator[pulsar.Message | None]:
        yield consumer.receive(timeout_millis=10_000)
        yield consumer.receive(timeout_millis=10_000)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        forward_verdicts(
            stopped(),
            consumer,
            _sender(webhook.url, []),
            dead_letter,
            groups=AlertGroups(wait_s=30),
            clock=lambda: 0.0,
        )
    consumer.close()
    assert webhook.requests == []

    again = _subscribe(client, topic, "hooks")
    redelivered = [again.receive(timeout_millis=10_000) for _ in range(2)]
    stats = forward_verdicts(
        redelivered, again, _sender(webhook.url, []), dead_letter, groups=AlertGroups(wait_s=30)
    )
    assert stats.delivered == 1
    [body] = webhook.accepted
    assert "2 series" in orjson.loads(body)["text"]


def _sigterm_after_a_request(webhook: Webhook, arguments: list[str]) -> str:
    """Run `perfwatch forward ARGUMENTS`, SIGTERM it once `webhook` had a request; its
    stderr, once it ended as a stop should: exit status 0, no traceback."""
    forwarder = subprocess.Popen(
        [*PERFWATCH, "forward", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert webhook.requested.wait(60), "no request within 60 s"
    finally:
        forwarder.send_signal(signal.SIGTERM)
        _, stderr = forwarder.communicate(timeout=60)
    assert forwarder.returncode == 0, stderr
    assert "Traceback" not in stderr
    return stderr


def test_sigterm_posts_the_groups_held_and_stops_cleanly(
    embedded_broker: BrokerHandle, incident_feed: tuple[str, Webhook, IncidentStream]
) -> None:
    """A service manager's stop ends the forwarder as --limit does, not by the signal."""
    topic, webhook, stream = incident_feed
    client = make_client(embedded_broker)
    try:
        # Two alerts held in their incident's group for 600 s, then one posted at once:
        # once it has arrived, the forwarder holds the other two.
        documents = [stream.change(joined=["a"]), stream.change(joined=["b"])]
        _publish(client, topic, [*documents, verdict("counter_regression.detected")])
    finally:
        client.close()
    stderr = _sigterm_after_a_request(
        webhook,
        [
            *("--webhook", webhook.url, "--group-wait", "600", "--from-earliest"),
            *("--pulsar-url", embedded_broker.service_url, "--verdicts-topic", topic),
        ],
    )
    assert "2 delivered, 0 dead-lettered" in stderr
    assert "2 series" in orjson.loads(webhook.accepted[-1])["text"]


@pytest.mark.parametrize(("group_wait", "sizes"), [("0", [1, 2, 4]), ("30", [4])])
def test_group_wait_zero_posts_each_alert_as_it_comes(
    each_broker: BrokerHandle,
    client: pulsar.Client,
    incident_feed: tuple[str, Webhook, IncidentStream],
    group_wait: str,
    sizes: list[int],
) -> None:
    """With the default wait, the input ending (--idle-timeout) posts the group at once."""
    topic, webhook, stream = incident_feed
    _publish(client, topic, [stream.change(joined=[finding]) for finding in "abcd"])
    command = ["forward", "--webhook", webhook.url, "--pulsar-url", each_broker.service_url]
    command += ["--verdicts-topic", topic, "--from-earliest", "--payload", "raw"]

    result = CliRunner().invoke(
        main, [*command, "--group-wait", group_wait, "--idle-timeout", "1.5"]
    )

    assert result.exit_code == 0, result.output
    posted = [orjson.loads(body)["incident"]["members"] for body in webhook.accepted]
    assert [len(members) for members in posted] == sizes
    grouped = 0 if group_wait == "0" else 4
    assert f"{grouped} grouped into incident messages" in result.stderr


def test_sigterm_during_a_back_off_stops_at_once_and_the_verdict_comes_again(
    embedded_broker: BrokerHandle, unique_topic: Callable[[str], str], webhook_factory: Callable
) -> None:
    """A failing webhook and a 600 s back-off: a stop ends the forwarder without waiting it
    out, and the verdict it was retrying, unacknowledged, is delivered again."""
    topic = unique_topic("verdicts")
    webhook = webhook_factory({"": [500] * 10})  # every request refused
    payload = dumps(verdict("counter_regression.detected"))
    client = make_client(embedded_broker)
    try:
        client.create_producer(topic).send(payload)
        # the stop comes well within the back-off, which it does not wait out
        stderr = _sigterm_after_a_request(
            webhook,
            [
                *("--webhook", webhook.url, "--from-earliest"),
                *("--backoff", "600", "--max-backoff", "600"),
                *("--pulsar-url", embedded_broker.service_url, "--verdicts-topic", topic),
            ],
        )
        assert "0 delivered, 0 dead-lettered" in stderr
        assert "1 verdict(s) left unacknowledged" in stderr
        assert len(webhook.requests) == 1
        again = _subscribe(client, topic, "perfwatch-forward").receive(timeout_millis=10_000)
        assert again.data() == payload
    finally:
        client.close()


def test_the_undeliverable_topic_gets_the_retention_serve_gives_its_topics(
    pulsar_broker: BrokerHandle, unique_topic: Callable[[str], str], webhook_factory: Callable
) -> None:
    """Without retention the broker may delete the undeliverable verdicts nobody
    subscribes to: with --admin-url forward sets it, without one it says so, and a
    broker that refuses the call is named in a warning that forwarding goes on despite."""
    # in the short form Pulsar completes, which the admin API's paths do not take
    topic = unique_topic("verdicts").removeprefix("persistent://")
    undeliverable = f"{topic}-perfwatch-forward-DLQ"
    command = ["forward", "--webhook", webhook_factory({}).url, "--idle-timeout", "0.5"]
    command += ["--pulsar-url", pulsar_broker.service_url, "--verdicts-topic", topic]

    without = CliRunner().invoke(main, command)
    assert without.exit_code == 0, without.output
    assert (
        f"perfwatch forward: warning: no --admin-url: {undeliverable} keeps undeliverable "
        "verdicts only as long as its namespace's retention says, which on a new Pulsar "
        "namespace is not at all; give --admin-url (broker.admin_url)"
    ) in without.stderr

    assert pulsar_broker.admin_url is not None
    retention = ["--retention-minutes", "90", "--retention-mb", "7"]
    kept = CliRunner().invoke(main, [*command, "--admin-url", pulsar_broker.admin_url, *retention])
    assert kept.exit_code == 0, kept.output
    assert "warning" not in kept.stderr
    wanted = {"retentionTimeInMinutes": 90, "retentionSizeInMB": 7}
    admin, full_name = pulsar_broker.admin_url, f"persistent://{undeliverable}"
    wait_until(lambda: applied(admin, full_name, "retention") == wanted, 30, "retention")

    nowhere = f"persistent://public/missing-{topic.rsplit('/', 1)[-1]}/dlq"
    missing = CliRunner().invoke(main, [*command, "--undeliverable-topic", nowhere])
    assert missing.exit_code == 2, missing.output
    assert (
        f"perfwatch forward: error: --undeliverable-topic {nowhere}: the broker has no such "
        "topic and does not create it; check that its tenant and namespace exist"
    ) in missing.stderr

    refused = CliRunner().invoke(main, [*command, "--admin-url", "http://127.0.0.1:9"])
    assert refused.exit_code == 0, refused.output
    assert (
        f"perfwatch forward: warning: {undeliverable}: could not create the topic; its "
        "policies cannot be set before it exists (no answer: "
    ) in refused.stderr
