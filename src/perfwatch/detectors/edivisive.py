"""Windowed E-Divisive change-point detection (Hunter / Apache Otava), pure.

    EDivisive(window_len=50).fit(values).change_points_ -> list[ChangePoint]
    detect_change_points(values, EDivisiveParams()) -> the same list

Algorithm (Fleming et al., "Hunter: Using Change Point Detection to Hunt for Performance
Regressions"; Otava 0.8):

1. *Split.*  Windows of ``window_len`` points advance by half a window (or to
   the last change point a window found, if that is further).  Inside a
   window, E-Divisive (Matteson and James, "A Nonparametric Approach
   for Multiple Change Point Analysis of Multivariate Data", alpha = 1) picks the split that
   maximises the energy divergence over every (split, segment end) pair of the
   interval, and keeps it while a two-sided pooled-variance Student t-test
   between the two halves passes a *relaxed* threshold (10 x max_pvalue if
   max_pvalue < 0.05, 2 x if < 0.5).  The union over all windows gives the
   weak change points.
2. *Merge.*  Each weak point is re-tested between its neighbouring weak points;
   the weakest (largest p-value >= max_pvalue, else smallest magnitude <=
   min_magnitude) is removed and its neighbours re-tested, until none fails.

``compat="otava"`` reproduces ``otava.analysis.compute_change_points`` exactly
(indices, p-values, magnitudes; see docs/edivisive.md).  The default mode
changes a few things users of Otava asked for, each with measured evidence in
docs/edivisive.md: a minimum segment length, a relative noise floor for the
variance, a selection correction of the merge p-values (Bonferroni, or as an
option a Brownian-bridge approximation that counts how correlated
neighbouring split positions are),
re-testing both neighbours of a removed point, and a level-shift test on top
of a line where a line fits the neighbouring segments better than the step (a
drift is not a step).  Then (``refine``) each change point is moved to the
best split between its neighbours and the moved points are merged again (a
few rounds): the windows often place a small step a few runs off.

Gaps (NaN) are forward-filled, then the leading ones back-filled.
The divergence of all (split, end) pairs of a window is computed in O(w^2)
with cumulative sums in a compiled (Cython) kernel; memory is O(n + min(w, n)^2).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.direction import classify_direction

__all__ = [
    "ChangePoint",
    "ChangePointFit",
    "EDivisiveParams",
    "MergeMemo",
    "WindowChain",
    "best_level_split",
    "best_split",
    "classify_direction",
    "detect_change_points",
    "first_pass_pvalue",
    "fit_change_points",
    "prepare_values",
    "refine_change_points",
]

_COMPAT_VALUES = (None, "otava")
_NO_SYNC = np.zeros(0, np.int64)
_FEW = 16  # lists up to this long are checked value by value in as_raw_values
# the record contract's bound on metric values (a test holds them equal): squared
# differences of values stay finite
_MAX_ABS_VALUE = 1e150
_DEFAULT_MODE_OPTIONS = (
    "min_segment_len",
    "noise_floor",
    "selection_correction",
    "correlated_selection",
    "local_split_test",
    "trend_check",
    "trim",
    "refine",
)
_REFINE_ROUNDS = 3  # the moves settle within three rounds on the evaluation histories


@dataclass(frozen=True, slots=True)
class EDivisiveParams:
    """Parameters of the detector.

    window_len, max_pvalue, min_magnitude: as in Otava (defaults 50, 0.001, 0.0).
    compat: ``"otava"`` for Otava 0.8's exact behaviour; ``None`` for the
      default mode, which also uses:
    min_segment_len: in the merge step, a change point must leave at least
      this many points on each side, else it is removed first (1 disables;
      default 3: a one- or two-run blip is not a change point, a regression
      lasting three runs is).  The split step is not restricted (restricting
      it costs sensitivity to short regressions, see docs/edivisive.md).
    noise_floor: relative floor of the pooled standard deviation, as a
      fraction of the pooled mean (default 0.001 = 0.1 %: on perfectly flat
      data a step smaller than that is not significant; 0 disables).
    selection_correction: correct each merge p-value for the choice of the
      point among the split positions of its two segments (default True).
    correlated_selection: with selection_correction, take the probability
      that the largest standardized difference of means over those positions
      reaches the point's (a Brownian-bridge approximation that counts how
      strongly neighbouring positions are correlated) instead of multiplying
      the p-value by their number (Bonferroni, default False).
    local_split_test: in the split step, test the candidate's left part
      against the segment [split, end) the divergence chose, not against the
      whole rest of the interval (default True: finds short regressions that
      reverted, which the rest of the interval dilutes).
    trend_check: in the merge step, where one straight line through the two
      neighbouring segments fits them better than the step between them
      (smaller residual sum of squares), also require the change to be a
      level shift on top of that line (default True: a drift or a wandering
      level is not cut into change points; see docs/edivisive.md).
    trend_test: require that level shift at every change point, however
      well the step fits (default False: it costs sensitivity to small steps).
    trim: with a value above 0, the merge step's test is Yuen's trimmed
      t-test, which cuts this share of the runs from each end of each side,
      so that a few outliers do not inflate the scale (default 0: the t-test
      on means, as Otava; 0.1 finds more small steps in heavy-tailed noise
      but more false ones in skewed noise, see docs/edivisive.md).
    refine: after the merge, move each change point (left to right) to the
      position between its neighbours that best splits them into two levels
      (the largest between-level sum of squares, ``min_segment_len`` runs a
      side) and merge the moved points again, up to three rounds; with the
      trend check on, a point whose segments a line fits better stays.  The split
      step's windows place a small step a few runs off, and among close
      candidates the merge keeps the one its short segments favour; the
      merge test still decides (default True: more recall at 1-2 sigma and
      fewer false positives, see docs/edivisive.md).
    """

    window_len: int = 50
    max_pvalue: float = 0.001
    min_magnitude: float = 0.0
    compat: str | None = None
    min_segment_len: int = 3
    noise_floor: float = 0.001
    selection_correction: bool = True
    correlated_selection: bool = False
    local_split_test: bool = True
    trend_test: bool = False
    trend_check: bool = True
    trim: float = 0.0
    refine: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.window_len, bool) or not isinstance(self.window_len, int | np.integer):
            raise ValueError(f"window_len must be an integer, got {self.window_len!r}")
        if self.window_len < 2:
            raise ValueError(f"window_len must be at least 2, got {self.window_len}")
        if self.window_len > sys.maxsize:  # the kernels index with Py_ssize_t
            raise ValueError(f"window_len must be at most {sys.maxsize}, got {self.window_len}")
        for name in ("max_pvalue", "min_magnitude", "noise_floor", "trim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
                raise ValueError(f"{name} must be a number, got {v!r}")
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.trim >= 0.5:
            raise ValueError(f"trim must be below 0.5, got {self.trim!r}")
        if self.compat not in _COMPAT_VALUES:
            raise ValueError(f"compat must be one of {_COMPAT_VALUES}, got {self.compat!r}")
        if isinstance(self.min_segment_len, bool) or not isinstance(
            self.min_segment_len, int | np.integer
        ):
            raise ValueError(f"min_segment_len must be an integer, got {self.min_segment_len!r}")
        if self.min_segment_len < 1:
            raise ValueError(f"min_segment_len must be at least 1, got {self.min_segment_len}")
        if self.compat == "otava":
            d = EDivisiveParams.__dataclass_fields__
            for name in _DEFAULT_MODE_OPTIONS:
                if getattr(self, name) != d[name].default:
                    raise ValueError(
                        f"{name} is a default-mode option and cannot be set with compat='otava'"
                    )

    @property
    def is_compat(self) -> bool:
        return self.compat == "otava"

    @property
    def refines(self) -> bool:
        """Whether the ``refine`` rounds follow the merge (never in Otava mode)."""
        return self.refine and not self.is_compat

    # effective kernel settings -------------------------------------------
    def split_settings(self) -> tuple[int, float, float, bool]:
        """The split kernels' settings: (window_len, relaxed p-value threshold,
        noise floor, local split test)."""
        compat = self.is_compat
        return (
            int(self.window_len),
            first_pass_pvalue(self.max_pvalue),
            0.0 if compat else float(self.noise_floor),
            False if compat else bool(self.local_split_test),
        )

    def merge_settings(self) -> tuple[float, float, int, float, int, int, int, float]:
        """The merge kernel's settings: (max_pvalue, min_magnitude, mode, noise
        floor, minimum segment length, selection correction, trend test mode,
        trim)."""
        compat = self.is_compat
        return (
            float(self.max_pvalue),
            float(self.min_magnitude),
            K.MODE_OTAVA if compat else K.MODE_DEFAULT,
            0.0 if compat else float(self.noise_floor),
            0 if compat else int(self.min_segment_len),
            self._selection_mode(),
            self._trend_mode(),
            0.0 if compat else float(self.trim),
        )

    def _selection_mode(self) -> int:
        if self.is_compat or not self.selection_correction:
            return K.SELECT_NONE
        return K.SELECT_MAX_SPLIT if self.correlated_selection else K.SELECT_BONFERRONI

    def _trend_mode(self) -> int:
        if self.is_compat:
            return K.TREND_OFF
        if self.trend_test:
            return K.TREND_ALWAYS
        return K.TREND_WHERE_LINE_FITS if self.trend_check else K.TREND_OFF

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.is_compat:
            for name in _DEFAULT_MODE_OPTIONS:
                d.pop(name)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EDivisiveParams:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown E-Divisive parameter(s): {', '.join(sorted(unknown))}")
        return cls(**dict(d))


@dataclass(frozen=True, slots=True)
class ChangePoint:
    index: int  # 0-based index of the first point after the change
    pvalue: float
    magnitude: float  # max(|after/before - 1|, |before/after - 1|), as Otava
    forward_change_percent: float  # (after/before - 1) * 100, 0 if before == 0
    mean_before: float
    stddev_before: float
    mean_after: float
    stddev_after: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChangePoint:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


def first_pass_pvalue(max_pvalue: float) -> float:
    """The relaxed threshold of the split step (Otava 0.8)."""
    if max_pvalue < 0.05:
        return max_pvalue * 10
    if max_pvalue < 0.5:
        return max_pvalue * 2
    return max_pvalue


def prepare_values(values: ArrayLike, *, allow_all_missing: bool = False) -> np.ndarray:
    """Float64 copy of ``values`` with gaps (NaN/None) filled; ValueError on bad input."""
    raw = as_raw_values(values)
    if raw.size == 0:
        if allow_all_missing:
            return raw
        raise ValueError("values is empty: at least one value is needed")
    if np.isnan(raw).all():
        if allow_all_missing:
            return raw.copy()
        raise ValueError("values are all missing (NaN/None): nothing to analyse")
    return K.fill_gaps(raw)


def as_raw_values(values: ArrayLike) -> np.ndarray:
    """Float64 1-D array of the values, None -> NaN; ValueError on inf / bad shape / type."""
    if type(values) is list and len(values) <= _FEW:
        # the streaming case (one new value): plain checks beat numpy's per-call
        # cost; anything but finite floats in range takes the general path
        for v in values:
            if type(v) is not float or not -_MAX_ABS_VALUE <= v <= _MAX_ABS_VALUE:
                break
        else:
            return np.array(values, dtype=np.float64)
    if isinstance(values, np.ndarray):
        arr = values
    else:
        if isinstance(values, str | bytes):
            raise ValueError("values must be a sequence of numbers, not a string")
        seq = values if isinstance(values, list | tuple) else list(cast(Iterable[Any], values))
        if any(v is None for v in seq):
            seq = [np.nan if v is None else v for v in seq]
        arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
    if arr.dtype == object or arr.dtype.kind not in "fiub":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"values must be numbers: {e}") from None
    raw = np.ascontiguousarray(arr, dtype=np.float64)
    if np.isinf(raw).any():
        i = int(np.flatnonzero(np.isinf(raw))[0])
        raise ValueError(f"values contain an infinite value at index {i}")
    finite = raw[~np.isnan(raw)]
    if finite.size and np.abs(finite).max() > _MAX_ABS_VALUE:
        raise ValueError(f"values are too large (|value| > {_MAX_ABS_VALUE:g}): rescale the metric")
    return raw


class WindowChain:
    """The split step's windows over a series and the weak points they found.

    Kept by the incremental analyzer so that windows whose data did not change
    are reused.  ``starts[k]`` is window k's first index; its change points
    are ``cps[offsets[k]:offsets[k + 1]]``.
    """

    __slots__ = ("cps", "offsets", "starts")

    def __init__(self, starts: np.ndarray, offsets: np.ndarray, cps: np.ndarray) -> None:
        self.starts = starts
        self.offsets = offsets
        self.cps = cps

    @classmethod
    def empty(cls) -> WindowChain:
        return cls(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    def weak_points(self) -> np.ndarray:
        return np.unique(self.cps)

    def continued(
        self, keep: int, x: np.ndarray, params: EDivisiveParams, sync: np.ndarray = _NO_SYNC
    ) -> tuple[WindowChain, int]:
        """This chain's first ``keep`` windows, then the windows that follow
        them to the end of x.

        Stops before a window whose start is in the sorted array ``sync``;
        returns the new chain and the start where it stopped (>= len(x) when
        it ran to the end).
        """
        starts, offsets, cps, stop = K.window_chain(
            x, x.shape[0], *params.split_settings(), keep, self.starts, self.offsets, self.cps, sync
        )
        return WindowChain(starts, offsets, cps), int(stop)

    def concat_shifted(self, other: WindowChain, first: int, shift: int) -> WindowChain:
        """This chain followed by other's windows from ``first`` on, moved by ``shift``."""
        o0 = int(other.offsets[first])
        starts = np.concatenate([self.starts, other.starts[first:] + shift])
        offsets = np.concatenate(
            [self.offsets, other.offsets[first + 1 :] - o0 + int(self.offsets[-1])]
        )
        cps = np.concatenate([self.cps, other.cps[o0:] + shift])
        return WindowChain(starts, offsets, cps)

    def to_lists(self) -> dict[str, list[int]]:
        return {
            "starts": self.starts.tolist(),
            "offsets": self.offsets.tolist(),
            "cps": self.cps.tolist(),
        }

    @classmethod
    def from_lists(cls, d: Mapping[str, Any]) -> WindowChain:
        return cls(
            np.asarray(d["starts"], np.int64),
            np.asarray(d["offsets"], np.int64),
            np.asarray(d["cps"], np.int64),
        )


