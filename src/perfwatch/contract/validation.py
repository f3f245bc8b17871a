"""Checks of record and verdict documents, and the errors that say what is wrong.

The JSON Schema files in ``schemas/`` are the source of truth. This module adds
the checks a schema cannot express (finite numbers within the range of a 64-bit
float, no NUL character in any text or name, matrix shapes, unique input ids,
real calendar dates: what a state store cannot hold is rejected here) and tells
apart the ways a message can be bad, so a stream consumer can dead-letter it
with a precise reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from importlib import resources
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal, cast

import fastjsonschema
import orjson

from perfwatch.contract.timestamps import RFC3339

# jsonschema is imported where used: most commands that read records never need it.
if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError

RECORD_SCHEMA = "perfwatch.record/v1"
VERDICT_SCHEMA = "perfwatch.verdict/v1"
MAX_COUNTER_CELLS = 1_000_000

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LONGEST_MESSAGE = 200


class ErrorKind(StrEnum):
    """Why a document was rejected; stable strings for dead-letter reasons and metrics."""

    UNDECODABLE = "undecodable"
    INVALID_JSON = "invalid_json"
    SCHEMA = "schema"
    NON_FINITE = "non_finite"
    OVERSIZED = "oversized"
    UNKNOWN_VERSION = "unknown_version"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a document, located by a JSON path such as ``$.metrics.p99``."""

    path: str
    message: str
    kind: ErrorKind = ErrorKind.SCHEMA

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class RecordError(ValueError):
    """A record or verdict document that cannot be accepted.

    ``kind``, ``path`` and ``message`` describe the first problem; ``problems``
    holds all of them. ``line`` and ``column`` (1-based) locate JSON syntax errors.
    """

    def __init__(
        self,
        kind: ErrorKind,
        path: str,
        message: str,
        *,
        problems: Sequence[Problem] = (),
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.kind = kind
        self.path = path
        self.message = message
        self.problems: tuple[Problem, ...] = tuple(problems) or (Problem(path, message, kind),)
        self.line = line
        self.column = column
        super().__init__(f"{path}: {self.located_message}")

    @property
    def located_message(self) -> str:
        """The message, with the line and column of a JSON syntax error."""
        if self.line is None:
            return self.message
        return f"{self.message} (line {self.line} column {self.column})"

    @classmethod
    def from_problems(cls, problems: Sequence[Problem]) -> RecordError:
        first = problems[0]
        return cls(first.kind, first.path, first.message, problems=problems)


@cache
def load_schema(name: Literal["record", "verdict"]) -> dict[str, Any]:
    """The JSON Schema shipped with the package (``schemas/<name>.schema.json``)."""
    source = resources.files("perfwatch").joinpath("schemas", f"{name}.schema.json")
    return cast(dict[str, Any], orjson.loads(source.read_bytes()))


# The schema's bound on metric values (the change-point analysis squares their differences),
# read from it so that the readers' checks and the schema cannot disagree.
MAX_METRIC_MAGNITUDE = float(load_schema("record")["$defs"]["metric_value"]["maximum"])


def beyond_metric_bound(value: str) -> str:
    """What is wrong with a metric value (``value``: how to show it) beyond the bound."""
    return (
        f"{value} is beyond {MAX_METRIC_MAGNITUDE:g} in magnitude, the most the change-point "
        "analysis takes: rescale the metric (a larger unit)"
    )


@cache
def _validator(name: Literal["record", "verdict"]) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(name))


def validate_record(doc: Any) -> list[Problem]:
    """Every problem of a decoded record document, empty when it is valid."""
    return _validate(doc, "record", check_finite=True)


def validate_verdict(doc: Any) -> list[Problem]:
    """Every problem of a decoded verdict document, empty when it is valid."""
    return _validate(doc, "verdict", check_finite=True)


def _validate(doc: Any, name: Literal["record", "verdict"], *, check_finite: bool) -> list[Problem]:
    """A quick yes for the common valid document; anything else gets the full pass, so the
    problems reported never depend on the quick check."""
    if _passes_quick_check(doc, name, check_finite=check_finite):
        return []
    return _all_problems(doc, name, check_finite=check_finite)


