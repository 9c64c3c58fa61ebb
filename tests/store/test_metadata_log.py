"""Metadata that stays small: delta versions, checkpoints, retention, the
bounded ingested-file record, and stores written before any of them.

Costs are counted (files opened, bytes read and written, folder entries listed), not
timed, so the tests say the same on a slow machine.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import time as _time

import pytest

from storage.errors import StoreError
from storage.log import commit as log_module
from storage.log.commit import CHECKPOINT_EVERY, HINT_NAME, Log
from storage.state import ingested as ingested_mod
from storage.store import Store
from tests.helpers.store_refs import (check_equivalence, files_on_disk, moment_between, referenced_files,
                                      set_store_clock, write_updates)


def age(path, seconds):
    t = _time.time() - seconds
    os.utime(path, (t, t))


def age_log(store_or_log, seconds=7200):
    d = store_or_log.log.dir if isinstance(store_or_log, Store) else store_or_log.dir
    for n in os.listdir(d):
        age(os.path.join(d, n), seconds)


# ------------------------------------------------------------------ the cost of a commit


class LogIO:
    """Counts what touches the log folder: files opened, bytes of the files opened for
    reading, folder entries listed, and bytes of the version files written."""

    def __init__(self, monkeypatch, log_dir: str):
        self.dir = os.path.realpath(log_dir)
        self.reset()
        real_open, real_listdir, real_scandir = builtins.open, os.listdir, os.scandir

        def mine(p) -> bool:
            return isinstance(p, (str, os.PathLike)) and os.path.realpath(os.fspath(p)).startswith(self.dir)

        def counting_open(file, mode="r", *a, **kw):
            if mine(file):
                self.opened += 1
                if "r" in mode and os.path.exists(file):
                    self.read_bytes += os.path.getsize(file)
            return real_open(file, mode, *a, **kw)

        def counting_listdir(p="."):
            out = real_listdir(p)
            if mine(p):
                self.listed += len(out)
            return out

        def counting_scandir(p="."):
            if mine(p):
                self.listed += len(real_listdir(p))
            return real_scandir(p)
        monkeypatch.setattr(builtins, "open", counting_open)
        monkeypatch.setattr(os, "listdir", counting_listdir)
        monkeypatch.setattr(os, "scandir", counting_scandir)

    def reset(self):
        self.opened = self.read_bytes = self.listed = 0


def _tiny(tmp_path, i):
    return write_updates(str(tmp_path / f"u{i}.csv"), [((i % 5, "x"), (i,), 1)], 1)


def _ingest_costs(store, tmp_path, io, first, count):
    """Per ingest: (files opened, bytes read, entries listed, bytes of new versions)."""
    out = []
    for i in range(first, first + count):
        f = _tiny(tmp_path, i)
        before = set(os.listdir(store.log.dir))
        io.reset()
        store.ingest("t", [f])
        opened, read, listed = io.opened, io.read_bytes, io.listed
        new = set(os.listdir(store.log.dir)) - before
        written = sum(os.path.getsize(os.path.join(store.log.dir, n)) for n in new if n.startswith("v"))
        out.append((opened, read, listed, written))
    return out


def test_commit_cost_does_not_grow_with_the_number_of_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(ingested_mod, "WINDOW", 20)  # full early: what is left to grow is the log
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [_tiny(tmp_path, 0)])
    io = LogIO(monkeypatch, store.log.dir)
    window = 2 * CHECKPOINT_EVERY  # every ingest's phase relative to the checkpoints
    for i in range(1, 40):
        store.ingest("t", [_tiny(tmp_path, i)])
    store.compact("t", full=True)  # the same layers before both windows (they grow as log n)
    early = _ingest_costs(store, tmp_path, io, 40, window)
    for i in range(40 + window, 400):
        store.ingest("t", [_tiny(tmp_path, i)])
    store.compact("t", full=True)
    assert store.state().version > 400
    late = _ingest_costs(store, tmp_path, io, 400, window)
    for what, k, slack in (("files opened", 0, 1.25), ("bytes read", 1, 1.5), ("bytes written", 3, 1.5)):
        e, l = sum(c[k] for c in early), sum(c[k] for c in late)
        assert l <= slack * e, f"{what} per commit grew with the versions: {e} -> {l}"
    assert max(c[2] for c in early + late) == 0, "a commit listed the log folder"
    # what one ingest reads stays bounded by one checkpoint and the deltas after it
    assert max(c[0] for c in late) <= 8 * (CHECKPOINT_EVERY + 3)


# ------------------------------------------------------------------ deltas + checkpoints == the state


def _random_change(rng: random.Random, s: dict | None) -> dict:
    s = s or {"traces": {}, "pipelines": {}}
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        name = f"t{rng.randint(0, 6)}"
        if op < 0.35:
            s["traces"].setdefault(name, {"layers": [], "ingested": {}, "upper": [[0]]})
            t = s["traces"][name]
            t["layers"] = t["layers"] + [rng.randint(0, 99)]
            t["ingested"][f"sig{rng.randint(0, 30)}"] = rng.randint(0, 9)
            if rng.random() < 0.3 and t["ingested"]:
                t["ingested"].pop(rng.choice(sorted(t["ingested"])))
            t["upper"] = [[rng.randint(0, 50)]]
        elif op < 0.5:
            s["traces"].pop(name, None)
        elif op < 0.7:
            s["pipelines"][f"p{rng.randint(0, 3)}"] = {"frontier": [[rng.randint(0, 9)]],
                                                      "holds": {name: rng.randint(0, 5)}}
        elif op < 0.8:
            s["pipelines"].pop(f"p{rng.randint(0, 3)}", None)
        elif op < 0.9:
            s["extra"] = rng.choice([None, 1, "x", [1, 2], {"a": {"b": rng.randint(0, 3)}}])
        else:
            s.pop("extra", None)
    return s


def _body(state: dict) -> dict:
    return {k: v for k, v in state.items() if k not in ("version", "commit_id")}


@pytest.mark.parametrize("seed", range(6))
def test_the_state_read_through_deltas_equals_an_independent_replay(tmp_path, seed):
    rng = random.Random(seed)
    log = Log(str(tmp_path), retention_seconds=3600)
    replay: dict[int, dict] = {}  # version -> the state, replayed independently of the log
    ref: dict | None = None
    for step in range(120):
        seed_i = rng.random()
        ref = _random_change(random.Random(seed_i), ref)  # replayed on a copy of our own
        replay_state = json.loads(json.dumps(ref))
        v, _ = log.commit(lambda s: _random_change(random.Random(seed_i), s))
        replay[v] = replay_state
        assert log.latest()[0] == v and _body(log.latest()[1]) == replay_state, f"step {step}"
        if rng.random() < 0.1:  # the hint is lost, or goes back: it is only a hint
            hint = os.path.join(log.dir, HINT_NAME)
            if rng.random() < 0.5 and os.path.exists(hint):
                os.unlink(hint)
            else:
                with open(hint, "w") as fh:
                    json.dump({"checkpoint": rng.randint(1, v)}, fh)
        if rng.random() < 0.05:  # prune everything no reader can need, as with --grace 0
            log.prune(_time.time() + 1)
        assert _body(Log(str(tmp_path)).latest()[1]) == replay_state, f"a fresh reader, step {step}"
    # every version still in the log rebuilds to the state it had
    kept = log.states()
    assert kept and max(kept) == max(replay)
    for version, state in kept.items():
        assert _body(state) == replay[version], f"version {version}"
    # and the log holds far fewer whole states than versions
    full = 0
    for n in os.listdir(log.dir):
        if n.startswith("v"):
            with open(os.path.join(log.dir, n)) as fh:
                full += "delta" not in json.load(fh)
    assert full <= len(replay) // CHECKPOINT_EVERY + 8


def test_random_commits_match_the_replay_at_every_version(tmp_path):
    """Every version, read while it was the newest and rebuilt later, is the replayed state."""
    rng = random.Random(7)
    log = Log(str(tmp_path))
    replay = {}
    for _ in range(3 * CHECKPOINT_EVERY + 5):
        v, st = log.commit(lambda s: _random_change(rng, s))
        replay[v] = json.loads(json.dumps(_body(st)))
    for v, st in log.states().items():
        assert _body(st) == replay[v]


# ------------------------------------------------------------------ retention


def _commit_n(log: Log, n: int, tag: str = "x"):
    for _ in range(n):
        log.commit(lambda s: {**(s or {"traces": {}}), "items": (s or {}).get("items", []) + [tag]})


def test_pruning_keeps_every_version_a_reader_holds_and_the_newest_checkpoint(store_location, monkeypatch):
    log = Log(store_location, retention_seconds=3600)
    _commit_n(log, 3 * CHECKPOINT_EVERY)
    then = moment_between()
    set_store_clock(monkeypatch, then + 3600)  # all of those were superseded long ago ...
    held, held_state = log.latest()  # ... but a reader takes the newest one now
    _commit_n(log, 2 * CHECKPOINT_EVERY, "y")
    log.prune(then)  # (the checkpoint commits pruned already)
    assert not log.blobs.exists(log.path(1)), "versions superseded long ago were deleted"
    kept = log.states()
    assert held in kept and kept[held] == held_state, "the held version rebuilds from the log"
    newest, state = log.latest()
    assert state["items"] == ["x"] * (3 * CHECKPOINT_EVERY) + ["y"] * (2 * CHECKPOINT_EVERY)
    # pruning everything (as --grace 0 does) still keeps the newest checkpoint and what follows
    log.prune(_time.time() + 10)
    names = sorted(n for n in log.blobs.list(log.dir) if n.startswith("v"))
    assert "delta" not in json.loads(log.blobs.get(log.blobs.join(log.dir, names[0])))
    assert Log(store_location).latest() == (newest, state)


def test_garbage_collection_keeps_the_files_of_a_version_a_reader_holds(tmp_path, store_location, monkeypatch):
    store = Store(store_location)
    for i in range(3 * CHECKPOINT_EVERY):
        store.ingest("t", [_tiny(tmp_path, i)])
    set_store_clock(monkeypatch, moment_between() + 3600)  # the files and versions so far are old
    held = store.state()  # a reader takes the newest version and starts reading its files
    held_files = set(store.layer_paths(held.traces["t"]))
    store.compact("t", full=True, grace_seconds=3600)
    store.compact(grace_seconds=3600)
    assert held_files <= files_on_disk(store), "a file the held version names was collected"
    assert held.version in store.log.states(), "the held version is still in the log"
    assert len([n for n in store.blobs.list(store.log.dir) if n.startswith("v")]) < held.version


def test_a_reader_whose_chain_is_pruned_under_it_reads_again(tmp_path, monkeypatch):
    log = Log(str(tmp_path), retention_seconds=3600)
    _commit_n(log, 3 * CHECKPOINT_EVERY + 3)
    with open(os.path.join(log.dir, HINT_NAME), "w") as fh:
        json.dump({"checkpoint": 1}, fh)  # a stale hint: the reader walks the whole chain
    newest = log.latest()
    real_load = Log._load
    hit = []

    def load(self, v):
        if v == 5 and not hit:  # half way through the chain, a pruner deletes its base
            hit.append(v)
            Log(str(tmp_path)).prune(_time.time() + 10, listing=True)
        return real_load(self, v)
    monkeypatch.setattr(Log, "_load", load)
    assert Log(str(tmp_path)).latest() == newest and hit


def test_a_writer_paused_while_its_base_was_pruned_does_not_commit_into_the_gap(tmp_path):
    log = Log(str(tmp_path))
    log.commit(lambda s: {"traces": {}, "items": []})
    calls = []

    def change(s):
        calls.append(s["version"])
        if len(calls) == 1:  # meanwhile: many commits, checkpoints, and a prune of all but the newest
            for i in range(3 * CHECKPOINT_EVERY):
                Log(str(tmp_path)).commit(lambda s2: {**s2, "items": s2["items"] + ["theirs"]})
            Log(str(tmp_path)).prune(_time.time() + 10, listing=True)
            assert not os.path.exists(log.path(s["version"] + 1)), "the next name is free again"
        return {**s, "items": s["items"] + ["mine"]}
    v, state = log.commit(change)
    assert calls == [1, 2 + 3 * CHECKPOINT_EVERY - 1], "the change was applied again to the newest state"
    assert Log(str(tmp_path)).latest()[1]["items"] == ["theirs"] * (3 * CHECKPOINT_EVERY) + ["mine"]
    assert not os.path.exists(log.path(2)), "the version linked into the pruned range was taken back"


# ------------------------------------------------------------------ the ingested-file record


def test_the_ingested_file_record_stays_bounded_and_recent_files_are_still_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ingested_mod, "WINDOW", 5)
    store = Store(str(tmp_path / "store"))
    files = [_tiny(tmp_path, i) for i in range(12)]
    for f in files:
        store.ingest("t", [f])
    record = store.trace("t").ingested
    assert len(record) == 5
    for f in files[-5:]:  # re-ingesting a recent file is a no-op
        res = store.ingest("t", [f])
        assert res.rows == 0 and res.skipped == [f]
    with pytest.raises(StoreError, match="is not beyond the upper.*older than the last 5 files"):
        store.ingest("t", [files[0]])  # an old one is refused as sealed: never counted twice
    check_equivalence(store, "t", [((i % 5, "x"), (i,), 1) for i in range(12)], 13)


def test_the_newest_checkpoint_stays_small_after_many_ingests(tmp_path, monkeypatch):
    monkeypatch.setattr(ingested_mod, "WINDOW", 20)
    store = Store(str(tmp_path / "store"))

    def checkpoint_bytes():  # without the layer lists (they grow as log n, not with versions)
        with open(os.path.join(store.log.dir, HINT_NAME)) as fh:
            with open(store.log.path(json.load(fh)["checkpoint"])) as cp:
                doc = json.load(cp)
        for t in doc["traces"].values():
            t["layers"] = []
        return len(json.dumps(doc))
    for i in range(60):
        store.ingest("t", [_tiny(tmp_path, i)])
    at_60 = checkpoint_bytes()
    for i in range(60, 300):
        store.ingest("t", [_tiny(tmp_path, i)])
    assert checkpoint_bytes() <= 1.3 * at_60


# ------------------------------------------------------------------ stores written before deltas


def _write_old_format(store: Store) -> list[int]:
    """Rewrite the log as ddcli wrote it before delta versions: every version the whole
    state, the ingested record a list, no hint, and the oldest versions emptied by prune."""
    states = store.log.states()
    for n in os.listdir(store.log.dir):
        os.unlink(os.path.join(store.log.dir, n))
    for v, st in sorted(states.items()):
        for t in st["traces"].values():
            t["ingested"] = sorted(t["ingested"], key=t["ingested"].get)
        with open(store.log.path(v), "w") as fh:
            if v <= 2:
                continue  # emptied
            json.dump({**st, "version": v}, fh, separators=(",", ":"))
    return sorted(states)


def test_a_store_written_with_whole_state_versions_opens_and_takes_commits(tmp_path):
    store = Store(str(tmp_path / "store"))
    files = [_tiny(tmp_path, i) for i in range(6)]
    for f in files[:4]:
        store.ingest("t", [f])
    expect = store.state().to_json()
    versions = _write_old_format(store)
    assert not any(n == HINT_NAME for n in os.listdir(store.log.dir))

    old = Store(store.path)
    read = old.state()  # each trace as read (one never read goes back to JSON as it came)
    assert {n: t.to_json() for n, t in read.traces.items()} == expect["traces"]
    assert read.version == expect["version"] and read.pipelines == expect["pipelines"]
    assert old.ingest("t", [files[1]]).skipped == [files[1]], "the old list still refuses a re-ingest"
    old.ingest("t", [files[4]])
    old.ingest("t", [files[5]])
    assert old.state().version > versions[-1]
    check_equivalence(old, "t", [((i % 5, "x"), (i,), 1) for i in range(6)], 7)
    assert isinstance(old.trace("t").ingested, dict) and len(old.trace("t").ingested) == 6
    # the first commit wrote a checkpoint and the hint; pruning removes the old versions
    with open(os.path.join(old.log.dir, HINT_NAME)) as fh:
        assert json.load(fh)["checkpoint"] > versions[-1]
    age_log(old)
    old.compact(grace_seconds=3600)
    names = sorted(n for n in os.listdir(old.log.dir) if n.startswith("v"))
    assert int(names[0][1:13]) > versions[-1], "the whole-state versions were pruned"
    assert files_on_disk(old) >= referenced_files(old)
    check_equivalence(Store(store.path), "t", [((i % 5, "x"), (i,), 1) for i in range(6)], 7)


def test_the_log_module_names_its_fault_points():
    doc = log_module.__doc__ + (__import__("storage.faults").faults.__doc__)
    for p in ("log.before_hint", "log.before_prune", "log.mid_prune"):
        assert p in doc
