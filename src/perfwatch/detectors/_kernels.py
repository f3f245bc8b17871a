"""Compiled kernels behind :mod:`perfwatch.detectors.edivisive`.

Everything here works on a float64 array ``x`` (gaps already filled) and plain
integers, so the detectors stay pure and the hot paths run without the Python
interpreter (numba, cached on disk after the first compile).

Compatibility with Apache Otava 0.8 is *bit-for-bit*: the divergence values,
the sums behind every mean and standard deviation and the t-test are evaluated
with the same floating-point operations in the same order as Otava (through
numpy and scipy) evaluates them, so ties in the divergence and in the merge
order resolve exactly the same way.  The comments name the numpy expression
each loop reproduces.
"""

from __future__ import annotations

import math

import llvmlite.binding as _llvm
import numba
import numpy as np
from numba import njit
from numba.extending import get_cython_function_address

# scipy's own Student t CDF (the function ``scipy.stats.ttest_ind_from_stats``
# ends in), called directly from compiled code: no Python call per t-test.
_STDTR_SYMBOL = "perfwatch_scipy_special_stdtr"
_llvm.add_symbol(
    _STDTR_SYMBOL, get_cython_function_address("scipy.special.cython_special", "stdtr")
)
_stdtr = numba.types.ExternalFunction(
    _STDTR_SYMBOL, numba.float64(numba.float64, numba.float64, numba.int32)
)

_NJ = {"cache": True, "nogil": True, "error_model": "numpy"}

# numpy's reduction works on buffers of this many elements and the pairwise
# summation switches to its unrolled loop below this block size.
_NP_BUFSIZE = 8192
_PW_BLOCK = 128

# Merge-step modes.
MODE_OTAVA = 0
MODE_DEFAULT = 1


# --------------------------------------------------------------------------
# numpy-identical sums, means and standard deviations
# --------------------------------------------------------------------------
@njit(inline="always", **_NJ)
def _sq_or_value(v, mu, sq):
    """The summand: the value, or its squared deviation from mu."""
    if sq:
        v = v - mu
        return v * v
    return v


@njit(**_NJ)
def _pairwise(a, lo, n, mu, sq):
    """numpy's pairwise summation of a[lo:lo+n] (of (a-mu)**2 when sq)."""
    if n < 8:
        res = -0.0
        for i in range(n):
            v = a[lo + i]
            if sq:
                v = v - mu
                v = v * v
            res += v
        return res
    if n <= _PW_BLOCK:
        # numpy's eight accumulators, as locals: an array here would be
        # allocated on every call of this hot leaf (same additions, same order)
        r0 = _sq_or_value(a[lo], mu, sq)
        r1 = _sq_or_value(a[lo + 1], mu, sq)
        r2 = _sq_or_value(a[lo + 2], mu, sq)
        r3 = _sq_or_value(a[lo + 3], mu, sq)
        r4 = _sq_or_value(a[lo + 4], mu, sq)
        r5 = _sq_or_value(a[lo + 5], mu, sq)
        r6 = _sq_or_value(a[lo + 6], mu, sq)
        r7 = _sq_or_value(a[lo + 7], mu, sq)
        i = 8
        lim = n - (n % 8)
        while i < lim:
            j = lo + i
            r0 += _sq_or_value(a[j], mu, sq)
            r1 += _sq_or_value(a[j + 1], mu, sq)
            r2 += _sq_or_value(a[j + 2], mu, sq)
            r3 += _sq_or_value(a[j + 3], mu, sq)
            r4 += _sq_or_value(a[j + 4], mu, sq)
            r5 += _sq_or_value(a[j + 5], mu, sq)
            r6 += _sq_or_value(a[j + 6], mu, sq)
            r7 += _sq_or_value(a[j + 7], mu, sq)
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += _sq_or_value(a[lo + i], mu, sq)
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2, mu, sq) + _pairwise(a, lo + n2, n - n2, mu, sq)