def _all_problems(
    doc: Any, name: Literal["record", "verdict"], *, check_finite: bool
) -> list[Problem]:
    """The full pass: jsonschema and the value checks, every problem with its JSON path."""
    if isinstance(doc, dict):
        version = doc.get("schema")
        expected = RECORD_SCHEMA if name == "record" else VERDICT_SCHEMA
        if (
            isinstance(version, str)
            and version != expected
            and re.fullmatch(rf"perfwatch\.{name}/v[0-9]+", version)
        ):
            return [
                Problem(
                    "$.schema",
                    f"unknown version {version!r}; this perfwatch reads {expected!r}",
                    ErrorKind.UNKNOWN_VERSION,
                )
            ]
    problems: list[Problem] = list(nul_characters(doc, ()))
    if check_finite:
        problems.extend(non_finite_numbers(doc, ()))
    if name == "record":
        doc_for_schema, rest = _cut_counter_arrays(doc, ("values",))
        # a number beyond the float range is said to be so, not also beyond the metrics' bound
        beyond_floats = {p.path for p in problems if p.kind is ErrorKind.NON_FINITE}
        problems.extend(
            p
            for p in _schema_problems(_validator(name), doc_for_schema)
            if p.path not in beyond_floats
        )
        problems.extend(_counter_row_problems(rest.get("values", [])))
    else:
        problems.extend(_schema_problems(_validator(name), doc))
    if isinstance(doc, dict):
        value_checks = _record_value_problems if name == "record" else _verdict_value_problems
        problems.extend(value_checks(doc))
    return _unique(problems)


# The quick check answers only "valid or not", with no paths or messages, and must never say
# yes to a document the full pass finds a problem in: the property tests hold the two together.


def _passes_quick_check(
    doc: Any, name: Literal["record", "verdict"], *, check_finite: bool
) -> bool:
    """Whether the document is valid, by the schema compiled to Python code (fastjsonschema,
    stopping at the first problem), the large counter arrays judged whole with builtins, and
    the value checks. Without ``check_finite`` the document must come from orjson, which yields
    only dicts, lists, strings, finite numbers, booleans and nulls."""
    if name == "verdict":
        return (
            _compiled_schema_passes("verdict", doc)
            and (not check_finite or _plain_and_finite(doc))
            and _free_of_nul(doc)
            and next(_verdict_value_problems(doc), None) is None
        )
    doc_for_schema, rest = _cut_counter_arrays(doc, ("values", "timestamps"))
    if not _compiled_schema_passes("record", doc_for_schema):
        return False
    if "values" in rest and not _counter_rows_pass(rest["values"], check_finite=check_finite):
        return False
    # The schema saw the first timestamp only and no calendar check ran yet: check them all.
    stamps = doc.get("counters", {}).get("timestamps")
    if stamps is not None and not _counter_stamps_pass(stamps, check_finite=check_finite):
        return False
    if check_finite and not _plain_and_finite(doc_for_schema):
        return False
    # The rest of the counter arrays holds numbers, nulls and RFC 3339 texts only.
    if not _free_of_nul(doc_for_schema):
        return False
    return next(_record_value_problems(doc, stamp_dates=False), None) is None


def _compiled_schema_passes(name: Literal["record", "verdict"], doc: Any) -> bool:
    try:
        _compiled_validator(name)(doc)
    # TypeError: a value no JSON holds (a set in counters.names) trips the generated code's
    # uniqueness check; the full pass names the problem.
    except (fastjsonschema.JsonSchemaException, TypeError):
        return False
    return True


@cache
def _compiled_validator(name: Literal["record", "verdict"]) -> Callable[[Any], Any]:
    # use_formats=False: like jsonschema by default, "format" only annotates (the pattern
    # keyword does the checking); use_default=False: never write defaults into the document.
    return fastjsonschema.compile(
        _python_end_anchors(load_schema(name)), use_formats=False, use_default=False
    )


# An unescaped "$" in a pattern.
_DOLLAR = re.compile(r"(?<!\\)\$")


