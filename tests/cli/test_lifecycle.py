"""A pipeline's life in a store: listing, dropping, rebuilding an edited
pipeline, and chains of pipelines (one reading another's output).

References are plain Python folds of the update rows; they import nothing of ddcli.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from storage.store import Store
from tests.helpers.cli import cli, jsonl, ok, write

WORDCOUNT = """
def pipeline(p):
    p.output("counts", p.input("words").filter("length(word) > 0").count(by="word"))
"""
# the same pipeline, edited: words longer than one letter only
WORDCOUNT_EDITED = """
def pipeline(p):
    p.output("counts", p.input("words").filter("length(word) > 1").count(by="word"))
"""
# downstream of the word count: how many words occur n times
HISTOGRAM = """
def pipeline(p):
    p.output("histogram", p.input("counts").select(n="count").count(by="n"))
"""

WORDS_1 = [("a", 1, 1), ("bb", 1, 1), ("a", 2, 1), ("cc", 2, 1), ("bb", 3, 1), ("a", 3, -1)]
WORDS_2 = [("dd", 4, 1), ("a", 5, 1), ("cc", 5, -1), ("bb", 6, 1), ("dd", 6, 1)]


def words_file(path, rows) -> str:
    return write(path, "word,time,diff\n" + "".join(f"{w},{t},{d}\n" for w, t, d in rows))


def fold_counts(rows, t, keep=lambda w: True) -> Counter:
    """The word count at time t: {(word, count): 1}."""
    acc = Counter()
    for w, s, d in rows:
        if s <= t and keep(w):
            acc[w] += d
    return Counter({(w, n): 1 for w, n in acc.items() if n})


def fold_histogram(rows, t) -> Counter:
    """How many words occur n times, at time t: {(n, words): 1}."""
    per_n = Counter(n for (_, n) in fold_counts(rows, t))
    return Counter({(n, k): 1 for n, k in per_n.items()})


def query(store: str, trace: str, t: int) -> Counter:
    rows = jsonl(ok(cli(store, "query", trace, "--as-of", str(t), "--json")).stdout)
    out = Counter()
    for r in rows:
        mult = r.pop("multiplicity", None) if "multiplicity" in r else r.pop("count")
        out[tuple(r.values())] += mult
    return out


@pytest.fixture
def wc(spark, tmp_path):
    """A store with words ingested at times 1..3 and the word count run once."""
    store = str(tmp_path / "store")
    ok(cli(store, "ingest", "words", words_file(tmp_path / "w1.csv", WORDS_1)))
    path = write(tmp_path / "wc.py", WORDCOUNT)
    ok(cli(store, "run", path))
    return store, path


# ------------------------------------------------------------------ listing


def test_pipelines_lists_file_hash_inputs_holds_outputs_state_and_lag(wc, tmp_path):
    store, path = wc
    import hashlib
    (rec,) = jsonl(ok(cli(store, "pipelines", "--json")).stdout)
    assert rec["pipeline"] == "wc" and rec["file"] == os.path.abspath(path)
    with open(path, "rb") as fh:
        assert rec["file_hash"] == hashlib.sha256(fh.read()).hexdigest()[:16]
    assert rec["inputs"] == "words" and rec["holds"] == "words@4" and rec["outputs"] == "counts"
    assert rec["state_traces"] >= 1 and rec["state_rows"] > 0 and rec["runs"] == 1
    assert rec["lag_updates"] == 0
    ok(cli(store, "ingest", "words", words_file(tmp_path / "w2.csv", WORDS_2)))
    (rec,) = jsonl(ok(cli(store, "pipelines", "--json")).stdout)
    assert rec["lag_updates"] == len(WORDS_2)


# ------------------------------------------------------------------ dropping


def test_drop_releases_holds_and_removes_state_and_outputs_in_one_commit(wc):
    store, _ = wc
    st = Store(store)
    before = st.state()
    state_traces = [n for n in before.traces if n.startswith("wc.")]
    assert state_traces and "wc" in before.traces["words"].holds
    res = jsonl(ok(cli(store, "drop", "wc", "--json")).stdout)[0]
    assert res["removed_outputs"] == ["counts"] and res["released_holds"] == ["words"]
    after = st.state()
    assert after.version == before.version + 1
    assert "wc" not in after.pipelines and not after.traces["words"].holds
    assert not [n for n in after.traces if n.startswith("wc.") or n == "counts"]
    # the released input compacts past where the pipeline held it
    ok(cli(store, "advance", "words", "--since", "3"))
    assert st.trace("words").effective_since().elements == ((3,),)
    # and the dropped traces' files are garbage
    ok(cli(store, "compact", "--grace", "0"))
    assert not os.path.exists(st.trace_dir("counts")) or not os.listdir(st.trace_dir("counts"))


def test_drop_keep_outputs_leaves_them_readable_as_ordinary_traces(wc):
    store, _ = wc
    ok(cli(store, "drop", "wc", "--keep-outputs"))
    st = Store(store)
    assert st.trace("counts").owner is None and not st.trace("words").holds
    assert query(store, "counts", 3) == fold_counts(WORDS_1, 3)


def test_drop_refuses_unknown_pipelines_and_outputs_other_pipelines_read(wc, tmp_path, digest):
    store, _ = wc
    res = cli(store, "drop", "nope")
    assert res.exit_code == 2 and "unknown pipeline 'nope'" in res.stderr and res.stderr.count("\n") == 1
    ok(cli(store, "run", write(tmp_path / "hist.py", HISTOGRAM)))
    snap = digest(store)
    res = cli(store, "drop", "wc")
    assert res.exit_code == 2 and "input of pipeline 'hist'" in res.stderr and res.stderr.count("\n") == 1
    assert digest(store) == snap


# ------------------------------------------------------------------ an edited pipeline


def test_an_edited_pipeline_says_what_to_do_and_rebuild_replaces_its_outputs(wc, tmp_path, digest):
    store, path = wc
    write(path, WORDCOUNT_EDITED)
    snap = digest(store)
    res = cli(store, "run", path)
    assert res.exit_code == 2 and "--rebuild" in res.stderr and "ddcli drop wc" in res.stderr
    assert digest(store) == snap
    before = Store(store).state().version
    ok(cli(store, "run", path, "--rebuild"))
    st = Store(store)
    assert st.state().version == before + 1, "a rebuild is one commit"
    for t in (1, 2, 3):
        assert query(store, "counts", t) == fold_counts(WORDS_1, t, keep=lambda w: len(w) > 1), t
    # later runs are incremental again, from the rebuilt state
    ok(cli(store, "ingest", "words", words_file(tmp_path / "w2.csv", WORDS_2)))
    ok(cli(store, "run", path))
    for t in range(1, 7):
        assert query(store, "counts", t) == fold_counts(WORDS_1 + WORDS_2, t, keep=lambda w: len(w) > 1), t
    assert jsonl(ok(cli(store, "verify", path, "--json")).stdout)[0]["ok"]


# ------------------------------------------------------------------ chains of pipelines


def test_a_chain_of_pipelines_is_exact_at_every_time_and_holds_the_upstream_history(wc, tmp_path):
    store, path = wc
    hist = write(tmp_path / "hist.py", HISTOGRAM)
    ok(cli(store, "run", hist))
    st = Store(store)
    assert "hist" in st.trace("counts").holds
    for t in (1, 2, 3):
        assert query(store, "histogram", t) == fold_histogram(WORDS_1, t), t

    # new words; the upstream runs and gives up its history up to its new frontier, while
    # the downstream pipeline has not consumed it yet: the hold keeps it
    ok(cli(store, "ingest", "words", words_file(tmp_path / "w2.csv", WORDS_2)))
    ok(cli(store, "run", path))
    ok(cli(store, "advance", "counts", "--since", "7"))
    ok(cli(store, "compact", "counts"))
    assert st.trace("counts").effective_since().elements == ((4,),), "the downstream hold keeps the history"
    ok(cli(store, "run", hist))
    rows = WORDS_1 + WORDS_2
    for t in range(1, 7):
        assert query(store, "histogram", t) == fold_histogram(rows, t), t
    assert st.trace("counts").effective_since().elements == ((7,),), "consumed, the history is released"
    assert jsonl(ok(cli(store, "verify", hist, "--json")).stdout)[0]["ok"]
