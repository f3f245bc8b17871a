"""Counter samples from files: plain CSV with a time column, and (through
``read_counter_runs``) every format ``perfwatch compare`` accepts.

Plain CSV: a header row, a time column (the first column unless named), then one column
per counter; one row per sample. Cells are separated by commas, or by semicolons or tabs
when the header line has no comma. Empty cells, ``NaN`` and ``null`` are missing samples.
The time values are not interpreted: rows are samples in file order. Counter names are
made canonical as in every counter format (``counter_names``: a common ``\\\\HOST`` prefix
of Windows counter paths is dropped), so a plain CSV export, a perfmon or typeperf file
and a record of the same counters compare with each other.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.detectors.counters import CounterSamples
from perfwatch.readers.counter_names import canonical_counter_names, first_duplicate
from perfwatch.readers.errors import SourceError
from perfwatch.readers.jsonl import read_records
from perfwatch.readers.perfmon_csv import (
    csv_rows,
    is_perfmon_header,
    parse_samples,
    perfmon_samples,
)
from perfwatch.readers.tool_json import LocatedRecord


def read_counter_csv(path: str | Path, *, time_column: str | None = None) -> CounterSamples:
    """The counter samples of one plain CSV file; SourceError naming the line and
    column of the first problem."""
    path = Path(path)
    return counter_samples(path, csv_rows(path), time_column=time_column)


def counter_samples(
    path: Path, rows: list[tuple[int, list[str]]], *, time_column: str | None = None
) -> CounterSamples:
    """The counter samples of a plain CSV file's rows (from ``csv_rows``)."""
    if not rows:
        raise SourceError(path, "empty file: expected a header row", line=1)
    header_line, header = rows[0]
    header = [cell.strip() for cell in header]
    if time_column is None:
        time_index = 0
    elif time_column in header:
        time_index = header.index(time_column)
    else:
        raise SourceError(path, f"no column named {time_column!r} in the header", line=header_line)
    counters = [i for i in range(len(header)) if i != time_index]
    if not counters:
        raise SourceError(
            path, "the header has a time column but no counter column", line=header_line
        )
    for i in counters:
        if not header[i]:
            raise SourceError(path, "empty counter name", line=header_line, column=i + 1)
    raw_names = [header[i] for i in counters]
    names = canonical_counter_names(raw_names)
    duplicate = first_duplicate(names)
    if duplicate is not None:
        first, second = counters[duplicate[0]] + 1, counters[duplicate[1]] + 1
        raise SourceError(
            path,
            f"counter {names[duplicate[1]]!r} appears twice (columns {first} and {second})",
            line=header_line,
            column=second,
        )
    values = []
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise SourceError(
                path, f"{len(row)} cells, but the header has {len(header)}", line=line
            )
        values.append(parse_samples(path, line, row, counters, raw_names))
    if not values:
        raise SourceError(path, "no samples after the header", line=header_line + 1)
    return CounterSamples(names, np.array(values), label=str(path))


def read_counter_runs(path: str | Path) -> list[CounterSamples]:
    """Every run in a file: one for a CSV file (plain or perfmon), one per record with
    ``counters`` for perfwatch JSON (``.json``: a record or an array of records;
    ``.jsonl``: one record per line)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".blg":
        raise SourceError(path, "binary perfmon log: convert it first with `relog FILE -f csv`")
    if suffix in (".json", ".jsonl", ".ndjson"):
        return _record_runs(path)
    rows = csv_rows(path)
    if is_perfmon_header(rows):
        return [perfmon_samples(path, rows)]
    return [counter_samples(path, rows)]


def _record_runs(path: Path) -> list[CounterSamples]:
    runs = []
    for sourced in read_records(path):
        counters = sourced.record.counters
        if counters is None:
            raise SourceError(
                path,
                f"record {sourced.record.run_id!r} has no counters",
                line=sourced.line,
                column=sourced.column,
            )
        names = canonical_counter_names(counters.names)
        duplicate = first_duplicate(names)
        if duplicate is not None:
            raise SourceError(
                path,
                f"record {sourced.record.run_id!r}: counters {counters.names[duplicate[0]]!r} "
                f"and {counters.names[duplicate[1]]!r} are the same counter",
                line=sourced.line,
                column=sourced.column,
            )
        runs.append(
            CounterSamples(
                names,
                counters.matrix(),
                label=f"{path}:{sourced.line} (run {sourced.record.run_id})",
            )
        )
    if not runs:
        raise SourceError(path, "no record in the file")
    return runs


def counter_record(
    path: str | Path, samples: CounterSamples, started: datetime | None = None
) -> LocatedRecord:
    """One run's counter samples as a partial record for ``perfwatch publish``: the
    file name without its extension as test id, the time of the first sample when the
    file says it (``started``), no metrics, the samples as ``counters`` (NaN as null).
    The rest of the identity comes from ``complete_record``."""
    values: list[list[Any]] = samples.values.tolist()
    for row in values:
        for i, value in enumerate(row):
            if value != value:  # NaN: a sample that was not recorded
                row[i] = None
    record: dict[str, Any] = {"test": Path(path).stem}
    if started is not None:
        record["timestamp"] = format_rfc3339(started)
    record["metrics"] = {}
    record["counters"] = {"names": list(samples.names), "values": values}
    return LocatedRecord("samples", record)
