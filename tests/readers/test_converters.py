"""Converters for benchmark tools' reports, tested on reports the real tools wrote.

Each report is produced here by running the tool (pytest-benchmark and Google
Benchmark's Python bindings from PyPI, hyperfine from Debian), so a change in
what the tools write shows up as a failing test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

import _tool_reports
from perfwatch.adapters.identity import Identity, complete_record
from perfwatch.contract.timestamps import format_rfc3339, parse_rfc3339
from perfwatch.contract.validation import validate_record
from perfwatch.readers.detect import (
    GOOGLE_BENCHMARK,
    HYPERFINE,
    JMH,
    OTAVA_CSV,
    PERFWATCH,
    PYTEST_BENCHMARK,
    detect_format,
    read_input_file,
)
from perfwatch.readers.errors import SourceError
from perfwatch.readers.google_benchmark import records_from_google_benchmark
from perfwatch.readers.hyperfine import records_from_hyperfine
from perfwatch.readers.jmh import records_from_jmh
from perfwatch.readers.pytest_benchmark import STATISTICS, records_from_pytest_benchmark

LOWER = "lower_is_better"
HIGHER = "higher_is_better"
# Reports shaped like those of older releases of the tools, written for these tests.
REPORTS = Path(__file__).parent / "reports"


def _complete_and_validate(records: list[Any]) -> None:
    for located in records:
        record = complete_record(
            located.record,
            explicit=Identity(),
            defaults=Identity(),
            fallback_timestamp="2024-05-01T00:00:00Z",
        )
        assert validate_record(record) == [], (located.position, record)


# --- pytest-benchmark ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pytest_benchmark_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _tool_reports.pytest_benchmark_report(tmp_path_factory.mktemp("pytest_benchmark"))


def test_pytest_benchmark_one_record_per_benchmark(
    pytest_benchmark_report: tuple[Path, str],
) -> None:
    path, head = pytest_benchmark_report
    report = orjson.loads(path.read_bytes())
    records = records_from_pytest_benchmark(report, str(path))

    assert [r.record["test"] for r in records] == [
        "test_speed.py::test_sum",
        "test_speed.py::test_sorted[10]",
        "test_speed.py::test_sorted[100]",
    ]
    assert [r.position for r in records] == [f"$.benchmarks[{i}]" for i in range(3)]
    for located, benchmark in zip(records, report["benchmarks"], strict=True):
        record = located.record
        assert record["commit"] == head
        assert record["branch"] == "perf-branch"
        # pytest-benchmark before 5.0 writes UTC without an offset
        reported = datetime.fromisoformat(report["datetime"])
        if reported.tzinfo is None:
            reported = reported.replace(tzinfo=UTC)
        assert record["timestamp"] == format_rfc3339(reported.astimezone(UTC))
        stats = benchmark["stats"]
        for name in ("mean", "median", "min", "max", "stddev"):
            assert record["metrics"][name] == {
                "value": stats[name],
                "unit": "s",
                "direction": LOWER,
            }
        assert record["metrics"]["ops"] == {
            "value": stats["ops"],
            "unit": "ops/s",
            "direction": HIGHER,
        }
    assert "attributes" not in records[0].record
    assert records[1].record["attributes"] == {"group": "sorting", "param.size": "10"}
    assert records[2].record["attributes"] == {"group": "sorting", "param.size": "100"}
    _complete_and_validate(records)


def test_pytest_benchmark_outside_a_repository_has_no_commit() -> None:
    report = {
        "machine_info": {},
        "commit_info": {"id": "unversioned", "branch": "(unknown)", "dirty": False},
        "datetime": "2016-02-05T17:11:30.321219",  # older releases wrote naive UTC times
        "benchmarks": [
            {
                "fullname": "t.py::test_a",
                "stats": {s: 1.0 for s in ("mean", "median", "min", "max", "stddev", "ops")},
            }
        ],
    }
    (located,) = records_from_pytest_benchmark(report, "old.json")
    assert "commit" not in located.record and "branch" not in located.record
    assert located.record["timestamp"] == "2016-02-05T17:11:30.321219Z"


def test_pytest_benchmark_on_a_detached_head_names_no_branch(tmp_path: Path) -> None:
    # CI checks out a commit alone; pytest-benchmark then writes "(detached head)"
    path, head = _tool_reports.pytest_benchmark_report(tmp_path, detached=True)
    report = orjson.loads(path.read_bytes())
    assert report["commit_info"]["branch"] == "(detached head)"

    records = [located.record for located in records_from_pytest_benchmark(report, str(path))]

    assert {record["commit"] for record in records} == {head}
    assert all("branch" not in record for record in records)


def test_pytest_benchmark_that_could_not_ask_git_has_no_commit() -> None:
    # what it writes when git fails (a repository owned by another user in a CI container)
    report = {
        "machine_info": {},
        "commit_info": {
            "id": "unknown",
            "time": None,
            "author_time": None,
            "dirty": False,
            "error": "CalledProcessError(128, 'fatal: detected dubious ownership')",
            "project": "shop",
            "branch": "(unknown)",
        },
        "benchmarks": [
            {"fullname": "t.py::test_a", "stats": dict.fromkeys(STATISTICS, 1.0)},
        ],
    }
    (located,) = records_from_pytest_benchmark(report, "ci.json")
    assert "commit" not in located.record and "branch" not in located.record


def test_pytest_benchmark_before_3_1_has_no_operations_per_second() -> None:
    report, source = _report("pytest_benchmark_3.0.json")
    (located,) = records_from_pytest_benchmark(report, source)
    metrics = located.record["metrics"]
    assert sorted(metrics) == ["max", "mean", "median", "min", "stddev"]
    assert metrics["mean"] == {"value": 0.00198, "unit": "s", "direction": LOWER}
    assert located.record["commit"] == "5b1fe6c0e7d1d0a2c3f4b5a6978812aa0c9e3d4f"
    _complete_and_validate([located])


def test_pytest_benchmark_missing_statistic_names_the_place() -> None:
    report = {
        "machine_info": {},
        "benchmarks": [{"fullname": "t.py::test_a", "stats": {"mean": "fast"}}],
    }
    with pytest.raises(
        SourceError,
        match=r"bad\.json: \$\.benchmarks\[0\]\.stats\.mean: expected a number, got a string",
    ):
        records_from_pytest_benchmark(report, "bad.json")


# --- Google Benchmark ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def google_benchmark_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Reports of the same benchmarks with 1 and with 3 repetitions."""
    work = tmp_path_factory.mktemp("google_benchmark")
    return {n: _tool_reports.google_benchmark_report(work, n) for n in (1, 3)}


