"""The counter decision rule's batched statistics for one model, as the hand-checked
tests state their cases (``perfwatch.detectors.counter_decision`` works on many)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from perfwatch.detectors.counter_decision import (
    VariancePrior,
    error_statistics,
    excess_error_tests,
)


class ErrorTest(NamedTuple):
    z: float
    pvalue: float
    df: float


def trimmed_mean_variance(errors: np.ndarray, trim: float) -> float:
    """The sampling variance ``error_statistics`` gives one model's block errors."""
    return float(error_statistics(np.asarray(errors, dtype=np.float64)[:, None], trim)[1][0])


def effective_blocks(errors: np.ndarray, trim: float) -> float:
    """The effective number of blocks ``error_statistics`` gives one model's errors."""
    return float(error_statistics(np.asarray(errors, dtype=np.float64)[:, None], trim)[2][0])


def excess_error_test(
    error: float,
    error_variance: float,
    good_errors: Sequence[float],
    good_variances: Sequence[float],
    error_blocks: float = math.inf,
    prior: VariancePrior | None = None,
) -> ErrorTest:
    """``excess_error_tests`` of one model."""
    z, pvalue, df = excess_error_tests(
        np.array([error], dtype=np.float64),
        np.array([error_variance], dtype=np.float64),
        np.array([list(good_errors)], dtype=np.float64).reshape(1, -1),
        np.array([list(good_variances)], dtype=np.float64).reshape(1, -1),
        np.array([error_blocks], dtype=np.float64),
        prior,
    )
    return ErrorTest(float(z[0]), float(pvalue[0]), float(df[0]))
