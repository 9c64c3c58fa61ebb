"""Pipeline outputs are Delta tables too: read without ddcli they equal the reference.

Word count over a random stream of insertions and retractions (tests/helpers/operations.py):
after every run, compaction and garbage collection, delta-rs and polars reading the output
``counts`` at every time get what a plain-Python word count of the input gets there, and
what ``ddcli query --as-of`` says. A pipeline's operator state has no Delta table.
"""

from __future__ import annotations

import os

import pytest

from storage.sql.query import as_of
from storage.store import Store
from tests.helpers import REPO
from tests.helpers.delta_reader import delta_rs_at, polars_at
from tests.helpers.operations import WordStream, fold, run_ddcli, wordcount_reference
from tests.helpers.s3 import aws_env, new_prefix

WORDCOUNT = os.path.join(REPO, "sample_data", "pipelines", "wordcount.py")
# two outputs in each run's one commit, and a filtered collection kept as operator state
TWO_COUNTS = """
def pipeline(p):
    words = p.input("words")
    p.output("counts", words.count(by="word"))
    p.output("long_counts", words.filter("length(word) > 4").count(by="word"))
"""


def ddcli_at(store, name, t) -> dict:
    table = as_of(store, name, t)
    data, mult = table.column_names[:-1], table.column_names[-1]
    return {tuple(r[c] for c in data): r[mult] for r in table.to_pylist()}


def assert_outputs_follow(store, stream) -> None:
    counts, words = store.trace_dir("counts"), store.trace_dir("words")
    trace = store.trace("counts")
    assert trace.upper == store.trace("words").upper
    for t in range(trace.since.elements[0][0], trace.upper.elements[0][0]):
        want = wordcount_reference(stream.updates, (t,))
        assert delta_rs_at(counts, (t,)) == want, f"delta-rs, counts at {t}"
        assert polars_at(counts, (t,)) == want, f"polars, counts at {t}"
        assert ddcli_at(store, "counts", t) == want, f"ddcli query --as-of {t}"
        assert delta_rs_at(words, (t,)) == {(w,): n for (w,), n in fold(stream.updates, (t,)).items()}


def test_run_outputs_read_as_delta_tables_equal_the_reference_through_compaction(spark, tmp_path):
    from ops.run.run import run_pipeline
    path = tmp_path / "two_counts.py"
    path.write_text(TWO_COUNTS)
    store = Store(str(tmp_path / "store"))
    stream = WordStream(str(tmp_path), seed=11)
    for epoch in range(4):
        store.ingest("words", [stream.next_file()])
        if epoch != 1:  # two epochs in one run too
            run_pipeline(store, str(path))
        if epoch == 2:
            store.compact(full=True, grace_seconds=0)
            store.advance("counts", since="4")
    assert_outputs_follow(store, stream)
    long_counts = store.trace_dir("long_counts")
    for t in range(store.trace("long_counts").upper.elements[0][0]):
        want = {k: v for k, v in wordcount_reference(stream.updates, (t,)).items() if len(k[0]) > 4}
        assert polars_at(long_counts, (t,)) == want == ddcli_at(store, "long_counts", t)
    private = [n for n in store.state().traces if "." in n]
    assert private, "the pipeline keeps operator state"
    for n in private:
        assert not os.path.exists(os.path.join(store.trace_dir(n), "_delta_log")), f"{n} is no table"


@pytest.mark.slow
def test_run_outputs_on_the_object_store_are_delta_tables(s3_env, tmp_path, monkeypatch):
    """The same through ``ddcli`` processes on an S3 store (a Spark start per run)."""
    loc = new_prefix()
    stream = WordStream(str(tmp_path), seed=12)
    env = aws_env(s3_env)
    for files in ([stream.next_file(), stream.next_file()], [stream.next_file()]):
        res = run_ddcli(["ingest", "words", *files], loc, env=env)
        assert res.returncode == 0, res.stderr
        res = run_ddcli(["run", WORDCOUNT], loc, env=env, timeout=600)
        assert res.returncode == 0, res.stderr
    res = run_ddcli(["compact", "--full", "--grace", "0"], loc, env=env)
    assert res.returncode == 0, res.stderr
    assert_outputs_follow(Store(loc), stream)
