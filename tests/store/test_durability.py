"""Layer files are on disk before the commit that names them, synced together.

storage/blobs/durability.py defers the syncs of the local files written inside a commit's
write (or a whole run) and makes them all durable just before the log's new version is
written; outside such a block a file is synced as it is written."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from storage.blobs import durability
from storage.blobs.local import LOCAL
from storage.store import Store


def _recording(monkeypatch) -> list[str]:
    """The paths os.fsync is called on, in order."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_an_ingests_layer_files_are_synced_before_its_log_version(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "store"))
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)], "time": [0] * 100,
                             "diff": [1] * 100}), src)
    synced = _recording(monkeypatch)
    store.ingest("t", [str(src)])
    layers = [p for p in synced if p.endswith(".parquet") and "/traces/" in p]
    log = [i for i, p in enumerate(synced) if "/log/" in p and not os.path.isdir(p)]
    assert layers and log, synced
    for p in layers:
        assert synced.index(p) < log[0], f"{p} synced after the commit: {synced}"
        assert os.path.dirname(p) in synced[:log[0]], f"the folder of {p} not synced before the commit"


def test_files_written_inside_a_block_wait_for_it_and_outside_are_synced_at_once(tmp_path, monkeypatch):
    synced = _recording(monkeypatch)

    def write(fh):
        fh.write(b"x" * 10)

    LOCAL.write_new(str(tmp_path / "alone"), write)  # synced under its temporary name, then its folder
    assert len(synced) == 2 and "/.tmp-" in synced[0] and synced[1] == str(tmp_path), synced
    synced.clear()
    with durability.together():
        for i in range(3):
            LOCAL.write_new(str(tmp_path / f"f{i}"), write)
        os.remove(tmp_path / "f1")  # discarded before the commit: nothing to sync
        assert synced == [], "synced before the commit"
        durability.make_durable()
        assert sorted(synced) == sorted([str(tmp_path / "f0"), str(tmp_path / "f2"), str(tmp_path)]), synced
        synced.clear()
        LOCAL.write_new(str(tmp_path / "f3"), write)
        assert synced == []
    assert synced == [str(tmp_path / "f3"), str(tmp_path)], "what is pending when the block ends is synced"
