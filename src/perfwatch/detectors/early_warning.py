"""Early warning: does the newest run lie far outside its segment?

E-Divisive needs a few runs on either side of a change before it places it; a
single run cannot tell an outlier from a step.  This detector says at once
that a run looks wrong, and says so again when the next runs are back:

    ew = EarlyWarning().fit(segment)      # the values since the last change point
    a = ew.assess(runs)                   # the runs watched after it, oldest first
    a.state                               # "clear", "suspected", "withdrawn", "insufficient"

The segment's location and scale are robust (median and the normal-consistent
median absolute deviation), so outliers in the history do not widen the
interval; each side's scale is at least what the segment's 10 % tail quantile
on that side implies, so skewed timing noise is judged by its long side.  A
run's score is its distance from the median in units of the prediction
standard error ``scale * sqrt(1 + 1/n)``, compared with a Student
t quantile; the degrees of freedom are those of a standard deviation with the
MAD's efficiency (37 % of the segment).  Two rules share the stated false-alarm
rate per run equally:

- one run: the score is beyond the single-run limit;
- two runs: this run and the one before are both beyond a lower limit on the
  same side (under the null, two independent runs do so with probability
  ``2 q**2``), so a step of about 3 sigma is seen on its second run.

A suspicion stays open while the runs after it stay beyond the lower limit on
its side, and is withdrawn on the first run that is back.  With Gaussian noise
the rate is at most the stated one; heavier tails than Gaussian raise it
(measured in docs/edivisive.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from sklearn.base import BaseEstimator

__all__ = ["EarlyWarning", "EarlyWarningAssessment"]

State = Literal["clear", "suspected", "withdrawn", "insufficient"]
Rule = Literal["single", "pair"]

# Normal-consistency factor of the median absolute deviation, and its
# asymptotic efficiency relative to the standard deviation at the normal.
_MAD_TO_SIGMA = 1.4826
_MAD_EFFICIENCY = 0.37
# The mean absolute deviation's normal-consistency factor (sqrt(pi/2)), the
# scale used when more than half the segment is one value (MAD = 0).
_MEAN_AD_TO_SIGMA = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class EarlyWarningAssessment:
    """The verdict on the newest run and its evidence.

    ``z`` holds the score of every watched run (NaN for a missing one); ``runs``
    the indices (into the watched runs) of the run(s) that opened the current
    or just withdrawn suspicion; ``p`` the two-sided prediction p-value of the
    newest run.
    """

    state: State
    rule: Rule | None
    direction: Literal["up", "down"] | None
    runs: tuple[int, ...]
    z: tuple[float, ...]
    p: float
    center: float
    scale: float
    scale_up: float
    scale_down: float
    n_segment: int
    single_limit: float
    pair_limit: float


class EarlyWarning(BaseEstimator):
    """Suspects a run far outside its segment; see the module docstring.

    false_alarm_rate: expected suspicions per stable run with Gaussian noise
        (shared equally between the one-run and the two-run rule).
    min_segment: fewer values than this in the segment give "insufficient".
    tail_quantile: each side's scale is at least the segment's distance from
        the median to this quantile (to 1 - it above), over the normal's.
    log: judge log values when every value of the segment is positive.
    """

    def __init__(
        self,
        false_alarm_rate: float = 0.001,
        min_segment: int = 8,
        tail_quantile: float = 0.1,
        log: bool = False,
    ) -> None:
        self.false_alarm_rate = false_alarm_rate
        self.min_segment = min_segment
        self.tail_quantile = tail_quantile
        self.log = log

    def fit(self, segment: ArrayLike) -> EarlyWarning:
        """Learn the segment's location and scale (NaN values are gaps)."""
        if not 0.0 < self.false_alarm_rate < 1.0:
            raise ValueError(f"false_alarm_rate must be in (0, 1), got {self.false_alarm_rate!r}")
        if not 0.0 < self.tail_quantile < 0.5:
            raise ValueError(f"tail_quantile must be in (0, 0.5), got {self.tail_quantile!r}")
        if self.min_segment < 2:
            raise ValueError(f"min_segment must be at least 2, got {self.min_segment!r}")
        x = np.asarray(segment, dtype=np.float64).ravel()
        x = x[~np.isnan(x)]
        if np.isinf(x).any():
            raise ValueError("segment: values must be finite or NaN")
        self.n_segment_ = int(x.shape[0])
        self.log_ = bool(self.log and self.n_segment_ > 0 and (x > 0).all())
        y = np.log(x) if self.log_ else x
        self.center_, self.scale_ = _robust_location_scale(y)
        # Each side's scale is at least what its tail quantile implies, so a
        # skewed segment's long side is judged by its own spread.
        self.scale_up_ = self.scale_down_ = self.scale_
        if self.n_segment_ > 0:
            z_tail = float(stats.norm.isf(self.tail_quantile))
            low, high = np.quantile(y, [self.tail_quantile, 1.0 - self.tail_quantile])
            self.scale_up_ = max(self.scale_, float(high - self.center_) / z_tail)
            self.scale_down_ = max(self.scale_, float(self.center_ - low) / z_tail)
        df = max(1.0, _MAD_EFFICIENCY * (self.n_segment_ - 1))
        half = self.false_alarm_rate / 2.0
        self.single_limit_ = float(stats.t.isf(half / 2.0, df))
        self.pair_limit_ = float(stats.t.isf(math.sqrt(half / 2.0), df))
        self.df_ = df
        return self

    def scores(self, runs: ArrayLike) -> np.ndarray:
        """Each run's distance from the segment's median in prediction standard errors
        (of the segment's side the run is on)."""
        r = np.asarray(runs, dtype=np.float64).ravel()
        if np.isinf(r).any():
            raise ValueError("runs: values must be finite or NaN")
        if self.log_:
            if (r <= 0.0).any():
                raise ValueError("runs: values must be positive on the log scale")
            r = np.log(r)
        dev = r - self.center_
        scale = np.where(dev > 0.0, self.scale_up_, self.scale_down_)
        inflate = math.sqrt(1.0 + 1.0 / max(self.n_segment_, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            # a constant segment: any other value is infinitely far
            return np.where(dev == 0.0, 0.0, dev / (scale * inflate))

    def alarms(self, runs: ArrayLike) -> np.ndarray:
        """For each run, the rule that fires on it: 0 none, 1 one run, 2 two runs
        (this run and the one before); all 0 when the segment is too short."""
        return _alarms(self.scores(runs), self)

    def assess(self, runs: ArrayLike) -> EarlyWarningAssessment:
        """The state at the newest of ``runs`` (the runs after the segment, oldest first)."""
        z = self.scores(runs)
        if z.shape[0] == 0:
            raise ValueError("runs: at least one run is needed")
        fired = _alarms(z, self)
        state: State = "clear"
        rule: Rule | None = None
        sign = 0.0
        opened: tuple[int, ...] = ()
        if self.n_segment_ >= self.min_segment:
            for i, zi in enumerate(z):
                if zi != zi:  # a missing run neither raises nor withdraws
                    continue
                if state == "suspected" and np.sign(zi) == sign and abs(zi) > self.pair_limit_:
                    continue  # still out on the suspicion's side
                if fired[i]:
                    state, sign = "suspected", float(np.sign(zi))
                    rule, opened = ("single", (i,)) if fired[i] == 1 else ("pair", (i - 1, i))
                elif state == "suspected":
                    state = "withdrawn"
                elif state == "withdrawn":
                    state, rule, sign, opened = "clear", None, 0.0, ()
        else:
            state = "insufficient"
        newest = float(z[-1])
        p = float(2.0 * stats.t.sf(abs(newest), self.df_)) if newest == newest else math.nan
        direction: Literal["up", "down"] | None = None
        if sign > 0:
            direction = "up"
        elif sign < 0:
            direction = "down"
        return EarlyWarningAssessment(
            state=state,
            rule=rule,
            direction=direction,
            runs=opened,
            z=tuple(float(v) for v in z),
            p=p,
            center=float(math.exp(self.center_) if self.log_ else self.center_),
            scale=float(self.scale_),
            scale_up=float(self.scale_up_),
            scale_down=float(self.scale_down_),
            n_segment=self.n_segment_,
            single_limit=self.single_limit_,
            pair_limit=self.pair_limit_,
        )


def _alarms(z: np.ndarray, fitted: EarlyWarning) -> np.ndarray:
    fired = np.zeros(z.shape[0], dtype=np.int8)
    if fitted.n_segment_ < fitted.min_segment:
        return fired
    with np.errstate(invalid="ignore"):
        out = np.abs(z) > fitted.pair_limit_
        pair = np.zeros_like(out)
        pair[1:] = out[1:] & out[:-1] & (np.sign(z[1:]) == np.sign(z[:-1]))
        fired[pair] = 2
        fired[np.abs(z) > fitted.single_limit_] = 1
    return fired


def _robust_location_scale(y: np.ndarray) -> tuple[float, float]:
    """Median and a normal-consistent robust scale (MAD, or the mean absolute
    deviation when over half the values are equal); NaN, 0 for no values."""
    if y.shape[0] == 0:
        return math.nan, 0.0
    center = float(np.median(y))
    dev = np.abs(y - center)
    scale = _MAD_TO_SIGMA * float(np.median(dev))
    if scale == 0.0:
        scale = _MEAN_AD_TO_SIGMA * float(dev.mean())
    return center, scale
