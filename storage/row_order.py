"""Rows sorted by integer keys, and the sums of rows with equal keys.

Keys whose ranges multiply to less than 2^62 are packed into one int64 and sorted once
(a stable merge sort that takes sorted runs whole), several times faster than
``np.lexsort`` or a hash aggregation. Used where layers are consolidated and merged
(storage/layer.py) and by the operators' kernels (ops/columnar.py).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def lex_order(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Indices sorting rows by ``keys`` (first key most significant).

    Integer keys whose ranges multiply to less than 2^62 are packed into one int64 and
    sorted once: several times faster than ``np.lexsort`` on millions of rows. The sort is
    stable (a merge sort that takes sorted runs whole): keys that arrive in order, or as a
    few sorted runs (rows grouped by key, two sorted halves concatenated), sort 3 to 40
    times faster than with the default quicksort, and random keys no slower.
    """
    packed = _packed(keys)
    return np.argsort(packed, kind="stable") if packed is not None else np.lexsort(tuple(reversed(keys)))


def _packed(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """The rows' integer ``keys`` packed into one int64 that sorts as they do, or None
    (not all integers, or ranges too wide)."""
    if all(k.dtype.kind in "iub" for k in keys) and len(keys[0]):
        lows = [int(k.min()) for k in keys]
        spans = [int(k.max()) - lo + 1 for k, lo in zip(keys, lows)]
        if np.prod([float(x) for x in spans]) < 2.0 ** 62:
            packed = np.zeros(len(keys[0]), np.int64)
            for k, lo, span in zip(keys, lows, spans):
                packed *= span
                packed += k.astype(np.int64) - lo
            return packed
    return None


def group_sum(keys: Sequence[np.ndarray], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``values`` over rows with equal ``keys``; returns (one representative row, sums)."""
    if len(values) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    packed = _packed(keys)
    start = np.zeros(len(values), bool)
    start[0] = True
    if packed is not None:  # equal rows are equal packed values: one comparison
        order = np.argsort(packed, kind="stable")
        ps = packed[order]
        np.not_equal(ps[1:], ps[:-1], out=start[1:])
    else:
        order = np.lexsort(tuple(reversed(keys)))
        for k in keys:
            ks = k[order]
            start[1:] |= ks[1:] != ks[:-1]
    idx = np.flatnonzero(start)
    return order[idx], np.add.reduceat(values[order], idx)
