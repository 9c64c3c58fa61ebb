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
from ops.reduce.old_updates import M
from storage.sql.duck import quote

_SUMMED, _COUNTED = "summed", "counted"
#: the names of the columns the SQL below makes: prefixed, so that no user column (a key or
#: value column may be named ``w``, ``t``, ``n`` or ``phase``) is taken for one of them
_I = "_ddcli_"
_PHASE, _T, _NEXT, _W, _N, _C = (_I + n for n in ("phase", "t", "next_t", "w", "n", "c"))


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
        fits = " OR ".join(f"({_I}n_{i} > 0 AND try_cast({_I}s_{i} AS {types[c]}) IS NULL)"
                           for i, c in enumerate(cols) if cols[c] == _SUMMED) or "false"
        if con.sql(f"SELECT count(*) FROM abelian_states WHERE {_N} < 0 OR {fits}").fetchall()[0][0]:
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
    if con.sql(f"SELECT count(*) FROM old_rows WHERE {M} < 0").fetchall()[0][0]:
        return False
    kv = ", ".join(quote(c) for c in key + values)
    t = quote(time_col)
    by_row = f"PARTITION BY {kv}" if kv else ""
    lowered = (f"SELECT {kv}, {t}, SUM(diff) OVER ({by_row} ORDER BY {t} ROWS UNBOUNDED PRECEDING) AS {_C} "
               f"FROM (SELECT {kv}, {t}, SUM(diff) AS diff FROM new_rows GROUP BY ALL) "
               f"QUALIFY bool_or(diff < 0) OVER ({by_row})")
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_lowered AS {lowered}")
    olds = (f"SELECT {', '.join('o.' + quote(c) for c in key + values)}, SUM(o.{M}) AS {M} FROM old_rows o "
            f"SEMI JOIN (SELECT DISTINCT {kv} FROM abelian_lowered) l ON {_same('o', 'l', key + values)} "
            f"GROUP BY ALL")
    below = (f"SELECT count(*) FROM abelian_lowered l LEFT JOIN ({olds}) o ON {_same('o', 'l', key + values)} "
             f"WHERE l.{_C} + coalesce(o.{M}, 0) < 0")
    return con.sql(below).fetchall()[0][0] == 0


def _states(con, key: list[str], values: list[str], cols: dict[str, str], types: dict[str, str],
            time_col: str) -> None:
    """``abelian_states``: per key, its totals before the first new time (phase 0) and
    after each of its new times (phase 1), with the time the next state begins, and one
    value of each column its rows hold (``r_j``, null when they hold none)."""
    k = "".join(f"{quote(c)}, " for c in key)
    t = quote(time_col)
    first = con.sql(f"SELECT min({t}) FROM new_rows").fetchall()[0][0]
    vs = "".join(", " + quote(c) for c in values)
    both = (f"SELECT {k}0 AS {_PHASE}, {int(first)}::BIGINT AS {_T}, {M}::BIGINT AS {_W}{vs} FROM old_rows "
            f"UNION ALL SELECT {k}1, {t}, diff::BIGINT{vs} FROM new_rows")
    deltas, totals = [f"SUM({_W}) AS {_I}dn"], [f"SUM({_I}dn) OVER run AS {_N}"]
    for j, c in enumerate(values):
        deltas.append(f"any_value({quote(c)}) AS {_I}dr_{j}")
        totals.append(f"any_value({_I}dr_{j}) OVER (PARTITION BY {k}NULL) AS {_I}r_{j}")
    for i, c in enumerate(cols):
        deltas.append(f"SUM(CASE WHEN {quote(c)} IS NULL THEN 0 ELSE {_W} END) AS {_I}dn_{i}")
        totals.append(f"SUM({_I}dn_{i}) OVER run AS {_I}n_{i}")
        if cols[c] == _SUMMED:
            wide = f"DECIMAL(38, {types[c].split(',')[1].strip(' )')})" if types[c].startswith("DECIMAL") \
                else "HUGEINT"  # exact, wide enough for a key's total
            deltas.append(f"SUM({quote(c)}::{wide} * {_W}) AS {_I}ds_{i}")
            totals.append(f"SUM({_I}ds_{i}) OVER run AS {_I}s_{i}")
    order = f"PARTITION BY {k}NULL ORDER BY {_PHASE}, {_T}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_states AS SELECT {k}{_PHASE}, {_T}, "
                f"lead({_T}) OVER ({order}) AS {_NEXT}, {', '.join(totals)} "
                f"FROM (SELECT {k}{_PHASE}, {_T}, {', '.join(deltas)} FROM ({both}) GROUP BY ALL) "
                f"WINDOW run AS ({order} ROWS UNBOUNDED PRECEDING)")


def _updates_sql(key: list[str], values: list[str], cols: dict[str, str], types: dict[str, str],
                 time_col: str) -> str:
    """SQL of the synthetic updates: each state's rows ``A``, ``R_c`` and ``E`` (see the
    module's docstring) where it begins, retracted where the next one begins. A column no
    aggregate reads holds one of the key's values, and a column not null in every row of
    the key (``n_c = N``) is not null in any synthetic row, so a column of a type that
    admits no null gets none."""
    index = {c: i for i, c in enumerate(cols)}
    rep = {c: f"{_I}r_{j}" for j, c in enumerate(values)}

    def n_(c):  # the state's count of rows whose c is not null
        return f"{_I}n_{index[c]}"

    def zero(c):  # a value adding nothing to a sum
        return "0" if cols[c] == _SUMMED else rep[c]

    def row(fill) -> str:
        return ", ".join(f"({fill(c) if c in index else rep[c]})::{types[c]} AS {quote(c)}" for c in values)

    def a_value(c):
        return f"CASE WHEN {n_(c)} > 0 THEN {_I + 's_' + str(index[c]) if cols[c] == _SUMMED else rep[c]} END"

    def filler(c, own=None):  # R_own's value of c (E's without own)
        return zero(c) if c == own else f"CASE WHEN {n_(c)} = {_N} THEN {zero(c)} END"

    k = "".join(f"{quote(c)}, " for c in key)
    state = f"{_PHASE}, {_T}, {_NEXT} FROM abelian_states WHERE {_N} > 0"
    rows = [f"SELECT {k}{row(a_value)}, 1 AS {M}, {state}"]
    partial = {c: f"CASE WHEN {n_(c)} < {_N} THEN greatest({n_(c)} - 1, 0) ELSE 0 END" for c in index}
    for c in index:
        rows.append(f"SELECT {k}{row(lambda v, own=c: filler(v, own))}, {partial[c]}, {state} AND {n_(c)} < {_N}")
    rest = " - ".join([f"{_N} - 1"] + list(partial.values()))
    rows.append(f"SELECT {k}{row(filler)}, {rest}, {state}")
    syn = f"SELECT * FROM ({' UNION ALL '.join(rows)}) WHERE {M} <> 0"
    kv = "".join(f"{quote(c)}, " for c in key + values)
    t = quote(time_col)
    return (f"WITH syn AS ({syn}) SELECT {kv}{_T} AS {t}, {M}::BIGINT AS diff, {_PHASE} = 1 AS _new FROM syn "
            f"UNION ALL SELECT {kv}{_NEXT} AS {t}, -{M}::BIGINT AS diff, true AS _new FROM syn "
            f"WHERE {_NEXT} IS NOT NULL")