def test_google_benchmark_single_runs(google_benchmark_reports: dict[int, Path]) -> None:
    path = google_benchmark_reports[1]
    report = orjson.loads(path.read_bytes())
    records = records_from_google_benchmark(report, str(path))
    by_test = {r.record["test"]: r.record for r in records}

    # The failed benchmark and the complexity fits (BigO, RMS) are not runs.
    assert list(by_test) == ["scan/64", "scan/128", "counted"]
    entries = {e["name"]: e for e in report["benchmarks"]}
    scan = by_test["scan/64"]
    assert scan["metrics"]["real_time"] == {
        "value": entries["scan/64"]["real_time"],
        "unit": "ns",
        "direction": LOWER,
    }
    assert scan["metrics"]["items_per_second"] == {
        "value": entries["scan/64"]["items_per_second"],
        "unit": "items/s",
        "direction": HIGHER,
    }
    assert scan["attributes"] == {"executable": "bench.py", "label": "sum"}
    assert scan["timestamp"] == format_rfc3339(parse_rfc3339(report["context"]["date"]))
    counted = by_test["counted"]
    assert counted["metrics"]["cpu_time"]["unit"] == "us"
    assert counted["metrics"]["widgets"] == 3.0  # a user counter: no unit, no direction
    _complete_and_validate(records)


