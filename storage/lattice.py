"""Times and frontiers: the lattice every trace lives in.

A time is a tuple of ``d >= 1`` int64 coordinates under the product order:

* ``s <= t``  iff every coordinate of ``s`` is ``<=`` the one of ``t`` (a partial order);
* ``join(s, t)`` is the coordinatewise max (least upper bound);
* ``meet(s, t)`` is the coordinatewise min (greatest lower bound).

A frontier is an antichain (no element ``<=`` another); a time is *beyond* it when some
element is ``<=`` the time. The empty frontier has nothing beyond it: a trace whose upper
is empty is complete forever.

``advance(t, F) = meet over f in F of join(t, f)`` maps ``t`` to the greatest time that no
time beyond ``F`` can tell apart from ``t``. Laws (tested with hypothesis):

* for every ``g`` beyond ``F``:  ``s <= g``  iff  ``advance(s, F) <= g``;
* ``advance(t, F) >= t``, and ``advance`` is idempotent.

Because meet and join act coordinate by coordinate, in this lattice the meet of joins
equals ``join(t, meet(F))``: advancing a column of times is one ``maximum`` per coordinate,
which is how the vectorised versions below work.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from storage.errors import TimeSyntaxError

Time = tuple[int, ...]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------- single times


def leq(s: Time, t: Time) -> bool:
    """The product partial order: every coordinate of ``s`` is at most that of ``t``."""
    _same_dim(s, t)
    return all(a <= b for a, b in zip(s, t))


def join(s: Time, t: Time) -> Time:
    _same_dim(s, t)
    return tuple(max(a, b) for a, b in zip(s, t))


def meet(s: Time, t: Time) -> Time:
    _same_dim(s, t)
    return tuple(min(a, b) for a, b in zip(s, t))


def minimum(d: int) -> Time:
    """The least time we use in dimension ``d``: all zeros (times are non-negative)."""
    return (0,) * d


def _same_dim(s: Time, t: Time) -> None:
    if len(s) != len(t):
        raise ValueError(f"times {format_time(s)} and {format_time(t)} have different dimensions")


# ---------------------------------------------------------------- frontiers


class Frontier:
    """An antichain of times, kept normalised (minimal elements only, sorted)."""

    __slots__ = ("elements", "d")

    def __init__(self, times: Iterable[Time], d: int | None = None):
        ts = sorted({tuple(int(c) for c in t) for t in times})
        if d is None:
            if not ts:
                raise ValueError("an empty frontier needs its dimension")
            d = len(ts[0])
        for t in ts:
            if len(t) != d:
                raise ValueError(f"time {format_time(t)} does not have {d} coordinate(s)")
        minimal = [t for t in ts if not any(u != t and leq(u, t) for u in ts)]
        self.elements: tuple[Time, ...] = tuple(minimal)
        self.d = d

    # construction helpers
    @classmethod
    def minimum(cls, d: int) -> "Frontier":
        return cls([minimum(d)], d)

    @classmethod
    def empty(cls, d: int) -> "Frontier":
        return cls([], d)

    def is_empty(self) -> bool:
        return not self.elements

    def __iter__(self):
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __eq__(self, other) -> bool:
        return isinstance(other, Frontier) and self.d == other.d and self.elements == other.elements

    def __hash__(self) -> int:
        return hash((self.d, self.elements))

    def __repr__(self) -> str:
        return f"Frontier({format_frontier(self)!r})"

    def beyond(self, t: Time) -> bool:
        """True when some element of the frontier is ``<=`` ``t``."""
        return any(leq(f, t) for f in self.elements)

    def dominates(self, other: "Frontier") -> bool:
        """True when every time beyond ``self`` is beyond ``other`` (self >= other).

        This is the order in which frontiers only move forward.
        """
        return all(other.beyond(f) for f in self.elements)

    def meet(self, other: "Frontier") -> "Frontier":
        """The lower envelope: a time is beyond it iff beyond either frontier."""
        return Frontier(list(self.elements) + list(other.elements), self.d)

    def join(self, other: "Frontier") -> "Frontier":
        """The upper envelope: a time is beyond it iff beyond both frontiers."""
        return Frontier([join(f, g) for f in self.elements for g in other.elements], self.d)

    def meet_time(self) -> Time | None:
        """The greatest time below every element (None for the empty frontier)."""
        if not self.elements:
            return None
        out = self.elements[0]
        for f in self.elements[1:]:
            out = meet(out, f)
        return out

    def to_json(self) -> list[list[int]]:
        return [list(t) for t in self.elements]

    @classmethod
    def from_json(cls, value: list[list[int]], d: int) -> "Frontier":
        return cls([tuple(t) for t in value], d)


def advance(t: Time, frontier: Frontier) -> Time:
    """``meet over f in F of join(t, f)``; times advanced to the empty frontier stay put."""
    if frontier.is_empty():
        return tuple(t)
    out = None
    for f in frontier:
        j = join(t, f)
        out = j if out is None else meet(out, j)
    return out


# ---------------------------------------------------------------- columns of times


def advance_columns(columns: Sequence[np.ndarray], frontier: Frontier) -> list[np.ndarray]:
    """Advance a column-per-coordinate array of times to ``frontier`` without a Python loop per row."""
    if len(columns) != frontier.d:
        raise ValueError(f"{len(columns)} time column(s) against a frontier of dimension {frontier.d}")
    m = frontier.meet_time()
    if m is None:
        return [np.asarray(c, dtype=np.int64) for c in columns]
    return [np.maximum(np.asarray(c, dtype=np.int64), np.int64(m[i])) for i, c in enumerate(columns)]


def beyond_mask(columns: Sequence[np.ndarray], frontier: Frontier) -> np.ndarray:
    """Boolean mask: which rows' times are beyond ``frontier``."""
    if len(columns) != frontier.d:
        raise ValueError(f"{len(columns)} time column(s) against a frontier of dimension {frontier.d}")
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    n = len(cols[0])
    mask = np.zeros(n, dtype=bool)
    for f in frontier:
        hit = np.ones(n, dtype=bool)
        for i, c in enumerate(cols):
            hit &= c >= f[i]
        mask |= hit
    return mask


