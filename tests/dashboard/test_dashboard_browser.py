"""The dashboard in a real browser: headless Chromium driven by Playwright.

A real processor consumes the example nightly history, two unit tests' runs,
one test's counter samples (whose last run it flags) and one test's input
profiles (a full suite, then an update's sample it judges) from the embedded
broker into a SQLite store; the dashboard serves that store and follows the
verdicts topic. Each view is loaded and its tables and figures are compared
with the store; then new records are published and the new verdict must
appear on the open page without a reload. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import orjson
import pytest
import uvicorn

from _processor_support import wait_until
from perfwatch.adapters.publisher import Publisher
from perfwatch.adapters.pulsar import pulsar_processor
from perfwatch.brokers.handle import BrokerHandle, make_client
from perfwatch.config import Config, ConsumerConfig, StoreConfig, TopicsConfig
from perfwatch.contract.verdicts import CONFIRMED
from perfwatch.dashboard import figures, queries
from perfwatch.dashboard.analysis import ChangePointAnalysis
from perfwatch.dashboard.app import DashboardSettings, create_app
from perfwatch.dashboard.live import TopicSettings
from perfwatch.state import SeriesKey, open_store

playwright_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
NIGHTLY = ROOT / "examples" / "nightly.jsonl"
CHROMIUM = os.environ.get("PERFWATCH_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UNIT_TESTS = ("unit.parse", "unit.render")
UNIT_RUNS = 30
COUNTER_TEST = "api.search"
INPUTS_TEST = "suite.inputs"
NIGHTLY_RUNS = 120
P99 = SeriesKey.of("nightly", "p99_latency_ms", {"branch": "main"})
WAIT_MS = 30_000

if not Path(CHROMIUM).exists():
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI needs a browser: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def unit_records() -> list[dict[str, Any]]:
    """Two unit tests over the same commits: CPU time and peak memory per run."""
    rng = np.random.default_rng(11)
    start = datetime(2024, 1, 1, 3, 0, tzinfo=UTC)
    records = []
    for i in range(UNIT_RUNS):
        commit = hashlib.sha1(f"unit-{i}".encode()).hexdigest()
        for n, test in enumerate(UNIT_TESTS):
            records.append(
                {
                    "schema": "perfwatch.record/v1",
                    "test": test,
                    "run_id": f"{test}#{i:02d}",
                    "commit": commit,
                    "branch": "main",
                    "timestamp": (start + timedelta(days=i, minutes=n)).isoformat(),
                    "metrics": {
                        "cpu_time_s": round(0.2 * (n + 1) * (1 + 0.01 * rng.standard_normal()), 5),
                        "peak_memory_mb": round(40.0 + 15 * n + rng.normal(0, 0.2), 3),
                    },
                }
            )
    return records


def counter_records() -> list[dict[str, Any]]:
    """Counter samples of three good runs of a test, then of one whose memory grew
    without more load: the processor's counter check flags the last one."""
    from test_dashboard import counter_run

    rng = np.random.default_rng(5)
    start = datetime(2024, 5, 1, 2, 0, tzinfo=UTC)
    records = []
    for i, broken in enumerate((False, False, False, True)):
        samples = counter_run(rng, 120, broken, f"run {i}")
        records.append(
            {
                "schema": "perfwatch.record/v1",
                "test": COUNTER_TEST,
                "run_id": f"{COUNTER_TEST}#{i}",
                "branch": "main",
                "timestamp": (start + timedelta(hours=i)).isoformat(),
                "metrics": {},
                "counters": {"names": samples.names, "values": samples.values.tolist()},
            }
        )
    return records


def step_records(test: str, runs: int, step_at: int) -> list[dict[str, Any]]:
    """A test whose latency rises 40% from `step_at` on."""
    start = datetime(2024, 6, 1, 2, 0, tzinfo=UTC)
    return [
        {
            "schema": "perfwatch.record/v1",
            "test": test,
            "run_id": f"{test}#{i:02d}",
            "commit": hashlib.sha1(f"{test}-{i}".encode()).hexdigest(),
            "branch": "main",
            "timestamp": (start + timedelta(hours=i)).isoformat(),
            "metrics": {
                "latency_ms": {
                    "value": (140.0 if i >= step_at else 100.0) + (i % 4) * 0.4,
                    "direction": "lower_is_better",
                }
            },
        }
        for i in range(runs)
    ]