def test_google_benchmark_repetitions_use_the_aggregates(
    google_benchmark_reports: dict[int, Path],
) -> None:
    path = google_benchmark_reports[3]
    report = orjson.loads(path.read_bytes())
    records = records_from_google_benchmark(report, str(path))
    aggregates = {
        (e["run_name"], e["aggregate_name"]): e
        for e in report["benchmarks"]
        if e["run_type"] == "aggregate"
    }
    assert [r.record["test"] for r in records] == ["scan/64", "scan/128", "counted"]
    metrics = records[0].record["metrics"]
    assert metrics["real_time"]["value"] == aggregates[("scan/64", "mean")]["real_time"]
    # the median is a time like the mean; a spread has no direction
    assert metrics["cpu_time_median"] == {
        "value": aggregates[("scan/64", "median")]["cpu_time"],
        "unit": "ns",
        "direction": LOWER,
    }
    assert metrics["real_time_stddev"] == {
        "value": aggregates[("scan/64", "stddev")]["real_time"],
        "unit": "ns",
    }
    # cv is a ratio, not a time
    assert metrics["real_time_cv"] == aggregates[("scan/64", "cv")]["real_time"]
    assert "items_per_second_median" not in metrics
    _complete_and_validate(records)


def test_google_benchmark_repetitions_without_aggregates_are_averaged() -> None:
    entry = {"run_name": "BM_x", "run_type": "iteration", "time_unit": "ms", "cpu_time": 1.0}
    report = {
        "context": {"date": "2019-03-19T11:34:56-07:00", "executable": "/build/bench"},
        "benchmarks": [{**entry, "real_time": 1.0}, {**entry, "real_time": 2.0}],
    }
    (located,) = records_from_google_benchmark(report, "r.json")
    assert located.record["metrics"]["real_time"] == {
        "value": 1.5,
        "unit": "ms",
        "direction": LOWER,
    }
    assert located.record["timestamp"] == "2019-03-19T18:34:56Z"
    assert located.record["attributes"] == {"executable": "bench"}


def test_google_benchmark_skipped_failed_and_uncomputed_measure_nothing(tmp_path: Path) -> None:
    def entry(name: str, **fields: Any) -> dict[str, Any]:
        return {"run_name": name, "run_type": "iteration", "time_unit": "ns", **fields}

    benchmarks = [
        entry("BM_ok", real_time=10.0, cpu_time=9.0, ratio="NAN_HERE"),
        entry("BM_gpu", real_time=0.0, cpu_time=0.0, skipped=True, skip_message="no GPU"),
        entry("BM_err", real_time=0.0, cpu_time=0.0, error_occurred=True, error_message="x"),
    ]
    text = orjson.dumps({"context": {"date": "2024-05-01T02:00:00Z"}, "benchmarks": benchmarks})
    # Google Benchmark writes a counter it could not compute as a bare NaN, which JSON has not
    path = tmp_path / "gb.json"
    path.write_bytes(text.replace(b'"NAN_HERE"', b"NaN"))
    records = read_input_file(path).records
    assert [r.record["test"] for r in records] == ["BM_ok"]
    assert set(records[0].record["metrics"]) == {"real_time", "cpu_time"}
    # a time or rate that is no number is named, not dropped with its benchmark or metric
    for key in ("real_time", "cpu_time", "items_per_second"):
        broken = [{**benchmarks[0], key: "fast"}, *benchmarks[1:]]
        path.write_bytes(orjson.dumps({"context": {}, "benchmarks": broken}))
        with pytest.raises(SourceError, match=rf"\$\.benchmarks\[0\]\.{key}: expected a number"):
            read_input_file(path)


def _report(name: str) -> tuple[Any, str]:
    path = REPORTS / name
    return orjson.loads(path.read_bytes()), str(path)


