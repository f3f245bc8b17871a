"""The profile attributes the run-or-skip recommender reads, and its clustering methods.

Kept apart from :mod:`perfwatch.detectors.inputs` so that command-line options can
list them without loading scikit-learn.
"""

from __future__ import annotations

from typing import Literal

ATTRIBUTES: tuple[str, ...] = (
    "size",
    "wall_time_s",
    "cpu_time_s",
    "peak_memory_bytes",
    "statements",
    "function_calls",
    "loop_iterations",
    "conditionals",
)
# Wall time is left out by default: it says what CPU time says, with more noise.
CLUSTER_ATTRIBUTES: tuple[str, ...] = tuple(name for name in ATTRIBUTES if name != "wall_time_s")
NOISE = -1
Method = Literal["dbscan", "kmeans", "gmm", "agglomerative"]
METHODS: tuple[str, ...] = ("dbscan", "kmeans", "gmm", "agglomerative")
Scaling = Literal["auto", "linear"]
Rule = Literal["paired", "paper"]
RULES: tuple[str, ...] = ("paired", "paper")
TimeAttribute = Literal["cpu_time_s", "wall_time_s"]
