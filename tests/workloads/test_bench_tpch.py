"""``ddcli bench tpch`` end to end at a tiny scale, and the check it makes of ddcli's outputs.

The command runs as a user runs it (its own work folder, warm engine and cache; three of the
queries, to keep it within minutes) and must write a JSON file holding every aim of the TPC-H
benchmark, each with a verdict, and a PNG; its check of ddcli's outputs against DuckDB must
find a difference where there is one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from ddcli.bench.tpch.engines import same_bag

AIMS = {"outputs_equal_duckdb", "refresh_under_duckdb", "slow_queries_refresh_under_duckdb",
        "refresh_ingest_under_duckdb", "base_ingest_default_2gb", "refresh_follows_change", "cold_refresh",
        "first_run_vs_spark_sql", "other_benchmarks_keep_their_aims"}


def test_the_check_finds_a_difference():
    rows = [(1, "a", Decimal("1.50"), 0.1 + 0.2), (2, None, Decimal("2"), 1e300)]
    assert same_bag(rows, list(reversed(rows))) is None
    assert same_bag(rows, [(1, "a", Decimal("1.5"), 0.3), rows[1]]) is None  # doubles within 1e-9
    assert same_bag(rows, [(1, "a", Decimal("1.51"), 0.3), rows[1]])  # decimals exactly
    assert same_bag(rows, [(1, "a", Decimal("1.50"), 0.3000001), rows[1]])
    assert same_bag(rows, rows + [rows[0]])  # a bag: multiplicities count
    assert same_bag(rows, [rows[0], (2, "", Decimal("2"), 1e300)])  # null is not the empty string


@pytest.mark.slow
def test_bench_tpch_writes_every_aim(tmp_path):
    out, png = tmp_path / "tpch.json", tmp_path / "tpch.png"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDCLI_SERVICE")}
    res = subprocess.run([sys.executable, "-m", "ddcli", "bench", "tpch", "--scale", "0.002", "--refreshes", "1",
                          "--queries", "q01,q13,q17",
                          "--cache", str(tmp_path / "cache"), "--dir", str(tmp_path / "work"),
                          "--out", str(out), "--plot", str(png)], env=env, capture_output=True, text=True,
                         timeout=1800, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    figures = json.loads(out.read_text())
    assert set(figures["aims"]) == AIMS
    for name, aim in figures["aims"].items():
        assert aim["met"] in (True, False, None) and aim["aim"] and aim["measured"], name
    assert figures["aims"]["outputs_equal_duckdb"]["met"] is True, figures["base"]["mismatches"]
    assert [s["mode"] for s in figures["steps"]] == ["warm", "cold"]
    assert list(figures["per_query"]) == ["q01", "q13", "q17"]
    assert all(q["duckdb_recompute_s"] is not None and q["ddcli_refresh_s"] is not None
               for q in figures["per_query"].values())
    assert figures["spark_sql"]["seconds"] > 0 and not any("error" in q for q in figures["spark_sql"]["queries"].values())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not os.listdir(tmp_path / "work" / "svc") or all(
        not name.endswith(".sock") for name in os.listdir(tmp_path / "work" / "svc"))


def test_an_unknown_query_is_refused_before_any_work(tmp_path):
    res = subprocess.run([sys.executable, "-m", "ddcli", "bench", "tpch", "--queries", "q01,q23",
                          "--dir", str(tmp_path / "work")], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "q23" in res.stderr, res.stderr
    assert not (tmp_path / "work").exists()
