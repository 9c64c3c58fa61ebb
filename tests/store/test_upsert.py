"""Upserts and deletes by key.

``ingest --upsert KEYCOLS``: each row replaces the live rows with its key at its time;
``--delete KEYCOLS``: each row (key and time) removes them. The reference is a plain
dictionary of the table, applied row by row; the trace must equal it at every time.
Late rows are refused with a message that says what to do.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import cli, jsonl, ok, write


def at(store: str, trace: str, t: int) -> dict:
    rows = jsonl(ok(cli(store, "query", trace, "--as-of", str(t), "--json")).stdout)
    return {tuple(v for k, v in r.items() if k != "count"): r["count"] for r in rows}


def reference(table: dict) -> dict:
    """A keyed table {key: row} as a collection {row: 1}."""
    return {row: 1 for row in table.values()}


@pytest.fixture
def airports(tmp_path):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "airports",
           write(tmp_path / "a.csv", "faa,name,alt,time\nJFK,Kennedy,13,1\nLGA,LaGuardia,22,1\nEWR,Newark,18,1\n")))
    table = {"JFK": ("JFK", "Kennedy", 13), "LGA": ("LGA", "LaGuardia", 22), "EWR": ("EWR", "Newark", 18)}
    return s, table


def test_upsert_replaces_the_live_row_of_each_key_at_the_rows_time(airports, tmp_path):
    s, table = airports
    day1 = dict(table)
    fix = write(tmp_path / "fix.csv", "faa,name,alt\nJFK,John F Kennedy,13\nBOS,Logan,20\nEWR,Newark,18\n")
    res = ok(cli(s, "ingest", "airports", fix, "--time", "3", "--upsert", "faa", "--json"))
    rec = jsonl(res.stdout)[0]
    assert rec["upserted"] == 3 and rec["retracted"] == 2  # JFK's and EWR's old rows (EWR's comes back)
    table.update({"JFK": ("JFK", "John F Kennedy", 13), "BOS": ("BOS", "Logan", 20)})
    assert at(s, "airports", 2) == reference(day1)  # the past is untouched
    assert at(s, "airports", 3) == reference(table)
    # restating a row unchanged writes no update for it
    hist = jsonl(ok(cli(s, "history", "airports", "--where", "faa = 'EWR'", "--json")).stdout)
    assert [(h["time"], h["diff"]) for h in hist] == [(1, 1)]


def test_upsert_of_a_key_at_several_times_replaces_each_row_by_the_next(airports, tmp_path):
    s, table = airports
    f = write(tmp_path / "f.csv", "faa,name,alt,time\nJFK,K2,13,5\nJFK,K1,13,4\nLGA,L1,22,5\n")
    ok(cli(s, "ingest", "airports", f, "--upsert", "faa"))
    expected = {}
    for t, faa, name in [(4, "JFK", "K1"), (5, "JFK", "K2"), (5, "LGA", "L1")]:
        table[faa] = (faa, name, table[faa][2])
        expected[t] = reference(table)
    assert at(s, "airports", 4) == expected[4]
    assert at(s, "airports", 5) == expected[5]


def test_upsert_retracts_every_copy_of_a_live_row_and_works_with_null_keys(tmp_path):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "t", write(tmp_path / "a.csv", "k,v,time,diff\na,1,1,2\n\\N,5,1,1\nb,2,1,1\n")))
    ok(cli(s, "ingest", "t", write(tmp_path / "b.csv", "k,v\na,7\n\\N,6\n"), "--time", "2", "--upsert", "k"))
    assert at(s, "t", 2) == {("a", 7): 1, (None, 6): 1, ("b", 2): 1}


def test_delete_by_key_removes_the_live_rows_and_ignores_unknown_keys(airports, tmp_path):
    s, table = airports
    day1 = dict(table)
    res = ok(cli(s, "ingest", "airports", write(tmp_path / "d.csv", "faa\nLGA\nXXX\n"),
                 "--time", "4", "--delete", "faa", "--json"))
    assert jsonl(res.stdout)[0]["deleted"] == 2 and jsonl(res.stdout)[0]["retracted"] == 1
    del table["LGA"]
    assert at(s, "airports", 3) == reference(day1)
    assert at(s, "airports", 4) == reference(table)


@pytest.mark.parametrize("args, text, words", [
    (["--upsert", "faa"], "faa,name,alt\nJFK,A,1\nJFK,B,2\n", ["2 rows", "faa='JFK'", "at time 3"]),
    (["--upsert", "nope"], "faa,name,alt\nJFK,A,1\n", ["--upsert", "'nope'"]),
    (["--delete", "faa"], "faa,name,alt\nJFK,A,1\n", ["unexpected column 'name'"]),
    (["--upsert", "faa", "--delete", "faa"], "faa,name,alt\nJFK,A,1\n", ["not both"]),
])
def test_bad_upserts_are_one_line_errors_that_change_nothing(airports, tmp_path, digest, args, text, words):
    s, _ = airports
    before = digest(s)
    res = cli(s, "ingest", "airports", write(tmp_path / "bad.csv", text), "--time", "3", *args)
    assert res.exit_code == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    for w in words:
        assert w in res.stderr
    assert digest(s) == before


def test_delete_from_a_trace_that_does_not_exist_is_refused(tmp_path, digest):
    s = str(tmp_path / "store")
    res = cli(s, "ingest", "nothing", write(tmp_path / "d.csv", "faa\nLGA\n"), "--time", "1", "--delete", "faa")
    assert res.exit_code == 2 and "nothing to delete" in res.stderr


def test_a_late_row_says_how_to_correct_the_past(airports, tmp_path, digest):
    s, _ = airports
    before = digest(s)
    res = cli(s, "ingest", "airports", write(tmp_path / "late.csv", "faa,name,alt,time\nJFK,X,1,1\n"))
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "not beyond the upper 2" in res.stderr
    assert "at a time beyond the upper (e.g. at time 2)" in res.stderr and "--upsert" in res.stderr
    assert digest(s) == before


def _at2(store: str, t: str) -> dict:
    rows = jsonl(ok(cli(store, "query", "dims", "--as-of", t, "--json")).stdout)
    return {r["k"]: r["v"] for r in rows if r["count"] == 1}


def test_upsert_with_tuple_times_replaces_a_keys_rows_in_time_order(tmp_path):
    """d = 2: one file may give a key at several ordered times; each row replaces the
    previous one from its own time on, and times that see only the earlier rows keep them."""
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "dims", write(tmp_path / "a.csv", "k,v,time_0,time_1\na,1,0,0\nb,1,0,0\n"),
           "--upper", "(1,0)"))
    f = write(tmp_path / "u.csv", "k,v,time_0,time_1\na,4,2,2\na,2,1,0\nb,5,1,1\na,3,1,2\n")
    ok(cli(s, "ingest", "dims", f, "--upsert", "k", "--upper", "(3,0)"))
    expected = {"(0,5)": {"a": 1, "b": 1}, "(1,0)": {"a": 2, "b": 1}, "(1,1)": {"a": 2, "b": 5},
                "(1,2)": {"a": 3, "b": 5}, "(2,0)": {"a": 2, "b": 1}, "(2,1)": {"a": 2, "b": 5},
                "(2,2)": {"a": 4, "b": 5}}
    for t, want in expected.items():
        assert _at2(s, t) == want, t


def test_upsert_of_a_key_at_incomparable_tuple_times_is_one_line_error(tmp_path, digest):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "dims", write(tmp_path / "a.csv", "k,v,time_0,time_1\na,1,0,0\n"), "--upper", "(1,0)"))
    before = digest(s)
    f = write(tmp_path / "u.csv", "k,v,time_0,time_1\na,2,2,0\nb,1,1,5\na,3,1,5\n")
    res = cli(s, "ingest", "dims", f, "--upsert", "k")
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "key k='a' at incomparable times (1,5) and (2,0)" in res.stderr
    assert digest(s) == before
