"""``verify`` is an independent oracle: it shares no operator code with ``run``,
checks every time the outputs can tell apart, and says how many it checked.

A bug planted in the engine's operator code (here: ``negate`` that forgets to negate)
corrupts what ``run`` writes; a verify built from the same code would agree with it, the
oracle does not.
"""

from __future__ import annotations

import json

import pytest

from ops.dataflow.builder import Pipeline
from ops.errors import PipelineError
from ops.verify.verify import verify_pipeline
from storage.store import Store
from tests.helpers.cli import cli, ok, write

WORDS = [("a", 1, 1), ("bb", 1, 1), ("a", 2, 1), ("ccc", 4, 1), ("bb", 6, -1), ("dd", 9, 1), ("a", 9, 1)]

EVERY_OPERATOR = '''
import numpy as np
import pyarrow as pa

from ops.dataflow.windows import lag, row_number, running_sum


def firsts(rows):
    words = rows.column("word").to_pylist()
    return pa.table({"first": pa.array([min(words)] if words else [], pa.string())})


def pipeline(p):
    words = p.input("words")
    lengths = p.input("lengths")
    w = words.select("word", n="cast(length(word) as bigint)").arrange(by="word")
    short = w.filter("n < 3")
    letters = w.flat_map("letter", "split(word, '')", keep=["word"]).filter("letter != ''")
    both = short.concat(w.negate(), w).consolidate()
    named = w.join(lengths, on="n")
    known = w.semijoin(lengths, on="n")
    unknown = w.antijoin(lengths, on="n")
    p.output("o_linear", both.concat(letters.select("word", n="length(letter)")))
    p.output("o_join", named)
    p.output("o_semi", known.concat(unknown.negate()))
    p.output("o_count", w.count(by="n"))
    p.output("o_sum", w.sum(by="word", column="n"))
    p.output("o_min", w.min(by="n", column="word"))
    p.output("o_max", w.max(by="n", column="word"))
    p.output("o_cd", letters.count_distinct(by="letter"))
    p.output("o_top", w.top_k(by="n", k=1, order_by="word", descending=True))
    p.output("o_perkey", w.reduce_per_key(by="n", fn=firsts))
    p.output("o_window", w.window([], "word", r=row_number(), prev=lag("n"), run=running_sum("n")))
    p.output("o_distinct", letters.select("letter").distinct())
    p.output("o_threshold", letters.select("letter").threshold(lambda c: np.minimum(c, 1)))
    p.output("o_delta", p.delta_join([(w, "word", "n"), (lengths, "n", "label")]))
    # a fixed point: every number reachable by halving the word lengths
    halves = w.select(n="n").iterate(lambda x: x.concat(x.select(n="n / 2").select(n="cast(n as int)")).distinct())
    p.output("o_loop", halves)
'''
LENGTHS = [(1, "one", 0, 1), (2, "two", 3, 1), (3, "three", 5, 1), (2, "two", 8, -1)]


@pytest.fixture
def words_store(spark, tmp_path):
    store = str(tmp_path / "store")
    rows = "".join(f"{w},{t},{d}\n" for w, t, d in WORDS)
    ok(cli(store, "ingest", "words", write(tmp_path / "w.csv", "word,time,diff\n" + rows)))
    return store


def test_verify_checks_every_distinct_time_and_says_how_many(words_store, tmp_path):
    path = write(tmp_path / "wc.py", 'def pipeline(p):\n    p.output("counts", p.input("words").count(by="word"))\n')
    ok(cli(words_store, "run", path))
    rec = json.loads(ok(cli(words_store, "verify", path, "--json")).stdout)
    # every distinct input time, and the since (0) that stands for the times before them
    distinct_times = sorted({0} | {t for _, t, _ in WORDS})
    assert rec["ok"] and rec["times"] == [str(t) for t in distinct_times]
    res = ok(cli(words_store, "verify", path))
    assert f"verified at {len(distinct_times)} time(s)" in res.stdout


