"""Record and verdict documents: schemas, every-problem validation, error kinds, orjson I/O."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from perfwatch.contract import timestamps, validation
from perfwatch.contract.codec import MAX_DOCUMENT_BYTES, dumps, parse_record, parse_verdict
from perfwatch.contract.models import ChangePointEvidence, MetricValue, Record, SeriesRef, Verdict
from perfwatch.contract.validation import (
    ErrorKind,
    RecordError,
    load_schema,
    validate_record,
    validate_verdict,
)


def full_record() -> dict[str, Any]:
    return {
        "schema": "perfwatch.record/v1",
        "test": "parser.large_file",
        "run_id": "ci-8812",
        "commit": "3f2a9c1d",
        "branch": "main",
        "timestamp": "2024-05-01T02:00:00.250+02:00",
        "attributes": {"runner": "ci-3", "python": "3.11"},
        "metrics": {
            "wall_time_s": 1.25,
            "p99 latency": {"value": 41, "unit": "ms", "direction": "lower_is_better"},
        },
        "counters": {
            "names": ["cpu", "rss"],
            "values": [[0.5, 100], [0.7, None]],
            "timestamps": [0, 1.5],
            "role": "target",
        },
        "inputs": {
            "kind": "update_sample",
            "profiles": [
                {
                    "input_id": "small",
                    "size": 10,
                    "wall_time_s": 0.1,
                    "cpu_time_s": 0.09,
                    "peak_memory_bytes": 1_000_000,
                    "statements": 1200,
                    "function_calls": 80,
                    "loop_iterations": 300,
                    "conditionals": 45,
                }
            ],
        },
    }


def change_point_block(index: int = 12) -> dict[str, Any]:
    return {
        "index": index,
        "run_id": "ci-8812",
        "commit": "3f2a9c1d",
        "time": "2024-05-01T02:00:00Z",
        "forward_change_percent": 18.2,
        "magnitude": 0.182,
        "mean_before": 41.0,
        "stddev_before": 1.0,
        "mean_after": 48.5,
        "stddev_after": 1.2,
        "pvalue": 1e-9,
        "direction": "regression",
    }


def verdict_doc(kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "perfwatch.verdict/v1",
        "verdict_id": "0123456789abcdef0123",
        "kind": kind,
        "emitted_at": "2024-05-01T02:00:05Z",
        "series": {"test": "parser.large_file", "metric": "wall_time_s", "attributes": {}},
        "record_run_id": "ci-8812",
        "parameters": {"window_len": 50, "max_pvalue": 0.001},
    }
    evidence = {
        "change_point.detected": {"change_point": change_point_block()},
        "change_point.confirmed": {
            "change_point": change_point_block(),
            "finding": {"id": "0123456789abcdef", "state": "confirmed", "confirmed": True},
        },
        "change_point.updated": {
            "change_point": change_point_block(13),
            "previous": change_point_block(12),
        },
        "change_point.retracted": {"previous": change_point_block()},
        "counter_regression.detected": {"counter_check": {"verdict": "regression", "clusters": []}},
        "counter_check.passed": {"counter_check": {"verdict": "pass", "clusters": []}},
        "counter_check.insufficient_baseline": {
            "counter_check": {"verdict": "insufficient_baseline", "clusters": []}
        },
        "recommendation": {
            "recommendation": {"decision": "run", "run_share": 0.6, "votes": []},
        },
        **{
            kind: {"incident": {"id": "0123456789abcdef", "commit": "c1", "members": []}}
            for kind in ("incident.opened", "incident.updated")
        },
        **{
            kind: {
                "suspicion": {
                    "id": "0123456789abcdef",
                    "state": kind.removeprefix("change_point."),
                    "run_id": "ci-8812",
                    "index": 40,
                    "rule": "single",
                    "change": "up",
                    "z": [9.5],
                    "p": 1e-12,
                    "segment": {"start": 0, "runs": 40, "center": 1.0, "scale": 0.01},
                }
            }
            for kind in ("change_point.suspected", "change_point.withdrawn")
        },
    }[kind]
    doc.update(evidence)
    return doc


VERDICT_KINDS = load_schema("verdict")["properties"]["kind"]["examples"]


def paths(problems: list[validation.Problem]) -> set[str]:
    return {problem.path for problem in problems}


# --- schemas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["record", "verdict"])
def test_shipped_schemas_are_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"]["const"] == f"perfwatch.{name}/v1"
    # The module's date-time regex must be the schemas' pattern, not a drifting copy.
    assert schema["$defs"]["rfc3339"]["pattern"] == timestamps.RFC3339.pattern


# --- records ---------------------------------------------------------------------------------


def test_full_record_parses_into_models() -> None:
    record = parse_record(orjson.dumps(full_record()))
    assert record.metrics["wall_time_s"] == MetricValue(1.25)
    assert record.metrics["p99 latency"] == MetricValue(41.0, "ms", "lower_is_better")
    assert record.timestamp == datetime(2024, 5, 1, 0, 0, 0, 250000, tzinfo=UTC)
    matrix = record.counters.matrix()
    assert matrix.shape == (2, 2)
    assert matrix[0, 1] == 100 and math.isnan(matrix[1, 1])
    assert record.inputs.profiles[0].statements == 1200


def test_record_survives_dumps_and_parse() -> None:
    record = parse_record(orjson.dumps(full_record()))
    assert parse_record(dumps(record)) == record
    assert validate_record(orjson.loads(dumps(record))) == []


def test_validate_record_reports_every_problem_with_its_path() -> None:
    doc = full_record()
    del doc["run_id"]
    doc["extra"] = 1
    doc["timestamp"] = "2024-13-01T00:00:00Z"
    doc["metrics"]["wall_time_s"] = "fast"
    doc["metrics"]["p99 latency"]["direction"] = "up"
    doc["metrics"]["nan metric"] = math.nan
    doc["counters"]["values"][1] = [1.0]
    doc["inputs"]["profiles"].append(dict(doc["inputs"]["profiles"][0]))
    problems = validate_record(doc)
    assert paths(problems) == {
        "$.run_id",
        "$.extra",
        "$.timestamp",
        "$.metrics.wall_time_s",
        '$.metrics["p99 latency"].direction',
        '$.metrics["nan metric"]',
        "$.counters.values[1]",
        "$.inputs.profiles[1].input_id",
    }
    by_path = {problem.path: problem for problem in problems}
    assert by_path['$.metrics["nan metric"]'].kind is ErrorKind.NON_FINITE
    assert "required" in by_path["$.run_id"].message
    assert "month" in by_path["$.timestamp"].message


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        ({"metrics": {}}, "$.metrics", "needs a metric"),
        ({"metrics": {"x": True}}, "$.metrics.x", "got boolean"),
        ({"timestamp": "2024-05-01 02:00:00"}, "$.timestamp", "RFC 3339"),
        ({"test": ""}, "$.test", "at least 1"),
        ({"attributes": {"k": 3}}, "$.attributes.k", "expected string"),
        (
            {"counters": {"names": ["a"], "values": [[1]], "timestamps": [1, 2]}},
            "$.counters.timestamps",
            "2 entries",
        ),
        ({"counters": {"names": ["a", "a"], "values": [[1, 2]]}}, "$.counters.names", "duplicate"),
        ({"inputs": {"kind": "some", "profiles": []}}, "$.inputs.kind", "one of"),
        ({"metrics": {"x": 2e150}}, "$.metrics.x", "2e+150 is beyond 1e+150 in magnitude"),
        ({"metrics": {"x": {"value": -1e200}}}, "$.metrics.x.value", "rescale the metric"),
        ({"metrics": {"x": 10**151}}, "$.metrics.x", "1e+151 is beyond 1e+150"),
        ({"metrics": {"x": 10**400}}, "$.metrics.x", "beyond the range of a 64-bit float"),
    ],
)
def test_single_problems_are_named(change: dict[str, Any], path: str, fragment: str) -> None:
    doc = {key: value for key, value in full_record().items() if key not in ("counters", "inputs")}
    doc.update(change)
    problems = validate_record(doc)
    assert path in paths(problems)
    assert fragment in next(p.message for p in problems if p.path == path)


def test_empty_metrics_allowed_with_counters_or_inputs() -> None:
    for evidence in ("counters", "inputs"):
        doc = full_record()
        doc["metrics"] = {}
        doc.pop("inputs" if evidence == "counters" else "counters")
        assert validate_record(doc) == []


def test_bad_counter_cells_are_found_in_every_row() -> None:
    doc = full_record()
    doc["counters"] = {"names": ["a", "b"], "values": [[1, "x"], [1, 2], [True, None], [1, "x"]]}
    problems = validate_record(doc)
    assert paths(problems) == {
        "$.counters.values[0][1]",
        "$.counters.values[2][0]",
        "$.counters.values[3][1]",
    }
    # The first row goes through jsonschema, the others through the quick check: same words.
    assert problems[0].message == problems[-1].message == "expected number or null, got string"


def test_oversized_counter_matrix_is_refused() -> None:
    doc = full_record()
    doc["counters"] = {"names": [f"c{i}" for i in range(1000)], "values": [[1.0] * 1000] * 1001}
    problems = validate_record(doc)
    assert [p.path for p in problems] == ["$.counters.values"]
    assert "exceed" in problems[0].message


@pytest.mark.parametrize(
    ("data", "kind", "path"),
    [
        (b"\xff\xfe{}", ErrorKind.UNDECODABLE, "$"),
        (b'{"schema": ', ErrorKind.INVALID_JSON, "$"),
        (b"[1, 2,]", ErrorKind.INVALID_JSON, "$"),
        (b'{"metrics": {"x": NaN}}', ErrorKind.NON_FINITE, "$.metrics.x"),
        (
            b'{"metrics": {"x": 1, "p 99": [2, -Infinity]}}',
            ErrorKind.NON_FINITE,
            '$.metrics["p 99"][1]',
        ),
        (b'{"metrics": {"x": 1e400}}', ErrorKind.NON_FINITE, "$.metrics.x"),
        (b'{"metrics": {"x": NaN}', ErrorKind.NON_FINITE, "$"),  # and no JSON either
        (b"[]", ErrorKind.SCHEMA, "$"),
    ],
)
def test_parse_errors_are_told_apart_and_placed(data: bytes, kind: ErrorKind, path: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(data)
    assert caught.value.kind is kind
    assert caught.value.path == path


def test_json_syntax_errors_carry_line_and_column() -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(b'{\n  "test": "a",\n  "metrics": {"x": NaN}\n}')
    assert (caught.value.line, caught.value.column) == (3, 20)
    assert "line 3 column 20" in str(caught.value)


def test_oversized_payload_is_refused_before_parsing() -> None:
    data = orjson.dumps(full_record())
    with pytest.raises(RecordError) as caught:
        parse_record(data, max_bytes=len(data) - 1)
    assert caught.value.kind is ErrorKind.OVERSIZED
    assert parse_record(data, max_bytes=len(data)).run_id == "ci-8812"


def test_unknown_version_is_not_a_schema_violation() -> None:
    doc = full_record()
    doc["schema"] = "perfwatch.record/v2"
    doc["surprise"] = True
    with pytest.raises(RecordError) as caught:
        parse_record(orjson.dumps(doc))
    assert caught.value.kind is ErrorKind.UNKNOWN_VERSION
    assert caught.value.path == "$.schema"
    doc["schema"] = "perfwatch.verdict/v1"
    assert validate_record(doc)[0].kind is ErrorKind.SCHEMA


def test_schema_error_keeps_all_problems() -> None:
    doc = full_record()
    del doc["test"], doc["run_id"]
    with pytest.raises(RecordError) as caught:
        parse_record(orjson.dumps(doc))
    assert caught.value.kind is ErrorKind.SCHEMA
    assert paths(list(caught.value.problems)) == {"$.test", "$.run_id"}


def test_dumps_refuses_non_finite_numbers() -> None:
    record = Record("t", "r", datetime(2024, 1, 1, tzinfo=UTC), {"x": MetricValue(math.inf)})
    with pytest.raises(RecordError) as caught:
        dumps(record)
    assert caught.value.kind is ErrorKind.NON_FINITE
    assert caught.value.path == "$.metrics.x"


# Every value a metric may hold: finite and within the bound the change-point analysis takes.
metric_values = st.floats(-validation.MAX_METRIC_MAGNITUDE, validation.MAX_METRIC_MAGNITUDE)
# Any text a record decoded from UTF-8 can hold and a store can keep: every character
# but NUL and lone surrogates (UTF-8 cannot encode them, so no message carries one).
stored_text = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
names = st.text(stored_text, min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    metrics=st.dictionaries(names, metric_values, min_size=1, max_size=5),
    attributes=st.dictionaries(names, st.text(stored_text, max_size=20), max_size=3),
    microsecond=st.integers(0, 999_999),
)
def test_any_valid_record_round_trips(
    metrics: dict[str, float], attributes: dict[str, str], microsecond: int
) -> None:
    record = Record(
        test="t",
        run_id="r",
        timestamp=datetime(2024, 2, 29, 23, 59, 59, microsecond, tzinfo=UTC),
        metrics={name: MetricValue(value) for name, value in metrics.items()},
        attributes=attributes,
    )
    assert parse_record(dumps(record)) == record


# --- verdicts --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", VERDICT_KINDS)
def test_each_verdict_kind_is_valid_with_its_evidence(kind: str) -> None:
    doc = verdict_doc(kind)
    assert validate_verdict(doc) == []
    verdict = parse_verdict(orjson.dumps(doc))
    assert verdict.kind == kind
    assert orjson.loads(dumps(verdict)) == doc


@pytest.mark.parametrize(
    ("kind", "required"),
    [
        ("change_point.detected", "change_point"),
        ("change_point.confirmed", "change_point"),
        ("change_point.updated", "previous"),
        ("change_point.retracted", "previous"),
        ("counter_regression.detected", "counter_check"),
        ("counter_check.passed", "counter_check"),
        ("counter_check.insufficient_baseline", "counter_check"),
        ("recommendation", "recommendation"),
        ("incident.opened", "incident"),
        ("incident.updated", "incident"),
    ],
)
def test_each_verdict_kind_requires_its_evidence(kind: str, required: str) -> None:
    doc = verdict_doc(kind)
    del doc[required]
    assert f"$.{required}" in paths(validate_verdict(doc))


def test_change_point_verdicts_need_a_metric() -> None:
    doc = verdict_doc("change_point.detected")
    del doc["series"]["metric"]
    assert "$.series.metric" in paths(validate_verdict(doc))
    doc = verdict_doc("recommendation")
    del doc["series"]["metric"]
    assert validate_verdict(doc) == []


def test_verdict_field_problems() -> None:
    doc = verdict_doc("change_point.updated")
    doc["verdict_id"] = "not-hex"
    doc["previous"]["pvalue"] = 1.5
    doc["change_point"]["time"] = "2024-02-30T00:00:00Z"
    doc["recommendation"] = {"decision": "maybe"}
    assert paths(validate_verdict(doc)) == {
        "$.verdict_id",
        "$.previous.pvalue",
        "$.change_point.time",
        "$.recommendation.decision",
        "$.recommendation.run_share",
        "$.recommendation.votes",
    }


def test_a_newer_verdicts_unknown_block_passes_an_older_schema() -> None:
    """As `suspicion` came: a new optional block without a new schema version."""
    doc = verdict_doc("change_point.detected")
    doc["forecast"] = {"next_run": 41.5}
    assert validate_verdict(doc) == []
    doc["series"]["owner"] = "team-a"  # a block keeps its fields
    assert paths(validate_verdict(doc)) == {"$.series.owner"}


def test_verdict_model_writes_a_valid_document() -> None:
    evidence = ChangePointEvidence.from_json(change_point_block())
    verdict = Verdict(
        verdict_id="ab" * 16,
        kind="change_point.retracted",
        emitted_at=datetime(2024, 5, 1, 2, 0, 5, tzinfo=UTC),
        series=SeriesRef("parser.large_file", "wall_time_s", {"runner": "ci-3"}),
        record_run_id="ci-8813",
        parameters={"window_len": 50},
        previous=evidence,
    )
    doc = orjson.loads(dumps(verdict))
    assert validate_verdict(doc) == []
    assert doc["previous"] == change_point_block()
    assert parse_verdict(dumps(verdict)) == verdict
    unknown = copy.deepcopy(doc)
    unknown["schema"] = "perfwatch.verdict/v7"
    assert validate_verdict(unknown)[0].kind is ErrorKind.UNKNOWN_VERSION


# --- quick check vs full pass ------------------------------------------------------------------
# Valid documents take a quick check (the schema compiled by fastjsonschema plus builtins over
# the counter matrix); anything it refuses goes through the full jsonschema pass. The quick
# check must never accept what the full pass rejects, and on plain JSON values (what orjson
# decodes) it must agree with the full pass both ways, or valid messages would pay twice.


def rich_record() -> dict[str, Any]:
    """Every part a record can have, with arrays long enough to be cut for the schema."""
    doc = full_record()
    doc["counters"] = {
        "names": ["cpu", "rss", "ipc"],
        "values": [[0.5, 100, None], [0.7, None, 1.2], [0.6, 120, 1.1], [0, -3, 2**40]],
        "timestamps": ["2024-05-01T02:00:00Z", 1.5, "2024-05-01T02:00:02.5+01:00", 3],
        "role": "baseline",
    }
    profile = doc["inputs"]["profiles"][0]
    doc["inputs"]["profiles"] = [
        {**profile, "input_id": f"input-{index}", "statements": 100.0 * index} for index in range(3)
    ]
    doc["inputs"]["reference_profiles"] = [
        {**profile, "input_id": f"input-{index}", "wall_time_s": 0.5} for index in range(2)
    ]
    return doc


def metrics_only_record() -> dict[str, Any]:
    return {key: value for key, value in full_record().items() if key not in ("counters", "inputs")}


RECORD_BASES = [full_record(), rich_record(), metrics_only_record()]
VERDICT_BASES = [verdict_doc(kind) for kind in VERDICT_KINDS]

# Values chosen to hit each rule of the schemas and of the value checks, by kind so that each
# kind is drawn as often as the others.
NUMBERS: list[Any] = [0, -1, 7, 1.0, 2.5, -0.5, 1e308, 10**400, math.nan, math.inf, -math.inf]
TEXTS = [
    "",
    "x",
    "x" * 65,
    "x" * 257,
    "x" * 1025,
    "2024-05-01T02:00:00Z",
    "2024-05-01t02:00:00.5-07:00",
    "2024-05-01T02:00:00Z\n",
    "2024-13-01T00:00:00Z",
    "2024-02-30T00:00:00+01:00",
    "2024-05-01 02:00:00",
    "0123456789abcdef0123",
    "0123456789abcdef0123\n",
    "lower_is_better",
    "up",
    "regression",
    "baseline",
    "full_suite",
    "skip",
    "perfwatch.record/v1",
    "perfwatch.record/v2",
    "perfwatch.verdict/v1",
    "change_point.detected",
    "recommendation",
]
# Containers, and values no JSON holds but a caller of validate_record may pass.
CONTAINERS_AND_OTHERS: list[Any] = [
    [],
    [1.0, None],
    [[1.0]],
    {},
    {"value": 1.0},
    {"value": "1"},
    (1.0, 2.0),
    {"cpu"},
    np.float64(1.5),
    np.float64(math.nan),
    Decimal("1.5"),
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
new_values = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.sampled_from(TEXTS),
    st.sampled_from(CONTAINERS_AND_OTHERS),
    json_values,
)

Path = tuple[str | int, ...]


def mutated(doc: Any, path: Path, how: str, value: Any) -> Any:
    """The document with one change at path; the root can be replaced too."""
    if not path:
        return value if how == "replace" else doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    target = parent[last]
    if how == "replace":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    elif how == "add_key" and isinstance(target, dict):
        target["extra" if value is None else str(value)[:8]] = value
    elif how == "grow" and isinstance(target, dict):
        # Past every maxProperties of the schemas but the 1000 metrics.
        target.update({f"grown_{index}": copy.deepcopy(value) for index in range(65)})
    elif how == "grow" and isinstance(target, list):
        # Past every maxItems the tests can afford (names, rows).
        filler = target[-1] if target else value
        target.extend(copy.deepcopy(filler) for _ in range(1025))
    elif how == "duplicate" and isinstance(target, list) and target:
        target.append(copy.deepcopy(target[0]))
    elif how == "tuple" and isinstance(target, list):
        parent[last] = tuple(target)
    elif how == "not_finite" and type(target) in (int, float):
        parent[last] = math.nan
    elif how == "newline" and isinstance(target, str):
        parent[last] = target + "\n"
    elif how == "nul" and isinstance(target, str):
        parent[last] = target[:1] + "\x00" + target[1:]
    elif how == "nul" and isinstance(target, dict) and target:
        name = next(iter(target))
        target[f"{name}\x00"] = target.pop(name)
    elif how == "bad_date" and isinstance(target, str) and timestamps.RFC3339.match(target):
        parent[last] = target[:5] + "02-30" + target[10:]
    return doc


def is_plain_json(value: Any) -> bool:
    """Only the types orjson decodes to: exact dict, list, str, int, float, bool and None."""
    if type(value) is dict:
        return all(type(key) is str and is_plain_json(item) for key, item in value.items())
    if type(value) is list:
        return all(map(is_plain_json, value))
    return type(value) in (str, int, float, bool, type(None))


def containers(value: Any, path: Path = ()) -> list[Path]:
    """The paths of the objects and arrays in value, value itself included."""
    if isinstance(value, dict):
        children = [containers(item, (*path, key)) for key, item in value.items()]
    elif isinstance(value, list):
        children = [containers(item, (*path, index)) for index, item in enumerate(value)]
    else:
        return []
    return [path, *(found for child in children for found in child)]


def child_paths(doc: Any, path: Path) -> list[Path]:
    target = doc
    for part in path:
        target = target[part]
    keys = target.keys() if isinstance(target, dict) else range(len(target))
    return [path, *((*path, key) for key in keys)]


# Replacing is the richest change, so it is drawn most often; the last three change the value
# in place (a number, a text, a date-time text) and do nothing elsewhere.
CHANGES = [
    *["replace"] * 3,
    "delete",
    "add_key",
    "grow",
    "duplicate",
    "tuple",
    "not_finite",
    "newline",
    "nul",
    "bad_date",
]


@st.composite
def mutated_documents(draw: st.DrawFn, bases: list[dict[str, Any]]) -> Any:
    """A valid document with one to three changes. Each change picks an object or array, then
    it or one of its members: every array row and profile is as likely a target as the root."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    # Mostly one change, so that a document's only problem is often the one just made.
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        where = containers(doc)
        if not where:
            break
        path = draw(st.sampled_from(child_paths(doc, draw(st.sampled_from(where)))))
        # A copy: later changes must not alter the shared lists of values above.
        value = copy.deepcopy(draw(new_values))
        doc = mutated(doc, path, draw(st.sampled_from(CHANGES)), value)
    return doc


