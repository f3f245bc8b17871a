"""compat="otava": indices, p-values and magnitudes equal apache-otava 0.8's
``compute_change_points`` on the same list and parameters (Otava runs in its own
environment: the ``otava`` fixture)."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from _series_gen import corpus, make_series
from otava_reference import OtavaReference
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points

DATA = Path(__file__).parents[1] / "data" / "otava_examples.json"

Found = list[tuple[int, float, float, float, float, float]]


@pytest.fixture(scope="module")
def otava(otava: OtavaReference) -> Callable[..., Found]:
    """Otava's change points of a series, as the tuples ``ours`` gives."""

    def change_points(values: np.ndarray, **kw) -> Found:
        return [
            (
                c["index"],
                c["pvalue"],
                c["magnitude"],
                c["forward_change_percent"],
                c["mean_before"],
                c["std_after"],
            )
            for c in otava.change_points(values, **kw)
        ]

    return change_points


def ours(values: np.ndarray, **kw) -> Found:
    return [
        (c.index, c.pvalue, c.magnitude, c.forward_change_percent, c.mean_before, c.stddev_after)
        for c in detect_change_points(values, EDivisiveParams(compat="otava", **kw))
    ]


def assert_same(expected, got, label: str) -> None:
    assert [e[0] for e in expected] == [g[0] for g in got], label
    for e, g in zip(expected, got, strict=True):
        for a, b in zip(e[1:], g[1:], strict=True):
            if math.isnan(a):
                assert math.isnan(b), label
            else:
                assert b == pytest.approx(a, rel=1e-9, abs=1e-300), label


# 330 series: lengths 10..5000 (most short; a handful long, Otava is slow there)
SHORT = corpus(
    seed=101, count=300, lengths=[10, 11, 16, 25, 37, 49, 50, 51, 64, 80, 101, 150, 256, 400, 777]
)
LONG = corpus(seed=202, count=24, lengths=[1000, 2000, 1500, 5000, 1234, 3000])
PARAMS = [
    {},
    {"window_len": 20, "max_pvalue": 0.01},
    {"window_len": 7, "max_pvalue": 0.05, "min_magnitude": 0.01},
    {"window_len": 30, "max_pvalue": 0.2, "min_magnitude": 0.05},
    {"window_len": 2, "max_pvalue": 0.6},
]


@pytest.mark.parametrize(("name", "values"), SHORT, ids=[n for n, _ in SHORT])
def test_compat_short_series(name, values, otava):
    assert_same(otava(values), ours(values), name)
    kw = PARAMS[1 + zlib.crc32(name.encode()) % (len(PARAMS) - 1)]
    assert_same(otava(values, **kw), ours(values, **kw), f"{name} {kw}")


@pytest.mark.parametrize(("name", "values"), LONG, ids=[n for n, _ in LONG])
def test_compat_long_series(name, values, otava):
    assert_same(otava(values), ours(values), name)


@pytest.mark.parametrize("kw", PARAMS)
def test_compat_parameter_grid(kw, otava):
    rng = np.random.default_rng(7)
    for kind in ("steps", "spikes", "ties", "constant", "gaps", "tiny"):
        for n in (2, 3, 5, 9, 60):
            x = make_series(rng, n, kind)
            if np.isnan(x).all():
                continue
            assert_same(otava(x, **kw), ours(x, **kw), f"{kind} n={n} {kw}")


def test_compat_otava_example_data(otava):
    data = json.loads(DATA.read_text())
    for name, values in data.items():
        if name.startswith("_"):
            continue
        x = np.asarray(values, dtype=float)
        for kw in PARAMS:
            assert_same(otava(x, **kw), ours(x, **kw), f"{name} {kw}")


def test_compat_reconstructed_example_with_known_changes(otava):
    # A faithful stand-in for Otava's documented example (a few regressions and
    # improvements over ~100 nightly runs of two metrics).
    rng = np.random.default_rng(3)
    m1 = np.concatenate(
        [
            rng.normal(150_000, 6_000, 40),
            rng.normal(120_000, 6_000, 30),
            rng.normal(155_000, 6_000, 30),
        ]
    ).round()
    m2 = np.concatenate([rng.normal(10.4, 0.3, 55), rng.normal(9.1, 0.1, 45)]).round(2)
    for x in (m1, m2):
        got = ours(x)
        assert_same(otava(x), got, "example")
        assert got, "the reconstructed example has real changes"
    assert [c[0] for c in ours(m1)] == [40, 70]
    assert [c[0] for c in ours(m2)] == [55]


def test_compat_single_spike_is_a_change_point_like_otava(otava):
    rng = np.random.default_rng(18)
    x = 100 + rng.normal(0, 1, 200)
    for at in rng.choice(np.arange(5, 195), 3, replace=False):  # 44, 104, 162
        x[at] += rng.choice([-1, 1]) * rng.uniform(8, 15)
    got = ours(x)
    assert_same(otava(x), got, "spike")
    assert [c[0] for c in got] == [44, 45, 162, 163]  # Otava's known false positives


def test_compat_flat_tiny_step_gets_p_zero_like_otava(otava):
    x = np.array([100.0] * 30 + [100.0001] * 30)
    got = ours(x)
    assert_same(otava(x), got, "flat")
    assert got and got[0][0] == 30 and got[0][1] == 0.0
