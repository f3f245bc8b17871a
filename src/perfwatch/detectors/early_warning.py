"""Early warning: does the newest run lie far outside its segment?

E-Divisive needs a few runs on either side of a change before it places it; a
single run cannot tell an outlier from a step.  This detector says at once
that a run looks wrong, and says so again when the next runs are back:

    ew = EarlyWarning().fit(segment)      # the values since the last change point
    a = ew.assess(runs)                   # the runs watched after it, oldest first
    a.state                               # "clear", "suspected", "withdrawn", "insufficient"

The segment's location is its median.  Each side of it gets its own scale
and tail: with ``tails="student"`` (the default) the deviations on that side
are fitted by a half Student t, its scale by maximum likelihood for each
degrees of freedom on a grid, and the degrees of freedom the heaviest tail
whose log-likelihood is within ``tail_slack`` of the best (the data cannot
tell a t3 from a Gaussian tail well in a hundred runs, and a tail taken too
light costs false alarms while one taken too heavy costs only delay).  With
``tails="normal"`` each side is Gaussian: the median absolute deviation (MAD),
at least what the segment's ``tail_quantile`` on that side implies.

A run's predictive tail probability is that of a Student t whose degrees of
freedom combine the side's tail with the uncertainty of the scale (a standard
deviation with the MAD's efficiency, 37 % of the segment: ``1/df = 1/df_tail
+ 1/df_scale``), at its distance from the median over ``scale * sqrt(1 +
1/n)``.  Its score ``z`` is the normal quantile of that probability (a
Gaussian-equivalent distance, so one limit serves every side and tail).  Two
rules share the stated false-alarm rate per run equally:

- one run: the score is beyond the single-run limit;
- two runs: this run and the one before are both beyond a lower limit on the
  same side (under the null, two independent runs do so with probability
  ``2 q**2``), so a step of about 3 sigma is seen on its second run.

A suspicion stays open while the runs after it stay beyond the lower limit on
its side, and is withdrawn on the first run that is back.  The false-alarm
rate holds when the fitted tail is at least as heavy as the noise's; the rate
measured on Gaussian, lognormal, bimodal and Student t3 noise is in
docs/edivisive.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import special, stats
from sklearn.base import BaseEstimator

__all__ = ["EarlyWarning", "EarlyWarningAssessment"]

State = Literal["clear", "suspected", "withdrawn", "insufficient"]
Rule = Literal["single", "pair"]
Tails = Literal["student", "normal"]

# Normal-consistency factor of the median absolute deviation, and its
# asymptotic efficiency relative to the standard deviation at the normal.
_MAD_TO_SIGMA = 1.4826
_MAD_EFFICIENCY = 0.37
# The mean absolute deviation's normal-consistency factor (sqrt(pi/2)), the
# scale used when more than half the segment is one value (MAD = 0).
_MEAN_AD_TO_SIGMA = math.sqrt(math.pi / 2)
# The half Student t fit's grid of 1 / degrees of freedom (0: Gaussian, 0.8: df
# 1.25, in steps of 0.1), each one's upper quartile (where the EM for its scale starts), and the
# fixed number of EM steps (the scale is then within 2 % of its limit for df
# 1.5, 0.5 % for df 3 and above).
_INVERSE_DF = np.linspace(0.0, 0.8, 9)
_QUARTILE = np.array(
    [stats.norm.isf(0.25)] + [stats.t.isf(0.25, 1.0 / v) for v in _INVERSE_DF[1:]]
)[:, None]
_EM_STEPS = 12


@dataclass(frozen=True)
class EarlyWarningAssessment:
    """The verdict on the newest run and its evidence.

    ``z`` holds the score of every watched run (NaN for a missing one), in
    Gaussian-equivalent standard errors; ``runs``
    the indices (into the watched runs) of the run(s) that opened the current
    or just withdrawn suspicion; ``p`` the two-sided prediction p-value of the
    newest run; ``tail_df_up`` / ``tail_df_down`` each side's fitted degrees of
    freedom (``inf`` for a Gaussian tail).
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
    tail_df_up: float
    tail_df_down: float
    n_segment: int
    single_limit: float
    pair_limit: float