@njit(**_NJ)
def np_sum(a, lo, hi, mu, sq):
    """``np.sum(a[lo:hi])`` (or of ``(a[lo:hi]-mu)**2``), bit for bit."""
    s = 0.0
    i = lo
    while i < hi:
        c = min(_NP_BUFSIZE, hi - i)
        s += _pairwise(a, i, c, mu, sq)
        i += c
    return s


@njit(**_NJ)
def mean_std(a, lo, hi):
    """(np.mean, np.std) of a[lo:hi] as Otava computes them (std = 0 below 2 points)."""
    n = hi - lo
    m = np_sum(a, lo, hi, 0.0, False) / n
    if n < 2:
        return m, 0.0
    v = np_sum(a, lo, hi, m, True) / n
    return m, math.sqrt(v)


# --------------------------------------------------------------------------
# the t-test
# --------------------------------------------------------------------------
@njit(**_NJ)
def ttest_p(m1, s1, n1, m2, s2, n2, noise_floor):
    """Two-sided pooled-variance Student t-test from (mean, population std, n).

    With ``noise_floor == 0`` this is exactly Otava 0.8's
    ``scipy.stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2)`` including its
    use of the population std (ddof=0) and p = 1 for two points in total.
    ``noise_floor > 0`` (default mode) floors the pooled standard deviation at
    ``noise_floor * |pooled mean|`` and maps an undefined p (0/0) to 1.
    """
    if n1 + n2 <= 2:
        return 1.0
    v1 = 0.0 if n1 == 1 else s1 * s1
    v2 = 0.0 if n2 == 1 else s2 * s2
    df = n1 + n2 - 2.0
    svar = ((n1 - 1) * v1 + (n2 - 1) * v2) / df
    if noise_floor > 0.0:
        mu = (n1 * m1 + n2 * m2) / (n1 + n2)
        fl = noise_floor * abs(mu)
        fl = fl * fl
        if svar < fl:
            svar = fl
    denom = math.sqrt(svar * (1.0 / n1 + 1.0 / n2))
    t = (m1 - m2) / denom
    p = 2.0 * _stdtr(df, -abs(t), 0)
    if noise_floor > 0.0 and p != p:
        return 1.0
    return p


@njit(**_NJ)
def segment_stats(x, lo, mid, hi, noise_floor):
    """Stats of the change at ``mid`` between x[lo:mid] and x[mid:hi]."""
    m1, s1 = mean_std(x, lo, mid)
    m2, s2 = mean_std(x, mid, hi)
    p = ttest_p(m1, s1, mid - lo, m2, s2, hi - mid, noise_floor)
    return m1, s1, m2, s2, p


@njit(**_NJ)
def magnitude(m1, m2):
    """Otava's change magnitude: max(|m2/m1 - 1|, |m1/m2 - 1|), 0 for a zero mean."""
    f = 0.0 if m1 == 0 else m2 / m1 - 1.0
    b = 0.0 if m2 == 0 else m1 / m2 - 1.0
    f = abs(f)
    b = abs(b)
    return b if b > f else f


# --------------------------------------------------------------------------
# energy divergence of every (split, end) pair of an interval
# --------------------------------------------------------------------------
@njit(**_NJ)
def _window_tables(y, ws, m, D, V, H):
    """Pairwise distances, column sums V and row prefix sums H of one window.

    D[r, c] = |y_r - y_c|; V[c] = sum_{r<=c} D[r, c+1] (numpy's axis-0 sum of the
    upper triangle, accumulated row by row); H[r, c] = sum_{c'=r..c} D[r, c'+1]
    (its cumulative sum along the row).
    """
    for r in range(m):
        yr = y[ws + r]
        for c in range(m):
            D[r, c] = abs(yr - y[ws + c])
    for c in range(m - 1):
        s = 0.0
        for r in range(c + 1):
            s += D[r, c + 1]
        V[c] = s
    for r in range(m - 1):
        s = 0.0
        for c in range(r, m - 1):
            s += D[r, c + 1]
            H[r, c] = s


