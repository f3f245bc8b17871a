"""The detectors: E-Divisive change points, the early warning on the newest
run, the clustered-counter regression check and the run-or-skip input
clustering.

Names are loaded on first use (PEP 562): ``from perfwatch.detectors import
detect_change_points`` loads numpy and the compiled kernels only; the estimator
classes (scikit-learn's ``BaseEstimator``) load scikit-learn with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfwatch.detectors.analyzer import SeriesAnalyzer
    from perfwatch.detectors.counters import (
        CounterCheckResult,
        CounterRegressionCheck,
        CounterSamples,
        PreparedRuns,
    )
    from perfwatch.detectors.direction import classify_direction
    from perfwatch.detectors.early_warning import EarlyWarning, EarlyWarningAssessment
    from perfwatch.detectors.edivisive import (
        ChangePoint,
        EDivisiveParams,
        detect_change_points,
    )
    from perfwatch.detectors.edivisive_estimator import EDivisive
    from perfwatch.detectors.inputs import (
        InputClustering,
        RunOrSkipRecommender,
        sample_inputs,
    )

_MODULE_OF = {
    "ChangePoint": "edivisive",
    "EDivisive": "edivisive_estimator",
    "EDivisiveParams": "edivisive",
    "EarlyWarning": "early_warning",
    "EarlyWarningAssessment": "early_warning",
    "detect_change_points": "edivisive",
    "SeriesAnalyzer": "analyzer",
    "classify_direction": "direction",
    "CounterCheckResult": "counters",
    "CounterRegressionCheck": "counters",
    "CounterSamples": "counters",
    "PreparedRuns": "counters",
    "InputClustering": "inputs",
    "RunOrSkipRecommender": "inputs",
    "sample_inputs": "inputs",
}

__all__ = [
    "ChangePoint",
    "CounterCheckResult",
    "CounterRegressionCheck",
    "CounterSamples",
    "EDivisive",
    "EDivisiveParams",
    "EarlyWarning",
    "EarlyWarningAssessment",
    "InputClustering",
    "PreparedRuns",
    "RunOrSkipRecommender",
    "SeriesAnalyzer",
    "classify_direction",
    "detect_change_points",
    "sample_inputs",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