class MergeMemo:
    """Segment statistics of one series' last merge step, for the next one.

    Each row holds the statistics of a (lo, mid, hi) test, a function of
    x[lo:hi] and the parameters only: while a series grows at its end every
    row stays valid, and the next merge (after one more value, mostly the same
    tests) looks them up instead of recomputing them.  Only the rows the last
    merge used are kept (some tens of rows, 72 bytes each).  A memo serves one
    parameter set; its owner calls ``keep_before(i)`` when x changes before
    index i.
    """

    __slots__ = ("keys", "vals")

    def __init__(self) -> None:
        self.keys = _NO_MEMO_KEYS
        self.vals = _NO_MEMO_VALS

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def keep_before(self, index: int) -> None:
        """Forget the rows that depend on x[index:] (those with hi > index)."""
        valid = self.keys[:, 2] <= index
        if not valid.all():
            self.keys = self.keys[valid]
            self.vals = self.vals[valid]


_NO_MEMO_KEYS = np.zeros((0, 3), np.int64)
_NO_MEMO_VALS = np.zeros((0, K.MEMO_COLS))


def merge_weak_points(
    x: np.ndarray, weak: np.ndarray, params: EDivisiveParams, memo: MergeMemo | None = None
) -> list[ChangePoint]:
    """The merge step over the filled series x and sorted distinct weak points.

    With ``memo`` (see MergeMemo; made with the same parameters) the
    statistics its rows hold are reused, and its rows are replaced by those
    this merge used.
    """
    out, keys, vals = K.merge(
        x,
        x.shape[0],
        np.ascontiguousarray(weak, np.int64),
        *params.merge_settings(),
        _NO_MEMO_KEYS if memo is None else memo.keys,
        _NO_MEMO_VALS if memo is None else memo.vals,
    )
    if memo is not None:
        memo.keys = keys
        memo.vals = vals
    return change_points_from_rows(out)