def _python_end_anchors(schema: Any) -> Any:
    """A copy of the schema whose patterns spell Python's ``$`` (end of text, or before a final
    newline) as a lookahead. jsonschema matches patterns with Python's ``re``; fastjsonschema
    would read ``$`` as end of text only and so reject what the full pass accepts."""
    if isinstance(schema, dict):
        return {
            key: _DOLLAR.sub(r"(?=\\n?\\Z)", value)
            if key == "pattern" and isinstance(value, str)
            else _python_end_anchors(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_python_end_anchors(item) for item in schema]
    return schema


_PLAIN_SCALARS = frozenset({str, bool, type(None)})
# Integers from here on have no 64-bit float (every numeric column is one).
_FLOAT_LIMIT = 2**1024
_NUL = "\x00"

_NUMBER_TYPES = frozenset({float, int})
_CELL_TYPES = frozenset({float, int, type(None)})


def _plain_and_finite(value: Any) -> bool:
    """Whether the value holds only plain JSON values (exact dict, list, str, int, float, bool,
    None) with finite floats; anything else (a tuple, a numpy number) is left to the full pass."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is int:
        return -_FLOAT_LIMIT < value < _FLOAT_LIMIT
    if kind is dict:
        return all(map(_plain_and_finite, value.values()))
    if kind is list:
        return all(map(_plain_and_finite, value))
    return kind in _PLAIN_SCALARS


def _free_of_nul(doc: Any) -> bool:
    """Whether no text or name in the document holds a NUL character, judged on its JSON
    form in one call (orjson writes NUL as an escape). A literal backslash-u0000 text
    reads as a NUL here too; the full pass then finds no problem, so the answer holds."""
    try:
        return b"\\u0000" not in orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):  # a value JSON cannot hold: the full pass
        return False


def _counter_rows_pass(rows: list[Any], *, check_finite: bool) -> bool:
    """Whether the counter rows after the first meet the schema's rules (and hold finite
    numbers), checked with builtins over the whole matrix rather than cell by cell."""
    # No row length check: the value checks want every row as long as counters.names, which
    # the schema keeps within the rows' maxItems.
    if len(rows) + 1 > _counter_rule("values")["maxItems"] or set(map(type, rows)) != {list}:
        return False
    if not set(map(type, chain.from_iterable(rows))) <= _CELL_TYPES:
        return False
    return not check_finite or _all_finite(rows)


def _counter_stamps_pass(stamps: list[Any], *, check_finite: bool) -> bool:
    """Whether every counter timestamp meets the schema (a number or an RFC 3339 text) and the
    calendar check of `_date_problems`, and the numbers are finite."""
    if len(stamps) > _counter_rule("timestamps")["maxItems"]:
        return False
    texts = [stamp for stamp in stamps if type(stamp) is str]
    numbers = [stamp for stamp in stamps if type(stamp) is not str]
    if not set(map(type, numbers)) <= _NUMBER_TYPES:
        return False
    if check_finite and not _all_finite([numbers]):
        return False
    if not all(map(RFC3339.match, texts)):
        return False
    try:
        # The same conversion as parse_rfc3339, mapped without a Python call per text.
        list(map(datetime.fromisoformat, map(str.upper, texts)))
    except ValueError:
        return False
    return True


def _all_finite(rows: list[list[Any]]) -> bool:
    """Whether every float in the rows (of numbers and nulls) is finite."""
    try:
        # A single infinity or NaN makes the sum non-finite, so a finite sum proves them all
        # finite; filter(None, ...) drops the nulls (and the zeros, finite anyway).
        if math.isfinite(sum(filter(None, chain.from_iterable(rows)), 0.0)):
            return True
    except OverflowError:  # an integer beyond the float range
        pass
    # The sum itself overflowed or met a huge integer: look at each number.
    return all(
        math.isfinite(cell) if type(cell) is float else -_FLOAT_LIMIT < cell < _FLOAT_LIMIT
        for cell in chain.from_iterable(rows)
        if cell is not None
    )


def checked(doc: Any, name: Literal["record", "verdict"], *, check_finite: bool) -> Any:
    problems = _validate(doc, name, check_finite=check_finite)
    if problems:
        raise RecordError.from_problems(problems)
    return doc


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def json_path(parts: Sequence[str | int]) -> str:
    """``$``-rooted JSON path: ``$.metrics["p99 latency"].value``, ``$.counters.values[3][0]``."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}"
        else:
            text += "[" + orjson.dumps(part).decode() + "]"
    return text


