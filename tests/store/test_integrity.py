"""Damage is reported as damage: exit code 5, one line, never a wrong answer.

Every layer file's size and SHA-256 (and its footer's) are recorded in the log at commit
and checked when the layer is read; layers carry Parquet page checksums; `ddcli check`
verifies everything. A missing layer, a flipped byte, a layer replaced by another valid
Parquet file: exit 5 (not 3, which a scheduler would retry forever), the store left as
it was. A damaged newest log version: reads fall back to the previous version with a
warning, writes refuse and say what to do.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from tests.cli.test_cli import WORDS, ddcli, ok, one_line_error, parse_csv
from tests.conftest import tree_digest

N_ROWS = 20_000


@pytest.fixture
def big(tmp_path):
    """A store with one trace of N_ROWS updates (several Parquet pages) and its expected counts."""
    rng = np.random.default_rng(7)
    words = [f"w{i % 2_000}" for i in range(N_ROWS)]
    times = rng.integers(0, 10, N_ROWS)
    diffs = rng.choice([1, 1, 2, -1], N_ROWS)
    src = tmp_path / "big.csv"
    pacsv.write_csv(pa.table({"word": words, "time": times, "diff": diffs}), src)
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "big", str(src)))
    want = Counter()
    for w, d in zip(words, diffs):
        want[w] += int(d)
    return store, {w: c for w, c in want.items() if c}


def _layer(store: str, trace: str) -> str:
    from storage.store import Store
    st = Store(store)
    return st.layer_paths(st.trace(trace))[0]


def _counts(result) -> dict:
    return {r["word"]: int(r["count"]) for r in parse_csv(ok(result).stdout)}


def _corrupt(result) -> str:
    err = one_line_error(result, code=5)
    assert "damaged" in err
    return err


def test_a_healthy_store_reads_right_and_checks_clean(big):
    store, want = big
    assert _counts(ddcli(store, "query", "big", "-f", "csv")) == want
    r = ok(ddcli(store, "check"))
    assert "no damage found" in r.stdout and "1 layer file" in r.stdout


def test_every_single_byte_flip_in_a_layer_is_damage_never_a_wrong_answer(big):
    store, want = big
    path = _layer(store, "big")
    good = open(path, "rb").read()
    size = len(good)
    for i in range(23):
        pos = i * (size - 1) // 22
        bad = bytearray(good)
        bad[pos] ^= 0x10
        with open(path, "wb") as fh:
            fh.write(bad)
        before = tree_digest(store)
        for args in (["query", "big"], ["history", "big"], ["sql", "SELECT word, SUM(diff) AS n FROM big GROUP BY word"]):
            r = ddcli(store, *args, "-f", "csv")
            assert r.exit_code == 5, (pos, args, r.exit_code, r.stdout[:200])
            _corrupt(r)
        err = _corrupt(ddcli(store, "check"))
        assert "1 problem" in err
        assert tree_digest(store) == before
    with open(path, "wb") as fh:
        fh.write(good)
    assert _counts(ddcli(store, "query", "big", "-f", "csv")) == want


def test_a_layer_replaced_by_another_valid_parquet_file_is_damage(big, tmp_path):
    store, _ = big
    other = str(tmp_path / "other")
    ok(ddcli(other, "ingest", "big", str(WORDS[0])))
    shutil.copyfile(_layer(other, "big"), _layer(store, "big"))
    before = tree_digest(store)
    err = _corrupt(ddcli(store, "query", "big"))
    assert _layer(store, "big") in err
    assert tree_digest(store) == before


def test_a_missing_layer_is_damage_not_a_conflict(big):
    store, _ = big
    path = _layer(store, "big")
    os.unlink(path)
    before = tree_digest(store)
    for args in (["query", "big"], ["history", "big"], ["sql", "SELECT COUNT(*) FROM big"]):
        err = _corrupt(ddcli(store, *args))
        assert "is missing" in err and path in err
    err = _corrupt(ddcli(store, "check"))
    assert tree_digest(store) == before


def test_a_damaged_layer_stops_a_merge_and_the_merge_changes_nothing(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    path = _layer(store, "words")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 3] ^= 0x01
    open(path, "wb").write(data)
    # an ingest with retractions reads the trace's rows first (are they live?): refused, nothing written
    before = tree_digest(store)
    err = _corrupt(ddcli(store, "ingest", "words", str(WORDS[1])))
    assert "committed" not in err and path in err
    assert tree_digest(store) == before
    # insertions only: the ingest writes only its new layer and commits; the merge after it
    # reads the damaged one
    inserts = tmp_path / "inserts.csv"
    inserts.write_text("word,time\n" + "".join(f"kiwi{i},7\n" for i in range(8)))  # as big: a merge
    err = _corrupt(ddcli(store, "ingest", "words", str(inserts)))
    assert "the write was committed, but merging afterwards found damage" in err and path in err
    before = tree_digest(store)
    _corrupt(ddcli(store, "compact"))
    assert tree_digest(store) == before


def _newest_log(store: str) -> str:
    d = os.path.join(store, "log")
    return os.path.join(d, sorted(n for n in os.listdir(d) if n.startswith("v"))[-1])


@pytest.mark.parametrize("damage", ["truncated", "emptied", "garbled"])
def test_a_damaged_newest_log_version_falls_back_for_reads_and_stops_writes(tmp_path, damage):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    first = _counts(ddcli(store, "query", "words", "-f", "csv"))
    ok(ddcli(store, "ingest", "words", str(WORDS[1])))
    newest = _newest_log(store)
    text = open(newest, "rb").read()
    damaged = {"truncated": text[: len(text) // 2], "emptied": b"", "garbled": b"\xff\xfe" + text[2:]}[damage]
    open(newest, "wb").write(damaged)
    # reads: the previous intact version (the second ingest's own commit, before its merge's)
    r = ddcli(store, "query", "words", "-f", "csv")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("warning: ") and newest in r.stderr and "mv " in r.stderr
    got = {row["word"]: int(row["count"]) for row in parse_csv(r.stdout)}
    assert got == _all_words() != first
    # writes: refused, saying what to do, nothing changed
    before = tree_digest(store)
    err = _corrupt(ddcli(store, "advance", "words", "--since", "1"))
    assert f"mv {newest} {newest}.damaged" in err
    assert tree_digest(store) == before
    _corrupt(ddcli(store, "check"))
    # after doing what it says, the store works again
    os.rename(newest, newest + ".damaged")
    ok(ddcli(store, "advance", "words", "--since", "1"))
    ok(ddcli(store, "check"))


def _all_words() -> dict:
    from tests.cli.test_cli import WORD_UPDATES
    acc = Counter()
    for (w,), _, d in WORD_UPDATES:
        acc[w] += d
    return {w: c for w, c in acc.items() if c}


def test_a_store_written_before_checksums_stays_readable(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    ok(ddcli(store, "ingest", "words", str(WORDS[1])))
    newest = _newest_log(store)
    from storage.store import Store
    state = Store(store).log.latest()[1]  # the whole state: written back as older ddclis did
    for t in state["traces"].values():
        for layer in t["layers"]:
            for f in layer["files"]:
                f.pop("sha256"), f.pop("footer_sha256")
    json.dump(state, open(newest, "w"))
    assert _counts(ddcli(store, "query", "words", "-f", "csv")) == _all_words()
    ok(ddcli(store, "check"))
    # the size is still checked
    path = _layer(store, "words")
    open(path, "ab").write(b"x")
    _corrupt(ddcli(store, "query", "words"))


def test_layers_written_by_spark_carry_checksums_that_reads_and_check_verify(spark, tmp_path):
    from ops.run.run import run_pipeline
    from storage.store import Store
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    st = Store(store)
    run_pipeline(st, os.path.join(os.path.dirname(str(WORDS[0])), "pipelines", "wordcount.py"))
    counts = st.trace("counts")
    files = [f for layer in counts.all_layers() for f in layer.files]
    assert files and all(f.sha256 and f.footer_sha256 for f in files)
    ok(ddcli(store, "check"))
    path = st.layer_paths(counts)[0]
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(data)
    _corrupt(ddcli(store, "query", "counts"))
    assert "1 problem" in _corrupt(ddcli(store, "check"))
