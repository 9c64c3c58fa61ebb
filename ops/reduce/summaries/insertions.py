"""A key's old updates, summarised for a reduce whose new updates are insertions only.

An incremental run that inserts a few rows into hot keys would otherwise read every old
update of those keys and sweep them again: its cost would follow the keys' history, not
the change. With one-dimensional times every new update is later than every old one, and
when the new updates only insert, the output at every new time depends on the old input
only through a summary of it:

* ``count``: the key's total multiplicity — one row carrying it;
* integer ``sum``: the key's total — one row ``(1, total)``, or ``(0, 1)`` for a zero total
  (the key stays present);
* ``min``, ``max``, ``top_k``: the rows that hold the first ``k`` records in the reducer's
  order (``k = 1`` for min and max; top_k breaks ties by the other value columns, as the
  kernel does): a row behind them can never move ahead when nothing leaves.

The summary stands in for the old updates (at the task's first new time, so both sides of
the kernel's ``Z(old + new) - Z(old)`` see it from there on) and the kernel runs as before.
DuckDB computes it where the layers are read (row groups pruned by key), so a task receives
a few rows per key instead of the key's history.

It is taken only when it is exact: every accumulated old row of a touched key has a
positive multiplicity (a negative one could cancel an insertion and empty the key), and
the columns min, max and top_k order by hold no null (min and max skip them) and no NaN
(whose place DuckDB and the kernel might not agree on; top_k's ties are broken by the other
value columns, nulls last on both sides). Otherwise the task reads the old updates whole.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops.dataflow.reducers import Count, Max, Min, Reducer, Sum, TopK
from ops.reduce.summaries.abelian import invertible
from ops.reduce.old_updates import M
from storage.sql.duck import quote


def summarisable(reducer: Reducer, values_schema: pa.Schema, d: int, extra: bool) -> bool:
    """Whether ``reducer`` has a summary at all (one-dimensional times, outside loops): of
    insertions (:func:`old_summary`) or of an invertible reduce (``ops/reduce/summaries/abelian.py``)."""
    if d != 1 or extra:
        return False
    return of_insertions(reducer, values_schema) or invertible(reducer, values_schema)


def of_insertions(reducer: Reducer, values_schema: pa.Schema) -> bool:
    """Whether :func:`old_summary` summarises ``reducer``'s old updates."""
    if isinstance(reducer, Sum):
        t = values_schema.field(reducer.col).type
        return pa.types.is_integer(t) or pa.types.is_boolean(t)
    return isinstance(reducer, (Count, Min, Max, TopK))


def _order(reducer: Reducer) -> tuple[list[str], list[str], int]:
    """The order columns, their directions and the rank limit of an order reducer."""
    if isinstance(reducer, TopK):
        return reducer.order_by, ["DESC" if d == "descending" else "ASC" for d in reducer.directions], reducer.k
    return [reducer.col], ["DESC" if isinstance(reducer, Max) else "ASC"], 1


def accumulate_old_rows(con, old_sql: str, key: list[str], values: list[str], time_col: str) -> int | None:
    """The old updates ``old_sql`` selects, accumulated per row, as the temporary table
    ``old_rows`` of ``con`` (what :func:`old_summary` reads; the reduces of one task that
    share a shuffle, ``ops/reduce/shared_shuffle.py``, build it once for all of them).
    Returns their latest time (None: there are none): they stand for a key's input before
    the task's first new time only when they all precede it (a run may find stored updates
    at later times, e.g. an input that waited for another's upper)."""
    kv = ", ".join(quote(c) for c in key + values)
    # the stored files are read once: into memory, then looked at there
    con.execute(f"CREATE OR REPLACE TEMP TABLE old_raw AS SELECT {kv}, {quote(time_col)} AS {_T}, "
                f"diff::BIGINT AS {M} FROM ({old_sql})")
    latest = con.sql(f"SELECT max({_T}) FROM old_raw").fetchall()[0][0]
    con.execute(f"ALTER TABLE old_raw DROP COLUMN {_T}")
    con.execute("DROP TABLE IF EXISTS old_rows")
    if con.sql(f"SELECT coalesce(min({M}) > 0, true) FROM old_raw").fetchall()[0][0]:
        # every stored update inserts (an append-only table): every row's sum is positive,
        # so the updates stand for their rows as they are (a row may appear several times)
        # and the hash aggregation of the keys' whole history (most of the cost) is skipped
        con.execute("ALTER TABLE old_raw RENAME TO old_rows")
        return latest
    con.execute(f"CREATE TEMP TABLE old_rows AS SELECT {kv}, SUM({M})::BIGINT AS {M} "
                f"FROM old_raw GROUP BY ALL HAVING SUM({M}) <> 0")
    con.execute("DROP TABLE old_raw")
    return latest


