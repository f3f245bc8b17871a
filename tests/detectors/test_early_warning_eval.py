"""The early-warning evaluations (benchmarks/eval_early_warning.py and
eval_early_warning_stream.py): their helpers on hand-checked cases."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eval_early_warning import ThreeMad, cusum_delay, cusum_limit, one_run_limit, series, summary
from eval_early_warning_stream import first_delays


def test_summary_counts_unflagged_series_as_latest() -> None:
    got = summary([1, 2, 3, None])
    assert got["flagged_pct"] == 75.0
    assert got["median"] == 2.5
    assert math.isinf(got["p90"])
    assert summary([1, 1, 2, 2, 2, 2, 2, 2, 2, 9])["p90"] == 9.0


def test_cusum_delay_by_hand() -> None:
    # k = 1, h = 2: the upper sum goes 2, 4 -> alarm on the 2nd value (4 > 2)
    assert cusum_delay(np.array([3.0, 3.0, 3.0]), k=1.0, h=2.0) == 2
    assert cusum_delay(np.array([-3.0, -3.0]), k=1.0, h=2.0) == 2
    assert cusum_delay(np.array([1.0, 1.0, 1.0]), k=1.0, h=2.0) is None


def test_cusum_limit_meets_its_false_alarm_rate() -> None:
    # Siegmund: one side's ARL0 = (exp(2kb) - 2kb - 1) / (2k^2), b = h + 1.166;
    # two sides halve it.
    k = 1.5
    h = cusum_limit(k)
    b = h + 1.166
    assert (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k) / 2 == pytest.approx(1000.0)


def test_series_steps_at_the_stated_run_by_the_stated_size() -> None:
    values, n0, level, sd = series("gaussian", 5.0, 7)
    assert 60 <= n0 <= 200 and values.shape[0] == n0 + 30
    assert abs(np.median(values[:n0]) - level) < 0.5 * sd
    shift = abs(np.mean(values[n0:]) - np.mean(values[:n0])) / sd
    assert shift == pytest.approx(5.0, abs=0.7)
    stable, n_stable, _, _ = series("gaussian", 0.0, 7)
    assert stable.shape[0] == n_stable + 300


def test_three_mad_baseline_by_hand() -> None:
    # median 5, MAD 2 -> scale 2.9652: the limits are 5 -/+ 8.8956
    rule = ThreeMad().fit(np.arange(1.0, 10.0))
    assert list(rule.alarms(np.array([13.8, 13.9, -3.8, -3.9]))) == [0, 1, 0, 1]


def test_one_run_limit_on_gaussian_noise() -> None:
    # two-sided 2 / 1 000 limits at -/+ 3.090: a 5-sigma step's first run is beyond
    # them with probability P(Z > -1.910) = 0.9719
    assert one_run_limit("gaussian") == pytest.approx(0.9719, abs=0.002)


def test_first_delays_count_from_the_change() -> None:
    def verdict(kind: str, test: str, run: int, index: int | None = None) -> dict[str, object]:
        body: dict[str, object] = {"kind": kind, "series": {"test": test}}
        body["record_run_id"] = f"{test}#{run}"
        if index is not None:
            body["change_point"] = {"index": index}
        return body

    verdicts = [
        verdict("change_point.suspected", "a", 40),  # before the change: not counted
        verdict("change_point.suspected", "a", 50),
        verdict("change_point.suspected", "a", 52),
        verdict("change_point.detected", "a", 53, index=30),  # too far from the step
        verdict("change_point.detected", "a", 54, index=51),
        verdict("change_point.confirmed", "a", 59, index=51),
        verdict("change_point.detected", "b", 70, index=60),
    ]
    got = first_delays(verdicts, {"a": 50, "b": 60})
    assert got["change_point.suspected"] == {"a": 1, "b": None}
    assert got["change_point.detected"] == {"a": 5, "b": 11}
    assert got["change_point.confirmed"] == {"a": 10, "b": None}
