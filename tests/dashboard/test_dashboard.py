"""Dashboard queries, figures and JSON API on a store filled by the real record handlers.

Series come from the processor's change-point handler; counter-check and
run-or-skip verdicts from the real detectors. The browser tests
(test_dashboard_browser.py) drive the same application through Chromium.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from perfwatch.adapters.verdict_feed import summary_fields
from perfwatch.brokers import open_broker
from perfwatch.cli.main import main
from perfwatch.config import Config
from perfwatch.contract.codec import dumps
from perfwatch.contract.models import (
    ChangePointEvidence,
    InputProfile,
    Inputs,
    MetricValue,
    Record,
    SeriesRef,
    Verdict,
)
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import Finding, VerdictPolicy, episodes_of
from perfwatch.dashboard import figures, queries
from perfwatch.dashboard.analysis import ChangePointAnalysis, episodes, status_of
from perfwatch.dashboard.app import DashboardSettings, _poll_forever, create_app, plotly_js_path
from perfwatch.dashboard.live import TopicListener, TopicSettings
from perfwatch.detectors.counters import CounterRegressionCheck, CounterSamples
from perfwatch.detectors.inputs import (
    InputClustering,
    RunOrSkipRecommender,
    input_table,
    sample_inputs,
)
from perfwatch.processor.changepoints import ChangePointHandler
from perfwatch.processor.handlers import RecordHandler, baseline_key
from perfwatch.processor.metric_info import MetricInfoHandler
from perfwatch.processor.recommendations import InputsHandler
from perfwatch.readers.input_profile import InputProfileFile, write_input_profile
from perfwatch.state import Point, SeriesKey, StateStore, StoreUnavailable, open_store

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


def series_handlers() -> list[RecordHandler]:
    """The processor's handlers of metric values: change points, then units and directions."""
    return [ChangePointHandler(Config()), MetricInfoHandler(Config())]


def handle(store: StateStore, handlers: list[RecordHandler], record: Record) -> list[str]:
    """One record through the series handlers, as the processor commits it."""
    queued = []
    with store.transaction() as tx:
        verdicts = [v for h in handlers for v in h.handle(record, tx, T0 + timedelta(days=400))]
        for verdict in verdicts:
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
        handler = series_handlers()
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


def change(index: int, before: float, after: float, noise: float, direction: str) -> dict:
    """A change point as the dashboard lists it, with the numbers a test needs."""
    return {
        "index": index,
        "run_id": f"run-{index}",
        "mean_before": before,
        "mean_after": after,
        "stddev_before": noise,
        "stddev_after": noise,
        "forward_change_percent": (after / before - 1) * 100,
        "direction": direction,
    }


def test_a_fixed_regression_is_one_episode_not_an_improvement() -> None:
    # latency 100 -> 130 at run 40, back to 100.5 at run 48 (noise 1.5)
    found = episodes(
        [change(40, 100, 130, 1.5, "regression"), change(48, 130, 100.5, 1.5, "improvement")]
    )
    assert [(e["kind"], e["index"], e["fixed_index"], e["open"]) for e in found] == [
        ("regression", 40, 48, False)
    ]
    assert found[0]["text"] == "regression +30.0% at run run-40, fixed at run run-48"
    assert status_of(found)[0] == "fixed"


def test_a_partly_undone_regression_stays_open_and_is_the_status() -> None:
    # 100 -> 130, then down to 110: still 10 above the old level, far beyond the noise
    found = episodes(
        [change(40, 100, 130, 1.5, "regression"), change(48, 130, 110, 1.5, "improvement")]
    )
    assert [(e["kind"], e["open"]) for e in found] == [("regression", True), ("improvement", False)]
    status, episode = status_of(found)
    assert status == "regression" and episode is not None and episode["index"] == 40
    # the latest change is an improvement: the old status showed only that
    assert found[-1]["kind"] == "improvement"
    # within the noise (2) but keeping more than half of a small regression (3 -> 1.8 left)
    small = [change(40, 100, 103, 2.0, "regression"), change(48, 103, 101.8, 2.0, "improvement")]
    assert status_of(episodes(small))[0] == "regression"
    assert status_of(episodes(small, fix_share=None))[0] == "fixed"


def test_episodes_of_stacked_regressions_unrelated_improvements_and_unknown_directions() -> None:
    stacked = episodes(
        [
            change(10, 100, 105, 1.0, "regression"),
            change(20, 105, 112, 1.0, "regression"),
            change(30, 112, 99.5, 1.0, "improvement"),  # back below the first level: fixes both
        ]
    )
    assert [(e["index"], e["fixed_index"]) for e in stacked] == [(10, 30), (20, 30)]
    assert status_of(stacked)[0] == "fixed"
    worst = episodes(
        [
            change(10, 100, 103, 0.5, "regression"),
            change(20, 103, 120, 0.5, "regression"),
            change(30, 120, 103.2, 0.5, "improvement"),  # undoes the second only
        ]
    )
    assert [(e["index"], e["fixed_index"]) for e in worst] == [(10, None), (20, 30)]
    assert status_of(worst)[1]["index"] == 10  # type: ignore[index]
    lost = episodes([change(5, 100, 80, 1, "improvement"), change(15, 80, 100, 1, "regression")])
    assert status_of(lost)[0] == "regression"  # losing an improvement is a regression
    assert status_of(episodes([change(5, 10, 12, 0.1, "unknown")]))[0] == "changed"
    assert status_of([]) == ("stable", None)


# Levels a series steps through: (level after, noise, direction) per change point.
level_steps = st.lists(
    st.tuples(
        st.floats(50, 200), st.floats(0.1, 5), st.sampled_from(["regression", "improvement"])
    ),
    min_size=1,
    max_size=8,
)


