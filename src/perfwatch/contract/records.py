"""Record and verdict documents: models, validation and orjson I/O.

The JSON Schema files in ``schemas/`` are the source of truth. This module adds
the checks a schema cannot express (finite numbers, matrix shapes, unique input
ids, real calendar dates) and tells apart the ways a message can be bad, so a
stream consumer can dead-letter it with a precise reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from importlib import resources
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal, cast

import fastjsonschema
import orjson

# numpy and jsonschema are imported where used: most commands that read records never
# need them, and together they cost a tenth of a second at start-up.
if TYPE_CHECKING:
    import numpy as np
    from jsonschema import Draft202012Validator, ValidationError

RECORD_SCHEMA = "perfwatch.record/v1"
VERDICT_SCHEMA = "perfwatch.verdict/v1"
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
MAX_COUNTER_CELLS = 1_000_000

Direction = Literal["higher_is_better", "lower_is_better"]
ChangeDirection = Literal["regression", "improvement", "unknown"]
VerdictKind = Literal[
    "change_point.detected",
    "change_point.updated",
    "change_point.retracted",
    "counter_regression.detected",
    "counter_check.passed",
    "recommendation",
]

# Same pattern as $defs.rfc3339 in the schemas.
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
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
        where = "" if line is None else f" (line {line} column {column})"
        super().__init__(f"{path}: {message}{where}")
        self.kind = kind
        self.path = path
        self.message = message
        self.problems: tuple[Problem, ...] = tuple(problems) or (Problem(path, message, kind),)
        self.line = line
        self.column = column

    @classmethod
    def from_problems(cls, problems: Sequence[Problem]) -> RecordError:
        first = problems[0]
        return cls(first.kind, first.path, first.message, problems=problems)


# --- time ---------------------------------------------------------------------------------


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 date-time into an aware datetime; ValueError if it is not one."""
    if not _RFC3339.match(text):
        raise ValueError(f"{text!r} is not an RFC 3339 date-time (e.g. 2024-05-01T02:00:00Z)")
    return datetime.fromisoformat(text.upper())


