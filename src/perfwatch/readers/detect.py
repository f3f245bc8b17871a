"""Which kind of file is this, and its (partial) records.

Formats: perfwatch records (JSON or JSON Lines), Otava-style CSV, the
JSON reports of pytest-benchmark, Google Benchmark, hyperfine and JMH, input-profile
files (one record carrying their per-input profiles), and the counter samples
of one run (Windows perfmon/typeperf/relog CSV, or a plain counter CSV: one row
per sample). The file name's extension decides for
`.csv`, `.tsv`, `.jsonl` and `.ndjson`, except that a CSV whose header is a
perfmon header is perfmon; a JSON document is recognised by its shape. A
plain counter CSV looks like an Otava CSV (a time column, numbers), so it is
read as one only when named (`counters-csv`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA
from perfwatch.readers.errors import SourceError, read_source
from perfwatch.readers.google_benchmark import (
    looks_like_google_benchmark,
    records_from_google_benchmark,
)
from perfwatch.readers.hyperfine import looks_like_hyperfine, records_from_hyperfine
from perfwatch.readers.input_profile import looks_like_input_profile, records_from_input_profile
from perfwatch.readers.jmh import looks_like_jmh, records_from_jmh
from perfwatch.readers.jsonl import read_records
from perfwatch.readers.otava_csv import read_otava_csv
from perfwatch.readers.perfmon_header import starts_like_perfmon
from perfwatch.readers.pytest_benchmark import (
    looks_like_pytest_benchmark,
    records_from_pytest_benchmark,
)
from perfwatch.readers.series import MetricSeries
from perfwatch.readers.tool_json import LocatedRecord, load_json_document

PERFWATCH = "perfwatch"
OTAVA_CSV = "otava-csv"
PYTEST_BENCHMARK = "pytest-benchmark"
GOOGLE_BENCHMARK = "google-benchmark"
HYPERFINE = "hyperfine"
JMH = "jmh"
PERFMON = "perfmon"
COUNTERS_CSV = "counters-csv"
INPUT_PROFILE = "input-profile"
FORMATS = (
    PERFWATCH,
    OTAVA_CSV,
    PYTEST_BENCHMARK,
    GOOGLE_BENCHMARK,
    HYPERFINE,
    JMH,
    PERFMON,
    COUNTERS_CSV,
    INPUT_PROFILE,
)

# Reports of benchmark tools: a recogniser and a converter, tried in this order.
_TOOL_REPORTS: dict[
    str, tuple[Callable[[Any], bool], Callable[[Any, str], list[LocatedRecord]]]
] = {
    PYTEST_BENCHMARK: (looks_like_pytest_benchmark, records_from_pytest_benchmark),
    GOOGLE_BENCHMARK: (looks_like_google_benchmark, records_from_google_benchmark),
    HYPERFINE: (looks_like_hyperfine, records_from_hyperfine),
    JMH: (looks_like_jmh, records_from_jmh),
}


# The tools of those reports, as people call them.
TOOL_NAMES = {
    PYTEST_BENCHMARK: "pytest-benchmark",
    GOOGLE_BENCHMARK: "Google Benchmark",
    HYPERFINE: "hyperfine",
    JMH: "JMH",
}


def benchmark_tool_of(path: str | Path) -> str | None:
    """The tool whose JSON report the file is (its name in TOOL_NAMES), else None: for a
    command that reads another format, to say what it was given instead."""
    try:
        return TOOL_NAMES.get(detect_format(path))
    except SourceError:
        return None


def tool_report_error(path: str | Path, reads: str) -> SourceError | None:
    """The error for a benchmark tool's report (one run's timings) given to a command
    that reads ``reads``; None when the file is no such report."""
    tool = benchmark_tool_of(path)
    if tool is None:
        return None
    return SourceError(path, f"this is a {tool} report (one run's timings); {reads}")


@dataclass(frozen=True)
class InputFile:
    """The records of one file, in file order, some of their identity possibly missing.

    `names_benchmarks`: the tool named each record's test itself (many per
    file), so a test given by the user is a prefix rather than a replacement.
    `validated`: the records passed the record schema as they were read.
    """

    path: str
    format: str
    records: list[LocatedRecord]
    names_benchmarks: bool
    validated: bool = False


def _looks_like_perfwatch(document: Any) -> bool:
    items = document if isinstance(document, list) else [document]
    return bool(items) and all(
        isinstance(item, dict) and item.get("schema") == RECORD_SCHEMA for item in items
    )


def detect_format(path: str | Path) -> str:
    """One of FORMATS, or SourceError saying the file is none of them."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return PERFMON if starts_like_perfmon(read_source(path)) else OTAVA_CSV
    if suffix in (".jsonl", ".ndjson"):
        return PERFWATCH
    document = load_json_document(read_source(path), str(path))
    return _format_of_document(document, str(path))


