"""A key's updates, old and new, summarised for an invertible reduce whose new updates retract.

``count``, ``sum`` of an integer or decimal column, and ``agg`` of ``sum``, ``avg`` and
``count`` depend, at each time, only on a key's totals: its total multiplicity ``N`` and, per
column ``c`` they read, the sum ``S_c`` of ``c`` and the number ``n_c`` of rows whose ``c`` is
not null (sums and counts are invertible: a new total is the old one plus the change's).
The kernel deems a key present when some row has a non-zero multiplicity: when ``N > 0``
it is, and the outputs are the totals' whatever the rows' signs; a state where ``N`` (or
a summed column's ``n_c``) is 0 or less says "absent" (or "null") only when every row is
then 0, as it is in a non-negative collection (a table's rows). So a key's updates can be
replaced by synthetic rows whose collection at each time has the same totals and is
present exactly when ``N > 0``:

* ``A``, multiplicity 1: ``c = S_c`` (a counted-only column: one of its values) where
  ``n_c > 0``, else null;
* ``R_c``, for a column with nulls (``n_c < N``), multiplicity ``n_c - 1``: ``c = 0`` (or
  that value), the other columns with nulls null, the columns without ``0``;
* ``E``, the columns with nulls null, the others ``0``, multiplicity what is left of ``N``
  (it may be negative: the sums and counts are linear in multiplicities, and ``A`` keeps
  the key present).

DuckDB sums the old updates per key as it reads the layers (sums of decimals are exact;
no row is held, so a group of millions costs one scan of it), and a task receives a few
rows per key and time instead of the key's history. The state before the first new time
is a synthetic old update (``_new`` false) at the task's first new time, each later state
retracts the one before it, so the kernel's ``Z(old + new) - Z(old)`` sees the same
outputs from there on (``ops/reduce/summaries/insertions.py`` does the same for insertions).

It is taken only when it is exact; otherwise (None) the task reads the old updates whole:
a key whose totals vanish at some state while one of its rows is below 0 (an old row
with a negative multiplicity, or a new retraction taking a row below 0: only such keys'
rows are read to find out), an old update later than a new one, a total that does not
fit its column's type (``A`` carries it), a double column (its exact sum is no double),
or an aggregate that is not invertible (min, max, count_distinct).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ops.dataflow.reducers import Agg, Count, Reducer, Sum
from ops.reduce.summaries import layer_totals
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


def abelian_rows(con, files: list[str], keys: pa.Table, old_sql: str, new: pa.Table, key: list[str],
                 values: list[str], reducer: Reducer, time_col: str) -> pa.Table | None:
    """The synthetic updates standing for ``new`` and the old updates in ``files`` of its
    keys (``keys``, registered in ``con`` as ``touched_keys``; ``old_sql`` selects their
    rows, read only where totals vanish), in ``new``'s schema; None when they would not be
    exact."""
    cols = tracked_columns(reducer, new.select(values).schema)
    if cols is None or not key + values:
        return None
    con.register("new_rows", new)
    try:
        types = dict(con.sql("SELECT column_name, column_type FROM (DESCRIBE new_rows)").fetchall())
        first = pc.min(new.column(time_col)).as_py()
        latest = _old_totals(con, files, keys, key, values, cols, types, time_col)
        if latest is not None and latest > first:  # old updates after a new one: no state before it
            return None
        _states(con, key, values, cols, types, time_col, first)
        if not _exact_where_totals_vanish(con, old_sql, key, values, cols, time_col):
            return None
        fits = " OR ".join(f"({_I}n_{i} > 0 AND try_cast({_I}s_{i} AS {types[c]}) IS NULL)"
                           for i, c in enumerate(cols) if cols[c] == _SUMMED) or "false"
        if con.sql(f"SELECT count(*) FROM abelian_states WHERE {fits}").fetchall()[0][0]:
            return None
        table = con.sql(_updates_sql(key, values, cols, types, time_col)).to_arrow_table()
    except duckdb.Error:  # a total beyond DuckDB's widest type: read the updates whole
        return None
    finally:
        con.unregister("new_rows")
    return table.select(new.column_names).cast(new.schema)


def _same(a: str, b: str, cols: list[str]) -> str:
    return " AND ".join(f"{a}.{quote(c)} IS NOT DISTINCT FROM {b}.{quote(c)}" for c in cols) or "true"


def _old_totals(con, files: list[str], keys: pa.Table, key: list[str], values: list[str], cols: dict[str, str],
                types: dict[str, str], time_col: str) -> int | None:
    """``abelian_old``: per key, the totals of its old updates (``ops/reduce/summaries/layer_totals.py``:
    those large layers keep, the rest summed as DuckDB reads them, no row of them held);
    returns their latest time (None: there are none)."""
    src = layer_totals.sources(con, files, keys, key, {c: types[c] for c in values}, time_col)
    k = ", ".join(quote(c) for c in key)
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_old AS SELECT {k + ', ' if k else ''}"
                f"{_deltas(values, cols, types, summed=True)}, max({quote(layer_totals.T)}) AS {_T} "
                f"FROM ({src}) GROUP BY {k or '()'} HAVING count(*) > 0")
    return con.sql(f"SELECT max({_T}) FROM abelian_old").fetchall()[0][0]


def _deltas(values: list[str], cols: dict[str, str], types: dict[str, str], *, summed: bool) -> str:
    """Per-key totals (``layer_totals.totals_sql``'s columns) as the changes the states add
    up: the multiplicity, one value of each value column, per tracked column its count of
    non-null rows and its sum; ``summed``: of several rows per key (one per source)."""
    def agg(fn: str, col: str) -> str:
        return f"{fn}({quote(col)})" if summed else quote(col)

    parts = [f"{agg('SUM', layer_totals.N)}::BIGINT AS {_I}dn"]
    parts += [f"{agg('any_value', layer_totals.one_of(c))} AS {_I}dr_{j}" for j, c in enumerate(values)]
    for i, c in enumerate(cols):
        parts.append(f"{agg('SUM', layer_totals.count_of(c))}::BIGINT AS {_I}dn_{i}")
        if cols[c] == _SUMMED:
            parts.append(f"{agg('SUM', layer_totals.sum_of(c))}::{layer_totals.wide_type(types[c])} AS {_I}ds_{i}")
    return ", ".join(parts)


def _states(con, key: list[str], values: list[str], cols: dict[str, str], types: dict[str, str],
            time_col: str, first: int) -> None:
    """``abelian_states``: per key, its totals before the first new time (phase 0, from
    ``abelian_old``) and after each of its new times (phase 1), with the time the next
    state begins, and one value of each column its rows hold (``r_j``, null when they
    hold none)."""
    k = "".join(f"{quote(c)}, " for c in key)
    t = quote(time_col)
    deltas = [f"{_I}dn"] + [f"{_I}dr_{j}" for j in range(len(values))]
    totals = [f"SUM({_I}dn) OVER run AS {_N}"]
    totals += [f"any_value({_I}dr_{j}) OVER (PARTITION BY {k}NULL) AS {_I}r_{j}" for j in range(len(values))]
    for i, c in enumerate(cols):
        deltas.append(f"{_I}dn_{i}")
        totals.append(f"SUM({_I}dn_{i}) OVER run AS {_I}n_{i}")
        if cols[c] == _SUMMED:
            deltas.append(f"{_I}ds_{i}")
            totals.append(f"SUM({_I}ds_{i}) OVER run AS {_I}s_{i}")
    d = ", ".join(deltas)
    per_time = layer_totals.totals_sql("SELECT * FROM new_rows", key + [time_col], {c: types[c] for c in values},
                                       time_col)  # the new updates' totals per key and time
    both = (f"SELECT {k}0 AS {_PHASE}, {int(first)}::BIGINT AS {_T}, {d} FROM abelian_old "
            f"UNION ALL SELECT {k}1, {t}, {_deltas(values, cols, types, summed=False)} FROM ({per_time})")
    order = f"PARTITION BY {k}NULL ORDER BY {_PHASE}, {_T}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_states AS SELECT {k}{_PHASE}, {_T}, "
                f"lead({_T}) OVER ({order}) AS {_NEXT}, {', '.join(totals)} "
                f"FROM ({both}) WINDOW run AS ({order} ROWS UNBOUNDED PRECEDING)")


def _exact_where_totals_vanish(con, old_sql: str, key: list[str], values: list[str], cols: dict[str, str],
                               time_col: str) -> bool:
    """Whether the totals decide every state's output. A key whose multiplicity ``N`` is
    positive is present, and its sums, counts and averages are linear in the
    multiplicities: the totals give them whatever its rows' signs. Only a state where ``N``
    or a summed column's count of non-null rows ``n_c`` is 0 or less needs to know whether
    every row is then 0 (absent, or null) — as it is when no row of the key is ever below
    0. Those keys' rows alone are read, accumulated, and checked so."""
    vanish = " OR ".join([f"{_N} <= 0"] + [f"{_I}n_{i} <= 0" for i, c in enumerate(cols) if cols[c] == _SUMMED])
    k = ", ".join(quote(c) for c in key)
    risky = f"SELECT DISTINCT {k or '0 AS ' + _I + 'one'} FROM abelian_states WHERE {vanish}"
    if not con.sql(f"SELECT count(*) FROM ({risky})").fetchall()[0][0]:
        return True
    if not key:  # the one group: its rows are all the rows
        return _non_negative(con, old_sql, "SELECT * FROM new_rows", key, values, time_col)
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_risky AS {risky}")
    mine = f"SEMI JOIN abelian_risky r ON {_same('x', 'r', key)}"
    return _non_negative(con, f"SELECT x.* FROM ({old_sql}) x {mine}", f"SELECT x.* FROM new_rows x {mine}",
                         key, values, time_col)


def _non_negative(con, old_sql: str, new_sql: str, key: list[str], values: list[str], time_col: str) -> bool:
    """Whether no accumulated old row (``old_sql``) is negative and no new retraction
    (``new_sql``) takes a row below 0 at any new time (only the rows some new update
    lowers are looked at)."""
    t = quote(time_col)
    kv = ", ".join(quote(c) for c in key + values)
    con.execute(f"CREATE OR REPLACE TEMP TABLE abelian_old_rows AS SELECT {kv}, SUM(diff)::BIGINT AS {M} "
                f"FROM ({old_sql}) GROUP BY ALL HAVING SUM(diff) <> 0")
    if con.sql(f"SELECT count(*) FROM abelian_old_rows WHERE {M} < 0").fetchall()[0][0]:
        return False
    by_row = f"PARTITION BY {kv}" if kv else ""
    lowered = (f"SELECT {kv}, {t}, SUM(diff) OVER ({by_row} ORDER BY {t} ROWS UNBOUNDED PRECEDING) AS {_C} "
               f"FROM (SELECT {kv}, {t}, SUM(diff) AS diff FROM ({new_sql}) GROUP BY ALL) "
               f"QUALIFY bool_or(diff < 0) OVER ({by_row})")
    below = (f"SELECT count(*) FROM ({lowered}) l LEFT JOIN abelian_old_rows o ON {_same('o', 'l', key + values)} "
             f"WHERE l.{_C} + coalesce(o.{M}, 0) < 0")
    return con.sql(below).fetchall()[0][0] == 0


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