def stepped(steps: list) -> list[dict]:
    """Change points every 10 runs from level 100 through `steps`."""
    changes, level = [], 100.0
    for i, (after, noise, direction) in enumerate(steps):
        changes.append(change(10 * (i + 1), level, after, noise, direction))
        level = after
    return changes


@given(level_steps)
def test_every_change_point_is_in_exactly_one_episode(steps: list) -> None:
    changes = stepped(steps)
    found = episodes(changes)
    starts = [e["index"] for e in found]
    fixes = [e["fixed_index"] for e in found if e["fixed_index"] is not None]
    assert sorted(starts + sorted(set(fixes))) == [c["index"] for c in changes]
    assert all(e["kind"] == "regression" for e in found if e["fixed_index"] is not None)
    assert (status_of(found)[0] == "regression") == any(e["open"] for e in found)


@given(level_steps)
def test_the_dashboard_and_the_verdicts_tell_the_same_episodes(steps: list) -> None:
    changes = stepped(steps)
    shown = {e["index"]: e["fixed_index"] for e in episodes(changes) if e["kind"] == "regression"}
    findings = [
        Finding(
            ChangePointEvidence(
                index=c["index"],
                run_id=c["run_id"],
                commit=None,
                time=datetime(2026, 1, 1, tzinfo=UTC),
                forward_change_percent=c["forward_change_percent"],
                magnitude=abs(c["forward_change_percent"]) / 100,
                mean_before=c["mean_before"],
                stddev_before=c["stddev_before"],
                mean_after=c["mean_after"],
                stddev_after=c["stddev_after"],
                pvalue=1e-9,
                direction=c["direction"],
            ),
            f"{c['index']:032x}",
            "confirmed",
            0,
        )
        for c in changes
    ]
    told = episodes_of(findings, VerdictPolicy())
    published = {
        block["regression"]["index"]: block.get("fix", {}).get("index")
        for block in told.by_finding.values()
    }
    assert published == shown
    dashboard_status = status_of(episodes(changes))
    assert (told.status["state"] == "regressed") == (dashboard_status[0] == "regression")
    if dashboard_status[0] == "regression":
        assert told.status["worst"]["index"] == dashboard_status[1]["index"]  # type: ignore[index]


def test_segments_are_the_change_points_own_numbers() -> None:
    values = [1.0, 1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 6.0]
    points = [Point(f"r{i}", v, float(i)) for i, v in enumerate(values)]
    (cp,) = [change(4, 1.0, 5.25, 0.0, "unknown") | {"stddev_after": 0.433}]
    result = queries.segments(points, [cp])
    assert result == [
        {"start": 0, "stop": 4, "mean": 1.0, "stddev": 0.0, "first_run_id": "r0",
         "last_run_id": "r3"},
        {"start": 4, "stop": 8, "mean": 5.25, "stddev": 0.433, "first_run_id": "r4",
         "last_run_id": "r7"},
    ]  # fmt: skip
    (whole,) = queries.segments(points, [])
    assert whole["mean"] == pytest.approx(np.mean(values))
    assert whole["stddev"] == pytest.approx(np.std(values))


def test_series_list_shows_the_regression_found_by_the_handler(filled_store: StateStore) -> None:
    rows = {row["key"]: row for row in queries.list_series(filled_store, ChangePointAnalysis())}
    assert len(rows) == 4
    latency = rows[LATENCY.canonical]
    assert latency["status"] == "regression"
    assert latency["runs"] == RUNS
    assert latency["unit"] == "ms" and latency["direction"] == "lower_is_better"
    assert latency["status_episode"]["index"] == STEP_AT
    assert latency["status_episode"]["forward_change_percent"] == pytest.approx(25, abs=3)
    assert latency["latest"]["run_id"] == f"api.search#{RUNS - 1:03d}"
    memory = rows[SeriesKey.of("api.search", "peak_memory_mb", {"branch": "main"}).canonical]
    assert memory["status"] == "stable"
    assert memory["status_episode"] is None


def test_series_detail_segments_match_the_points(filled_store: StateStore) -> None:
    detail = queries.series_detail(filled_store, LATENCY, ChangePointAnalysis())
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
        "change_point.suspected",  # the step's first run, before E-Divisive could place it
    ]
    assert (
        queries.series_detail(filled_store, SeriesKey.of("nope", "x"), ChangePointAnalysis())
        is None
    )


def test_feed_test_glob_takes_an_incident_by_any_of_its_series(tmp_path: Path) -> None:
    """As `watch --test` does: an incident another test's change updated still concerns
    db.insert, which `test=db.*` missed (it matched the causing series only)."""
    member = {"metric": "p99_ms", "attributes": {}, "finding_id": "f"}
    incident = {
        "schema": "perfwatch.verdict/v1",
        "verdict_id": "i1",
        "kind": "incident.updated",
        "emitted_at": "2024-03-01T02:00:00Z",
        "series": {"test": "api.search", "metric": "p99_ms", "attributes": {}},
        "incident": {
            "id": "x",
            "members": [{**member, "test": "db.insert"}, {**member, "test": "api.search"}],
        },
    }
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        with store.transaction() as tx:
            tx.add_verdict("i1", "incident.updated", orjson.dumps(incident), "t", "api.search")
        assert [i["verdict_id"] for i in queries.verdict_feed(store, test_glob="db.*")] == ["i1"]
        assert queries.verdict_feed(store, test_glob="render.*") == []


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
    assert first["tests"] == ["api.search", "db.read"] and first["unit"] == "ms"
    assert len(data["totals"]) == RUNS
    assert data["note"] == ""


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
    detail = queries.series_detail(filled_store, LATENCY, ChangePointAnalysis())
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
    axis = figure["layout"]["xaxis"]
    assert axis["title"]["text"] == "run id (runs in series order)"
    assert axis["ticktext"] == [detail["points"][i]["run_id"] for i in axis["tickvals"]]
    assert figure["layout"]["yaxis"]["title"]["text"] == "latency_ms (ms)"


