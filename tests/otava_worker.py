"""Answers questions about Apache Otava 0.8 over stdin/stdout, one JSON object a line.

Runs inside the reference environment (apache-otava and the scipy/numpy it pins),
never inside perfwatch's own: see ``otava_reference.py``, which starts it. It
imports nothing from perfwatch.

Requests and replies:
- ``{"op": "change_points", "values": [...], "options": {...}}`` ->
  ``{"change_points": [{"index", "pvalue", "magnitude", "forward_change_percent",
  "mean_before", "std_before", "mean_after", "std_after"}, ...]}``; ``null`` in values
  is a missing run, filled as Otava's ``AnalyzedSeries`` fills it.
- ``{"op": "analyze_json_runs", "runs": [...], "options": {...}}`` -> ``{"change_points":
  {metric: [...]}}``: Otava's own path from stored runs to change points, its JSON
  importer (runs as Otava's JSON format: ``timestamp``, ``metrics`` of ``name``/``value``,
  ``attributes``; a ``null`` value is a missing one) and ``Series.analyze``, which fills
  missing values in; the change points as for ``change_points``.
- ``{"op": "change_points_orig", "values": [...], "seed": S}`` -> ``{"indices": [...]}``:
  the change points of Otava's original E-Divisive (``compute_change_points_orig``: no
  windows, a permutation test of each split, 100 permutations drawn with ``seed``), missing
  values filled in as for ``change_points``; with ``"permutations": N`` (and optionally
  ``"max_pvalue"``, 0.001) the same detector with N permutations per test.
- ``{"op": "candidate", "values": [...]}`` -> ``{"index", "qhat"}`` of the divergence's
  best split of the whole list (``PairDistanceCalculator``).
- ``{"op": "mean_std", "values": [...]}`` -> ``{"mean", "std"}``: numpy's mean and
  population standard deviation, as Otava computes a segment's.
- ``{"op": "time_change_points", "values": [...], "repeats": N}`` -> ``{"seconds": [...]}``,
  the wall time of each of N full analyses.
- ``{"op": "time_batch", "series": [[...], ...]}`` -> ``{"seconds": S, "change_points":
  [[...], ...]}``: one full analysis of each series, timed together.
- ``{"op": "time_appends", "values": [...], "start": K}`` -> ``{"seconds_per_append": S,
  "indices": [...]}``: Otava's ``AnalyzedSeries`` over the first K runs, then one
  ``append`` per remaining run; the indices are its change points at the end.
Errors come back as ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from otava.analysis import compute_change_points, compute_change_points_orig, fill_missing
from otava.change_point_divisive.calculator import PairDistanceCalculator
from otava.change_point_divisive.detector import ChangePointDetector
from otava.change_point_divisive.significance_test import PermutationsSignificanceTester
from otava.data_selector import DataSelector
from otava.importer import JsonImporter
from otava.series import AnalysisOptions, Metric, Series
from otava.test_config import JsonTestConfig


def change_points(values: list[float | None], options: dict[str, Any]) -> list[dict[str, Any]]:
    filled = list(values)
    fill_missing(filled)
    found, _ = compute_change_points(filled, **options)
    return described(found)


def described(found: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "index": int(c.index),
            "pvalue": float(c.stats.pvalue),
            "magnitude": float(c.stats.change_magnitude()),
            "forward_change_percent": float(c.stats.forward_rel_change() * 100.0),
            "mean_before": float(c.stats.mean_1),
            "std_before": float(c.stats.std_1),
            "mean_after": float(c.stats.mean_2),
            "std_after": float(c.stats.std_2),
        }
        for c in found
    ]


def analyze_json_runs(runs: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.json"
        path.write_text(json.dumps(runs))
        series = JsonImporter().fetch_data(JsonTestConfig("runs", str(path), None), DataSelector())
    analysis = AnalysisOptions()
    for name, value in options.items():
        setattr(analysis, name, value)
    analyzed = series.analyze(analysis)
    return {metric: described(found) for metric, found in analyzed.change_points.items()}


def change_points_orig(filled: list[float], request: dict[str, Any]) -> list[int]:
    """Otava's ``compute_change_points_orig``, or, given ``permutations``, the same
    detector with that many permutations per test (its function fixes 100, which cannot
    show a p-value below 1/101 however small ``max_pvalue`` is)."""
    seed = int(request["seed"])
    if "permutations" not in request:
        found, _ = compute_change_points_orig(filled, seed=seed)
    else:
        tester = PermutationsSignificanceTester(
            max_pvalue=float(request.get("max_pvalue", 0.001)),
            permutations=int(request["permutations"]),
            calculator=PairDistanceCalculator,
            seed=seed,
        )
        detector = ChangePointDetector(
            significance_tester=tester, calculator=PairDistanceCalculator
        )
        found = detector.get_change_points(series=filled)
    return sorted(int(c.index) for c in found)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    values = request.get("values", [])
    if op == "change_points":
        return {"change_points": change_points(values, request.get("options", {}))}
    if op == "analyze_json_runs":
        return {"change_points": analyze_json_runs(request["runs"], request.get("options", {}))}
    if op == "change_points_orig":
        filled = list(values)
        fill_missing(filled)
        return {"indices": change_points_orig(filled, request)}
    if op == "mean_std":
        return {"mean": float(np.mean(values)), "std": float(np.std(values))}
    if op == "candidate":
        calculator = PairDistanceCalculator(np.asarray(values, dtype=float))
        candidate = calculator.get_candidate_change_point(slice(0, len(values)))
        return {"index": int(candidate.index), "qhat": float(candidate.qhat)}
    if op == "time_change_points":
        seconds = []
        for _ in range(int(request["repeats"])):
            started = time.perf_counter()
            compute_change_points(list(values))
            seconds.append(time.perf_counter() - started)
        return {"seconds": seconds}
    if op == "time_batch":
        started = time.perf_counter()
        for series in request["series"]:
            compute_change_points(list(series))
        seconds = time.perf_counter() - started
        return {
            "seconds": seconds,
            "change_points": [change_points(series, {}) for series in request["series"]],
        }
    if op == "time_appends":
        start = int(request["start"])
        metrics = {"m": Metric()}
        series = Series("bench", None, list(range(start)), metrics, {"m": values[:start]}, {})
        analyzed = series.analyze(AnalysisOptions())
        started = time.perf_counter()
        for i in range(start, len(values)):
            analyzed.append([i], {"m": [values[i]]}, {})
        seconds = time.perf_counter() - started
        return {
            "seconds_per_append": seconds / max(1, len(values) - start),
            "indices": [int(c.index) for c in analyzed.change_points["m"]],
        }
    return {"error": f"unknown op {op!r}"}


def main() -> None:
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as error:  # the client shows it beside the request that failed
            reply = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
