"""Incremental E-Divisive: a series that grows (or gets late points) one batch at a time.

    a = SeriesAnalyzer(EDivisiveParams())
    a.append([101.0, 99.5, ...])        # -> all current change points
    a.insert(17, [100.2])               # late data placed mid-series
    blob = a.to_bytes(); a = SeriesAnalyzer.from_bytes(blob)
    state = a.to_bytes(with_values=False)       # compact: the caller keeps the values
    a = SeriesAnalyzer.from_bytes(state, values=stored_values)

Invariant: after any sequence of appends and inserts, ``change_points_`` equals
``detect_change_points(values_)`` exactly.  The split step's windows are a
chain (each window's start depends on the previous window's result); a window
whose data did not change gives the same result, so only the windows from the
first changed one on are recomputed, and after an insert the chain re-joins the
old (shifted) windows as soon as it reaches one of their starts past the
changed region.  The merge step then runs over the weak points of the whole
chain (compiled, cheap); the statistics of its tests are remembered from one
update to the next (a test depends only on the values it spans, which an
append does not change), so after an append it mostly looks them up.  That
memo is not part of the saved state: the first merge after a restore
rebuilds it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator

from perfwatch.detectors import _kernels as K
from perfwatch.detectors.edivisive import (
    ChangePoint,
    EDivisiveParams,
    MergeMemo,
    WindowChain,
    as_raw_values,
    change_points_from_rows,
    merge_weak_points,
    refine_change_points,
)

__all__ = ["SeriesAnalyzer"]

_FORMAT = "perfwatch.analyzer/v1"
_MAGIC = b"PWSA\x01"

# A processor saves thousands of states with the same few parameter sets:
# their JSON (for to_bytes) and their objects (for from_bytes) are built once
# (the caches are emptied if a caller cycles through very many sets).
_MAX_CACHED_PARAMS = 256
_PARAMS_JSON: dict[EDivisiveParams, orjson.Fragment] = {}
_PARAMS_FROM_JSON: dict[tuple[tuple[str, Any], ...], EDivisiveParams] = {}


def _params_json(params: EDivisiveParams) -> orjson.Fragment:
    known = _PARAMS_JSON.get(params)
    if known is None:
        if len(_PARAMS_JSON) >= _MAX_CACHED_PARAMS:
            _PARAMS_JSON.clear()
        known = _PARAMS_JSON[params] = orjson.Fragment(orjson.dumps(params.to_dict()))
    return known


def _params_from_json(d: Mapping[str, Any]) -> EDivisiveParams:
    setting = tuple(sorted(d.items()))
    known = _PARAMS_FROM_JSON.get(setting)
    if known is None:
        if len(_PARAMS_FROM_JSON) >= _MAX_CACHED_PARAMS:
            _PARAMS_FROM_JSON.clear()
        known = _PARAMS_FROM_JSON[setting] = EDivisiveParams.from_dict(d)
    return known


class SeriesAnalyzer(BaseEstimator):
    """Change points of one growing series; see the module docstring.

    Its one parameter, ``params``, is fixed for the analyzer's life (its state
    depends on it): ``get_params`` and ``sklearn.base.clone`` work, setting it
    does not.  ``change_points_``, ``values_`` and ``windows_computed_`` are
    the results of the updates so far.
    """

    def __init__(self, params: EDivisiveParams | None = None) -> None:
        self._params = params if params is not None else EDivisiveParams()
        self._split_settings = self._params.split_settings()
        self._merge_settings = self._params.merge_settings()
        self._raw = np.zeros(0)  # values as given, NaN = gap
        self._x = np.zeros(0)  # gaps filled (all NaN while no value is known)
        self._chain = WindowChain.empty()
        self._cps: list[ChangePoint] = []
        self._memo = MergeMemo()
        #: split-step windows the last update computed (the others were reused)
        self.windows_computed_ = 0

    @property
    def params(self) -> EDivisiveParams:
        """The detector's parameters, fixed for the analyzer's life (its state depends on them)."""
        return self._params

    def set_params(self, **params: Any) -> SeriesAnalyzer:
        """Refused: the analyzer's state depends on its parameters."""
        raise ValueError(
            "a SeriesAnalyzer's params are fixed; make a new one, e.g. SeriesAnalyzer(params)"
        )

    # ------------------------------------------------------------------ views
    @property
    def change_points_(self) -> list[ChangePoint]:
        return list(self._cps)

    @property
    def values_(self) -> np.ndarray:
        """The series as given so far (NaN where a value was missing); a copy."""
        return self._raw.copy()

    def __len__(self) -> int:
        return int(self._raw.shape[0])

    def __repr__(self) -> str:
        return (
            f"SeriesAnalyzer(n={len(self)}, change_points={[c.index for c in self._cps]}, "
            f"params={self.params!r})"
        )

    # ---------------------------------------------------------------- updates
    def append(self, values: ArrayLike) -> list[ChangePoint]:
        """Add values at the end; returns all current change points."""
        new = as_raw_values(values)
        if new.size == 0:
            return self.change_points_
        x = self._x
        if x.shape[0] == 0 or x[0] != x[0]:  # no value known yet: x changes from index 0
            return self._update(np.concatenate([self._raw, new]), len(self), new.shape[0])
        # the common streaming case, in one compiled call
        chain, memo = self._chain, self._memo
        (self._raw, self._x, starts, offsets, cps, computed, rows, memo.keys, memo.vals) = (
            K.append_values(
                self._raw,
                x,
                new,
                chain.starts,
                chain.offsets,
                chain.cps,
                self._split_settings,
                self._merge_settings,
                memo.keys,
                memo.vals,
            )
        )
        self._chain = WindowChain(starts, offsets, cps)
        self.windows_computed_ = computed
        self._cps = self._refined(change_points_from_rows(rows))
        return list(self._cps)

    def insert(self, position: int, values: ArrayLike) -> list[ChangePoint]:
        """Place values before index ``position`` (0..len); returns all change points."""
        if isinstance(position, bool) or not isinstance(position, int | np.integer):
            raise ValueError(f"position must be an integer, got {position!r}")
        if not 0 <= position <= len(self):
            raise ValueError(f"position {position} is outside 0..{len(self)}")
        new = as_raw_values(values)
        if new.size == 0:
            return self.change_points_
        p = int(position)
        raw = np.concatenate([self._raw[:p], new, self._raw[p:]])
        return self._update(raw, p, new.shape[0])

    def _update(self, raw: np.ndarray, pos: int, k: int) -> list[ChangePoint]:
        """The series becomes ``raw``: ``k`` values were placed at ``pos``."""
        old_x = self._x
        n_old = old_x.shape[0]
        x = K.fill_gaps(raw)
        n = x.shape[0]
        self._raw = raw
        self._x = x
        if np.isnan(x[0]):  # no value known yet
            self._chain = WindowChain.empty()
            self._cps = []
            self._memo = MergeMemo()
            self.windows_computed_ = 0
            return []
        if n_old == 0 or np.isnan(old_x[0]):
            lo, hi = 0, n - 1
        else:
            # first changed index (filled values before pos can change only
            # through the back-fill of leading gaps) and last changed index
            # (forward fill of gaps right after the inserted block)
            diff = np.flatnonzero(x[:pos] != old_x[:pos])
            lo = int(diff[0]) if diff.size else pos
            tail_new = x[pos + k :]
            tail_old = old_x[pos:]
            diff = np.flatnonzero(tail_new != tail_old)
            hi = pos + k + int(diff[-1]) if diff.size else pos + k - 1
        self._memo.keep_before(lo)
        self._chain = self._rechain(lo, hi, pos, k, n_old)
        self._cps = self._refined(
            merge_weak_points(x, self._chain.weak_points(), self.params, self._memo)
        )
        return self.change_points_

    def _refined(self, found: list[ChangePoint]) -> list[ChangePoint]:
        """The merge's change points, after the ``refine`` rounds if they are on
        (their merges leave the memo to the weak points' merge)."""
        if not self.params.refines:
            return found
        return refine_change_points(self._x, found, self.params)

    def _rechain(self, lo: int, hi: int, pos: int, k: int, n_old: int) -> WindowChain:
        """Reuse the windows before ``lo`` and after ``hi``; recompute the rest."""
        w = int(self.params.window_len)
        old = self._chain
        # windows entirely before the first changed index (start + w <= lo)
        # are unchanged
        keep = int(old.starts.searchsorted(lo - w, side="right"))
        # old windows (in new coordinates) lying entirely after the changed
        # region: once the new chain reaches one of their starts, the rest of
        # the old chain follows unchanged, moved by k
        first_sync = keep + int(np.searchsorted(old.starts[keep:] + k, hi, side="right"))
        sync = old.starts[first_sync:] + k if pos < n_old else np.zeros(0, np.int64)
        chain, stop = old.continued(keep, self._x, self.params, sync)
        self.windows_computed_ = len(chain) - keep
        if stop < self._x.shape[0] and sync.size:
            j = first_sync + int(np.searchsorted(sync, stop))
            chain = chain.concat_shifted(old, j, k)
        return chain

    # ---------------------------------------------------------- serialisation
    def to_json(self) -> dict[str, Any]:
        """JSON-ready state; ``from_json`` restores an analyzer that continues exactly."""
        return {
            "format": _FORMAT,
            "params": self.params.to_dict(),
            "values": [None if v != v else float(v) for v in self._raw.tolist()],
            "chain": self._chain.to_lists(),
            "change_points": [c.to_dict() for c in self._cps],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SeriesAnalyzer:
        if d.get("format") != _FORMAT:
            raise ValueError(f"not a {_FORMAT} state (format={d.get('format')!r})")
        a = cls(EDivisiveParams.from_dict(d["params"]))
        raw = as_raw_values(d["values"]) if d["values"] else np.zeros(0)
        a._restore(raw, WindowChain.from_lists(d["chain"]))
        a._cps = [ChangePoint.from_dict(c) for c in d["change_points"]]
        return a

    def to_bytes(self, *, with_values: bool = True) -> bytes:
        """Compact binary state: a JSON header and the raw arrays.

        ``with_values=False`` leaves the series' values out (only their count and
        CRC-32 are kept) for callers that store them anyway, such as the stream
        processor's points table: the state then stays a few hundred bytes
        whatever the series' length, and ``from_bytes`` needs the values back.
        """
        # copy=False: no copy where the machine's order is little-endian already
        raw = self._raw.astype("<f8", copy=False)
        header = orjson.dumps(
            {
                "format": _FORMAT,
                "params": _params_json(self.params),
                "n": len(self),
                "values": "included" if with_values else zlib.crc32(raw.data),
                "windows": len(self._chain),
                "cps": int(self._chain.cps.shape[0]),
                "change_points": [c.to_dict() for c in self._cps],
            }
        )
        parts = [
            _MAGIC,
            struct.pack("<I", len(header)),
            header,
            raw.tobytes() if with_values else b"",
            self._chain.starts.astype("<i8", copy=False).tobytes(),
            self._chain.offsets.astype("<i8", copy=False).tobytes(),
            self._chain.cps.astype("<i8", copy=False).tobytes(),
        ]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, b: bytes, values: ArrayLike | None = None) -> SeriesAnalyzer:
        """Restore from ``to_bytes``; ``values`` are required for (and only for) a
        state saved ``with_values=False``, and must be the values it was saved with."""
        mv = memoryview(b)
        if bytes(mv[: len(_MAGIC)]) != _MAGIC:
            raise ValueError("not a perfwatch SeriesAnalyzer state (bad magic)")
        o = len(_MAGIC)
        (hlen,) = struct.unpack_from("<I", mv, o)
        o += 4
        h = orjson.loads(bytes(mv[o : o + hlen]))
        o += hlen
        if h.get("format") != _FORMAT:
            raise ValueError(f"not a {_FORMAT} state (format={h.get('format')!r})")

        def take(count: int, dtype: str) -> np.ndarray:
            nonlocal o
            size = count * 8
            if o + size > len(mv):
                raise ValueError("truncated SeriesAnalyzer state")
            arr = np.frombuffer(mv[o : o + size], dtype=dtype).astype(dtype[1:])
            o += size
            return arr

        saved = h.get("values", "included")  # states written before the flag had them
        if saved == "included":
            if values is not None:
                raise ValueError("this state carries its values; do not pass values")
            raw = take(h["n"], "<f8")
        else:
            if values is None:
                raise ValueError("this state was saved without its values; pass values")
            raw = as_raw_values(values)
            if raw.shape[0] != h["n"] or zlib.crc32(raw.astype("<f8", copy=False).data) != saved:
                raise ValueError(
                    f"the values given ({raw.shape[0]}) are not the {h['n']} values "
                    "this state was saved with"
                )
        starts = take(h["windows"], "<i8")
        offsets = take(h["windows"] + 1, "<i8")
        cps = take(h["cps"], "<i8")
        a = cls(_params_from_json(h["params"]))
        a._restore(raw, WindowChain(starts, offsets, cps))
        a._cps = [ChangePoint.from_dict(c) for c in h["change_points"]]
        return a

    def _restore(self, raw: np.ndarray, chain: WindowChain) -> None:
        self._raw = np.ascontiguousarray(raw, dtype=np.float64)
        self._x = K.fill_gaps(self._raw)
        self._chain = chain