def test_series_figure_x_axis_shows_run_dates_or_commits(filled_store: StateStore) -> None:
    detail = queries.series_detail(filled_store, LATENCY, ChangePointAnalysis())
    assert detail is not None
    by_date = figures.series_figure(detail, "date")
    (runs,) = [t for t in by_date["data"] if t.get("meta", {}).get("role") == "runs"]
    assert runs["x"][0] == "2024-03-01 02:00:00.000000"  # T0, in UTC
    assert runs["x"][STEP_AT] == (T0 + timedelta(days=STEP_AT)).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert by_date["layout"]["xaxis"]["type"] == "date"
    # the change point's line lies between the last run before it and the first after
    middle = T0 + timedelta(days=STEP_AT - 0.5)
    assert by_date["layout"]["shapes"][0]["x0"] == middle.strftime("%Y-%m-%d %H:%M:%S.%f")
    by_commit = figures.series_figure(detail, "commit")
    axis = by_commit["layout"]["xaxis"]
    assert axis["title"]["text"] == "commit (runs in series order)"
    expected = [detail["points"][i]["commit"][:12] for i in axis["tickvals"]]
    assert axis["ticktext"] == expected and len(expected) <= 12 and axis["tickvals"][0] == 0


def test_counter_error_chart_follows_the_rule_of_its_verdict(filled_store: StateStore) -> None:
    """The chart shows what the verdict compared with its limit, the limit dotted: a bar
    beyond the line is a cluster the verdict flagged, under either rule; against one
    baseline run (no verdict) the errors without a line."""
    (item,) = queries.counter_checks(filled_store)
    block = item["verdict"]["counter_check"]
    assert block["decision"] == "pvalue"
    charts = figures.counter_figures(block)
    judged = [c for c in block["clusters"] if c["familywise_pvalue"] is not None]
    bars = charts["errors"]["data"][0]
    assert bars["y"] == pytest.approx([-math.log10(c["familywise_pvalue"]) for c in judged])
    line = charts["errors"]["layout"]["shapes"][0]["y0"]
    assert line == pytest.approx(-math.log10(block["alpha"]))
    assert [y > line for y in bars["y"]] == [c["flagged"] for c in judged]
    flagged = [c for c in judged if c["flagged"]]
    assert flagged and any("memory" in c["members"] for c in flagged)
    red = figures.STATUS_COLOURS["regression"]
    assert [colour == red for colour in bars["marker"]["color"]] == [c["flagged"] for c in judged]
    modelled = [c for c in block["clusters"] if c["error"] is not None]
    ratios = charts["means"]["data"][1]["y"]
    assert ratios == pytest.approx([100 * c["target_mean"] / c["baseline_mean"] for c in modelled])

    rng = np.random.default_rng(5)
    baseline = [counter_run(rng, 120, False, f"good-{k}") for k in range(3)]
    broken = counter_run(rng, 120, True, "candidate")
    by_threshold = CounterRegressionCheck(decision="threshold", threshold=0.05)
    block = by_threshold.fit(baseline).check(broken).to_dict()
    charts = figures.counter_figures(block)
    judged = [c for c in block["clusters"] if c["excess_error"] is not None]
    bars = charts["errors"]["data"][0]
    assert bars["y"] == pytest.approx([100 * c["excess_error"] for c in judged])
    line = charts["errors"]["layout"]["shapes"][0]["y0"]
    assert line == pytest.approx(100 * block["threshold"])
    assert [y > line for y in bars["y"]] == [c["flagged"] for c in judged]
    assert any(c["flagged"] for c in judged) and not all(c["flagged"] for c in judged)

    block = CounterRegressionCheck().fit(baseline[:1]).check(broken).to_dict()
    assert block["status"] == "insufficient_baseline"
    charts = figures.counter_figures(block)
    assert charts["errors"]["layout"]["shapes"] == []
    assert red not in charts["errors"]["data"][0]["marker"]["color"]
    assert "no verdict" in charts["errors"]["layout"]["title"]["text"]


def test_counter_header_gives_the_p_value_and_the_rate_it_was_judged_at(
    filled_store: StateStore,
) -> None:
    (item,) = queries.counter_checks(filled_store)
    block = item["verdict"]["counter_check"]
    tests = sum(c["tests"] for c in block["clusters"])
    flagged = sum(c["flagged"] for c in block["clusters"])
    header = queries.counter_header(item)
    assert header.startswith(
        f"REGRESSION: api.search, run api.search#candidate — {flagged} of "
        f"{len(block['clusters'])} cluster(s) flagged, p={block['pvalue']:.2g}, look first at "
    )
    assert header.endswith(
        f"; p corrected for the {tests} models judged, flagged below the false-alarm rate "
        "1%, from 3 baseline runs each left out in turn"
    )
    threshold = {**block, "decision": "threshold", "alpha": None, "pvalue": None}
    by_threshold = {**item, "verdict": {**item["verdict"], "counter_check": threshold}}
    assert queries.counter_header(by_threshold).endswith(
        "more; a fixed threshold on each model's error beyond its usual error"
    )
    one_run = {**block, "status": "insufficient_baseline"}
    unjudged = {**item, "verdict": {**item["verdict"], "counter_check": one_run}}
    assert "no verdict, a baseline of one run" in queries.counter_header(unjudged)


# --- one set of numbers per change point: perfwatch analyze's ----------------------------------

