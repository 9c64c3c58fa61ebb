"""Frontiers that never over-promise.

* An output's ``since`` is at least its inputs' ``since``: a pipeline whose first run sees
  an input already compacted (or compacted while the run works, before its hold exists)
  must not answer times the input can no longer tell apart; ``query`` refuses them,
  naming the earliest time that works.
* An output never holds updates at or beyond its ``upper``: with inputs of uneven uppers
  the changes beyond the pipeline's frontier wait (pending) until the frontier passes
  them, so the default query (as of ``upper - 1``) is exact.
* A commit re-checks what it references, and an ambiguous commit recognises its own
  version by its commit id.

References are plain Python folds of the update files; they import nothing of ddcli.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from storage import faults
from storage.errors import Conflict, StoreError
from storage.log import commit as log_module
from storage.log.commit import Log
from storage.sql.query import as_of
from storage.store import Store
from tests.helpers.operations import PIPELINES

WORDCOUNT = os.path.join(PIPELINES, "wordcount.py")
JOIN = os.path.join(PIPELINES, "join_example.py")


def write_csv(path, header, rows) -> str:
    with open(path, "w") as fh:
        fh.write(",".join(header) + "\n")
        for r in rows:
            fh.write(",".join(str(x) for x in r) + "\n")
    return str(path)


def collection(table, columns) -> Counter:
    """A query result as a multiset of rows (the last column is the multiplicity)."""
    d = table.to_pydict()
    return Counter({tuple(d[c][i] for c in columns): d[table.column_names[-1]][i]
                    for i in range(table.num_rows)})


def words_at(rows, t) -> Counter:
    """The plain fold of (word, time, diff) rows at time t, as a word count's rows."""
    acc = Counter()
    for w, s, diff in rows:
        if s <= t:
            acc[w] += diff
    return Counter({(w, n): 1 for w, n in acc.items() if n})


def revenue_at(orders, customers, t) -> Counter:
    """The plain fold of the join example at time t: sum of amounts per region."""
    o, c = Counter(), Counter()
    for oid, cust, amount, s, diff in orders:
        if s <= t:
            o[(oid, cust, amount)] += diff
    for cust, region, s, diff in customers:
        if s <= t:
            c[(cust, region)] += diff
    total = Counter()
    for (oid, cust, amount), m in o.items():
        for (cust2, region), n in c.items():
            if cust == cust2 and m * n:
                total[region] += amount * m * n
    return Counter({(region, s): 1 for region, s in total.items() if s})


def on_point(monkeypatch, name, action):
    done = []

    def point(n):
        if n == name and not done:
            done.append(n)
            action()
    monkeypatch.setattr(faults, "point", point)
    return done


WORDS = [("a", 1, 1), ("b", 1, 1), ("a", 2, 1), ("c", 3, 1), ("b", 4, -1), ("d", 5, 1)]


def ingest_words(store, tmp_path, rows):
    for i, t in enumerate(sorted({r[1] for r in rows})):
        store.ingest("words", [write_csv(tmp_path / f"w{i}.csv", ["word", "time", "diff"],
                                         [r for r in rows if r[1] == t])])


# ------------------------------------------------------------------ an output's since


def test_first_run_over_a_compacted_input_gives_the_output_the_inputs_since(spark, tmp_path):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    ingest_words(store, tmp_path, WORDS)
    store.advance("words", since="4")
    store.compact("words", full=True)
    run_pipeline(store, WORDCOUNT)

    counts = store.trace("counts")
    assert counts.since.dominates(store.trace("words").since)
    with pytest.raises(StoreError, match=r"time 2 is not beyond .*earliest time that works is 4"):
        as_of(store, "counts", 2)
    for t in (4, 5):
        assert collection(as_of(store, "counts", t), ["word", "count"]) == words_at(WORDS, t)


def test_compaction_during_a_first_run_before_its_hold_exists_moves_the_outputs_since(spark, tmp_path, monkeypatch):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    ingest_words(store, tmp_path, WORDS)

    def compact_meanwhile():
        store.advance("words", since="3")
        store.compact("words", full=True)
    hit = on_point(monkeypatch, "run.before_commit", compact_meanwhile)
    run_pipeline(store, WORDCOUNT)
    assert hit

    assert store.trace("counts").since.dominates(store.trace("words").since)
    with pytest.raises(StoreError, match="earliest time that works is 3"):
        as_of(store, "counts", 1)
    for t in (3, 4, 5):
        assert collection(as_of(store, "counts", t), ["word", "count"]) == words_at(WORDS, t)


# ------------------------------------------------------------------ an output's upper

ORDERS = [(1, "alice", 30, 1, 1), (2, "bob", 20, 2, 1), (3, "alice", 15, 3, 1), (4, "carol", 50, 5, 1)]
CUSTOMERS_1 = [("alice", "north", 0, 1), ("bob", "south", 0, 1), ("carol", "north", 0, 1)]
CUSTOMERS_2 = [("alice", "north", 3, -1), ("alice", "east", 3, 1)]