def assert_quick_check_agrees(doc: Any, name: str) -> None:
    validate = validate_record if name == "record" else validate_verdict
    parse = parse_record if name == "record" else parse_verdict
    full = validation._all_problems(doc, name, check_finite=True)
    quick = validation._passes_quick_check(doc, name, check_finite=True)
    assert not (quick and full), f"quick check accepted a document with problems: {full}"
    if is_plain_json(doc):
        assert quick == (not full), "quick check refused a valid document"
    assert validate(doc) == full
    try:
        data = orjson.dumps(doc)
    except TypeError:  # what orjson cannot write: integers beyond 64 bits, sets, Decimal
        return
    decoded = orjson.loads(data)
    full = validation._all_problems(decoded, name, check_finite=False)
    assert validation._passes_quick_check(decoded, name, check_finite=False) == (not full)
    if full:
        with pytest.raises(RecordError) as caught:
            parse(data)
        assert list(caught.value.problems) == full
    else:
        parse(data)


@pytest.mark.parametrize(("name", "bases"), [("record", RECORD_BASES), ("verdict", VERDICT_BASES)])
def test_quick_check_accepts_the_valid_bases(name: str, bases: list[dict[str, Any]]) -> None:
    for doc in bases:
        assert validation._all_problems(doc, name, check_finite=True) == []
        assert validation._passes_quick_check(doc, name, check_finite=True)