class Pipeline:
    """A processor on the embedded broker writing a SQLite store, run in a thread."""

    def __init__(self, broker: BrokerHandle, directory: Path) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.config = Config(
            topics=TopicsConfig(
                records=f"persistent://public/default/dash-records-{suffix}",
                verdicts=f"persistent://public/default/dash-verdicts-{suffix}",
                dead_letter=f"persistent://public/default/dash-dead-{suffix}",
            ),
            consumer=ConsumerConfig(name=f"dash-processor-{suffix}"),
            store=StoreConfig(url=f"sqlite:///{directory / 'state.db'}"),
        )
        self.broker = broker
        self.client = make_client(broker)
        self.store = open_store(self.config.store.url)
        self.stop = threading.Event()
        self.processor = pulsar_processor(
            self.config,
            self.store,
            self.client,
            subscription_type=broker.subscription_type(),
        )
        self.thread = threading.Thread(target=self.processor.run, args=(self.stop,), daemon=True)

    def publish(self, records: list[dict[str, Any]]) -> None:
        with Publisher(client=self.client, topic=self.config.topics.records) as publisher:
            for record in records:
                publisher.publish(record)

    def wait_for_runs(self, key: SeriesKey, runs: int) -> None:
        wait_until(lambda: len(self.store.series_points(key)) >= runs, 60, f"{runs} runs of {key}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.store.close()
        self.client.close()


@pytest.fixture(scope="module")
def pipeline(embedded_broker: BrokerHandle) -> Iterator[Pipeline]:
    with tempfile.TemporaryDirectory() as directory:
        running = Pipeline(embedded_broker, Path(directory))
        running.thread.start()
        try:
            nightly = [orjson.loads(line) for line in NIGHTLY.read_text().splitlines() if line]
            running.publish(nightly + unit_records() + counter_records())
            running.wait_for_runs(P99, NIGHTLY_RUNS)
            for test in UNIT_TESTS:
                key = SeriesKey.of(test, "cpu_time_s", {"branch": "main"})
                running.wait_for_runs(key, UNIT_RUNS)
            wait_until(
                lambda: queries.counter_checks(running.store), 60, "the counter check verdict"
            )
            publish_run_or_skip(running)
            yield running
        finally:
            running.close()


def inputs_record(
    run: str, kind: str, profiles: list[Any], hour: int, reference: list[Any] | None = None
) -> dict[str, Any]:
    """A record carrying per-input profiles: the full suite's, or an update's sample (with
    the old code's profiles of its inputs, measured beside it)."""
    inputs: dict[str, Any] = {"kind": kind, "profiles": [p.to_json() for p in profiles]}
    if reference is not None:
        inputs["reference_profiles"] = [p.to_json() for p in reference]
    return {
        "schema": "perfwatch.record/v1",
        "test": INPUTS_TEST,
        "run_id": f"{INPUTS_TEST}#{run}",
        "branch": "main",
        "timestamp": datetime(2024, 7, 1, hour, 0, tzinfo=UTC).isoformat(),
        "metrics": {},
        "inputs": inputs,
    }


def publish_run_or_skip(running: Pipeline) -> None:
    """The suite's profiles become the test's baseline clustering; then an update's
    sample (one large input 30% slower, old and new code timed in alternating rounds)
    gets the processor's recommendation."""
    from test_dashboard import input_suite, timed

    suite = {p.input_id: p for p in input_suite()}
    running.publish([inputs_record("full-1", "full_suite", list(suite.values()), 1)])
    wait_until(
        lambda: queries.baseline_inputs(running.store, INPUTS_TEST, {"branch": "main"})[0],
        60,
        "the input baseline",
    )
    rng = np.random.default_rng(5)
    sample = [timed(suite["large-2"], 1.3, rng), timed(suite["small-3"], 1.0, rng)]
    reference = [timed(suite[p.input_id], 1.0, rng) for p in sample]
    running.publish([inputs_record("update-1", "update_sample", sample, 2, reference)])
    wait_until(
        lambda: queries.recommendations(running.store, INPUTS_TEST), 60, "the recommendation"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def dashboard_url(pipeline: Pipeline) -> Iterator[str]:
    settings = DashboardSettings(
        store_url=pipeline.config.store.url,
        topic=TopicSettings(
            service_url=pipeline.broker.service_url,
            topic=pipeline.config.topics.verdicts,
        ),
        poll_interval_s=30.0,  # long: the live test must be served by the topic
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "the dashboard to start")
    state = server.config.app.state.dashboard  # type: ignore[union-attr]
    wait_until(lambda: state.listener.connected.is_set(), 30, "the verdicts subscription")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    # Nothing may be fetched from anywhere but the dashboard itself.
    external: list[str] = []
    opened.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("http://127.0.0.1:")
            else (external.append(route.request.url), route.abort())
        ),
    )
    yield opened
    context.close()
    assert external == []
    assert errors == []


