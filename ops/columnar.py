"""Vectorised helpers shared by the reduce kernels: dense ids of rows, ranks, segmented
prefix sums (the sort and grouped sums of integer keys are storage/row_order.py's). numpy and pyarrow.compute over whole columns, never per row."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.row_order import lex_order

GROUP = "_group"
COUNT = "_count"
#: ``ranks_within`` tells (unit, value) pairs apart by a table of those present rather than
#: by a sort while the table holds at most this many entries per row (plus the minimum).
PAIR_TABLE_PER_ROW = 4
PAIR_TABLE_MIN = 1024

def np_int(col) -> np.ndarray:
    """An int64 numpy copy of an Arrow column (nulls are an error: counts/times must be set)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        raise ValueError("unexpected null in a time/diff/count column")
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)


def matchable_rows(t: pa.Table | None, key: Sequence[str]) -> pa.Table | None:
    """The rows of ``t`` that a join on ``key`` can match: those without a null key column
    (SQL's equality; ``ops/operators/join.py``). None when none is left."""
    if t is None or not any(t.column(k).null_count for k in key):
        return t
    valid = pc.is_valid(t.column(key[0]))
    for k in key[1:]:
        valid = pc.and_(valid, pc.is_valid(t.column(k)))
    t = t.filter(valid)
    return t if t.num_rows else None


def new_flags(table: pa.Table) -> np.ndarray:
    """Which updates are this run's (``_new``); every update when the column is absent."""
    if "_new" not in table.column_names:
        return np.ones(table.num_rows, bool)
    return np.asarray(table.column("_new").to_numpy(zero_copy_only=False), dtype=bool)


def densify(x: np.ndarray, ordered: bool = True) -> tuple[np.ndarray, int]:
    """Dense ids ``0..n-1`` of the values of ``x``: in value order (a sort), or in order of
    first appearance (a hash table: pandas' factorize, several times faster). Values in
    ascending order already (rows sorted by key) take neither: their ids count the runs;
    integers of a range narrow for their number take a table of the values present (in
    value order, either way)."""
    if len(x) and x.dtype.kind in "iub" and not (x[1:] < x[:-1]).any():  # (NaN compares false)
        start = np.empty(len(x), bool)
        start[0] = True
        np.not_equal(x[1:], x[:-1], out=start[1:])
        ids = np.cumsum(start, dtype=np.int64) - 1
        return ids, int(ids[-1]) + 1
    if len(x) and x.dtype.kind in "iu":
        lo, hi = int(x.min()), int(x.max())
        if hi - lo < 4 * len(x) + 1024:  # a narrow range: a table of the values present, no sort
            # offsets in 64 bits: in a narrower type they wrap (int8 -100 .. 100) and collide
            offset = (x if x.dtype.itemsize == 8 else x.astype(np.int64)) - lo
            present = np.zeros(hi - lo + 1, np.int64)
            present[offset] = 1
            rank = np.cumsum(present) - 1
            return rank[offset], int(rank[-1]) + 1
    if not ordered:
        import pandas as pd
        ids, uniques = pd.factorize(x)
        return ids.astype(np.int64, copy=False), len(uniques)
    u, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(u)


def leaves(col):
    """The columns whose codes together identify a value: structs by their fields, floats
    with -0.0 folded into 0.0 and every NaN into one (SQL's groups: they compare equal)."""
    t = col.type
    if pa.types.is_struct(t):
        yield pc.is_valid(col)
        for child in col.flatten():
            yield from leaves(child)
    elif pa.types.is_floating(t):
        yield pc.if_else(pc.is_nan(col), pa.scalar(float("nan"), t), pc.add(col, pa.scalar(0, t)))
    elif pa.types.is_dictionary(t):
        yield col.cast(t.value_type)
    else:
        yield col


def codes(col) -> tuple[np.ndarray, int]:
    """Dense codes of a column's values (null is a value) and how many there are."""
    try:
        enc = pc.dictionary_encode(col, null_encoding="encode")
    except pa.ArrowNotImplementedError as e:
        raise TypeError(f"reduce: cannot group by values of type {col.type} (use a primitive, string or struct column)") from e
    if isinstance(enc, pa.ChunkedArray):  # one dictionary shared by all chunks
        if enc.num_chunks == 0:
            return np.zeros(0, np.int64), 0
        codes = np.concatenate([np.asarray(ch.indices.to_numpy(zero_copy_only=False), np.int64) for ch in enc.chunks])
        return codes, len(enc.chunk(0).dictionary)
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64), len(enc.dictionary)