def test_google_benchmark_before_1_4_aggregates_are_known_by_their_names() -> None:
    # Releases before 1.4 write no run_type or aggregate_name: an aggregate is an entry
    # named after its instance with _mean, _median or _stddev appended.
    report, source = _report("google_benchmark_1.3.json")
    records = records_from_google_benchmark(report, source)
    by_test = {r.record["test"]: r.record["metrics"] for r in records}
    assert list(by_test) == ["BM_Hash/1024/repeats:3", "BM_running_mean"]
    hashing = by_test["BM_Hash/1024/repeats:3"]
    assert hashing["real_time"] == {"value": 10111, "unit": "ns", "direction": LOWER}
    assert hashing["bytes_per_second"] == {"value": 101381000, "unit": "B/s", "direction": HIGHER}
    assert hashing["real_time_median"] == {"value": 10110, "unit": "ns", "direction": LOWER}
    assert hashing["cpu_time_stddev"] == {"value": 95, "unit": "ns"}
    # a benchmark whose own name ends in _mean, with no instance beside it, is a benchmark
    assert by_test["BM_running_mean"]["real_time"]["value"] == 312
    _complete_and_validate(records)


def test_google_benchmark_1_4_aggregates_have_a_name_but_no_run_type() -> None:
    report, source = _report("google_benchmark_1.4.json")
    (located,) = records_from_google_benchmark(report, source)
    assert located.record["test"] == "BM_Encode/64"
    metrics = located.record["metrics"]
    assert metrics["real_time"] == {"value": 2810.5, "unit": "ns", "direction": LOWER}
    assert metrics["items_per_second"]["direction"] == HIGHER
    assert metrics["real_time_stddev"] == {"value": 31.2, "unit": "ns"}
    assert located.record["attributes"] == {"executable": "codec_bench"}
    _complete_and_validate([located])


# --- hyperfine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hyperfine_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _tool_reports.hyperfine_reports(tmp_path_factory.mktemp("hyperfine"))


def test_hyperfine_one_record_per_command(hyperfine_reports: dict[str, Path]) -> None:
    path = hyperfine_reports["list"]
    report = orjson.loads(path.read_bytes())
    records = records_from_hyperfine(report, str(path))
    assert [r.record["test"] for r in records] == ["echo a", "echo b"]
    assert [r.record["attributes"] for r in records] == [{"param.word": "a"}, {"param.word": "b"}]
    for located, result in zip(records, report["results"], strict=True):
        metrics = located.record["metrics"]
        assert set(metrics) == {"mean", "stddev", "median", "min", "max", "user", "system"}
        assert metrics["mean"] == {"value": result["mean"], "unit": "s", "direction": LOWER}
        assert "timestamp" not in located.record  # hyperfine writes no time
    _complete_and_validate(records)


def test_hyperfine_single_run_has_no_stddev(hyperfine_reports: dict[str, Path]) -> None:
    path = hyperfine_reports["once"]
    (located,) = records_from_hyperfine(orjson.loads(path.read_bytes()), str(path))
    assert located.record["test"] == "noop"  # the --command-name
    assert "stddev" not in located.record["metrics"]
    assert "attributes" not in located.record


def test_hyperfine_bad_value_names_the_place() -> None:
    report = {"results": [{"command": "a", "mean": 1.0}, {"command": "b", "mean": True}]}
    with pytest.raises(
        SourceError, match=r"h\.json: \$\.results\[1\]\.mean: expected a number, got a boolean"
    ):
        records_from_hyperfine(report, "h.json")


# --- JMH ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jmh_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _tool_reports.jmh_reports(tmp_path_factory.mktemp("jmh"))


def _jmh(path: Path) -> tuple[list[Any], list[Any]]:
    """The report's results and its records."""
    report = orjson.loads(path.read_bytes())
    return report, records_from_jmh(report, str(path))