def test_the_oracle_sees_a_bug_in_the_engines_operator_code(words_store, tmp_path, monkeypatch):
    from ops.operators import linear
    path = write(tmp_path / "anti.py", 'def pipeline(p):\n    w = p.input("words")\n'
                                      '    p.output("rest", w.concat(w.filter("word = \'a\'").negate()))\n')
    monkeypatch.setattr(linear, "negate", lambda ctx, df: df)  # the planted bug
    monkeypatch.setenv("DDCLI_DRIVER_ROWS", "0")  # in Spark's code: no run in the driver
    ok(cli(words_store, "run", path))
    v = verify_pipeline(Store(words_store), path)
    assert not v.ok, "verify agreed with a run whose negate did nothing"
    d = v.differences[0]
    assert d.output == "rest" and d.row == {"word": "a"} and d.expected == 0 and d.found == 2


def test_every_operator_verifies(words_store, tmp_path):
    rows = "".join(f"{n},{label},{t},{d}\n" for n, label, t, d in LENGTHS)
    ok(cli(words_store, "ingest", "lengths", write(tmp_path / "l.csv", "n,label,time,diff\n" + rows), "--upper", "10"))
    path = write(tmp_path / "every.py", EVERY_OPERATOR)
    ok(cli(words_store, "run", path))
    v = verify_pipeline(Store(words_store), path)
    assert v.ok, v.differences[0].describe()
    assert len(v.times) == len({0} | {t for *_, t, _ in WORDS} | {t for *_, t, _ in LENGTHS})


def test_an_operator_the_oracle_does_not_know_is_refused_in_one_line():
    from ops.verify.oracle import check_supported
    p = Pipeline("future")
    w = p.input("words")
    p._add("enter_at", [w.node], {"priority": "n"})
    with pytest.raises(PipelineError, match=r"verify does not support enter_at yet$"):
        check_supported(p)



def test_doubles_compare_within_a_relative_tolerance_so_the_first_real_difference_is_named(
        words_store, tmp_path, monkeypatch):
    from pyspark.sql import functions as F

    from ops.operators import linear
    path = write(tmp_path / "thirds.py", 'def pipeline(p):\n'
                                         '    w = p.input("words").select("word", x="length(word) / 3.0D")\n'
                                         '    p.output("o", w.concat(w.filter("word = \'dd\'").negate()))\n')
    select = linear.select
    # the planted faults: every double off in its last bits (as an engine summing in another
    # order), and a negate that does nothing (a real fault, first at time 9)
    monkeypatch.setattr(linear, "select", lambda *a: select(*a).withColumn("x", F.col("x") * (1 + 1e-12)))
    monkeypatch.setattr(linear, "negate", lambda ctx, df: df)
    monkeypatch.setenv("DDCLI_DRIVER_ROWS", "0")  # in Spark's code: no run in the driver
    ok(cli(words_store, "run", path))
    v = verify_pipeline(Store(words_store), path)
    first = v.differences[0]
    assert first.time == (9,), first.describe()
    # the close doubles were paired, not reported as one missing and one extra row
    assert first.row == {"word": "dd", "x": pytest.approx(2 / 3, rel=1e-9)} and (first.expected, first.found) == (0, 2)
    assert all(d.row["word"] == "dd" for d in v.differences), [d.describe() for d in v.differences]


def test_doubles_further_apart_than_the_tolerance_are_not_paired(spark):
    from ops.verify.oracle import AT
    from ops.verify.verify import TOLERANCE, _paired_within_tolerance

    def frame(rows):  # (time, k, x, expected count, found count)
        return spark.createDataFrame(rows, f"{AT} long, k string, x double, _expected long, _found long")
    close, far = 1.0 + TOLERANCE / 10, 3.0 * (1 + TOLERANCE * 10)
    diffs = frame([(0, "a", 1.0, 1, 0), (0, "a", close, 0, 1),  # paired: they cancel
                   (0, "b", 3.0, 1, 0), (0, "b", far, 0, 1),  # too far apart: both stay
                   (1, "a", 1.0, 1, 0), (1, "c", close, 0, 1),  # another k: both stay
                   (2, "a", 1.0, 1, 0), (2, "a", close, 0, 3)])  # paired, two more found
    got = {tuple(r) for r in _paired_within_tolerance(diffs, ["k", "x"]).collect()}
    assert got == {(0, "b", 3.0, 1, 0), (0, "b", far, 0, 1), (1, "a", 1.0, 1, 0), (1, "c", close, 0, 1),
                   (2, "a", 1.0, 1, 3)}