@settings(max_examples=600, deadline=None, derandomize=True)
@given(doc=mutated_documents(RECORD_BASES))
def test_quick_check_agrees_with_full_pass_on_records(doc: Any) -> None:
    assert_quick_check_agrees(doc, "record")


@settings(max_examples=250, deadline=None, derandomize=True)
@given(doc=mutated_documents(VERDICT_BASES))
def test_quick_check_agrees_with_full_pass_on_verdicts(doc: Any) -> None:
    assert_quick_check_agrees(doc, "verdict")


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        # Finite numbers whose sum overflows, and integers in and beyond the float range.
        ({"values": [[1e308, 1e308], [1e308, 1e308]]}, True),
        ({"values": [[1.0, 2.0], [2**1023, 1.0]]}, True),
        ({"values": [[1.0, 2.0], [10**400, 1.0]]}, False),
        ({"timestamps": [0, -(10**400)]}, False),
        ({"values": [[1.0, 2.0], [math.inf, -math.inf]]}, False),
        ({"values": [[1.0, 2.0], [1e308, math.nan]]}, False),
        ({"values": [[1.0, 2.0], [True, 1.0]]}, False),
        ({"values": [[1.0, 2.0], [1.0, 2.0, 3.0]]}, False),
        ({"timestamps": [1e308, 1e308]}, True),
        ({"timestamps": ["2024-05-01T02:00:00Z", "2024-02-30T00:00:00Z"]}, False),
        ({"timestamps": [0, "2024-05-01T02:00:00Z\n"]}, False),
        ({"timestamps": [0, False]}, False),
        ({"timestamps": [0, math.nan]}, False),
        # Not JSON, and unhashable where the schema wants unique items.
        ({"names": ["cpu", {"rss"}]}, False),
    ],
)
def test_counter_arrays_checked_whole_agree_with_full_pass(
    change: dict[str, Any], valid: bool
) -> None:
    doc = full_record()
    doc["counters"].update(change)
    assert validation._passes_quick_check(doc, "record", check_finite=True) is valid
    assert (validation._all_problems(doc, "record", check_finite=True) == []) is valid


