"""Diffs whose sums would leave int64 are refused at ingest; what is accepted stays readable.

Per row, its positive diffs and its negative diffs, over the files of one ingest and every
update the trace holds, each add up to at most 2**63 - 1 in size (storage/writes/diff_sums.py).
Refused: one line, exit 2, nothing written. Accepted: ``query`` at every time, ``advance
--since`` and ``compact --full`` answer, equal to a plain-Python reference.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import ddcli, ok, one_line_error, parse_csv, write

MAX = 2**63 - 1
BIG = 2**62


def _file(tmp_path, name: str, rows: list[tuple]) -> str:
    return write(tmp_path / name, "word,time,diff\n" + "".join(f"{w},{t},{d}\n" for w, t, d in rows))


def _refused(store: str, *args: str) -> str:
    before = tree_digest(store)
    err = one_line_error(ddcli(store, *args))
    assert "int64" in err and "nothing was ingested" in err, err
    assert tree_digest(store) == before
    return err


def _counts(store: str, *extra: str) -> dict:
    return {r["word"]: int(r["count"]) for r in parse_csv(ok(ddcli(store, "query", "w", "-f", "csv", *extra)).stdout)}


def test_sums_within_one_file_across_files_and_against_the_trace_are_refused(store_location, tmp_path):
    store = store_location
    one = _file(tmp_path, "one.csv", [("b", 1, BIG), ("b", 2, BIG)])
    _refused(store, "ingest", "w", one)  # one file, two times
    a, b = _file(tmp_path, "a.csv", [("b", 1, BIG)]), _file(tmp_path, "b.csv", [("b", 2, BIG)])
    _refused(store, "ingest", "w", a, b)  # two files of one ingest
    ok(ddcli(store, "ingest", "w", a))
    _refused(store, "ingest", "w", b)  # against the stored sum
    ok(ddcli(store, "ingest", "w", _file(tmp_path, "c.csv", [("c", 3, -MAX)])))
    _refused(store, "ingest", "w", _file(tmp_path, "d.csv", [("c", 4, -2)]))  # below -(2**63 - 1)
    _refused(store, "ingest", "w", _file(tmp_path, "e.csv", [("c", 4, -(2**63))]))
    # an addition cancelled later still counts: compaction may merge any times
    ok(ddcli(store, "ingest", "w", _file(tmp_path, "f.csv", [("b", 5, -BIG)])))
    _refused(store, "ingest", "w", _file(tmp_path, "g.csv", [("b", 6, BIG)]))
    assert _counts(store) == {"c": -MAX}
    assert _counts(store, "--as-of", "4") == {"b": BIG, "c": -MAX}
    # once the history is compacted away, the cancelled addition no longer counts
    ok(ddcli(store, "advance", "w", "--since", "6"))
    ok(ddcli(store, "compact", "--full"))
    ok(ddcli(store, "ingest", "w", _file(tmp_path, "g.csv", [("b", 6, BIG)])))
    assert _counts(store) == {"b": BIG, "c": -MAX}


def test_upserts_are_refused_when_their_additions_would_overflow(store_location, tmp_path):
    store = store_location
    ok(ddcli(store, "ingest", "w", write(tmp_path / "a.csv", f"word,val,time,diff\nb,x,1,{MAX}\n")))
    ok(ddcli(store, "ingest", "w", write(tmp_path / "b.csv", "word,val,time\nb,y,2\n"), "--upsert", "word"))
    before = tree_digest(store)
    err = one_line_error(ddcli(store, "ingest", "w", write(tmp_path / "c.csv", "word,val,time\nb,x,3\n"),
                               "--upsert", "word"))
    assert "int64" in err and "val='x'" in err, err
    assert tree_digest(store) == before
    ok(ddcli(store, "ingest", "w", write(tmp_path / "d.csv", "word,time\nb,4\n"), "--delete", "word"))
    rows = parse_csv(ok(ddcli(store, "query", "w", "-f", "csv", "--as-of", "2")).stdout)
    assert [(r["word"], r["val"], int(r["count"])) for r in rows] == [("b", "y", 1)]
    assert ok(ddcli(store, "query", "w", "-f", "csv")).stdout.strip() == "word,val,count"


def _fold(updates, t: int) -> dict:
    acc: dict = defaultdict(int)
    for w, s, d in updates:
        if s <= t:
            acc[w] += d
    return {w: c for w, c in acc.items() if c}


def _overflows(updates) -> bool:
    """The reference rule: some row's positive or negative diffs sum beyond 2**63 - 1 in size."""
    pos: dict = defaultdict(int)
    neg: dict = defaultdict(int)
    for w, _, d in updates:
        (pos if d > 0 else neg)[w] += abs(d)
    return any(v > MAX for v in list(pos.values()) + list(neg.values()))


@pytest.mark.parametrize("seed", [1, 2])
def test_random_ingests_of_huge_diffs_are_refused_exactly_when_a_sum_could_leave_int64(tmp_path, seed):
    rng = random.Random(seed)
    store = str(tmp_path / "store")
    held: list = []
    t = refused = 0
    for i in range(8):
        rows = []
        t += 1  # beyond the upper the last accepted ingest left (refused ones move nothing)
        for _ in range(rng.randint(1, 3)):
            rows.append((rng.choice("ab"), t, rng.choice([1, -1]) * rng.choice([1, BIG // 2, BIG, MAX // 3, MAX])))
            t += rng.randint(0, 1)
        f = _file(tmp_path, f"f{i}.csv", rows)
        if _overflows(held + rows):
            _refused(store, "ingest", "w", f)
            refused += 1
            continue
        ok(ddcli(store, "ingest", "w", f))
        held += rows
    assert 0 < refused < 8, "the stream should hold both outcomes"
    for at in range(1, t + 1):
        assert _counts(store, "--as-of", str(at)) == _fold(held, at), (seed, at)
    ok(ddcli(store, "compact", "--full"))
    ok(ddcli(store, "advance", "w", "--since", str(t)))
    ok(ddcli(store, "compact", "--full"))
    assert _counts(store) == _fold(held, t + 1)


def test_layers_recorded_before_their_largest_diff_was_are_bounded_by_their_footer(tmp_path):
    import json
    import re

    from storage.log.commit import encode_version
    from storage.store import Store
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "w", _file(tmp_path, "a.csv", [("a", 1, 1), ("b", 1, MAX)])))
    log = Store(store).log
    path = log.path(log.latest()[0])
    doc = json.loads(re.sub(r',"diff_max":\d+', "", open(path).read()))
    doc.pop("sha256")
    open(path, "wb").write(encode_version(doc))
    assert "diff_max" not in open(path).read()
    _refused(store, "ingest", "w", _file(tmp_path, "b.csv", [("b", 2, 1)]))
    ok(ddcli(store, "ingest", "w", _file(tmp_path, "c.csv", [("a", 2, 1)])))
    assert _counts(store) == {"a": 2, "b": MAX}