@njit(**_NJ)
def _best_split(a, b, D, V, H, Vp, cV, Q, min_left):
    """Candidate of interval [a, b) of a window: argmax over (tau, kappa) of Q.

    Reproduces Otava's ``PairDistanceCalculator._get_Q_vals`` + ``np.argmax``:
    Q = A - B - C with the same cumulative sums, evaluated in the same order;
    the first maximum in row-major (tau, kappa) order wins.  ``min_left`` > 1
    (default mode only) restricts tau to leave that many points on each side
    of the split inside [a, b).
    Returns (tau, qhat, kappa) relative to the window; tau = -1 if none.
    """
    L = b - 1 - a
    # Vp = V[a:b-1] - D[0:a, a+1:b].sum(axis=0);  cV = cumsum(Vp)
    for k in range(L):
        s = 0.0
        for r in range(a):
            s += D[r, a + k + 1]
        Vp[k] = V[a + k] - s
    acc = 0.0
    for k in range(L):
        acc += Vp[k]
        cV[k] = acc
    for j in range(L):
        two_over = 2.0 / (j + 2)
        # A: cumsum(H', axis=0) top-down
        ch = 0.0
        for i in range(j + 1):
            ch += H[a + i, a + j]
            if i == 0:
                Aij = two_over * ch
                Bij = 0.0
            else:
                Aij = two_over * (ch - cV[i - 1])
                Bij = (2.0 * (j - i + 1) / ((j + 2) * i)) * cV[i - 1]
            Q[i, j] = Aij - Bij
        # C: flipud(cumsum(flipud(H'[1:, 1:]), axis=0)) bottom-up
        f = 0.0
        for i in range(j - 1, -1, -1):
            f += H[a + i + 1, a + j]
            Cij = (2.0 * (i + 1) / ((j + 2) * (j - i))) * f
            Q[i, j] = Q[i, j] - Cij
    best_i = -1
    best_j = -1
    best = 0.0
    nan_i = -1
    nan_j = -1
    lo_i = 0
    hi_i = L - 1
    if min_left > 1:
        lo_i = min_left - 1
        hi_i = L - min_left
    for i in range(lo_i, hi_i + 1):
        for j in range(i, L):
            q = Q[i, j]
            if q != q:
                if nan_i < 0:
                    nan_i = i
                    nan_j = j
            elif best_i < 0 or q > best:
                best = q
                best_i = i
                best_j = j
    if nan_i >= 0:
        return a + nan_i + 1, Q[nan_i, nan_j], a + nan_j + 2
    if best_i < 0:
        return -1, 0.0, -1
    return a + best_i + 1, best, a + best_j + 2