def test_patterns_keep_python_end_of_text_in_both_passes() -> None:
    # jsonschema's "$" (Python's) also matches before a final newline; so must the quick check.
    doc = verdict_doc("recommendation")
    doc["verdict_id"] += "\n"
    assert validate_verdict(doc) == []
    assert validation._passes_quick_check(doc, "verdict", check_finite=True)


def test_counter_rows_need_no_length_check_of_their_own() -> None:
    # The quick check leaves the rows' maxItems to the value checks, which want every row as
    # long as counters.names: that holds only while names can never be longer than a row.
    counters = load_schema("record")["$defs"]["counters"]["properties"]
    assert counters["names"]["maxItems"] <= counters["values"]["items"]["maxItems"]


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (("test",), "$.test"),
        (("run_id",), "$.run_id"),
        (("attributes", "runner"), "$.attributes.runner"),
        (("metrics",), '$.metrics["wall_time_s\\u0000"]'),
    ],
)
def test_a_nul_character_anywhere_is_refused_with_its_path(where: Path, path: str) -> None:
    doc = full_record()
    parent = doc
    for part in where[:-1]:
        parent = parent[part]
    if where == ("metrics",):
        doc["metrics"]["wall_time_s\x00"] = doc["metrics"].pop("wall_time_s")
    else:
        parent[where[-1]] += "\x00"
    with pytest.raises(RecordError) as caught:
        parse_record(orjson.dumps(doc))
    assert (caught.value.kind, caught.value.path) == (ErrorKind.SCHEMA, path)
    assert "NUL" in caught.value.message