def load(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='true']", timeout=WAIT_MS)


def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def table(page: Any, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"{selector} tbody tr:not([hidden])",
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))",
    )


def chart(page: Any, element_id: str) -> dict[str, Any]:
    """The data and layout Plotly drew in the element."""
    return page.evaluate(
        """id => { const gd = document.getElementById(id);
                   return {data: gd.data, layout: gd.layout}; }""",
        element_id,
    )


def test_overview_lists_series_with_status_and_newest_verdicts_first(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, dashboard_url)
    expected = {
        row["key"]: row for row in queries.list_series(pipeline.store, ChangePointAnalysis())
    }
    keys = page.eval_on_selector_all(
        "#series-table tbody tr", "rows => rows.map(r => r.dataset.key)"
    )
    assert sorted(keys) == sorted(expected)
    rows = dict(zip(keys, table(page, "#series-table"), strict=True))
    for key, summary in expected.items():
        status, test, metric, _, runs, latest, change, episode, _ = rows[key]
        assert (status, test, metric) == (summary["status"], summary["test"], summary["metric"])
        assert int(runs) == summary["runs"]
        value, *unit = latest.split(" ")
        assert float(value) == pytest.approx(summary["latest"]["value"], rel=1e-5)
        assert unit == ([summary["unit"]] if summary["unit"] else [])
        if summary["status_episode"]:
            assert change == f"{summary['status_episode']['forward_change_percent']:+.1f}%"
            assert episode == summary["status_episode"]["text"]
    # One set of numbers: the row's change is perfwatch analyze's on the same history.
    offline = {s["metric"]: s["change_points"] for s in analyze_json(NIGHTLY)}
    (p99,) = offline["p99_latency_ms"]
    assert rows[P99.canonical][:1] + rows[P99.canonical][6:8] == [
        "regression",
        f"{p99['forward_change_percent']:+.1f}%",
        f"regression {p99['forward_change_percent']:+.1f}% at run {p99['run_id']} (open)",
    ]
    throughput = SeriesKey.of("nightly", "throughput_ops_s", {"branch": "main"})
    assert rows[throughput.canonical][0] == "improvement"
    memory = SeriesKey.of("nightly", "peak_memory_mb", {"branch": "main"})
    assert rows[memory.canonical][0] == "fixed"
    # the runs as the verdicts and the webhook name them
    assert rows[memory.canonical][7].endswith("at run nightly-0097, fixed at run nightly-0103")

    feed = queries.verdict_feed(pipeline.store, limit=1000)
    shown = page.eval_on_selector_all(
        "#verdict-table tbody tr", "rows => rows.map(r => r.dataset.verdictId)"
    )
    assert shown == [item["verdict_id"] for item in feed]

    page.fill("#series-search", "p99")
    assert [r[2] for r in table(page, "#series-table")] == ["p99_latency_ms"]
    page.fill("#series-search", "")
    page.click("#series-table th[data-sort='runs']")
    page.click("#series-table th[data-sort='runs']")  # descending
    runs = [int(r[4]) for r in table(page, "#series-table")]
    assert runs == sorted(runs, reverse=True) and runs[0] == NIGHTLY_RUNS
    screenshot(page, "overview")


