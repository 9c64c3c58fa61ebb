"""``ddcli changes``: the command, its formats and errors, ``status`` and ``--drop``, and
what a SIGKILL leaves behind.

A command killed anywhere in ``changes --ack`` (at the store's fault points, or by a real
SIGKILL at a random moment) leaves the reader either where it was (the next read gives the
same changes again) or at the upper it read, and then its output file is complete.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from storage.lattice import Frontier
from storage.state.transitions import State
from storage.store import Store
from storage.writes import feeds
from tests.helpers import REPO
from tests.helpers.cli import WORD_UPDATES, WORDS, ddcli, jsonl, ok, one_line_error, parse_csv

FIRST = [u for u in WORD_UPDATES if u[1][0] < 3]  # words_1.csv: times 0..2
SECOND = [u for u in WORD_UPDATES if u[1][0] >= 3]  # words_2.csv: times 3..


def consolidated(updates) -> dict:
    acc: dict = {}
    for data, t, diff in updates:
        acc[(data, t)] = acc.get((data, t), 0) + diff
    return {k: v for k, v in acc.items() if v}


def from_rows(rows) -> dict:
    """``{((word,), (time,)): diff}`` of CSV or JSON rows of a feed."""
    return consolidated([((str(r["word"]),), (int(r["time"]),), int(r["diff"])) for r in rows])


def test_changes_reads_a_trace_in_batches_in_every_format(tmp_path):
    s = str(tmp_path / "store")
    ok(ddcli(s, "ingest", "words", str(WORDS[0])))
    first = ok(ddcli(s, "changes", "words", "--reader", "etl", "--format", "csv", "--ack"))
    assert first.stdout.splitlines()[0] == "word,time,diff"
    assert from_rows(parse_csv(first.stdout)) == consolidated(FIRST)
    assert ok(ddcli(s, "changes", "words", "-r", "etl", "--json")).stdout == "", "all acknowledged"
    ok(ddcli(s, "ingest", "words", str(WORDS[1])))
    status = ok(ddcli(s, "status", "--readers", "--format", "csv"))
    (row,) = parse_csv(status.stdout)
    assert (row["reader"], row["position"], row["behind"], row["behind_by"]) == ("etl", "3", "true", str(
        Store(s).trace("words").upper.elements[0][0] - 3))
    peek = jsonl(ok(ddcli(s, "changes", "words", "-r", "etl", "--json")).stdout)
    assert from_rows(peek) == consolidated(SECOND)
    assert [(r["time"], r["word"]) for r in peek] == sorted((r["time"], r["word"]) for r in peek), "time order"
    out = tmp_path / "batch.parquet"
    ok(ddcli(s, "changes", "words", "-r", "etl", "-o", str(out), "--ack"))
    tbl = pq.read_table(out)
    assert tbl.column_names == ["word", "time", "diff"]
    assert from_rows(tbl.to_pylist()) == consolidated(SECOND)
    # a second reader starts at the since: the whole history, advanced to it
    ok(ddcli(s, "advance", "words", "--since", "2"))
    late = parse_csv(ok(ddcli(s, "changes", "words", "-r", "late", "--format", "csv")).stdout)
    assert from_rows(late) == consolidated([(d, (max(t[0], 2),), x) for d, t, x in WORD_UPDATES])
    rows = jsonl(ok(ddcli(s, "status", "--json")).stdout)
    readers = {r["reader"]: r for r in rows if r["kind"] == "reader"}
    assert readers["etl"]["behind"] is False and readers["late"]["position"] is None


def test_an_acknowledged_terminal_table_shows_every_row(tmp_path):
    s = str(tmp_path / "store")
    many = tmp_path / "many.csv"
    many.write_text("word,time\n" + "".join(f"w{i},0\n" for i in range(1200)))
    ok(ddcli(s, "ingest", "words", str(many)))
    peek = ok(ddcli(s, "changes", "words", "-r", "etl")).stdout
    assert "1200 rows; 200 not shown" in peek
    acked = ok(ddcli(s, "changes", "words", "-r", "etl", "--ack")).stdout
    assert "1200 rows" in acked and "not shown" not in acked and "w1199" in acked


def test_history_where_may_name_time_and_diff(tmp_path):
    s = str(tmp_path / "store")
    for f in WORDS:
        ok(ddcli(s, "ingest", "words", str(f)))
    got = jsonl(ok(ddcli(s, "history", "words", "--where", "time >= 3", "--json")).stdout)
    assert from_rows(got) == consolidated(SECOND)
    neg = jsonl(ok(ddcli(s, "history", "words", "--where", "diff < 0 AND word <> 'zzz'", "--json")).stdout)
    assert from_rows(neg) == {k: v for k, v in consolidated(WORD_UPDATES).items() if v < 0} != {}
    err = one_line_error(ddcli(s, "history", "words", "--where", "tme >= 3"))
    assert "columns: word, time, diff" in err
    one_line_error(ddcli(s, "query", "words", "--where", "time >= 3"))  # a collection has no time


@pytest.mark.parametrize("args, match", [
    (["changes", "words", "-r", "no-dash"], "bad reader name 'no-dash'"),
    (["changes", "words", "-r", "9lives"], "bad reader name '9lives'"),
    (["changes", "nowhere", "-r", "etl"], "unknown trace 'nowhere'"),
    (["changes", "words", "-r", "etl", "--drop"], r"unknown reader 'etl' of trace 'words' \(readers: none\)"),
    (["changes", "words", "-r", "etl", "--drop", "--ack"], "--ack or --drop"),
    (["changes", "words", "-r", "etl", "-o", "/nonexistent/dir/x.csv"], "no directory"),
])
def test_refused_changes_are_one_line_and_change_nothing(tmp_path, digest, args, match):
    s = str(tmp_path / "store")
    ok(ddcli(s, "ingest", "words", str(WORDS[0])))
    before = digest(s)
    err = one_line_error(ddcli(s, *args))
    assert re.search(match, err), err
    assert digest(s) == before


def test_dropping_a_reader_releases_its_hold_in_one_commit(tmp_path):
    s = str(tmp_path / "store")
    for f in WORDS:
        ok(ddcli(s, "ingest", "words", str(f)))
    ok(ddcli(s, "changes", "words", "-r", "etl", "--ack", "--json"))  # at the upper, 6
    later = tmp_path / "words_3.csv"
    later.write_text("word,time,diff\nfig,6,1\napple,7,-1\n")
    ok(ddcli(s, "ingest", "words", str(later)))
    ok(ddcli(s, "advance", "words", "--since", "9"))
    ok(ddcli(s, "compact", "words", "--full"))
    store = Store(s)
    t = store.trace("words")
    assert t.effective_since() == Frontier([(5,)]), "held just below the position 6"
    times = store.read_updates(t).column("time").to_pylist()
    assert set(times) == {5, 6, 7}, "read updates merge below 6, unread ones keep their times"
    before = store.state().version
    res = ok(ddcli(s, "changes", "words", "-r", "etl", "--drop"))
    assert "dropped" in res.stdout and store.state().version == before + 1
    t = store.trace("words")
    assert t.holds == {} and t.effective_since() == t.since == Frontier([(9,)])
    ok(ddcli(s, "compact", "words", "--full"))
    assert set(store.read_updates(store.trace("words")).column("time").to_pylist()) == {9}
    assert not [r for r in jsonl(ok(ddcli(s, "status", "--json")).stdout) if r["kind"] == "reader"]


def test_a_pipeline_whose_output_has_a_reader_is_dropped_only_keeping_its_outputs(tmp_path, digest):
    s = str(tmp_path / "store")
    ok(ddcli(s, "ingest", "words", str(WORDS[0])))
    store = Store(s)
    # words stands for the output of a pipeline p (its record as a run would leave it)
    store.commit(lambda st: State(st.version, {"words": st.traces["words"].with_(owner="p")},
                                  {"p": {"outputs": ["words"], "inputs": {}}}))
    ok(ddcli(s, "changes", "words", "-r", "dash", "--ack", "--json"))
    before = digest(s)
    err = one_line_error(ddcli(s, "drop", "p"))
    assert "followed by reader 'dash'" in err and "ddcli changes words --reader dash --drop" in err
    assert digest(s) == before
    ok(ddcli(s, "drop", "p", "--keep-outputs"))
    assert Store(s).trace("words").holds["reader:dash"].position == Frontier([(3,)])


# ---------------------------------------------------------------- killed while acknowledging


def _setup(tmp_path, acked: bool) -> tuple[str, dict, Frontier | None]:
    """A store whose reader ``etl`` has unread changes: (store, expected batch, position)."""
    s = str(tmp_path / "store")
    store = Store(s)
    store.ingest("words", [str(WORDS[0])])
    if not acked:
        store.ingest("words", [str(WORDS[1])])
        return s, consolidated(WORD_UPDATES), None
    feeds.acknowledge(store, feeds.read_changes(store, "words", "etl")[0])
    store.ingest("words", [str(WORDS[1])])
    return s, consolidated(SECOND), Frontier([(3,)])


def _changes(store: str, out: str, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DDCLI_FAULT", None)
    if fault:
        env["DDCLI_FAULT"] = fault
    return subprocess.Popen([sys.executable, "-m", "ddcli", "changes", "words", "--reader", "etl", "--format", "csv",
                             "-o", out, "--ack", "--store", store], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _check_consistent(s: str, out: str, expected: dict, old: Frontier | None) -> str:
    """The reader is where it was or at the upper; its output then complete. Returns which."""
    t = Store(s).trace("words")
    hold = t.holds.get("reader:etl")
    position = hold.position if hold is not None else None
    if position == t.upper:
        with open(out) as fh:
            assert from_rows(parse_csv(fh.read())) == expected, "acknowledged: the output is complete"
        return "new"
    assert position == old, position
    reading, table = feeds.read_changes(Store(s), "words", "etl")
    rows = [dict(zip(table.column_names, r)) for r in zip(*[c.to_pylist() for c in table.columns])]
    assert from_rows(rows) == expected, "not acknowledged: the same changes again"
    return "old"


@pytest.mark.parametrize("acked, fault, outcome", [
    (False, "reader.after_commit", "old"),  # created, nothing read yet
    (False, "ack.after_commit", "new"),
    (True, "ack.before_commit", "old"),  # the output is written, the ack not committed
    (True, "log.before_link", "old"),
    (True, "log.after_link", "new"),
])
def test_a_kill_at_a_fault_point_leaves_the_position_old_or_new_and_the_output_complete(tmp_path, acked, fault,
                                                                                          outcome):
    s, expected, old = _setup(tmp_path, acked)
    out = str(tmp_path / "out.csv")
    p = _changes(s, out, fault)
    p.communicate(timeout=60)
    assert p.returncode == 137, fault
    assert _check_consistent(s, out, expected, old) == outcome
    ok(ddcli(s, "changes", "words", "--reader", "etl", "--format", "csv", "-o", out, "--ack"))
    with open(out) as fh:
        again = from_rows(parse_csv(fh.read()))
    assert again == (expected if outcome == "old" else {}), "read again only what was not acknowledged"
    assert Store(s).trace("words").holds["reader:etl"].position == Store(s).trace("words").upper


def test_a_sigkill_at_random_moments_leaves_the_position_consistent(tmp_path):
    rng = random.Random(3)
    outcomes = set()
    for i in range(3):
        s, expected, old = _setup(tmp_path / str(i), acked=True)
        out = str(tmp_path / str(i) / "out.csv")
        p = _changes(s, out)
        time.sleep(rng.uniform(0.2, 2.0))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        outcomes.add(_check_consistent(s, out, expected, old))
    assert outcomes <= {"old", "new"}