@njit(**_NJ)
def window_change_points(
    x, ws, we, pthresh, noise_floor, local_test, D, V, H, Vp, cV, Q, bounds, ctau, cq, ckap, out
):
    """E-Divisive inside the window x[ws:we]: split the best interval while the
    t-test between the two halves of that interval passes ``pthresh``.

    With ``local_test`` (default mode) the right half of the test is the
    segment [tau, kappa) the divergence chose rather than the rest of the
    interval, so a short regression that reverted is tested against itself,
    not diluted by the normal runs after it.

    Writes the sorted absolute change-point indices into ``out`` and returns
    their count.  Each interval's candidate is computed once (a candidate only
    depends on the window and the interval, so this equals Otava's recomputing
    every interval on every iteration).
    """
    m = we - ws
    if m < 2:
        return 0
    _window_tables(x, ws, m, D, V, H)
    nb = 2
    bounds[0] = 0
    bounds[1] = m
    t, q, kap = _best_split(0, m, D, V, H, Vp, cV, Q, 0)
    ctau[0] = t
    cq[0] = q
    ckap[0] = kap
    while True:
        best = -1
        for k in range(nb - 1):
            if ctau[k] < 0:
                continue
            if best < 0 or cq[k] > cq[best]:
                best = k
        if best < 0:
            break
        a = bounds[best]
        b = bounds[best + 1]
        tau = ctau[best]
        right = ckap[best] if local_test else b
        _, _, _, _, p = segment_stats(x, ws + a, ws + tau, ws + right, noise_floor)
        if not (p <= pthresh):
            break
        # insert tau: interval best -> [a, tau), [tau, b)
        for k in range(nb, best + 1, -1):
            bounds[k] = bounds[k - 1]
        for k in range(nb - 1, best + 1, -1):
            ctau[k] = ctau[k - 1]
            cq[k] = cq[k - 1]
            ckap[k] = ckap[k - 1]
        bounds[best + 1] = tau
        nb += 1
        for k in (best, best + 1):
            lo = bounds[k]
            hi = bounds[k + 1]
            if hi - lo >= 2:
                t, q, kap = _best_split(lo, hi, D, V, H, Vp, cV, Q, 0)
            else:
                t, q, kap = -1, 0.0, -1
            ctau[k] = t
            cq[k] = q
            ckap[k] = kap
    for k in range(1, nb - 1):
        out[k - 1] = ws + bounds[k]
    return nb - 2


@njit(**_NJ)
def window_chain(
    x, n, w, pthresh, noise_floor, local_test, keep, old_starts, old_offsets, old_cps, sync
):
    """Otava's sliding-window loop to the end of x[:n], after the first
    ``keep`` windows of a chain.

    A chain is (starts, offsets, cps): window k is x[starts[k]:min(starts[k]+w, n)]
    and its change points are cps[offsets[k]:offsets[k+1]]; the next window
    starts at max(last change point found in this window (or 0), s + w//2).
    Stops early, before computing it, at a window start found in the sorted
    array ``sync`` (windows the caller already knows).
    Returns (starts, offsets, cps, stop): the first ``keep`` windows of
    (old_starts, old_offsets, old_cps) followed by the windows computed, and
    the start where it stopped (>= n when it ran to the end).
    """
    step = w // 2
    start = 0
    if keep > 0:
        a = old_offsets[keep - 1]
        b = old_offsets[keep]
        last = old_cps[b - 1] if b > a else 0
        start = max(last, old_starts[keep - 1] + step)
    max_new = (n - start + step - 1) // step + 1 if start < n else 0
    kept = old_offsets[keep]
    # (copies by loops: slice assignments make this kernel much slower to compile)
    win_start = np.empty(keep + max_new, np.int64)
    win_off = np.empty(keep + max_new + 1, np.int64)
    for i in range(keep):
        win_start[i] = old_starts[i]
        win_off[i] = old_offsets[i]
    win_off[keep] = kept
    cps = np.empty(kept + max_new * (min(w, n - start) + 1), np.int64)
    for i in range(kept):
        cps[i] = old_cps[i]
    # scratch for one window: O(min(w, n - start)^2), reused by every window
    m = max(2, min(w, n - start))
    D = np.empty((m, m))
    V = np.empty(m)
    H = np.zeros((m, m))
    Vp = np.empty(m)
    cV = np.empty(m)
    Q = np.empty((m, m))
    bounds = np.empty(m + 1, dtype=np.int64)
    ctau = np.empty(m + 1, dtype=np.int64)
    cq = np.empty(m + 1)
    ckap = np.empty(m + 1, dtype=np.int64)
    out = np.empty(m + 1, dtype=np.int64)
    k = keep
    s = start
    ns = sync.shape[0]
    sp = 0
    while s < n:
        while sp < ns and sync[sp] < s:
            sp += 1
        if sp < ns and sync[sp] == s:
            break
        e = min(s + w, n)
        c = window_change_points(
            x,
            s,
            e,
            pthresh,
            noise_floor,
            local_test,
            D,
            V,
            H,
            Vp,
            cV,
            Q,
            bounds,
            ctau,
            cq,
            ckap,
            out,
        )
        off = win_off[k]
        for i in range(c):
            cps[off + i] = out[i]
        win_start[k] = s
        win_off[k + 1] = off + c
        k += 1
        last = out[c - 1] if c > 0 else 0
        s = max(last, s + step)
    return win_start[:k].copy(), win_off[: k + 1].copy(), cps[: win_off[k]].copy(), s


