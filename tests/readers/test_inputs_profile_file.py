"""Input-profile files: writing, reading, and precise errors on bad ones."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from perfwatch.contract.models import InputProfile
from perfwatch.readers.errors import SourceError
from perfwatch.readers.input_profile import (
    InputProfileFile,
    read_input_profile,
    write_input_profile,
)

PROFILES = [
    InputProfile("cfg-1", 120.0, 0.002, 0.0019, 4096, 310, 12, 40, 55),
    InputProfile("cfg-2", 9000.0, 0.05, 0.048, 65536, 21000, 400, 5000, 3100),
]


def written(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "profile.json"
    path.write_bytes(orjson.dumps(doc))
    return path


def valid_document() -> dict:
    return InputProfileFile.create(
        kind="full_suite", profiles=PROFILES, measurement={"timing_repeats": 5}
    ).to_json()


def test_round_trip(tmp_path: Path) -> None:
    original = InputProfileFile.create(
        kind="update_sample",
        profiles=PROFILES,
        measurement={"timing_repeats": 5, "warmup_passes": 1},
        command=["pytest", "tests/perf"],
        code_version="abc123",
    )
    path = tmp_path / "out.json"
    write_input_profile(path, original)
    assert read_input_profile(path) == original


def test_a_record_with_inputs_is_read_as_a_profile_file(tmp_path: Path) -> None:
    record = {
        "schema": "perfwatch.record/v1",
        "test": "suite",
        "run_id": "r1",
        "commit": "abc",
        "timestamp": "2025-01-02T03:04:05Z",
        "metrics": {},
        "inputs": {"kind": "full_suite", "profiles": valid_document()["profiles"]},
    }
    profile_file = read_input_profile(written(tmp_path, record))
    assert profile_file.profiles == PROFILES and profile_file.code_version == "abc"


def test_a_record_without_inputs_is_refused(tmp_path: Path) -> None:
    record = {
        "schema": "perfwatch.record/v1",
        "test": "suite",
        "run_id": "r1",
        "timestamp": "2025-01-02T03:04:05Z",
        "metrics": {"t": 1.0},
    }
    with pytest.raises(SourceError, match=r"\$\.inputs: the record carries no per-input"):
        read_input_profile(written(tmp_path, record))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["profiles"][1].update(statements=-3), r"\$\.profiles\[1\]\.statements"),
        (lambda d: d["profiles"][0].pop("cpu_time_s"), "'cpu_time_s' is a required property"),
        (lambda d: d["profiles"][0].update(colour="red"), "colour"),
        (lambda d: d.update(kind="partial"), r"\$\.kind"),
        (lambda d: d["profiles"][1].update(input_id="cfg-1"), "'cfg-1' appears more than once"),
        (lambda d: d.update(profiles=[]), r"\$\.profiles"),
    ],
)
def test_bad_documents_name_the_field(tmp_path: Path, change, message: str) -> None:
    doc = valid_document()
    change(doc)
    with pytest.raises(SourceError, match=message) as raised:
        read_input_profile(written(tmp_path, doc))
    assert str(raised.value).startswith(str(tmp_path / "profile.json"))


def test_unreadable_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        read_input_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SourceError, match="not valid JSON"):
        read_input_profile(bad)


def test_writing_an_invalid_file_is_refused(tmp_path: Path) -> None:
    infinite = InputProfile("x", float("inf"), 0.1, 0.1, 1, 1, 1, 1, 1)
    bad = InputProfileFile.create(kind="full_suite", profiles=[infinite])
    with pytest.raises(ValueError, match=r"\$\.profiles\[0\]\.size: inf is not a finite"):
        write_input_profile(tmp_path / "x.json", bad)
    with pytest.raises(ValueError, match="kind must be"):
        InputProfileFile.create(kind="nightly", profiles=PROFILES)
