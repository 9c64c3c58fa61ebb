"""Fast feedback: column mistakes and arguments of the wrong kind are reported before the
JVM starts.

Each bad pipeline runs in a real process with progress lines on (``DDCLI_PROGRESS=1``):
stderr must be the one error line and nothing else — in particular not the
"starting Spark" line a run prints before it starts the JVM.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO as ROOT

CASES = {
    "typo_in_reduce_key": ('p.output("o", p.input("flights").count(by="carier"))',
                           "unknown column 'carier' in reduce key"),
    "sum_of_a_missing_column": ('p.output("o", p.input("flights").sum(by="carrier", column="delay"))',
                                "column 'delay' is not a value column"),
    "join_key_types_differ": ('p.output("o", p.input("flights").join(p.input("planes"), on="tailnum"))',
                              "join key 'tailnum' is string on the left but bigint on the right"),
    "typo_after_a_select": ('p.output("o", p.input("flights").select("carrier", d="dep_delay * 2")'
                            '.max(by="carrier", column="dd"))', "column 'dd' is not a value column"),
    # arguments of the wrong kind: refused when declared, not as a Py4JError once Spark runs
    "filter_of_a_number": ('p.output("o", p.input("flights").filter(123))',
                           "filter (filter_of_a_number.py:2): the condition must be a SQL expression"),
    "select_of_a_number": ('p.output("o", p.input("flights").select("carrier", d=4.5))',
                           "select (select_of_a_number.py:2): column 'd' must be a SQL expression"),
    "join_on_a_number": ('p.output("o", p.input("flights").join(p.input("planes"), on=7))',
                         "join (join_on_a_number.py:2): on must be a column name (a string), got 7"),
    "count_by_none": ('p.output("o", p.input("flights").count(by=[None]))',
                      "reduce (count_by_none.py:2): by must be a column name"),
    "top_k_of_zero": ('p.output("o", p.input("flights").top_k(by="carrier", k=0, order_by="dep_delay"))',
                      "top_k (top_k_of_zero.py:2): k must be a positive integer, got 0"),
    "threshold_of_a_number": ('p.output("o", p.input("flights").threshold(3))',
                              "threshold (threshold_of_a_number.py:2): expects a function, got 3"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("fast")
    s = str(root / "store")
    for trace, text in [("flights", "carrier,tailnum,dep_delay,time\nAA,N1,5,1\n"),
                        ("planes", "tailnum,seats,time\n1,100,1\n")]:
        (root / f"{trace}.csv").write_text(text)
        res = subprocess.run([sys.executable, "-m", "ddcli", "ingest", trace, str(root / f"{trace}.csv"),
                              "--store", s], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    return s


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_column_mistake_is_reported_before_spark_starts(store, tmp_path, name):
    body, expect = CASES[name]
    path = tmp_path / f"{name}.py"
    path.write_text(f"def pipeline(p):\n    {body}\n")
    env = dict(os.environ, DDCLI_PROGRESS="1")
    res = subprocess.run([sys.executable, "-m", "ddcli", "run", str(path), "--store", store], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert expect in res.stderr and f"{name}.py:2" in res.stderr