def test_jmh_one_record_per_benchmark_and_parameters(jmh_reports: dict[str, Path]) -> None:
    report, records = _jmh(jmh_reports["current"])
    assert [(r.position, r.record["test"]) for r in records] == [
        ("$[0]", "org.example.bench.SortBench.sort[order=random,size=1000]"),
        ("$[1]", "org.example.bench.SortBench.sort[order=random,size=100000]"),
        ("$[2]", "org.example.bench.HashBench.murmur"),
        ("$[4]", "org.example.bench.CacheBench.lookup[entries=65536]"),
        ("$[5]", "org.example.bench.StartupBench.loadConfiguration"),
    ]
    sort, primary = records[0].record, report[0]["primaryMetric"]
    assert sort["metrics"]["thrpt"] == {
        "value": primary["score"],
        "unit": "ops/s",
        "direction": HIGHER,
    }
    # the error is a spread, not a measure to judge: its unit, no direction
    assert sort["metrics"]["thrpt_error"] == {"value": primary["scoreError"], "unit": "ops/s"}
    secondary = report[0]["secondaryMetrics"]
    assert sort["metrics"]["gc.alloc.rate.norm"] == {
        "value": secondary["gc.alloc.rate.norm"]["score"],
        "unit": "B/op",
        "direction": LOWER,
    }
    assert sort["metrics"]["gc.count"]["direction"] == LOWER
    assert "gc.time" not in sort["metrics"]  # its score is "NaN"
    assert sort["attributes"] == {
        "threads": "1",
        "jmh_version": "1.37",
        "jdk_version": "17.0.15",
        "vm_name": "OpenJDK 64-Bit Server VM",
        "vm_version": "17.0.15+6-Debian-1deb12u1",
        "param.order": "random",
        "param.size": "1000",
    }
    latency = records[3].record["metrics"]
    assert latency["sample"] == {
        "value": report[4]["primaryMetric"]["score"],
        "unit": "ms/op",
        "direction": LOWER,
    }
    # one single-shot iteration: JMH writes its error as "NaN"
    assert records[4].record["metrics"] == {
        "ss": {"value": report[5]["primaryMetric"]["score"], "unit": "ms/op", "direction": LOWER}
    }
    assert all("timestamp" not in r.record for r in records)  # JMH writes no time
    _complete_and_validate(records)


def test_jmh_modes_of_one_benchmark_share_its_record(jmh_reports: dict[str, Path]) -> None:
    report, records = _jmh(jmh_reports["current"])
    (murmur,) = (r.record for r in records if r.record["test"].endswith("HashBench.murmur"))
    throughput, average = report[2], report[3]
    assert murmur["metrics"]["thrpt"] == {
        "value": throughput["primaryMetric"]["score"],
        "unit": "ops/us",
        "direction": HIGHER,
    }
    assert murmur["metrics"]["avgt"] == {
        "value": average["primaryMetric"]["score"],
        "unit": "ns/op",
        "direction": LOWER,
    }
    # each mode measured its own allocation: the mode tells them apart
    assert (
        murmur["metrics"]["gc.alloc.rate.norm_thrpt"]["value"]
        == (throughput["secondaryMetrics"]["gc.alloc.rate.norm"]["score"])
    )
    assert (
        murmur["metrics"]["gc.alloc.rate.norm_avgt"]["value"]
        == (average["secondaryMetrics"]["gc.alloc.rate.norm"]["score"])
    )
    assert "gc.alloc.rate.norm" not in murmur["metrics"]


def test_jmh_older_layout_and_secondary_directions(jmh_reports: dict[str, Path]) -> None:
    report, (located,) = _jmh(jmh_reports["old"])
    metrics = located.record["metrics"]
    secondary = report[0]["secondaryMetrics"]
    # the middle dot of older releases is dropped: the series goes on across releases
    assert metrics["gc.alloc.rate.norm"] == {
        "value": secondary["\u00b7gc.alloc.rate.norm"]["score"],
        "unit": "B/op",
        "direction": LOWER,
    }
    # beyond the garbage collector's, a secondary metric's sense is not known: no direction
    assert metrics["poll"] == {"value": secondary["poll"]["score"], "unit": "ops/ms"}
    assert metrics["cpi"] == {"value": secondary["\u00b7cpi"]["score"], "unit": "clks/insn"}
    assert located.record["attributes"] == {"threads": "2"}
    _complete_and_validate([located])


