"""A loop task's arrangements: updates in a few batches (a spine), found by key in log time.

A round of a loop meets its changes with what earlier rounds processed, but only for the
keys the changes touch. Scanning the whole arrangement for them (a join or semi-join
over all its rows) makes a round cost the state, however few rows it moves: the tail
rounds of a batch move a handful. Here each batch keeps, per key it is read by, its rows'
key hashes sorted, so the rows of the touched keys are found by binary search
(``numpy.searchsorted``): a round costs O(its changes x log state) plus the rows found.

Batches merge as in differential dataflow's spine (``src/trace/implementations/spine``):
the newest merges with the one before it while it holds at least ``MERGE_SHARE`` of that
one's rows, so batches shrink geometrically from the oldest, there are O(log state) of
them, and a row is merged O(log state) times. A merge is the caller's (for the loop's
arrangements: advance to the current iteration and consolidate, so rounds' rows cancel).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

MERGE_SHARE = 0.25  # the newest batch merges with the one before once it holds this share of its rows
INDEX_ROWS = 1024  # a batch under this many rows is read whole: sorting it saves nothing
#: a probe of at least this share of a batch's rows reads the batch whole: it touches much
#: of it anyway, and the caller's hash join over it does without hashing and sorting it
WHOLE_SHARE = 0.125
_NULL_KEY = 0x9E3779B97F4A7C15  # a null integer key's lookup value (lookup_hashes)


def key_hashes(con, t: pa.Table, key: list[str]) -> np.ndarray:
    """DuckDB's hash of each row's ``key`` columns, integers widened to BIGINT first: DuckDB
    hashes a negative INTEGER and the same BIGINT differently, and the two sides of a join
    may hold a key in different integer widths. (A UBIGINT hashes as the BIGINT of the same
    bits; HUGEINT would do for every width, but hashes -1 like 0.)"""
    items = []
    for c in key:
        q = '"' + c.replace('"', '""') + '"'
        typ = t.schema.field(c).type
        items.append(f"CAST({q} AS BIGINT)" if pa.types.is_integer(typ) and typ != pa.uint64() else q)
    con.register("_dd_hashed", t.select(key))
    try:
        got = con.sql(f"SELECT hash({', '.join(items)}) AS h FROM _dd_hashed").fetchnumpy()["h"]
    finally:
        con.unregister("_dd_hashed")
    return np.asarray(got, np.uint64)


def lookup_hashes(con, t: pa.Table, key: list[str]) -> np.ndarray:
    """What the spine sorts and searches rows by: equal keys of ``comparable`` types give
    equal values. One integer column is its own value (any width, as the 64 bits of its
    two's complement; null as an arbitrary constant): exact, and without a DuckDB query
    (some 5 ms each, many a round); else ``key_hashes``. Not for dealing rows to tasks:
    values cluster."""
    if len(key) == 1 and pa.types.is_integer(t.schema.field(key[0]).type):
        col = t.column(key[0]).cast(pa.uint64(), safe=False).fill_null(_NULL_KEY)
        return col.to_numpy() if col.num_chunks != 1 else col.chunk(0).to_numpy(zero_copy_only=False)
    return key_hashes(con, t, key)


def comparable(a: pa.DataType, b: pa.DataType) -> bool:
    """Keys of these types hash alike when equal (``key_hashes``: DuckDB reads every Arrow
    string type as VARCHAR)."""
    strings = (pa.types.is_string, pa.types.is_large_string)
    return (a == b or (pa.types.is_integer(a) and pa.types.is_integer(b))
            or (any(f(a) for f in strings) and any(f(b) for f in strings)))


class _Batch:
    def __init__(self, table: pa.Table):
        self.table = table
        self.index: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}  # key -> (sorted hashes, rows)

    def sorted_by(self, con, key: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        if key not in self.index:
            h = lookup_hashes(con, self.table, list(key))
            order = np.argsort(h, kind="stable")
            self.index[key] = (h[order], order)
        return self.index[key]


class Spine:
    """Batches of one node's updates, oldest and largest first; ``merge`` makes one batch
    of several (concatenated) when the spine says so."""

    def __init__(self, merge: Callable[[pa.Table], pa.Table]):
        self.merge = merge
        self.batches: list[_Batch] = []
        self.version = 0  # how many batches were added: a reader's cache of the spine is kept while it stays

    def add(self, t: pa.Table | None) -> None:
        if t is None or t.num_rows == 0:
            return
        self.version += 1
        self.batches.append(_Batch(t))
        while len(self.batches) > 1 and self.batches[-1].table.num_rows >= MERGE_SHARE * self.batches[-2].table.num_rows:
            newer = self.batches.pop()
            merged = self.merge(pa.concat_tables([self.batches[-1].table, newer.table]))
            self.batches.pop()
            if merged.num_rows:
                self.batches.append(_Batch(merged))

    def tables(self) -> list[pa.Table]:
        return [b.table for b in self.batches]

    def whole(self) -> pa.Table | None:
        return pa.concat_tables(self.tables()) if self.batches else None

    def matching(self, con, key: list[str], probe: pa.Table) -> pa.Table | None:
        """The rows whose ``key`` hashes like one of ``probe``'s rows: every row of a key
        ``probe`` holds, and perhaps rows of others (a shared hash), which the caller's
        exact join drops. Keys of types that may hash differently: every row."""
        if not self.batches:
            return None
        schema = self.batches[0].table.schema
        if not key or not all(comparable(probe.schema.field(c).type, schema.field(c).type) for c in key):
            return self.whole()
        wanted, found = None, []
        for b in self.batches:
            if b.table.num_rows < INDEX_ROWS or probe.num_rows >= WHOLE_SHARE * b.table.num_rows:
                found.append(b.table)
                continue
            if wanted is None:
                wanted = np.unique(lookup_hashes(con, probe, key))
            hashes, rows = b.sorted_by(con, tuple(key))
            lo = np.searchsorted(hashes, wanted, "left")
            hi = np.searchsorted(hashes, wanted, "right")
            counts = hi - lo
            total = int(counts.sum())
            if total == 0:
                continue
            # the positions lo[i] .. hi[i] - 1 of every wanted hash, in one vector
            starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
            found.append(b.table.take(pa.array(rows[starts + np.arange(total)])))
        return pa.concat_tables(found) if found else None
