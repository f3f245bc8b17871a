"""Reading counter samples: plain CSV, perfmon CSV (typeperf/relog), perfwatch JSON."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from perfwatch.readers.counter_csv import read_counter_csv, read_counter_runs
from perfwatch.readers.errors import SourceError
from perfwatch.readers.perfmon_csv import read_perfmon_csv

PERFMON = (
    '"(PDH-CSV 4.0) (GMT Standard Time)(0)","\\\\WEB01\\Process(java)\\% Processor Time",'
    '"\\\\WEB01\\Memory\\Pages/sec"\r\n'
    '"04/12/2024 10:00:00.000","12.5"," "\r\n'
    '"04/12/2024 10:00:05.000","13.25","4"\r\n'
    '"04/12/2024 10:00:10.000","","0"\r\n'
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "run.csv", "time,cpu,mem\n0,1.5,100\n5,,101\n10,NaN,102\n\n")
    samples = read_counter_csv(path)
    assert samples.names == ["cpu", "mem"]
    assert samples.values.shape == (3, 2)
    assert samples.values[0].tolist() == [1.5, 100.0]
    assert math.isnan(samples.values[1, 0]) and math.isnan(samples.values[2, 0])
    named = write(tmp_path, "named.csv", "cpu,when,mem\n1,0,2\n")
    assert read_counter_csv(named, time_column="when").names == ["cpu", "mem"]


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("time,cpu\n0,1\n5,abc\n", ":3:2:", "not a number: 'abc' (counter 'cpu')"),
        ("time,cpu,mem\n0,1\n", ":2:", "2 cells, but the header has 3"),
        ("time,cpu,cpu\n0,1,2\n", ":1:3:", "appears twice"),
        ("time,cpu\n", ":2:", "no samples"),
        ("time\n0\n", ":1:", "no counter column"),
        ("time,cpu\n0,inf\n", ":2:2:", "infinite"),
        ("", ":1:", "empty file"),
    ],
)
def test_plain_csv_errors_name_the_place(
    tmp_path: Path, text: str, location: str, message: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SourceError) as caught:
        read_counter_csv(path)
    assert f"{path}{location}" in str(caught.value)
    assert message in str(caught.value)


def test_perfmon_csv_drops_the_common_host_and_reads_blank_cells_as_missing(
    tmp_path: Path,
) -> None:
    samples = read_perfmon_csv(write(tmp_path, "perfmon.csv", PERFMON))
    assert samples.names == ["\\Process(java)\\% Processor Time", "\\Memory\\Pages/sec"]
    assert samples.values[1].tolist() == [13.25, 4.0]
    assert math.isnan(samples.values[0, 1]) and math.isnan(samples.values[2, 0])


def test_perfmon_csv_keeps_hosts_when_they_differ(tmp_path: Path) -> None:
    text = PERFMON.replace("\\\\WEB01\\Memory", "\\\\DB01\\Memory")
    samples = read_perfmon_csv(write(tmp_path, "two-hosts.csv", text))
    assert samples.names[1] == "\\\\DB01\\Memory\\Pages/sec"


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ('"Time","\\\\H\\A\\b"\n"t","1"\n', ":1:1:", "not a perfmon CSV"),
        ('"(PDH-CSV 4.0)","cpu"\n"t","1"\n', ":1:2:", "not a counter path"),
        ('"(PDH-CSV 4.0)","\\\\H\\A\\b"\n"t","1","2"\n', ":2:", "3 cells"),
        ('"(PDH-CSV 4.0)","\\\\H\\A\\b"\n"t","1,5"\n', ":2:2:", "not a number"),
    ],
)
def test_perfmon_errors_name_the_place(
    tmp_path: Path, text: str, location: str, message: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SourceError) as caught:
        read_perfmon_csv(path)
    assert f"{path}{location}" in str(caught.value)
    assert message in str(caught.value)


def record(run_id: str, counters: dict | None) -> dict:
    doc = {
        "schema": "perfwatch.record/v1",
        "test": "checkout",
        "run_id": run_id,
        "timestamp": "2024-04-12T10:00:00Z",
        "metrics": {"latency_ms": 12.0},
    }
    if counters is not None:
        doc["counters"] = counters
    return doc


def test_read_counter_runs_detects_the_format(tmp_path: Path) -> None:
    assert read_counter_runs(write(tmp_path, "p.csv", PERFMON))[0].names[1] == "\\Memory\\Pages/sec"
    assert read_counter_runs(write(tmp_path, "plain.csv", "t,a\n0,1\n"))[0].names == ["a"]
    counters = {"names": ["a", "b"], "values": [[1, None], [2, 3]]}
    path = tmp_path / "runs.json"
    path.write_bytes(orjson.dumps([record("r1", counters), record("r2", counters)]))
    runs = read_counter_runs(path)
    assert len(runs) == 2 and runs[1].names == ["a", "b"]
    assert math.isnan(runs[0].values[0, 1])
    lines = tmp_path / "runs.jsonl"
    lines.write_bytes(orjson.dumps(record("r3", counters)) + b"\n")
    assert len(read_counter_runs(lines)) == 1


def test_read_counter_runs_errors(tmp_path: Path) -> None:
    path = tmp_path / "no-counters.json"
    path.write_bytes(orjson.dumps([record("r1", None)]))
    with pytest.raises(SourceError, match="record 'r1' has no counters"):
        read_counter_runs(path)
    with pytest.raises(SourceError, match="relog"):
        read_counter_runs(tmp_path / "log.blg")
    with pytest.raises(SourceError, match="no such file"):
        read_counter_runs(tmp_path / "missing.csv")