def row_ids(table: pa.Table, cols: Sequence[str], base: np.ndarray | None = None,
            ordered: bool = True) -> tuple[np.ndarray, int]:
    """Dense ids of distinct rows over ``cols``, refining ``base`` ids if given.

    With ``ordered`` the ids are sorted like ``base`` (then the columns' codes); either
    way they are re-densified after each column so the combined code never overflows.
    """
    n = table.num_rows
    if base is None:
        ids, count = np.zeros(n, np.int64), (1 if n else 0)
    else:
        ids = base
        count = int(ids.max()) + 1 if n else 0
    packed = False  # ids combine codes not yet re-densified
    for c in cols:
        for leaf in leaves(table.column(c)):
            leaf_codes, m = _integer_codes(leaf) or codes(leaf)
            m = max(m, 1)
            if float(count) * m >= 2.0 ** 62:
                ids, count = densify(ids, ordered)
            ids, count, packed = ids * m + leaf_codes, count * m, True
    return densify(ids, ordered) if packed else (ids, count)


def _integer_codes(col) -> tuple[np.ndarray, int] | None:
    """An integer column without nulls coded by its offset from the minimum (no hash
    table): ids of several such columns pack into one int64 and are densified once."""
    if not pa.types.is_integer(col.type) or col.null_count or len(col) == 0:
        return None
    x = np_int(col)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo >= 2 ** 40:
        return None
    return x - lo, hi - lo + 1


def seg_cumsum_(x: np.ndarray, idx: np.ndarray, lens: np.ndarray) -> None:
    """In place: cumulative sums restarting at positions ``idx`` (segment lengths ``lens``).

    ``idx[0]`` must be 0. int64 wrap-around in the running sum cancels out.
    """
    head = x[idx]
    np.cumsum(x, out=x)
    x -= np.repeat(x[idx] - head, lens)


def seg_cumsum_float(x: np.ndarray, idx: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Segmented running sums of floats, in extended precision so that restarting each
    segment by subtraction does not carry another segment's rounding into it."""
    cs = np.cumsum(x.astype(np.longdouble))
    base = np.repeat(cs[idx] - x[idx], lens)
    return (cs - base).astype(np.float64)


def seg_cumsum_any_(x: np.ndarray, idx: np.ndarray, lens: np.ndarray) -> None:
    """:func:`seg_cumsum_` for int64, exact (Python int) or float64 arrays, in place."""
    if x.dtype == np.float64:
        x[:] = seg_cumsum_float(x, idx, lens)
    else:
        seg_cumsum_(x, idx, lens)


def exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def groups_of(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(distinct group ids, index of each row's group) for a reducer input."""
    g = np_int(rows.column(GROUP))
    ug, inv = np.unique(g, return_inverse=True)
    return ug, inv.reshape(-1)


def empty_table(schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: pa.array([], f.type) for f in schema}, schema=schema)


def ranks_within(uid: np.ndarray, U: int, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each row's rank among the distinct values of ``t`` of its unit (``uid``, ids
    ``0 .. U - 1``); per unit how many there are and where its values start in the last
    array, those values (by unit, ascending). (unit, value) pairs of a narrow range (a
    loop's iterations) are told apart by a table of the pairs present, others by a sort."""
    n = len(t)
    lo = int(t.min())
    span = int(t.max()) - lo + 1
    if float(U) * span <= PAIR_TABLE_PER_ROW * n + PAIR_TABLE_MIN:
        packed = uid * span + (t - lo)
        present = np.zeros(U * span, bool)
        present[packed] = True
        pairs = np.flatnonzero(present)  # ascending: by unit, then value
        count = np.bincount(pairs // span, minlength=U).astype(np.int64)
        begin = exclusive_cumsum(count)
        pair_id = np.cumsum(present) - 1
        return pair_id[packed] - begin[uid], count, begin, pairs % span + lo
    order = lex_order([uid, t])
    us, ts = uid[order], t[order]
    first = np.ones(n, bool)
    first[1:] = (us[1:] != us[:-1]) | (ts[1:] != ts[:-1])
    count = np.bincount(us[first], minlength=U).astype(np.int64)
    begin = exclusive_cumsum(count)
    r = np.empty(n, np.int64)
    r[order] = np.cumsum(first) - 1 - begin[us]
    return r, count, begin, ts[first]


def sql_order(table: pa.Table, sort_keys: list[tuple[str, str]]) -> np.ndarray:
    """Sort indices of ``table`` by ``sort_keys`` ((column, "ascending"/"descending"), ...)
    as SQL orders them: nulls last in either direction and NaN the greatest number (DuckDB's
    order; Arrow puts NaN last in both directions, so ``max`` would miss it). Stable."""
    cols, keys = {}, []
    for i, (name, direction) in enumerate(sort_keys):
        col = table.column(name)
        if pa.types.is_floating(col.type):
            nan = pc.fill_null(pc.is_nan(col), False)
            first, later = (0, 1) if direction == "ascending" else (1, 0)  # numbers, NaN
            cols[f"_p{i}"] = pc.if_else(pc.is_null(col), 2, pc.if_else(nan, later, first))
            keys.append((f"_p{i}", "ascending"))
        cols[f"_c{i}"] = col
        keys.append((f"_c{i}", direction))
    return np.asarray(pc.sort_indices(pa.table(cols), sort_keys=keys))

