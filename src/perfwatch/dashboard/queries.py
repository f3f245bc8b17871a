"""Read-side queries behind the dashboard, built on the state store's public interface.

The processor writes; these functions only read, and return JSON-ready
dictionaries so the web layer has nothing left to compute. A series' change
points, episodes and status come from its stored history (`analysis`), not from
the numbers its verdicts carried when they were published.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from perfwatch.adapters.verdict_feed import (
    block,
    concerns_tests,
    counter_detail,
    kind_selected,
    listed,
    summary_fields,
)
from perfwatch.contract.models import InputProfile
from perfwatch.dashboard.analysis import ChangePointAnalysis, episodes, status_of
from perfwatch.detectors.inputs import ATTRIBUTES as INPUT_ATTRIBUTES
from perfwatch.detectors.inputs import InputClustering, input_table
from perfwatch.processor.handlers import baseline_key
from perfwatch.processor.metric_info import METRIC_INFO_NAMESPACE, stored_info
from perfwatch.processor.recommendations import INPUT_BASELINE_NAMESPACE
from perfwatch.state import OutboxEntry, Point, SeriesKey, StateStore

COUNTER_KINDS = (
    "counter_regression.detected",
    "counter_check.passed",
    "counter_check.insufficient_baseline",
)
RECOMMENDATION_KIND = "recommendation"
# Metric-name globs the per-test resource panels pick by default (first match wins).
TIME_METRIC_GLOBS = (
    "*cpu_time*",
    "*wall_time*",
    "*time*",
    "*duration*",
    "*latency*",
    "*_ms",
    "*_s",
)
MEMORY_METRIC_GLOBS = ("*peak_memory*", "*memory*", "*rss*", "*_bytes", "*_mb")


CHANGE_POINT_KINDS = ("change_point.detected", "change_point.updated", "change_point.retracted")


def parse_series_key(text: str) -> SeriesKey:
    """A series key from its canonical text (as it appears in URLs); ValueError if malformed."""
    try:
        key = SeriesKey.from_canonical(text)
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
        raise ValueError(
            f"series key {text!r}: expected the canonical form "
            '["test", "metric", {"attribute": "value"}]'
        ) from None
    if not isinstance(key.test, str) or not isinstance(key.metric, str):
        raise ValueError(f"series key {text!r}: test and metric must be strings")
    return key


def _point_dict(point: Point) -> dict[str, Any]:
    return {
        "run_id": point.run_id,
        "value": point.value,
        "commit": point.commit,
        "time": point.time,
        "timestamp": point.timestamp,
    }


def _evidence_blocks(store: StateStore, key: SeriesKey) -> list[dict[str, Any]]:
    """The change-point evidence of the series' verdicts, oldest first."""
    blocks = []
    for entry in store.verdicts(series_key=key):
        if entry.kind in CHANGE_POINT_KINDS:
            document = decode_document(entry)
            for name in ("change_point", "previous"):
                if isinstance(document.get(name), dict):
                    blocks.append(document[name])
    return blocks


def metric_info(store: StateStore, key: SeriesKey) -> dict[str, Any]:
    """The unit and direction the series' records declared last (None when not declared)."""
    stored = store.get_blob(METRIC_INFO_NAMESPACE, key.canonical)
    return stored_info(stored)


def _analysed(
    store: StateStore, key: SeriesKey, analysis: ChangePointAnalysis
) -> tuple[list[Point], list[dict[str, Any]], dict[str, Any]]:
    """The series' points, its change points computed from them and its metric's unit
    and direction."""
    points = store.series_points(key)
    info = metric_info(store, key)
    change_points = analysis.change_points(key, points, None)
    if change_points:  # the direction only matters when there is a change to label
        evidence = [] if info["direction"] else _evidence_blocks(store, key)
        info["direction"] = analysis.direction_for(key.metric, info["direction"], evidence)
        change_points = analysis.change_points(key, points, info["direction"])
    return points, change_points, info