# --------------------------------------------------------------------------
# the merge step's memo of segment statistics
# --------------------------------------------------------------------------
# Row r: keys[r] = (lo, mid, hi) and vals[r] = the (m1, s1, m2, s2, p) of
# ``segment_stats(x, lo, mid, hi)``, then ``trend_shift_p(x, lo, mid, hi)``
# (computed only with the trend test on).  A row depends on x[lo:hi] and the
# parameters only, so it stays valid while that slice does: a growing series
# reuses almost every row of its previous merge.  Rows are found through an
# open-addressing hash table of row numbers built for each merge (not stored).
MEMO_COLS = 6
_NO_ROW = -1


@njit(inline="always", **_NJ)
def _key_hash(lo, mid, hi, mask):
    # int64 products wrap around: the mix only spreads the keys over the slots
    h = (hi * 0x9E3779B1 + mid) * 0x85EBCA77 + lo
    return (h ^ (h >> 29)) & mask


@njit(inline="always", **_NJ)
def _memo_slot(table, keys, lo, mid, hi):
    """Slot of key (lo, mid, hi) in table: the one holding its row, else the
    empty slot where it goes (the table is never full)."""
    mask = table.shape[0] - 1
    s = _key_hash(lo, mid, hi, mask)
    while True:
        r = table[s]
        if r == _NO_ROW or (keys[r, 0] == lo and keys[r, 1] == mid and keys[r, 2] == hi):
            return s
        s = (s + 1) & mask


@njit(**_NJ)
def _memo_table(keys, count):
    """Hash table over rows keys[:count], room for len(keys) rows, at most half full."""
    size = 16
    while size < 2 * keys.shape[0]:
        size *= 2
    table = np.full(size, _NO_ROW, np.int64)
    for r in range(count):
        table[_memo_slot(table, keys, keys[r, 0], keys[r, 1], keys[r, 2])] = r
    return table


