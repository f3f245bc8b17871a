# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, infer_types=False
"""Compiled kernels behind :mod:`perfwatch.detectors.edivisive`.

Everything here works on a float64 array ``x`` (gaps already filled) and plain
integers, so the detectors stay pure and the hot paths run without the Python
interpreter.  The module is a Cython extension compiled when perfwatch is
installed: nothing is compiled on first use.

Compatibility with Apache Otava 0.8 is *bit-for-bit* for the divergence values
and for the sums behind every mean and standard deviation: they are evaluated
with the same floating-point operations in the same order as Otava (through
numpy) evaluates them, so ties in the divergence and in the merge order
resolve exactly the same way.  The comments name the numpy expression each
loop reproduces.  The Student t tail of the t-tests is this module's own
(``student_t_cdf``); it agrees with scipy's to about 1e-13 relative (see
docs/edivisive.md).

Build notes: ``cdivision`` gives IEEE results (inf, NaN) for a float division
by zero, as numpy does; integer ``//`` and ``%`` are only used on non-negative
operands, where C and Python agree.  The extension is compiled without
fast-math and without floating-point contraction (no fused multiply-add), so
each operation rounds exactly as written.

Arrays passed in must be C-contiguous float64 / int64 numpy arrays.
"""

from libc.math cimport erfc, exp, fabs, isinf, isnan, lgamma, log, log1p, sqrt
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort

import numpy as np

# numpy's reduction works on buffers of this many elements and the pairwise
# summation switches to its unrolled loop below this block size.
cdef enum:
    NP_BUFSIZE = 8192
    PW_BLOCK = 128

cdef double NAN_ = float("nan")
cdef double INF_ = float("inf")
cdef double M_SQRT1_2_ = 0.70710678118654752440
cdef double INV_SQRT_2PI_ = 0.39894228040143267794

# Merge-step modes.
MODE_OTAVA = 0
MODE_DEFAULT = 1
cdef int C_MODE_OTAVA = 0
cdef int C_MODE_DEFAULT = 1


# --------------------------------------------------------------------------
# numpy-identical sums, means and standard deviations
# --------------------------------------------------------------------------
cdef inline double _summand(double v, double mu, bint sq) noexcept nogil:
    """The summand: the value, or its squared deviation from mu."""
    if sq:
        v = v - mu
        return v * v
    return v


cdef double _pairwise(const double* a, Py_ssize_t n, double mu, bint sq) noexcept nogil:
    """numpy's pairwise summation of a[0:n] (of (a-mu)**2 when sq)."""
    cdef double res, r0, r1, r2, r3, r4, r5, r6, r7
    cdef Py_ssize_t i, lim, n2
    if n < 8:
        # numpy starts this short loop from -0.0 (so a sum of -0.0 stays -0.0)
        res = -0.0
        for i in range(n):
            res += _summand(a[i], mu, sq)
        return res
    if n <= PW_BLOCK:
        # numpy's eight accumulators, in the same order
        r0 = _summand(a[0], mu, sq)
        r1 = _summand(a[1], mu, sq)
        r2 = _summand(a[2], mu, sq)
        r3 = _summand(a[3], mu, sq)
        r4 = _summand(a[4], mu, sq)
        r5 = _summand(a[5], mu, sq)
        r6 = _summand(a[6], mu, sq)
        r7 = _summand(a[7], mu, sq)
        i = 8
        lim = n - (n % 8)
        while i < lim:
            r0 += _summand(a[i], mu, sq)
            r1 += _summand(a[i + 1], mu, sq)
            r2 += _summand(a[i + 2], mu, sq)
            r3 += _summand(a[i + 3], mu, sq)
            r4 += _summand(a[i + 4], mu, sq)
            r5 += _summand(a[i + 5], mu, sq)
            r6 += _summand(a[i + 6], mu, sq)
            r7 += _summand(a[i + 7], mu, sq)
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += _summand(a[i], mu, sq)
            i += 1
        return res
    # above the block size: split in two halves, the first a multiple of 8
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, n2, mu, sq) + _pairwise(a + n2, n - n2, mu, sq)


cdef inline double _np_sum(
    const double* a, Py_ssize_t lo, Py_ssize_t hi, double mu, bint sq
) noexcept nogil:
    """``np.sum(a[lo:hi])`` (or of ``(a[lo:hi]-mu)**2``), bit for bit: numpy
    reduces buffer by buffer (8192 elements), each buffer summed pairwise."""
    cdef double s = 0.0
    cdef Py_ssize_t i = lo, c
    while i < hi:
        c = hi - i
        if c > NP_BUFSIZE:
            c = NP_BUFSIZE
        s += _pairwise(a + i, c, mu, sq)
        i += c
    return s


cdef inline void _mean_std(
    const double* a, Py_ssize_t lo, Py_ssize_t hi, double* m, double* s
) noexcept nogil:
    """(np.mean, np.std) of a[lo:hi] as Otava computes them (std = 0 below 2 points)."""
    cdef Py_ssize_t n = hi - lo
    cdef double mean = _np_sum(a, lo, hi, 0.0, False) / n
    m[0] = mean
    if n < 2:
        s[0] = 0.0
        return
    s[0] = sqrt(_np_sum(a, lo, hi, mean, True) / n)


# --------------------------------------------------------------------------
# Student's t distribution, from the regularized incomplete beta function
# --------------------------------------------------------------------------
# F_t(t; df) = I_x(df/2, 1/2) / 2 for t < 0, with x = df / (df + t^2)
# (Abramowitz & Stegun 26.7.1 with 26.5.27).  I_x(a, b) is evaluated with its
# continued fraction (A&S 26.5.8, in its even contraction) by the modified
# Lentz method, on the side of
# the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges
# quickly, x < (a + 1) / (a + b + 2).  x and 1 - x are both passed in, with
# their logarithms, so neither is formed by a cancelling subtraction.
cdef enum:
    CF_MAX_ITER = 100000
cdef double CF_EPS = 1e-16  # relative change that ends the continued fraction
cdef double CF_TINY = 1e-300  # Lentz's stand-in for a zero denominator
cdef double STIRLING_MIN = 10.0  # Stirling's series for lgamma from here on


cdef inline double _stirling_tail(double z) noexcept nogil:
    """lgamma(z) - ((z - 1/2) log z - z + log(2 pi)/2) for z >= 10: the
    Stirling series sum_k B_2k / (2k (2k-1) z^(2k-1)), to below 1e-17."""
    cdef double r = 1.0 / z
    cdef double r2 = r * r
    return r * (
        1.0 / 12.0
        + r2 * (
            -1.0 / 360.0
            + r2 * (
                1.0 / 1260.0
                + r2 * (
                    -1.0 / 1680.0
                    + r2 * (
                        1.0 / 1188.0
                        + r2 * (
                            -691.0 / 360360.0
                            + r2 * (1.0 / 156.0 + r2 * (-3617.0 / 122400.0))
                        )
                    )
                )
            )
        )
    )


cdef double _log_beta(double a, double b) noexcept nogil:
    """log B(a, b) for a, b > 0.

    With the larger argument below 10, from lgamma directly.  Otherwise
    lgamma(a) - lgamma(a + b) (a the larger) is taken from Stirling's series:
    the difference of two large, nearly equal log-gammas would lose about
    log10(a) digits, while (a - 1/2) log1p(b/a) stays of the order of b.
    """
    cdef double t
    if a < b:
        t = a
        a = b
        b = t
    if a < STIRLING_MIN:
        return lgamma(a) + lgamma(b) - lgamma(a + b)
    # lgamma(a) - lgamma(a+b)
    #   = -(a - 1/2) log1p(b/a) - b log(a + b) + b + tail(a) - tail(a + b)
    return lgamma(b) + (
        (b - (a - 0.5) * log1p(b / a) - b * log(a + b))
        + (_stirling_tail(a) - _stirling_tail(a + b))
    )


