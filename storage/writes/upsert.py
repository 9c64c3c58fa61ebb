"""Upserts and deletes by key: ddcli computes the retractions from the trace.

A trace only takes updates, so a correction has to restate the old row exactly. With
``ingest --upsert KEYCOLS`` each row of the file *replaces* the live rows with the same
key at the row's time (like Delta's MERGE, or Materialize's UPSERT envelope); with
``--delete KEYCOLS`` each row (key columns and a time) removes them. "Live" means present
at the trace's upper: the sum of every update of the trace, per row.

Both are one DuckDB query over the new rows and the layers' row groups that can hold
their keys (layers are sorted by key, so a look-up reads few row groups): the new rows
with diff +1, the live rows retracted at the first time the file gives their key, and,
when the file gives a key at several times, each row retracted again at the next of them.
With tuple times those times must form a chain (each ``<=`` the next, coordinate by
coordinate): "the next row" is only defined for ordered times, so a key given at
incomparable times, such as ``(0,1)`` and ``(1,0)``, is refused in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import StoreError
from storage.lattice import time_columns
from storage.sql.duck import file_list, quote
from storage.state.trace import Trace

_TIME = re.compile(r"time(_\d+)?\Z")


@dataclass
class UpsertStats:
    rows: int = 0  # rows of the files (upserted or deleted keys)
    retracted: int = 0  # live rows retracted (with their multiplicity)


def _check_key(key: list[str], columns: list[str], option: str) -> None:
    for k in key:
        if k not in columns:
            raise StoreError(f"{option}: {k!r} is not a column of the trace (columns: {', '.join(columns)})")


def _live_sql(store, trace: Trace | None, key: list[str], data: list[str]) -> str:
    """The live rows (data, __count) whose key is among ``__keys``."""
    cols = ", ".join(quote(c) for c in data)
    paths = store.read_paths(trace, local=True) if trace is not None else []
    if not paths:
        return f"SELECT {cols}, CAST(0 AS BIGINT) AS __count FROM __ddcli_new WHERE false"
    match = " AND ".join(f"o.{quote(k)} IS NOT DISTINCT FROM k.{quote(k)}" for k in key)
    return (f"SELECT {', '.join('o.' + quote(c) for c in data)}, CAST(SUM(o.diff) AS BIGINT) AS __count "
            f"FROM read_parquet({file_list(paths)}) o SEMI JOIN __keys k ON {match} "
            f"GROUP BY ALL HAVING SUM(o.diff) <> 0")


def _shown_key(row: dict, key: list[str]) -> str:
    return ", ".join(f"{k}={'NULL' if row[k] is None else repr(row[k])}" for k in key)


def _shown_time(row: dict, tcols: list[str]) -> str:
    ts = [str(row[t]) for t in tcols]
    return ts[0] if len(ts) == 1 else f"({','.join(ts)})"


def _duplicate_keys(con, key: list[str], tcols: list[str]) -> None:
    """Two rows of one key at one time contradict each other."""
    cols = ", ".join(quote(c) for c in key + tcols)
    dup = con.sql(f"SELECT {cols}, COUNT(*) AS n FROM __ddcli_new GROUP BY ALL HAVING COUNT(*) > 1 "
                  f"ORDER BY ALL LIMIT 1").to_arrow_table()
    if dup.num_rows:
        row = dup.to_pylist()[0]
        raise StoreError(f"{row['n']} rows of the file give key {_shown_key(row, key)} at time "
                         f"{_shown_time(row, tcols)}; an upsert or delete gives each key one row per time")


def _next_times(key: list[str], tcols: list[str]) -> str:
    """Each row of ``__ddcli_new`` with the next time its key is given (``__next_*``, null
    for the last): in lexicographic order, which is the order of a chain."""
    window = f"PARTITION BY {', '.join(quote(k) for k in key)} ORDER BY {', '.join(quote(t) for t in tcols)}"
    nexts = ", ".join(f"LEAD({quote(t)}) OVER w AS {quote('__next_' + t)}" for t in tcols)
    return f"SELECT *, {nexts} FROM __ddcli_new WINDOW w AS ({window})"


def _check_chains(con, key: list[str], tcols: list[str]) -> None:
    """Tuple times: a key's times must be ordered, each ``<=`` the next in every coordinate."""
    if len(tcols) == 1:
        return
    worse = " OR ".join(f"{quote('__next_' + t)} < {quote(t)}" for t in tcols)
    bad = con.sql(f"SELECT * FROM ({_next_times(key, tcols)}) WHERE {worse} "
                  f"ORDER BY ALL LIMIT 1").to_arrow_table()
    if bad.num_rows:
        row = bad.to_pylist()[0]
        nxt = {t: row["__next_" + t] for t in tcols}
        raise StoreError(f"rows of the file give key {_shown_key(row, key)} at incomparable times "
                         f"{_shown_time(row, tcols)} and {_shown_time(nxt, tcols)}; a key's rows replace each "
                         f"other in time order, so its times must be ordered (each <= the next in every "
                         f"coordinate): ingest them in separate files")