def _jmh_result(**fields: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "org.example.Bench.run",
        "mode": "avgt",
        "threads": 1,
        "primaryMetric": {"score": 1.5, "scoreError": 0.1, "scoreUnit": "us/op"},
        "secondaryMetrics": {},
    }
    return {**result, **fields}


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            _jmh_result(primaryMetric={"score": "fast", "scoreUnit": "us/op"}),
            r'\$\[1\]\.primaryMetric\.score: expected a number \(or "NaN", "\+INF", "-INF"\), '
            r'got "fast"',
        ),
        (
            _jmh_result(primaryMetric={"score": 1.0}),
            r"\$\[1\]\.primaryMetric\.scoreUnit: expected a non-empty string, got None",
        ),
        (
            _jmh_result(secondaryMetrics={"gc.count": {"score": None, "scoreUnit": "counts"}}),
            r"\$\[1\]\.secondaryMetrics\['gc\.count'\]\.score: expected a number .*got null",
        ),
        (
            {"benchmark": "org.example.Bench.run", "mode": "avgt"},  # given as --format jmh
            r"\$\[1\]\.primaryMetric: expected an object, got null",
        ),
        (_jmh_result(params=["size"]), r"\$\[1\]\.params: expected an object, got an array"),
        (_jmh_result(mode=7), r"\$\[1\]\.mode: expected a non-empty string, got 7"),
        (
            _jmh_result(mode="thrpt"),
            r"\$\[1\]: a second thrpt result of org\.example\.Bench\.run \(the first is \$\[0\]\)",
        ),
    ],
)
def test_jmh_bad_result_names_the_place(result: dict[str, Any], message: str) -> None:
    first = _jmh_result(mode="thrpt", primaryMetric={"score": 9.0, "scoreUnit": "ops/s"})
    with pytest.raises(SourceError, match=rf"^j\.json: {message}"):
        records_from_jmh([first, result], "j.json")


def test_jmh_benchmark_without_a_score_gives_no_record() -> None:
    unscored = _jmh_result(
        benchmark="org.example.Bench.broken",
        primaryMetric={"score": "NaN", "scoreError": "NaN", "scoreUnit": "us/op"},
        secondaryMetrics={"gc.time": {"score": "+INF", "scoreUnit": "ms"}},
    )
    records = records_from_jmh([unscored, _jmh_result()], "j.json")
    assert [(r.position, r.record["test"]) for r in records] == [("$[1]", "org.example.Bench.run")]


def test_a_report_written_by_jmh_1_37_with_the_gc_profiler() -> None:
    # java -jar benchmarks.jar -f 1 -i 2 -bm thrpt,avgt -prof gc -rf json: a sort of 100
    # and of 1000 ints; two iterations leave JMH no error estimate ("NaN")
    report, source = _report("jmh_1.37_gc_profiler.json")
    records = records_from_jmh(report, source)
    by_test = {r.record["test"]: r.record for r in records}
    assert list(by_test) == [
        "org.sample.MyBenchmark.sort[size=100]",
        "org.sample.MyBenchmark.sort[size=1000]",
    ]
    small = by_test["org.sample.MyBenchmark.sort[size=100]"]
    assert small["metrics"]["thrpt"] == {
        "value": 554579.6528883061,
        "unit": "ops/s",
        "direction": HIGHER,
    }
    assert small["metrics"]["avgt"]["unit"] == "s/op"
    assert small["metrics"]["avgt"]["direction"] == LOWER
    assert "thrpt_error" not in small["metrics"]  # "NaN": no measurement
    assert small["metrics"]["gc.alloc.rate.norm_avgt"] == {
        "value": 416.00836366476096,
        "unit": "B/op",
        "direction": LOWER,
    }
    assert small["attributes"]["param.size"] == "100"
    assert small["attributes"]["jmh_version"] == "1.37"
    assert detect_format(REPORTS / "jmh_1.37_gc_profiler.json") == "jmh"
    _complete_and_validate(records)


