"""Dashboard queries, figures and JSON API on a store filled by the real record handlers.

Series come from the processor's change-point handler; counter-check and
run-or-skip verdicts from the real detectors. The browser tests
(test_dashboard_browser.py) drive the same application through Chromium.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from perfwatch.config import Config
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import InputProfile, MetricValue, Record, SeriesRef, Verdict
from perfwatch.contract.validation import validate_verdict
from perfwatch.dashboard import figures, queries
from perfwatch.dashboard.app import DashboardSettings, create_app, plotly_js_path
from perfwatch.detectors.counters import CounterRegressionCheck, CounterSamples
from perfwatch.detectors.inputs import InputClustering, RunOrSkipRecommender, input_table
from perfwatch.processor.changepoints import ChangePointHandler
from perfwatch.processor.handlers import baseline_key
from perfwatch.state import SeriesKey, StateStore, open_store

T0 = datetime(2024, 3, 1, 2, 0, tzinfo=UTC)
RUNS = 80
STEP_AT = 50  # latency_ms rises 25% from this run on


def nightly_record(i: int, latency: float, memory: float, test: str = "api.search") -> Record:
    return Record(
        test=test,
        run_id=f"{test}#{i:03d}",
        timestamp=T0 + timedelta(days=i),
        metrics={
            "latency_ms": MetricValue(latency, "ms", "lower_is_better"),
            "peak_memory_mb": MetricValue(memory, "MiB", "lower_is_better"),
        },
        commit=hashlib.sha1(f"commit-{i}".encode()).hexdigest(),
        branch="main",
    )


def handle(store: StateStore, handler: ChangePointHandler, record: Record) -> list[str]:
    """One record through the change-point handler, as the processor commits it."""
    queued = []
    with store.transaction() as tx:
        for verdict in handler.handle(record, tx, T0 + timedelta(days=400)):
            key = SeriesKey.of(
                verdict.series.test, verdict.series.metric, verdict.series.attributes
            )
            if tx.add_verdict(
                verdict.verdict_id, verdict.kind, dumps(verdict), "test", record.test, key.canonical
            ):
                queued.append(verdict.verdict_id)
    return queued


def add_check_verdict(store: StateStore, verdict: Verdict) -> None:
    assert validate_verdict(verdict.to_json()) == []
    with store.transaction() as tx:
        tx.add_verdict(
            verdict.verdict_id, verdict.kind, dumps(verdict), "test", verdict.series.test
        )


def counter_run(rng: np.random.Generator, n: int, broken: bool, label: str) -> CounterSamples:
    """Two groups of related counters; `broken` makes memory grow without more load."""
    load = rng.uniform(50, 100, n)
    io = rng.uniform(10, 40, n)
    cpu = 0.8 * load + rng.normal(0, 4, n)
    requests = 3.0 * load + rng.normal(0, 20, n)
    memory = (5.0 * load + 200 + rng.normal(0, 40, n)) * (1.8 if broken else 1.0)
    disk_read = 2.0 * io + rng.normal(0, 4, n)
    disk_write = 1.5 * io + rng.normal(0, 4, n)
    names = ["cpu", "requests", "memory", "disk_read", "disk_write"]
    values = np.column_stack([cpu, requests, memory, disk_read, disk_write])
    return CounterSamples(names, values, label)


def input_profile(input_id: str, statements: int, seconds: float, size: float) -> InputProfile:
    return InputProfile(
        input_id=input_id,
        size=size,
        wall_time_s=seconds * 1.05,
        cpu_time_s=seconds,
        peak_memory_bytes=size * 1000.0,
        statements=statements,
        function_calls=statements // 10,
        loop_iterations=statements // 4,
        conditionals=statements // 8,
    )


def input_suite(scale: float = 1.0) -> list[InputProfile]:
    """Two behaviours: small inputs (~1k statements) and large ones (~50k statements)."""
    profiles = []
    for i in range(8):
        statements = 1000 + 40 * i
        profiles.append(input_profile(f"small-{i}", statements, scale * statements / 1e5, 10 + i))
    for i in range(8):
        statements = 50_000 + 900 * i
        profiles.append(input_profile(f"large-{i}", statements, scale * statements / 1e5, 500 + i))
    return profiles


def counter_verdict(rng: np.random.Generator) -> Verdict:
    """The counter check of a run whose memory grew without more load."""
    baseline = [counter_run(rng, 120, False, f"good-{k}") for k in range(3)]
    check = CounterRegressionCheck().fit(baseline)
    result = check.check(counter_run(rng, 120, True, "candidate"))
    return Verdict(
        verdict_id=hashlib.sha256(b"counter-check-1").hexdigest()[:32],
        kind="counter_regression.detected" if result.regression else "counter_check.passed",
        emitted_at=T0 + timedelta(days=RUNS),
        series=SeriesRef("api.search"),
        record_run_id="api.search#candidate",
        parameters=check.get_params(),
        counter_check={
            "verdict": "regression" if result.regression else "pass",
            **result.to_dict(),
        },
    )


def recommendation_verdict(store: StateStore) -> Verdict:
    """Stores the suite's input profiles as the baseline; the update's recommendation."""
    suite = input_suite()
    clustering = InputClustering().fit(*input_table(suite))
    update = [
        input_profile("large-2", 51_800, 0.9, 502),
        input_profile("small-3", 1120, 0.0112, 13),
    ]
    recommendation = RunOrSkipRecommender().recommend(clustering, suite, update)
    baseline = {"profiles": [asdict(p) for p in suite], "labels": clustering.labels_}
    with store.transaction() as tx:
        key = baseline_key("suite.inputs", {})
        tx.put_blob(queries.INPUT_BASELINE_NAMESPACE, key, orjson.dumps(baseline))
    return Verdict(
        verdict_id=hashlib.sha256(b"recommendation-1").hexdigest()[:32],
        kind="recommendation",
        emitted_at=T0 + timedelta(days=RUNS, hours=1),
        series=SeriesRef("suite.inputs"),
        record_run_id="suite.inputs#update-1",
        parameters=recommendation.parameters,
        recommendation=recommendation.to_dict(),
    )


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    rng = np.random.default_rng(20240301)
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'state.db'}"
    with open_store(url) as store:
        handler = ChangePointHandler(Config())
        for i in range(RUNS):
            latency = (125.0 if i >= STEP_AT else 100.0) * (1 + 0.01 * rng.standard_normal())
            memory = 512.0 * (1 + 0.005 * rng.standard_normal())
            handle(store, handler, nightly_record(i, latency, memory))
            handle(store, handler, nightly_record(i, 40 + rng.normal(0, 0.3), 300.0, "db.read"))

        add_check_verdict(store, counter_verdict(rng))
        add_check_verdict(store, recommendation_verdict(store))
        yield store


LATENCY = SeriesKey.of("api.search", "latency_ms", {"branch": "main"})


# --- queries --------------------------------------------------------------------------------


def test_status_is_the_direction_of_the_latest_change_point() -> None:
    assert queries.status_of([]) == "stable"
    older = {"index": 10, "direction": "regression"}
    newer = {"index": 30, "direction": "improvement"}
    assert queries.status_of([newer, older]) == "improvement"
    assert queries.status_of([older, {"index": 40, "direction": "unknown"}]) == "changed"


def test_segments_split_at_change_points_with_their_statistics() -> None:
    values = [1.0, 1.0, 3.0, 5.0, 5.0, 5.0]
    result = queries.segments(values, [3, 2])
    assert [(s.start, s.stop) for s in result] == [(0, 2), (2, 3), (3, 6)]
    assert [s.mean for s in result] == [1.0, 3.0, 5.0]
    assert result[0].stddev == 0.0


def test_series_list_shows_the_regression_found_by_the_handler(filled_store: StateStore) -> None:
    rows = {row["key"]: row for row in queries.list_series(filled_store)}
    assert len(rows) == 4
    latency = rows[LATENCY.canonical]
    assert latency["status"] == "regression"
    assert latency["runs"] == RUNS
    assert latency["latest_change"]["index"] == STEP_AT
    assert latency["latest_change"]["forward_change_percent"] == pytest.approx(25, abs=3)
    assert latency["latest"]["run_id"] == f"api.search#{RUNS - 1:03d}"
    memory = rows[SeriesKey.of("api.search", "peak_memory_mb", {"branch": "main"}).canonical]
    assert memory["status"] == "stable"
    assert memory["latest_change"] is None


def test_series_detail_segments_match_the_points(filled_store: StateStore) -> None:
    detail = queries.series_detail(filled_store, LATENCY)
    assert detail is not None
    values = np.array([p["value"] for p in detail["points"]])
    assert [cp["index"] for cp in detail["change_point_list"]] == [STEP_AT]
    before, after = detail["segments"]
    assert (before["start"], before["stop"], after["stop"]) == (0, STEP_AT, RUNS)
    assert before["mean"] == pytest.approx(values[:STEP_AT].mean())
    assert after["stddev"] == pytest.approx(values[STEP_AT:].std())
    assert [v["kind"] for v in detail["verdicts"]] == [
        "incident.opened",
        "change_point.confirmed",
        "change_point.detected",
    ]
    assert queries.series_detail(filled_store, SeriesKey.of("nope", "x")) is None


def test_feed_is_newest_first_and_pages_without_overlap(filled_store: StateStore) -> None:
    everything = queries.verdict_feed(filled_store, limit=1000)
    seqs = [item["seq"] for item in everything]
    assert seqs == sorted(seqs, reverse=True)
    assert everything[0]["kind"] == "recommendation"
    first = queries.verdict_feed(filled_store, limit=2)
    rest = queries.verdict_feed(filled_store, limit=1000, before_seq=first[-1]["seq"])
    assert [i["seq"] for i in first + rest] == seqs
    only_counters = queries.verdict_feed(filled_store, kinds=queries.COUNTER_KINDS)
    assert [i["kind"] for i in only_counters] == ["counter_regression.detected"]
    assert queries.verdict_feed(filled_store, test_glob="db.*") == []


def test_document_item_matches_the_stored_item(filled_store: StateStore) -> None:
    stored = queries.verdict_feed(filled_store, series_key=LATENCY)[0]
    from_topic = queries.document_item(stored["verdict"])
    for field in ("verdict_id", "kind", "series_key", "facts"):
        assert from_topic[field] == stored[field]


def test_parse_series_key_rejects_malformed_keys() -> None:
    assert queries.parse_series_key(LATENCY.canonical) == LATENCY
    for bad in ("", "not json", "[1, 2]", '["t"]'):
        with pytest.raises(ValueError, match="series key"):
            queries.parse_series_key(bad)


def test_resources_pick_time_and_memory_metrics(filled_store: StateStore) -> None:
    data = queries.resources_over_commits(filled_store)
    assert data["time_metric"] == "latency_ms"
    assert data["memory_metric"] == "peak_memory_mb"
    assert sorted(line["test"] for line in data["time"]) == ["api.search", "db.read"]
    first = data["totals"][0]
    expected = sum(line["points"][0]["value"] for line in data["time"])
    assert first["total"] == pytest.approx(expected)
    assert first["tests"] == 2
    assert len(data["totals"]) == RUNS


def test_inputs_view_places_votes_on_the_baseline_clusters(filled_store: StateStore) -> None:
    view = queries.inputs_view(filled_store, x_attribute="statements", y_attribute="cpu_time_s")
    assert view["test"] == "suite.inputs"
    assert len(view["profiles"]) == 16
    expected: dict[int, list[str]] = {}
    for input_id, label in sorted(
        InputClustering().fit(*input_table(input_suite())).labels_.items()
    ):
        expected.setdefault(label, []).append(input_id)
    assert {c["label"]: c["members"] for c in view["clusters"]} == expected
    votes = {v["input_id"]: v["decision"] for v in view["votes"]}
    assert votes == {"large-2": "run", "small-3": "skip"}
    with pytest.raises(LookupError):
        queries.inputs_view(filled_store, verdict_id="feedbeef")
    with pytest.raises(ValueError, match="unknown attribute"):
        queries.inputs_view(filled_store, x_attribute="colour")


# --- figures ----------------------------------------------------------------------------------


def test_series_figure_marks_change_points_and_bands(filled_store: StateStore) -> None:
    detail = queries.series_detail(filled_store, LATENCY)
    assert detail is not None
    figure = figures.series_figure(detail)
    roles = {}
    for trace in figure["data"]:
        roles.setdefault(trace.get("meta", {}).get("role"), []).append(trace)
    (runs,) = roles["runs"]
    assert runs["y"] == [p["value"] for p in detail["points"]]
    assert runs["customdata"][STEP_AT][0] == f"api.search#{STEP_AT:03d}"
    (marks,) = roles["change_points"]
    assert marks["x"] == [STEP_AT]
    assert marks["marker"]["color"] == [figures.STATUS_COLOURS["regression"]]
    means = [trace["y"][0] for trace in roles["segment_mean"]]
    assert means == [s["mean"] for s in detail["segments"]]
    assert [shape["x0"] for shape in figure["layout"]["shapes"]] == [STEP_AT - 0.5]


def test_counter_figures_show_errors_against_the_threshold(filled_store: StateStore) -> None:
    (item,) = queries.counter_checks(filled_store)
    block = item["verdict"]["counter_check"]
    charts = figures.counter_figures(block)
    modelled = [c for c in block["clusters"] if c["error"] is not None]
    assert charts["errors"]["data"][0]["y"] == pytest.approx([100 * c["error"] for c in modelled])
    assert charts["errors"]["layout"]["shapes"][0]["y0"] == pytest.approx(100 * block["threshold"])
    flagged = [c for c in modelled if c["flagged"]]
    assert flagged and any("memory" in c["members"] for c in flagged)
    ratios = charts["means"]["data"][1]["y"]
    assert ratios == pytest.approx([100 * c["target_mean"] / c["baseline_mean"] for c in modelled])


# --- the application --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(filled_store: StateStore) -> Iterator[TestClient]:
    app = create_app(DashboardSettings(store_url=filled_store.url, poll_interval_s=0.2))
    with TestClient(app) as test_client:
        yield test_client


def test_pages_and_assets_are_served_without_external_urls(client: TestClient) -> None:
    for path in ("/", "/series?key=x", "/counters", "/inputs", "/resources"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "http://" not in response.text and "https://" not in response.text
        assert "/static/vendor/plotly.min.js" in response.text
    plotly = client.get("/static/vendor/plotly.min.js")
    assert plotly.status_code == 200
    assert len(plotly.content) == plotly_js_path().stat().st_size
    assert client.get("/static/dashboard.js").status_code == 200


def test_api_returns_series_detail_and_figure(client: TestClient) -> None:
    response = client.get("/api/series/detail", params={"key": LATENCY.canonical})
    assert response.status_code == 200
    body = response.json()
    assert body["series"]["status"] == "regression"
    assert body["figure"]["layout"]["shapes"][0]["x0"] == STEP_AT - 0.5


def test_api_errors_name_the_parameter(client: TestClient) -> None:
    missing = client.get("/api/series/detail")
    assert missing.status_code == 400 and "'key'" in missing.text
    unknown = client.get("/api/series/detail", params={"key": '["a", "b", {}]'})
    assert unknown.status_code == 404
    bad_limit = client.get("/api/verdicts", params={"limit": "many"})
    assert bad_limit.status_code == 400 and "'limit'" in bad_limit.text
    bad_attribute = client.get("/api/inputs", params={"x": "colour"})
    assert bad_attribute.status_code == 400 and "colour" in bad_attribute.text
    assert client.get("/api/counters", params={"verdict": "0000"}).status_code == 404


def test_api_counters_inputs_and_resources(client: TestClient) -> None:
    counters = client.get("/api/counters").json()
    assert counters["selected"]["kind"] == "counter_regression.detected"
    assert set(counters["figures"]) == {"errors", "means"}
    inputs = client.get("/api/inputs", params={"x": "size", "y": "statements"}).json()
    assert inputs["figure"]["layout"]["xaxis"]["title"]["text"] == "size"
    resources = client.get("/api/resources", params={"time_metric": "peak_memory_mb"}).json()
    assert resources["time_metric"] == "peak_memory_mb"
    assert len(resources["figures"]["time"]["data"]) == 2


def test_health_reports_the_store(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body == {
        "status": "ok",
        "series": 4,
        "topic": "off",
        "topic_error": None,
        "clients": body["clients"],
    }


def test_store_poller_sends_each_new_verdict_once(
    filled_store: StateStore, client: TestClient
) -> None:
    state = client.app.state.dashboard  # type: ignore[attr-defined]
    queue = client.portal.call(state.hub.subscribe)  # type: ignore[union-attr]
    handler = ChangePointHandler(Config())
    rng = np.random.default_rng(7)
    new_ids: list[str] = []
    for i in range(RUNS, RUNS + 30):
        record = nightly_record(i, 100.0 * (1 + 0.01 * rng.standard_normal()), 512.0)
        new_ids += handle(filled_store, handler, record)
    assert new_ids, "the drop back to 100 ms must be reported"
    # The app's own poller (every 0.2 s) may already have sent some of them:
    # between the two, each is sent exactly once.
    assert state.poll_store() <= len(new_ids)
    assert state.poll_store() == 0
    events = [client.portal.call(queue.get) for _ in new_ids]
    assert [e["item"]["verdict_id"] for e in events] == new_ids
    assert events[-1]["series"]["key"] == LATENCY.canonical
    # The same verdict arriving from the topic afterwards is not sent again.
    state.on_topic_message(orjson.dumps(events[0]["item"]["verdict"]))
    assert queue.empty()
    client.portal.call(state.hub.unsubscribe, queue)


def test_dashboard_command_rejects_a_bad_store_url(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    result = CliRunner().invoke(main, ["dashboard", "--store", "mysql://x", "--port", "0"])
    assert result.exit_code == 2
    assert "--store mysql://x: expected sqlite:///PATH" in result.output


def test_dashboard_command_joins_brokers_but_does_not_start_them(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    store = f"sqlite:///{tmp_path / 'state.db'}"
    result = CliRunner().invoke(main, ["dashboard", "--store", store, "--pulsar-url", "standalone"])
    assert result.exit_code == 2
    assert "does not start one" in result.output
