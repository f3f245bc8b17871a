"""Whether a change of a metric is a regression or an improvement."""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["DIRECTIONS", "classify_direction"]

DIRECTIONS = ("higher_is_better", "lower_is_better")


def classify_direction(
    forward_change_percent: float, direction: str | None
) -> Literal["regression", "improvement", "unknown"]:
    """ "regression", "improvement" or "unknown" for a change of the metric's mean.

    direction: "higher_is_better", "lower_is_better" or None (unknown).
    A zero or non-finite change, or an unknown direction, gives "unknown".
    """
    if direction is not None and direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS} or None, got {direction!r}")
    if direction is None:
        return "unknown"
    change = float(forward_change_percent)
    if not math.isfinite(change) or change == 0.0:
        return "unknown"
    went_up = change > 0.0
    if direction == "higher_is_better":
        return "improvement" if went_up else "regression"
    return "regression" if went_up else "improvement"
