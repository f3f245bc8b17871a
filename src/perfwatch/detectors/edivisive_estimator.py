"""E-Divisive as a scikit-learn estimator.

A module of its own because scikit-learn's ``BaseEstimator`` brings scikit-learn
and scipy with it (seconds to import): ``perfwatch analyze`` calls
:func:`perfwatch.detectors.edivisive.detect_change_points`, which this
estimator wraps, and never loads them.
"""

from __future__ import annotations

from dataclasses import fields

from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator

from perfwatch.detectors.edivisive import EDivisiveParams, fit_change_points

_DEFAULTS = EDivisiveParams()


class EDivisive(BaseEstimator):
    """Change points of one series (oldest first); NaN/None are gaps.

    Parameters are those of :class:`EDivisiveParams` (checked by ``fit``).

    Fitted attributes:
    change_points_: list of :class:`ChangePoint`, by index.
    weak_points_: sorted indices the split step proposed (before the merge).
    n_values_: length of the series.
    """

    def __init__(
        self,
        window_len: int = _DEFAULTS.window_len,
        max_pvalue: float = _DEFAULTS.max_pvalue,
        min_magnitude: float = _DEFAULTS.min_magnitude,
        compat: str | None = _DEFAULTS.compat,
        min_segment_len: int = _DEFAULTS.min_segment_len,
        noise_floor: float = _DEFAULTS.noise_floor,
        selection_correction: bool = _DEFAULTS.selection_correction,
        correlated_selection: bool = _DEFAULTS.correlated_selection,
        local_split_test: bool = _DEFAULTS.local_split_test,
        trend_test: bool = _DEFAULTS.trend_test,
        trend_check: bool = _DEFAULTS.trend_check,
        trim: float = _DEFAULTS.trim,
        refine: bool = _DEFAULTS.refine,
    ) -> None:
        self.window_len = window_len
        self.max_pvalue = max_pvalue
        self.min_magnitude = min_magnitude
        self.compat = compat
        self.min_segment_len = min_segment_len
        self.noise_floor = noise_floor
        self.selection_correction = selection_correction
        self.correlated_selection = correlated_selection
        self.local_split_test = local_split_test
        self.trend_test = trend_test
        self.trend_check = trend_check
        self.trim = trim
        self.refine = refine

    @classmethod
    def from_params(cls, params: EDivisiveParams) -> EDivisive:
        return cls(**{f.name: getattr(params, f.name) for f in fields(params)})

    def to_params(self) -> EDivisiveParams:
        """The validated parameter record (ValueError on a bad parameter)."""
        return EDivisiveParams(**self.get_params())

    def fit(self, values: ArrayLike) -> EDivisive:
        self.weak_points_, self.change_points_, self.n_values_ = fit_change_points(
            values, self.to_params()
        )
        return self
