"""Runs without a value for a metric: the same policy for CSV, records and the stream, and
Apache Otava's policy in compat mode.

By default a run without a value is left out of that metric's series (CSV, record files,
and the stream, which never receives the value). `--compat otava` keeps the run, as Otava
does: its analysis fills the missing value in from the run before (leading gaps from the
first value) and counts the run in the indices.
"""

from __future__ import annotations

import math
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from _processor_support import processor_config, stored_beliefs
from otava_reference import OtavaReference
from perfwatch.cli.main import main
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.processor.loop import Processor
from perfwatch.processor.memory import MemoryDeadLetterSink, MemoryRecordTopic, MemoryVerdictSink
from perfwatch.readers.detect import read_input_file
from perfwatch.readers.jsonl import read_records, records_to_series
from perfwatch.readers.otava_csv import read_otava_csv
from perfwatch.state import open_store

T0 = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
Table = dict[str, list[float]]  # metric -> one value per run, NaN where missing


def stamp(run: int) -> str:
    return (T0 + timedelta(hours=run)).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(run: int) -> int:
    return int((T0 + timedelta(hours=run)).timestamp())


def commit(run: int) -> str:
    return f"c{run:05d}"


def table_with_gaps(seed: int, runs: int = 150, metrics: int = 2) -> Table:
    """Noisy series with two or three steps of 3-6 sigma, and blanks: some scattered,
    a stretch of consecutive ones, and (for odd seeds) leading ones."""
    rng = np.random.default_rng(seed)
    table: Table = {}
    for m in range(metrics):
        values = 100 + rng.normal(0, 1, runs)
        for at in sorted(rng.choice(np.arange(15, runs - 15), rng.integers(2, 4), replace=False)):
            values[at:] += rng.choice([-1, 1]) * rng.uniform(3, 6)
        blanks = set(rng.choice(runs, rng.integers(2, 8), replace=False).tolist())
        start = int(rng.integers(10, runs - 10))
        blanks |= set(range(start, start + int(rng.integers(2, 5))))
        if seed % 2:
            blanks |= {0, 1}
        values[sorted(blanks)] = np.nan
        table[f"metric{m}"] = np.round(values, 3).tolist()
    return table


def write_csv(path: Path, table: Table) -> Path:
    runs = len(next(iter(table.values())))
    lines = [",".join(["time", "commit", "run_id", *table])]
    for run in range(runs):
        cells = ["" if math.isnan(v[run]) else repr(v[run]) for v in table.values()]
        lines.append(",".join([stamp(run), commit(run), f"run-{run}", *cells]))
    path.write_text("\n".join(lines) + "\n")
    return path


def record_documents(table: Table, test: str) -> list[dict[str, Any]]:
    """One record per run carrying the metrics the run has (a run with none is left out)."""
    runs = len(next(iter(table.values())))
    documents = []
    for run in range(runs):
        metrics = {name: v[run] for name, v in table.items() if not math.isnan(v[run])}
        if metrics:
            documents.append(
                {
                    "schema": RECORD_SCHEMA,
                    "test": test,
                    "run_id": f"run-{run}",
                    "commit": commit(run),
                    "timestamp": stamp(run),
                    "metrics": metrics,
                }
            )
    return documents


def write_jsonl(path: Path, table: Table) -> Path:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in record_documents(table, path.stem)))
    return path