def format_rfc3339(moment: datetime) -> str:
    """RFC 3339 text of a datetime; naive datetimes are taken as UTC, UTC is written ``Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _present(**members: Any) -> dict[str, Any]:
    """The members that are not None: optional JSON members are left out, never null."""
    return {name: value for name, value in members.items() if value is not None}


# --- models -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricValue:
    value: float
    unit: str | None = None
    direction: Direction | None = None

    def to_json(self) -> float | dict[str, Any]:
        details = _present(unit=self.unit, direction=self.direction)
        return {"value": self.value, **details} if details else self.value


@dataclass(frozen=True, slots=True)
class Counters:
    """Counter samples of one run: ``values[observation][counter]``, None where missing."""

    names: list[str]
    values: list[list[float | None]]
    timestamps: list[float | str] | None = None
    role: Literal["baseline", "target"] | None = None

    def matrix(self) -> np.ndarray:
        """Observations x counters as float64, NaN where a sample is missing."""
        import numpy as np

        return np.array(
            [[math.nan if v is None else v for v in row] for row in self.values], dtype=np.float64
        ).reshape(len(self.values), len(self.names))

    def to_json(self) -> dict[str, Any]:
        return {
            "names": self.names,
            "values": self.values,
            **_present(timestamps=self.timestamps, role=self.role),
        }


@dataclass(frozen=True, slots=True)
class InputProfile:
    input_id: str
    size: float
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: float
    statements: int
    function_calls: int
    loop_iterations: int
    conditionals: int


@dataclass(frozen=True, slots=True)
class Inputs:
    kind: Literal["full_suite", "update_sample"]
    profiles: list[InputProfile]
    # An update sample's inputs profiled on the old code next to the update (drift reference).
    reference_profiles: list[InputProfile] | None = None

    def to_json(self) -> dict[str, Any]:
        references = self.reference_profiles
        return {
            "kind": self.kind,
            "profiles": [asdict(profile) for profile in self.profiles],
            **_present(
                reference_profiles=None if references is None else list(map(asdict, references))
            ),
        }


@dataclass(frozen=True, slots=True)
class Record:
    """One run of one test (``perfwatch.record/v1``)."""

    test: str
    run_id: str
    timestamp: datetime
    metrics: dict[str, MetricValue]
    commit: str | None = None
    branch: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    counters: Counters | None = None
    inputs: Inputs | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Record:
        """Validate a decoded document and build the record; RecordError on any problem."""
        return cls._build(_checked(doc, "record", check_finite=True))

    @classmethod
    def _build(cls, doc: Mapping[str, Any]) -> Record:
        metrics = {
            name: MetricValue(float(v))
            if not isinstance(v, dict)
            else MetricValue(float(v["value"]), v.get("unit"), v.get("direction"))
            for name, v in doc["metrics"].items()
        }
        counters = doc.get("counters")
        inputs = doc.get("inputs")
        return cls(
            test=doc["test"],
            run_id=doc["run_id"],
            timestamp=parse_rfc3339(doc["timestamp"]),
            metrics=metrics,
            commit=doc.get("commit"),
            branch=doc.get("branch"),
            attributes=dict(doc.get("attributes", {})),
            counters=None
            if counters is None
            else Counters(
                counters["names"],
                counters["values"],
                counters.get("timestamps"),
                counters.get("role"),
            ),
            inputs=None
            if inputs is None
            else Inputs(
                inputs["kind"],
                [InputProfile(**p) for p in inputs["profiles"]],
                None
                if "reference_profiles" not in inputs
                else [InputProfile(**p) for p in inputs["reference_profiles"]],
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "test": self.test,
            "run_id": self.run_id,
            **_present(commit=self.commit, branch=self.branch),
            "timestamp": format_rfc3339(self.timestamp),
            **_present(attributes=self.attributes or None),
            "metrics": {name: metric.to_json() for name, metric in self.metrics.items()},
            **_present(
                counters=None if self.counters is None else self.counters.to_json(),
                inputs=None if self.inputs is None else self.inputs.to_json(),
            ),
        }


@dataclass(frozen=True, slots=True)
class SeriesRef:
    """The series a verdict is about: test, metric (absent for whole-run checks), key attributes."""

    test: str
    metric: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, **_present(metric=self.metric), "attributes": self.attributes}


@dataclass(frozen=True, slots=True)
class ChangePointEvidence:
    """A change point located in a series' history; ``index`` is the first run after it."""

    index: int
    run_id: str
    commit: str | None
    time: datetime
    forward_change_percent: float
    magnitude: float
    mean_before: float
    stddev_before: float
    mean_after: float
    stddev_after: float
    pvalue: float
    direction: ChangeDirection

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ChangePointEvidence:
        values = {name: doc.get(name) for name in _EVIDENCE_FIELDS}
        values["time"] = parse_rfc3339(doc["time"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: no deep copy (asdict's) needed on this hot path.
        doc = {name: getattr(self, name) for name in _EVIDENCE_FIELDS}
        doc["time"] = format_rfc3339(self.time)
        return doc


_EVIDENCE_FIELDS = tuple(spec.name for spec in fields(ChangePointEvidence))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A change of belief (``perfwatch.verdict/v1``)."""

    verdict_id: str
    kind: VerdictKind
    emitted_at: datetime
    series: SeriesRef
    record_run_id: str
    parameters: dict[str, Any]
    change_point: ChangePointEvidence | None = None
    previous: ChangePointEvidence | None = None
    counter_check: dict[str, Any] | None = None
    recommendation: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Any) -> Verdict:
        """Validate a decoded document and build the verdict; RecordError on any problem."""
        return cls._build(_checked(doc, "verdict", check_finite=True))

    @classmethod
    def _build(cls, doc: Mapping[str, Any]) -> Verdict:
        series = doc["series"]
        return cls(
            verdict_id=doc["verdict_id"],
            kind=doc["kind"],
            emitted_at=parse_rfc3339(doc["emitted_at"]),
            series=SeriesRef(series["test"], series.get("metric"), dict(series["attributes"])),
            record_run_id=doc["record_run_id"],
            parameters=doc["parameters"],
            change_point=_optional_evidence(doc.get("change_point")),
            previous=_optional_evidence(doc.get("previous")),
            counter_check=doc.get("counter_check"),
            recommendation=doc.get("recommendation"),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": VERDICT_SCHEMA,
            "verdict_id": self.verdict_id,
            "kind": self.kind,
            "emitted_at": format_rfc3339(self.emitted_at),
            "series": self.series.to_json(),
            "record_run_id": self.record_run_id,
            "parameters": self.parameters,
        }
        doc.update(
            _present(
                change_point=None if self.change_point is None else self.change_point.to_json(),
                previous=None if self.previous is None else self.previous.to_json(),
                counter_check=self.counter_check,
                recommendation=self.recommendation,
            )
        )
        return doc


def _optional_evidence(doc: Mapping[str, Any] | None) -> ChangePointEvidence | None:
    return None if doc is None else ChangePointEvidence.from_json(doc)


# --- validation -----------------------------------------------------------------------------


@cache
def load_schema(name: Literal["record", "verdict"]) -> dict[str, Any]:
    """The JSON Schema shipped with the package (``schemas/<name>.schema.json``)."""
    source = resources.files("perfwatch").joinpath("schemas", f"{name}.schema.json")
    return cast(dict[str, Any], orjson.loads(source.read_bytes()))


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
    problems: list[Problem] = []
    if check_finite:
        problems.extend(_non_finite_numbers(doc, ()))
    if name == "record":
        doc_for_schema, rest = _cut_counter_arrays(doc, ("values",))
        problems.extend(_schema_problems(_validator(name), doc_for_schema))
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


_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})
_NUMBER_TYPES = frozenset({float, int})
_CELL_TYPES = frozenset({float, int, type(None)})


def _plain_and_finite(value: Any) -> bool:
    """Whether the value holds only plain JSON values (exact dict, list, str, int, float, bool,
    None) with finite floats; anything else (a tuple, a numpy number) is left to the full pass."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(map(_plain_and_finite, value.values()))
    if kind is list:
        return all(map(_plain_and_finite, value))
    return kind in _PLAIN_SCALARS


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
    if not all(map(_RFC3339.match, texts)):
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
    # The sum itself overflowed or met a huge integer: look at each float.
    return all(math.isfinite(cell) for cell in chain.from_iterable(rows) if type(cell) is float)


def _checked(doc: Any, name: Literal["record", "verdict"], *, check_finite: bool) -> Any:
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


def _non_finite_numbers(value: Any, path: tuple[str | int, ...]) -> Iterator[Problem]:
    if isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(json_path(path), f"{value} is not a finite number", ErrorKind.NON_FINITE)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite_numbers(item, (*path, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _non_finite_numbers(item, (*path, index))


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
    rests = {key: items[1:] for key, items in long_arrays.items()}
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
    if isinstance(value, str) and _RFC3339.match(value):
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


# --- bytes in, bytes out ------------------------------------------------------------------


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
        kind, message = ErrorKind.NON_FINITE, "non-finite number (JSON has no NaN or Infinity)"
    else:
        kind, message = ErrorKind.INVALID_JSON, f"invalid JSON: {error.msg}"
    return RecordError(kind, "$", message, line=error.lineno, column=error.colno)


def dumps(document: Record | Verdict | Mapping[str, Any]) -> bytes:
    """Serialise a record, verdict or plain document; RecordError (non_finite) rather than
    letting NaN or infinity become ``null``."""
    doc = document.to_json() if isinstance(document, Record | Verdict) else document
    problems = list(_non_finite_numbers(doc, ()))
    if problems:
        raise RecordError.from_problems(problems)
    return orjson.dumps(doc)


def parse_record(data: bytes | str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Record:
    """Bytes of one message -> Record, or RecordError saying exactly what is wrong."""
    # orjson never yields NaN or infinity, so the finite-number walk is skipped.
    return Record._build(_checked(loads(data, max_bytes=max_bytes), "record", check_finite=False))


def parse_verdict(data: bytes | str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Verdict:
    """Bytes of one message -> Verdict, or RecordError saying exactly what is wrong."""
    return Verdict._build(_checked(loads(data, max_bytes=max_bytes), "verdict", check_finite=False))
