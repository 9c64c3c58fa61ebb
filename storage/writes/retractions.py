"""Retractions that match no live row: a row whose count an ingest drives negative.

A negative multiplicity is legal in the model, but in a table it almost always means a
retraction that did not restate the row exactly (a null read as ``""``, a rounded
number), leaving a +1 and a -1 that never cancel. ``ingest`` looks, after every ingest
that retracts something, at the rows it retracts: summed over the whole trace (every time
up to the upper) plus the new updates, is any count below zero? It reports how many and
the first, or refuses the ingest with ``--strict``. DuckDB reads only the layers' row
groups that can hold the retracted rows (layers are sorted by key).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import StoreError
from storage.sql.duck import file_list, quote, string_literal
from storage.state.trace import Trace

_NOT_DATA = re.compile(r"(time|time_\d+|diff)\Z")


@dataclass
class Negative:
    """Rows whose count would be negative after an ingest: how many, and the first."""

    rows: int = 0
    first: dict | None = None
    first_count: int = 0

    def describe(self) -> str:
        shown = ", ".join(f"{k}={'NULL' if v is None else repr(v)}" for k, v in (self.first or {}).items())
        noun = "retraction matches" if self.rows == 1 else "retractions match"
        return (f"{self.rows:,} {noun} no live row (the row's count would be below zero); "
                f"first: {shown} (count {self.first_count})")


def with_stored_updates(store, existing: Trace | None, updates: pa.Table, data_columns: list[str],
                        touched_where: str, select: str) -> pa.Table:
    """The result of ``select`` over ``every``: the rows of ``updates`` and the trace's stored
    updates of the rows they touch (the rows of ``updates`` ``touched_where`` keeps), in one
    DuckDB query that reads only the stored row groups that can hold them."""
    from storage.sql.duck import connect
    cols = ", ".join(quote(c) for c in data_columns)
    paths = store.read_paths(existing, local=True) if existing is not None else []
    old = ""
    if paths:
        match = " AND ".join(f"o.{quote(c)} IS NOT DISTINCT FROM t.{quote(c)}" for c in data_columns)
        old = (f" UNION ALL SELECT {', '.join('o.' + quote(c) for c in data_columns)}, o.diff "
               f"FROM read_parquet({file_list(paths)}) o SEMI JOIN touched t ON {match}")
    query = (f"WITH touched AS (SELECT DISTINCT {cols} FROM __ddcli_new {touched_where}), "
             f"every AS (SELECT {cols}, diff FROM __ddcli_new{old}) {select}")
    with connect(store) as con:
        con.register("__ddcli_new", updates)
        try:
            return con.sql(query).to_arrow_table()
        finally:
            con.unregister("__ddcli_new")


def negative_rows(store, existing: Trace | None, updates: pa.Table, data_columns: list[str]) -> Negative:
    """The rows of ``updates`` (a table, or a ``pyarrow.dataset`` of files) with a negative
    diff whose total count, over the trace's updates and ``updates``, is negative."""
    if isinstance(updates, pa.Table) and (not updates.num_rows or not pc.any(pc.less(updates.column("diff"), 0)).as_py()):
        return Negative()
    if isinstance(updates, pa.Table) and _every_retraction_matches(store, existing, updates, data_columns):
        return Negative()
    cols = ", ".join(quote(c) for c in data_columns)
    found = with_stored_updates(store, existing, updates, data_columns, "WHERE diff < 0",
                                f"SELECT {cols}, CAST(SUM(diff) AS VARCHAR) AS __count FROM every GROUP BY ALL "
                                f"HAVING SUM(diff) < 0 ORDER BY ALL")
    if not found.num_rows:
        return Negative()
    first = found.slice(0, 1).to_pylist()[0]
    count = int(first.pop("__count"))  # exact: a sum may pass int64 (refused by the ingest after this)
    return Negative(found.num_rows, first, count)