def analyze(*args: str | Path) -> dict[str, dict[str, Any]]:
    """`perfwatch analyze --format json`, by metric."""
    result = CliRunner().invoke(main, ["analyze", *map(str, args), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {series["metric"]: series for series in orjson.loads(result.stdout)["series"]}


# --- the readers ------------------------------------------------------------------------------


def test_keep_missing_keeps_every_run_with_nan_for_the_blank_cells(tmp_path: Path) -> None:
    table = {"x": [1.0, math.nan, 3.0, math.nan], "y": [math.nan, 20.0, 30.0, 40.0]}
    csv_x, csv_y = read_otava_csv(write_csv(tmp_path / "t.csv", table), keep_missing=True)
    records = list(read_records(write_jsonl(tmp_path / "t.jsonl", table)))
    rec_x, rec_y = records_to_series(records, keep_missing=True)
    for x, y in ((csv_x, csv_y), (rec_x, rec_y)):
        assert x.commits == y.commits == [commit(run) for run in range(4)]
        np.testing.assert_array_equal(x.values, table["x"])
        np.testing.assert_array_equal(y.values, table["y"])
    dropped_x, dropped_y = records_to_series(records)
    assert (dropped_x.values.tolist(), dropped_x.commits) == ([1.0, 3.0], ["c00000", "c00002"])
    assert dropped_y.values.tolist() == [20.0, 30.0, 40.0]
    assert dropped_y.commits == ["c00001", "c00002", "c00003"]


@pytest.mark.parametrize("marker", ["N/A", "NA", "-", "null", "nan", " n/a "])
def test_a_missing_value_marker_is_an_empty_cell(tmp_path: Path, marker: str) -> None:
    blank = tmp_path / "blank.csv"
    blank.write_text("time,lat,host\n1,,a\n2,10,a\n3,,a\n4,11,a\n")
    marked = tmp_path / "marked.csv"
    marked.write_text(blank.read_text().replace(",,", f",{marker},"))
    # a metric column whose first cells say "not measured" is still a metric
    (from_blank,) = read_otava_csv(blank, keep_missing=True)
    (from_marked,) = read_otava_csv(marked, keep_missing=True)
    assert from_marked.metric == "lat"
    np.testing.assert_array_equal(from_marked.values, from_blank.values)


def test_publish_sends_a_csv_row_as_a_record_without_its_empty_cells(tmp_path: Path) -> None:
    table = {"x": [1.0, math.nan, 3.0, math.nan], "y": [math.nan, 20.0, 30.0, math.nan]}
    found = read_input_file(write_csv(tmp_path / "t.csv", table)).records
    assert [(r.record["commit"], r.record["metrics"]) for r in found] == [
        (commit(0), {"x": 1.0}),
        (commit(1), {"y": 20.0}),
        (commit(2), {"x": 3.0, "y": 30.0}),
    ]  # a row with no value at all is no run


# --- compat mode against Otava ----------------------------------------------------------------


def otava_answers(otava: OtavaReference, table: Table, **options: Any) -> dict[str, list]:
    runs = len(next(iter(table.values())))
    return otava.analyze_runs([epoch(run) for run in range(runs)], table, **options)


def assert_same_as_otava(ours: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    got = ours["change_points"]
    assert [c["index"] for c in got] == [c["index"] for c in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine["pvalue"] == pytest.approx(theirs["pvalue"], rel=1e-9, abs=1e-300)
        for name, their_name in (
            ("magnitude", "magnitude"),
            ("forward_change_percent", "forward_change_percent"),
            ("mean_before", "mean_before"),
            ("stddev_before", "std_before"),
            ("mean_after", "mean_after"),
            ("stddev_after", "std_after"),
        ):
            assert mine[name] == theirs[their_name], name


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_compat_mode_gives_otavas_change_points_on_runs_with_missing_values(
    otava: OtavaReference, tmp_path: Path, seed: int, suffix: str
) -> None:
    table = table_with_gaps(seed)
    if suffix == ".jsonl":  # a run without any value has no record: there is no such run
        recorded = [
            run for run in range(150) if not all(math.isnan(v[run]) for v in table.values())
        ]
        table = {name: [values[run] for run in recorded] for name, values in table.items()}
    write = write_csv if suffix == ".csv" else write_jsonl
    ours = analyze(write(tmp_path / f"t{suffix}", table), "--compat", "otava")
    expected = otava_answers(otava, table)
    for metric, values in table.items():
        assert ours[metric]["points"] == len(values)  # every run counts, as in Otava
        assert_same_as_otava(ours[metric], expected[metric])


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["--window", "20"], {"window_len": 20}),
        (["-P", "0.05", "-M", "0.02"], {"max_pvalue": 0.05, "min_magnitude": 0.02}),
    ],
)
def test_compat_mode_with_options_and_gaps_matches_otava(
    otava: OtavaReference, tmp_path: Path, args: list[str], options: dict[str, Any]
) -> None:
    table = table_with_gaps(101, runs=300)
    ours = analyze(write_csv(tmp_path / "t.csv", table), "--compat", "otava", *args)
    expected = otava_answers(otava, table, **options)
    for metric in table:
        assert_same_as_otava(ours[metric], expected[metric])


def test_compat_mode_from_the_config_keeps_the_blank_runs_of_its_series(
    otava: OtavaReference, tmp_path: Path
) -> None:
    table = table_with_gaps(3)
    path = write_csv(tmp_path / "t.csv", table)
    config = tmp_path / "perfwatch.toml"
    config.write_text('[[analyzer.rules]]\nmetric = "metric0"\ncompat = "otava"\n')
    configured = analyze(path, "--config", config)
    assert_same_as_otava(configured["metric0"], otava_answers(otava, table)["metric0"])
    assert configured["metric0"]["points"] == len(table["metric0"])
    # the rule names one metric: the other keeps the default mode and its missing runs out
    assert configured["metric1"] == analyze(path)["metric1"]
    assert configured["metric1"]["points"] < len(table["metric1"])
    config.write_text('[analyzer]\ncompat = "otava"\n')
    assert analyze(path, "--config", config) == analyze(path, "--compat", "otava")


def test_dropping_the_blank_runs_would_not_be_otava(otava: OtavaReference, tmp_path: Path) -> None:
    """The case that shows the two policies differ: steps after blanks shift the indices."""
    rng = np.random.default_rng(5)
    values = 100 + rng.normal(0, 1, 120)
    values[40:] += 5
    values[80:] -= 4
    values[[10, 11, 60]] = np.nan
    table = {"x": np.round(values, 3).tolist()}
    path = write_csv(tmp_path / "t.csv", table)
    expected = [c["index"] for c in otava_answers(otava, table)["x"]]
    assert expected == [40, 80]
    compat = analyze(path, "--compat", "otava")["x"]
    assert [c["index"] for c in compat["change_points"]] == expected
    default = analyze(path)["x"]
    assert default["points"] == 117
    assert [c["commit"] for c in default["change_points"]] == [commit(40), commit(80)]
    assert [c["index"] for c in default["change_points"]] == [38, 77]


def test_compat_text_shows_a_missing_value_as_an_empty_cell(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", {"x": [1.0, math.nan, 3.0]})
    result = CliRunner().invoke(main, ["analyze", str(path), "--compat", "otava"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if commit(1) in line)
    assert line.split() == ["2024-01-01", "03:00:00", "+0000", commit(1)]


def test_a_selection_with_no_value_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", {"x": [1.0, 2.0, math.nan, math.nan]})
    result = CliRunner().invoke(main, ["analyze", str(path), "--compat", "otava", "--last", "2"])
    assert result.exit_code == 2
    assert "t/x: no run has a value after filtering" in result.stderr


# --- default mode: one policy for CSV, records and the stream ---------------------------------


def stream_change_points(table: Table, test: str) -> dict[str, set[str]]:
    """The change points the stream processor publishes for the records of the table, as
    the commits of their runs, by metric."""
    topic = MemoryRecordTopic(batch_size=16)
    for document in record_documents(table, test):
        topic.publish(orjson.dumps(document), key=test)
    topics = {"records": "records", "verdicts": "verdicts", "dead_letter": "dead-letters"}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'state.db'}"
        with open_store(url) as store:
            processor = Processor(
                processor_config(url, topics),
                store,
                topic.source(),
                MemoryVerdictSink(),
                MemoryDeadLetterSink(),
            )
            processor.start()
            while processor.poll_once():
                pass
            processor.close()
            return {
                key.metric: {commit(int(run.split("-")[1])) for run in runs}
                for key, runs in stored_beliefs(store).items()
            }


@pytest.mark.parametrize("seed", range(4))
def test_default_mode_leaves_a_run_without_a_value_out_in_every_format(
    tmp_path: Path, seed: int
) -> None:
    table = table_with_gaps(seed)
    from_csv = analyze(write_csv(tmp_path / "t.csv", table))
    from_jsonl = analyze(write_jsonl(tmp_path / "t.jsonl", table))
    from_stream = stream_change_points(table, "t")
    for metric, values in table.items():
        present = [run for run, v in enumerate(values) if not math.isnan(v)]
        for found in (from_csv[metric], from_jsonl[metric]):
            assert found["points"] == len(present)  # indices count the runs with a value
            for change in found["change_points"]:
                assert change["commit"] == commit(present[change["index"]])
        assert from_csv[metric]["change_points"] == from_jsonl[metric]["change_points"]
        commits = {change["commit"] for change in from_csv[metric]["change_points"]}
        assert commits, "the generated steps must give change points to compare"
        assert from_stream.get(metric, set()) == commits