def _summary(
    key: SeriesKey,
    points: Sequence[Point],
    change_points: Sequence[Mapping[str, Any]],
    info: Mapping[str, Any],
    fix_share: float,
) -> dict[str, Any]:
    series_episodes = episodes(change_points, fix_share)
    status, episode = status_of(series_episodes)
    latest = points[-1] if points else None
    return {
        "key": key.canonical,
        "test": key.test,
        "metric": key.metric,
        "attributes": dict(key.attributes),
        "unit": info["unit"],
        "direction": info["direction"],
        "runs": len(points),
        "latest": None if latest is None else _point_dict(latest),
        "status": status,
        "status_episode": episode,
        "episodes": series_episodes,
        "change_points": len(change_points),
    }


def series_summary(
    store: StateStore, key: SeriesKey, analysis: ChangePointAnalysis
) -> dict[str, Any]:
    """One row of the overview: identity, size, latest run, status and its episode."""
    return _summary(key, *_analysed(store, key, analysis), analysis.config.verdicts.fix_share)


def list_series(store: StateStore, analysis: ChangePointAnalysis) -> list[dict[str, Any]]:
    """Every series with its status, in key order."""
    return [series_summary(store, key, analysis) for key in store.series_keys()]


def decode_document(entry: OutboxEntry) -> dict[str, Any]:
    document = orjson.loads(entry.document)
    return document if isinstance(document, dict) else {}


def feed_item(entry: OutboxEntry) -> dict[str, Any]:
    """A verdict as the feed shows it: the stored document and its one-line facts."""
    document = decode_document(entry)
    return {
        "seq": entry.seq,
        "verdict_id": entry.verdict_id,
        "kind": entry.kind,
        "series_key": entry.series_key or None,
        "published": entry.published_at is not None,
        "facts": summary_fields(document),
        "verdict": document,
    }


def document_item(document: Mapping[str, Any]) -> dict[str, Any]:
    """A feed item for a verdict known only as a document (e.g. read from the topic)."""
    series = document.get("series")
    series_key = None
    if isinstance(series, Mapping) and isinstance(series.get("metric"), str):
        attributes = series.get("attributes")
        key = SeriesKey.of(
            str(series.get("test")),
            series["metric"],
            attributes if isinstance(attributes, Mapping) else {},
        )
        series_key = key.canonical
    return {
        "seq": None,
        "verdict_id": str(document.get("verdict_id", "")),
        "kind": str(document.get("kind", "")),
        "series_key": series_key,
        "published": True,
        "facts": summary_fields(document),
        "verdict": dict(document),
    }


def verdict_feed(
    store: StateStore,
    *,
    limit: int = 100,
    before_seq: int | None = None,
    series_key: SeriesKey | None = None,
    kinds: Sequence[str] = (),
    test_glob: str | None = None,
) -> list[dict[str, Any]]:
    """Verdicts newest first; page with `before_seq` (the smallest seq already shown)."""
    items: list[dict[str, Any]] = []
    for entry in reversed(list(store.verdicts(series_key=series_key))):
        if before_seq is not None and entry.seq >= before_seq:
            continue
        if not kind_selected(entry.kind, kinds):
            continue
        item = feed_item(entry)
        if test_glob and not concerns_tests(item["verdict"], [test_glob]):
            continue
        items.append(item)
        if len(items) >= limit:
            break
    return items


def latest_seq(store: StateStore) -> int:
    """The highest verdict sequence number so far (0 for an empty store)."""
    seqs = [entry.seq for entry in store.verdicts()]
    return max(seqs, default=0)


def verdicts_after(store: StateStore, seq: int) -> list[OutboxEntry]:
    """Verdicts committed after `seq`, oldest first."""
    return [entry for entry in store.verdicts() if entry.seq > seq]


