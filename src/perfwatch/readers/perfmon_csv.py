"""Windows performance-monitor CSV, as written by ``typeperf -f CSV``, ``relog -f csv``
and perfmon (``typeperf -f TSV`` and ``relog -f tsv``: the same with tabs).

The header's first cell names the format and time zone, ``(PDH-CSV 4.0) (GMT Standard
Time)(0)``; every other cell is a counter path ``\\\\HOST\\Object(instance)\\Counter``.
Each row is one sample: a timestamp, then one cell per counter, every cell quoted. A
blank or ``" "`` cell is a missing sample (relog writes one for a rate counter's first
sample and whenever a counter could not be read). typeperf's console output redirected
to a file ends with status lines ("Exiting, please wait...", "The command completed
successfully."): short rows after the samples that start with no timestamp, skipped.

Names are made canonical (``counter_names``): when every counter comes from the same
host the ``\\\\HOST`` prefix is dropped, so runs recorded on different machines, and
plain CSV or records of the same counters, compare by counter name.

``csv_rows`` and ``parse_samples`` also serve the plain counter CSV reader.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from perfwatch.detectors.counters import CounterSamples
from perfwatch.readers.counter_names import (
    canonical_counter_names,
    first_duplicate,
    is_counter_path,
)
from perfwatch.readers.errors import SourceError, read_source, utf8_text
from perfwatch.readers.perfmon_header import (
    PDH_MARKER,
    PDH_MARKERS,
    PDH_TSV_MARKER,
    first_header_text,
)

MISSING_CELLS = {"", "nan", "null", "na"}  # after stripping, case-insensitive
_DECIMAL_COMMA = re.compile(r"[-+]?\d*,\d+")


def is_perfmon_header(rows: list[tuple[int, list[str]]]) -> bool:
    """Whether a CSV file's rows (from ``csv_rows``) start with a perfmon CSV header."""
    return bool(rows) and bool(rows[0][1]) and rows[0][1][0].startswith(PDH_MARKERS)


def read_perfmon_csv(path: str | Path) -> tuple[CounterSamples, datetime | None]:
    """The counter samples of one perfmon CSV file and when its first one was taken (UTC,
    None if the file does not say); SourceError naming the line and column of the first
    problem."""
    path = Path(path)
    rows = csv_rows(path)
    return perfmon_samples(path, rows), perfmon_start(rows)


def perfmon_samples(path: Path, rows: list[tuple[int, list[str]]]) -> CounterSamples:
    """The counter samples of a perfmon CSV file's rows (from ``csv_rows``)."""
    if not rows:
        raise SourceError(path, "empty file: expected a perfmon CSV header", line=1)
    line, header = rows[0]
    if not header or not header[0].startswith(PDH_MARKERS):
        raise SourceError(
            path,
            f"not a perfmon CSV file: the first header cell should start with {PDH_MARKER!r}",
            line=line,
            column=1,
        )
    paths = [_counter_path(path, line, column, cell) for column, cell in enumerate(header[1:], 2)]
    if not paths:
        raise SourceError(path, "the header names no counter", line=line)
    names = canonical_counter_names(paths)
    duplicate = first_duplicate(names)
    if duplicate is not None:
        column = duplicate[1] + 2
        raise SourceError(
            path, f"counter {header[column - 1]!r} appears twice", line=line, column=column
        )
    samples = rows[1:]
    while samples and _is_status_line(samples[-1][1], len(header)):
        samples = samples[:-1]
    values = []
    for line, row in samples:
        if len(row) != len(header):
            raise SourceError(
                path, f"{len(row)} cells, but the header has {len(header)}", line=line
            )
        values.append(parse_samples(path, line, row, range(1, len(row))))
    if not values:
        raise SourceError(path, "no samples after the header", line=rows[0][0] + 1)
    return CounterSamples(names, np.array(values), label=str(path))


# The header's last parentheses hold the time zone's bias when the log started: minutes
# to add to the local sample times for UTC ((GMT Standard Time)(-60) in summer time).
_BIAS = re.compile(r"\((?P<minutes>[-+]?\d+)\)\s*$")
_SAMPLE_TIME = "%m/%d/%Y %H:%M:%S.%f"  # PDH writes US month/day order on every locale


def perfmon_start(rows: list[tuple[int, list[str]]]) -> datetime | None:
    """When a perfmon log's first sample was taken, in UTC, from its header's bias and the
    sample's local time; None when either cannot be read (a hand-edited file)."""
    if len(rows) < 2 or not rows[0][1] or not rows[1][1]:
        return None
    bias = _BIAS.search(rows[0][1][0])
    if bias is None:
        return None
    try:
        local = datetime.strptime(rows[1][1][0].strip(), _SAMPLE_TIME)
    except ValueError:
        return None
    return (local + timedelta(minutes=int(bias["minutes"]))).replace(tzinfo=UTC)


def _is_status_line(row: list[str], width: int) -> bool:
    """A line typeperf prints after its samples: shorter than a sample row, no time."""
    return len(row) < width and not row[0].strip()[:1].isdigit()


def csv_rows(path: Path) -> list[tuple[int, list[str]]]:
    """A CSV file's non-blank rows with their 1-based line numbers; SourceError when
    the file cannot be read as CSV text."""
    text = utf8_text(read_source(path), path)
    delimiter = _delimiter(first_header_text(text))
    # newline="" as csv wants: quoted cells may hold line breaks of their own
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        return [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except csv.Error as error:
        raise SourceError(path, f"malformed CSV: {error}") from None


def _delimiter(header_text: str) -> str:
    """Comma, unless the header line has none but semicolons (as spreadsheets write where
    the decimal mark is a comma) or tabs; a perfmon TSV header: tab."""
    if header_text.startswith(PDH_TSV_MARKER):
        return "\t"
    header_line = header_text.split("\n", 1)[0]
    if "," in header_line:
        return ","
    return max((",", ";", "\t"), key=header_line.count)


def _counter_path(path: Path, line: int, column: int, cell: str) -> str:
    if not is_counter_path(cell):
        raise SourceError(
            path,
            f"header cell {cell!r} is not a counter path like \\\\HOST\\Object(instance)\\Counter",
            line=line,
            column=column,
        )
    return cell


def parse_samples(
    path: Path, line: int, row: list[str], columns: Sequence[int], names: Sequence[str] = ()
) -> list[float]:
    """The samples in ``row[c]`` for each column index c, as ``parse_sample`` reads them
    (``names``: the counter of each, for messages)."""
    try:
        # the common row, every cell a finite number, without a call per cell
        values = [float(row[c]) for c in columns]
        if math.isfinite(sum(values)):
            return values
    except ValueError:
        pass
    return [
        parse_sample(path, line, c + 1, row[c], names[k] if names else "")
        for k, c in enumerate(columns)
    ]


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
        hint = "; write numbers with a decimal point" if _DECIMAL_COMMA.fullmatch(text) else ""
        raise SourceError(
            path, f"not a number: {cell!r}{about}{hint}", line=line, column=column
        ) from None
    if math.isinf(value):
        raise SourceError(path, f"infinite value: {cell!r}{about}", line=line, column=column)
    return value
