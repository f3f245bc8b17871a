"""The early-warning evaluation (benchmarks/eval_early_warning.py): its helpers on
hand-checked cases."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from eval_early_warning import cusum_delay, cusum_limit, series, summary


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
