"""A key's updates, old and new, summarised for an invertible reduce whose new updates retract.

``count``, ``sum`` of an integer or decimal column, and ``agg`` of ``sum``, ``avg`` and
``count`` depend, at each time, only on a key's totals: its total multiplicity ``N`` and, per
column ``c`` they read, the sum ``S_c`` of ``c`` and the number ``n_c`` of rows whose ``c`` is
not null (sums and counts are invertible: a new total is the old one plus the change's).
The kernel deems a key present when some row has a non-zero multiplicity; when every row's
multiplicity is at least 0 at every time (a non-negative collection, as a table's rows are)
that is when ``N > 0``. Then the key's updates can be replaced by synthetic rows whose
collection at each time has the same totals and is present exactly when ``N > 0``:

* ``A``, multiplicity 1: ``c = S_c`` (a counted-only column: one of its values) where
  ``n_c > 0``, else null;
* ``R_c``, for a column with nulls (``n_c < N``), multiplicity ``n_c - 1``: ``c = 0`` (or
  that value), the other columns with nulls null, the columns without ``0``;
* ``E``, the columns with nulls null, the others ``0``, multiplicity what is left of ``N``
  (it may be negative: the sums and counts are linear in multiplicities, and ``A`` keeps
  the key present).

DuckDB computes the totals where the layers are read (sums of decimals are exact), so a
task receives a few rows per key and time instead of the key's history. The state before
the first new time is a synthetic old update (``_new`` false) at the task's first new time,
each later state retracts the one before it, so the kernel's ``Z(old + new) - Z(old)`` sees
the same outputs from there on (``ops/reduce/summary.py`` does the same for insertions).

It is taken only when it is exact; otherwise (None) the task reads the old updates whole:
an old row with a negative multiplicity, a new retraction that takes a row below 0, a total
that does not fit its column's type (``A`` carries it), a double column (its exact sum is no
double), or an aggregate that is not invertible (min, max, count_distinct).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ops.dataflow.reducers import Agg, Count, Reducer, Sum
from storage.sql.duck import quote

_SUMMED, _COUNTED = "summed", "counted"


def tracked_columns(reducer: Reducer, values_schema: pa.Schema) -> dict[str, str] | None:
    """The columns ``reducer`` reads, each ``summed`` (sum, avg) or ``counted`` (count(col)
    only); None when it is not invertible or a summed column is no integer or decimal."""
    if isinstance(reducer, Count):
        return {}
    if isinstance(reducer, Sum):
        parts = [("sum", reducer.col)]
    elif isinstance(reducer, Agg):
        parts = list(reducer.components.values())
    else:
        return None
    cols: dict[str, str] = {}
    for kind, col in parts:
        if kind not in ("count", "sum", "avg"):
            return None
        if col is None:
            continue
        if kind == "count":
            cols.setdefault(col, _COUNTED)
            continue
        t = values_schema.field(col).type
        if not (pa.types.is_integer(t) or (pa.types.is_decimal(t) and t.precision <= 38)):
            return None
        cols[col] = _SUMMED
    return cols


def invertible(reducer: Reducer, values_schema: pa.Schema) -> bool:
    """Whether ``reducer`` has this summary (for one-dimensional times, outside loops)."""
    return tracked_columns(reducer, values_schema) is not None


def abelian_rows(con, new: pa.Table, key: list[str], values: list[str], reducer: Reducer,
                 time_col: str) -> pa.Table | None:
    """The synthetic updates standing for ``new`` and the accumulated old rows of its keys
    (``old_rows`` of ``con``, ``ops/reduce/summary.py`` ``accumulate_old_rows``), in
    ``new``'s schema; None when they would not be exact."""
    cols = tracked_columns(reducer, new.select(values).schema)
    if cols is None or not key + values:
        return None
    con.register("new_rows", new)
    try:
        if not _non_negative(con, key, values, time_col):
            return None
        types = dict(con.sql("SELECT column_name, column_type FROM (DESCRIBE new_rows)").fetchall())
        _states(con, key, values, cols, types, time_col)
        fits = " OR ".join(f"(n_{i} > 0 AND try_cast(s_{i} AS {types[c]}) IS NULL)"
                           for i, c in enumerate(cols) if cols[c] == _SUMMED) or "false"
        if con.sql(f"SELECT count(*) FROM abelian_states WHERE n < 0 OR {fits}").fetchall()[0][0]:
            return None
        table = con.sql(_updates_sql(key, values, cols, types, time_col)).to_arrow_table()
    except duckdb.Error:  # a total beyond DuckDB's widest type: read the updates whole
        return None
    finally:
        con.unregister("new_rows")
    return table.select(new.column_names).cast(new.schema)


def _same(a: str, b: str, cols: list[str]) -> str:
    return " AND ".join(f"{a}.{quote(c)} IS NOT DISTINCT FROM {b}.{quote(c)}" for c in cols) or "true"