def beyond_sql(frontier: Frontier, time_columns: Sequence[str]) -> str:
    """A SQL predicate true for rows whose time is beyond ``frontier`` (DuckDB and Spark)."""
    if frontier.is_empty():
        return "FALSE"
    parts = []
    for f in frontier:
        parts.append("(" + " AND ".join(f"{c} >= {v}" for c, v in zip(time_columns, f)) + ")")
    return "(" + " OR ".join(parts) + ")"


def leq_sql(t: Time, time_columns: Sequence[str]) -> str:
    """A SQL predicate true for rows whose time is ``<= t``."""
    return "(" + " AND ".join(f"{c} <= {v}" for c, v in zip(time_columns, t)) + ")"


def time_columns(d: int) -> list[str]:
    """Column names of the time coordinates in update files and layers."""
    return ["time"] if d == 1 else [f"time_{i}" for i in range(d)]


# ---------------------------------------------------------------- text form

_INT = r"[+-]?\d+"
_TIME_RE = re.compile(rf"\s*(?:({_INT})|\(\s*({_INT}(?:\s*,\s*{_INT})*)\s*,?\s*\))\s*")


def parse_time(text: str, d: int | None = None) -> Time:
    """Parse ``7`` or ``(1,2)``; with ``d`` given, check the dimension."""
    if not isinstance(text, str):
        raise TimeSyntaxError(f"bad time {text!r}: write an integer like 7 or a tuple like (1,2)")
    m = _TIME_RE.fullmatch(text)
    if not m:
        raise TimeSyntaxError(f"bad time {text!r}: write an integer like 7 or a tuple like (1,2)")
    if m.group(1) is not None:
        t: Time = (int(m.group(1)),)
    else:
        t = tuple(int(x) for x in m.group(2).split(","))
    for c in t:
        if not INT64_MIN <= c <= INT64_MAX:
            raise TimeSyntaxError(f"bad time {text!r}: coordinate {c} does not fit in int64")
    if d is not None and len(t) != d:
        raise TimeSyntaxError(f"bad time {text!r}: the trace's times have {d} coordinate(s), this one has {len(t)}")
    return t


def parse_frontier(text: str, d: int | None = None) -> Frontier:
    """Parse one or more times separated by spaces, e.g. ``"(0,3) (1,2) (2,0)"``.

    ``"{}"`` or ``"empty"`` is the empty frontier (nothing beyond: sealed forever). Times may
    also be separated by commas and wrapped in braces, as differential dataflow prints them:
    ``"{(0,3), (1,2)}"``.
    """
    if not isinstance(text, str):
        raise TimeSyntaxError(f"bad frontier {text!r}: expected text like \"(0,3) (1,2)\"")
    s = text.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
        if not s:
            s = "empty"
    if s == "empty":
        if d is None:
            raise TimeSyntaxError("the empty frontier needs a trace to know its dimension")
        return Frontier.empty(d)
    tokens = re.findall(rf"\([^)]*\)?|{_INT}|[^\s,()]+|[,)]", s)
    # commas may separate times, but not lead, trail or repeat
    for i, tok in enumerate(tokens):
        if tok == "," and (i == 0 or i == len(tokens) - 1 or tokens[i - 1] == ","):
            raise TimeSyntaxError(f"bad frontier {text!r}: a stray comma; separate times by spaces, e.g. \"(0,3) (1,2)\"")
    tokens = [tok for tok in tokens if tok != ","]
    if not tokens:
        raise TimeSyntaxError(f"bad frontier {text!r}: give one or more times like \"(0,3) (1,2)\"")
    try:
        times = [parse_time(tok, d) for tok in tokens]
    except TimeSyntaxError as e:
        raise TimeSyntaxError(f"bad frontier {text!r}: {e}") from None
    dims = {len(t) for t in times}
    if len(dims) != 1:
        raise TimeSyntaxError(f"bad frontier {text!r}: its times have different dimensions")
    return Frontier(times, dims.pop())


def format_time(t: Time) -> str:
    return str(t[0]) if len(t) == 1 else "(" + ",".join(str(c) for c in t) + ")"


def format_frontier(f: Frontier) -> str:
    if f.is_empty():
        return "{}"
    return " ".join(format_time(t) for t in f)