def segments(
    points: Sequence[Point], change_points: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The runs between change points with their mean and stddev: the change points' own
    numbers (the detector's segment statistics), or the whole series' without one.

    `start` and `stop` are positions (`stop` exclusive); `first_run_id` and `last_run_id`
    name the segment's first and last run for people."""
    if change_points:
        bounds = [0, *(int(cp["index"]) for cp in change_points), len(points)]
        stats = [(cp["mean_before"], cp["stddev_before"]) for cp in change_points]
        stats.append((change_points[-1]["mean_after"], change_points[-1]["stddev_after"]))
    else:
        values = np.array([point.value for point in points], dtype=np.float64)
        bounds = [0, len(points)]
        stats = [(float(values.mean()), float(values.std()))]
    return [
        {
            "start": start,
            "stop": stop,
            "mean": mean,
            "stddev": stddev,
            "first_run_id": points[start].run_id,
            "last_run_id": points[stop - 1].run_id,
        }
        for (start, stop), (mean, stddev) in zip(itertools.pairwise(bounds), stats, strict=True)
    ]


def series_detail(
    store: StateStore, key: SeriesKey, analysis: ChangePointAnalysis
) -> dict[str, Any] | None:
    """Points, change points, segments, episodes and verdict history of one series."""
    points, change_points, info = _analysed(store, key, analysis)
    if not points:
        return None
    params = analysis.params_for(key)
    return {
        **_summary(key, points, change_points, info, analysis.config.verdicts.fix_share),
        "points": [_point_dict(point) for point in points],
        "change_point_list": change_points,
        "segments": segments(points, change_points),
        "parameters": params.to_dict(),
        "verdicts": verdict_feed(store, series_key=key, limit=10_000),
    }


def pick_metric(metrics: Iterable[str], globs: Sequence[str]) -> str | None:
    """The first metric (sorted) matching the earliest glob of `globs`."""
    names = sorted(set(metrics))
    for glob in globs:
        for name in names:
            if fnmatch.fnmatchcase(name.lower(), glob):
                return name
    return None


def resources_over_commits(
    store: StateStore, time_metric: str | None = None, memory_metric: str | None = None
) -> dict[str, Any]:
    """Per-test execution time and memory over commits (the dashboard's Time & memory view).

    Without explicit metrics, the first time-like and memory-like metric names
    are used. Each test contributes one line per metric: its runs in time order,
    labelled by commit, with the unit its records declare. `totals` sums the
    time metric over tests per commit and unit: values in different units are
    never added together. LookupError for a named metric no series has.
    """
    keys = store.series_keys()
    metrics = sorted({key.metric for key in keys})
    for parameter, named in (("time_metric", time_metric), ("memory_metric", memory_metric)):
        if named is not None and named not in metrics:
            raise LookupError(f"{parameter}: no series has the metric {named!r}")
    time_metric = time_metric or pick_metric(metrics, TIME_METRIC_GLOBS)
    memory_metric = memory_metric or pick_metric(
        [m for m in metrics if m != time_metric], MEMORY_METRIC_GLOBS
    )
    lines: dict[str, list[dict[str, Any]]] = {"time": [], "memory": []}
    for role, metric in (("time", time_metric), ("memory", memory_metric)):
        if metric is None:
            continue
        for key in keys:
            if key.metric != metric:
                continue
            points = store.series_points(key)
            lines[role].append(
                {
                    "key": key.canonical,
                    "test": key.test,
                    "attributes": dict(key.attributes),
                    "unit": metric_info(store, key)["unit"],
                    "points": [_point_dict(point) for point in points],
                }
            )
    return {
        "metrics": metrics,
        "time_metric": time_metric,
        "memory_metric": memory_metric,
        "time": lines["time"],
        "memory": lines["memory"],
        "totals": _totals_by_commit(lines["time"]),
        "note": _resources_note(metrics, time_metric, memory_metric, lines["time"]),
    }


def _resources_note(
    metrics: Sequence[str],
    time_metric: str | None,
    memory_metric: str | None,
    time_lines: Sequence[Mapping[str, Any]],
) -> str:
    """What the view cannot show, said in words."""
    if not metrics:
        return "No series yet: nothing to show."
    notes = []
    if time_metric is None:
        notes.append("No time-like metric name (choose one above).")
    if memory_metric is None:
        notes.append("No memory-like metric name (choose one above).")
    units = sorted({str(line["unit"]) for line in time_lines})
    if len(units) > 1:
        notes.append(
            f"Tests report {time_metric} in different units ({', '.join(units)}): "
            "the suite total is shown per unit."
        )
    return " ".join(notes)


def _totals_by_commit(lines: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per unit, the sum of each commit's values over tests, commits ordered by their
    earliest run; `tests` names the tests summed."""
    totals: dict[tuple[str | None, str], dict[str, Any]] = {}
    for line in lines:
        for point in line["points"]:
            commit = point["commit"] or point["run_id"]
            entry = totals.setdefault(
                (line["unit"], commit),
                {"commit": commit, "unit": line["unit"], "total": 0.0, "tests": [],
                 "timestamp": point["timestamp"]},
            )  # fmt: skip
            entry["total"] += point["value"]
            entry["tests"].append(line["test"])
            entry["timestamp"] = min(entry["timestamp"], point["timestamp"])
    return sorted(totals.values(), key=lambda entry: entry["timestamp"])


def run_points(store: StateStore, test: str, attributes: Mapping[str, str]) -> dict[str, Point]:
    """A test's runs by run id, as its series stored them (a run with no metric is absent)."""
    wanted = tuple(sorted(attributes.items()))
    runs: dict[str, Point] = {}
    for key in store.series_keys():
        if key.test == test and key.attributes == wanted:
            for point in store.series_points(key):
                runs.setdefault(point.run_id, point)
    return runs


def counter_checks(store: StateStore, test: str | None = None) -> list[dict[str, Any]]:
    """Counter-check verdicts (regressions and passes), newest first, optionally of one test;
    each with `run`, the checked run's own time and commit: from its metrics' points, else
    as the verdict's `counter_check.target` gives them (None when neither has them)."""
    items = []
    known: dict[str, dict[str, Point]] = {}
    for entry in reversed(list(store.verdicts())):
        if entry.kind not in COUNTER_KINDS:
            continue
        item = feed_item(entry)
        if test is None or item["facts"]["test"] == test:
            series = item["verdict"].get("series") or {}
            attributes = series.get("attributes") or {}
            test_key = SeriesKey.of(item["facts"]["test"], "", attributes).canonical
            if test_key not in known:
                known[test_key] = run_points(store, item["facts"]["test"], attributes)
            run_id = item["verdict"].get("record_run_id", "")
            point = known[test_key].get(run_id)
            item["run"] = (
                _checked_run(item["verdict"], run_id) if point is None else _point_dict(point)
            )
            items.append(item)
    return items


def _checked_run(verdict: Mapping[str, Any], run_id: str) -> dict[str, Any] | None:
    """The checked run's time and commit as the counter verdict carries them."""
    target = block(block(verdict, "counter_check"), "target")
    if not isinstance(target.get("time"), str):
        return None
    return {"run_id": run_id, "time": target["time"], "commit": target.get("commit")}


def counter_header(item: Mapping[str, Any]) -> str:
    """The counter view's line about one counter-check verdict (a `counter_checks` item):
    its outcome as the verdict's line gives it, then the rule it was judged by, with the
    false-alarm rate a p-value is compared with, or the threshold."""
    facts = item["facts"]
    check = block(item["verdict"], "counter_check")
    line = f"{facts['label']}: {facts['test']}, run {facts['run_id']} — {counter_detail(check)}"
    runs = block(check, "baseline").get("runs")
    if check.get("status", check.get("verdict")) == "insufficient_baseline":
        return f"{line}; the chart and table show the models' errors only"
    alpha, threshold = check.get("alpha"), check.get("threshold")
    if check.get("decision") == "pvalue" and isinstance(alpha, int | float):
        tests = sum(c.get("tests", 0) for c in listed(check, "clusters") if isinstance(c, Mapping))
        return (
            f"{line}; p corrected for the {tests} models judged, flagged below the "
            f"false-alarm rate {100 * alpha:g}%, from {runs} baseline runs each left out in turn"
        )
    if isinstance(threshold, int | float):
        source = check.get("threshold_source", "fixed")
        return f"{line}; a {source} threshold on each model's error beyond its usual error"
    return line


def recommendations(store: StateStore, test: str | None = None) -> list[dict[str, Any]]:
    """Run-or-skip verdicts, newest first, optionally of one test."""
    items = []
    for entry in reversed(list(store.verdicts(kind=RECOMMENDATION_KIND))):
        item = feed_item(entry)
        if test is None or item["facts"]["test"] == test:
            items.append(item)
    return items


def baseline_inputs(
    store: StateStore, test: str, attributes: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[int]]:
    """A test's baseline input profiles and their cluster labels (empty when none is stored).

    The baseline belongs to the test and its identifying attributes (those of
    its recommendation verdicts' series). The blob is
    `{"profiles": [...], "labels": {input_id: label}, "method": ...}`; without
    labels the inputs are clustered here with the stored method (default
    DBSCAN), which is deterministic.
    """
    blob = store.get_blob(INPUT_BASELINE_NAMESPACE, baseline_key(test, attributes or {}))
    if blob is None:
        return [], []
    document = orjson.loads(blob)
    profiles = [InputProfile(**profile) for profile in document.get("profiles", [])]
    if not profiles:
        return [], []
    labels = document.get("labels")
    if not isinstance(labels, dict):
        clustering = InputClustering(document.get("method", "dbscan")).fit(*input_table(profiles))
        labels = clustering.labels_
    rows = [{name: getattr(p, name) for name in ("input_id", *INPUT_ATTRIBUTES)} for p in profiles]
    return rows, [int(labels.get(p.input_id, -1)) for p in profiles]


def _vote_rows(recommendation: Mapping[str, Any]) -> list[dict[str, Any]]:
    votes = recommendation.get("votes")
    return [v for v in votes if isinstance(v, dict)] if isinstance(votes, list) else []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _change_fields(change: Any) -> dict[str, Any]:
    """A paired change block's numbers (all None when absent, as under the paper's rule)."""
    change = change if isinstance(change, Mapping) else {}
    return {
        "change": _number(change.get("estimate")),
        "change_low": _number(change.get("low")),
        "change_high": _number(change.get("high")),
        "change_method": change.get("method"),
        "change_passes": change.get("passes"),
    }


def sample_shifts(
    recommendation: Mapping[str, Any], baseline_times: Mapping[str, float]
) -> dict[str, Any]:
    """Each sampled input's old and new time and paired change, and each cluster's change,
    as the recommendation verdict stored them (`perfwatch recommend --format json`).

    `old_s` is the old code's time the input was judged against (`previous_time_s`:
    the reference profiled beside the update, else the baseline), `new_s` the
    update's (`time_s`), both the fastest pass of the recommendation's time
    attribute; `baseline_s` is the input's time in the stored baseline. Inputs
    without both times are listed in `unplotted` with the reason.
    """
    parameters = recommendation.get("parameters") or {}
    drivers = [d for d in recommendation.get("drivers") or [] if isinstance(d, str)]
    inputs: list[dict[str, Any]] = []
    unplotted: list[dict[str, str]] = []
    for vote in _vote_rows(recommendation):
        numbers = vote.get("numbers") or {}
        old, new = _number(numbers.get("previous_time_s")), _number(numbers.get("time_s"))
        if old is None or new is None or old <= 0 or new <= 0:
            unplotted.append({"input_id": str(vote.get("input_id")), "why": vote.get("reason", "")})
            continue
        inputs.append(
            {
                "input_id": vote.get("input_id"),
                "label": vote.get("label"),
                "cluster": vote.get("group"),
                "decision": vote.get("decision"),
                "verdict": vote.get("verdict"),
                "driver": vote.get("input_id") in drivers,
                "old_s": old,
                "new_s": new,
                "old_source": numbers.get("previous_source"),
                "baseline_s": baseline_times.get(str(vote.get("input_id"))),
                "reason": vote.get("reason", ""),
                **_change_fields(vote.get("change")),
            }
        )
    clusters = [
        {
            "label": c.get("label"),
            "name": c.get("name"),
            "decision": c.get("decision"),
            "verdict": c.get("verdict"),
            "judged": c.get("judged"),
            "run_votes": c.get("run_votes"),
            "inputs": c.get("inputs") or [],
            **_change_fields(c.get("change")),
        }
        for c in recommendation.get("clusters") or []
        if isinstance(c, Mapping)
    ]
    return {
        "rule": recommendation.get("rule") or parameters.get("rule"),
        "time_attribute": parameters.get("time_attribute", "cpu_time_s"),
        "acceptable_slowdown": _number(parameters.get("acceptable_slowdown")),
        "confidence": _number(parameters.get("confidence")),
        "summary": recommendation.get("summary"),
        "reason": recommendation.get("reason"),
        "drivers": drivers,
        "inputs": inputs,
        "clusters": clusters,
        "unplotted": unplotted,
    }


def inputs_view(
    store: StateStore,
    *,
    test: str | None = None,
    verdict_id: str | None = None,
    x_attribute: str | None = None,
    y_attribute: str | None = None,
) -> dict[str, Any]:
    """The run-or-skip inspection: baseline inputs by cluster, one update's votes.

    LookupError when the test has no recommendation or the verdict id is unknown,
    ValueError for an unknown attribute.
    """
    for name in (x_attribute, y_attribute):
        if name is not None and name not in INPUT_ATTRIBUTES:
            known = ", ".join(INPUT_ATTRIBUTES)
            raise ValueError(f"unknown attribute {name!r}; use one of {known}")
    every = recommendations(store)
    tests = sorted({item["facts"]["test"] for item in every})
    if test is not None and test not in tests:
        known = ", ".join(repr(name) for name in tests) or "none yet"
        raise LookupError(f"no run-or-skip verdict for test {test!r} (tests with one: {known})")
    if test is None and tests:
        test = every[0]["facts"]["test"]
    candidates = [item for item in every if item["facts"]["test"] == test]
    selected = None
    if verdict_id is not None:
        selected = next((item for item in candidates if item["verdict_id"] == verdict_id), None)
        if selected is None:
            raise LookupError(f"no run-or-skip verdict {verdict_id!r} for test {test!r}")
    elif candidates:
        selected = candidates[0]
    x_attribute = x_attribute or "statements"
    y_attribute = y_attribute or "cpu_time_s"
    view: dict[str, Any] = {
        "tests": tests,
        "test": test,
        "attributes": list(INPUT_ATTRIBUTES),
        "x": x_attribute,
        "y": y_attribute,
        "recommendations": [
            {k: item[k] for k in ("seq", "verdict_id", "kind", "facts")} for item in candidates
        ],
        "selected": selected,
        "votes": [],
        "profiles": [],
        "labels": [],
        "clusters": [],
        "shifts": None,
    }
    if selected is None or test is None:
        return view
    recommendation = selected["verdict"].get("recommendation") or {}
    series = selected["verdict"].get("series") or {}
    profiles, labels = baseline_inputs(store, test, series.get("attributes"))
    view["votes"] = _vote_rows(recommendation)
    view["profiles"] = profiles
    view["labels"] = labels
    members: dict[int, list[str]] = {}
    for profile, label in zip(profiles, labels, strict=True):
        members.setdefault(label, []).append(profile["input_id"])
    view["clusters"] = [
        {"label": label, "members": sorted(ids)} for label, ids in sorted(members.items())
    ]
    time_attribute = (recommendation.get("parameters") or {}).get("time_attribute", "cpu_time_s")
    view["shifts"] = sample_shifts(
        recommendation,
        {p["input_id"]: p[time_attribute] for p in profiles if time_attribute in p},
    )
    return view