cdef inline double _cf_odd(double a, double b, double x, Py_ssize_t m) noexcept nogil:
    """d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) of A&S 26.5.8."""
    return -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1))


cdef inline double _cf_even(double a, double b, double x, Py_ssize_t m) noexcept nogil:
    """d_{2m} = m (b-m) x / ((a+2m-1)(a+2m)) of A&S 26.5.8."""
    return (m * (b - m) * x) / ((a + 2 * m - 1) * (a + 2 * m))


cdef inline double _cf_one_plus_odd(
    double a, double b, double x, double y, Py_ssize_t m
) noexcept nogil:
    """1 + d_{2m+1} without the cancellation of 1 - (nearly 1).

    With x = 1 - y the numerator (a+2m)(a+2m+1) - (a+m)(a+b+m) x expands to
    a (1 - b + 2m) + m (3m + 2 - b) + (a+m)(a+b+m) y: a sum of non-negative
    terms whenever the first two are, which is the case on the side of the
    symmetry this fraction is used on for b < 1 (the t distribution's b = 1/2).
    Otherwise 1 + d_{2m+1} is formed directly.
    """
    cdef double c0 = a * (1.0 - b + 2 * m) + m * (3.0 * m + 2.0 - b)
    if c0 >= 0.0:
        return (c0 + (a + m) * (a + b + m) * y) / ((a + 2 * m) * (a + 2 * m + 1))
    return 1.0 + _cf_odd(a, b, x, m)


cdef double _beta_cf(double a, double b, double x, double y) noexcept nogil:
    """K = 1 + d1/(1 + d2/(1 + d3/(1 + ...))), the continued fraction of
    A&S 26.5.8 (I_x(a, b) = x^a y^b / (a B(a, b)) / K).

    Near x = a/(a+b) with a large, K is small and every partial denominator
    1 + d_{2m+1} nearly cancels, so the fraction is evaluated through its even
    contraction, whose denominators 1 + d_{2k+1} + d_{2k+2} are formed with
    ``_cf_one_plus_odd``:

        K = (1 + d1 + d2 + S) / (1 + d2 + S),
        S = A2 / (B2 + A3 / (B3 + ...)),
        A_{k+1} = -d_{2k} d_{2k+1},  B_{k+1} = (1 + d_{2k+1}) + d_{2k+2}.

    The tail B2 + A3/(B3 + ...) is summed by the modified Lentz method
    (Lentz 1976; Thompson & Barnett 1986), stopping when a step changes it by
    less than a relative 1e-16.
    """
    cdef double f, c, d, num, den, delta, s
    cdef Py_ssize_t k
    f = _cf_one_plus_odd(a, b, x, y, 1) + _cf_even(a, b, x, 2)
    if fabs(f) < CF_TINY:
        f = CF_TINY
    c = f
    d = 0.0
    for k in range(2, CF_MAX_ITER):
        num = -_cf_even(a, b, x, k) * _cf_odd(a, b, x, k)
        den = _cf_one_plus_odd(a, b, x, y, k) + _cf_even(a, b, x, k + 1)
        d = den + num * d
        if fabs(d) < CF_TINY:
            d = CF_TINY
        c = den + num / c
        if fabs(c) < CF_TINY:
            c = CF_TINY
        d = 1.0 / d
        delta = c * d
        f *= delta
        if fabs(delta - 1.0) < CF_EPS:
            break
    s = (-_cf_even(a, b, x, 1) * _cf_odd(a, b, x, 1)) / f
    return ((_cf_one_plus_odd(a, b, x, y, 0) + _cf_even(a, b, x, 1)) + s) / (
        (1.0 + _cf_even(a, b, x, 1)) + s
    )


cdef double _betainc_tail(
    double a, double b, double x, double y, double log_x, double log_y
) noexcept nogil:
    """I_x(a, b) by the continued fraction (accurate for x < (a+1)/(a+b+2)):
    x^a y^b / (a B(a, b)) / K, the power prefactor taken through logs."""
    cdef double front = exp(a * log_x + b * log_y - _log_beta(a, b) - log(a))
    if front == 0.0:
        return 0.0
    return front / _beta_cf(a, b, x, y)


cdef double _betainc(
    double a, double b, double x, double y, double log_x, double log_y
) noexcept nogil:
    """Regularized incomplete beta I_x(a, b), given x, y = 1 - x and their logs
    (x itself may have underflowed to 0 while log x is finite)."""
    if isinf(log_x):
        return 0.0
    if isinf(log_y):
        return 1.0
    if x < (a + 1.0) / (a + b + 2.0):
        return _betainc_tail(a, b, x, y, log_x, log_y)
    return 1.0 - _betainc_tail(b, a, y, x, log_y, log_x)


cdef double _student_t_cdf(double t, double df) noexcept nogil:
    """P(T <= t) for Student's t with df > 0 degrees of freedom (NaN for
    df <= 0 or a NaN argument)."""
    cdef double u, x, y, log_x, log_y, lower
    if isnan(t) or isnan(df) or df <= 0.0:
        return NAN_
    if t == 0.0:
        return 0.5
    if isinf(t):
        return 0.0 if t < 0.0 else 1.0
    if isinf(df):
        return 0.5 * erfc(-t / sqrt(2.0))
    # u = t^2 / df; x = df / (df + t^2) = 1 / (1 + u); y = u / (1 + u)
    u = (t * t) / df
    if isinf(u):
        # |t| near the top of the double range: work with logarithms only
        log_x = -(2.0 * log(fabs(t)) - log(df))
        log_y = 0.0
        x = exp(log_x)
        y = 1.0
    else:
        log_x = -log1p(u)
        x = 1.0 / (1.0 + u)
        y = u / (1.0 + u)
        log_y = log(u) + log_x
    lower = 0.5 * _betainc(0.5 * df, 0.5, x, y, log_x, log_y)
    return lower if t < 0.0 else 1.0 - lower


# --------------------------------------------------------------------------
# the t-test
# --------------------------------------------------------------------------
cdef double _ttest_p(
    double m1, double s1, Py_ssize_t n1, double m2, double s2, Py_ssize_t n2, double noise_floor
) noexcept nogil:
    cdef double v1, v2, df, svar, mu, fl, denom, t, p
    if n1 + n2 <= 2:
        return 1.0
    v1 = 0.0 if n1 == 1 else s1 * s1
    v2 = 0.0 if n2 == 1 else s2 * s2
    df = n1 + n2 - 2.0
    svar = ((n1 - 1) * v1 + (n2 - 1) * v2) / df
    if noise_floor > 0.0:
        mu = (n1 * m1 + n2 * m2) / <double>(n1 + n2)
        fl = noise_floor * fabs(mu)
        fl = fl * fl
        if svar < fl:
            svar = fl
    denom = sqrt(svar * (1.0 / n1 + 1.0 / n2))
    t = (m1 - m2) / denom
    p = 2.0 * _student_t_cdf(-fabs(t), df)
    if noise_floor > 0.0 and p != p:
        return 1.0
    return p


cdef int _cmp_double(const void* a, const void* b) noexcept nogil:
    cdef double u = (<const double*>a)[0], v = (<const double*>b)[0]
    return (u > v) - (u < v)


cdef void _trimmed_moments(
    const double* x, Py_ssize_t lo, Py_ssize_t hi, double trim, double* scratch,
    double* out
) noexcept nogil:
    """out[0:3] = (trimmed mean, winsorized sum of squared deviations, h) of
    x[lo:hi]: g = floor(trim * n) values cut from each end (h = n - 2g left)
    for the mean; for the squares they are set to the nearest value kept."""
    cdef Py_ssize_t n = hi - lo, g, h, i
    cdef double s = 0.0, w, wm, ss = 0.0
    for i in range(n):
        scratch[i] = x[lo + i]
    qsort(scratch, n, sizeof(double), _cmp_double)
    g = <Py_ssize_t>(trim * n)
    h = n - 2 * g
    for i in range(g, n - g):
        s += scratch[i]
    wm = (s + g * (scratch[g] + scratch[n - g - 1])) / n
    for i in range(n):
        w = scratch[i]
        if i < g:
            w = scratch[g]
        elif i >= n - g:
            w = scratch[n - g - 1]
        ss += (w - wm) * (w - wm)
    out[0] = s / h
    out[1] = ss
    out[2] = h