NIGHTLY = Path(__file__).resolve().parents[2] / "examples" / "nightly.jsonl"
ANALYZE_FIELDS = (
    "index", "run_id", "time", "commit", "forward_change_percent", "magnitude", "mean_before",
    "stddev_before", "mean_after", "stddev_after", "pvalue", "direction",
)  # fmt: skip


@pytest.fixture(scope="module")
def nightly_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    """The example nightly history (120 runs, 3 metrics) through the processor's handlers."""
    from perfwatch.contract.codec import parse_record

    url = f"sqlite:///{tmp_path_factory.mktemp('nightly') / 'state.db'}"
    with open_store(url) as store:
        handlers = series_handlers()
        for line in NIGHTLY.read_bytes().splitlines():
            handle(store, handlers, parse_record(line))
        yield store


def analyze_json(path: Path) -> dict[str, list[dict]]:
    """`perfwatch analyze --format json` on a file: change points by metric."""
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {s["metric"]: s["change_points"] for s in orjson.loads(result.output)["series"]}


def test_change_points_are_perfwatch_analyze_on_the_stored_history(
    nightly_store: StateStore,
) -> None:
    expected = analyze_json(NIGHTLY)
    analysis = ChangePointAnalysis()
    for metric, offline in expected.items():
        key = SeriesKey.of("nightly", metric, {"branch": "main"})
        detail = queries.series_detail(nightly_store, key, analysis)
        assert detail is not None
        shown = [{name: cp[name] for name in ANALYZE_FIELDS} for cp in detail["change_point_list"]]
        assert shown == offline, metric  # exactly: same detector, parameters and values
        assert [s["mean"] for s in detail["segments"][1:]] == [cp["mean_after"] for cp in offline]
        figure = figures.series_figure(detail)
        labels = [a["text"] for a in figure["layout"]["annotations"]]
        assert labels == [
            f"{cp['forward_change_percent']:+.1f}% at run {cp['run_id']}" for cp in offline
        ]
    # The verdicts published while the history grew carry other numbers: the old page
    # showed the first of them next to its segment table.
    p99 = SeriesKey.of("nightly", "p99_latency_ms", {"branch": "main"})
    feed = queries.verdict_feed(nightly_store, series_key=p99)
    first = [v["verdict"] for v in feed if "change_point" in v["verdict"]][-1]["change_point"]
    (now,) = expected["p99_latency_ms"]
    assert first["index"] == now["index"] and first["pvalue"] != now["pvalue"]
    assert abs(first["forward_change_percent"] - now["forward_change_percent"]) > 1


