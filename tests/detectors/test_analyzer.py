"""SeriesAnalyzer: incremental results equal a full recomputation, always."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.edivisive import ChangePoint, EDivisiveParams, detect_change_points

PARAMS = [
    EDivisiveParams(compat="otava"),
    EDivisiveParams(),
    EDivisiveParams(compat="otava", window_len=8, max_pvalue=0.05, min_magnitude=0.01),
    EDivisiveParams(window_len=10, min_segment_len=1, max_pvalue=0.01),
    EDivisiveParams(window_len=16, min_segment_len=2, trend_test=True, noise_floor=0.0),
    EDivisiveParams(window_len=12, trend_check=False, trim=0.2),
    EDivisiveParams(window_len=14, correlated_selection=True, max_pvalue=0.01),
    EDivisiveParams(window_len=12, refine=False, max_pvalue=0.01),
    EDivisiveParams(window_len=20, min_segment_len=1, trend_check=False),
]


def same(a, b) -> bool:
    """Equal change points: every field equal bit for bit (NaN == NaN)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        for f in fields(ChangePoint):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if not (u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v))):
                return False
    return True


def make_values(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
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
    return x


@st.composite
def series_and_ops(draw):
    n = draw(st.integers(1, 260))
    kind = draw(st.sampled_from(["noise", "steps", "ties", "flat", "gaps"]))
    seed = draw(st.integers(0, 2**32 - 1))
    x = make_values(kind, n, np.random.default_rng(seed))
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


def fresh_row(x: np.ndarray, lo: int, mid: int, hi: int, params: EDivisiveParams) -> bytes:
    """A merge memo row computed afresh with the Python-visible kernels, as bytes."""
    _, _, _, noise_floor, _, _, trend, trim = params.merge_settings()
    fresh = list(K.segment_stats(x, lo, mid, hi, noise_floor))
    if trim > 0:
        fresh[4] = K.trimmed_ttest_p(x, lo, mid, hi, trim, noise_floor)
    tested = trend == K.TREND_ALWAYS or (
        trend == K.TREND_WHERE_LINE_FITS and not K.step_beats_line(x, lo, mid, hi)
    )
    fresh.append(K.trend_shift_p(x, lo, mid, hi, noise_floor) if tested else 0.0)
    return np.asarray(fresh).tobytes()


def memo_rows_hold(a: SeriesAnalyzer) -> bool:
    """Every remembered merge test equals its recomputation on the current series."""
    x = K.fill_gaps(a.values_)
    return all(
        np.asarray(row).tobytes() == fresh_row(x, lo, mid, hi, a.params)
        for (lo, mid, hi), row in zip(a._memo.keys.tolist(), a._memo.vals.tolist(), strict=True)
    )


@st.composite
def grown_series(draw):
    """A series analysed in one go, then grown mostly one value at a time (the
    stream processor's case), with some longer appends, late values, gaps,
    steps and restarts from a saved state in between."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["noise", "steps", "ties", "gaps"]))
    start = make_values(kind, draw(st.integers(30, 300)), rng)
    moves = ["one"] * 6 + ["few", "gap", "step", "insert", "insert_gap"]
    restarts = [None] * 6 + ["bytes", "compact"]
    ops = draw(
        st.lists(
            st.tuples(st.sampled_from(moves), st.sampled_from(restarts)), min_size=5, max_size=40
        )
    )
    return start, ops, int(rng.integers(2**32)), draw(st.sampled_from(range(len(PARAMS))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grown_series())
def test_merge_memo_keeps_appends_exact(case):
    start, ops, seed, pi = case
    params = PARAMS[pi]
    rng = np.random.default_rng(seed)
    a = SeriesAnalyzer(params)
    a.append(start)
    cur = start.copy()
    level = 100.0
    for move, restart in ops:
        if move == "step":
            level += rng.uniform(-20, 20)
        pos = len(cur)
        if move == "few":
            chunk = level + rng.normal(0, 2, int(rng.integers(2, 30)))
        elif move in ("gap", "insert_gap"):
            chunk = np.array([np.nan])
        else:
            chunk = np.array([level + rng.normal(0, 2)])
        if move.startswith("insert"):
            pos = int(rng.integers(0, len(cur) + 1))
            got = a.insert(pos, chunk.tolist())
        else:
            got = a.append(chunk.tolist())
        cur = np.concatenate([cur[:pos], chunk, cur[pos:]])
        if restart == "bytes":
            a = SeriesAnalyzer.from_bytes(a.to_bytes())
        elif restart == "compact":
            a = SeriesAnalyzer.from_bytes(a.to_bytes(with_values=False), values=cur.copy())
        np.testing.assert_array_equal(a.values_, cur)
        full = detect_change_points(cur, params)
        assert same(got, full)
        assert same(a.change_points_, full)
        assert memo_rows_hold(a)


def test_merge_memo_is_reused_by_the_next_append():
    rng = np.random.default_rng(5)
    x = 100 * (1 + 0.01 * rng.standard_normal(540))
    for params in PARAMS[:2]:
        a = SeriesAnalyzer(params)
        a.append(x[:500])
        assert len(a._memo) > 0
        known = used = 0
        for v in x[500:]:
            before = set(map(tuple, a._memo.keys.tolist()))
            a.append([float(v)])
            after = set(map(tuple, a._memo.keys.tolist()))
            known += len(after & before)
            used += len(after)
            assert memo_rows_hold(a)
        # most tests of a merge were known from the previous one
        assert known >= 0.6 * used
        assert same(a.change_points_, detect_change_points(x, params))
        # a restored analyzer starts without a memo and builds it on its next update
        b = SeriesAnalyzer.from_bytes(a.to_bytes())
        assert len(b._memo) == 0
        b.append([float(x[-1])])
        assert len(b._memo) > 0 and memo_rows_hold(b)


def test_merge_gives_the_same_with_or_without_a_memo_even_when_it_overflows():
    rng = np.random.default_rng(11)
    x = np.repeat(rng.normal(100, 5, 60), rng.integers(1, 4, 60))
    n = x.shape[0]
    weak = np.arange(1, n)  # every index a candidate: far more tests than memo rows
    no_keys, no_vals = np.zeros((0, 3), np.int64), np.zeros((0, K.MEMO_COLS))
    for params in PARAMS:
        settings_ = params.merge_settings()
        plain, keys, vals = K.merge(x, n, weak, *settings_, no_keys, no_vals)
        if settings_[4] > 1:  # a minimum segment length: a short-point test every round
            assert keys.shape[0] == 4 * weak.shape[0] + 15  # all rows but the spare one used
        again, keys2, vals2 = K.merge(x, n, weak, *settings_, keys, vals)
        assert plain.tobytes() == again.tobytes()
        assert keys2.shape == keys.shape
        # rows taken from the memo are the rows computed afresh
        for (lo, mid, hi), row in zip(keys2.tolist(), vals2.tolist(), strict=True):
            assert np.asarray(row).tobytes() == fresh_row(x, lo, mid, hi, params)


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


def test_append_recomputes_only_the_tail_windows():
    rng = np.random.default_rng(8)
    x = rng.normal(100, 2, 1000)
    a = SeriesAnalyzer(EDivisiveParams(compat="otava"))
    a.append(x)
    assert a.windows_computed_ >= 1000 // 25 - 1  # the first append computes them all
    a.append([100.0])
    assert 1 <= a.windows_computed_ <= 3  # windows touching the new point only
    a.insert(500, [101.0])
    # the windows before index 500 are reused; from there on window starts are
    # anchored to absolute positions, so the chain re-joins the old (shifted)
    # windows only where a window start was a change point
    assert 1 <= a.windows_computed_ <= (1001 - 450) // 25 + 2
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


def test_insert_rejoins_the_old_windows():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100 + 20 * (i % 2), 1, 40) for i in range(25)])
    a = SeriesAnalyzer(EDivisiveParams(compat="otava"))
    a.append(x)
    a.insert(100, [100.5])
    assert a.windows_computed_ == 1  # one window recomputed, then the shifted old chain
    assert same(a.change_points_, detect_change_points(a.values_, a.params))
