"""Otava-style CSV and record-file readers, and point selection on a series."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import pytest

from perfwatch.contract.models import MetricValue, Record
from perfwatch.readers.errors import SourceError
from perfwatch.readers.jsonl import read_records, records_to_series, write_records
from perfwatch.readers.otava_csv import read_otava_csv
from perfwatch.readers.series import MetricSeries, select_points

CSV = """time,commit,version,latency_ms,throughput,host
2024-01-01T00:00:00Z,aaa1111,1.0,10.5,100,ci-1
2024-01-02T00:00:00Z,bbb2222,1.1,11.0,,ci-2
2024-01-03T00:00:00Z,ccc3333,1.2,12.25,120,ci-1
"""


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def by_metric(series: list[MetricSeries]) -> dict[str, MetricSeries]:
    return {s.metric: s for s in series}


def day(n: int) -> datetime:
    return datetime(2024, 1, n, tzinfo=UTC)


# --- CSV --------------------------------------------------------------------------------------


def test_csv_columns_are_classified(tmp_path: Path) -> None:
    series = by_metric(read_otava_csv(write(tmp_path, "nightly.v2.csv", CSV)))
    assert list(series) == ["latency_ms", "throughput"]
    latency = series["latency_ms"]
    assert latency.test == "nightly.v2"
    assert latency.values.tolist() == [10.5, 11.0, 12.25]
    assert latency.times == [day(1), day(2), day(3)]
    assert latency.commits == ["aaa1111", "bbb2222", "ccc3333"]
    assert latency.attributes == {
        "version": ["1.0", "1.1", "1.2"],
        "host": ["ci-1", "ci-2", "ci-1"],
    }
    assert (latency.source, latency.line, latency.column) == (
        str(tmp_path / "nightly.v2.csv"),
        1,
        4,
    )


def test_empty_metric_cell_leaves_the_run_out_of_that_series(tmp_path: Path) -> None:
    throughput = by_metric(read_otava_csv(write(tmp_path, "t.csv", CSV)))["throughput"]
    assert throughput.values.tolist() == [100.0, 120.0]
    assert throughput.commits == ["aaa1111", "ccc3333"]
    assert throughput.attributes["host"] == ["ci-1", "ci-1"]


@pytest.mark.parametrize("separator", [",", ";", "\t", "|"])
def test_separator_is_detected(tmp_path: Path, separator: str) -> None:
    text = CSV.replace(",", separator)
    series = by_metric(read_otava_csv(write(tmp_path, "t.csv", text)))
    assert series["latency_ms"].values.tolist() == [10.5, 11.0, 12.25]


def test_separator_can_be_given(tmp_path: Path) -> None:
    text = "time;note,latency\n2024-01-01;1\n2024-01-02;2\n"
    series = read_otava_csv(write(tmp_path, "t.csv", text), separator=";")
    assert [s.metric for s in series] == ["note,latency"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("2024-01-01T00:00:00Z", "2024-01-02T00:00:00+00:00"),
        ("2024-01-01 01:00:00 +0100", "2024-01-02 01:00:00 +0100"),
        ("2024-01-01", "2024-01-02"),
        ("1704067200", "1704153600"),
        ("1704067200000", "1704153600000"),
        ("2024/01/01 00:00:00", "2024/01/02 00:00:00"),
        ("2024.01.01 1:00:00 +0100", "2024.01.02 1:00:00 +0100"),  # Apache Otava's examples
        ("2024.01.01 00:00:00", "2024.01.02 00:00:00"),
        ("2024.01.01", "2024.01.02"),
        ("01.01.2024", "02.01.2024"),
        ("01/01/2024", "01/02/2024"),
        ("Mon, 01 Jan 2024 00:00:00 +0000", "Tue, 02 Jan 2024 00:00:00 +0000"),
    ],
)
def test_time_format_is_detected(tmp_path: Path, first: str, second: str) -> None:
    text = f'time,x\n"{first}",1\n"{second}",2\n'
    (series,) = read_otava_csv(write(tmp_path, "t.csv", text))
    assert series.times == [day(1), day(2)]


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16-le", "utf-16-be"])
def test_text_with_a_byte_order_mark_reads_as_utf8(tmp_path: Path, encoding: str) -> None:
    text = "time,x\n2024-01-01,1.5\n2024-01-02,2.5\n"
    path = tmp_path / "t.csv"
    # the BOM as Windows tools write it: U+FEFF in the file's own encoding
    path.write_bytes(("\ufeff" + text).encode(encoding))
    (series,) = read_otava_csv(path)
    assert series.values.tolist() == [1.5, 2.5]
    assert series.times == [day(1), day(2)]


def test_utf16_that_does_not_decode_names_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xff\xfet\x00i\x00\x00\xdc")  # a lone low surrogate
    with pytest.raises(SourceError, match=r"t\.csv: not UTF-16 text after its byte-order mark"):
        read_otava_csv(path)


def test_day_first_dates_are_recognised_by_the_whole_column(tmp_path: Path) -> None:
    text = "date,x\n12/01/2024,1\n13/01/2024,2\n"
    (series,) = read_otava_csv(write(tmp_path, "t.csv", text))
    assert series.times == [day(12), day(13)]


def test_rows_are_put_in_time_order(tmp_path: Path) -> None:
    text = "x,timestamp\n3,2024-01-03\n1,2024-01-01\n2,2024-01-02\n"
    (series,) = read_otava_csv(write(tmp_path, "t.csv", text))
    assert series.values.tolist() == [1.0, 2.0, 3.0]


def test_out_of_order_rows_with_blank_cells_keep_each_run_with_its_labels(
    tmp_path: Path,
) -> None:
    text = (
        "time,commit,x,y\n"
        "2024-01-03,c3,3, 30\n"
        "2024-01-01,c1,1,\n"
        "2024-01-04,c4,  ,40\n"
        "2024-01-02,c2,2,20\n"
    )
    x, y = read_otava_csv(write(tmp_path, "t.csv", text))
    assert (x.values.tolist(), x.commits) == ([1.0, 2.0, 3.0], ["c1", "c2", "c3"])
    assert (y.values.tolist(), y.commits) == ([20.0, 30.0, 40.0], ["c2", "c3", "c4"])
    assert y.times == [day(2), day(3), day(4)]


def test_of_several_bad_cells_the_earliest_run_is_named(tmp_path: Path) -> None:
    text = "time,x\n2024-01-02,1\n2024-01-04,abc\n2024-01-03,1.2.3\n"
    with pytest.raises(SourceError) as caught:
        read_otava_csv(write(tmp_path, "t.csv", text))
    assert (caught.value.line, caught.value.column) == (4, 2)
    assert "unparsable number '1.2.3'" in caught.value.message


def test_time_column_can_be_named(tmp_path: Path) -> None:
    text = "when,x\n2024-01-01,1\n2024-01-02,2\n"
    (series,) = read_otava_csv(write(tmp_path, "t.csv", text), time_column="when")
    assert series.times == [day(1), day(2)]


def test_metric_selection_keeps_only_named_columns(tmp_path: Path) -> None:
    series = read_otava_csv(write(tmp_path, "t.csv", CSV), metrics={"throughput", "absent"})
    assert [s.metric for s in series] == ["throughput"]
    assert "host" in series[0].attributes


def test_numeric_version_column_is_not_a_metric(tmp_path: Path) -> None:
    text = "time,version,x\n2024-01-01,7,1\n2024-01-02,8,2\n"
    (series,) = read_otava_csv(write(tmp_path, "t.csv", text))
    assert series.metric == "x"
    assert series.attributes == {"version": ["7", "8"]}


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("", 1, None, "file is empty"),
        ("time,x\n", 2, None, "no data rows"),
        ("time,x,x\n2024-01-01,1,2\n", 1, 3, "duplicate column name 'x' (also column 2)"),
        ("time,,x\n2024-01-01,1,2\n", 1, 2, "column 2 has no name"),
        ("time,x\n2024-01-01,1\n2024-01-02,1.2.3\n", 3, 2, "unparsable number '1.2.3'"),
        ("time,x\n2024-01-01,inf\n2024-01-02,1\n", 2, 2, "non-finite value 'inf'"),
        ("time,x\n2024-01-01,1\n2024-01-02,-2e151\n", 3, 2, "value -2e+151 in metric column 'x'"),
        ("time,x\n2024-01-01,1\n2024-01-32,2\n", 3, 1, "unparsable time '2024-01-32'"),
        ("time,x\n2024-01-01,1\n,2\n", 3, 1, "empty time"),
        ("time,x\nyesterday,1\n", 2, 1, "expected ISO 8601"),
        ("time,x\n2024-01-01,1,5\n", 2, 3, "row has 3 fields but the header has 2"),
        (b"time,x\n2024-01-01,\xff\n", 2, 12, "not UTF-8"),
    ],
)
def test_csv_errors_name_line_and_column(
    tmp_path: Path, text: str | bytes, line: int, column: int | None, fragment: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SourceError) as caught:
        read_otava_csv(path)
    assert (caught.value.source, caught.value.line, caught.value.column) == (
        str(path),
        line,
        column,
    )
    assert fragment in caught.value.message


def test_first_column_time_guess_is_explained(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="first column was taken") as caught:
        read_otava_csv(write(tmp_path, "t.csv", "build,x\nb1,1\nb2,2\n"))
    assert (caught.value.line, caught.value.column) == (2, 1)


def test_missing_file_and_time_column(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        read_otava_csv(tmp_path / "absent.csv")
    with pytest.raises(SourceError, match="no time column 'when'"):
        read_otava_csv(write(tmp_path, "t.csv", CSV), time_column="when")


# --- record files -----------------------------------------------------------------------------


def record(run: int, test: str = "suite", **metrics: float | MetricValue) -> Record:
    return Record(
        test=test,
        run_id=f"run-{run}",
        timestamp=day(run),
        commit=f"c{run:04d}",
        branch="main",
        attributes={"runner": f"ci-{run % 2}"},
        metrics={
            k: v if isinstance(v, MetricValue) else MetricValue(v) for k, v in metrics.items()
        },
    )


def write_jsonl(path: Path, records: list[Record]) -> Path:
    buffer = io.BytesIO()
    write_records(records, buffer)
    path.write_bytes(buffer.getvalue())
    return path


def test_jsonl_round_trip(tmp_path: Path) -> None:
    records = [record(1, a=1.0), record(2, a=2.5, b=MetricValue(3, "ms", "lower_is_better"))]
    path = write_jsonl(tmp_path / "r.jsonl", records)
    read = list(read_records(path))
    assert [sourced.record for sourced in read] == records
    assert [sourced.line for sourced in read] == [1, 2]


def test_records_become_series_in_time_order(tmp_path: Path) -> None:
    lower = MetricValue(5.0, "ms", "lower_is_better")
    first = write_jsonl(tmp_path / "a.jsonl", [record(3, a=3.0), record(1, a=1.0, b=lower)])
    second = write_jsonl(tmp_path / "b.jsonl", [record(2, a=2.0), record(1, a=9.0)])
    sourced = [r for path in (first, second) for r in read_records(path)]
    series = by_metric(records_to_series(sourced))
    a = series["a"]
    # run-1 appears twice: the first delivery counts, the repeat is skipped.
    assert a.values.tolist() == [1.0, 2.0, 3.0]
    assert a.run_ids == ["run-1", "run-2", "run-3"]
    assert a.commits == ["c0001", "c0002", "c0003"]
    assert a.branches == ["main"] * 3
    assert a.attributes == {"runner": ["ci-1", "ci-0", "ci-1"]}
    assert (a.source, a.line) == (str(first), 1)
    assert (series["b"].direction, series["b"].unit, len(series["b"])) == (
        "lower_is_better",
        "ms",
        1,
    )
    assert (series["b"].source, series["b"].line) == (str(first), 2)


def test_records_group_by_test_and_select_metrics() -> None:
    from perfwatch.readers.jsonl import SourcedRecord

    sourced = [
        SourcedRecord(record(i, test=test, a=1.0, b=2.0), "x.jsonl", i)
        for i, test in enumerate(["t1", "t2", "t1"], start=1)
    ]
    series = records_to_series(sourced, metrics={"b"})
    assert [(s.test, s.metric, len(s)) for s in series] == [("t1", "b", 2), ("t2", "b", 1)]


def test_a_metric_whose_unit_changes_is_refused_at_the_run_that_changed_it(
    tmp_path: Path,
) -> None:
    # A Google Benchmark report gives times in the benchmark's unit: one moved from ns to
    # us would be a 1000x "improvement" if the values were taken as one series.
    runs = [record(1, t=MetricValue(1200.0, "ns")), record(2, t=MetricValue(1210.0, "ns"))]
    runs += [record(3, t=MetricValue(1.3)), record(4, t=MetricValue(1.25, "us"))]
    path = write_jsonl(tmp_path / "r.jsonl", runs)
    with pytest.raises(SourceError) as caught:
        records_to_series(read_records(path))
    assert str(caught.value) == (
        f"{path}:4:1: $.metrics.t.unit: run 'run-4' of test 'suite' gives it in 'us', earlier "
        "runs in 'ns': values in two units are no history; convert the values of one part, "
        "or record the metric under a new name from the change on"
    )
    # a run that declares no unit is no change; other metrics are not held to this one's
    kept = [*runs[:3], record(4, t=MetricValue(1250.0, "ns"), u=MetricValue(1.0, "us"))]
    (t, u) = records_to_series(read_records(write_jsonl(tmp_path / "s.jsonl", kept)))
    assert (t.unit, t.values.tolist()) == ("ns", [1200.0, 1210.0, 1.3, 1250.0])
    assert u.unit == "us"


def test_jsonl_errors_name_line_and_column(tmp_path: Path) -> None:
    good = orjson.dumps(record(1, a=1.0).to_json())
    bad_value = good.replace(b'"a":1.0', b'"a":"fast"')
    path = write(tmp_path, "r.jsonl", good + b"\n\n" + b'{"test": NaN}\n')
    with pytest.raises(SourceError) as caught:
        list(read_records(path))
    assert (caught.value.line, caught.value.column) == (3, 10)
    assert "non-finite" in caught.value.message
    path = write(tmp_path, "r.jsonl", good + b"\n" + bad_value + b"\n")
    with pytest.raises(SourceError) as caught:
        list(read_records(path))
    assert (caught.value.line, caught.value.column) == (2, 1)
    assert caught.value.message == "$.metrics.a: expected number or object, got string"


def test_json_document_holds_one_record_or_an_array(tmp_path: Path) -> None:
    docs = [record(1, a=1.0).to_json(), record(2, a=2.0).to_json()]
    single = write(tmp_path, "one.json", orjson.dumps(docs[0], option=orjson.OPT_INDENT_2))
    assert [r.record.run_id for r in read_records(single)] == ["run-1"]
    array = write(tmp_path, "many.json", orjson.dumps(docs, option=orjson.OPT_INDENT_2))
    read = list(read_records(array))
    assert [r.record.run_id for r in read] == ["run-1", "run-2"]
    text = array.read_text().splitlines()
    assert [(text[r.line - 1][r.column - 1]) for r in read] == ["{", "{"]
    docs[1]["metrics"] = {}
    bad = write(tmp_path, "bad.json", orjson.dumps(docs, option=orjson.OPT_INDENT_2))
    with pytest.raises(SourceError) as caught:
        list(read_records(bad))
    assert (caught.value.line, caught.value.column) == (read[1].line, read[1].column)
    assert caught.value.message.startswith("[1]: $.metrics: is empty")


# --- selecting points -------------------------------------------------------------------------


def series_of(commits: list[str], branches: list[str | None] | None = None) -> MetricSeries:
    n = len(commits)
    return MetricSeries(
        test="t",
        metric="m",
        times=[datetime(2024, 1, 1 + i // 2, 6 + 12 * (i % 2), tzinfo=UTC) for i in range(n)],
        values=np.arange(n, dtype=np.float64),
        commits=list(commits),
        run_ids=[f"r{i}" for i in range(n)],
        branches=branches or [None] * n,
        source="t.csv",
        line=1,
        column=2,
    )


COMMITS = ["a1b2c3d4", "b2c3d4e5", "c3d4e5f6", "d4e5f6a7", "e5f6a7b8", "f6a7b8c9"]


@pytest.mark.parametrize(
    ("since", "until", "last", "kept"),
    [
        ("b2c3d4e5", None, None, [1, 2, 3, 4, 5]),
        (None, "d4e5", None, [0, 1, 2, 3]),
        ("b2c3", "e5f6a7b8", 2, [3, 4]),
        ("2024-01-02", None, None, [2, 3, 4, 5]),
        (None, "2024-01-02", None, [0, 1, 2, 3]),
        (None, "2024-01-02T06:00:00", None, [0, 1, 2]),
        ("2024-01-01T12:00:00+00:00", "2024-01-02T12:00:00Z", None, [1, 2]),
        (None, None, 4, [2, 3, 4, 5]),
    ],
)
def test_select_by_commit_date_and_count(
    since: str | None, until: str | None, last: int | None, kept: list[int]
) -> None:
    chosen = select_points(series_of(COMMITS), since=since, until=until, last=last)
    assert chosen.values.tolist() == kept
    assert chosen.commits == [COMMITS[i] for i in kept]


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(SourceError, match=r"neither a commit of this series \(or a prefix"):
        select_points(series_of(COMMITS), since="zzzz")
    with pytest.raises(SourceError, match="ambiguous"):
        select_points(series_of(["abcd1", "abcd2"]), until="abcd")
    # a prefix that many commits share names a few of them and counts the rest
    many = [f"0000{i:036d}" for i in range(40)]
    with pytest.raises(SourceError, match=r"ambiguous \(40 commits\): 0{40}, .* and 35 more$"):
        select_points(series_of(many), since="0000")


def test_a_nul_byte_is_named_as_utf16_without_its_mark(tmp_path: Path) -> None:
    path = tmp_path / "u16.csv"
    path.write_bytes("time,v\n1,10\n2,11\n".encode("utf-16-le"))
    with pytest.raises(SourceError, match=r"u16\.csv:1:2: not UTF-8 text \(a NUL byte: UTF-16"):
        read_otava_csv(path)


def test_branches_must_not_mix() -> None:
    branches: list[str | None] = ["main", "dev", "main", None]
    mixed = series_of(COMMITS[:4], branches)
    with pytest.raises(SourceError, match=r"several branches \(dev, main\)") as caught:
        select_points(mixed)
    assert (
        str(caught.value)
        == "t.csv:1:2: t/m: runs come from several branches (dev, main); select one branch"
    )
    assert select_points(mixed, branch="main").values.tolist() == [0, 2]
    with pytest.raises(SourceError, match="carry no branch"):
        select_points(series_of(COMMITS), branch="main")