class EarlyWarning(BaseEstimator):
    """Suspects a run far outside its segment; see the module docstring.

    false_alarm_rate: expected suspicions per stable run when the fitted tails
        are the noise's (shared equally between the one-run and the two-run rule).
    min_segment: fewer values than this in the segment give "insufficient".
    tails: "student" fits each side's tail (half Student t); "normal" takes it
        Gaussian.
    tail_slack: with "student", the heaviest tail whose log-likelihood is
        within this of the best fit's is taken (0: the best fit).
    tail_quantile: with "normal", each side's scale is at least the segment's
        distance from the median to this quantile (to 1 - it above), over the
        normal's.
    log: judge log values when every value of the segment is positive.
    """

    def __init__(
        self,
        false_alarm_rate: float = 0.001,
        min_segment: int = 8,
        tails: Tails = "student",
        tail_slack: float = 0.25,
        tail_quantile: float = 0.1,
        log: bool = False,
    ) -> None:
        self.false_alarm_rate = false_alarm_rate
        self.min_segment = min_segment
        self.tails = tails
        self.tail_slack = tail_slack
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
        if self.tails not in ("student", "normal"):
            raise ValueError(f"tails must be 'student' or 'normal', got {self.tails!r}")
        if not self.tail_slack >= 0.0:
            raise ValueError(f"tail_slack must be at least 0, got {self.tail_slack!r}")
        x = np.asarray(segment, dtype=np.float64).ravel()
        x = x[~np.isnan(x)]
        if np.isinf(x).any():
            raise ValueError("segment: values must be finite or NaN")
        self.n_segment_ = int(x.shape[0])
        self.log_ = bool(self.log and self.n_segment_ > 0 and (x > 0).all())
        y = np.log(x) if self.log_ else x
        self.center_, self.scale_ = _robust_location_scale(y)
        self.df_ = max(1.0, _MAD_EFFICIENCY * (self.n_segment_ - 1))
        sides = [self._side(y - self.center_), self._side(self.center_ - y)]
        (self.scale_up_, self.tail_df_up_), (self.scale_down_, self.tail_df_down_) = sides
        half = self.false_alarm_rate / 2.0
        self.single_limit_ = -float(special.ndtri(half / 2.0))
        self.pair_limit_ = -float(special.ndtri(math.sqrt(half / 2.0)))
        return self

    def _side(self, dev: np.ndarray) -> tuple[float, float]:
        """One side's scale and tail degrees of freedom, from the deviations
        (positive on that side)."""
        if self.n_segment_ == 0:
            return self.scale_, math.inf
        # over half the segment one value (MAD 0): the Gaussian fallback scale
        if self.tails == "student" and float(np.median(np.abs(dev))) > 0.0:
            return _half_t_fit(dev[dev > 0.0], self.tail_slack)
        # each side's scale is at least what its tail quantile implies, so a
        # skewed segment's long side is judged by its own spread
        z_tail = float(stats.norm.isf(self.tail_quantile))
        reach = float(np.quantile(dev, 1.0 - self.tail_quantile))
        return max(self.scale_, reach / z_tail), math.inf

    def scores(self, runs: ArrayLike) -> np.ndarray:
        """Each run's Gaussian-equivalent distance from the segment's median: the
        normal quantile of its predictive tail probability on its side."""
        r = np.asarray(runs, dtype=np.float64).ravel()
        if np.isinf(r).any():
            raise ValueError("runs: values must be finite or NaN")
        if self.log_:
            if (r <= 0.0).any():
                raise ValueError("runs: values must be positive on the log scale")
            r = np.log(r)
        dev = r - self.center_
        up = dev > 0.0
        scale = np.where(up, self.scale_up_, self.scale_down_)
        df = 1.0 / (1.0 / np.where(up, self.tail_df_up_, self.tail_df_down_) + 1.0 / self.df_)
        inflate = math.sqrt(1.0 + 1.0 / max(self.n_segment_, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            # a constant segment: any other value is infinitely far
            t = np.where(dev == 0.0, 0.0, np.abs(dev) / (scale * inflate))
            return np.sign(dev) * -special.ndtri(special.stdtr(df, -t))

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
        p = float(2.0 * stats.norm.sf(abs(newest))) if newest == newest else math.nan
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
            tail_df_up=float(self.tail_df_up_),
            tail_df_down=float(self.tail_df_down_),
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


def _half_t_fit(dev: np.ndarray, slack: float) -> tuple[float, float]:
    """Scale and degrees of freedom of a half Student t fitted to positive
    deviations: for each degrees of freedom on the grid the maximum-likelihood
    scale (EM), then the heaviest tail within ``slack`` log-likelihood of the
    best.  Fewer than 3 deviations: their root mean square, Gaussian tail."""
    d2 = dev * dev
    if d2.shape[0] < 3:
        return math.sqrt(float(d2.mean())) if d2.shape[0] else 0.0, math.inf
    inv = _INVERSE_DF[:, None]
    s2 = (float(np.median(dev)) / _QUARTILE) ** 2
    for _ in range(_EM_STEPS):
        # Student t's EM weights (nu + 1) / (nu + u^2), written in 1 / nu
        s2 = ((1.0 + inv) / (1.0 + inv * d2 / s2) * d2).mean(axis=1, keepdims=True)
    u2 = d2 / s2
    heavy = _INVERSE_DF[1:, None]
    nu = 1.0 / heavy
    # the half t's log density minus log 2, less the terms shared by every fit
    log_kernel = np.empty_like(u2)
    log_kernel[0] = -0.5 * u2[0] - 0.5 * math.log(2.0 * math.pi)
    log_kernel[1:] = (
        special.gammaln((nu + 1.0) / 2.0)
        - special.gammaln(nu / 2.0)
        - 0.5 * np.log(nu * math.pi)
        - (nu + 1.0) / 2.0 * np.log1p(u2[1:] * heavy)
    )
    loglik = log_kernel.sum(axis=1) - 0.5 * d2.shape[0] * np.log(s2[:, 0])
    k = int(np.nonzero(loglik >= loglik.max() - slack)[0].max())
    df = 1.0 / _INVERSE_DF[k] if _INVERSE_DF[k] > 0.0 else math.inf
    return math.sqrt(float(s2[k, 0])), df