# --------------------------------------------------------------------------
# the merge step
# --------------------------------------------------------------------------
@njit(**_NJ)
def merge(
    x,
    n,
    weak,
    max_pvalue,
    min_magnitude,
    mode,
    noise_floor,
    min_seg,
    bonferroni,
    trend,
    memo_keys,
    memo_vals,
):
    """Stats of every weak change point against its neighbours, then Otava's
    merge: repeatedly drop the weakest point (largest p-value if it is not
    below ``max_pvalue``, else the smallest magnitude if not above
    ``min_magnitude``) and recompute the stats around it.

    ``weak``: the weak change points, sorted and distinct.

    mode == MODE_OTAVA reproduces Otava 0.8 exactly, including that the two
    points *after* a removed one are recomputed (the one before keeps its stale
    statistics) and Python's max/min tie and NaN rules.
    mode == MODE_DEFAULT recomputes both neighbours, removes points that leave
    a segment shorter than ``min_seg`` first, applies ``noise_floor`` and (if
    ``bonferroni``) multiplies each p-value by the number of split positions
    the point was chosen from (n1 + n2 - 1), capped at 1, and (if ``trend``)
    takes the larger of the t-test's and ``trend_shift_p``'s p-values.

    Segment statistics are looked up in the memo rows (``memo_keys``,
    ``memo_vals``; see ``MEMO_COLS``) of an earlier merge with the same
    parameters, which must all still hold for x.

    Returns (out, memo_keys, memo_vals): one row (index, mean before, std
    before, mean after, std after, p-value) per surviving point in index
    order, and the memo rows this merge used, for the next one.
    """
    k = weak.shape[0]
    idx = weak.copy()
    m1 = np.empty(k)
    s1 = np.empty(k)
    m2 = np.empty(k)
    s2 = np.empty(k)
    p = np.empty(k)
    # p-value of each short point's last test and the (lo, hi) it was made
    # with: the scan below repeats it every round, mostly with the same bounds
    short_lo = np.full(k, -1, np.int64)
    short_hi = np.full(k, -1, np.int64)
    short_p = np.empty(k)
    old_table = _memo_table(memo_keys, memo_keys.shape[0])
    # room for the tests of a typical merge (k, then about two per removal);
    # the rare rows beyond are recomputed when needed
    keys = np.empty((4 * k + 16, 3), np.int64)
    vals = np.empty((keys.shape[0], MEMO_COLS))
    table = _memo_table(keys, 0)
    used = 0

    def memo_row(lo, mid, hi, used):
        """Row of (lo, mid, hi) in this merge's memo of ``used`` rows: found
        there, else added as row ``used`` (copied from the old memo or
        computed); a full memo keeps its rows and computes into its spare last
        row.  Returns (row, rows used now)."""
        s = _memo_slot(table, keys, lo, mid, hi)
        if table[s] != _NO_ROW:
            return table[s], used
        r = used
        if r < keys.shape[0] - 1:
            table[s] = r
            used += 1
        keys[r, 0] = lo
        keys[r, 1] = mid
        keys[r, 2] = hi
        j = old_table[_memo_slot(old_table, memo_keys, lo, mid, hi)]
        if j != _NO_ROW:
            for col in range(MEMO_COLS):
                vals[r, col] = memo_vals[j, col]
        else:
            a, b, c, d, pv = segment_stats(x, lo, mid, hi, noise_floor)
            vals[r, 0] = a
            vals[r, 1] = b
            vals[r, 2] = c
            vals[r, 3] = d
            vals[r, 4] = pv
            vals[r, 5] = trend_shift_p(x, lo, mid, hi, noise_floor) if trend else 0.0
        return r, used

    for i in range(k):
        lo = idx[i - 1] if i > 0 else 0
        hi = idx[i + 1] if i + 1 < k else n
        r, used = memo_row(lo, idx[i], hi, used)
        _stats_into(vals, r, lo, hi, i, m1, s1, m2, s2, p, bonferroni, trend)
    while k > 0:
        w = -1
        if mode == MODE_DEFAULT and min_seg > 1:
            # points leaving a too-short segment go first, weakest first.  A
            # short point is judged against its nearest neighbours at least
            # min_seg away: within a cluster of close candidates every
            # neighbour-to-neighbour test is meaningless (1 vs 1 point), and
            # the strongest member of the cluster must be the one kept.
            pw = -1.0
            for i in range(k):
                lo = idx[i - 1] if i > 0 else 0
                hi = idx[i + 1] if i + 1 < k else n
                if idx[i] - lo >= min_seg and hi - idx[i] >= min_seg:
                    continue
                j = i - 1
                while j >= 0 and idx[i] - idx[j] < min_seg:
                    j -= 1
                lo = idx[j] if j >= 0 else 0
                j = i + 1
                while j < k and idx[j] - idx[i] < min_seg:
                    j += 1
                hi = idx[j] if j < k else n
                if short_lo[i] != lo or short_hi[i] != hi:
                    short_lo[i] = lo
                    short_hi[i] = hi
                    r, used = memo_row(lo, idx[i], hi, used)
                    short_p[i] = vals[r, 4]
                pi = short_p[i]
                if w < 0 or pi > pw:
                    w = i
                    pw = pi
        if w < 0:
            w = 0
            for i in range(1, k):
                if p[i] > p[w]:
                    w = i
            if p[w] < max_pvalue:
                w = 0
                mw = magnitude(m1[0], m2[0])
                for i in range(1, k):
                    mi = magnitude(m1[i], m2[i])
                    if mi < mw:
                        w = i
                        mw = mi
                if mw > min_magnitude:
                    break
        # delete position w
        for i in range(w, k - 1):
            idx[i] = idx[i + 1]
            m1[i] = m1[i + 1]
            s1[i] = s1[i + 1]
            m2[i] = m2[i + 1]
            s2[i] = s2[i + 1]
            p[i] = p[i + 1]
            short_lo[i] = short_lo[i + 1]
            short_hi[i] = short_hi[i + 1]
            short_p[i] = short_p[i + 1]
        k -= 1
        # Otava re-tests the points now at positions w and w + 1 (the latter
        # refreshes stats left stale by an earlier removal); the point before
        # the removed one keeps its stale stats.  Default mode: w - 1 and w.
        first = w if mode == MODE_OTAVA else w - 1
        last = w + 2 if mode == MODE_OTAVA else w + 1
        for i in range(max(first, 0), min(last, k)):
            lo = idx[i - 1] if i > 0 else 0
            hi = idx[i + 1] if i + 1 < k else n
            r, used = memo_row(lo, idx[i], hi, used)
            _stats_into(vals, r, lo, hi, i, m1, s1, m2, s2, p, bonferroni, trend)
    out = np.empty((k, 6))
    for i in range(k):
        out[i, 0] = idx[i]
        out[i, 1] = m1[i]
        out[i, 2] = s1[i]
        out[i, 3] = m2[i]
        out[i, 4] = s2[i]
        out[i, 5] = p[i]
    kept_keys = np.empty((used, 3), np.int64)
    kept_vals = np.empty((used, MEMO_COLS))
    for r in range(used):
        for c in range(3):
            kept_keys[r, c] = keys[r, c]
        for c in range(MEMO_COLS):
            kept_vals[r, c] = vals[r, c]
    return out, kept_keys, kept_vals