def analyze_json(path: Path) -> list[dict[str, Any]]:
    """`perfwatch analyze --format json` on a file, run as a user runs it."""
    result = subprocess.run(
        [Path(sys.executable).with_name("perfwatch"), "analyze", path, "--format", "json"],
        capture_output=True,
        check=True,
    )
    series: list[dict[str, Any]] = orjson.loads(result.stdout)["series"]
    return series


def test_series_view_shows_one_set_of_numbers_per_change_point_as_analyze_gives(
    page: Any, dashboard_url: str
) -> None:
    for offline in analyze_json(NIGHTLY):
        key = SeriesKey.of("nightly", offline["metric"], {"branch": "main"})
        load(page, f"{dashboard_url}/series?key={quote(key.canonical)}")
        rows = table(page, "#changepoint-table")
        assert len(rows) == len(offline["change_points"]) > 0
        for row, cp in zip(rows, offline["change_points"], strict=True):
            run_id, commit, time_, direction, change, before, after, pvalue = row
            assert (run_id, commit, time_, direction) == (
                cp["run_id"],
                cp["commit"][:12],
                cp["time"],
                cp["direction"],
            )
            assert change == f"{cp['forward_change_percent']:+.1f}%"
            assert float(before) == pytest.approx(cp["mean_before"], rel=1e-5)
            assert float(after) == pytest.approx(cp["mean_after"], rel=1e-5)
            assert float(pvalue) == pytest.approx(cp["pvalue"], rel=0.05)
        drawn = chart(page, "series-chart")
        labels = [a["text"] for a in drawn["layout"]["annotations"]]
        assert labels == [
            f"{cp['forward_change_percent']:+.1f}% at run {cp['run_id']}"
            for cp in offline["change_points"]
        ]
        # Segments are the change points' own means: nothing on the page disagrees.
        means = [float(r[1]) for r in table(page, "#segment-table")]
        expected = [offline["change_points"][0]["mean_before"]] + [
            cp["mean_after"] for cp in offline["change_points"]
        ]
        assert means == pytest.approx(expected, rel=1e-5)
        # The alert timeline shows no numbers of its own.
        headers = page.eval_on_selector_all(
            "#history-table thead th", "cells => cells.map(c => c.textContent)"
        )
        assert not {"Change", "p"} & set(headers)


