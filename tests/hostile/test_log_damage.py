"""A damaged newest log version is never built on, and never an internal error.

Every version carries the SHA-256 of its own bytes (storage/log/commit.py), so a byte
flipped anywhere in it (a recorded layer size or hash included) makes it damaged: readers
fall back to the version before with a warning, every writer refuses with exit 5 and
writes nothing. Versions written before checksums carry none; a key their damage broke
is exit 5 too (a CorruptionError), never a ``KeyError``.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import ddcli, ok, one_line_error, parse_csv, write

WRITERS = [
    lambda f: ["ingest", "w", f],
    lambda f: ["ingest", "w", f, "--upsert", "word"],
    lambda f: ["advance", "w", "--since", "2"],
    lambda f: ["compact", "--full"],
]


def _blobs(store: str):
    from storage.blobs.resolve import for_path
    return for_path(store)


def _log_path(store: str, v: int) -> str:
    return f"{store}/log/v{v:012d}.json"


def _newest(store: str) -> int:
    from storage.store import Store
    return Store(store).log.latest()[0]


def _doc(path: str) -> dict:
    """A local version's document, without its checksum."""
    raw = open(path, "rb").read()
    doc = json.loads(raw)
    doc.pop("sha256", None)
    return doc


def _words(result) -> dict:
    return {r["word"]: int(r["count"]) for r in parse_csv(ok(result).stdout)}


@pytest.fixture
def files(tmp_path):
    return [write(tmp_path / "a.csv", "word,time\na,1\nb,2\n"), write(tmp_path / "b.csv", "word,time\nc,3\n"),
            write(tmp_path / "c.csv", "word,time\nd,5\n")]


def _offsets(raw: bytes, count: int) -> list[int]:
    """``count`` offsets spread over ``raw``, plus every byte of the first recorded layer
    size and of a recorded layer hash (the places whose damage a reader cannot see)."""
    spread = {i * (len(raw) - 1) // (count - 1) for i in range(count)}
    size = re.search(rb'"bytes":(\d+)', raw)
    sha = re.search(rb'"sha256":"([0-9a-f]{64})"', raw[80:])
    spread.update(range(size.start(1), size.end(1)))
    spread.update(80 + i for i in range(sha.start(1), sha.start(1) + 4))
    return sorted(spread)


def _in_checksum_key(raw: bytes, i: int) -> bool:
    """Offset ``i`` is in the name of the version's own checksum key (``{"sha256":``): a
    flip there loses the checksum but leaves the content intact."""
    return raw.startswith(b'{"sha256":') and 2 <= i < 8


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_flipped_byte_anywhere_in_the_newest_version_stops_every_writer(backend, tmp_path, files, request):
    if backend == "s3":
        request.getfixturevalue("s3_env")
        from tests.helpers.s3 import new_prefix
        store = new_prefix()
    else:
        store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "w", files[0]))
    ok(ddcli(store, "ingest", "w", files[1]))
    want = _words(ddcli(store, "query", "w", "-f", "csv"))
    v = _newest(store)
    path = _log_path(store, v)
    blobs = _blobs(store)
    good = blobs.get(path)
    offsets = [i for i in _offsets(good, 10 if backend == "s3" else 40) if not _in_checksum_key(good, i)]
    for n, i in enumerate(offsets):
        bad = bytearray(good)
        bad[i] ^= 0x01 if n % 2 else 0x10
        blobs.replace(path, bytes(bad))
        args = WRITERS[n % len(WRITERS)]
        before = tree_digest(store)
        res = ddcli(store, *args(files[2]))
        err = one_line_error(res, code=5)
        assert "damaged" in err and "nothing was written" in err, (i, err)
        assert tree_digest(store) == before, f"offset {i}: the store changed"
        # readers answer from the version before, with a warning
        r = ok(ddcli(store, "query", "w", "-f", "csv"))
        assert "warning:" in r.stderr and set(_words(r)) <= set(want)
    blobs.replace(path, good)
    ok(ddcli(store, "ingest", "w", files[2]))
    assert _words(ddcli(store, "query", "w", "-f", "csv")) == dict(want, d=1)


def test_every_single_byte_flip_of_a_version_is_seen_or_harmless():
    from storage.log.commit import decode_version, encode_version
    doc = {"delta": {"set": [[["traces", "w", "upper"], [[4]]]], "del": []}, "version": 2,
           "commit_id": "03c720bc", "parent": "9b02f977"}
    raw = encode_version(doc)
    assert decode_version(raw) == doc
    for i in range(len(raw)):
        for bit in (0x01, 0x04, 0x20):
            bad = bytearray(raw)
            bad[i] ^= bit
            try:
                got = decode_version(bytes(bad))
            except ValueError:
                continue  # no JSON any more: damaged
            if got is None:
                continue
            assert _in_checksum_key(raw, i), f"offset {i}, bit {bit}: damage not seen"
            assert dict(list(got.items())[1:]) == doc  # the renamed checksum key, then all the content


def test_a_version_without_checksum_whose_key_is_broken_is_damage_not_an_internal_error(tmp_path, files):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "w", files[0]))
    v = _newest(store)
    path = _log_path(store, v)
    doc = _doc(path)
    for key, broken in (("since", "sinse"), ("layers", "layeRs"), ("traces", "tracEs"), ("bytes", "bytEs")):
        text = json.dumps(doc).replace(f'"{key}"', f'"{broken}"', 1)  # written as before checksums
        open(path, "w").write(text)
        before = tree_digest(store)
        for args in (["query", "w"], ["ingest", "w", files[1]], ["advance", "w", "--since", "2"], ["status"]):
            err = one_line_error(ddcli(store, *args), code=5)
            assert "malformed" in err or "damaged" in err, err
            assert tree_digest(store) == before


def test_a_damaged_pipeline_record_is_damage(tmp_path, files):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "w", files[0]))
    path = _log_path(store, _newest(store))
    doc = _doc(path)
    doc["pipelines"] = {"p": {"runs": 1, "d": 1, "frontier": [[1, 2]], "inputs": {"w": {"seq": 1}}}}
    from storage.log.commit import encode_version
    open(path, "wb").write(encode_version(doc))
    err = one_line_error(ddcli(store, "pipelines"), code=5)
    assert "malformed" in err
