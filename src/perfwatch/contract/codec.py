"""Bytes in, bytes out: one JSON message to a record or verdict, and back (orjson)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from perfwatch.contract.models import Record, Verdict
from perfwatch.contract.validation import ErrorKind, RecordError, checked, non_finite_numbers

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def loads(data: bytes | str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Decode one JSON document; RecordError of kind oversized, undecodable, non_finite or
    invalid_json."""
    size = len(data.encode() if isinstance(data, str) else data)
    if size > max_bytes:
        raise RecordError(
            ErrorKind.OVERSIZED, "$", f"document is {size} bytes; the limit is {max_bytes}"
        )
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise _classify_decode_error(data, error) from None


def _classify_decode_error(data: bytes | str, error: orjson.JSONDecodeError) -> RecordError:
    if isinstance(data, bytes):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            return RecordError(
                ErrorKind.UNDECODABLE,
                "$",
                f"not UTF-8: byte 0x{data[bad.start]:02x} at offset {bad.start}",
            )
    text = error.doc if isinstance(error.doc, str) else str(error.doc)
    at = text[error.pos : error.pos + 9].lstrip("-")
    if error.msg.startswith("number is infinity") or at.startswith(("NaN", "Infinity")):
        return RecordError(
            ErrorKind.NON_FINITE,
            _non_finite_path(text),
            "non-finite number (JSON has no NaN or Infinity)",
            line=error.lineno,
            column=error.colno,
        )
    return RecordError(
        ErrorKind.INVALID_JSON,
        "$",
        f"invalid JSON: {error.msg}",
        line=error.lineno,
        column=error.colno,
    )


def _non_finite_path(text: str) -> str:
    """The JSON path of the first NaN or infinity in `text`; "$" when the text is no
    JSON even with them. Python's own decoder reads both, as floats."""
    try:
        document = json.loads(text)
    except ValueError:
        return "$"
    first = next(non_finite_numbers(document, ()), None)
    return "$" if first is None else first.path


def dumps(document: Record | Verdict | Mapping[str, Any]) -> bytes:
    """Serialise a record, verdict or plain document; RecordError (non_finite) rather than
    letting NaN or infinity become ``null``."""
    doc = document.to_json() if isinstance(document, Record | Verdict) else document
    problems = list(non_finite_numbers(doc, ()))
    if problems:
        raise RecordError.from_problems(problems)
    return orjson.dumps(doc)


def parse_record(data: bytes | str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Record:
    """Bytes of one message -> Record, or RecordError saying exactly what is wrong."""
    # orjson never yields NaN or infinity, so the finite-number walk is skipped.
    return Record._build(checked(loads(data, max_bytes=max_bytes), "record", check_finite=False))


def parse_verdict(data: bytes | str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Verdict:
    """Bytes of one message -> Verdict, or RecordError saying exactly what is wrong."""
    return Verdict._build(checked(loads(data, max_bytes=max_bytes), "verdict", check_finite=False))