def test_numbers_beyond_the_float_range_are_refused() -> None:
    doc = full_record()
    doc["metrics"]["wall_time_s"] = 10**400
    [problem] = validate_record(doc)
    assert (problem.kind, problem.path) == (ErrorKind.NON_FINITE, "$.metrics.wall_time_s")
    assert "beyond the range of a 64-bit float" in problem.message
    doc["metrics"]["wall_time_s"] = 2**1023  # a float holds it: only the metrics' bound refuses it
    [problem] = validate_record(doc)
    assert (problem.kind, problem.path) == (ErrorKind.SCHEMA, "$.metrics.wall_time_s")
    assert "beyond 1e+150 in magnitude" in problem.message


def test_metric_bound_is_what_the_change_point_analysis_takes() -> None:
    """A metric value the record contract accepts never fails the analysis on the stream."""
    from perfwatch.detectors.edivisive import prepare_values

    limit = validation.MAX_METRIC_MAGNITUDE
    beyond = float(np.nextafter(limit, math.inf))
    prepare_values([limit, -limit, 1.0])
    with pytest.raises(ValueError, match="too large"):
        prepare_values([beyond, 1.0, 1.0])
    doc = full_record()
    assert validate_record({**doc, "metrics": {"x": limit, "y": {"value": -limit}}}) == []
    assert paths(validate_record({**doc, "metrics": {"x": beyond}})) == {"$.metrics.x"}
    assert paths(validate_record({**doc, "metrics": {"x": -beyond}})) == {"$.metrics.x"}
    assert paths(validate_record({**doc, "metrics": {"y": {"value": beyond}}})) == {
        "$.metrics.y.value"
    }
    # the bound is read from the schema, where it is stated once, both ways
    metric_value = validation.load_schema("record")["$defs"]["metric_value"]
    assert (metric_value["minimum"], metric_value["maximum"]) == (-limit, limit)


def test_the_schema_states_the_limits_checked_beyond_it() -> None:
    """The limits JSON Schema cannot express are the code's; the schema's text, which
    consumers read, states the same numbers."""
    schema = validation.load_schema("record")
    cells = f"{validation.MAX_COUNTER_CELLS:,} cells"
    assert cells in schema["description"]
    assert cells in schema["$defs"]["counters"]["description"]
    assert f"at most {MAX_DOCUMENT_BYTES // 2**20} MiB" in schema["description"]
