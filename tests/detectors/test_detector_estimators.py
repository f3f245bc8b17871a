"""Every detector follows scikit-learn's estimator rules: parameters stored as
given, clone and get_params round-trip, fitted results only after fit."""

from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone

from perfwatch.detectors import (
    CounterRegressionCheck,
    EarlyWarning,
    EDivisive,
    EDivisiveParams,
    InputClustering,
    SeriesAnalyzer,
    detect_change_points,
)


def _step(n: int = 80, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, 0.1, n)
    return np.r_[np.full(n // 2, 10.0), np.full(n - n // 2, 12.0)] + noise


def _assert_clone_round_trips(estimator: object) -> None:
    params = estimator.get_params()  # type: ignore[attr-defined]
    copy = clone(estimator)
    assert type(copy) is type(estimator)
    assert copy.get_params() == params
    assert type(estimator)(**params).get_params() == params


def test_edivisive_clone_and_params_round_trip() -> None:
    _assert_clone_round_trips(EDivisive(window_len=30, max_pvalue=0.01, compat="otava"))
    _assert_clone_round_trips(EDivisive())


def test_edivisive_validates_in_fit_not_in_init() -> None:
    estimator = EDivisive(window_len=1)
    assert estimator.window_len == 1
    with pytest.raises(ValueError, match="window_len"):
        estimator.fit(_step())


def test_edivisive_fitted_attributes_only_after_fit() -> None:
    estimator = EDivisive()
    assert not hasattr(estimator, "change_points_")
    estimator.fit(_step())
    assert [c.index for c in estimator.change_points_] == [40]
    assert estimator.n_values_ == 80
    assert 40 in estimator.weak_points_.tolist()


def test_edivisive_set_params_and_function_form_agree() -> None:
    params = EDivisiveParams(window_len=30, min_segment_len=2)
    estimator = EDivisive().set_params(window_len=30, min_segment_len=2)
    assert estimator.to_params() == params
    assert EDivisive.from_params(params).get_params() == estimator.get_params()
    assert estimator.fit(_step()).change_points_ == detect_change_points(_step(), params)
    with pytest.raises(ValueError, match=r"(?i)invalid parameter"):
        estimator.set_params(window=3)


def test_the_function_form_does_not_load_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from perfwatch.detectors import EDivisiveParams, detect_change_points\n"
        "detect_change_points([1.0, 1.0, 1.0, 2.0, 2.0, 2.0], EDivisiveParams())\n"
        "loaded = [m for m in ('sklearn', 'statsmodels', 'scipy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_detector_class_is_a_scikit_learn_estimator() -> None:
    for detector in (
        EDivisive,
        SeriesAnalyzer,
        CounterRegressionCheck,
        InputClustering,
        EarlyWarning,
    ):
        assert issubclass(detector, BaseEstimator), detector


def test_early_warning_clone_validation_and_fitted_attributes() -> None:
    _assert_clone_round_trips(EarlyWarning(false_alarm_rate=0.01, tail_quantile=0.2, log=True))
    bad = EarlyWarning(false_alarm_rate=2.0)  # stored as given, refused by fit
    assert bad.false_alarm_rate == 2.0
    with pytest.raises(ValueError, match="false_alarm_rate"):
        bad.fit(_step())
    ew = EarlyWarning()
    assert not hasattr(ew, "center_")
    ew.fit(_step())
    assert {"center_", "scale_", "scale_up_", "scale_down_", "n_segment_"} <= set(vars(ew))


def test_series_analyzer_clone_keeps_its_params() -> None:
    params = EDivisiveParams(window_len=20, compat="otava")
    analyzer = SeriesAnalyzer(params)
    analyzer.append(_step())
    copy = clone(analyzer)
    assert copy.get_params() == {"params": params}
    assert len(copy) == 0
    assert copy.append(_step()) == analyzer.change_points_
    with pytest.raises(ValueError, match="fixed"):
        analyzer.set_params(params=EDivisiveParams())


def test_every_public_name_is_importable() -> None:
    import perfwatch.detectors as detectors

    for name in detectors.__all__:
        assert getattr(detectors, name).__name__ == name


def test_counter_check_clone_and_params_round_trip() -> None:
    from perfwatch.detectors import CounterRegressionCheck

    _assert_clone_round_trips(CounterRegressionCheck())
    literal = CounterRegressionCheck.seed_literal(threshold=0.2)
    _assert_clone_round_trips(literal)
    assert clone(literal).get_params()["dependent_selection"] == "ks"


def test_counter_check_sets_nothing_fitted_in_init_and_validates_in_fit() -> None:
    from perfwatch.detectors import CounterRegressionCheck, CounterSamples

    check = CounterRegressionCheck(block=0)
    assert not [name for name in vars(check) if name.endswith("_")]
    assert check.effective_threshold == check.threshold
    run = CounterSamples(["a", "b"], np.ones((30, 2)))
    with pytest.raises(ValueError, match="block"):
        check.fit([run])


def test_input_clustering_clone_and_params_round_trip() -> None:
    from perfwatch.detectors import InputClustering, RunOrSkipRecommender

    clustering = InputClustering("kmeans", attributes=["size", "statements"], n_clusters=2)
    _assert_clone_round_trips(clustering)
    assert clustering.attributes == ["size", "statements"]  # stored as given
    _assert_clone_round_trips(RunOrSkipRecommender(time_tolerance=0.2, close_band=(0.4, 0.6)))


def test_input_clustering_fits_arrays_with_optional_ids() -> None:
    from perfwatch.detectors import InputClustering

    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(10, 1, (20, 2)), rng.normal(100, 1, (20, 2))])
    clustering = InputClustering("kmeans", attributes=("size", "statements"), n_clusters=2)
    assert not [name for name in vars(clustering) if name.endswith("_")]
    clustering.fit(X)
    assert clustering.labels_["0"] == 0 and clustering.labels_["39"] == 1
    named = clone(clustering).fit(X[::-1], ids=[f"i{k}" for k in range(40)])
    assert sorted(c.size for c in named.clusters_) == [20, 20]
    with pytest.raises(ValueError, match="2 columns"):
        clone(clustering).fit(X[:, :1])


def test_detector_modules_import_no_records_formats_store_or_stream() -> None:
    from pathlib import Path

    import perfwatch.detectors

    for module in Path(perfwatch.detectors.__file__).parent.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ]
        imported += [
            a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
        ]
        for layer in ("records", "formats", "store", "stream"):
            assert not [m for m in imported if m.startswith(f"perfwatch.{layer}")], module.name