def non_finite_numbers(value: Any, path: tuple[str | int, ...]) -> Iterator[Problem]:
    """NaN, infinities and integers beyond the range of a 64-bit float."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(json_path(path), f"{value} is not a finite number", ErrorKind.NON_FINITE)
    elif isinstance(value, int) and not isinstance(value, bool):
        if not -_FLOAT_LIMIT < value < _FLOAT_LIMIT:
            yield Problem(
                json_path(path),
                f"integer of {value.bit_length()} bits is beyond the range of a 64-bit float",
                ErrorKind.NON_FINITE,
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from non_finite_numbers(item, (*path, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from non_finite_numbers(item, (*path, index))


def nul_characters(value: Any, path: tuple[str | int, ...]) -> Iterator[Problem]:
    """Texts and names holding a NUL character, which a state store cannot hold."""
    if isinstance(value, str):
        if _NUL in value:
            yield Problem(json_path(path), "contains a NUL character (\\u0000)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _NUL in key:
                yield Problem(
                    json_path((*path, key)), "the name contains a NUL character (\\u0000)"
                )
            yield from nul_characters(item, (*path, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from nul_characters(item, (*path, index))


def _cut_counter_arrays(
    doc: Any, keys: tuple[Literal["values", "timestamps"], ...]
) -> tuple[Any, dict[str, list[Any]]]:
    """The document with the named counters arrays cut to their first item for schema
    validation, and the rest of each. A schema validator needs microseconds per item, far too
    slow for a matrix of up to a million cells; the callers check the rest with builtins, and
    the full pass runs the schema's own rule only on rows failing that, for its exact messages."""
    counters = doc.get("counters") if isinstance(doc, dict) else None
    if not isinstance(counters, dict):
        return doc, {}
    long_arrays = {
        key: items
        for key in keys
        if isinstance(items := counters.get(key), list) and len(items) > 1
    }
    if not long_arrays:
        return doc, {}
    firsts = {key: items[:1] for key, items in long_arrays.items()}
    rests: dict[str, list[Any]] = {key: items[1:] for key, items in long_arrays.items()}
    return {**doc, "counters": {**counters, **firsts}}, rests


def _counter_row_problems(other_rows: list[Any]) -> list[Problem]:
    """The problems of the counter rows after the first (see `_cut_counter_arrays`)."""
    if not other_rows:
        return []
    rule = _counter_rule("values")
    problems = []
    if len(other_rows) + 1 > rule["maxItems"]:
        problems.append(
            Problem(
                "$.counters.values",
                f"has {len(other_rows) + 1} items; at most {rule['maxItems']} expected",
            )
        )
    row_limit = rule["items"]["maxItems"]
    for index, row in enumerate(other_rows, start=1):
        # type() rather than isinstance(): JSON Schema does not count booleans as numbers.
        if (
            isinstance(row, list)
            and len(row) <= row_limit
            and all(cell is None or type(cell) in (float, int) for cell in row)
        ):
            continue
        problems.extend(
            _schema_problems(_counter_row_validator(), row, ("counters", "values", index))
        )
    return problems


def _counter_rule(key: Literal["values", "timestamps"]) -> dict[str, Any]:
    return cast(dict[str, Any], load_schema("record")["$defs"]["counters"]["properties"][key])


@cache
def _counter_row_validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_counter_rule("values")["items"])


def _schema_problems(
    validator: Draft202012Validator, doc: Any, prefix: tuple[str | int, ...] = ()
) -> Iterator[Problem]:
    for error in validator.iter_errors(doc):
        path = [*prefix, *error.absolute_path]
        if error.validator == "required" and isinstance(error.instance, dict):
            for name in error.validator_value:
                if name not in error.instance:
                    yield Problem(json_path([*path, name]), "required property is missing")
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {})
            for name in error.instance:
                if name not in known:
                    yield Problem(json_path([*path, name]), "unexpected property")
        else:
            yield Problem(json_path(path), _describe(error))


