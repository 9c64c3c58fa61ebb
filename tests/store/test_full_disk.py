"""A full disk (ENOSPC, injected with DDCLI_FAULT=point=enospc, see storage/faults.py).

An ingest that fails before its commit removes every file it wrote (no `.tmp-*`, no
orphan layer: the store is byte-identical, so a full disk does not stay full because of
us); an ingest whose commit succeeded but whose merge afterwards failed is a success with
a warning, its updates are there, and the next `compact` merges.
"""

from __future__ import annotations

import os

import pytest

from storage import faults
from tests.conftest import tree_digest
from tests.helpers.cli import WORD_UPDATES, WORDS, ddcli, ok, one_line_error, parse_csv


@pytest.fixture(autouse=True)
def _fresh_fault_counts(monkeypatch):
    monkeypatch.setattr(faults, "_hits", {})


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    return store


def _stray_files(store: str) -> list[str]:
    return [os.path.join(r, f) for r, _, fs in os.walk(store) for f in fs if f.startswith(".tmp")]


def _counts(store: str) -> dict:
    return {r["word"]: int(r["count"]) for r in parse_csv(ok(ddcli(store, "query", "words", "-f", "csv")).stdout)}


@pytest.mark.parametrize("point", ["layer.before_fsync", "layer.before_rename", "log.before_link"])
def test_an_ingest_on_a_full_disk_leaves_the_store_byte_identical(words, point):
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "words", str(WORDS[1]), env={"DDCLI_FAULT": f"{point}=enospc"}),
                         code=1)
    assert "No space left on device" in err and "internal error" not in err
    assert tree_digest(words) == before
    assert _stray_files(words) == []


def test_a_first_ingest_on_a_full_disk_leaves_no_stray_file_and_a_small_one_then_works(tmp_path):
    store = str(tmp_path / "store")
    one_line_error(ddcli(store, "ingest", "words", str(WORDS[0]), env={"DDCLI_FAULT": "layer.before_fsync=enospc"}),
                   code=1)
    assert _stray_files(store) == []
    assert not os.path.exists(os.path.join(store, "log")) or not os.listdir(os.path.join(store, "log"))
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("word,time\nfig,0\n")
    ok(ddcli(store, "ingest", "words", str(tiny)))
    assert _counts(store) == {"fig": 1}


def test_a_committed_ingest_whose_merge_hits_a_full_disk_succeeds_with_a_warning(words):
    from storage.store import Store
    assert len(Store(words).trace("words").layers) == 1
    # the ingest writes its layer (1st layer write), the merge after its commit the 2nd
    r = ddcli(words, "ingest", "words", str(WORDS[1]), env={"DDCLI_FAULT": "layer.before_fsync@2=enospc"})
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("warning: ") and r.stderr.count("\n") == 1
    assert "merging layers after the commit failed" in r.stderr and "updates are committed" in r.stderr
    assert _stray_files(words) == []
    assert len(Store(words).trace("words").layers) == 2  # not merged
    want = {}
    for (word,), _, diff in WORD_UPDATES:
        want[word] = want.get(word, 0) + diff
    assert _counts(words) == {w: c for w, c in want.items() if c}
    # the merge is retried later
    ok(ddcli(words, "compact"))
    assert len(Store(words).trace("words").layers) == 1
    assert _counts(words) == {w: c for w, c in want.items() if c}


def test_a_merge_by_key_ranges_that_hits_a_full_disk_leaves_none_of_its_files(words, monkeypatch):
    """A merge over DDCLI_MERGE_ROWS writes a file per key range: a full disk at its second
    file leaves neither (the layers stay as they were), and the next compact merges."""
    from storage import layer as layer_mod
    from storage.store import Store
    monkeypatch.setattr(layer_mod, "ROW_GROUP_ROWS", 2)
    monkeypatch.setenv("DDCLI_MERGE_ROWS", "4")
    # the ingest writes its layer (1st layer write), the merge its first range (2nd), then fails
    r = ddcli(words, "ingest", "words", str(WORDS[1]), env={"DDCLI_FAULT": "layer.before_fsync@3=enospc"})
    assert r.exit_code == 0 and "merging layers after the commit failed" in r.stderr, r.stderr
    st = Store(words)
    folder = st.trace_dir("words")

    def files_in_folder():
        return {f for f in os.listdir(folder) if f.endswith(".parquet")}

    assert files_in_folder() == {f.name for l in st.trace("words").layers for f in l.files}
    assert _stray_files(words) == [] and len(st.trace("words").layers) == 2
    want = {}
    for (word,), _, diff in WORD_UPDATES:
        want[word] = want.get(word, 0) + diff
    ok(ddcli(words, "compact", "--grace", "0"))
    (merged,) = Store(words).trace("words").layers
    assert len(merged.files) > 1 and files_in_folder() == {f.name for f in merged.files}
    assert _counts(words) == {w: c for w, c in want.items() if c}