def _non_negative(con, key: list[str], values: list[str], time_col: str) -> bool:
    """Whether no accumulated old row is negative and no new retraction takes a row below
    0 at any new time (only the rows some new update lowers are looked at)."""
    if con.sql("SELECT count(*) FROM old_rows WHERE m < 0").fetchall()[0][0]:
        return False
    kv = ", ".join(quote(c) for c in key + values)
    t = quote(time_col)
    by_row = f"PARTITION BY {kv}" if kv else ""
    lowered = (f"SELECT {kv}, {t}, SUM(diff) OVER ({by_row} ORDER BY {t} ROWS UNBOUNDED PRECEDING) AS c "
               f"FROM (SELECT {kv}, {t}, SUM(diff) AS diff FROM new_rows GROUP BY ALL) "
               f"QUALIFY bool_or(diff < 0) OVER ({by_row})")
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_lowered AS {lowered}")
    olds = (f"SELECT {', '.join('o.' + quote(c) for c in key + values)}, SUM(o.m) AS m FROM old_rows o "
            f"SEMI JOIN (SELECT DISTINCT {kv} FROM abelian_lowered) l ON {_same('o', 'l', key + values)} "
            f"GROUP BY ALL")
    below = (f"SELECT count(*) FROM abelian_lowered l LEFT JOIN ({olds}) o ON {_same('o', 'l', key + values)} "
             f"WHERE l.c + coalesce(o.m, 0) < 0")
    return con.sql(below).fetchall()[0][0] == 0


def _states(con, key: list[str], values: list[str], cols: dict[str, str], types: dict[str, str],
            time_col: str) -> None:
    """``abelian_states``: per key, its totals before the first new time (``phase`` 0) and
    after each of its new times (``phase`` 1), with the time the next state begins, and one
    value of each column its rows hold (``r_j``, null when they hold none)."""
    k = "".join(f"{quote(c)}, " for c in key)
    t = quote(time_col)
    first = con.sql(f"SELECT min({t}) FROM new_rows").fetchall()[0][0]
    vs = "".join(", " + quote(c) for c in values)
    both = (f"SELECT {k}0 AS phase, {int(first)}::BIGINT AS t, m::BIGINT AS w{vs} FROM old_rows "
            f"UNION ALL SELECT {k}1, {t}, diff::BIGINT{vs} FROM new_rows")
    deltas, totals = ["SUM(w) AS dn"], ["SUM(dn) OVER run AS n"]
    for j, c in enumerate(values):
        deltas.append(f"any_value({quote(c)}) AS dr_{j}")
        totals.append(f"any_value(dr_{j}) OVER (PARTITION BY {k}NULL) AS r_{j}")
    for i, c in enumerate(cols):
        deltas.append(f"SUM(CASE WHEN {quote(c)} IS NULL THEN 0 ELSE w END) AS dn_{i}")
        totals.append(f"SUM(dn_{i}) OVER run AS n_{i}")
        if cols[c] == _SUMMED:
            wide = f"DECIMAL(38, {types[c].split(',')[1].strip(' )')})" if types[c].startswith("DECIMAL") \
                else "HUGEINT"  # exact, wide enough for a key's total
            deltas.append(f"SUM({quote(c)}::{wide} * w) AS ds_{i}")
            totals.append(f"SUM(ds_{i}) OVER run AS s_{i}")
    run = f"PARTITION BY {k}NULL ORDER BY phase, t ROWS UNBOUNDED PRECEDING"
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_states AS SELECT {k}phase, t, "
                f"lead(t) OVER (PARTITION BY {k}NULL ORDER BY phase, t) AS next_t, {', '.join(totals)} "
                f"FROM (SELECT {k}phase, t, {', '.join(deltas)} FROM ({both}) GROUP BY ALL) WINDOW run AS ({run})")


def _updates_sql(key: list[str], values: list[str], cols: dict[str, str], types: dict[str, str],
                 time_col: str) -> str:
    """SQL of the synthetic updates: each state's rows ``A``, ``R_c`` and ``E`` (see the
    module's docstring) where it begins, retracted where the next one begins. A column no
    aggregate reads holds one of the key's values, and a column not null in every row of
    the key (``n_c = N``) is not null in any synthetic row, so a column of a type that
    admits no null gets none."""
    index = {c: i for i, c in enumerate(cols)}
    rep = {c: f"r_{j}" for j, c in enumerate(values)}

    def zero(c):  # a value adding nothing to a sum
        return "0" if cols[c] == _SUMMED else rep[c]

    def row(fill) -> str:
        return ", ".join(f"({fill(c) if c in index else rep[c]})::{types[c]} AS {quote(c)}" for c in values)

    def a_value(c):
        i = index[c]
        return f"CASE WHEN n_{i} > 0 THEN {'s_' + str(i) if cols[c] == _SUMMED else rep[c]} END"

    def filler(c, own=None):  # R_own's value of c (E's without own)
        return zero(c) if c == own else f"CASE WHEN n_{index[c]} = n THEN {zero(c)} END"

    k = "".join(f"{quote(c)}, " for c in key)
    state = "phase, t, next_t FROM abelian_states WHERE n > 0"
    rows = [f"SELECT {k}{row(a_value)}, 1 AS m, {state}"]
    partial = {c: f"CASE WHEN n_{i} < n THEN greatest(n_{i} - 1, 0) ELSE 0 END" for c, i in index.items()}
    for c, i in index.items():
        rows.append(f"SELECT {k}{row(lambda v, own=c: filler(v, own))}, {partial[c]}, {state} AND n_{i} < n")
    rest = " - ".join(["n - 1"] + list(partial.values()))
    rows.append(f"SELECT {k}{row(filler)}, {rest}, {state}")
    syn = f"SELECT * FROM ({' UNION ALL '.join(rows)}) WHERE m <> 0"
    kv = "".join(f"{quote(c)}, " for c in key + values)
    t = quote(time_col)
    return (f"WITH syn AS ({syn}) SELECT {kv}t AS {t}, m::BIGINT AS diff, phase = 1 AS _new FROM syn "
            f"UNION ALL SELECT {kv}next_t AS {t}, -m::BIGINT AS diff, true AS _new FROM syn WHERE next_t IS NOT NULL")