def _describe(error: ValidationError) -> str:
    expected = error.validator_value
    instance = error.instance
    match error.validator:
        case "type":
            wanted = expected if isinstance(expected, list) else [expected]
            return f"expected {' or '.join(wanted)}, got {_json_type(instance)}"
        case "const":
            return f"must be {expected!r}"
        case "enum":
            return f"must be one of {', '.join(repr(v) for v in expected)}"
        case "pattern" if error.schema is not None and error.schema.get("format") == "date-time":
            return "is not an RFC 3339 date-time with a UTC offset (e.g. 2024-05-01T02:00:00Z)"
        case (
            "minItems" | "maxItems" | "minProperties" | "maxProperties" | "minLength" | "maxLength"
        ):
            if error.validator == "minProperties" and list(error.absolute_path) == ["metrics"]:
                return "is empty; a record needs a metric unless it carries counters or inputs"
            bound = "at least" if error.validator.startswith("min") else "at most"
            unit = {"Items": "items", "Properties": "entries", "Length": "characters"}[
                error.validator[3:]
            ]
            return f"has {len(instance)} {unit}; {bound} {expected} expected"
        case "uniqueItems":
            return "contains duplicate items"
        case "minimum" | "maximum" if list(error.absolute_path)[:1] == ["metrics"]:
            try:
                shown = repr(instance) if isinstance(instance, float) else f"{instance:.6g}"
            except OverflowError:  # an integer beyond the range of a float
                shown = f"an integer of {instance.bit_length()} bits"
            return beyond_metric_bound(shown)
    message = error.message
    return message if len(message) <= _LONGEST_MESSAGE else message[: _LONGEST_MESSAGE - 3] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


def _date_problems(value: Any, path: Sequence[str | int]) -> Iterator[Problem]:
    """A calendar check for text the schema pattern accepted (it cannot see month 13)."""
    if isinstance(value, str) and RFC3339.match(value):
        try:
            datetime.fromisoformat(value.upper())
        except ValueError as error:
            yield Problem(json_path(path), f"{value!r} is not a valid date-time: {error}")


def _record_value_problems(doc: dict[str, Any], *, stamp_dates: bool = True) -> Iterator[Problem]:
    """Checks JSON Schema cannot express; each runs where the structure it needs is intact,
    so a document with schema problems still gets all of its problems reported. The quick
    check passes ``stamp_dates=False``: it has checked the counter timestamps' dates already."""
    yield from _date_problems(doc.get("timestamp"), ["timestamp"])
    counters = doc.get("counters")
    if isinstance(counters, dict):
        yield from _counter_shape_problems(counters, stamp_dates=stamp_dates)
    inputs = doc.get("inputs")
    if not isinstance(inputs, dict):
        return
    if inputs.get("kind") == "full_suite" and "reference_profiles" in inputs:
        yield Problem(
            "$.inputs.reference_profiles", "only an update_sample carries reference profiles"
        )
    for block in ("profiles", "reference_profiles"):
        profiles = inputs.get(block)
        if not isinstance(profiles, list):
            continue
        first_seen: dict[str, int] = {}
        for index, profile in enumerate(profiles):
            input_id = profile.get("input_id") if isinstance(profile, dict) else None
            if not isinstance(input_id, str):
                continue
            if input_id in first_seen:
                yield Problem(
                    json_path(["inputs", block, index, "input_id"]),
                    f"duplicate input_id {input_id!r} (first at {block}[{first_seen[input_id]}])",
                )
            else:
                first_seen[input_id] = index


def _counter_shape_problems(counters: dict[str, Any], *, stamp_dates: bool) -> Iterator[Problem]:
    names = counters.get("names")
    rows = counters.get("values")
    if not isinstance(rows, list):
        return
    if isinstance(names, list):
        width = len(names)
        if width * len(rows) > MAX_COUNTER_CELLS:
            yield Problem(
                "$.counters.values",
                f"{len(rows)} observations x {width} counters exceed {MAX_COUNTER_CELLS} cells",
            )
        for index, row in enumerate(rows):
            if isinstance(row, list) and len(row) != width:
                yield Problem(
                    json_path(["counters", "values", index]),
                    f"has {len(row)} values but counters.names has {width} names",
                )
    stamps = counters.get("timestamps")
    if isinstance(stamps, list):
        if len(stamps) != len(rows):
            yield Problem(
                "$.counters.timestamps",
                f"has {len(stamps)} entries but counters.values has {len(rows)} observations",
            )
        if stamp_dates:
            for index, stamp in enumerate(stamps):
                yield from _date_problems(stamp, ["counters", "timestamps", index])


def _verdict_value_problems(doc: dict[str, Any]) -> Iterator[Problem]:
    yield from _date_problems(doc.get("emitted_at"), ["emitted_at"])
    for block in ("change_point", "previous"):
        evidence = doc.get(block)
        if isinstance(evidence, dict):
            yield from _date_problems(evidence.get("time"), [block, "time"])