def _every_retraction_matches(store, existing: Trace | None, updates: pa.Table, data_columns: list[str]) -> bool:
    """Whether, by the hashes of whole rows, no retracted row's count falls below zero.

    Reading a large layer's stored rows of the touched keys decodes every column of most of
    its row groups (a refresh's deleted orders lie all over the layer). A large layer keeps
    instead, beside it, each row's first column, hash and count, sorted by the first column
    (``LAYER.parquet.totals-rows…``, storage/layer.py): three small columns to read. True is
    the answer (up to a collision of 64-bit hashes hiding a retraction that matches nothing);
    False, a hash that does not add up, sends the check to the rows themselves, which name
    the row and count exactly (a float's -0.0 and 0.0 hash apart but are one value), as
    does a summary that cannot be written (a full disk)."""
    from storage.blobs.resolve import is_object_store
    from storage.layer import SUMMARISED_ROWS, SUMMARY_SUFFIX, kept_summary
    from storage.sql.duck import connect
    if existing is None or is_object_store(store.path):
        return False
    paths = store.read_paths(existing, local=True)
    rows = [f.rows for l in existing.all_layers() for f in l.files]
    if not paths:
        return False
    first = quote(data_columns[0])
    row_hash = f"hash({', '.join(quote(c) for c in data_columns)})"
    K, H, N = "_ddcli_k", "_ddcli_h", "_ddcli_n"
    within = f"IN (SELECT {K} FROM touched) OR {{}} IS NULL"
    with connect(store) as con:
        con.register("__ddcli_new", updates)
        try:
            types = con.sql("SELECT column_name, column_type FROM (DESCRIBE __ddcli_new)").fetchall()
            tag = hashlib.sha1(json.dumps([data_columns, types, duckdb.__version__]).encode()).hexdigest()[:12]
            parts = [f"SELECT {first} AS {K}, {row_hash} AS {H}, diff AS {N} FROM __ddcli_new"]
            small = [p for p, n in zip(paths, rows) if n < SUMMARISED_ROWS]
            kept = [kept_summary(f"{p}{SUMMARY_SUFFIX}rows{tag}", lambda p=p: con.sql(
                        f"SELECT {first} AS {K}, {row_hash} AS {H}, SUM(diff)::BIGINT AS {N} FROM read_parquet({string_literal(p)}) "
                        f"GROUP BY ALL ORDER BY {K}").to_arrow_table())
                    for p, n in zip(paths, rows) if n >= SUMMARISED_ROWS]
            if small:
                parts.append(f"SELECT {first}, {row_hash}, diff FROM read_parquet({file_list(small)}) "
                             f"WHERE {first} {within.format(first)}")
            if kept:
                parts.append(f"SELECT {K}, {H}, {N} FROM read_parquet({file_list(kept)}) "
                             f"WHERE {K} {within.format(K)}")
            below = con.sql(
                f"WITH touched AS (SELECT DISTINCT {first} AS {K}, {row_hash} AS {H} FROM __ddcli_new WHERE diff < 0), "
                f"every AS ({' UNION ALL '.join(parts)}) "
                f"SELECT count(*) FROM (SELECT e.{K}, e.{H} FROM every e SEMI JOIN touched t "
                f"ON e.{H} = t.{H} AND e.{K} IS NOT DISTINCT FROM t.{K} GROUP BY ALL HAVING SUM(e.{N}) < 0)").fetchall()
            return below[0][0] == 0
        except (OSError, duckdb.IOException):
            return False
        finally:
            con.unregister("__ddcli_new")


def checker(store, *, strict: bool, found: list[Negative]):
    """A ``prepare`` step for :meth:`Store.ingest`: finds negative rows; with ``strict``
    refuses the ingest (nothing written), otherwise appends what it found to ``found``."""
    def report(neg: Negative) -> None:
        if neg.rows and strict:
            raise StoreError(f"{neg.describe()}; nothing was ingested (--strict)")
        found.append(neg)

    def check(existing: Trace | None, updates: pa.Table) -> pa.Table:
        report(negative_rows(store, existing, updates, [c for c in updates.column_names if not _NOT_DATA.match(c)]))
        return updates

    def check_on_disk(existing: Trace | None, updates, retracts: bool) -> None:
        """The same for updates too big for memory: a ``pyarrow.dataset`` of the files
        that hold them (storage/writes/spill.py); ``retracts``: whether a diff is negative."""
        data = [c for c in updates.schema.names if not _NOT_DATA.match(c)]
        report(negative_rows(store, existing, updates, data) if retracts else Negative())

    check.on_disk = check_on_disk  # an ingest out of core checks with it (it changes nothing)
    return check
