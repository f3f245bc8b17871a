"""The change-point lifecycle through the real processor (in-memory ports, SQLite store)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from click.testing import CliRunner

from _processor_support import processor_config, record_bytes
from perfwatch.adapters.alert_groups import AlertGroups
from perfwatch.adapters.verdict_feed import is_alert, summary_fields
from perfwatch.cli.main import main
from perfwatch.contract.models import ChangePointEvidence
from perfwatch.contract.validation import validate_verdict
from perfwatch.contract.verdicts import VerdictPolicy, incident_id
from perfwatch.processor.memory import MemoryRecordTopic, MemoryVerdictSink, drain
from perfwatch.state import open_store

TOPICS = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letter"}
RUNS = 120


def messages(series: dict[str, np.ndarray]) -> list[tuple[str, bytes]]:
    return [
        (test, record_bytes(test, run, {"latency_ms": float(values[run])}))
        for run in range(RUNS)
        for test, values in series.items()
    ]


def stream(folder: Path, records: Sequence[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """The verdicts a processor publishes for `records`, in order."""
    topic = MemoryRecordTopic(batch_size=10)
    for key, payload in records:
        topic.publish(payload, key=key)
    sink = MemoryVerdictSink()
    config = processor_config(f"sqlite:///{folder / 'state.db'}", TOPICS)
    with open_store(config.store.url) as store:
        assert not drain(config, store, topic, sink).messages
    return [orjson.loads(verdict.payload) for verdict in sink.verdicts]


def test_noise_raises_no_alert(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    series = {f"noise{i}": 100 * (1 + rng.normal(0, 0.01, RUNS)) for i in range(6)}
    series["heavy"] = 100 * (1 + 0.01 * rng.standard_t(3, RUNS))
    verdicts = stream(tmp_path, messages(series))
    assert [v for v in verdicts if is_alert(v)] == []


def test_a_step_is_confirmed_once_and_its_last_evidence_is_what_analyze_gives(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(5)
    level = np.where(np.arange(RUNS) < 60, 100.0, 106.0)
    series = {
        "step": level * (1 + rng.normal(0, 0.01, RUNS)),
        "fixed": np.where((np.arange(RUNS) >= 50) & (np.arange(RUNS) < 70), 110.0, 100.0)
        * (1 + rng.normal(0, 0.01, RUNS)),
    }
    records = messages(series)
    (tmp_path / "run").mkdir()
    verdicts = stream(tmp_path / "run", records)
    step = [v for v in verdicts if v["series"]["test"] == "step"]
    alerts = [v for v in step if is_alert(v)]
    # the step's alert is its commit's incident (this series alone)
    assert [(v["kind"], len(v["incident"]["members"])) for v in alerts] == [("incident.opened", 1)]
    (confirmed,) = [v for v in step if v["kind"] == "change_point.confirmed"]
    assert confirmed["finding"]["incident"] == alerts[0]["incident"]["id"]
    assert confirmed["change_point"]["index"] == 60
    assert int(confirmed["record_run_id"].rpartition("#")[2]) >= 60 + VerdictPolicy().confirm_runs
    assert confirmed["finding"]["id"] == step[0]["finding"]["id"]  # one finding throughout
    assert [v for v in step if "finding" in v][-1]["series_status"]["state"] == "regressed"

    # The regression fixed 20 runs later is one episode; the series is clear again.
    fixed = [v for v in verdicts if v["series"]["test"] == "fixed" and "finding" in v]
    fix_alerts = [
        v
        for v in fixed
        if v["finding"]["confirmed"] and v.get("episode", {}).get("state") == "fixed"
    ]
    assert fix_alerts, fixed
    episode = fix_alerts[-1]["episode"]
    assert (episode["regression"]["index"], episode["fix"]["index"]) == (50, 70)
    assert summary_fields(fix_alerts[-1])["label"] == "FIXED"
    assert fixed[-1]["series_status"] == {"state": "clear"}
    # ... and the fix's incident, what a webhook receives, says so
    fix_incidents = [
        member
        for v in verdicts
        if v["kind"].startswith("incident.")
        for member in v["incident"]["members"]
        if member["test"] == "fixed" and "fixes" in member
    ]
    assert fix_incidents and fix_incidents[-1]["fixes"]["index"] == 50

    # The last verdict of every finding still there is what analyze gives on the history.
    records_file = tmp_path / "records.jsonl"
    records_file.write_bytes(b"\n".join(payload for _, payload in records))
    result = CliRunner().invoke(main, ["analyze", str(records_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    offline = {
        (s["test"], cp["index"]): cp
        for s in orjson.loads(result.output)["series"]
        for cp in s["change_points"]
    }
    last: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        if "finding" in verdict:
            last[verdict["finding"]["id"]] = verdict
    standing = {
        (v["series"]["test"], v["change_point"]["index"]): v["change_point"]
        for v in last.values()
        if v["kind"] != "change_point.retracted"
    }
    assert standing.keys() == offline.keys()
    assert {test for test, _ in standing} == {"step", "fixed"}
    policy = VerdictPolicy()
    for place, published in standing.items():
        now = offline[place]
        ours = ChangePointEvidence.from_json(published)
        theirs = ChangePointEvidence.from_json({**published, **now, "time": published["time"]})
        assert policy.differences(ours, theirs) == (), place


def test_verdict_and_finding_ids_are_deterministic(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    series = {"step": np.where(np.arange(RUNS) < 40, 100.0, 95.0) * (1 + rng.normal(0, 0.01, RUNS))}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = stream(tmp_path / "a", messages(series))
    second = stream(tmp_path / "b", messages(series))
    assert len(first) >= 2
    assert [(v["verdict_id"], v.get("finding"), v.get("incident")) for v in first] == [
        (v["verdict_id"], v.get("finding"), v.get("incident")) for v in second
    ]
    assert {v["kind"] for v in first} >= {"change_point.confirmed", "incident.opened"}


def test_one_commit_that_moves_many_series_is_one_incident(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    shape = np.where(np.arange(RUNS) < 60, 100.0, 108.0)
    series = {f"service{i}": shape * (1 + rng.normal(0, 0.01, RUNS)) for i in range(5)}
    series["quiet"] = 100 * (1 + rng.normal(0, 0.01, RUNS))
    verdicts = stream(tmp_path, messages(series))
    assert all(validate_verdict(v) == [] for v in verdicts)
    incidents = [v for v in verdicts if v["kind"].startswith("incident.")]
    assert [v["kind"] for v in incidents] == ["incident.opened"] + ["incident.updated"] * 4
    commit = orjson.loads(record_bytes("service0", 60, {}))["commit"]
    assert {v["incident"]["id"] for v in incidents} == {incident_id(commit)}
    last = incidents[-1]["incident"]
    assert [(m["test"], m["direction"]) for m in last["members"]] == [
        (f"service{i}", "regression") for i in range(5)
    ]
    assert all(7 < m["forward_change_percent"] < 9 for m in last["members"])
    # The series' own confirmations name the incident and are not alerts themselves;
    # the incident alerts when it opens and whenever it has doubled: 1, 2, 4 series.
    confirmed = [v for v in verdicts if v["kind"] == "change_point.confirmed"]
    assert len(confirmed) == 5
    assert {v["finding"]["incident"] for v in confirmed} == {incident_id(commit)}
    assert not any(is_alert(v) for v in confirmed)
    alerts = [v for v in incidents if is_alert(v)]
    assert [len(v["incident"]["members"]) for v in alerts] == [1, 2, 4]
    assert summary_fields(alerts[-1])["summary"].startswith(
        f"INCIDENT (commits c00059..{commit}: 4 series (1 new): REGRESSION service0 latency_ms +"
    )
    # Grouped as `perfwatch forward` does by default, with the verdicts read within
    # the group wait: one message, with all five series as they stand.
    groups = AlertGroups[int]()
    held = [at for at, v in enumerate(verdicts) if groups.offer(v, at, now=0.0)]
    assert [verdicts[at] for at in held if verdicts[at] in incidents] == incidents
    assert all(
        verdicts[at] in incidents or verdicts[at]["finding"]["incident"] == incident_id(commit)
        for at in held
    )
    [group] = groups.due(30.0)
    assert group.held == held and group.message is not None
    members = group.message["incident"]["members"]
    assert [m["test"] for m in members] == [f"service{i}" for i in range(5)]
    assert summary_fields(group.message)["summary"].startswith(
        f"INCIDENT (commits c00059..{commit}: 5 series: REGRESSION service0 latency_ms +"
    )
