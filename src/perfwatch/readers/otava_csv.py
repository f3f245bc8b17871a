"""Otava-style CSV: one row per run, a time column, optional commit/version/branch/run_id
columns, metric columns (numbers) and attribute columns (text; a version column is always one).

Detected rather than configured: the separator (the most frequent of ``, ; TAB |`` in the
header), the time column (named time/timestamp/date/datetime, else the first column),
the time format (the first of ``TIME_FORMATS`` that reads every time) and which columns
are metrics (those whose first non-empty cell is a number). An empty metric cell means
the run did not measure that metric: the run is left out of that metric's series, or, with
``keep_missing`` (Apache Otava's reading, for ``--compat otava``), kept with a NaN value.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from perfwatch.contract.validation import MAX_METRIC_MAGNITUDE, beyond_metric_bound
from perfwatch.readers.errors import SourceError, read_source, utf8_text
from perfwatch.readers.series import MetricSeries

SEPARATORS = (",", ";", "\t", "|")
TIME_COLUMN_NAMES = ("time", "timestamp", "date", "datetime")
IDENTITY_COLUMNS = ("commit", "branch", "run_id")
# Epoch values at or above this are milliseconds (1e11 s is the year 5138).
EPOCH_MILLISECONDS_FROM = 1e11


@dataclass(frozen=True)
class TimeFormat:
    name: str
    parse: Callable[[str], datetime]


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _iso(text: str) -> datetime:
    return _utc(datetime.fromisoformat(text))


def _epoch(scale: float, accept: Callable[[float], bool]) -> Callable[[str], datetime]:
    def parse(text: str) -> datetime:
        number = float(text)
        if not math.isfinite(number) or not accept(number):
            raise ValueError(text)
        return datetime.fromtimestamp(number / scale, tz=UTC)

    return parse


def _strptime(pattern: str) -> Callable[[str], datetime]:
    return lambda text: _utc(datetime.strptime(text, pattern))


# Tried in order; with day and month both <= 12 everywhere, month-first wins.
TIME_FORMATS: tuple[TimeFormat, ...] = (
    TimeFormat("ISO 8601", _iso),
    TimeFormat("epoch seconds", _epoch(1.0, lambda n: abs(n) < EPOCH_MILLISECONDS_FROM)),
    TimeFormat("epoch milliseconds", _epoch(1e3, lambda n: abs(n) >= EPOCH_MILLISECONDS_FROM)),
    *(
        TimeFormat(pattern, _strptime(pattern))
        for pattern in (
            "%Y/%m/%d %H:%M:%S",
            "%Y/%m/%d %H:%M",
            "%Y/%m/%d",
            # Apache Otava's example data: 2024.01.01 3:00:00 +0100
            "%Y.%m.%d %H:%M:%S %z",
            "%Y.%m.%d %H:%M:%S",
            "%Y.%m.%d",
            "%d.%m.%Y %H:%M:%S",
            "%d.%m.%Y %H:%M",
            "%d.%m.%Y",
            "%m/%d/%Y %H:%M:%S",
            "%m/%d/%Y %H:%M",
            "%m/%d/%Y",
            "%d/%m/%Y %H:%M:%S",
            "%d/%m/%Y %H:%M",
            "%d/%m/%Y",
            "%a, %d %b %Y %H:%M:%S %z",
            "%d %b %Y %H:%M:%S",
        )
    ),
)


def detect_separator(header_line: str) -> str:
    """The candidate separator occurring most often in the header (comma when none does)."""
    counts = [header_line.count(candidate) for candidate in SEPARATORS]
    best = max(range(len(SEPARATORS)), key=lambda i: (counts[i], -i))
    return SEPARATORS[best] if counts[best] else ","


@dataclass(frozen=True)
class _Table:
    """The rows of a file split into cells (not stripped), with the line each row ends on."""

    header: list[str]
    header_line: int
    rows: list[list[str]]
    row_lines: list[int]


def read_otava_csv(
    path: str | Path,
    *,
    time_column: str | None = None,
    separator: str | None = None,
    metrics: Collection[str] | None = None,
    keep_missing: bool = False,
) -> list[MetricSeries]:
    """One MetricSeries per metric column of the file (only ``metrics`` when given; those
    missing from the file are skipped), runs sorted by time. The test is the file name
    without its extension. SourceError names line and column of any bad cell. A run with
    an empty cell is left out of that metric's series, or kept with a NaN value when
    ``keep_missing`` is true.

    Cells are handled a column at a time (a metric column is converted in one pass, and
    only a column that fails it is read cell by cell to find the bad one), so a file of
    thousands of runs and hundreds of metrics reads in a fraction of a second."""
    source = str(path)
    table = _split_rows(_read_text(Path(path)), separator, source)
    header, header_line, row_lines = table.header, table.header_line, table.row_lines
    columns = list(zip(*table.rows, strict=True))  # every row has the header's width
    time_index = _time_column_index(header, time_column, source, header_line)
    times = _parse_times(
        columns[time_index], row_lines, time_index + 1, header[time_index], source, time_column
    )
    order = sorted(range(len(times)), key=times.__getitem__)  # stable: ties keep file order
    if order == list(range(len(times))):
        order_or_none = None
    else:
        order_or_none = order
        times = [times[i] for i in order]
    lowered = [name.lower() for name in header]

    def in_run_order(index: int) -> list[str | None]:
        labels = [cell.strip() or None for cell in columns[index]]
        return labels if order_or_none is None else [labels[i] for i in order_or_none]

    identity: dict[str, list[str | None]] = {
        name: in_run_order(lowered.index(name)) if name in lowered else [None] * len(times)
        for name in IDENTITY_COLUMNS
    }
    candidates = [
        i for i, name in enumerate(lowered) if i != time_index and name not in IDENTITY_COLUMNS
    ]
    numeric = {i for i in candidates if lowered[i] != "version" and _looks_numeric(columns[i])}
    metric_indexes = [
        i for i in candidates if (header[i] in metrics if metrics is not None else i in numeric)
    ]
    attributes = {
        header[i]: in_run_order(i)
        for i in candidates
        if i not in metric_indexes and i not in numeric
    }
    test = Path(path).stem
    series = []
    for index in metric_indexes:
        values, present = _metric_values(
            columns[index], row_lines, order_or_none, index + 1, header[index], source
        )
        if present is not None and keep_missing:
            kept = np.full(len(times), np.nan)
            kept[present] = values
            values, present = kept, None
        if present is None:  # every run measured it: the run lists are shared, not copied
            kept_times, kept_identity, kept_attributes = times, identity, attributes
        else:
            kept_times = [times[i] for i in present]
            kept_identity = {
                name: [labels[i] for i in present] for name, labels in identity.items()
            }
            kept_attributes = {
                name: [labels[i] for i in present] for name, labels in attributes.items()
            }
        series.append(
            MetricSeries(
                test=test,
                metric=header[index],
                times=kept_times,
                values=values,
                commits=kept_identity["commit"],
                run_ids=kept_identity["run_id"],
                branches=kept_identity["branch"],
                attributes=kept_attributes,
                source=source,
                line=header_line,
                column=index + 1,
            )
        )
    return series


def _split_rows(text: str, separator: str | None, source: str) -> _Table:
    """Header and data rows (blank rows skipped); SourceError for a file without data rows,
    a bad header or a row whose field count differs from the header's."""
    header_text = next((line for line in text.splitlines() if line.strip()), None)
    if header_text is None:
        raise SourceError(source, "file is empty; expected a header row and data rows", line=1)
    sep = separator or detect_separator(header_text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    header: list[str] = []
    header_line = 0
    rows: list[list[str]] = []
    row_lines: list[int] = []
    try:
        for row in reader:
            if not "".join(row).strip():
                continue
            if not header:
                header = [name.strip() for name in row]
                header_line = reader.line_num
            else:
                rows.append(row)
                row_lines.append(reader.line_num)
    except csv.Error as error:
        raise SourceError(source, f"malformed CSV: {error}", line=reader.line_num) from None
    _check_header(header, source, header_line)
    if not rows:
        raise SourceError(source, "no data rows after the header", line=header_line + 1)
    width = len(header)
    for line, row in zip(row_lines, rows, strict=True):
        if len(row) != width:
            raise SourceError(
                source,
                f"row has {len(row)} fields but the header has {width} (separator {sep!r})",
                line=line,
                column=min(len(row), width) + 1,
            )
    return _Table(header, header_line, rows, row_lines)


def _read_text(path: Path) -> str:
    return utf8_text(read_source(path), path)


def _check_header(header: list[str], source: str, line: int) -> None:
    first_column: dict[str, int] = {}
    for index, name in enumerate(header):
        if not name:
            raise SourceError(
                source, f"column {index + 1} has no name", line=line, column=index + 1
            )
        if name in first_column:
            raise SourceError(
                source,
                f"duplicate column name {name!r} (also column {first_column[name] + 1})",
                line=line,
                column=index + 1,
            )
        first_column[name] = index


def _time_column_index(header: list[str], requested: str | None, source: str, line: int) -> int:
    if requested is not None:
        if requested not in header:
            raise SourceError(
                source,
                f"no time column {requested!r}; columns are {', '.join(header)}",
                line=line,
            )
        return header.index(requested)
    lowered = [name.lower() for name in header]
    return next((lowered.index(name) for name in TIME_COLUMN_NAMES if name in lowered), 0)


def _parse_times(
    cells: Sequence[str],
    row_lines: Sequence[int],
    column: int,
    name: str,
    source: str,
    requested: str | None,
) -> list[datetime]:
    """Times of every row with the first format in TIME_FORMATS that reads them all."""
    texts = [cell.strip() for cell in cells]
    furthest = (-1, TIME_FORMATS[0])
    for time_format in TIME_FORMATS:
        parsed: list[datetime] = []
        for text in texts:
            try:
                parsed.append(time_format.parse(text))
            except (ValueError, OverflowError, OSError):
                break
        if len(parsed) == len(texts):
            return parsed
        furthest = max(furthest, (len(parsed), time_format), key=lambda pair: pair[0])
    read, time_format = furthest
    bad = texts[read]
    if not bad:
        problem = f"empty time in column {name!r}"
    elif read > 0:
        problem = f"unparsable time {bad!r} in column {name!r} (earlier rows: {time_format.name})"
    else:
        problem = (
            f"unparsable time {bad!r} in column {name!r}; expected ISO 8601 "
            "(2024-05-01T02:00:00Z), epoch seconds or milliseconds, or a common date format"
        )
    if requested is None and name.lower() not in TIME_COLUMN_NAMES:
        problem += "; no column is named time/timestamp/date, so the first column was taken"
    raise SourceError(source, problem, line=row_lines[read], column=column)


# Cells that spreadsheets, shell scripts and numpy write for a value that was not measured:
# a run without the metric, like an empty cell (compared in lower case).
MISSING_MARKERS = frozenset({"na", "n/a", "-", "null", "nan"})


def _measured(cell: str) -> str:
    """The cell's text, empty for a value that was not measured."""
    text = cell.strip()
    return "" if text.lower() in MISSING_MARKERS else text


def _looks_numeric(cells: Sequence[str]) -> bool:
    first = next((text for cell in cells if (text := _measured(cell))), None)
    if first is None:
        return False
    try:
        float(first)
    except ValueError:
        return False
    return True


def _metric_values(
    cells: Sequence[str],
    row_lines: Sequence[int],
    order: Sequence[int] | None,
    column: int,
    name: str,
    source: str,
) -> tuple[np.ndarray, list[int] | None]:
    """The values of a metric column in run order (``order``: file rows in run order, None
    when the file is in run order) and, when some runs have no value, the run positions of
    those that do (None when every run has one)."""
    try:
        values: np.ndarray | None = np.fromiter(map(float, cells), np.float64, len(cells))
    except ValueError:
        values = None  # an empty or bad cell: the cell-by-cell pass below finds which
    # within the bound, hence finite (NaN compares false)
    if values is not None and (np.abs(values) <= MAX_METRIC_MAGNITUDE).all():
        return (values if order is None else values[np.asarray(order, dtype=np.intp)]), None
    rows = range(len(cells)) if order is None else order
    present: list[int] = []
    numbers: list[float] = []
    for position, row in enumerate(rows):
        text = _measured(cells[row])
        if text:
            present.append(position)
            numbers.append(_parse_number(text, row_lines[row], column, name, source))
    return np.array(numbers, dtype=np.float64), present


def _parse_number(text: str, line: int, column: int, name: str, source: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise SourceError(
            source,
            f"unparsable number {text!r} in metric column {name!r}",
            line=line,
            column=column,
        ) from None
    if not math.isfinite(number):
        raise SourceError(
            source,
            f"non-finite value {text!r} in metric column {name!r}",
            line=line,
            column=column,
        )
    if abs(number) > MAX_METRIC_MAGNITUDE:
        raise SourceError(
            source,
            beyond_metric_bound(f"value {number:.6g} in metric column {name!r}"),
            line=line,
            column=column,
        )
    return number
