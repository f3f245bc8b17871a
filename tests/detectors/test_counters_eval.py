"""The Shang et al.-style evaluation (benchmarks/eval_counters.py) holds its bar: every injected
regression flagged, no good run flagged, good and regression runs separated, and the
traditional approaches fail where the paper says they do. The whole evaluation runs in
well under a minute, so the test runs it as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "eval_counters.py"


@pytest.fixture(scope="module")
def evaluation() -> dict:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return orjson.loads(completed.stdout)


def test_every_regression_is_flagged_and_no_good_run(evaluation: dict) -> None:
    ours = evaluation["summary"]["clustered"]
    assert ours["missed"] == []
    assert [run for run in ours["false_alarms"] if run.startswith("no regression")] == []
    # some threshold separates every good and noisy-but-good run from every regression
    # (the calibrated one may not: it learns from the five quieter good runs only)
    assert ours["separation"] > 0
    kinds = {row["kind"] for row in evaluation["rows"]}
    assert kinds == {"good", "noisy", "regression"}
    assert sum(row["kind"] == "regression" for row in evaluation["rows"]) == 6


def test_no_good_run_calibrates_its_own_threshold(evaluation: dict) -> None:
    good = [row for row in evaluation["rows"] if row["kind"] == "good"]
    # each good run's threshold comes from the other good runs only, so they differ
    assert len({row["clustered"]["threshold"] for row in good}) == len(good)


def test_the_relationship_only_regression_moves_no_mean(evaluation: dict) -> None:
    assert evaluation["effects"]["F"]["largest_abs_mean_change"] <= 0.03
    row = next(r for r in evaluation["rows"] if r["run"] == "regression F")
    assert row["clustered"]["flagged"]


def test_the_traditional_approaches_fail(evaluation: dict) -> None:
    summary = evaluation["summary"]
    # one model for a fixed counter misses regressions of other resources
    assert summary["CPU model"]["missed"]
    assert summary["memory model"]["missed"]
    # a test on every counter flags every good run
    good = [row["run"] for row in evaluation["rows"] if row["kind"] != "regression"]
    assert summary["per-counter KS"]["false_alarms"] == good
    # the paper's steps read literally cannot tell good runs from regressions
    literal = summary["seed literal"]
    assert literal["separation"] < 0 or literal["missed_at_30%"] or literal["false_alarms_at_30%"]
