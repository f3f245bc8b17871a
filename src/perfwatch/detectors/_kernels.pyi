"""Type stub of the compiled kernels (src/perfwatch/detectors/_kernels.pyx).

Arrays are C-contiguous numpy arrays: ``F64`` of float64, ``I64`` of int64.
"""

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

MODE_OTAVA: int
MODE_DEFAULT: int
MEMO_COLS: int
TREND_OFF: int
TREND_ALWAYS: int
TREND_WHERE_LINE_FITS: int
SELECT_NONE: int
SELECT_BONFERRONI: int
SELECT_MAX_SPLIT: int

def mean_std(a: F64, lo: int, hi: int) -> tuple[float, float]: ...
def student_t_cdf(t: float, df: float) -> float: ...
def betainc_regularized(a: float, b: float, x: float) -> float: ...
def ttest_p(
    m1: float, s1: float, n1: int, m2: float, s2: float, n2: int, noise_floor: float
) -> float: ...
def segment_stats(
    x: F64, lo: int, mid: int, hi: int, noise_floor: float
) -> tuple[float, float, float, float, float]: ...
def max_split_pvalue(p: float, n: int) -> float: ...
def normal_two_sided_z(p: float) -> float: ...
def magnitude(m1: float, m2: float) -> float: ...
def trend_shift_p(x: F64, lo: int, mid: int, hi: int, noise_floor: float) -> float: ...
def best_level_split(x: F64, lo: int, hi: int, min_len: int) -> int: ...
def step_beats_line(x: F64, lo: int, mid: int, hi: int) -> bool: ...
def trimmed_ttest_p(
    x: F64, lo: int, mid: int, hi: int, trim: float, noise_floor: float
) -> float: ...
def window_tables(y: F64, ws: int, m: int, D: F64, V: F64, H: F64) -> None: ...
def best_split(
    a: int, b: int, D: F64, V: F64, H: F64, Vp: F64, cV: F64, Q: F64, min_left: int
) -> tuple[int, float, int]: ...
def window_chain(
    x: F64,
    n: int,
    w: int,
    pthresh: float,
    noise_floor: float,
    local_test: bool,
    keep: int,
    old_starts: I64,
    old_offsets: I64,
    old_cps: I64,
    sync: I64,
) -> tuple[I64, I64, I64, int]: ...
def merge(
    x: F64,
    n: int,
    weak: I64,
    max_pvalue: float,
    min_magnitude: float,
    mode: int,
    noise_floor: float,
    min_seg: int,
    selection: int,
    trend: int,
    trim: float,
    memo_keys: I64,
    memo_vals: F64,
) -> tuple[F64, I64, F64]: ...
def append_values(
    raw: F64,
    x: F64,
    new: F64,
    starts: I64,
    offsets: I64,
    cps: I64,
    split: tuple[int, float, float, bool],
    merge_settings: tuple[float, float, int, float, int, int, int, float],
    memo_keys: I64,
    memo_vals: F64,
) -> tuple[F64, F64, I64, I64, I64, int, F64, I64, F64]: ...
def fill_gaps(raw: F64) -> F64: ...