def change_points_from_rows(out: np.ndarray) -> list[ChangePoint]:
    """Change points from the merge kernel's rows (index, mean before, std
    before, mean after, std after, p-value)."""
    if out.shape[0] == 0:  # the common case: nothing to build
        return []
    return [_change_point(*row) for row in out.tolist()]


def _change_point(
    index: float, a: float, sd_a: float, b: float, sd_b: float, pvalue: float
) -> ChangePoint:
    fwd = 0.0 if a == 0 else b / a - 1.0
    bwd = 0.0 if b == 0 else a / b - 1.0
    mag = abs(bwd) if abs(bwd) > abs(fwd) else abs(fwd)
    return ChangePoint(
        index=int(index),
        pvalue=pvalue,
        magnitude=mag,
        forward_change_percent=fwd * 100.0,
        mean_before=a,
        stddev_before=sd_a,
        mean_after=b,
        stddev_after=sd_b,
    )


def best_split(values: ArrayLike) -> tuple[int, float]:
    """E-Divisive's candidate over the whole array: (tau, qhat) maximising the
    energy divergence Q(x[:tau], x[tau:kappa]) over 0 < tau < kappa <= n
    (Otava's tie rule: the first maximum in (tau, kappa) order)."""
    x = np.ascontiguousarray(values, dtype=np.float64)
    m = x.shape[0]
    if m < 2:
        raise ValueError("best_split needs at least 2 values")
    D = np.empty((m, m))
    V = np.empty(m)
    H = np.zeros((m, m))
    K.window_tables(x, 0, m, D, V, H)
    tau, q, _ = K.best_split(0, m, D, V, H, np.empty(m), np.empty(m), np.empty((m, m)), 0)
    return int(tau), float(q)