def test_inputs_with_uneven_uppers_leave_no_output_update_at_or_beyond_its_upper(spark, tmp_path):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    store.ingest("orders", [write_csv(tmp_path / "o.csv", ["order_id", "customer", "amount", "time", "diff"], ORDERS)],
                 key=["customer"])
    store.ingest("customers", [write_csv(tmp_path / "c1.csv", ["customer", "region", "time", "diff"], CUSTOMERS_1)])
    assert str(store.trace("orders").upper.elements) == "((6,),)" and store.trace("customers").upper.elements == ((1,),)
    run_pipeline(store, JOIN)

    revenue = store.trace("revenue")
    assert revenue.upper.elements == ((1,),)
    sealed = store.read_updates(revenue, revenue.layers).to_pydict()
    assert all(t < 1 for t in sealed["time"]), "a sealed output update lies at or beyond the output's upper"
    # the default query is the collection at upper - 1 = 0, exactly
    assert collection(as_of(store, "revenue"), ["region", "sum"]) == revenue_at(ORDERS, CUSTOMERS_1, 0)

    # the customers catch up: what waited is sealed, at its exact times
    store.ingest("customers", [write_csv(tmp_path / "c2.csv", ["customer", "region", "time", "diff"], CUSTOMERS_2)],
                 upper="7")
    run_pipeline(store, JOIN)
    revenue = store.trace("revenue")
    assert revenue.upper.elements == ((6,),)
    customers = CUSTOMERS_1 + CUSTOMERS_2
    for t in range(6):
        assert collection(as_of(store, "revenue", t), ["region", "sum"]) == revenue_at(ORDERS, customers, t), t
    assert collection(as_of(store, "revenue"), ["region", "sum"]) == revenue_at(ORDERS, customers, 5)


# ------------------------------------------------------------------ commits re-check what they reference


def test_a_run_whose_written_files_were_collected_before_its_commit_commits_nothing(spark, tmp_path, monkeypatch):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    ingest_words(store, tmp_path, WORDS)
    before = store.state().version
    hit = on_point(monkeypatch, "run.before_commit", lambda: store.collect_garbage(grace_seconds=-1))
    with pytest.raises(Conflict, match="removed before it was committed"):
        run_pipeline(store, WORDCOUNT)
    assert hit and store.state().version == before and "counts" not in store.state().traces
    monkeypatch.setattr(faults, "point", lambda name: None)
    run_pipeline(store, WORDCOUNT)  # the retry does the same work
    assert collection(as_of(store, "counts", 5), ["word", "count"]) == words_at(WORDS, 5)


def test_a_run_whose_input_files_were_collected_before_its_commit_commits_nothing(spark, tmp_path, monkeypatch):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    ingest_words(store, tmp_path, WORDS)
    input_files = store.layer_paths(store.trace("words"))

    def remove_inputs():  # compaction, then a garbage collection with too short a grace
        store.advance("words", since="2")
        store.compact("words", full=True, grace_seconds=3600)
        live = set(store.layer_paths(store.trace("words")))
        assert not live & set(input_files)
        for p in input_files:
            os.unlink(p)
    hit = on_point(monkeypatch, "run.before_commit", remove_inputs)
    with pytest.raises(Conflict, match="input trace 'words'"):
        run_pipeline(store, WORDCOUNT)
    assert hit and "counts" not in store.state().traces
    assert all(os.path.exists(p) for p in store.layer_paths(store.trace("words")))


def test_an_ambiguous_link_is_resolved_by_the_commit_id(tmp_path, monkeypatch):
    log = Log(str(tmp_path))
    log.commit(lambda s: {"traces": {}, "items": []})
    real_link = os.link

    def link_then_report_exists(src, dst):  # a network filesystem retried a link that had succeeded
        real_link(src, dst)
        raise FileExistsError(17, "File exists", dst)
    monkeypatch.setattr(log_module.os, "link", link_then_report_exists)
    calls = []

    def change(s):
        calls.append(s["version"])
        return {**s, "items": s["items"] + ["mine"]}
    v, state = log.commit(change)
    assert calls == [1], "the change was applied again on top of its own committed version"
    assert v == 2 and log.latest()[1]["items"] == ["mine"]


def test_a_link_that_lost_to_another_writer_is_still_a_lost_race(tmp_path, monkeypatch):
    log = Log(str(tmp_path))
    log.commit(lambda s: {"traces": {}, "items": []})
    calls = []

    def change(s):
        calls.append(s["version"])
        if len(calls) == 1:
            log.commit(lambda s2: {**s2, "items": s2["items"] + ["theirs"]})
        return {**s, "items": s["items"] + ["mine"]}
    v, state = log.commit(change)
    assert calls == [1, 2] and log.latest()[1]["items"] == ["theirs", "mine"]


def test_an_ingest_with_an_ambiguous_link_keeps_its_files(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "store"))
    ingest_words(store, tmp_path, WORDS[:2])
    real_link = os.link
    monkeypatch.setattr(log_module.os, "link", lambda s, d: (real_link(s, d), (_ for _ in ()).throw(FileExistsError(17, "File exists"))))
    store.ingest("words", [write_csv(tmp_path / "more.csv", ["word", "time", "diff"], [("z", 7, 1)])])
    monkeypatch.setattr(log_module.os, "link", real_link)
    for p in store.layer_paths(store.trace("words")):
        assert os.path.exists(p), f"the committed version names a file its own writer removed: {p}"
    assert collection(as_of(store, "words", 7), ["word"])[("z",)] == 1