cdef double _trimmed_ttest_p(
    const double* x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double trim,
    double noise_floor, double* scratch
) noexcept nogil:
    """Two-sided p-value of Yuen's trimmed t-test with pooled winsorized
    variance (Yuen & Dixon) between x[lo:mid] and x[mid:hi]: trimmed means,
    a scale that a few outliers do not inflate, h1 + h2 - 2 degrees of
    freedom.  trim = 0 is the pooled Student t-test."""
    cdef double a[3]
    cdef double b[3]
    cdef double df, svar, mu, fl, t, p
    if hi - lo <= 2:
        return 1.0
    _trimmed_moments(x, lo, mid, trim, scratch, a)
    _trimmed_moments(x, mid, hi, trim, scratch, b)
    df = a[2] + b[2] - 2.0
    if df <= 0.0:
        return 1.0
    svar = (a[1] + b[1]) / df
    if noise_floor > 0.0:
        mu = ((mid - lo) * a[0] + (hi - mid) * b[0]) / <double>(hi - lo)
        fl = noise_floor * fabs(mu)
        fl = fl * fl
        if svar < fl:
            svar = fl
    t = (a[0] - b[0]) / sqrt(svar * (1.0 / a[2] + 1.0 / b[2]))
    p = 2.0 * _student_t_cdf(-fabs(t), df)
    if noise_floor > 0.0 and p != p:
        return 1.0
    return p


cdef inline void _segment_stats(
    const double* x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double noise_floor,
    double* out
) noexcept nogil:
    """out[0:5] = (m1, s1, m2, s2, p) of the change at ``mid`` between
    x[lo:mid] and x[mid:hi]."""
    _mean_std(x, lo, mid, &out[0], &out[1])
    _mean_std(x, mid, hi, &out[2], &out[3])
    out[4] = _ttest_p(out[0], out[1], mid - lo, out[2], out[3], hi - mid, noise_floor)


cdef inline double _magnitude(double m1, double m2) noexcept nogil:
    cdef double f = 0.0 if m1 == 0 else m2 / m1 - 1.0
    cdef double b = 0.0 if m2 == 0 else m1 / m2 - 1.0
    f = fabs(f)
    b = fabs(b)
    return b if b > f else f


cdef double _trend_shift_p(
    const double* x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double noise_floor
) noexcept nogil:
    cdef Py_ssize_t N = hi - lo, n2, i
    cdef double tm, ybar, dbar, stt, sty, std_, by, bd, sdd, sdy, syy, tc, dv, yv
    cdef double b, rss, s2, fl, t
    if N - 3 < 2:
        return 0.0
    tm = (N - 1) / 2.0
    ybar = 0.0
    for i in range(lo, hi):
        ybar += x[i]
    ybar /= N
    n2 = hi - mid
    dbar = <double>n2 / <double>N
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
    fl = noise_floor * fabs(ybar)
    fl = fl * fl
    if s2 < fl:
        s2 = fl
    if s2 == 0.0:
        return 0.0 if b != 0.0 else 1.0
    t = b / sqrt(s2 / sdd)
    return 2.0 * _student_t_cdf(-fabs(t), N - 3.0)


cdef double _line_rss(const double* x, Py_ssize_t lo, Py_ssize_t hi, double ybar) noexcept nogil:
    """Residual sum of squares of the least-squares line through x[lo:hi],
    whose mean is ybar: S_yy - S_ty**2 / S_tt (S_tt = N (N**2 - 1) / 12)."""
    cdef Py_ssize_t N = hi - lo, i
    cdef double tm = (N - 1) / 2.0, sty = 0.0, syy = 0.0, yv
    for i in range(N):
        yv = x[lo + i] - ybar
        sty += (i - tm) * yv
        syy += yv * yv
    return syy - sty * sty / (N * (N * <double>N - 1.0) / 12.0)


# --------------------------------------------------------------------------
# energy divergence of every (split, end) pair of an interval
# --------------------------------------------------------------------------
# The square scratch tables D, H and Q have ``ld`` columns (the largest
# window of the chain); a window of m <= ld points uses their top-left m x m.
cdef void _window_tables(
    const double* y, Py_ssize_t ws, Py_ssize_t m, double* D, double* V, double* H,
    Py_ssize_t ld
) noexcept nogil:
    """Pairwise distances, column sums V and row prefix sums H of one window.

    D[r, c] = |y_r - y_c|; V[c] = sum_{r<=c} D[r, c+1] (numpy's axis-0 sum of the
    upper triangle, accumulated row by row); H[r, c] = sum_{c'=r..c} D[r, c'+1]
    (its cumulative sum along the row).
    """
    cdef Py_ssize_t r, c
    cdef double yr, s
    for r in range(m):
        yr = y[ws + r]
        for c in range(m):
            D[r * ld + c] = fabs(yr - y[ws + c])
    for c in range(m - 1):
        s = 0.0
        for r in range(c + 1):
            s += D[r * ld + c + 1]
        V[c] = s
    for r in range(m - 1):
        s = 0.0
        for c in range(r, m - 1):
            s += D[r * ld + c + 1]
            H[r * ld + c] = s


cdef void _best_split(
    Py_ssize_t a, Py_ssize_t b, const double* D, const double* V, const double* H,
    double* Vp, double* cV, double* Q, Py_ssize_t ld, Py_ssize_t min_left,
    Py_ssize_t* tau_out, double* q_out, Py_ssize_t* kappa_out
) noexcept nogil:
    """Candidate of interval [a, b) of a window: argmax over (tau, kappa) of Q.

    Reproduces Otava's ``PairDistanceCalculator._get_Q_vals`` + ``np.argmax``:
    Q = A - B - C with the same cumulative sums, evaluated in the same order;
    the first maximum in row-major (tau, kappa) order wins, and a NaN (which
    np.argmax returns first) wins over any number.  ``min_left`` > 1 restricts
    tau to leave that many points on each side of the split inside [a, b).
    Writes (tau, qhat, kappa) relative to the window; tau = -1 if none.
    """
    cdef Py_ssize_t L = b - 1 - a, k, r, i, j
    cdef Py_ssize_t best_i = -1, best_j = -1, nan_i = -1, nan_j = -1, lo_i, hi_i
    cdef double s, acc, two_over, ch, Aij, Bij, f, Cij, q, best = 0.0
    # Vp = V[a:b-1] - D[0:a, a+1:b].sum(axis=0);  cV = cumsum(Vp)
    for k in range(L):
        s = 0.0
        for r in range(a):
            s += D[r * ld + a + k + 1]
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
            ch += H[(a + i) * ld + a + j]
            if i == 0:
                Aij = two_over * ch
                Bij = 0.0
            else:
                Aij = two_over * (ch - cV[i - 1])
                Bij = (2.0 * (j - i + 1) / ((j + 2) * i)) * cV[i - 1]
            Q[i * ld + j] = Aij - Bij
        # C: flipud(cumsum(flipud(H'[1:, 1:]), axis=0)) bottom-up
        f = 0.0
        i = j - 1
        while i >= 0:
            f += H[(a + i + 1) * ld + a + j]
            Cij = (2.0 * (i + 1) / ((j + 2) * (j - i))) * f
            Q[i * ld + j] = Q[i * ld + j] - Cij
            i -= 1
    lo_i = 0
    hi_i = L - 1
    if min_left > 1:
        lo_i = min_left - 1
        hi_i = L - min_left
    for i in range(lo_i, hi_i + 1):
        for j in range(i, L):
            q = Q[i * ld + j]
            if q != q:
                if nan_i < 0:
                    nan_i = i
                    nan_j = j
            elif best_i < 0 or q > best:
                best = q
                best_i = i
                best_j = j
    if nan_i >= 0:
        tau_out[0] = a + nan_i + 1
        q_out[0] = Q[nan_i * ld + nan_j]
        kappa_out[0] = a + nan_j + 2
    elif best_i < 0:
        tau_out[0] = -1
        q_out[0] = 0.0
        kappa_out[0] = -1
    else:
        tau_out[0] = a + best_i + 1
        q_out[0] = best
        kappa_out[0] = a + best_j + 2


