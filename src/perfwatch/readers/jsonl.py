"""perfwatch record files: JSON Lines (one record per line; blank lines ignored) or one
JSON document holding a record (a ``.json`` file) or an array of records."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import BinaryIO

import numpy as np

from perfwatch.contract.codec import dumps, loads, parse_record
from perfwatch.contract.models import Record
from perfwatch.contract.validation import RecordError, json_path
from perfwatch.readers.errors import SourceError, read_source, utf8_text
from perfwatch.readers.series import MetricSeries


@dataclass(frozen=True)
class SourcedRecord:
    """A record and the place it was read from."""

    record: Record
    source: str
    line: int
    column: int = 1


def read_records(path: str | Path) -> Iterator[SourcedRecord]:
    """Every record of a file, in file order; SourceError at the first bad one."""
    path = Path(path)
    data = read_source(path)
    text = utf8_text(data, path)  # a byte that is not UTF-8 is located as every reader does
    if path.suffix.lower() == ".json" or data.lstrip()[:1] == b"[":
        yield from _read_document(data, text, str(path))
        return
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except RecordError as error:
            raise _located(error, str(path), number) from None
        yield SourcedRecord(record, str(path), number)


def _located(error: RecordError, source: str, line: int) -> SourceError:
    """A record problem as a file location: the JSON syntax position when known."""
    return SourceError(
        source,
        f"{error.path}: {error.message}" if error.line is None else error.message,
        line=line if error.line is None else line + error.line - 1,
        column=error.column or 1,
    )


def _read_document(data: bytes, text: str, source: str) -> Iterator[SourcedRecord]:
    try:
        doc = loads(data)
    except RecordError as error:
        raise _located(error, source, 1) from None
    if not isinstance(doc, list):
        try:
            yield SourcedRecord(Record.from_json(doc), source, 1)
        except RecordError as error:
            raise SourceError(source, str(error), line=1, column=1) from None
        return
    starts = _array_element_starts(text)
    for index, (item, (line, column)) in enumerate(zip(doc, starts, strict=True)):
        try:
            record = Record.from_json(item)
        except RecordError as error:
            raise SourceError(source, f"[{index}]: {error}", line=line, column=column) from None
        yield SourcedRecord(record, source, line, column)


def _array_element_starts(text: str) -> list[tuple[int, int]]:
    """Line and column where each element of a top-level JSON array begins. Runs only on
    text that already parsed, so it need not handle bad JSON."""
    decoder = json.JSONDecoder()
    starts: list[tuple[int, int]] = []
    position = text.index("[") + 1
    line, line_start = text.count("\n", 0, position) + 1, text.rfind("\n", 0, position) + 1
    while True:
        while text[position] in " \t\r\n,":
            if text[position] == "\n":
                line, line_start = line + 1, position + 1
            position += 1
        if text[position] == "]":
            return starts
        starts.append((line, position - line_start + 1))
        _, end = decoder.raw_decode(text, position)
        line += text.count("\n", position, end)
        if line > starts[-1][0]:
            line_start = text.rfind("\n", position, end) + 1
        position = end


def write_records(records: Iterable[Record], destination: BinaryIO) -> None:
    """Write records as JSON Lines."""
    for record in records:
        destination.write(dumps(record) + b"\n")


def records_to_series(
    records: Iterable[SourcedRecord],
    *,
    metrics: Collection[str] | None = None,
    keep_missing: bool = False,
) -> list[MetricSeries]:
    """One MetricSeries per test and metric (only ``metrics`` when given), runs in time
    order. A run id seen before for the same test is a redelivery and is skipped. The
    direction and unit are the latest run's that declares one; runs that declare
    different units are refused (SourceError at the first). A run of the test without
    the metric is left out of that metric's series, or kept with a NaN value when
    ``keep_missing`` is true (as a blank CSV cell then is)."""
    runs_by_test: dict[str, list[SourcedRecord]] = {}
    seen_runs: set[tuple[str, str]] = set()
    # Where each series first appears in reading order: where its problems are reported.
    defined_at: dict[tuple[str, str], SourcedRecord] = {}
    for sourced in records:
        test = sourced.record.test
        if (test, sourced.record.run_id) in seen_runs:
            continue
        seen_runs.add((test, sourced.record.run_id))
        runs_by_test.setdefault(test, []).append(sourced)
        for name in sourced.record.metrics:
            if metrics is None or name in metrics:
                defined_at.setdefault((test, name), sourced)
    for runs in runs_by_test.values():
        runs.sort(key=lambda sourced: sourced.record.timestamp)
    return [
        _metric_series(
            metric,
            [run for run in runs_by_test[test] if keep_missing or metric in run.record.metrics],
            first,
        )
        for (test, metric), first in defined_at.items()
    ]


def _check_one_unit(metric: str, runs: list[SourcedRecord]) -> None:
    """SourceError at the first run whose unit differs from an earlier run's: values in
    two units (a benchmark moved from ns to us) would be one series' step of 1000x."""
    unit = None
    for run in runs:
        value = run.record.metrics.get(metric)
        if value is None or value.unit is None:
            continue
        if unit is not None and value.unit != unit:
            raise SourceError(
                run.source,
                f"{json_path(('metrics', metric, 'unit'))}: run {run.record.run_id!r} of test "
                f"{run.record.test!r} gives it in {value.unit!r}, earlier runs in {unit!r}: "
                "values in two units are no history; convert the values of one part, or "
                "record the metric under a new name from the change on",
                line=run.line,
                column=run.column,
            )
        unit = value.unit


def _metric_series(metric: str, runs: list[SourcedRecord], first: SourcedRecord) -> MetricSeries:
    """The series of ``metric`` over ``runs``; NaN for a run without it."""
    _check_one_unit(metric, runs)
    found = [run.record.metrics.get(metric) for run in runs]
    values = [value for value in found if value is not None]
    attribute_names = dict.fromkeys(name for run in runs for name in run.record.attributes)
    return MetricSeries(
        test=first.record.test,
        metric=metric,
        times=[run.record.timestamp.astimezone(UTC) for run in runs],
        values=np.array(
            [np.nan if value is None else value.value for value in found], dtype=np.float64
        ),
        commits=[run.record.commit for run in runs],
        run_ids=[run.record.run_id for run in runs],
        branches=[run.record.branch for run in runs],
        attributes={
            name: [run.record.attributes.get(name) for run in runs] for name in attribute_names
        },
        direction=next((v.direction for v in reversed(values) if v.direction), None),
        unit=next((v.unit for v in reversed(values) if v.unit), None),
        source=first.source,
        line=first.line,
        column=first.column,
    )