@njit(inline="always", **_NJ)
def _stats_into(vals, r, lo, hi, i, m1, s1, m2, s2, p, bonferroni, trend):
    """Point i's statistics from memo row r, with the merge's p-value rules."""
    pv = vals[r, 4]
    if trend and vals[r, 5] > pv:
        pv = vals[r, 5]
    if bonferroni:
        pv = pv * (hi - lo - 1)
        if pv > 1.0:
            pv = 1.0
    m1[i] = vals[r, 0]
    s1[i] = vals[r, 1]
    m2[i] = vals[r, 2]
    s2[i] = vals[r, 3]
    p[i] = pv


@njit(**_NJ)
def _weak_points(cps):
    """The distinct values of a chain's change points, sorted.  They come
    sorted already (a window starts at or after the previous one's last change
    point and finds points past its start): the insertion sort only makes
    sure, in linear time for such input."""
    out = cps.copy()
    for i in range(1, out.shape[0]):
        v = out[i]
        j = i - 1
        while j >= 0 and out[j] > v:
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = v
    k = 0
    for i in range(out.shape[0]):
        if k == 0 or out[i] != out[k - 1]:
            out[k] = out[i]
            k += 1
    return out[:k]


@njit(**_NJ)
def append_values(raw, x, new, starts, offsets, cps, split, merge_settings, memo_keys, memo_vals):
    """One append to a series whose first value is known, in a single call.

    ``raw``/``x``: the series as given and gap-filled; ``new``: the values to
    append (NaN = gap, filled with the last value before it); (starts,
    offsets, cps): its window chain; ``split``: the settings of
    ``window_chain`` (w to local_test); ``merge_settings``: those of ``merge``
    (max_pvalue to trend), then its memo.  The filled prefix does not change,
    so the chain's windows that end before the first new point are kept, the
    rest are recomputed, and the merge step runs over all its weak points.

    Returns (raw, x, starts, offsets, cps, windows computed, merge rows, memo
    keys, memo vals) of the longer series.
    """
    n_old = x.shape[0]
    n = n_old + new.shape[0]
    raw_out = np.empty(n)
    x_out = np.empty(n)
    for i in range(n_old):
        raw_out[i] = raw[i]
        x_out[i] = x[i]
    prev = x[n_old - 1]
    for i in range(new.shape[0]):
        v = new[i]
        raw_out[n_old + i] = v
        if v == v:
            prev = v
        x_out[n_old + i] = prev
    # windows that end before the first new point (start + w <= n_old): all
    # but the last one or two
    keep = starts.shape[0]
    while keep > 0 and starts[keep - 1] + split[0] > n_old:
        keep -= 1
    no_sync = np.empty(0, np.int64)
    chain_starts, chain_offsets, chain_cps, _ = window_chain(
        x_out, n, *split, keep, starts, offsets, cps, no_sync
    )
    out, keys, vals = merge(
        x_out, n, _weak_points(chain_cps), *merge_settings, memo_keys, memo_vals
    )
    computed = chain_starts.shape[0] - keep
    return raw_out, x_out, chain_starts, chain_offsets, chain_cps, computed, out, keys, vals