class ChangePointFit(NamedTuple):
    """What one analysis of a whole series found."""

    weak_points: np.ndarray  # sorted indices the split step proposed (before the merge)
    change_points: list[ChangePoint]
    n_values: int


def best_level_split(x: np.ndarray, lo: int, hi: int, min_len: int) -> int | None:
    """The split of x[lo:hi] into two levels with the largest between-level sum
    of squares, n1 n2 / n (mean1 - mean2)**2, at least ``min_len`` runs a side
    (the first of equal ones); None when the interval is too short."""
    k = int(K.best_level_split(np.ascontiguousarray(x, np.float64), lo, hi, min_len))
    return None if k < 0 else k


def refine_change_points(
    x: np.ndarray, found: list[ChangePoint], params: EDivisiveParams
) -> list[ChangePoint]:
    """The ``refine`` rounds after a merge that found ``found``: each change
    point, left to right, moves to the best split between its neighbours
    (``best_level_split``), unless the trend check is on and a line fits its
    two segments better than the step, and the moved points are merged again."""
    n = int(x.shape[0])
    trend = params.trend_check or params.trend_test
    for _ in range(_REFINE_ROUNDS):
        before = [c.index for c in found]
        edges = [0, *before, n]
        for i in range(1, len(edges) - 1):
            # the left neighbour has moved already: the points stay in order
            if trend and not K.step_beats_line(x, edges[i - 1], edges[i], edges[i + 1]):
                continue  # on a trend the best two-level split is not where the step is
            moved = best_level_split(x, edges[i - 1], edges[i + 1], params.min_segment_len)
            if moved is not None:
                edges[i] = moved
        if edges[1:-1] == before:
            break
        found = merge_weak_points(x, np.array(edges[1:-1], np.int64), params)
        if [c.index for c in found] == before:
            break
    return found


def fit_change_points(values: ArrayLike, params: EDivisiveParams) -> ChangePointFit:
    """Split step then merge step over a whole series; NaN/None are gaps."""
    x = prepare_values(values)
    chain, _ = WindowChain.empty().continued(0, x, params)
    weak = chain.weak_points()
    found = merge_weak_points(x, weak, params)
    if params.refines:
        found = refine_change_points(x, found, params)
    return ChangePointFit(weak, found, int(x.shape[0]))


def detect_change_points(
    values: ArrayLike, params: EDivisiveParams | None = None
) -> list[ChangePoint]:
    """Change points of one series (oldest first).  NaN/None are gaps."""
    return fit_change_points(values, params or EDivisiveParams()).change_points