cdef struct WindowScratch:
    Py_ssize_t ld
    double* D
    double* V
    double* H
    double* Vp
    double* cV
    double* Q
    Py_ssize_t* bounds
    Py_ssize_t* ctau
    double* cq
    Py_ssize_t* ckap
    Py_ssize_t* out


cdef int _scratch_alloc(WindowScratch* sc, Py_ssize_t m) noexcept nogil:
    """Scratch for windows of up to m points, O(m^2); 0 on success."""
    sc.ld = m
    sc.D = <double*>malloc(m * m * sizeof(double))
    sc.V = <double*>malloc(m * sizeof(double))
    sc.H = <double*>calloc(m * m, sizeof(double))
    sc.Vp = <double*>malloc(m * sizeof(double))
    sc.cV = <double*>malloc(m * sizeof(double))
    sc.Q = <double*>malloc(m * m * sizeof(double))
    sc.bounds = <Py_ssize_t*>malloc((m + 1) * sizeof(Py_ssize_t))
    sc.ctau = <Py_ssize_t*>malloc((m + 1) * sizeof(Py_ssize_t))
    sc.cq = <double*>malloc((m + 1) * sizeof(double))
    sc.ckap = <Py_ssize_t*>malloc((m + 1) * sizeof(Py_ssize_t))
    sc.out = <Py_ssize_t*>malloc((m + 1) * sizeof(Py_ssize_t))
    if (
        sc.D == NULL or sc.V == NULL or sc.H == NULL or sc.Vp == NULL or sc.cV == NULL
        or sc.Q == NULL or sc.bounds == NULL or sc.ctau == NULL or sc.cq == NULL
        or sc.ckap == NULL or sc.out == NULL
    ):
        return -1
    return 0


cdef void _scratch_free(WindowScratch* sc) noexcept nogil:
    free(sc.D)
    free(sc.V)
    free(sc.H)
    free(sc.Vp)
    free(sc.cV)
    free(sc.Q)
    free(sc.bounds)
    free(sc.ctau)
    free(sc.cq)
    free(sc.ckap)
    free(sc.out)


cdef Py_ssize_t _window_change_points(
    const double* x, Py_ssize_t ws, Py_ssize_t we, double pthresh, double noise_floor,
    bint local_test, WindowScratch* sc
) noexcept nogil:
    """E-Divisive inside the window x[ws:we]: split the best interval while the
    t-test between the two halves of that interval passes ``pthresh``.

    With ``local_test`` (default mode) the right half of the test is the
    segment [tau, kappa) the divergence chose rather than the rest of the
    interval, so a short regression that reverted is tested against itself,
    not diluted by the normal runs after it.

    Writes the sorted absolute change-point indices into ``sc.out`` and returns
    their count.  Each interval's candidate is computed once (a candidate only
    depends on the window and the interval, so this equals Otava's recomputing
    every interval on every iteration).
    """
    cdef Py_ssize_t m = we - ws, nb, best, k, a, b, tau, right, lo, hi, kk
    cdef Py_ssize_t* bounds = sc.bounds
    cdef Py_ssize_t* ctau = sc.ctau
    cdef double* cq = sc.cq
    cdef Py_ssize_t* ckap = sc.ckap
    cdef double stats[5]
    if m < 2:
        return 0
    _window_tables(x, ws, m, sc.D, sc.V, sc.H, sc.ld)
    nb = 2
    bounds[0] = 0
    bounds[1] = m
    _best_split(0, m, sc.D, sc.V, sc.H, sc.Vp, sc.cV, sc.Q, sc.ld, 0, &ctau[0], &cq[0], &ckap[0])
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
        _segment_stats(x, ws + a, ws + tau, ws + right, noise_floor, stats)
        if not (stats[4] <= pthresh):
            break
        # insert tau: interval best -> [a, tau), [tau, b)
        k = nb
        while k > best + 1:
            bounds[k] = bounds[k - 1]
            k -= 1
        k = nb - 1
        while k > best + 1:
            ctau[k] = ctau[k - 1]
            cq[k] = cq[k - 1]
            ckap[k] = ckap[k - 1]
            k -= 1
        bounds[best + 1] = tau
        nb += 1
        for kk in range(best, best + 2):
            lo = bounds[kk]
            hi = bounds[kk + 1]
            if hi - lo >= 2:
                _best_split(
                    lo, hi, sc.D, sc.V, sc.H, sc.Vp, sc.cV, sc.Q, sc.ld, 0,
                    &ctau[kk], &cq[kk], &ckap[kk]
                )
            else:
                ctau[kk] = -1
                cq[kk] = 0.0
                ckap[kk] = -1
    for k in range(1, nb - 1):
        sc.out[k - 1] = ws + bounds[k]
    return nb - 2