_T = "_ddcli_t"  # the time of an old update, while its latest is found
ONE = "_ddcli_one_group"  # the constant key of a reduce without a key


def old_summary(con, key: list[str], values: list[str], schema: pa.Schema,
                reducer: Reducer, time_col: str, at: int) -> pa.Table | None:
    """The summary of the accumulated old rows (``old_rows``, :func:`accumulate_old_rows`),
    as updates at time ``at``; None when it would not be exact (read the updates whole)."""
    src, wanted = "old_rows", key
    if not key:  # one group (a global top-k): a constant key stands for it, dropped below
        con.execute(f"CREATE OR REPLACE TEMP VIEW old_rows_one AS SELECT 0 AS {quote(ONE)}, * FROM old_rows")
        src, key = "old_rows_one", [ONE]
    k = ", ".join(quote(c) for c in key)
    kv = ", ".join(quote(c) for c in key + values)
    bad = [f"{M} < 0"]
    if not isinstance(reducer, (Count, Sum)):
        cols, _, _ = _order(reducer)
        for c in (values if isinstance(reducer, TopK) else cols):  # a TopK orders by them all
            if c in cols:  # nulls come last on both sides, but min and max treat them apart
                bad.append(f"{quote(c)} IS NULL")
            if pa.types.is_floating(schema.field(c).type):
                bad.append(f"isnan({quote(c)})")
    if con.sql(f"SELECT count(*) FROM old_rows WHERE {' OR '.join(bad)}").fetchall()[0][0]:
        return None
    if isinstance(reducer, Count):
        firsts = "".join(f", first({quote(c)}) AS {quote(c)}" for c in values)
        sql = f"SELECT {k}{firsts}, SUM({M})::BIGINT AS diff FROM {src} GROUP BY {k}"
    elif isinstance(reducer, Sum):
        col, others = quote(reducer.col), [quote(c) for c in values if c != reducer.col]
        firsts = "".join(f", first({c}) AS {c}" for c in others)
        s = "_ddcli_s"  # (a value column may be named s)
        totals = f"SELECT {k}, SUM({M} * COALESCE({col}::BIGINT, 0))::BIGINT AS {s}{firsts} FROM {src} GROUP BY {k}"
        sql = (f"SELECT {k}, CASE WHEN {s} = 0 THEN 0 ELSE 1 END AS {col}{''.join(', ' + c for c in others)}, "
               f"CASE WHEN {s} = 0 THEN 1 ELSE {s} END AS diff FROM ({totals})")
    else:  # the rows holding the first `limit` records, in the kernel's own order
        cols, directions, limit = _order(reducer)
        order = [f"{quote(c)} {d}" for c, d in zip(cols, directions)]
        direction = directions[0]
        if isinstance(reducer, TopK):  # ties broken by the other value columns, ascending
            order += [f"{quote(c)} ASC NULLS LAST" for c in values if c not in cols]
        # every row (or update of it) counts at least once (a positive multiplicity), so the
        # first `limit` records lie among the rows whose first order column reaches the key's
        # `limit`-th value of it: the window below sorts those few candidates, not every row
        first, best = quote(cols[0]), "max" if direction == "DESC" else "min"
        reach = ">=" if direction == "DESC" else "<="
        bounds = f"SELECT {k}, list_{'min' if direction == 'DESC' else 'max'}({best}({first}, {int(limit)})) AS _ddcli_bound " \
                 f"FROM {src} GROUP BY {k}"
        same_key = " AND ".join(f"o.{quote(c)} IS NOT DISTINCT FROM b.{quote(c)}" for c in key)  # null keys too
        okv = ", ".join(f"o.{quote(c)}" for c in key + values)  # a row's updates summed (see accumulate_old_rows)
        candidates = (f"SELECT {okv}, SUM(o.{M})::BIGINT AS {M} FROM {src} o JOIN ({bounds}) b ON {same_key} "
                      f"WHERE o.{first} {reach} b._ddcli_bound GROUP BY ALL")
        before = f"SUM({M}) OVER (PARTITION BY {k} ORDER BY {', '.join(order)} ROWS UNBOUNDED PRECEDING) - {M}"
        sql = (f"SELECT {kv}, {M} AS diff FROM (SELECT *, {before} AS _ddcli_before FROM ({candidates})) "
               f"WHERE _ddcli_before < {int(limit)}")
    table = con.sql(sql).to_arrow_table()
    n = table.num_rows
    table = table.append_column(time_col, pa.array(np.full(n, at, np.int64)))
    return table.select(wanted + values + [time_col, "diff"])