@njit(**_NJ)
def trend_shift_p(x, lo, mid, hi, noise_floor):
    """p-value of a level shift at ``mid`` on top of a straight line through
    x[lo:hi]: OLS of y on (1, t, [t >= mid]), two-sided t-test of the shift
    coefficient with N - 3 degrees of freedom (residual std floored at
    ``noise_floor * |mean|``).  A smooth trend has no shift; a step has.
    Returns 0.0 (no evidence against) when N - 3 < 2.
    """
    N = hi - lo
    if N - 3 < 2:
        return 0.0
    tm = (N - 1) / 2.0
    ybar = 0.0
    for i in range(lo, hi):
        ybar += x[i]
    ybar /= N
    n2 = hi - mid
    dbar = n2 / N
    stt = 0.0
    sty = 0.0
    std_ = 0.0
    for i in range(N):
        tc = i - tm
        stt += tc * tc
        sty += tc * (x[lo + i] - ybar)
        if lo + i >= mid:
            std_ += tc
    by = sty / stt
    bd = std_ / stt
    sdd = 0.0
    sdy = 0.0
    syy = 0.0
    for i in range(N):
        tc = i - tm
        dv = (1.0 if lo + i >= mid else 0.0) - dbar - bd * tc
        yv = x[lo + i] - ybar - by * tc
        sdd += dv * dv
        sdy += dv * yv
        syy += yv * yv
    if sdd <= 0.0:
        return 1.0
    b = sdy / sdd
    rss = syy - b * sdy
    if rss < 0.0:
        rss = 0.0
    s2 = rss / (N - 3)
    fl = noise_floor * abs(ybar)
    fl = fl * fl
    if s2 < fl:
        s2 = fl
    if s2 == 0.0:
        return 0.0 if b != 0.0 else 1.0
    t = b / math.sqrt(s2 / sdd)
    return 2.0 * _stdtr(N - 3.0, -abs(t), 0)


@njit(**_NJ)
def fill_gaps(raw):
    """Forward-fill NaN, then back-fill the leading NaNs (Otava's fill_missing)."""
    n = raw.shape[0]
    out = raw.copy()
    have = False
    prev = 0.0
    for i in range(n):
        v = out[i]
        if v != v:
            if have:
                out[i] = prev
        else:
            have = True
            prev = v
    have = False
    for i in range(n - 1, -1, -1):
        v = out[i]
        if v != v:
            if have:
                out[i] = prev
        else:
            have = True
            prev = v
    return out
