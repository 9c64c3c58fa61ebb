"""storage/sql/query.py against a plain fold of the raw updates.

The collection as of a time, the history and the SQL views must say exactly what a fold
of the updates the test generated says, at every time beyond ``since``, before and after
``advance --since`` and ``compact``; for d = 1 and d = 2.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.errors import StoreError
from storage.lattice import Frontier, advance, leq, time_columns
from storage.sql import query as Q
from storage.state.trace import Trace
from storage.store import Store

# ---------------------------------------------------------------- references and builders


def fold(updates, t) -> dict:
    """The collection at ``t``: per data row, the sum of diffs at times ``<= t``; zeros dropped."""
    acc: Counter = Counter()
    for data, s, diff in updates:
        if leq(s, t):
            acc[data] += diff
    return {k: v for k, v in acc.items() if v}


def consolidated_history(updates, since: Frontier) -> list:
    """Updates advanced to ``since``, summed per (data, time), zeros dropped, sorted."""
    acc: Counter = Counter()
    for data, s, diff in updates:
        acc[(data, advance(s, since))] += diff
    return sorted((data, t, diff) for (data, t), diff in acc.items() if diff)


def as_dict(table: pa.Table, data_columns) -> dict:
    rows = table.to_pylist()
    out = {tuple(r[c] for c in data_columns): r["count"] for r in rows}
    assert len(out) == len(rows), "a data row appears twice in a collection"
    return out


def write(path, updates, d: int) -> str:
    """Write ``((word, n), time, diff)`` updates as a Parquet or CSV update file."""
    cols = {"word": [u[0][0] for u in updates], "n": [u[0][1] for u in updates]}
    for i, c in enumerate(time_columns(d)):
        cols[c] = [u[1][i] for u in updates]
    cols["diff"] = [u[2] for u in updates]
    table = pa.table({k: pa.array(v, pa.int64() if k != "word" else pa.string()) for k, v in cols.items()})
    path = str(path)
    if path.endswith(".csv"):
        import pyarrow.csv as pacsv
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


def random_updates(rng, times, n):
    words = ["ant", "bee", "cat", "dog"]
    return [((rng.choice(words), rng.randint(0, 2)), rng.choice(times), rng.choice([-2, -1, 1, 1, 2, 3]))
            for _ in range(n)]


def box(d, hi):
    return [tuple(t) for t in itertools.product(range(hi + 1), repeat=d)]


def check_all(store, name, updates, d, hi):
    """as_of, history and the SQL recipe agree with the fold at every time beyond since."""
    tr = store.trace(name)
    checked = 0
    for t in box(d, hi):
        if not tr.since.beyond(t):
            with pytest.raises(StoreError, match="earliest time that works"):
                Q.as_of(store, name, t)
            continue
        want = fold(updates, t)
        assert as_dict(Q.as_of(store, name, t), ["word", "n"]) == want, f"as_of {t}"
        cond = " AND ".join(f"{c} <= {v}" for c, v in zip(time_columns(d), t))
        got = Q.sql(store, f"SELECT word, n, SUM(diff) AS count FROM {name} WHERE {cond} "
                           f"GROUP BY ALL HAVING SUM(diff) <> 0")
        assert as_dict(got, ["word", "n"]) == want, f"sql recipe at {t}"
        checked += 1
    hist = Q.history(store, name)
    tcols = time_columns(d)
    got_hist = [((r["word"], r["n"]), tuple(r[c] for c in tcols), r["diff"]) for r in hist.to_pylist()]
    assert got_hist == consolidated_history(updates, tr.since)
    return checked


# ---------------------------------------------------------------- accumulation equivalence


# every seed on a local store; on an S3 store (slower: moto) one seed per dimension
@pytest.mark.parametrize("store_location, d, seed",
                         [("local", d, seed) for d in (1, 2) for seed in (1, 2, 3)] + [("s3", 1, 1), ("s3", 2, 1)],
                         indirect=["store_location"])
def test_as_of_history_and_sql_equal_the_fold_before_and_after_compaction(tmp_path, store_location, d, seed):
    rng = random.Random(seed)
    store = Store(store_location)
    updates = []
    hi = 5
    # many small ingests at increasing times (repeated times inside a batch, retractions)
    for batch in range(hi + 1):
        if d == 1:
            times = [(batch,)]
            upper = None
        else:
            times = [(batch, j) for j in range(hi + 1)]
            upper = f"({batch + 1},0)"
        ups = random_updates(rng, times, rng.randint(1, 12))
        updates += ups
        store.ingest("t", [write(tmp_path / f"u{batch}.parquet", ups, d)], upper=upper)
        if batch == 2:
            check_all(store, "t", updates, d, hi)
    assert check_all(store, "t", updates, d, hi) == len(box(d, hi))
    since = "3" if d == 1 else "(2,1) (1,3)"
    store.advance("t", since=since)
    store.compact("t", full=True, grace_seconds=0)
    n = check_all(store, "t", updates, d, hi)
    assert 0 < n < len(box(d, hi))


def test_default_time_is_the_latest_complete_time(tmp_path):
    store = Store(str(tmp_path / "store"))
    ups = [(("a", 0), (0,), 1), (("b", 0), (3,), 2), (("a", 0), (4,), -1)]
    store.ingest("w", [write(tmp_path / "w.parquet", ups, 1)])
    tr = store.trace("w")
    assert Q.default_time(tr) == (4,)
    assert as_dict(Q.as_of(store, "w"), ["word", "n"]) == {("b", 0): 2}
    # with the since beyond upper - 1 the default still answers (compaction keeps sums)
    store.advance("w", since="9")
    store.compact("w", full=True, grace_seconds=0)
    assert as_dict(Q.as_of(store, "w"), ["word", "n"]) == {("b", 0): 2}
    with pytest.raises(StoreError, match="time 4 is not beyond the since 9 of trace 'w'.*earliest time that works is 9"):
        Q.as_of(store, "w", 4)
    assert as_dict(Q.as_of(store, "w", "9"), ["word", "n"]) == {("b", 0): 2}


def test_a_time_before_since_names_the_earliest_times_that_work_d2(tmp_path):
    store = Store(str(tmp_path / "store"))
    ups = [(("a", 0), (0, 0), 1), (("b", 1), (1, 1), 1)]
    store.ingest("s", [write(tmp_path / "s.csv", ups, 2)], upper="(2,0)")
    store.advance("s", since="(0,3) (1,2)")
    with pytest.raises(StoreError) as info:
        Q.as_of(store, "s", "(0,0)")
    msg = str(info.value)
    assert "\n" not in msg
    assert "'s'" in msg and "(0,0)" in msg and "earliest time that works is (0,3) (1,2)" in msg
    # (1,0) joined with (0,3) and (1,2) gives (1,3) and (1,2): the least is (1,2)
    with pytest.raises(StoreError, match=r"time \(1,0\) .* earliest time that works is \(1,2\)$"):
        Q.as_of(store, "s", (1, 0))
    assert as_dict(Q.as_of(store, "s", "(1,2)"), ["word", "n"]) == {("a", 0): 1, ("b", 1): 1}


def test_d2_default_uses_every_update_including_pending(tmp_path):
    store = Store(str(tmp_path / "store"))
    ups = [(("a", 0), (0, 0), 1), (("b", 0), (0, 5), 1), (("a", 0), (3, 3), 1)]
    store.ingest("s", [write(tmp_path / "s.parquet", ups, 2)])  # no --upper: all pending
    assert store.trace("s").pending
    assert Q.default_time(store.trace("s")) is None
    assert as_dict(Q.as_of(store, "s"), ["word", "n"]) == {("a", 0): 2, ("b", 0): 1}
    assert as_dict(Q.as_of(store, "s", "(0,5)"), ["word", "n"]) == {("a", 0): 1, ("b", 0): 1}


def test_time_syntax_and_dimension_errors(tmp_path):
    from storage.errors import TimeSyntaxError
    store = Store(str(tmp_path / "store"))
    store.ingest("w", [write(tmp_path / "w.parquet", [(("a", 0), (0,), 1)], 1)])
    with pytest.raises(TimeSyntaxError):
        Q.as_of(store, "w", "(1,")
    with pytest.raises(TimeSyntaxError, match="1 coordinate"):
        Q.as_of(store, "w", "(1,2)")
    with pytest.raises(StoreError, match="unknown trace 'nope'"):
        Q.as_of(store, "nope")


# ---------------------------------------------------------------- where


def _words_store(tmp_path, location=None):
    store = Store(location or str(tmp_path / "store"))
    ups = [((w, i), (i % 3,), 1) for i, w in enumerate(["apple", "avocado", "banana", "cherry"])]
    store.ingest("w", [write(tmp_path / "w.parquet", ups, 1)])
    return store


def test_where_filters_data_columns(tmp_path):
    store = _words_store(tmp_path)
    got = Q.as_of(store, "w", where="word LIKE 'a%' AND n >= 1")
    assert got.to_pylist() == [{"word": "avocado", "n": 1, "count": 1}]
    assert Q.history(store, "w", where="word = 'cherry'").to_pylist() == [
        {"word": "cherry", "n": 3, "time": 0, "diff": 1}]


@pytest.mark.parametrize("bad", ["word = ", "nope = 1", "time > 3", "diff = 1",
                                 "1 = 1; DROP TABLE x", "word = 'a') UNION (SELECT 1"])
def test_a_bad_where_is_one_line_naming_the_trace(tmp_path, bad):
    store = _words_store(tmp_path)
    # a history's updates have a time and a diff; a collection has neither
    for fn in (Q.as_of,) if bad in ("time > 3", "diff = 1") else (Q.as_of, Q.history):
        with pytest.raises(StoreError) as info:
            fn(store, "w", where=bad)
        msg = str(info.value)
        assert "\n" not in msg and "trace 'w'" in msg and "--where" in msg


def test_where_is_pushed_into_the_parquet_scan(tmp_path):
    """DuckDB gets the key condition and the time condition inside read_parquet, so row
    groups whose statistics exclude them are skipped."""
    store = Store(str(tmp_path / "store"))
    ups = [((f"w{i:05d}", i), (i % 7,), 1) for i in range(100_000)]
    store.ingest("big", [write(tmp_path / "big.parquet", ups, 1)])
    tr = store.trace("big")
    with Q.connect(store) as con:
        q = Q.as_of_query(store, tr, (3,), "word = 'w00042'", con)
        plan = "\n".join(r[1] for r in con.execute("EXPLAIN " + q).fetchall())
    scan = plan[plan.index("READ_PARQUET"):]
    assert "Filters" in scan and "w00042" in scan and "time" in scan
    # and the key range of a layer spans many row groups, so this skips most of them
    meta = pq.ParquetFile(store.layer_paths(tr)[0]).metadata
    assert meta.num_row_groups > 1
    assert Q.as_of(store, "big", 3, "word = 'w00042'").to_pylist() == [{"word": "w00042", "n": 42, "count": 1}]


# ---------------------------------------------------------------- sql (local and S3 stores)


def _add_trace(store, name, d=1, schema=None):
    """Commit an empty trace (no layers), as a pipeline creating an output would."""
    schema = schema or pa.schema([("word", pa.string()), ("n", pa.int64())])

    def change(s):
        s.traces[name] = Trace(name, schema, ["word"], d, Frontier.minimum(d), Frontier.minimum(d))
        return s
    store.commit(change)


def test_sql_sees_every_trace_as_a_view_with_the_right_schema(tmp_path, store_location):
    store = _words_store(tmp_path, store_location)
    _add_trace(store, "empty", d=2)
    got = Q.sql(store, "SELECT * FROM empty")
    assert got.num_rows == 0
    assert got.column_names == ["word", "n", "time_0", "time_1", "diff"]
    got = Q.sql(store, "SELECT word, time, diff FROM w ORDER BY word")
    assert got.to_pylist()[0] == {"word": "apple", "time": 0, "diff": 1}
    # the two join like tables
    assert Q.sql(store, "SELECT count(*) AS c FROM w JOIN empty USING (word)").to_pylist() == [{"c": 0}]


def test_internal_traces_are_views_only_under_their_quoted_name(tmp_path, store_location):
    store = _words_store(tmp_path, store_location)
    _add_trace(store, "wc.count")
    assert Q.sql(store, 'SELECT count(*) AS c FROM "wc.count"').to_pylist() == [{"c": 0}]
    with pytest.raises(StoreError):
        Q.sql(store, "SELECT * FROM wc.count")
    traces = Q.status(store)
    assert traces.column("trace").to_pylist() == ["w"]
    traces = Q.status(store, internal=True)
    assert traces.column("trace").to_pylist() == ["w", "wc.count"]


def test_sql_errors_are_one_line(tmp_path, store_location):
    store = _words_store(tmp_path, store_location)
    for bad in ["SELEC 1", "SELECT * FROM nope", "", "SELECT nope FROM w"]:
        with pytest.raises(StoreError) as info:
            Q.sql(store, bad)
        assert "\n" not in str(info.value)


def test_sql_on_an_empty_store(store_location):
    store = Store(store_location)
    assert Q.sql(store, "SELECT 42 AS x").to_pylist() == [{"x": 42}]


# ---------------------------------------------------------------- status


def test_status_describes_every_trace(tmp_path):
    store = _words_store(tmp_path)
    traces = Q.status(store)
    row = traces.to_pylist()[0]
    assert row["trace"] == "w" and row["key"] == "word" and row["d"] == 1
    assert row["columns"] == "word:string, n:int64"
    assert row["since"] == "0" and row["upper"] == "3" and row["rows"] == 4 and row["layers"] == 1
    assert row["bytes"] > 0
    with pytest.raises(StoreError, match="unknown trace"):
        Q.status(store, "nope")


# ---------------------------------------------------------------- readers and compaction


def test_a_read_whose_files_were_collected_reads_the_newest_version_again(tmp_path, monkeypatch):
    """Readers take no locks: when compaction commits and collects the layer files a reader
    was given, the read starts over from the newest version (and gives up with a Conflict,
    safe to retry, if that keeps happening)."""
    from storage.errors import Conflict
    store = Store(str(tmp_path / "store"))
    store.ingest("w", [write(tmp_path / "a.parquet", [(("a", 0), (0,), 1)], 1)])
    stale = store.trace("w")
    store.ingest("w", [write(tmp_path / "b.parquet", [(("b", 0), (1,), 1)], 1)])
    store.compact("w", full=True, grace_seconds=0)
    assert any(not os.path.exists(p) for p in store.layer_paths(stale))
    real = Store.trace
    calls = []

    def once_stale(self, name, state=None):
        calls.append(name)
        return stale if len(calls) == 1 else real(self, name, state)
    monkeypatch.setattr(Store, "trace", once_stale)
    assert as_dict(Q.as_of(store, "w"), ["word", "n"]) == {("a", 0): 1, ("b", 0): 1}
    assert len(calls) == 2
    monkeypatch.setattr(Store, "trace", lambda self, name, state=None: stale)
    with pytest.raises(Conflict, match="retry"):
        Q.history(store, "w")


def test_a_time_before_since_is_refused_on_a_trace_without_layers(tmp_path, digest):
    """A trace with no layers (an output nothing reached yet) whose since was advanced:
    query and trace_at refuse a time before it in one line, as for a trace with layers."""
    from typer.testing import CliRunner

    from ddcli.cli import app
    store = Store(str(tmp_path / "store"))
    _add_trace(store, "nl", d=2)
    store.commit(lambda s: (s.traces.__setitem__("nl", s.traces["nl"].with_(
        since=Frontier([(1, 2)], 2), upper=Frontier([(5, 5)], 2))), s)[1])
    before = digest(store.path)
    runner = CliRunner()
    for args, words in [(["query", "nl", "--as-of", "(1,1)"], ["not beyond the since (1,2)", "(1,2)"]),
                        (["sql", "SELECT * FROM trace_at('nl', '(0,3)')"], ["trace_at", "not beyond the since"])]:
        res = runner.invoke(app, [*args, "--store", store.path])
        assert res.exit_code == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
        assert all(w in res.stderr for w in words), res.stderr
    res = runner.invoke(app, ["query", "nl", "--as-of", "(1,3)", "--json", "--store", store.path])
    assert res.exit_code == 0 and res.stdout.strip() == ""
    assert digest(store.path) == before
