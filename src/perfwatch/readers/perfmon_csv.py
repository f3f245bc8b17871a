"""Windows performance-monitor CSV, as written by ``typeperf -f CSV`` and ``relog -f csv``.

The header's first cell names the format and time zone, ``(PDH-CSV 4.0) (GMT Standard
Time)(0)``; every other cell is a counter path ``\\\\HOST\\Object(instance)\\Counter``.
Each row is one sample: a timestamp, then one cell per counter, every cell quoted. A
blank or ``" "`` cell is a missing sample (relog writes one for a rate counter's first
sample and whenever a counter could not be read).

When every counter comes from the same host the ``\\\\HOST`` prefix is dropped, so runs
recorded on different machines compare by counter name.

``csv_rows`` and ``parse_sample`` also serve the plain counter CSV reader.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from perfwatch.detectors.counters import CounterSamples
from perfwatch.readers.errors import SourceError, read_source

PDH_MARKER = "(PDH-CSV"
MISSING_CELLS = {"", "nan", "null", "na"}  # after stripping, case-insensitive


def is_perfmon_header(rows: list[tuple[int, list[str]]]) -> bool:
    """Whether a CSV file's rows (from ``csv_rows``) start with a perfmon CSV header."""
    return bool(rows) and bool(rows[0][1]) and rows[0][1][0].startswith(PDH_MARKER)


def read_perfmon_csv(path: str | Path) -> CounterSamples:
    """The counter samples of one perfmon CSV file; SourceError naming the line and
    column of the first problem."""
    path = Path(path)
    return perfmon_samples(path, csv_rows(path))


def perfmon_samples(path: Path, rows: list[tuple[int, list[str]]]) -> CounterSamples:
    """The counter samples of a perfmon CSV file's rows (from ``csv_rows``)."""
    if not rows:
        raise SourceError(path, "empty file: expected a perfmon CSV header", line=1)
    line, header = rows[0]
    if not header or not header[0].startswith(PDH_MARKER):
        raise SourceError(
            path,
            f"not a perfmon CSV file: the first header cell should start with {PDH_MARKER!r}",
            line=line,
            column=1,
        )
    names = [_counter_path(path, line, column, cell) for column, cell in enumerate(header[1:], 2)]
    if not names:
        raise SourceError(path, "the header names no counter", line=line)
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        column = next(i for i, name in enumerate(names, 2) if name in duplicates)
        raise SourceError(
            path, f"counter {header[column - 1]!r} appears twice", line=line, column=column
        )
    values = []
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise SourceError(
                path, f"{len(row)} cells, but the header has {len(header)}", line=line
            )
        values.append(
            [parse_sample(path, line, column, cell) for column, cell in enumerate(row[1:], 2)]
        )
    if not values:
        raise SourceError(path, "no samples after the header", line=rows[0][0] + 1)
    return CounterSamples(_without_common_host(names), np.array(values), label=str(path))


def csv_rows(path: Path) -> list[tuple[int, list[str]]]:
    """A CSV file's non-blank rows with their 1-based line numbers; SourceError when
    the file cannot be read as CSV text."""
    try:
        text = read_source(path).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SourceError(path, f"not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    # newline="" as csv wants: quoted cells may hold line breaks of their own
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except csv.Error as error:
        raise SourceError(path, f"malformed CSV: {error}") from None


def _counter_path(path: Path, line: int, column: int, cell: str) -> str:
    if not cell.startswith("\\\\") or cell.count("\\") < 4:
        raise SourceError(
            path,
            f"header cell {cell!r} is not a counter path like \\\\HOST\\Object(instance)\\Counter",
            line=line,
            column=column,
        )
    return cell


def parse_sample(path: Path, line: int, column: int, cell: str, counter: str = "") -> float:
    """One cell as a sample: NaN when missing (blank, NaN, null, NA); SourceError at
    the cell when it is not a finite number."""
    text = cell.strip()
    if text.lower() in MISSING_CELLS:
        return math.nan
    about = f" (counter {counter!r})" if counter else ""
    try:
        value = float(text)
    except ValueError:
        raise SourceError(
            path, f"not a number: {cell!r}{about}", line=line, column=column
        ) from None
    if math.isinf(value):
        raise SourceError(path, f"infinite value: {cell!r}{about}", line=line, column=column)
    return value


def _without_common_host(names: list[str]) -> list[str]:
    """Drop the \\\\HOST prefix when every counter has the same host."""
    hosts = {name[2:].split("\\", 1)[0].lower() for name in names}
    if len(hosts) != 1:
        return names
    return ["\\" + name[2:].split("\\", 1)[1] for name in names]
