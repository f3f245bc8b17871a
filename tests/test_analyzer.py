"""SeriesAnalyzer: incremental results equal a full recomputation, always."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.edivisive import EDivisiveParams, detect_change_points

PARAMS = [
    EDivisiveParams(compat="otava"),
    EDivisiveParams(),
    EDivisiveParams(compat="otava", window_len=8, max_pvalue=0.05, min_magnitude=0.01),
    EDivisiveParams(window_len=10, min_segment_len=1, max_pvalue=0.01),
    EDivisiveParams(window_len=16, min_segment_len=2, trend_test=True, noise_floor=0.0),
]


def same(a, b) -> bool:
    """Equal change points: same indices, p-values equal bit for bit (NaN == NaN)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        for f in ("index", "pvalue", "magnitude", "mean_before", "stddev_after"):
            u, v = getattr(x, f), getattr(y, f)
            if not (u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v))):
                return False
    return True


@st.composite
def series_and_ops(draw):
    n = draw(st.integers(1, 260))
    kind = draw(st.sampled_from(["noise", "steps", "ties", "flat", "gaps"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = 100 + rng.normal(0, 2, n)
    if kind == "steps":
        for at in rng.integers(0, n, size=int(rng.integers(1, 5))):
            x[at:] += rng.uniform(-15, 15)
    elif kind == "ties":
        x = np.round(x)
    elif kind == "flat":
        x[:] = 5.0
        x[rng.random(n) < 0.2] = 6.0
    elif kind == "gaps":
        x[rng.random(n) < 0.3] = np.nan
    ops = []
    done = 0
    while done < n:
        size = draw(st.integers(1, 40))
        size = min(size, n - done)
        where = draw(st.sampled_from(["append", "append", "insert"]))
        pos = draw(st.integers(0, done)) if where == "insert" else done
        roundtrip = draw(st.sampled_from([None, None, None, "bytes", "compact", "json"]))
        ops.append((pos, done, size, roundtrip))
        done += size
    return x, ops, draw(st.sampled_from(range(len(PARAMS))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(series_and_ops())
def test_incremental_equals_full_recomputation(case):
    x, ops, pi = case
    params = PARAMS[pi]
    a = SeriesAnalyzer(params)
    cur = np.zeros(0)
    for pos, src, size, roundtrip in ops:
        chunk = x[src : src + size]
        if pos == len(cur):
            got = a.append(chunk)
            cur = np.concatenate([cur, chunk])
        else:
            got = a.insert(pos, chunk)
            cur = np.concatenate([cur[:pos], chunk, cur[pos:]])
        if roundtrip == "bytes":
            a = SeriesAnalyzer.from_bytes(a.to_bytes())
        elif roundtrip == "compact":  # the stream processor's form: values kept elsewhere
            a = SeriesAnalyzer.from_bytes(a.to_bytes(with_values=False), values=cur.copy())
        elif roundtrip == "json":
            a = SeriesAnalyzer.from_json(a.to_json())
        assert len(a) == len(cur)
        np.testing.assert_array_equal(a.values_, cur)
        if np.isnan(cur).all():
            assert got == [] and a.change_points_ == []
            continue
        full = detect_change_points(cur, params)
        assert same(got, full)
        assert same(a.change_points_, full)


def test_append_one_at_a_time_equals_full_and_resumes_after_restart():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(100, 2, 300), rng.normal(110, 2, 200), rng.normal(100, 2, 300)])
    for params in PARAMS[:2]:
        a = SeriesAnalyzer(params)
        for i, v in enumerate(x):
            a.append([v])
            if i == 400:
                a = SeriesAnalyzer.from_bytes(a.to_bytes())  # consumer restarted
        assert same(a.change_points_, detect_change_points(x, params))
        assert [c.index for c in a.change_points_][:2] == [300, 500]


@pytest.fixture
def windows_computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many windows each call of the window kernel computes, in call order."""
    computed: list[int] = []
    original = K.window_chain

    def counting(*args):
        k, stop = original(*args)
        computed.append(k - args[7])  # args[7]: windows kept before the call
        return k, stop

    monkeypatch.setattr(K, "window_chain", counting)
    return computed


def test_append_recomputes_only_the_tail_windows(windows_computed):
    rng = np.random.default_rng(8)
    x = rng.normal(100, 2, 1000)
    a = SeriesAnalyzer(EDivisiveParams(compat="otava"))
    a.append(x)
    windows_computed.clear()  # count from here on
    a.append([100.0])
    assert windows_computed and windows_computed[0] <= 3  # windows touching the new point only
    windows_computed.clear()
    a.insert(500, [101.0])
    # the windows before index 500 are reused; from there on window starts are
    # anchored to absolute positions, so the chain re-joins the old (shifted)
    # windows only where a window start was a change point
    assert windows_computed and windows_computed[0] <= (1001 - 450) // 25 + 2
    assert same(a.change_points_, detect_change_points(a.values_, a.params))


def test_json_state_is_json_and_restores_exactly():
    import json

    a = SeriesAnalyzer()
    a.append([1.0, float("nan"), 3.0] * 30)
    d = json.loads(json.dumps(a.to_json()))
    b = SeriesAnalyzer.from_json(d)
    assert same(a.change_points_, b.change_points_)
    np.testing.assert_array_equal(a.values_, b.values_)
    assert b.params == a.params
    b.append([50.0] * 10)
    assert same(b.change_points_, detect_change_points(b.values_))


def test_bad_state_and_bad_arguments():
    a = SeriesAnalyzer()
    with pytest.raises(ValueError):
        SeriesAnalyzer.from_bytes(b"nope")
    with pytest.raises(ValueError):
        SeriesAnalyzer.from_json({"format": "x"})
    with pytest.raises(ValueError):
        a.insert(1, [1.0])
    with pytest.raises(ValueError, match="infinite"):
        a.append([float("inf")])
    assert a.append([]) == []
    assert a.append([float("nan")]) == [] and len(a) == 1
    assert a.append([1.0, 1.0]) == []
    with pytest.raises(ValueError):
        SeriesAnalyzer.from_bytes(a.to_bytes()[:-3])


def test_compact_state_needs_the_values_it_was_saved_with():
    a = SeriesAnalyzer()
    values = np.concatenate([np.full(60, 100.0), np.full(60, 120.0)])
    a.append(values)
    compact = a.to_bytes(with_values=False)
    assert len(compact) < len(a.to_bytes()) - 8 * len(values) + 100
    b = SeriesAnalyzer.from_bytes(compact, values=values)
    assert same(b.change_points_, a.change_points_)
    np.testing.assert_array_equal(b.values_, values)
    with pytest.raises(ValueError, match="saved without its values"):
        SeriesAnalyzer.from_bytes(compact)
    with pytest.raises(ValueError, match="not the 120 values"):
        SeriesAnalyzer.from_bytes(compact, values=values[:-1])
    changed = values.copy()
    changed[7] += 0.5
    with pytest.raises(ValueError, match="not the 120 values"):
        SeriesAnalyzer.from_bytes(compact, values=changed)
    with pytest.raises(ValueError, match="carries its values"):
        SeriesAnalyzer.from_bytes(a.to_bytes(), values=values)


def test_insert_rejoins_the_old_windows(windows_computed):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100 + 20 * (i % 2), 1, 40) for i in range(25)])
    a = SeriesAnalyzer(EDivisiveParams(compat="otava"))
    a.append(x)
    windows_computed.clear()  # count from here on
    a.insert(100, [100.5])
    assert windows_computed == [1]  # one window recomputed, then the shifted old chain
    assert same(a.change_points_, detect_change_points(a.values_, a.params))