def test_a_bare_nan_reads_as_jmhs_quoted_one_and_other_bad_json_is_refused(
    tmp_path: Path,
) -> None:
    # JMH quotes NaN; a report rewritten by a JSON writer that allows bare NaN (Python's)
    # holds the same: no score, so no record
    path = tmp_path / "jmh.json"
    metric = '{"score": NaN, "scoreUnit": "ns/op"}'
    path.write_text(f'[{{"benchmark": "b", "mode": "avgt", "primaryMetric": {metric}}}]')
    assert read_input_file(path).records == []
    path.write_text('[{"benchmark": "b", "mode": "avgt", "primaryMetric": {"score": 1,}}]')
    with pytest.raises(SourceError, match=r"jmh\.json: not valid JSON: .*line 1 column"):
        read_input_file(path)


# --- detection ------------------------------------------------------------------------------


def test_detect_format_of_real_reports(
    pytest_benchmark_report: tuple[Path, str],
    google_benchmark_reports: dict[int, Path],
    hyperfine_reports: dict[str, Path],
    tmp_path: Path,
) -> None:
    assert detect_format(pytest_benchmark_report[0]) == PYTEST_BENCHMARK
    assert detect_format(google_benchmark_reports[3]) == GOOGLE_BENCHMARK
    assert detect_format(hyperfine_reports["list"]) == HYPERFINE
    (tmp_path / "runs.csv").write_text("time,commit,score\n2024-01-01T00:00:00Z,abc,1\n")
    assert detect_format(tmp_path / "runs.csv") == OTAVA_CSV
    record = {
        "schema": "perfwatch.record/v1",
        "test": "t",
        "run_id": "r1",
        "timestamp": "2024-01-01T00:00:00Z",
        "metrics": {"m": 1},
    }
    (tmp_path / "records.json").write_bytes(orjson.dumps([record]))
    assert detect_format(tmp_path / "records.json") == PERFWATCH
    (tmp_path / "records.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    assert detect_format(tmp_path / "records.jsonl") == PERFWATCH


def test_detect_format_of_jmh_reports(jmh_reports: dict[str, Path]) -> None:
    assert detect_format(jmh_reports["current"]) == JMH
    assert detect_format(jmh_reports["old"]) == JMH
    jmh_input = read_input_file(jmh_reports["current"])
    assert jmh_input.format == JMH and jmh_input.names_benchmarks


def test_detect_format_refuses_unknown_json(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(SourceError, match=r"other\.json: not a perfwatch record file.*--format"):
        detect_format(path)
    path.write_text("{not json")
    with pytest.raises(SourceError, match=r"other\.json: not valid JSON"):
        detect_format(path)
    # an array of results is JMH's only when every item is one
    path.write_text('[{"benchmark": "b", "mode": "avgt", "primaryMetric": {}}, {"benchmark": "c"}]')
    with pytest.raises(SourceError, match=r"other\.json: not a perfwatch record file.*JMH"):
        detect_format(path)


def test_csv_rows_become_records(tmp_path: Path) -> None:
    path = tmp_path / "search.csv"
    path.write_text(
        "time,commit,version,throughput,latency\n"
        "2024-01-02T00:00:00Z,bbb,1.1,101,\n"
        "2024-01-01T00:00:00Z,aaa,1.0,100,5.5\n"
    )
    input_file = read_input_file(path)
    assert input_file.format == OTAVA_CSV and not input_file.names_benchmarks
    assert [r.record for r in input_file.records] == [
        {
            "test": "search",
            "commit": "aaa",
            "timestamp": "2024-01-01T00:00:00Z",
            "attributes": {"version": "1.0"},
            "metrics": {"throughput": 100.0, "latency": 5.5},
        },
        {
            "test": "search",
            "commit": "bbb",
            "timestamp": "2024-01-02T00:00:00Z",
            "attributes": {"version": "1.1"},
            "metrics": {"throughput": 101.0},  # the empty cell is not a measurement
        },
    ]


def test_csv_rows_that_cannot_be_told_apart_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.csv"
    path.write_text("time,commit,score\n2024-01-01T00:00:00Z,aaa,1\n2024-01-01T00:00:00Z,aaa,2\n")
    with pytest.raises(SourceError, match="add a run_id column"):
        read_input_file(path)