cdef inline Py_ssize_t _imax(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a if a > b else b


cdef inline Py_ssize_t _imin(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a if a < b else b


cdef inline const double* _dptr(const double[::1] a) noexcept:
    return &a[0] if a.shape[0] > 0 else NULL


cdef inline const int64_t* _iptr(const int64_t[::1] a) noexcept:
    return &a[0] if a.shape[0] > 0 else NULL


cdef tuple _window_chain(
    const double[::1] x, Py_ssize_t n, Py_ssize_t w, double pthresh, double noise_floor,
    bint local_test, Py_ssize_t keep, const int64_t[::1] old_starts,
    const int64_t[::1] old_offsets, const int64_t[::1] old_cps, const int64_t[::1] sync
):
    cdef Py_ssize_t step = w // 2, start = 0, a, b, last, max_new, kept, m, k, s, ns, sp, e
    cdef Py_ssize_t c, off, i
    cdef WindowScratch sc
    cdef const double* xp = _dptr(x)
    cdef const int64_t* syncp = _iptr(sync)
    if keep > 0:
        a = old_offsets[keep - 1]
        b = old_offsets[keep]
        last = old_cps[b - 1] if b > a else 0
        start = _imax(last, old_starts[keep - 1] + step)
    max_new = (n - start + step - 1) // step + 1 if start < n else 0
    kept = old_offsets[keep]
    win_start_arr = np.empty(keep + max_new, np.int64)
    win_off_arr = np.empty(keep + max_new + 1, np.int64)
    cps_arr = np.empty(kept + max_new * (_imin(w, n - start) + 1), np.int64)
    cdef int64_t[::1] win_start = win_start_arr
    cdef int64_t[::1] win_off = win_off_arr
    cdef int64_t[::1] cps = cps_arr
    for i in range(keep):
        win_start[i] = old_starts[i]
        win_off[i] = old_offsets[i]
    win_off[keep] = kept
    for i in range(kept):
        cps[i] = old_cps[i]
    # scratch for one window: O(min(w, n - start)^2), reused by every window
    m = _imax(2, _imin(w, n - start))
    if _scratch_alloc(&sc, m) != 0:
        _scratch_free(&sc)
        raise MemoryError()
    k = keep
    s = start
    ns = sync.shape[0]
    sp = 0
    with nogil:
        while s < n:
            while sp < ns and syncp[sp] < s:
                sp += 1
            if sp < ns and syncp[sp] == s:
                break
            e = _imin(s + w, n)
            c = _window_change_points(xp, s, e, pthresh, noise_floor, local_test, &sc)
            off = win_off[k]
            for i in range(c):
                cps[off + i] = sc.out[i]
            win_start[k] = s
            win_off[k + 1] = off + c
            k += 1
            last = sc.out[c - 1] if c > 0 else 0
            s = _imax(last, s + step)
        _scratch_free(&sc)
    return (
        win_start_arr[:k].copy(),
        win_off_arr[: k + 1].copy(),
        cps_arr[: win_off[k]].copy(),
        s,
    )


# --------------------------------------------------------------------------
# the merge step's memo of segment statistics
# --------------------------------------------------------------------------
# Row r: keys[r] = (lo, mid, hi) and vals[r] = the (m1, s1, m2, s2, p) of
# ``segment_stats(x, lo, mid, hi)`` (p from ``trimmed_ttest_p`` with a trim),
# then ``trend_shift_p(x, lo, mid, hi)`` where the trend test applies, else 0.
# A row depends on x[lo:hi] and the parameters only, so it stays valid while
# that slice does: a growing series reuses almost every row of its previous
# merge.  Rows are found through an open-addressing hash table of row numbers
# built for each merge (not stored).
MEMO_COLS = 6
cdef enum:
    NCOLS = 6
    NO_ROW = -1


cdef inline Py_ssize_t _key_hash(int64_t lo, int64_t mid, int64_t hi, uint64_t mask) noexcept nogil:
    # unsigned products wrap around: the mix only spreads the keys over the slots
    cdef uint64_t h = (<uint64_t>hi * <uint64_t>0x9E3779B1 + <uint64_t>mid) * <uint64_t>0x85EBCA77
    h += <uint64_t>lo
    return <Py_ssize_t>((h ^ (h >> 29)) & mask)


cdef inline Py_ssize_t _memo_slot(
    const Py_ssize_t* table, Py_ssize_t size, const int64_t* keys,
    int64_t lo, int64_t mid, int64_t hi
) noexcept nogil:
    """Slot of key (lo, mid, hi) in table: the one holding its row, else the
    empty slot where it goes (the table is never full)."""
    cdef uint64_t mask = <uint64_t>(size - 1)
    cdef Py_ssize_t s = _key_hash(lo, mid, hi, mask), r
    while True:
        r = table[s]
        if r == NO_ROW or (keys[3 * r] == lo and keys[3 * r + 1] == mid and keys[3 * r + 2] == hi):
            return s
        s = (s + 1) & <Py_ssize_t>mask


cdef Py_ssize_t* _memo_table(
    const int64_t* keys, Py_ssize_t capacity, Py_ssize_t count, Py_ssize_t* size
) noexcept nogil:
    """Hash table over rows keys[:count], room for ``capacity`` rows, at most
    half full; NULL if out of memory."""
    cdef Py_ssize_t sz = 16, r
    while sz < 2 * capacity:
        sz *= 2
    cdef Py_ssize_t* table = <Py_ssize_t*>malloc(sz * sizeof(Py_ssize_t))
    if table == NULL:
        return NULL
    for r in range(sz):
        table[r] = NO_ROW
    for r in range(count):
        table[_memo_slot(table, sz, keys, keys[3 * r], keys[3 * r + 1], keys[3 * r + 2])] = r
    size[0] = sz
    return table


# Merge-step trend tests: none; a level shift on top of a line, at every
# point; the same only where a line fits the two segments better than the
# step does (``step_beats_line`` is false).
TREND_OFF = 0
TREND_ALWAYS = 1
TREND_WHERE_LINE_FITS = 2
cdef enum:
    C_TREND_OFF = 0
    C_TREND_ALWAYS = 1
    C_TREND_WHERE_LINE_FITS = 2


cdef struct MergeMemo:
    const double* x
    double noise_floor
    int trend
    double trim
    double* scratch
    # this merge's memo: cap rows of keys (3 columns) and vals (NCOLS columns)
    int64_t* keys
    double* vals
    Py_ssize_t cap
    Py_ssize_t used
    Py_ssize_t* table
    Py_ssize_t table_size
    # the memo of the earlier merge
    const int64_t* old_keys
    const double* old_vals
    Py_ssize_t* old_table
    Py_ssize_t old_size


cdef inline bint _step_beats_line(
    const double* x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, const double* stats
) noexcept nogil:
    """``step_beats_line`` with the segments' (m1, s1, m2, s2) in stats: the
    step leaves n * s**2 (population deviations) in each segment."""
    cdef Py_ssize_t n1 = mid - lo, n2 = hi - mid
    if n1 + n2 - 3 < 2:
        return True
    return not (
        _line_rss(x, lo, hi, (n1 * stats[0] + n2 * stats[2]) / (n1 + n2))
        < n1 * stats[1] * stats[1] + n2 * stats[3] * stats[3]
    )


cdef Py_ssize_t _memo_row(MergeMemo* mm, int64_t lo, int64_t mid, int64_t hi) noexcept nogil:
    """Row of (lo, mid, hi) in this merge's memo: found there, else added as
    the next row (copied from the old memo or computed); a full memo keeps its
    rows and computes into its spare last row."""
    cdef Py_ssize_t s = _memo_slot(mm.table, mm.table_size, mm.keys, lo, mid, hi), r, j, col
    cdef double* row
    if mm.table[s] != NO_ROW:
        return mm.table[s]
    r = mm.used
    if r < mm.cap - 1:
        mm.table[s] = r
        mm.used += 1
    mm.keys[3 * r] = lo
    mm.keys[3 * r + 1] = mid
    mm.keys[3 * r + 2] = hi
    row = mm.vals + NCOLS * r
    j = mm.old_table[_memo_slot(mm.old_table, mm.old_size, mm.old_keys, lo, mid, hi)]
    if j != NO_ROW:
        for col in range(NCOLS):
            row[col] = mm.old_vals[NCOLS * j + col]
    else:
        _segment_stats(mm.x, lo, mid, hi, mm.noise_floor, row)
        if mm.trim > 0.0:
            row[4] = _trimmed_ttest_p(mm.x, lo, mid, hi, mm.trim, mm.noise_floor, mm.scratch)
        row[5] = 0.0
        if mm.trend != C_TREND_OFF:
            # the shift test only where the step alone does not fit better
            # than a line (mostly it does, and the line's fit costs less)
            if mm.trend == C_TREND_ALWAYS or not _step_beats_line(mm.x, lo, mid, hi, row):
                row[5] = _trend_shift_p(mm.x, lo, mid, hi, mm.noise_floor)
    return r


# Merge-step selection corrections of a p-value chosen as the best of the
# n - 1 split positions of its two segments: none; Bonferroni (times n - 1);
# the tail of the maximum of the standardized two-sample statistic over the
# positions (``max_split_pvalue``), which counts their correlation.
SELECT_NONE = 0
SELECT_BONFERRONI = 1
SELECT_MAX_SPLIT = 2
cdef enum:
    C_SELECT_NONE = 0
    C_SELECT_BONFERRONI = 1
    C_SELECT_MAX_SPLIT = 2


cdef double _normal_cdf(double z) noexcept nogil:
    return 0.5 * erfc(-z * M_SQRT1_2_)


cdef double _two_sided_z(double p) noexcept nogil:
    """The b with P(|Z| > b) = p for a standard normal Z (0 < p < 1), by
    Newton's method on log P(|Z| > b), which stays accurate far in the tail."""
    cdef double b = sqrt(-2.0 * log(p)), tail, step
    cdef int it
    for it in range(60):
        tail = erfc(b * M_SQRT1_2_)
        if tail <= 0.0:
            break
        # d/db log erfc(b / sqrt 2) = -2 phi(b) / erfc(b / sqrt 2)
        step = (log(tail) - log(p)) * tail / (2.0 * exp(-0.5 * b * b) * INV_SQRT_2PI_)
        b += step
        if b < 0.0:
            b = 0.0
        if fabs(step) < 1e-12 * (1.0 + b):
            break
    return b


cdef inline double _overshoot_nu(double x) noexcept nogil:
    """Siegmund's discreteness correction nu(x) of a boundary crossing
    (about exp(-0.583 x) for small x)."""
    cdef double h, c
    if x < 1e-8:
        return 1.0
    h = 0.5 * x
    c = _normal_cdf(h)
    return (2.0 / x) * (c - 0.5) / (h * c + exp(-0.5 * h * h) * INV_SQRT_2PI_)


cdef double _max_split_pvalue(double p, Py_ssize_t n) noexcept nogil:
    """P(max over split positions k = 1..n-1 of |Z_k| >= b) where b is the
    normal level of the two-sided p-value p of one split and Z_k the
    standardized difference of means of x[:k] and x[k:] of n Gaussian values.

    Z_k is a standardized Brownian bridge sampled at k / n, an
    Ornstein-Uhlenbeck process in the time log(k / (n - k)) / 2; the
    approximation (Siegmund 1988; Siegmund and Yakir) is
        b phi(b) sum_k n / (k (n - k)) nu(b sqrt(n / (k (n - k)))),
    capped by Bonferroni's (n - 1) p and 1, and never below p; a large-b
    approximation, monotone in p.
    """
    cdef double b, s = 0.0, r, bonf, q
    cdef Py_ssize_t k, half
    if not (p > 0.0) or n < 3:
        return p
    bonf = p * (n - 1)
    if p >= 1.0 or bonf <= p:
        return p if p < 1.0 else 1.0
    # b phi(b) falls with b only from b = 1 on (p < 0.32): below, the level
    # of b = 1 keeps the result monotone in p (p that large is never kept)
    b = _two_sided_z(p)
    if b < 1.0:
        b = 1.0
    # the terms of k and n - k are equal
    half = (n - 1) // 2
    for k in range(1, half + 1):
        r = <double>n / (<double>k * <double>(n - k))
        s += r * _overshoot_nu(b * sqrt(r))
    s *= 2.0
    if n % 2 == 0:
        r = 4.0 / n
        s += r * _overshoot_nu(b * sqrt(r))
    q = b * exp(-0.5 * b * b) * INV_SQRT_2PI_ * s
    if q > bonf:
        q = bonf
    if q < p:
        q = p
    return q if q < 1.0 else 1.0


cdef inline void _stats_into(
    const double* row, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t i, double* m1, double* s1,
    double* m2, double* s2, double* p, int selection
) noexcept nogil:
    """Point i's statistics from a memo row, with the merge's p-value rules."""
    cdef double pv = row[4]
    if row[5] > pv:  # the trend test's p-value (0 without one)
        pv = row[5]
    if selection == C_SELECT_BONFERRONI:
        pv = pv * (hi - lo - 1)
        if pv > 1.0:
            pv = 1.0
    elif selection == C_SELECT_MAX_SPLIT:
        pv = _max_split_pvalue(pv, hi - lo)
    m1[i] = row[0]
    s1[i] = row[1]
    m2[i] = row[2]
    s2[i] = row[3]
    p[i] = pv


cdef tuple _merge(
    const double[::1] x, Py_ssize_t n, const int64_t[::1] weak, double max_pvalue,
    double min_magnitude, int mode, double noise_floor, Py_ssize_t min_seg, int selection,
    int trend, double trim, const int64_t[:, ::1] memo_keys, const double[:, ::1] memo_vals
):
    cdef Py_ssize_t k = weak.shape[0], i, j, w, lo, hi, r, first, last
    cdef Py_ssize_t n_old = memo_keys.shape[0]
    cdef double pw, pi, mw, mi
    cdef MergeMemo mm
    if memo_vals.shape[0] != n_old or (n_old > 0 and memo_vals.shape[1] != NCOLS):
        raise ValueError("memo_keys and memo_vals do not match")
    if n_old > 0 and memo_keys.shape[1] != 3:
        raise ValueError("memo_keys must have 3 columns")
    # room for the tests of a typical merge (k, then about two per removal);
    # the rare rows beyond are recomputed when needed
    cdef Py_ssize_t cap = 4 * k + 16
    keys_arr = np.empty((cap, 3), np.int64)
    vals_arr = np.empty((cap, NCOLS), np.float64)
    out_arr = np.empty((k, 6), np.float64)
    cdef int64_t[:, ::1] keys_mv = keys_arr
    cdef double[:, ::1] vals_mv = vals_arr
    cdef double[:, ::1] out = out_arr
    # per-point arrays: idx, m1, s1, m2, s2, p; and, for short points, the
    # p-value of the last test and the (lo, hi) it was made with: the scan
    # below repeats it every round, mostly with the same bounds
    cdef Py_ssize_t kk = k if k > 0 else 1
    cdef int64_t* idx = <int64_t*>malloc(kk * sizeof(int64_t))
    cdef int64_t* short_lo = <int64_t*>malloc(kk * sizeof(int64_t))
    cdef int64_t* short_hi = <int64_t*>malloc(kk * sizeof(int64_t))
    cdef double* buf = <double*>malloc(6 * kk * sizeof(double))
    cdef double* m1 = buf
    cdef double* s1 = buf + kk
    cdef double* m2 = buf + 2 * kk
    cdef double* s2 = buf + 3 * kk
    cdef double* p = buf + 4 * kk
    cdef double* short_p = buf + 5 * kk
    mm.x = _dptr(x)
    mm.noise_floor = noise_floor
    mm.trend = trend
    mm.trim = trim
    # the trimmed test sorts a copy of each segment
    mm.scratch = <double*>malloc((n if n > 0 else 1) * sizeof(double)) if trim > 0.0 else NULL
    mm.keys = &keys_mv[0, 0]
    mm.vals = &vals_mv[0, 0]
    mm.cap = cap
    mm.used = 0
    mm.old_keys = &memo_keys[0, 0] if n_old > 0 else NULL
    mm.old_vals = &memo_vals[0, 0] if n_old > 0 else NULL
    mm.old_table = _memo_table(mm.old_keys, n_old, n_old, &mm.old_size)
    mm.table = _memo_table(mm.keys, cap, 0, &mm.table_size)
    if (
        idx == NULL or short_lo == NULL or short_hi == NULL or buf == NULL
        or mm.old_table == NULL or mm.table == NULL or (trim > 0.0 and mm.scratch == NULL)
    ):
        free(idx)
        free(short_lo)
        free(short_hi)
        free(buf)
        free(mm.old_table)
        free(mm.table)
        free(mm.scratch)
        raise MemoryError()
    with nogil:
        for i in range(k):
            idx[i] = weak[i]
            short_lo[i] = -1
            short_hi[i] = -1
        for i in range(k):
            lo = idx[i - 1] if i > 0 else 0
            hi = idx[i + 1] if i + 1 < k else n
            r = _memo_row(&mm, lo, idx[i], hi)
            _stats_into(mm.vals + NCOLS * r, lo, hi, i, m1, s1, m2, s2, p, selection)
        while k > 0:
            w = -1
            if mode == C_MODE_DEFAULT and min_seg > 1:
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
                        r = _memo_row(&mm, lo, idx[i], hi)
                        short_p[i] = mm.vals[NCOLS * r + 4]
                    pi = short_p[i]
                    if w < 0 or pi > pw:
                        w = i
                        pw = pi
            if w < 0:
                # Otava: max(p) (the first of equal ones; NaN is never larger),
                # then min(magnitude) likewise
                w = 0
                for i in range(1, k):
                    if p[i] > p[w]:
                        w = i
                if p[w] < max_pvalue:
                    w = 0
                    mw = _magnitude(m1[0], m2[0])
                    for i in range(1, k):
                        mi = _magnitude(m1[i], m2[i])
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
            first = w if mode == C_MODE_OTAVA else w - 1
            last = w + 2 if mode == C_MODE_OTAVA else w + 1
            for i in range(_imax(first, 0), _imin(last, k)):
                lo = idx[i - 1] if i > 0 else 0
                hi = idx[i + 1] if i + 1 < k else n
                r = _memo_row(&mm, lo, idx[i], hi)
                _stats_into(mm.vals + NCOLS * r, lo, hi, i, m1, s1, m2, s2, p, selection)
        for i in range(k):
            out[i, 0] = idx[i]
            out[i, 1] = m1[i]
            out[i, 2] = s1[i]
            out[i, 3] = m2[i]
            out[i, 4] = s2[i]
            out[i, 5] = p[i]
    free(idx)
    free(short_lo)
    free(short_hi)
    free(buf)
    free(mm.old_table)
    free(mm.table)
    free(mm.scratch)
    used = mm.used
    return out_arr[:k].copy(), keys_arr[:used].copy(), vals_arr[:used].copy()


# --------------------------------------------------------------------------
# Python-visible functions
# --------------------------------------------------------------------------
cdef inline void _check_range(Py_ssize_t size, Py_ssize_t lo, Py_ssize_t hi) except *:
    if not 0 <= lo <= hi <= size:
        raise IndexError(f"range [{lo}, {hi}) is outside an array of {size} values")


def mean_std(const double[::1] a, Py_ssize_t lo, Py_ssize_t hi):
    """(np.mean, np.std) of a[lo:hi] as Otava computes them (std = 0 below 2 points)."""
    cdef double m, s
    _check_range(a.shape[0], lo, hi)
    _mean_std(_dptr(a), lo, hi, &m, &s)
    return m, s


def student_t_cdf(double t, double df):
    """P(T <= t) for Student's t distribution with ``df`` degrees of freedom
    (what ``scipy.special.stdtr(df, t)`` computes); NaN for df <= 0 or NaN input."""
    return _student_t_cdf(t, df)


def betainc_regularized(double a, double b, double x):
    """The regularized incomplete beta function I_x(a, b) for a, b > 0, 0 <= x <= 1."""
    if not (a > 0.0 and b > 0.0 and 0.0 <= x <= 1.0):
        return NAN_
    cdef double y = 1.0 - x
    return _betainc(a, b, x, y, log(x) if x > 0 else -INF_, log(y) if y > 0 else -INF_)


def ttest_p(
    double m1, double s1, Py_ssize_t n1, double m2, double s2, Py_ssize_t n2, double noise_floor
):
    """Two-sided pooled-variance Student t-test from (mean, population std, n).

    With ``noise_floor == 0`` this is Otava 0.8's
    ``scipy.stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2)`` including its
    use of the population std (ddof=0) and p = 1 for two points in total (the
    t statistic bit for bit, the p-value to about 1e-13 relative: the Student t
    tail is ``student_t_cdf``, not scipy's).
    ``noise_floor > 0`` (default mode) floors the pooled standard deviation at
    ``noise_floor * |pooled mean|`` and maps an undefined p (0/0) to 1.
    """
    return _ttest_p(m1, s1, n1, m2, s2, n2, noise_floor)


def segment_stats(
    const double[::1] x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double noise_floor
):
    """Stats (m1, s1, m2, s2, p) of the change at ``mid`` between x[lo:mid] and x[mid:hi]."""
    cdef double out[5]
    _check_range(x.shape[0], lo, hi)
    if not lo < mid < hi:
        raise IndexError(f"mid {mid} is not inside ({lo}, {hi})")
    _segment_stats(_dptr(x), lo, mid, hi, noise_floor, out)
    return out[0], out[1], out[2], out[3], out[4]


def max_split_pvalue(double p, Py_ssize_t n):
    """The merge's correlated selection correction: the probability that the
    largest standardized difference of means over the n - 1 split positions of
    n Gaussian values reaches the normal level of the two-sided p-value p of
    one split (a Brownian-bridge boundary-crossing approximation with a
    discreteness correction), at least p and at most min(1, (n - 1) p)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return _max_split_pvalue(p, n)


def normal_two_sided_z(double p):
    """The b > 0 with P(|Z| > b) = p for a standard normal Z, 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    return _two_sided_z(p)


def magnitude(double m1, double m2):
    """Otava's change magnitude: max(|m2/m1 - 1|, |m1/m2 - 1|), 0 for a zero mean."""
    return _magnitude(m1, m2)


def trend_shift_p(
    const double[::1] x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double noise_floor
):
    """p-value of a level shift at ``mid`` on top of a straight line through
    x[lo:hi]: OLS of y on (1, t, [t >= mid]), two-sided t-test of the shift
    coefficient with N - 3 degrees of freedom (residual std floored at
    ``noise_floor * |mean|``).  A smooth trend has no shift; a step has.
    Returns 0.0 (no evidence against) when N - 3 < 2.
    """
    _check_range(x.shape[0], lo, hi)
    return _trend_shift_p(_dptr(x), lo, mid, hi, noise_floor)


def best_level_split(const double[::1] x, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t min_len):
    """The split k of x[lo:hi] into two levels with the largest between-level
    sum of squares n1 n2 / n (mean1 - mean2)**2, at least ``min_len`` (>= 1)
    runs a side, the first of equal ones; -1 when the interval is too short.
    With the interval centred on its mean that sum is n S**2 / (n1 n2), S the
    sum of the first n1 centred values."""
    cdef Py_ssize_t n = hi - lo, k, best_k = -1
    cdef double mean, s = 0.0, between, best = -1.0
    _check_range(x.shape[0], lo, hi)
    if min_len < 1:
        min_len = 1
    if n < 2 * min_len:
        return -1
    mean = _np_sum(_dptr(x), lo, hi, 0.0, False) / n
    for k in range(1, n - min_len + 1):
        s += x[lo + k - 1] - mean
        if k >= min_len:
            between = s * s * n / (<double>k * (n - k))
            if between > best:
                best = between
                best_k = k
    return lo + best_k


def step_beats_line(const double[::1] x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi):
    """Whether a step at ``mid`` (each segment about its own mean) fits
    x[lo:hi] at least as well as one straight line does (residual sums of
    squares; both models have two coefficients).  Where it does not, the
    default merge also requires a level shift on top of the line
    (``trend_shift_p``).  True when N - 3 < 2."""
    cdef double stats[5]
    _check_range(x.shape[0], lo, hi)
    if not lo < mid < hi:
        raise IndexError(f"mid {mid} is not inside ({lo}, {hi})")
    _segment_stats(_dptr(x), lo, mid, hi, 0.0, stats)
    return _step_beats_line(_dptr(x), lo, mid, hi, stats)


def trimmed_ttest_p(
    const double[::1] x, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, double trim,
    double noise_floor
):
    """Two-sided p-value of Yuen's trimmed t-test (pooled winsorized variance)
    between x[lo:mid] and x[mid:hi], cutting floor(trim * n) values from each
    end of each side; pooled variance floored at ``(noise_floor * |mean|)**2``."""
    _check_range(x.shape[0], lo, hi)
    if not lo < mid < hi:
        raise IndexError(f"mid {mid} is not inside ({lo}, {hi})")
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim}")
    scratch = np.empty(hi - lo, np.float64)
    cdef double[::1] sc = scratch
    return _trimmed_ttest_p(_dptr(x), lo, mid, hi, trim, noise_floor, &sc[0])


def window_tables(
    const double[::1] y, Py_ssize_t ws, Py_ssize_t m, double[:, ::1] D, double[::1] V,
    double[:, ::1] H
):
    """Pairwise distances D, column sums V and row prefix sums H of the window
    y[ws:ws+m] into (m', m') / (m',) arrays, m' >= m (see ``best_split``)."""
    cdef Py_ssize_t ld = D.shape[1]
    _check_range(y.shape[0], ws, ws + m)
    if D.shape[0] < m or ld < m or H.shape[0] < m or H.shape[1] != ld or V.shape[0] < m:
        raise ValueError("scratch arrays are too small for the window")
    _window_tables(&y[0], ws, m, &D[0, 0], &V[0], &H[0, 0], ld)


def best_split(
    Py_ssize_t a, Py_ssize_t b, const double[:, ::1] D, const double[::1] V,
    const double[:, ::1] H, double[::1] Vp, double[::1] cV, double[:, ::1] Q,
    Py_ssize_t min_left
):
    """Candidate of interval [a, b) of a window whose tables ``window_tables``
    filled: argmax over (tau, kappa) of the energy divergence, as Otava's
    ``PairDistanceCalculator._get_Q_vals`` + ``np.argmax`` (the first maximum
    in (tau, kappa) order).  Returns (tau, qhat, kappa) relative to the
    window; tau = -1 if none."""
    cdef Py_ssize_t ld = D.shape[1], tau, kappa
    cdef double q
    if not (0 <= a and b - a >= 2 and b <= D.shape[0] and b <= ld and H.shape[1] == ld
            and Q.shape[1] == ld and Q.shape[0] >= b - a and Vp.shape[0] >= b - a
            and cV.shape[0] >= b - a and V.shape[0] >= b):
        raise ValueError("bad interval or scratch arrays for best_split")
    _best_split(
        a, b, &D[0, 0], &V[0], &H[0, 0], &Vp[0], &cV[0], &Q[0, 0], ld, min_left,
        &tau, &q, &kappa
    )
    return tau, q, kappa


def window_chain(
    const double[::1] x, Py_ssize_t n, Py_ssize_t w, double pthresh, double noise_floor,
    bint local_test, Py_ssize_t keep, const int64_t[::1] old_starts,
    const int64_t[::1] old_offsets, const int64_t[::1] old_cps, const int64_t[::1] sync
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
    if not 0 <= n <= x.shape[0] or w < 2:
        raise ValueError("window_chain: n must be within x and w >= 2")
    if not 0 <= keep < old_offsets.shape[0] or keep > old_starts.shape[0]:
        raise ValueError("window_chain: keep is outside the chain")
    return _window_chain(
        x, n, w, pthresh, noise_floor, local_test, keep, old_starts, old_offsets, old_cps, sync
    )


def merge(
    const double[::1] x, Py_ssize_t n, const int64_t[::1] weak, double max_pvalue,
    double min_magnitude, int mode, double noise_floor, Py_ssize_t min_seg, int selection,
    int trend, double trim, const int64_t[:, ::1] memo_keys, const double[:, ::1] memo_vals
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
    a segment shorter than ``min_seg`` first, applies ``noise_floor`` and
    corrects each p-value for the choice among the n1 + n2 - 1 split positions
    of its segments: ``selection`` SELECT_BONFERRONI multiplies it by their
    number, capped at 1; SELECT_MAX_SPLIT takes ``max_split_pvalue``.  With ``trim`` > 0
    the test is ``trimmed_ttest_p`` instead of the t-test on means.  With
    ``trend`` == TREND_ALWAYS it takes the larger of that test's and
    ``trend_shift_p``'s p-values; with TREND_WHERE_LINE_FITS, the same only
    where ``step_beats_line`` is false.

    Segment statistics are looked up in the memo rows (``memo_keys``,
    ``memo_vals``; see ``MEMO_COLS``) of an earlier merge with the same
    parameters, which must all still hold for x.

    Returns (out, memo_keys, memo_vals): one row (index, mean before, std
    before, mean after, std after, p-value) per surviving point in index
    order, and the memo rows this merge used, for the next one.
    """
    if not 0 <= n <= x.shape[0]:
        raise ValueError("merge: n must be within x")
    return _merge(
        x, n, weak, max_pvalue, min_magnitude, mode, noise_floor, min_seg, selection, trend,
        trim, memo_keys, memo_vals
    )


def _weak_points(const int64_t[::1] cps):
    """The distinct values of a chain's change points, sorted.  They come
    sorted already (a window starts at or after the previous one's last change
    point and finds points past its start): the insertion sort only makes
    sure, in linear time for such input."""
    out_arr = np.array(cps, dtype=np.int64)
    cdef int64_t[::1] out = out_arr
    cdef Py_ssize_t i, j, k = 0, size = out.shape[0]
    cdef int64_t v
    with nogil:
        for i in range(1, size):
            v = out[i]
            j = i - 1
            while j >= 0 and out[j] > v:
                out[j + 1] = out[j]
                j -= 1
            out[j + 1] = v
        for i in range(size):
            if k == 0 or out[i] != out[k - 1]:
                out[k] = out[i]
                k += 1
    return out_arr[:k]


def append_values(
    const double[::1] raw, const double[::1] x, const double[::1] new,
    const int64_t[::1] starts, const int64_t[::1] offsets, const int64_t[::1] cps,
    tuple split, tuple merge_settings, const int64_t[:, ::1] memo_keys,
    const double[:, ::1] memo_vals
):
    """One append to a series whose first value is known, in a single call.

    ``raw``/``x``: the series as given and gap-filled; ``new``: the values to
    append (NaN = gap, filled with the last value before it); (starts,
    offsets, cps): its window chain; ``split``: the settings of
    ``window_chain`` (w to local_test); ``merge_settings``: those of ``merge``
    (max_pvalue to trim), then its memo.  The filled prefix does not change,
    so the chain's windows that end before the first new point are kept, the
    rest are recomputed, and the merge step runs over all its weak points.

    Returns (raw, x, starts, offsets, cps, windows computed, merge rows, memo
    keys, memo vals) of the longer series.
    """
    cdef Py_ssize_t n_old = x.shape[0], n_new = new.shape[0], n, i, keep
    cdef double prev, v
    if n_old == 0 or raw.shape[0] != n_old:
        raise ValueError("append_values needs a non-empty series (raw and x of one length)")
    n = n_old + n_new
    raw_arr = np.empty(n, np.float64)
    x_arr = np.empty(n, np.float64)
    cdef double[::1] raw_out = raw_arr
    cdef double[::1] x_out = x_arr
    with nogil:
        for i in range(n_old):
            raw_out[i] = raw[i]
            x_out[i] = x[i]
        prev = x[n_old - 1]
        for i in range(n_new):
            v = new[i]
            raw_out[n_old + i] = v
            if v == v:
                prev = v
            x_out[n_old + i] = prev
    # windows that end before the first new point (start + w <= n_old): all
    # but the last one or two
    cdef Py_ssize_t w = split[0]
    keep = starts.shape[0]
    while keep > 0 and starts[keep - 1] + w > n_old:
        keep -= 1
    chain_starts, chain_offsets, chain_cps, _ = _window_chain(
        x_out, n, w, split[1], split[2], split[3], keep, starts, offsets, cps, _NO_SYNC
    )
    max_pvalue, min_magnitude, mode, noise_floor, min_seg, selection, trend, trim = (
        merge_settings
    )
    out, keys, vals = _merge(
        x_out, n, _weak_points(chain_cps), max_pvalue, min_magnitude, mode, noise_floor,
        min_seg, selection, trend, trim, memo_keys, memo_vals
    )
    computed = chain_starts.shape[0] - keep
    return raw_arr, x_arr, chain_starts, chain_offsets, chain_cps, computed, out, keys, vals


_NO_SYNC = np.empty(0, np.int64)


def fill_gaps(const double[::1] raw):
    """Forward-fill NaN, then back-fill the leading NaNs (Otava's fill_missing)."""
    out_arr = np.array(raw, dtype=np.float64)
    cdef double[::1] out = out_arr
    cdef Py_ssize_t n = out.shape[0], i
    cdef bint have
    cdef double prev = 0.0, v
    with nogil:
        have = False
        for i in range(n):
            v = out[i]
            if v != v:
                if have:
                    out[i] = prev
            else:
                have = True
                prev = v
        have = False
        i = n - 1
        while i >= 0:
            v = out[i]
            if v != v:
                if have:
                    out[i] = prev
            else:
                have = True
                prev = v
            i -= 1
    return out_arr
