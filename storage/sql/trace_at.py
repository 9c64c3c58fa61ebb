"""``trace_at('name', t)``: the collection of a trace at a time, in SQL, refusing times
that compaction rewrote.

A trace's view in ``ddcli sql`` holds its updates, and ``WHERE time <= t`` sums them to
the collection at ``t`` — silently wrong when ``t`` is not beyond the trace's since
(compaction moved older updates forward). The table macro ``trace_at`` does the same sum
but first checks ``t`` against the since and fails the query with one line when it is
not beyond it, as ``ddcli query --as-of`` does::

    SELECT * FROM trace_at('words', 4)                 -- word, count
    SELECT * FROM trace_at('strings', '(1,1)')         -- tuple times as text
    SELECT w.word, w.count, c.count FROM trace_at('words', 4) w JOIN trace_at('counts', 4) c USING (word)

The macro reads a hidden view per trace with the time as one list column (``__t``), so one
macro serves every time dimension; a table ``__ddcli_since`` holds each trace's since.
"""

from __future__ import annotations

from storage.lattice import format_frontier, time_columns
from storage.sql.duck import quote

_MACROS = [
    # a time written 7, '7' or '(1,2)' as a list of coordinates
    "CREATE OR REPLACE TEMP MACRO __ddcli_time(t) AS "
    "CAST(string_split(trim(CAST(t AS VARCHAR), '() '), ',') AS BIGINT[])",
    # t is beyond frontier f (a list of times) when some element of f is <= t
    "CREATE OR REPLACE TEMP MACRO __ddcli_beyond(t, f) AS "
    "list_bool_or(list_transform(f, lambda e: list_bool_and(list_transform(e, lambda x, i: x <= t[i]))))",
    "CREATE OR REPLACE TEMP MACRO __ddcli_check(tname, t) AS COALESCE(("
    " SELECT CASE WHEN len(__ddcli_time(t)) <> d THEN error(format("
    "   'trace_at: time {} has {} coordinate(s); trace {} has {}', CAST(t AS VARCHAR), len(__ddcli_time(t)), tname, d))"
    " WHEN __ddcli_beyond(__ddcli_time(t), since) THEN true"
    " ELSE error(format('trace_at: time {} is not beyond the since {} of trace {} (it was compacted); "
    "use a time beyond it', CAST(t AS VARCHAR), since_text, tname)) END"
    " FROM __ddcli_since WHERE name = tname), error(format('trace_at: unknown trace {}', tname)))",
    "CREATE OR REPLACE TEMP MACRO trace_at(tname, t) AS TABLE"
    " SELECT u.* EXCLUDE (__t, diff), CAST(SUM(u.diff) AS BIGINT) AS count"
    " FROM (SELECT __ddcli_check(tname, t) AS ok) chk, query_table('__ddcli_at:' || tname) u"
    " WHERE chk.ok AND list_bool_and(list_transform(u.__t, lambda x, i: x <= __ddcli_time(t)[i]))"
    " GROUP BY ALL HAVING SUM(u.diff) <> 0",
]


def register_trace_at(con, traces: dict) -> None:
    """Create ``trace_at`` on ``con`` for ``traces`` (name -> Trace), whose views exist."""
    con.execute("CREATE OR REPLACE TEMP TABLE __ddcli_since(name VARCHAR, d INTEGER, since BIGINT[][], "
                "since_text VARCHAR)")
    rows = []
    for name, tr in sorted(traces.items()):
        data = ", ".join(quote(c) for c in tr.data_columns)
        times = ", ".join(quote(c) for c in time_columns(tr.d))
        con.execute(f"CREATE TEMP VIEW {quote('__ddcli_at:' + name)} AS "
                    f"SELECT {data}, [{times}] AS __t, diff FROM {quote(name)}")
        rows.append((name, tr.d, [list(t) for t in tr.since], format_frontier(tr.since)))
    if rows:
        con.executemany("INSERT INTO __ddcli_since VALUES (?, ?, ?, ?)", rows)
    for m in _MACROS:
        con.execute(m)
