"""The change points the dashboard shows: `perfwatch analyze` on the stored history.

A verdict carries the numbers a change point had when it was published; the
history has grown since. The dashboard therefore shows the numbers the
detector gives on the whole stored history now, with the parameters the
processor uses for the series (`perfwatch analyze`'s defaults unless the
configuration's `[analyzer]` rules say otherwise), so each change point has
one set of numbers, equal to `perfwatch analyze`'s on the same runs.

Episodes pair a regression with the later improvement that returns the metric
to its old level, by the one episode rule the verdicts use too
(`contract.episodes`): a regression fixed a few runs later is shown as one
episode, and a series' status is its worst open regression rather than the
direction of its latest change.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfwatch.config import Config
from perfwatch.contract.episodes import FIX_SHARE, Level, regression_fixes
from perfwatch.detectors.edivisive import EDivisiveParams, classify_direction, detect_change_points
from perfwatch.state import Point, SeriesKey

# Statuses, worst first: the overview sorts by this rank.
STATUSES = ("regression", "changed", "improvement", "fixed", "stable")
# Analyses kept (LRU): a page load re-reads the store but analyses only grown series.
_CACHED_ANALYSES = 4096


def metric_direction_from_evidence(evidence: Mapping[str, Any]) -> str | None:
    """The metric's direction a change point's evidence implies: a regression that went
    up is on a lower-is-better metric, and so on; None when the evidence says nothing."""
    label = evidence.get("direction")
    change = evidence.get("forward_change_percent")
    if label not in ("regression", "improvement") or not isinstance(change, int | float):
        return None
    if change == 0 or not math.isfinite(change):
        return None
    went_up = change > 0
    return "lower_is_better" if went_up == (label == "regression") else "higher_is_better"


class ChangePointAnalysis:
    """Change points of stored series, computed as `perfwatch analyze` computes them."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self._cache: OrderedDict[tuple[str, str, str], list[dict[str, Any]]] = OrderedDict()

    def params_for(self, key: SeriesKey) -> EDivisiveParams:
        """The parameters the processor analyses the series with."""
        return EDivisiveParams.from_dict(self.config.analyzer_params_for(key.test, key.metric))

    def change_points(
        self, key: SeriesKey, points: Sequence[Point], direction: str | None
    ) -> list[dict[str, Any]]:
        """The series' change points, oldest first: the fields of `perfwatch analyze
        --format json` and the run id of the first run after the change."""
        if len(points) < 2:
            return []
        values = np.array([point.value for point in points], dtype=np.float64)
        params = self.params_for(key)
        cache_key = (
            key.canonical,
            repr(sorted(params.to_dict().items())),
            hashlib.sha256(values.tobytes()).hexdigest(),
        )
        found = self._cache.get(cache_key)
        if found is None:
            found = [change.to_dict() for change in detect_change_points(values, params)]
            self._cache[cache_key] = found
            if len(self._cache) > _CACHED_ANALYSES:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(cache_key)
        result = []
        for change in found:
            point = points[change["index"]]
            result.append(
                {
                    **change,
                    "run_id": point.run_id,
                    "commit": point.commit,
                    "time": point.time,
                    "direction": classify_direction(change["forward_change_percent"], direction),
                }
            )
        return result

    def direction_for(
        self, metric: str, declared: str | None, evidence: Sequence[Mapping[str, Any]]
    ) -> str | None:
        """The metric's direction: as the records declared it (kept by the processor, or
        else implied by the evidence of the series' verdicts, latest first), else the
        configuration's `[directions]`."""
        if declared is not None:
            return declared
        for block in reversed(evidence):
            direction = metric_direction_from_evidence(block)
            if direction is not None:
                return direction
        return self.config.direction_for(metric)


def episodes(
    change_points: Sequence[Mapping[str, Any]], fix_share: float | None = FIX_SHARE
) -> list[dict[str, Any]]:
    """The change points as episodes, oldest first.

    A regression is an episode, open until a later improvement fixes it by the
    episode rule (`contract.episodes`; `fix_share` None: within the noise
    alone): that improvement closes it as fixed instead of being an episode of
    its own. Other improvements and changes of unknown direction are episodes
    by themselves.
    """
    ordered = sorted(change_points, key=lambda cp: int(cp["index"]))
    fixed_by = regression_fixes([Level.of(cp) for cp in ordered], fix_share)
    fixes = {position for position in fixed_by.values() if position is not None}
    result = []
    for position, change in enumerate(ordered):
        if position in fixes:
            continue
        direction = change["direction"]
        fix = fixed_by.get(position)
        episode = {
            "kind": direction if direction in ("regression", "improvement") else "changed",
            "change": change,
            "fixed_by": None if fix is None else ordered[fix],
        }
        result.append(_episode_dict(episode))
    return result


def _episode_dict(episode: Mapping[str, Any]) -> dict[str, Any]:
    change, fixed_by = episode["change"], episode["fixed_by"]
    # Runs by id, in the words of the webhook's summary ("regression +5.0% at run R, fixed
    # at run F"): an alert and the dashboard name the same run the same way.
    text = f"{episode['kind']} {change['forward_change_percent']:+.1f}% at run {change['run_id']}"
    if fixed_by is not None:
        text += f", fixed at run {fixed_by['run_id']}"
    elif episode["kind"] == "regression":
        text += " (open)"
    return {
        "kind": episode["kind"],
        "index": change["index"],
        "run_id": change["run_id"],
        "commit": change.get("commit"),
        "forward_change_percent": change["forward_change_percent"],
        "open": episode["kind"] == "regression" and fixed_by is None,
        "fixed_index": None if fixed_by is None else fixed_by["index"],
        "fixed_run_id": None if fixed_by is None else fixed_by["run_id"],
        "fixed_commit": None if fixed_by is None else fixed_by.get("commit"),
        "text": text,
    }


def status_of(series_episodes: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """The series' status and the episode it comes from.

    "regression" while a regression is open (the largest open one, the latest of
    equals, as the verdicts' `series_status` names it), else the latest
    episode's: "fixed" (a regression that was fixed), "improvement", "changed"
    (direction unknown); "stable" without change points.
    """
    opened = [e for e in series_episodes if e["open"]]
    if opened:
        worst = max(opened, key=lambda e: (abs(e["forward_change_percent"]), e["index"]))
        return "regression", dict(worst)
    if not series_episodes:
        return "stable", None
    latest = dict(series_episodes[-1])
    return ("fixed" if latest["kind"] == "regression" else latest["kind"]), latest
