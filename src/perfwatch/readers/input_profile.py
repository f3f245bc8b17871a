"""Input-profile files (``perfwatch.input-profile/v1``, ``schemas/input-profile.schema.json``).

A file holds the per-input profiles of one suite run: the whole suite (the
baseline to cluster) or a sample of inputs after a code update. A perfwatch
record that carries an ``inputs`` block is read as well, so a record taken
from the stream can serve as a baseline or an update.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

from perfwatch.contract.models import InputProfile, Record
from perfwatch.contract.timestamps import format_rfc3339
from perfwatch.contract.validation import RECORD_SCHEMA, RecordError, load_schema
from perfwatch.readers.errors import SourceError, read_source, utf8_text
from perfwatch.readers.tool_json import LocatedRecord

if TYPE_CHECKING:  # jsonschema is imported when a file is first validated
    from jsonschema import Draft202012Validator

INPUT_PROFILE_SCHEMA = "perfwatch.input-profile/v1"
ProfileKind = Literal["full_suite", "update_sample"]
# The test id of the record carrying a file's profiles, unless the user names another.
INPUT_PROFILES_TEST = "input-profiles"


@dataclass(frozen=True)
class InputProfileFile:
    kind: ProfileKind
    profiles: list[InputProfile]
    created: str
    code_version: str | None = None
    command: list[str] | None = None
    measurement: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        *,
        kind: str,
        profiles: Sequence[InputProfile],
        measurement: dict[str, Any] | None = None,
        command: Sequence[str] | None = None,
        code_version: str | None = None,
    ) -> InputProfileFile:
        """A file of profiles measured now."""
        if kind not in ("full_suite", "update_sample"):
            raise ValueError(f"kind must be full_suite or update_sample, got {kind!r}")
        return cls(
            kind=cast(ProfileKind, kind),
            profiles=list(profiles),
            created=format_rfc3339(datetime.now(UTC)),
            code_version=code_version,
            command=None if command is None else list(command),
            measurement=dict(measurement or {}),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": INPUT_PROFILE_SCHEMA,
            "kind": self.kind,
            "created": self.created,
        }
        if self.code_version is not None:
            doc["code_version"] = self.code_version
        if self.command is not None:
            doc["command"] = self.command
        if self.measurement:
            doc["measurement"] = self.measurement
        doc["profiles"] = [profile.to_json() for profile in self.profiles]
        return doc


def write_input_profile(path: str | Path, profile_file: InputProfileFile) -> None:
    doc = profile_file.to_json()
    problems = _problems(doc)
    if problems:
        raise ValueError(f"{path}: refusing to write an invalid input profile: {problems[0]}")
    Path(path).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")


def read_input_profile(path: str | Path) -> InputProfileFile:
    """Read an input-profile file, or a perfwatch record with ``inputs``; SourceError if bad."""
    data = read_source(path)
    not_profile = "not a perfwatch input-profile JSON document"
    text = utf8_text(data, path, f"{not_profile}: not UTF-8 text")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        # The decoder's own words ("expected 'true'") mean little to someone who gave a CSV.
        raise SourceError(
            path, f"{not_profile}: not valid JSON", line=error.lineno, column=error.colno
        ) from None
    return input_profile_from_json(doc, source=str(path))


def input_profile_from_json(doc: Any, *, source: str = "<document>") -> InputProfileFile:
    if isinstance(doc, dict) and doc.get("schema") == RECORD_SCHEMA:
        return _from_record(doc, source)
    problems = _problems(doc)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise SourceError(source, problems[0] + more)
    return InputProfileFile(
        kind=doc["kind"],
        profiles=[InputProfile(**item) for item in doc["profiles"]],
        created=doc["created"],
        code_version=doc.get("code_version"),
        command=doc.get("command"),
        measurement=doc.get("measurement", {}),
    )


def _from_record(doc: dict[str, Any], source: str) -> InputProfileFile:
    try:
        record = Record.from_json(doc)
    except RecordError as error:
        raise SourceError(source, str(error)) from None
    if record.inputs is None:
        raise SourceError(source, "$.inputs: the record carries no per-input profiles")
    return InputProfileFile(
        kind=record.inputs.kind,
        profiles=list(record.inputs.profiles),
        created=format_rfc3339(record.timestamp),
        code_version=record.commit,
    )


@cache
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schema = orjson.loads(
        resources.files("perfwatch").joinpath("schemas", "input-profile.schema.json").read_bytes()
    )
    record_schema = load_schema("record")
    registry: Registry = Registry().with_resource(
        record_schema["$id"], Resource.from_contents(record_schema)
    )
    return Draft202012Validator(schema, registry=registry)


def _problems(doc: Any) -> list[str]:
    """Every problem of a decoded input-profile document, as ``$.path: what is wrong``."""
    problems = [
        f"{error.json_path}: {error.message}"
        for error in sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]
    if problems or not isinstance(doc, dict):
        return problems
    for index, item in enumerate(doc["profiles"]):
        for name, value in item.items():
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"$.profiles[{index}].{name}: {value} is not a finite number")
    counts = Counter(p["input_id"] for p in doc["profiles"])
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        problems.append(f"$.profiles: input_id {repeated[0]!r} appears more than once")
    return problems


def profile_record(
    profile_file: InputProfileFile, test_id: str, reference: InputProfileFile | None = None
) -> dict[str, Any]:
    """A partial record (identity to be completed) carrying the profiles and, for a full
    suite, its totals as metrics (a sample's totals say nothing about the suite)."""
    profiles = profile_file.to_json()["profiles"]
    inputs: dict[str, Any] = {"kind": profile_file.kind, "profiles": profiles}
    if reference is not None:
        inputs["reference_profiles"] = reference.to_json()["profiles"]
    metrics = {}
    if profile_file.kind == "full_suite":
        metrics = {
            f"inputs_{name}": {
                "value": sum(p[name] for p in profiles),
                "unit": "s",
                "direction": "lower_is_better",
            }
            for name in ("cpu_time_s", "wall_time_s")
        }
    return {
        "schema": RECORD_SCHEMA,
        "test": test_id,
        "timestamp": profile_file.created,
        "metrics": metrics,
        "inputs": inputs,
    }


def looks_like_input_profile(document: Any) -> bool:
    """Whether a JSON document is an input-profile file."""
    return isinstance(document, dict) and document.get("schema") == INPUT_PROFILE_SCHEMA


def records_from_input_profile(document: Any, source: str) -> list[LocatedRecord]:
    """The record carrying an input-profile file's profiles (test `INPUT_PROFILES_TEST`)."""
    profile_file = input_profile_from_json(document, source=source)
    return [LocatedRecord("profiles", profile_record(profile_file, INPUT_PROFILES_TEST))]
