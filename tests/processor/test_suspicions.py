"""Early warnings on the stream: suspected at once, then settled by a detection or
withdrawn (real processor over in-memory ports, SQLite store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from _processor_support import processor_config, record_bytes
from perfwatch.adapters.verdict_feed import is_alert, summary_fields
from perfwatch.contract.validation import validate_verdict
from perfwatch.processor.memory import MemoryRecordTopic, MemoryVerdictSink, drain
from perfwatch.state import open_store

TOPICS = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letter"}


def stream(folder: Path, values: np.ndarray, **verdicts: Any) -> list[dict[str, Any]]:
    """The verdicts a processor publishes for one series of `values`, in order."""
    topic = MemoryRecordTopic(batch_size=10)
    for run, value in enumerate(values):
        topic.publish(record_bytes("svc", run, {"latency_ms": float(value)}), key="svc")
    sink = MemoryVerdictSink()
    config = processor_config(f"sqlite:///{folder / 'state.db'}", TOPICS)
    if verdicts:
        config = config.model_copy(update={"verdicts": config.verdicts.model_copy(update=verdicts)})
    with open_store(config.store.url) as store:
        assert not drain(config, store, topic, sink).messages
    return [orjson.loads(verdict.payload) for verdict in sink.verdicts]


def run_of(verdict: dict[str, Any]) -> int:
    return int(verdict["record_run_id"].rpartition("#")[2])


def noise(seed: int, runs: int) -> np.ndarray:
    return 100.0 * (1 + np.random.default_rng(seed).normal(0, 0.01, runs))


def test_a_5_sigma_step_is_suspected_on_its_first_run_then_detected_naming_it(
    tmp_path: Path,
) -> None:
    # sigma 1; a 5-sigma step is beyond the one-run limit on its first run for most
    # noise draws (116 of 200 seeds), on its second for the rest; this is one of the former
    values = noise(25, 100) + np.where(np.arange(100) < 60, 0.0, 5.0)
    verdicts = stream(tmp_path, values)
    assert all(validate_verdict(v) == [] for v in verdicts)
    suspected = [v for v in verdicts if v["kind"] == "change_point.suspected"]
    assert [(run_of(v), v["suspicion"]["index"]) for v in suspected] == [(60, 60)]
    block = suspected[0]["suspicion"]
    assert (block["rule"], block["change"], block["direction"]) == ("single", "up", "regression")
    assert block["z"][0] > block["single_limit"] and block["p"] < 1e-3
    # judged against the runs before the one preceding it (the two-run rule watches that)
    assert block["segment"]["start"] == 0 and block["segment"]["runs"] == 59
    assert abs(block["segment"]["center"] - 100.0) < 1.0
    assert not any(v["kind"] == "change_point.withdrawn" for v in verdicts)
    (detected,) = [v for v in verdicts if v["kind"] == "change_point.detected"]
    assert detected["change_point"]["index"] == 60 and run_of(detected) > 60
    assert detected["suspicion"]["id"] == block["id"]
    assert detected["suspicion"]["state"] == "settled"
    assert verdicts.index(suspected[0]) < verdicts.index(detected)
    assert not is_alert(suspected[0])
    shown = summary_fields(suspected[0])  # what `watch` prints
    assert shown["label"] == "SUSPECTED" and shown["direction"] == "regression"
    assert shown["change"].startswith("+")


def test_a_single_outlier_is_suspected_then_withdrawn_and_never_detected(
    tmp_path: Path,
) -> None:
    values = noise(22, 100)
    values[70] += 6.0  # 6 sigma: E-Divisive places no change point here
    verdicts = stream(tmp_path, values)
    assert all(validate_verdict(v) == [] for v in verdicts)
    assert [(v["kind"], run_of(v)) for v in verdicts] == [
        ("change_point.suspected", 70),
        ("change_point.withdrawn", 71),
    ]
    suspected, withdrawn = verdicts
    assert withdrawn["suspicion"]["id"] == suspected["suspicion"]["id"]
    assert withdrawn["suspicion"]["withdrawn_run_id"] == withdrawn["record_run_id"]
    assert abs(withdrawn["suspicion"]["withdrawn_z"]) < suspected["suspicion"]["pair_limit"]
    assert not any(is_alert(v) for v in verdicts)


def test_switched_off_there_are_no_suspicions(tmp_path: Path) -> None:
    values = noise(22, 100)
    values[70] += 6.0  # 6 sigma: E-Divisive places no change point here
    assert stream(tmp_path, values, early_warning=False) == []


def test_pure_noise_gives_few_suspicions_and_no_alert(tmp_path: Path) -> None:
    runs = 1000
    verdicts = stream(tmp_path, noise(23, runs))
    suspected = [v for v in verdicts if v["kind"] == "change_point.suspected"]
    # 0.001 per run with Gaussian noise: about 1 expected in 1 000 runs
    assert len(suspected) <= 4, [run_of(v) for v in suspected]
    assert not any(is_alert(v) for v in verdicts)


def test_suspicion_verdict_ids_are_deterministic(tmp_path: Path) -> None:
    values = noise(24, 100) + np.where(np.arange(100) < 50, 0.0, 6.0)
    values[30] += 8.0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = stream(tmp_path / "a", values)
    second = stream(tmp_path / "b", values)
    assert {"change_point.suspected", "change_point.withdrawn"} <= {v["kind"] for v in first}
    assert [(v["verdict_id"], v.get("suspicion")) for v in first] == [
        (v["verdict_id"], v.get("suspicion")) for v in second
    ]