def test_series_x_axis_toggles_between_position_date_and_commit(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/series?key={quote(P99.canonical)}")
    points = pipeline.store.series_points(P99)
    axis = chart(page, "series-chart")["layout"]["xaxis"]
    assert axis["title"]["text"] == "run id (runs in series order)"
    assert axis["ticktext"] == [points[i].run_id for i in axis["tickvals"]]
    page.select_option("#series-x", "date")
    page.wait_for_function(
        "() => document.getElementById('series-chart').layout.xaxis.type === 'date'",
        timeout=WAIT_MS,
    )
    drawn = chart(page, "series-chart")
    (runs,) = [t for t in drawn["data"] if (t.get("meta") or {}).get("role") == "runs"]
    assert runs["x"][0].startswith(points[0].time[:10])
    assert drawn["layout"]["xaxis"]["title"]["text"] == "run date (UTC)"
    assert drawn["layout"]["yaxis"]["title"]["text"] == "p99_latency_ms (ms)"
    screenshot(page, "series-by-date")
    page.select_option("#series-x", "commit")
    page.wait_for_function(
        "() => (document.getElementById('series-chart').layout.xaxis.ticktext || []).length > 0",
        timeout=WAIT_MS,
    )
    axis = chart(page, "series-chart")["layout"]["xaxis"]
    assert axis["ticktext"] == [(points[i].commit or "")[:12] for i in axis["tickvals"]]
    assert "x=commit" in page.url
    screenshot(page, "series-by-commit")


def test_series_view_plots_runs_change_points_bands_and_history(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/series?key={quote(P99.canonical)}")
    detail = queries.series_detail(pipeline.store, P99, ChangePointAnalysis())
    assert detail is not None
    drawn = chart(page, "series-chart")
    by_role: dict[str, list[dict[str, Any]]] = {}
    for trace in drawn["data"]:
        by_role.setdefault((trace.get("meta") or {}).get("role"), []).append(trace)
    (runs,) = by_role["runs"]
    assert runs["y"] == [p["value"] for p in detail["points"]]
    (marks,) = by_role["change_points"]
    indices = [cp["index"] for cp in detail["change_point_list"]]
    assert marks["x"] == indices and 74 in indices  # the lock added on the hot path
    assert [t["y"][0] for t in by_role["segment_mean"]] == pytest.approx(
        [s["mean"] for s in detail["segments"]]
    )
    rows = table(page, "#changepoint-table")
    assert [r[0] for r in rows] == [cp["run_id"] for cp in detail["change_point_list"]]
    # Episodes and segments name their runs by run id, as the verdicts do.
    assert [r[:3] for r in table(page, "#episode-table")] == [
        [e["kind"], e["run_id"], (e["commit"] or "")[:12]] for e in detail["episodes"]
    ]
    assert [r[0] for r in table(page, "#segment-table")] == [
        f"{s['first_run_id']}–{s['last_run_id']}" for s in detail["segments"]
    ]
    history = page.eval_on_selector_all(
        "#history-table tbody tr", "rows => rows.map(r => r.dataset.verdictId)"
    )
    assert history == [v["verdict_id"] for v in detail["verdicts"]]

    # Hover on the first run after the regression: its run id, commit and time.
    point = detail["points"][74]
    x, y = page.evaluate(
        """([i, value]) => { const gd = document.getElementById('series-chart');
             const L = gd._fullLayout;
             return [L._size.l + L.xaxis.l2p(i), L._size.t + L.yaxis.l2p(value)]; }""",
        [74, point["value"]],
    )
    box = page.locator("#series-chart").bounding_box()
    page.mouse.move(box["x"] + x, box["y"] + y)
    page.wait_for_selector("#series-chart .hoverlayer .hovertext", timeout=WAIT_MS)
    hover = page.eval_on_selector("#series-chart .hoverlayer", "layer => layer.textContent")
    assert point["run_id"] in hover and point["commit"][:12] in hover
    screenshot(page, "series")

    # Zoom by dragging over runs 60..90.
    left = page.evaluate(
        "i => { const L = document.getElementById('series-chart')._fullLayout;"
        " return L._size.l + L.xaxis.l2p(i); }",
        60,
    )
    right = page.evaluate(
        "i => { const L = document.getElementById('series-chart')._fullLayout;"
        " return L._size.l + L.xaxis.l2p(i); }",
        90,
    )
    middle = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + left, middle)
    page.mouse.down()
    page.mouse.move(box["x"] + right, middle, steps=8)
    page.mouse.up()
    page.wait_for_function(
        "() => { const r = document.getElementById('series-chart').layout.xaxis.range;"
        " return r && r[1] - r[0] < 40; }",
        timeout=WAIT_MS,
    )
    low, high = chart(page, "series-chart")["layout"]["xaxis"]["range"]
    assert low == pytest.approx(60, abs=1.5) and high == pytest.approx(90, abs=1.5)
    screenshot(page, "series-zoomed")


def test_counter_view_shows_clusters_models_and_errors(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/counters")
    checks = queries.counter_checks(pipeline.store)
    # newest first, as the view selects: the flagged run, then the second run's
    # judgement against a baseline of one run
    kinds = [c["kind"] for c in checks]
    assert kinds == ["counter_regression.detected", "counter_check.insufficient_baseline"]
    check = checks[0]
    block = check["verdict"]["counter_check"]
    rows = table(page, "#cluster-table")
    assert [int(r[0]) for r in rows] == [c["cluster"] for c in block["clusters"]]
    for row, cluster in zip(rows, block["clusters"], strict=True):
        assert row[1] == ", ".join(cluster["members"])
        assert row[2] == cluster["dependent"]
        assert row[4] == f"{100 * cluster['error']:.1f}%"
        assert row[5] == f"{100 * cluster['good_run_error']:.1f}%"
        assert float(row[6]) == pytest.approx(cluster["familywise_pvalue"], rel=0.05)
        assert row[7] == ("yes" if cluster["flagged"] else "no")
    errors = chart(page, "counter-errors")
    expected = figures.counter_figures(block)["errors"]["data"][0]["y"]
    assert errors["data"][0]["y"] == pytest.approx(expected)
    assert page.inner_text("#counter-facts") == queries.counter_header(check)
    assert "false-alarm rate 1%" in page.inner_text("#counter-facts")
    screenshot(page, "counters")
    # against one baseline run nothing was judged, and the usual error is the fit's own
    load(page, f"{dashboard_url}/counters?verdict={checks[1]['verdict_id']}")
    block = checks[1]["verdict"]["counter_check"]
    rows = table(page, "#cluster-table")
    for row, cluster in zip(rows, block["clusters"], strict=True):
        assert row[5] == f"{100 * cluster['good_run_error']:.1f}% in-sample"
        assert row[6] == "" and row[7] == "not judged"
    assert page.inner_text("#counter-facts") == queries.counter_header(checks[1])


def test_run_or_skip_view_shows_clusters_and_votes(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/inputs")
    view = queries.inputs_view(pipeline.store)
    votes = table(page, "#vote-table")
    assert [(r[0], r[3]) for r in votes] == [(v["input_id"], v["decision"]) for v in view["votes"]]
    drawn = chart(page, "inputs-chart")
    clusters = [t for t in drawn["data"] if t["meta"]["role"] == "cluster"]
    assert sum(len(t["x"]) for t in clusters) == len(view["profiles"])
    assert drawn["layout"]["xaxis"]["title"]["text"] == "statements"
    page.select_option("#inputs-x", "size")
    page.wait_for_function(
        "() => document.getElementById('inputs-chart').layout.xaxis.title.text === 'size'",
        timeout=WAIT_MS,
    )
    sizes = sorted(
        x
        for t in chart(page, "inputs-chart")["data"]
        if t["meta"]["role"] == "cluster"
        for x in t["x"]
    )
    assert sizes == sorted(p["size"] for p in view["profiles"])
    screenshot(page, "inputs")


def test_run_or_skip_view_shows_the_sample_at_its_old_and_new_times(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/inputs")
    (item,) = queries.recommendations(pipeline.store, INPUTS_TEST)
    block = item["verdict"]["recommendation"]
    votes = {v["input_id"]: v for v in block["votes"]}
    assert block["decision"] == "run" and block["drivers"][0] == "large-2"
    drawn = chart(page, "shift-chart")
    points = {
        input_id: (t["x"][i], t["y"][i])
        for t in drawn["data"]
        if t["meta"]["role"] == "sampled"
        for i, input_id in enumerate(t["meta"]["inputs"])
    }
    assert points == {
        i: (v["numbers"]["previous_time_s"], v["numbers"]["time_s"]) for i, v in votes.items()
    }
    assert drawn["layout"]["xaxis"]["type"] == drawn["layout"]["yaxis"]["type"] == "log"
    assert drawn["layout"]["yaxis"]["title"]["text"].endswith("(s)")
    (ringed,) = [t for t in drawn["data"] if t["meta"]["role"] == "drivers"]
    assert ringed["meta"]["inputs"] == block["drivers"]
    # the table's numbers are the verdict's, as `perfwatch recommend` prints them
    rows = {r[0]: r for r in table(page, "#cluster-change-table")}
    assert len(rows) == len(block["clusters"])
    for cluster in block["clusters"]:
        change = cluster["change"]
        assert rows[cluster["name"]][1] == cluster["decision"]
        if change is None:  # a cluster none of whose inputs was in the sample
            assert rows[cluster["name"]][4:6] == ["", ""]
            continue
        assert rows[cluster["name"]][4] == f"{100 * change['estimate']:+.1f}%"
        assert rows[cluster["name"]][5] == (
            f"[{100 * change['low']:+.1f}%, {100 * change['high']:+.1f}%]"
        )
    slower = next(r for r in table(page, "#vote-table") if r[0] == "large-2")
    assert slower[6] == f"{100 * votes['large-2']['change']['estimate']:+.1f}%"
    forest = chart(page, "cluster-change-chart")
    pooled = [t for t in forest["data"] if t["meta"]["role"] == "cluster_change"]
    assert sorted(t["x"][0] for t in pooled) == sorted(
        100 * c["change"]["estimate"] for c in block["clusters"] if c["change"] is not None
    )
    screenshot(page, "inputs-sample")


def test_resources_view_shows_time_and_memory_per_test_over_commits(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, f"{dashboard_url}/resources")
    time_chart = chart(page, "time-chart")
    assert sorted(t["name"] for t in time_chart["data"]) == [
        f"{t} [branch=main]" for t in UNIT_TESTS
    ]
    for trace in time_chart["data"]:
        test = trace["name"].split(" ")[0]
        points = pipeline.store.series_points(SeriesKey.of(test, "cpu_time_s", {"branch": "main"}))
        assert trace["y"] == [p.value for p in points]
        assert trace["x"] == [p.commit[:12] for p in points if p.commit]
    memory = chart(page, "memory-chart")
    assert {t["name"].split(" ")[0] for t in memory["data"]} == {"nightly", *UNIT_TESTS}
    # Commits run left to right in time order across tests (the unit runs come first).
    first_seen: dict[str, float] = {}
    for key in pipeline.store.series_keys():
        if key.metric == "peak_memory_mb":
            for p in pipeline.store.series_points(key):
                label = (p.commit or p.run_id)[:12]
                first_seen[label] = min(first_seen.get(label, p.timestamp), p.timestamp)
    order = memory["layout"]["xaxis"]["categoryarray"]
    assert order == sorted(first_seen, key=lambda label: first_seen[label])
    screenshot(page, "resources")


def test_new_verdict_appears_live_without_reload(
    page: Any, dashboard_url: str, pipeline: Pipeline
) -> None:
    load(page, dashboard_url)
    page.wait_for_selector("#live-status.live-on", timeout=WAIT_MS)
    page.evaluate("window.__sameDocument = true")
    before = page.eval_on_selector_all("#verdict-table tbody tr", "rows => rows.length")
    pipeline.publish(step_records("live.checkout", 40, 28))
    row = page.wait_for_selector(
        "#verdict-table tbody tr.fresh >> text=live.checkout", timeout=WAIT_MS
    )
    assert row is not None
    key = SeriesKey.of("live.checkout", "latency_ms", {"branch": "main"})
    # the alert: the finding confirmed once stable (its detection came first)
    (stored,) = queries.verdict_feed(pipeline.store, series_key=key, kinds=[CONFIRMED])
    # newest first: the commit's incident, then the confirmed regression
    kinds = [row[1] for row in table(page, "#verdict-table")[:2]]
    assert kinds == ["INCIDENT", "REGRESSION"]
    first = table(page, "#verdict-table")[1]
    assert first[1:5] == ["REGRESSION", "live.checkout", "latency_ms", stored["facts"]["commit"]]
    assert stored["verdict"]["change_point"]["index"] == 28
    status = page.get_attribute(f"#series-table tr[data-key='{key.canonical}']", "data-status")
    assert status == "regression"
    assert page.evaluate("window.__sameDocument") is True
    assert page.eval_on_selector_all("#verdict-table tbody tr", "rows => rows.length") > before
    screenshot(page, "live")
