"""Shared pieces of the converters for benchmark tools' JSON reports.

The converters turn a tool's report into *partial* records: test, metrics and
whatever identity the report itself carries (commit, branch, timestamp).
Identity the report lacks (run id, commit from CI, ...) is filled in later by
`perfwatch.adapters.identity`, and the result is validated against the record
schema before anything is sent.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.readers.errors import SourceError, utf8_text

LOWER_IS_BETTER = "lower_is_better"
HIGHER_IS_BETTER = "higher_is_better"


class LocatedRecord(NamedTuple):
    """A (partial) record and where in its input file it came from."""

    position: str
    record: dict[str, Any]


def load_json_document(data: bytes, source: str) -> Any:
    """The report's document. Bare NaN and Infinity, which JSON has not but some tools
    write (Google Benchmark for a counter it could not compute, Python's json module),
    are read as floats: a converter drops or refuses them by name."""
    text = utf8_text(data, source)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as error:
        try:
            return json.loads(text)
        except ValueError:
            raise SourceError(source, f"not valid JSON: {error}") from None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def expect_object(value: Any, source: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SourceError(source, f"{path}: expected an object, got {_type_name(value)}")
    return value


def expect_array(value: Any, source: str, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise SourceError(source, f"{path}: expected an array, got {_type_name(value)}")
    return value


def expect_string(value: Any, source: str, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise SourceError(source, f"{path}: expected a non-empty string, got {value!r}")
    return value


def is_number(value: Any) -> bool:
    # JSON booleans arrive as Python bools, which are ints; they are not measurements.
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def expect_number(value: Any, source: str, path: str) -> float | int:
    if not is_number(value):
        raise SourceError(source, f"{path}: expected a number, got {_type_name(value)}")
    return value


def metric(value: float | int, unit: str | None = None, direction: str | None = None) -> Any:
    """A record metric: the bare number when nothing else is known about it."""
    if unit is None and direction is None:
        return value
    described: dict[str, Any] = {"value": value}
    if unit is not None:
        described["unit"] = unit
    if direction is not None:
        described["direction"] = direction
    return described


def utc_timestamp(text: Any, source: str, path: str) -> str:
    """An ISO 8601 time from a report as RFC 3339 in UTC; a time without offset is taken as UTC."""
    raw = expect_string(text, source, path)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise SourceError(source, f"{path}: not an ISO 8601 date and time: {raw!r}") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return format_rfc3339(moment)


def attribute_text(value: Any) -> str:
    """Attributes are strings: JSON scalars keep their JSON spelling, strings stay as they are."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()
