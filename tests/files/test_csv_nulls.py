"""Nulls in CSV files, and retractions that match no live row.

CSV cannot say null by itself: ddcli reads ``\\N`` (or the text given with ``--null``) as
null, and an empty field of a column that is not text as null. A retraction that does not
restate a live row exactly drives that row's count below zero: ``ingest`` says so on
stderr, or refuses with ``--strict``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers.cli import cli, jsonl, ok, write


def collection(store: str, trace: str) -> dict:
    """The collection at the latest time, as {row tuple: count}, nulls as None."""
    rows = jsonl(ok(cli(store, "query", trace, "--json")).stdout)
    return {tuple(v for k, v in r.items() if k != "count"): r["count"] for r in rows}


def test_a_csv_retraction_with_the_null_marker_cancels_a_parquet_row_with_a_null(tmp_path):
    s = str(tmp_path / "store")
    flights = pa.table({"tailnum": pa.array([None, "N1", None], pa.string()),
                        "dep_delay": pa.array([5, None, 7], pa.int64()),
                        "time": pa.array([1, 1, 1], pa.int64())})
    pq.write_table(flights, tmp_path / "day1.parquet")
    ok(cli(s, "ingest", "flights", str(tmp_path / "day1.parquet")))
    fix = write(tmp_path / "fix.csv", "tailnum,dep_delay,time,diff\n\\N,5,2,-1\nN1,,2,-1\n")
    res = ok(cli(s, "ingest", "flights", fix, "--json"))
    assert jsonl(res.stdout)[0]["unmatched_retractions"] == 0
    assert "warning" not in res.stderr
    assert collection(s, "flights") == {(None, 7): 1}


def test_null_option_names_the_marker_for_every_column_and_the_empty_string_stays_text(tmp_path):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "t", write(tmp_path / "a.csv", "name,n,time\nNA,1,1\n,NA,1\nx,,1\n"), "--null", "NA"))
    assert collection(s, "t") == {(None, 1): 1, ("", None): 1, ("x", None): 1}
    status = jsonl(ok(cli(s, "status", "t", "--json")).stdout)[0]
    assert status["columns"] == "name:string, n:int64"


def test_the_default_marker_is_backslash_n_and_an_empty_text_field_is_the_empty_string(tmp_path):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "t", write(tmp_path / "a.csv", "name,n,time\n\\N,1,1\n,2,1\n")))
    assert collection(s, "t") == {(None, 1): 1, ("", 2): 1}


def test_a_retraction_matching_no_live_row_is_reported_on_stderr(tmp_path):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "t", write(tmp_path / "a.csv", "name,time\n\\N,1\nb,1\n")))
    # "" is not null: this retraction matches nothing (nor does "zz")
    res = ok(cli(s, "ingest", "t", write(tmp_path / "b.csv", "name,time,diff\n,2,-1\nzz,2,-2\nb,2,-1\n"), "--json"))
    assert jsonl(res.stdout)[0]["unmatched_retractions"] == 2
    assert res.stderr.startswith("warning: ") and res.stderr.count("\n") == 1
    assert "2 retractions match no live row" in res.stderr and "name=''" in res.stderr
    assert collection(s, "t") == {(None,): 1, ("",): -1, ("zz",): -2}


def test_strict_refuses_a_retraction_matching_no_live_row_and_changes_nothing(tmp_path, digest):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "t", write(tmp_path / "a.csv", "name,time\na,1\n")))
    before = digest(s)
    res = cli(s, "ingest", "t", write(tmp_path / "b.csv", "name,time,diff\na,2,-1\na,2,-1\n"), "--strict")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "1 retraction matches no live row" in res.stderr and "name='a' (count -1)" in res.stderr
    assert digest(s) == before
    # an exact retraction passes --strict
    ok(cli(s, "ingest", "t", write(tmp_path / "c.csv", "name,time,diff\na,2,-1\n"), "--strict"))
    assert collection(s, "t") == {}
