"""Synthetic performance histories with known change points, for judging detectors.

This generator models how the results of a benchmark behave from run to run, without
reference to any detector: a history is a baseline level (any unit, from 1 to 10 000)
multiplied by relative effects (lasting level shifts, regressions that are fixed a few
runs later, slow drifts, seasonal swings) plus measurement noise from one of four
families, and some runs are missing. The truth is the list of runs at which the level
changes for good or for a while; drifts and seasons are not changes.

Each history is drawn from its own generator, seeded by (group, seed), so any one of them
can be regenerated alone, and a seed range never overlaps another's histories.

Groups:

- ``mixed``: everything at once, as a real dashboard shows it: 0-3 lasting shifts of
  1-30 %, with probability 0.4 a regression of 3-30 % reverted after 2-10 runs, a drift
  (probability 0.3) or a seasonal swing (0.3), 0-5 % missing runs and sometimes a missing
  block; 150-400 runs, noise 0.5-4 % of the level.
- ``steps``: one lasting shift whose size is drawn uniformly between 0.25 and 5 noise
  standard deviations, 200 runs; the group the step-recall table by size is made of.
- ``drift``: no change; a linear drift of 2-10 noise standard deviations over the history.
- ``random_walk``: no change; the level wanders (a random walk with steps of 0.05-0.25
  noise standard deviations).
- ``null``: no change; noise only (with missing runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

NOISE_FAMILIES = ("gaussian", "lognormal", "bimodal", "student_t3")
GROUPS = ("mixed", "steps", "drift", "random_walk", "null")

# Shape parameters of the noise families (each is scaled to unit variance).
LOGNORMAL_SHAPE = 0.5
BIMODAL_SLOW_SHARE = 0.3  # share of runs on the slow mode (e.g. a cold cache)
BIMODAL_GAP = 2.5  # distance between the modes, in the width of one mode
MIN_GAP_BETWEEN_CHANGES = 15
EDGE = 10  # runs kept clear of changes at either end


@dataclass(frozen=True)
class Change:
    """A true change: the first run at the new level, the relative change of the level
    and its size in noise standard deviations."""

    at: int
    relative: float
    sigmas: float


@dataclass(frozen=True)
class History:
    group: str
    seed: int
    values: np.ndarray  # NaN where the run is missing
    changes: tuple[Change, ...]
    noise: str
    noise_cv: float  # noise standard deviation / level

    @property
    def truth(self) -> list[int]:
        return [change.at for change in self.changes]


def unit_noise(rng: np.random.Generator, family: str, n: int) -> np.ndarray:
    """n draws of zero mean and unit variance from the family."""
    if family == "gaussian":
        return rng.standard_normal(n)
    if family == "lognormal":
        s2 = LOGNORMAL_SHAPE**2
        mean, var = np.exp(s2 / 2), (np.exp(s2) - 1) * np.exp(s2)
        return (rng.lognormal(0.0, LOGNORMAL_SHAPE, n) - mean) / np.sqrt(var)
    if family == "bimodal":
        p, gap = BIMODAL_SLOW_SHARE, BIMODAL_GAP
        draws = np.where(rng.random(n) < p, gap, 0.0) + rng.standard_normal(n)
        return (draws - p * gap) / np.sqrt(p * (1 - p) * gap**2 + 1.0)
    if family == "student_t3":
        return rng.standard_t(3, n) / np.sqrt(3.0)  # variance of t(3) is 3
    raise ValueError(f"unknown noise family {family!r}")


def _change_positions(rng: np.random.Generator, n: int, count: int) -> list[int]:
    """Up to ``count`` positions at least MIN_GAP_BETWEEN_CHANGES apart, EDGE from the ends."""
    chosen: list[int] = []
    for _ in range(50 * count):
        if len(chosen) == count:
            break
        at = int(rng.integers(EDGE, n - EDGE))
        if all(abs(at - other) >= MIN_GAP_BETWEEN_CHANGES for other in chosen):
            chosen.append(at)
    return sorted(chosen)


def _signed_relative(rng: np.random.Generator, low: float, high: float) -> float:
    """A relative change of log-uniform size in [low, high], either way."""
    return float(rng.choice([-1.0, 1.0]) * np.exp(rng.uniform(np.log(low), np.log(high))))


def _missing(rng: np.random.Generator, n: int, share: float, block: bool) -> np.ndarray:
    gone = rng.random(n) < share
    if block:
        start = int(rng.integers(0, n - 8))
        gone[start : start + int(rng.integers(3, 9))] = True
    return gone


def history(group: str, seed: int) -> History:
    """The history ``seed`` of ``group``."""
    rng = np.random.default_rng([GROUPS.index(group), seed])
    family = str(rng.choice(NOISE_FAMILIES))
    level = float(np.exp(rng.uniform(0.0, np.log(1e4))))
    cv = float(rng.uniform(0.005, 0.04))
    n = 200 if group == "steps" else int(rng.integers(150, 401))
    t = np.arange(n)
    factor = np.ones(n)  # relative level of each run
    changes: list[Change] = []
    missing_share, block = float(rng.uniform(0.0, 0.05)), bool(rng.random() < 0.2)
    if group == "mixed":
        reverted = rng.random() < 0.4
        positions = _change_positions(rng, n, int(rng.integers(0, 4)) + reverted)
        if reverted and positions:
            at = positions.pop(int(rng.integers(len(positions))))
            length = int(rng.integers(2, 11))
            relative = _signed_relative(rng, 0.03, 0.30)
            factor[at : at + length] *= 1 + relative
            # sizes in noise standard deviations of the level at that point
            changes += [Change(at, relative, abs(relative) / cv)]
            changes += [Change(at + length, 1 / (1 + relative) - 1, abs(relative) / cv)]
        for at in positions:
            relative = _signed_relative(rng, 0.01, 0.30)
            factor[at:] *= 1 + relative
            changes.append(Change(at, relative, abs(relative) / cv))
        if rng.random() < 0.3:
            factor *= 1 + rng.choice([-1, 1]) * rng.uniform(0.5, 3.0) * cv * t / n
        if rng.random() < 0.3:
            period = int(rng.choice([7, int(rng.integers(20, 61))]))
            amplitude = rng.uniform(0.3, 1.5) * cv
            factor *= 1 + amplitude * np.sin(2 * np.pi * (t + rng.integers(period)) / period)
    elif group == "steps":
        sigmas = float(rng.uniform(0.25, 5.0))
        relative = float(rng.choice([-1.0, 1.0])) * sigmas * cv
        at = int(rng.integers(30, n - 30))
        factor[at:] *= 1 + relative
        changes.append(Change(at, relative, sigmas))
        missing_share, block = float(rng.uniform(0.0, 0.03)), False
    elif group == "drift":
        factor *= 1 + rng.choice([-1, 1]) * rng.uniform(2.0, 10.0) * cv * t / n
    elif group == "random_walk":
        steps = rng.uniform(0.05, 0.25) * cv * rng.standard_normal(n)
        factor *= 1 + np.cumsum(steps)
    values = level * factor + level * cv * unit_noise(rng, family, n)
    values[_missing(rng, n, missing_share, block)] = np.nan
    changes.sort(key=lambda change: change.at)
    return History(group, seed, values, tuple(changes), family, cv)


def histories(groups: tuple[str, ...], seeds: range) -> Iterator[History]:
    for group in groups:
        for seed in seeds:
            yield history(group, seed)