def upsert_step(store, key: list[str], *, delete: bool, stats: UpsertStats):
    """A ``prepare`` step for :meth:`Store.ingest` turning upsert (or delete) rows into updates."""
    option = "--delete" if delete else "--upsert"

    def prepare(existing: Trace | None, updates: pa.Table) -> pa.Table:
        from storage.sql.duck import connect
        if existing is None and delete:
            raise StoreError(f"{option}: the trace does not exist yet; there is nothing to delete")
        d = existing.d if existing is not None else sum(1 for c in updates.column_names if _TIME.match(c))
        tcols = time_columns(d)
        file_cols = [c for c in updates.column_names if c not in tcols and c != "diff"]
        data = existing.data_columns if existing is not None else file_cols
        _check_key(key, data, option)
        if not pc.all(pc.equal(updates.column("diff"), 1)).as_py():
            raise StoreError(f"{option}: rows are whole rows, not changes: leave out the diff column "
                             f"(or write 1)")
        stats.rows = updates.num_rows
        kcols = ", ".join(quote(k) for k in key)
        cols = ", ".join(quote(c) for c in data)
        times = ", ".join(quote(t) for t in tcols)
        with connect(store) as con:
            con.register("__ddcli_new", updates)
            try:
                _duplicate_keys(con, key, tcols)
                _check_chains(con, key, tcols)
                con.execute(f"CREATE TEMP TABLE __keys AS SELECT DISTINCT {kcols} FROM __ddcli_new")
                # the first time the file gives each key (its chain's least): where the live rows are retracted
                first = ", ".join(f"MIN({quote(t)}) AS {quote(t)}" for t in tcols)
                con.execute(f"CREATE TEMP TABLE __first AS SELECT {kcols}, {first} FROM __ddcli_new GROUP BY ALL")
                match = " AND ".join(f"l.{quote(k)} IS NOT DISTINCT FROM f.{quote(k)}" for k in key)
                retract = (f"SELECT {', '.join('l.' + quote(c) for c in data)}, "
                           f"{', '.join('f.' + quote(t) for t in tcols)}, -l.__count AS diff "
                           f"FROM ({_live_sql(store, existing, key, data)}) l JOIN __first f ON {match}")
                retracted = con.sql(retract).to_arrow_table()
                stats.retracted = -int(pc.sum(retracted.column("diff")).as_py() or 0)
                parts = []
                if not delete:
                    parts.append(f"SELECT {cols}, {times}, diff FROM __ddcli_new")
                    # a key given at several times: each row replaced by the next
                    nexts = ", ".join(f"{quote('__next_' + t)} AS {quote(t)}" for t in tcols)
                    parts.append(f"SELECT {cols}, {nexts}, -1 AS diff FROM ({_next_times(key, tcols)}) "
                                 f"WHERE {quote('__next_' + tcols[0])} IS NOT NULL")
                added = [con.sql(p).to_arrow_table() for p in parts]
            finally:
                for t in ("__keys", "__first"):
                    con.execute(f"DROP TABLE IF EXISTS {t}")
                con.unregister("__ddcli_new")
        schema = pa.schema(list(existing.schema if existing is not None else updates.select(data).schema)
                           + [pa.field(t, pa.int64()) for t in tcols] + [pa.field("diff", pa.int64())])
        return pa.concat_tables([t.select(schema.names).cast(schema) for t in [retracted] + added])

    return prepare