def _format_of_document(document: Any, source: str) -> str:
    if _looks_like_perfwatch(document):
        return PERFWATCH
    if looks_like_input_profile(document):
        return INPUT_PROFILE
    for name, (recognises, _) in _TOOL_REPORTS.items():
        if recognises(document):
            return name
    raise SourceError(
        source,
        "not a perfwatch record file, input-profile file, Otava CSV, perfmon CSV, or a "
        "pytest-benchmark, Google Benchmark, hyperfine or JMH JSON report; name the format with "
        f"--format ({', '.join(FORMATS)})",
    )


def read_input_file(path: str | Path, file_format: str | None = None) -> InputFile:
    """The records of a file of the given format (detected when None); SourceError on bad input."""
    path = Path(path)
    source = str(path)
    file_format = file_format or detect_format(path)
    if file_format == PERFWATCH:
        records = [
            LocatedRecord(f"line {item.line}", item.record.to_json()) for item in read_records(path)
        ]
        return InputFile(source, file_format, records, names_benchmarks=False, validated=True)
    if file_format == OTAVA_CSV:
        return InputFile(
            source, file_format, records_from_series(read_otava_csv(path)), names_benchmarks=False
        )
    if file_format in (PERFMON, COUNTERS_CSV):
        # the counter readers build the detector's samples (numpy): loaded for them only
        from perfwatch.readers.counter_csv import counter_record, read_counter_csv
        from perfwatch.readers.perfmon_csv import read_perfmon_csv

        if file_format == PERFMON:
            record = counter_record(path, *read_perfmon_csv(path))
        else:
            record = counter_record(path, read_counter_csv(path))
        return InputFile(source, file_format, [record], names_benchmarks=False)
    if file_format == INPUT_PROFILE:
        document = load_json_document(read_source(path), source)
        records = records_from_input_profile(document, source)
        return InputFile(source, file_format, records, names_benchmarks=False)
    if file_format not in _TOOL_REPORTS:
        raise SourceError(source, f"unknown format {file_format!r}; known: {', '.join(FORMATS)}")
    document = load_json_document(read_source(path), source)
    _, convert = _TOOL_REPORTS[file_format]
    return InputFile(source, file_format, convert(document, source), names_benchmarks=True)


def records_from_series(series_list: list[MetricSeries]) -> list[LocatedRecord]:
    """Per-metric series of one file back into one record per run (CSV row), in time order.

    A run is told apart by its time, commit, run id, branch and attributes; two
    rows alike in all of these cannot be, and are refused.
    """
    runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for series in series_list:
        seen: set[tuple[Any, ...]] = set()
        for index, moment in enumerate(series.times):
            attributes = {
                name: label
                for name, values in series.attributes.items()
                if (label := values[index]) is not None
            }
            key = (
                moment,
                series.commits[index],
                series.run_ids[index],
                series.branches[index],
                tuple(sorted(attributes.items())),
            )
            if key in seen:
                raise SourceError(
                    series.source,
                    f"two rows have the same time ({format_rfc3339(moment)}), commit, branch "
                    "and attributes; add a run_id column to tell the runs apart",
                )
            seen.add(key)
            record = runs.setdefault(key, _run_record(series, index, attributes))
            value = float(series.values[index])
            if series.unit is None and series.direction is None:
                record["metrics"][series.metric] = value
            else:
                described = {"value": value, "unit": series.unit, "direction": series.direction}
                record["metrics"][series.metric] = {
                    name: item for name, item in described.items() if item is not None
                }
    ordered = sorted(runs.items(), key=lambda item: item[0][0])  # stable: ties keep file order
    return [
        LocatedRecord(f"row {number} in time order", record)
        for number, (_, record) in enumerate(ordered, start=1)
    ]


def _run_record(series: MetricSeries, index: int, attributes: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {"test": series.test}
    for name, values in (
        ("run_id", series.run_ids),
        ("commit", series.commits),
        ("branch", series.branches),
    ):
        if values[index] is not None:
            record[name] = values[index]
    record["timestamp"] = format_rfc3339(series.times[index])
    if attributes:
        record["attributes"] = attributes
    record["metrics"] = {}
    return record