def test_configured_analyzer_rules_are_used_as_analyze_uses_its_flags(
    nightly_store: StateStore,
) -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    config = Config(analyzer={"window_len": 20, "max_pvalue": 1e-6})
    args = ["analyze", str(NIGHTLY), "--format", "json", "--window", "20", "-P", "1e-6"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    for series in orjson.loads(result.output)["series"]:
        key = SeriesKey.of("nightly", series["metric"], {"branch": "main"})
        detail = queries.series_detail(nightly_store, key, ChangePointAnalysis(config))
        assert detail is not None and detail["parameters"]["window_len"] == 20
        shown = [{name: cp[name] for name in ANALYZE_FIELDS} for cp in detail["change_point_list"]]
        assert shown == series["change_points"]


def test_analyze_with_a_config_file_shows_what_the_dashboard_shows_with_it(
    tmp_path: Path,
) -> None:
    from perfwatch.config import load_config
    from perfwatch.contract.codec import parse_record

    # the example history without its declared directions: the configuration gives them
    lines = []
    for line in NIGHTLY.read_bytes().splitlines():
        record = orjson.loads(line)
        for metric in record["metrics"].values():
            del metric["direction"]
        lines.append(orjson.dumps(record))
    history = tmp_path / "nightly.jsonl"
    history.write_bytes(b"\n".join(lines) + b"\n")
    config_path = tmp_path / "perfwatch.toml"
    config_path.write_text(
        '[directions]\n"throughput*" = "higher_is_better"\n"*" = "lower_is_better"\n'
        "[analyzer]\nwindow_len = 30\n"
        '[[analyzer.rules]]\nmetric = "p99*"\nmax_pvalue = 1e-4\nmin_magnitude = 0.02\n'
    )
    config = load_config(config_path, env={})
    result = CliRunner().invoke(
        main, ["analyze", str(history), "--format", "json", "--config", str(config_path)]
    )
    assert result.exit_code == 0, result.output
    offline = {s["metric"]: s["change_points"] for s in orjson.loads(result.output)["series"]}
    directions = [cp["direction"] for cps in offline.values() for cp in cps]
    assert directions and set(directions) <= {"regression", "improvement"}
    assert offline != analyze_json(history)  # the configuration changed the results
    analysis = ChangePointAnalysis(config)
    handlers = [ChangePointHandler(config), MetricInfoHandler(config)]
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        for line in lines:
            handle(store, handlers, parse_record(line))
        for metric, expected in offline.items():
            key = SeriesKey.of("nightly", metric, {"branch": "main"})
            detail = queries.series_detail(store, key, analysis)
            assert detail is not None
            assert detail["parameters"] == analysis.params_for(key).to_dict()
            shown = [
                {name: cp[name] for name in ANALYZE_FIELDS} for cp in detail["change_point_list"]
            ]
            assert shown == expected, metric


def test_without_declared_directions_the_verdicts_give_them(tmp_path: Path) -> None:
    from perfwatch.contract.codec import parse_record
    from perfwatch.dashboard.analysis import metric_direction_from_evidence

    regression_up = {"direction": "regression", "forward_change_percent": 5}
    assert metric_direction_from_evidence(regression_up) == "lower_is_better"
    assert (
        metric_direction_from_evidence({"direction": "regression", "forward_change_percent": -5})
        == "higher_is_better"
    )
    assert (
        metric_direction_from_evidence({"direction": "unknown", "forward_change_percent": 5})
        is None
    )
    # A store written without the metric-info handler (an older processor).
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handlers: list[RecordHandler] = [ChangePointHandler(Config())]
        for line in NIGHTLY.read_bytes().splitlines():
            handle(store, handlers, parse_record(line))
        key = SeriesKey.of("nightly", "p99_latency_ms", {"branch": "main"})
        summary = queries.series_summary(store, key, ChangePointAnalysis())
        assert (summary["unit"], summary["direction"], summary["status"]) == (
            None,
            "lower_is_better",
            "regression",
        )


def test_the_fixed_memory_regression_is_one_episode(nightly_store: StateStore) -> None:
    memory = SeriesKey.of("nightly", "peak_memory_mb", {"branch": "main"})
    summary = queries.series_summary(nightly_store, memory, ChangePointAnalysis())
    (episode,) = summary["episodes"]
    assert (episode["kind"], episode["index"], episode["fixed_index"]) == ("regression", 96, 102)
    assert summary["status"] == "fixed"  # the latest change alone said "improvement"
    assert summary["unit"] == "MiB"


def test_the_dashboard_names_the_runs_the_verdicts_and_the_webhook_name(
    nightly_store: StateStore,
) -> None:
    analysis = ChangePointAnalysis()
    memory = SeriesKey.of("nightly", "peak_memory_mb", {"branch": "main"})
    feed = queries.verdict_feed(nightly_store, series_key=memory)
    # The verdicts that told of the fix (newest first) and the webhook's message of the first.
    closing = [v["verdict"] for v in feed if v["verdict"].get("episode", {}).get("fix")]
    runs = {(v["episode"]["regression"]["run_id"], v["episode"]["fix"]["run_id"]) for v in closing}
    ((regression_run, fix_run),) = runs
    fixed = closing[-1]
    told = fixed["episode"]
    assert regression_run == "nightly-0097" and fix_run == "nightly-0103"
    message = summary_fields(fixed)["summary"]
    assert f"at run {regression_run}, fixed at run {fix_run})" in message
    detail = queries.series_detail(nightly_store, memory, analysis)
    assert detail is not None
    (episode,) = detail["episodes"]
    assert episode["text"].endswith(f"at run {regression_run}, fixed at run {fix_run}")
    assert (
        episode["text"].startswith("regression +")
        and episode["commit"] == (told["regression"]["commit"])
    )
    labels = [a["text"] for a in figures.series_figure(detail)["layout"]["annotations"]]
    assert [label.split(" at run ")[1] for label in labels] == [regression_run, fix_run]
    # An open regression: the change point the verdicts name is the episode's run.
    p99 = SeriesKey.of("nightly", "p99_latency_ms", {"branch": "main"})
    latest = [v["verdict"] for v in queries.verdict_feed(nightly_store, series_key=p99)]
    run_id = next(v["change_point"]["run_id"] for v in latest if "change_point" in v)
    summary = queries.series_summary(nightly_store, p99, analysis)
    assert summary["status_episode"]["text"].endswith(f"at run {run_id} (open)")


def test_api_series_detail_carries_analyze_numbers(nightly_store: StateStore) -> None:
    expected = analyze_json(NIGHTLY)["p99_latency_ms"]
    app = create_app(DashboardSettings(store_url=nightly_store.url))
    key = SeriesKey.of("nightly", "p99_latency_ms", {"branch": "main"}).canonical
    with TestClient(app) as http:
        body = http.get("/api/series/detail", params={"key": key, "x": "commit"}).json()
        bad_axis = http.get("/api/series/detail", params={"key": key, "x": "colour"})
    shown = [
        {name: cp[name] for name in ANALYZE_FIELDS} for cp in body["series"]["change_point_list"]
    ]
    assert shown == expected
    assert body["series"]["status"] == "regression"
    assert body["figure"]["layout"]["yaxis"]["title"]["text"] == "p99_latency_ms (ms)"
    assert bad_axis.status_code == 400 and "'x'" in bad_axis.text


def test_totals_never_add_different_units(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handlers = series_handlers()
        for i in range(4):
            for test, value, unit in (
                ("parse", 120.0, "ms"),
                ("render", 0.3, "s"),
                ("load", 80.0, "ms"),
            ):
                record = Record(
                    test=test,
                    run_id=f"{test}-{i}",
                    timestamp=T0 + timedelta(days=i),
                    metrics={"cpu_time": MetricValue(value + i, unit, "lower_is_better")},
                    commit=f"c{i:09d}",
                )
                handle(store, handlers, record)
        data = queries.resources_over_commits(store)
        assert {(t["commit"], t["unit"]): t["total"] for t in data["totals"]} == {
            **{(f"c{i:09d}", "ms"): 120.0 + 80.0 + 2 * i for i in range(4)},
            **{(f"c{i:09d}", "s"): 0.3 + i for i in range(4)},
        }
        assert "different units (ms, s)" in data["note"]
        charts = figures.resources_figures(data)
        assert [bar["meta"]["unit"] for bar in charts["total"]["data"]] == ["ms", "s"]
        assert (
            charts["total"]["layout"]["yaxis"]["title"]["text"]
            == "cpu_time (units differ: see legend)"
        )
        assert sorted(t["name"] for t in charts["time"]["data"]) == [
            "load (ms)",
            "parse (ms)",
            "render (s)",
        ]


def test_empty_views_say_so(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        data = queries.resources_over_commits(store)
        assert data["note"] == "No series yet: nothing to show."
        charts = figures.resources_figures(data)
        assert {name: chart["layout"]["meta"]["empty"] for name, chart in charts.items()} == {
            "time": "No time-like metric",
            "memory": "No memory-like metric",
            "total": "No time metric to total",
        }


def test_counter_run_picker_names_the_runs_own_date_and_commit(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handlers = series_handlers()
        for i in range(3):
            handle(store, handlers, nightly_record(i, 100.0, 512.0))
        checked = replace(
            counter_verdict(rng), series=SeriesRef("api.search", None, {"branch": "main"})
        )
        add_check_verdict(store, replace(checked, record_run_id="api.search#001"))
        (item,) = queries.counter_checks(store)
        assert item["run"]["time"] == "2024-03-02T02:00:00Z"
        assert item["run"]["commit"] == hashlib.sha1(b"commit-1").hexdigest()
        add_check_verdict(store, replace(checked, verdict_id="0" * 32, record_run_id="elsewhere"))
        assert queries.counter_checks(store)[0]["run"] is None
        # a run with counters only: its time and commit as the stream's verdict gives them
        block = checked.counter_check or {}
        target = {**block["target"], "time": "2024-03-09T02:00:00Z", "commit": "abc"}
        counters_only = replace(
            checked,
            verdict_id="1" * 32,
            record_run_id="api.search#counters",
            counter_check={**block, "target": target},
        )
        add_check_verdict(store, counters_only)
        run = queries.counter_checks(store)[0]["run"]
        assert (run["time"], run["commit"]) == ("2024-03-09T02:00:00Z", "abc")


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
    unknown_test = client.get("/api/inputs", params={"test": "nope"})
    assert unknown_test.status_code == 404 and "'nope'" in unknown_test.text
    assert client.get("/api/counters", params={"verdict": "0000"}).status_code == 404
    unknown_counter_test = client.get("/api/counters", params={"test": "nope"})
    assert unknown_counter_test.status_code == 404 and "'nope'" in unknown_counter_test.text


def test_a_store_that_does_not_answer_is_a_503_naming_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As /healthz says: not a 500 with a traceback in the log for every request."""
    store = client.app.state.dashboard.store  # type: ignore[attr-defined]

    def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("postgresql://db/perfwatch: the connection is closed")

    for method in ("series_keys", "verdicts"):
        monkeypatch.setattr(store, method, down)
    for path in ("/api/series", "/api/verdicts"):
        response = client.get(path)
        assert response.status_code == 503, path
        assert response.text == (
            "state store unavailable: postgresql://db/perfwatch: the connection is closed"
        )


def test_a_store_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The poll every 2 s logged a warning each time and nothing once the store was back."""
    calls = 0

    def poll_store() -> int:
        nonlocal calls
        calls += 1
        if 2 <= calls <= 5:
            raise StoreUnavailable("postgresql://db/perfwatch: the connection is closed")
        return 0

    state = SimpleNamespace(
        settings=SimpleNamespace(poll_interval_s=0.001), listener=None, poll_store=poll_store
    )

    async def poll_a_while() -> None:
        task = asyncio.create_task(_poll_forever(state))  # type: ignore[arg-type]
        while calls < 8:
            await asyncio.sleep(0.001)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    caplog.set_level(logging.INFO, logger="perfwatch")
    asyncio.run(poll_a_while())
    said = [
        (r.levelname, r.getMessage()) for r in caplog.records if "state store" in r.getMessage()
    ]
    assert said == [
        ("WARNING", "polling the state store failed"),
        ("INFO", "the state store answers again"),
    ]


def test_api_verdicts_kind_takes_a_family_as_watch_kind_does(client: TestClient) -> None:
    """`kind=counter_regression` found nothing and a mistyped kind answered an empty list,
    where `perfwatch watch --kind` takes the family and refuses the typo."""
    exact = client.get("/api/verdicts", params={"kind": "counter_regression.detected"}).json()
    family = client.get("/api/verdicts", params={"kind": "counter_regression"}).json()
    assert exact["verdicts"] and family == exact
    typo = client.get("/api/verdicts", params={"kind": "counter_checks"})
    assert typo.status_code == 400
    assert "query parameter 'kind': unknown kind 'counter_checks'" in typo.text


def test_api_counters_inputs_and_resources(client: TestClient) -> None:
    counters = client.get("/api/counters").json()
    assert counters["selected"]["kind"] == "counter_regression.detected"
    assert counters["header"] == queries.counter_header(counters["selected"])
    assert set(counters["figures"]) == {"errors", "means"}
    inputs = client.get("/api/inputs", params={"x": "size", "y": "statements"}).json()
    assert inputs["figure"]["layout"]["xaxis"]["title"]["text"] == "size"
    resources = client.get("/api/resources", params={"time_metric": "peak_memory_mb"}).json()
    assert resources["time_metric"] == "peak_memory_mb"
    assert len(resources["figures"]["time"]["data"]) == 2
    for parameter in ("time_metric", "memory_metric"):
        unknown = client.get("/api/resources", params={parameter: "nope"})
        assert unknown.status_code == 404
        assert f"{parameter}: no series has the metric 'nope'" in unknown.text


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
    handler = series_handlers()
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


def test_a_broker_lost_while_followed_is_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The listener says once that the topic is unavailable, and no more while the broker
    stays away. (The client's own lines are checked in a dashboard process of its own:
    the Pulsar client keeps the logger of a process's first client, here the fixture's.)"""
    topic = "persistent://public/default/dashboard-broker-lost"
    with open_broker(None, data_dir=tmp_path / "broker") as broker:
        listener = TopicListener(TopicSettings(broker.service_url, topic), lambda _: None)
        listener.start()
        assert listener.connected.wait(60), listener.last_error
    deadline = time.monotonic() + 60
    while listener.connected.is_set() and time.monotonic() < deadline:
        time.sleep(0.1)
    listener.stop()
    assert listener.last_error is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["verdicts topic unavailable; retrying (the store is still polled)"]


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


# --- run-or-skip: the sample's old and new times ------------------------------------------------

SAMPLE_TEST = "suite.sample"
ROUNDS, PASSES = 5, 3  # `perfwatch profile --old-dir`: alternating rounds, passes per round


def timed(profile: InputProfile, factor: float, rng: np.random.Generator) -> InputProfile:
    """The input profiled again, its time scaled by `factor`, every pass kept (right-skewed
    noise: a busy machine only ever slows a pass down)."""
    passes = profile.cpu_time_s * factor * (1 + rng.exponential(0.02, ROUNDS * PASSES))
    return replace(
        profile,
        cpu_time_s=float(passes.min()),
        wall_time_s=float(passes.min()) * 1.05,
        cpu_times_s=passes.tolist(),
        wall_times_s=(passes * 1.05).tolist(),
        timing_rounds=ROUNDS,
    )


def inputs_record(run_id: str, inputs: Inputs, day: int) -> Record:
    return Record(
        test=SAMPLE_TEST,
        run_id=run_id,
        timestamp=T0 + timedelta(days=day),
        metrics={},
        commit=f"c-{run_id}",
        inputs=inputs,
    )


def stream_through_handler(store: StateStore, record: Record) -> None:
    """One record through the processor's run-or-skip handler, as the processor commits it."""
    handler = InputsHandler(Config())
    with store.transaction() as tx:
        for verdict in handler.handle(record, tx, T0 + timedelta(days=400)):
            tx.add_verdict(verdict.verdict_id, verdict.kind, dumps(verdict), "test", record.test)


@pytest.fixture(scope="module")
def judged_sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A suite streamed as the baseline and an update sample whose large inputs got 30% slower
    (old code profiled beside it), and `perfwatch recommend --format json` on the same files."""
    rng = np.random.default_rng(11)
    suite = input_suite()
    clustering = InputClustering().fit(*input_table(suite))
    chosen = sample_inputs(clustering, per_cluster=3, seed=0)
    by_id = {p.input_id: p for p in suite}
    sample = [by_id[i] for members in chosen.values() for i in members]
    reference = [timed(p, 1.0, rng) for p in sample]
    update = [timed(p, 1.3 if p.input_id.startswith("large") else 1.0, rng) for p in sample]
    directory = tmp_path_factory.mktemp("sample")
    files = {}
    for name, kind, profiles in (
        ("baseline", "full_suite", suite),
        ("update", "update_sample", update),
        ("reference", "update_sample", reference),
    ):
        files[name] = directory / f"{name}.json"
        write_input_profile(files[name], InputProfileFile.create(kind=kind, profiles=profiles))
    result = CliRunner().invoke(
        main,
        ["recommend", "--baseline", str(files["baseline"]), "--update", str(files["update"]),
         "--reference", str(files["reference"]), "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with open_store(f"sqlite:///{directory / 'state.db'}") as store:
        stream_through_handler(store, inputs_record("full-1", Inputs("full_suite", suite), 1))
        sample_inputs_block = Inputs("update_sample", update, reference)
        stream_through_handler(store, inputs_record("update-1", sample_inputs_block, 2))
        app = create_app(DashboardSettings(store_url=store.url))
        with TestClient(app) as http:
            body = http.get("/api/inputs", params={"test": SAMPLE_TEST}).json()
        yield {"cli": orjson.loads(result.output)["recommendation"], "api": body, "store": store}


def traces(figure: dict, role: str) -> list[dict]:
    return [t for t in figure["data"] if t.get("meta", {}).get("role") == role]


def test_the_sample_view_shows_perfwatch_recommends_numbers(judged_sample: dict) -> None:
    cli, body = judged_sample["cli"], judged_sample["api"]
    assert body["selected"]["verdict"]["recommendation"]["summary"] == cli["summary"]
    assert cli["decision"] == "run" and all(d.startswith("large") for d in cli["drivers"])
    votes = {v["input_id"]: v for v in cli["votes"]}
    shift = body["sample_figures"]["shift"]
    plotted = {}
    for trace in traces(shift, "sampled"):
        for i, input_id in enumerate(trace["meta"]["inputs"]):
            plotted[input_id] = (trace["meta"]["label"], trace["x"][i], trace["y"][i],
                                 trace["meta"]["change"][i], trace["meta"]["change_low"][i],
                                 trace["meta"]["change_high"][i])  # fmt: skip
    assert plotted == {
        input_id: (
            vote["group"],
            vote["numbers"]["previous_time_s"],
            vote["numbers"]["time_s"],
            100 * vote["change"]["estimate"],
            100 * vote["change"]["low"],
            100 * vote["change"]["high"],
        )
        for input_id, vote in votes.items()
    }
    assert all(v["numbers"]["previous_source"] == "reference" for v in votes.values())
    baseline = {p.input_id: p.cpu_time_s for p in input_suite()}
    assert {row["input_id"]: row["baseline_s"] for row in body["shifts"]["inputs"]} == {
        input_id: baseline[input_id] for input_id in votes
    }
    (drivers,) = traces(shift, "drivers")
    assert drivers["meta"]["inputs"] == cli["drivers"]
    assert drivers["text"] == [votes[i]["label"] for i in cli["drivers"]]
    assert shift["layout"]["xaxis"]["type"] == shift["layout"]["yaxis"]["type"] == "log"
    assert shift["layout"]["xaxis"]["title"]["text"] == "old code: cpu_time_s, fastest pass (s)"
    assert shift["layout"]["yaxis"]["title"]["text"] == "new code: cpu_time_s, fastest pass (s)"

    forest = body["sample_figures"]["clusters"]
    shown = {
        t["meta"]["label"]: (t["x"][0], t["error_x"]["array"][0], t["error_x"]["arrayminus"][0])
        for t in traces(forest, "cluster_change")
    }
    expected = {}
    for c in cli["clusters"]:
        estimate, low, high = (100 * c["change"][k] for k in ("estimate", "low", "high"))
        expected[c["label"]] = (estimate, high - estimate, estimate - low)
    assert shown.keys() == expected.keys()
    for label, numbers in expected.items():
        assert shown[label] == pytest.approx(numbers, rel=1e-12)
    (ringed,) = traces(forest, "drivers")
    assert sorted(ringed["meta"]["inputs"]) == sorted(cli["drivers"])
    assert [c["decision"] for c in body["shifts"]["clusters"]] == [
        c["decision"] for c in cli["clusters"]
    ]


def test_the_sample_chart_draws_no_change_and_the_acceptable_band_by_hand() -> None:
    row = {"input_id": "a", "label": "C11", "cluster": 0, "decision": "run", "verdict": "slower",
           "driver": True, "old_s": 0.02, "new_s": 0.03, "old_source": "reference",
           "baseline_s": 0.019, "reason": "slower", "change": 0.5, "change_low": 0.4,
           "change_high": 0.6, "change_method": "paired_rounds", "change_passes": 5}  # fmt: skip
    shifts = {"rule": "paired", "time_attribute": "cpu_time_s", "acceptable_slowdown": 0.05,
              "confidence": 0.95, "inputs": [row], "unplotted": [], "reason": None,
              "drivers": ["a"],
              "clusters": [{"label": 0, "name": "cluster 0", "decision": "run",
                            "verdict": "slower", "judged": 1, "run_votes": 1, "inputs": ["a"],
                            "change": 0.5, "change_low": 0.4, "change_high": 0.6}]}  # fmt: skip
    shift = figures.shift_figure(shifts, {0: "#123456"})
    (band,) = traces(shift, "acceptable_band")
    (diagonal,) = traces(shift, "no_change")
    # the band spans the times shown with margin: 0.02 / 1.5 to 0.03 * 1.5
    assert band["x"] == pytest.approx([0.02 / 1.5, 0.045, 0.045, 0.02 / 1.5, 0.02 / 1.5])
    assert band["y"] == pytest.approx(
        [0.95 * 0.02 / 1.5, 0.95 * 0.045, 1.05 * 0.045, 1.05 * 0.02 / 1.5, 0.95 * 0.02 / 1.5]
    )
    assert diagonal["x"] == diagonal["y"]
    (sampled,) = traces(shift, "sampled")
    assert sampled["marker"]["color"] == "#123456"
    assert sampled["marker"]["symbol"] == ["triangle-up"]
    forest = figures.cluster_change_figure(shifts, {0: "#123456"})
    (pooled,) = traces(forest, "cluster_change")
    assert pooled["x"] == [50.0]
    assert pooled["error_x"]["array"] == pytest.approx([10.0])
    assert pooled["error_x"]["arrayminus"] == pytest.approx([10.0])
    lines = sorted(shape["x0"] for shape in forest["layout"]["shapes"])
    assert lines == pytest.approx([-5.0, 0.0, 2.5, 5.0])


def test_empty_sample_charts_say_why(judged_sample: dict, tmp_path: Path) -> None:
    colours: dict[int, str] = {}
    assert figures.shift_figure(None, colours)["layout"]["meta"]["empty"] == (
        "No run-or-skip recommendation to show"
    )
    store = judged_sample["store"]
    (item,) = queries.recommendations(store, SAMPLE_TEST)
    paper = replace(
        Verdict.from_json(item["verdict"]),
        verdict_id="1" * 32,
        recommendation=RunOrSkipRecommender(rule="paper")
        .recommend(
            InputClustering().fit(*input_table(input_suite())),
            input_suite(),
            [input_profile("large-2", 51_800, 0.9, 502)],
        )
        .to_dict(),
    )
    shifts = queries.sample_shifts(paper.recommendation or {}, {})
    assert [row["input_id"] for row in shifts["inputs"]] == ["large-2"]
    assert shifts["inputs"][0]["old_source"] == "baseline"  # no reference profiled beside it
    assert figures.shift_figure(shifts, colours)["data"]  # the paper's votes keep both times
    assert figures.cluster_change_figure(shifts, colours)["layout"]["meta"]["empty"] == (
        "The paper's rule computes no paired change: its votes compare times with thresholds"
    )
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as empty:
        sample = Inputs("update_sample", [input_profile("small-1", 1040, 0.0104, 11)])
        stream_through_handler(empty, inputs_record("update-1", sample, 1))
        view = queries.inputs_view(empty, test=SAMPLE_TEST)
        message = figures.shift_figure(view["shifts"], colours)["layout"]["meta"]["empty"]
    assert message.startswith(f"Nothing judged: no baseline for test {SAMPLE_TEST!r}")


def test_a_store_file_that_was_not_there_is_made_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from perfwatch.cli.dashboard import check_store

    url = f"sqlite:///{tmp_path}/typo/state.db"
    with caplog.at_level("WARNING", logger="perfwatch.dashboard"):
        check_store(url)
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"no state store was at {tmp_path}/typo/state.db:")
    caplog.clear()
    with caplog.at_level("WARNING", logger="perfwatch.dashboard"):
        check_store(url)  # there now: nothing to say
    assert caplog.records == []
