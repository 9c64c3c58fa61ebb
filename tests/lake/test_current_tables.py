"""Every pipeline output has a current-state Delta table: its collection, read without ddcli.

A pipeline over a random stream of insertions and retractions of rows of many column types
(doubles, decimals, dates, strings, nulls) runs several times, with compaction and a moved
since between runs. After each run the newest version of each output's table
(``STORE/tables/NAME``) must name the time it shows and equal ``ddcli query --as-of`` there
(and, for the filter, a plain-Python fold of the input); at the end every version, read by
delta-rs and by polars, must still equal what was recorded for it, and the change data feed
of each version must equal what a named reader of the output (``ddcli changes``) read from
that run. The readers here use deltalake, polars and pyarrow only.
"""

from __future__ import annotations

import datetime
import os
import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

from storage.sql.query import as_of
from storage.store import Store
from storage.writes import feeds
from tests.helpers.delta_reader import storage_options

PIPELINE = """
def pipeline(p):
    src = p.input("src")
    p.output("kept", src.filter("k <> 1"))
    p.output("sums", src.sum(by="s", column="amt", name="total"))
    p.output("per_day", src.count(by="day"))
"""
OUTPUTS = ("kept", "sums", "per_day")
SCHEMA = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("amt", pa.decimal128(10, 2)),
                    ("day", pa.date32()), ("s", pa.string())])
CHOICES = {"k": [0, 1, 2, 3, 4], "x": [0.5, -1.25, 3.0, 1e-9, None],
           "amt": [Decimal("1.10"), Decimal("-2.05"), Decimal("7.00"), None],
           "day": [datetime.date(2024, 1, 1), datetime.date(2024, 2, 29), None], "s": ["a", "é", "", None]}


# ------------------------------------------------------------------ independent readers


def rows_to_dict(table: pa.Table) -> dict[tuple, int]:
    data, mult = table.column_names[:-1], table.column_names[-1]
    out = {}
    for r in table.to_pylist():
        key = tuple(r[c] for c in data)
        assert key not in out, f"row {key} twice in a current-state table"
        out[key] = r[mult]
    return out


def delta_rs_current(uri: str, version: int | None = None) -> dict[tuple, int]:
    from deltalake import DeltaTable
    return rows_to_dict(pa.table(DeltaTable(uri, version=version, storage_options=storage_options(uri))
                                 .to_pyarrow_table()))


def polars_current(uri: str, version: int | None = None) -> dict[tuple, int]:
    import polars as pl
    return rows_to_dict(pl.read_delta(uri, version=version, storage_options=storage_options(uri)).to_arrow())


def shown(uri: str) -> tuple[int, dict]:
    """The newest version and the ddcli state its commit info names."""
    from deltalake import DeltaTable
    dt = DeltaTable(uri, storage_options=storage_options(uri))
    return dt.version(), dt.history(1)[0]["ddcli"]


def change_feed(uri: str) -> dict[int, dict[tuple, int]]:
    """Per Delta version, the change of each row's multiplicity the change data feed says."""
    from deltalake import DeltaTable
    feed = pa.table(DeltaTable(uri, storage_options=storage_options(uri)).load_cdf(starting_version=0).read_all())
    meta = {"_change_type", "_commit_version", "_commit_timestamp"}
    cols = [c for c in feed.column_names if c not in meta]
    data, mult = cols[:-1], cols[-1]
    sign = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
    out: dict[int, Counter] = {}
    for r in feed.to_pylist():
        out.setdefault(r["_commit_version"], Counter())[tuple(r[c] for c in data)] += sign[r["_change_type"]] * r[mult]
    return {v: {k: n for k, n in c.items() if n} for v, c in out.items()}


def ddcli_at(store, name: str, t) -> dict[tuple, int]:
    return rows_to_dict(as_of(store, name, t))


def summed(changes: pa.Table) -> dict[tuple, int]:
    """A reader's updates summed over their times, per row."""
    data = [c for c in changes.column_names if c not in ("time", "diff")]
    acc: Counter = Counter()
    for r in changes.to_pylist():
        acc[tuple(r[c] for c in data)] += r["diff"]
    return {k: n for k, n in acc.items() if n}


def assert_iceberg_snapshots(catalog_uri: str, name: str, published: list) -> None:
    """Every snapshot of the Iceberg table, read by pyiceberg, holds what was published
    then, names its time, and no delete file was ever written (copy on write)."""
    from pyiceberg.catalog.sql import SqlCatalog
    table = SqlCatalog("default", uri=catalog_uri).load_table(f"ns.{name}")
    snapshots = table.snapshots()
    assert [s.snapshot_id for s in snapshots] == [s for s, _ in published], "one snapshot per publish"
    for snapshot, want in published:
        got = table.scan(snapshot_id=snapshot).to_arrow()
        assert rows_to_dict(got) == want, (name, snapshot)
        summary = table.snapshot_by_id(snapshot).summary
        assert summary["ddcli.time"] and summary["total-equality-deletes"] == "0"
        assert summary["total-position-deletes"] == "0" and summary["total-delete-files"] == "0"
    manifests = table.current_snapshot().manifests(table.io)
    assert all(m.content == 0 for m in manifests), "data manifests only: no delete files"


# ------------------------------------------------------------------ the input stream


class Stream:
    """Random rows inserted and retracted over epochs; ``updates`` keeps them all."""

    def __init__(self, folder: str, seed: int):
        self.rng, self.folder, self.epoch = random.Random(seed), folder, 0
        self.updates: list[tuple[tuple, int, int]] = []
        self.live: Counter = Counter()

    def next_file(self) -> str:
        rng, t = self.rng, self.epoch
        batch = []
        for _ in range(rng.randint(3, 7)):
            batch.append((tuple(rng.choice(CHOICES[c]) for c in SCHEMA.names), rng.choice([1, 1, 2])))
        for row in rng.sample(sorted(self.live, key=repr), min(len(self.live), rng.randint(1, 3))):
            batch.append((row, -1))  # a retraction of a live row
        for row, diff in batch:
            self.live[row] += diff
            self.updates.append((row, t, diff))
        self.live = Counter({k: n for k, n in self.live.items() if n})
        cols = {c: pa.array([r[i] for r, _ in batch], SCHEMA.field(c).type) for i, c in enumerate(SCHEMA.names)}
        path = os.path.join(self.folder, f"src{t}.parquet")
        pq.write_table(pa.table({**cols, "time": pa.array([t] * len(batch), pa.int64()),
                                 "diff": pa.array([d for _, d in batch], pa.int64())}), path)
        self.epoch += 1
        return path

    def kept_at(self, t: int) -> dict[tuple, int]:
        acc: Counter = Counter()
        for row, s, diff in self.updates:
            if s <= t and row[0] != 1:
                acc[row] += diff
        return {k: n for k, n in acc.items() if n}


# ------------------------------------------------------------------ the tests


def test_current_tables_equal_ddcli_query_at_every_version_and_their_feeds_equal_ddcli_changes(spark, tmp_path,
                                                                                                monkeypatch):
    from ops.run.run import run_pipeline
    monkeypatch.setenv("DDCLI_DELTA_RETENTION", "3600")  # old versions stay readable through the compaction
    from storage.lake.iceberg import publish
    path = tmp_path / "many.py"
    path.write_text(PIPELINE)
    store = Store(str(tmp_path / "store"))
    stream = Stream(str(tmp_path), seed=5)
    recorded: dict[str, dict[int, dict]] = {n: {} for n in OUTPUTS}  # version -> collection
    read: dict[str, dict[int, dict]] = {n: {} for n in OUTPUTS}  # version -> what the reader read
    ways: Counter = Counter()
    catalog = f"sqlite:///{tmp_path}/catalog.db"
    published: dict[str, list] = {n: [] for n in OUTPUTS}  # Iceberg snapshots and their collections
    for epoch in range(5):
        store.ingest("src", [stream.next_file()])
        if epoch == 1:
            continue  # two epochs in the next run: still one version per run
        run_pipeline(store, str(path))
        assert not store.warnings
        for name in OUTPUTS:
            uri = store.blobs.join(store.path, "tables", name)
            version, info = shown(uri)
            assert info["upper"] == store.trace(name).upper.to_json() and info["logVersion"] <= store.state().version
            t = info["time"][0]
            want = ddcli_at(store, name, t)
            assert delta_rs_current(uri) == want, f"{name} at {t}, version {version}"
            if name == "kept":
                assert want == stream.kept_at(t)
            recorded[name][version] = want
            reading, changes = feeds.read_changes(store, name, "cdf")
            read[name][version] = summed(changes)
            feeds.acknowledge(store, reading)
            ways[info["change"]] += 1
            published[name].append((publish(store, name, f"{catalog}#ns.{name}").snapshot, want))
        if epoch == 2:
            store.compact(full=True, grace_seconds=0)
        if epoch == 3:  # past the time the tables show: the next change is a full comparison
            for name in OUTPUTS:
                store.advance(name, since=str(store.trace(name).upper.elements[0][0]))
    assert ways["incremental"] >= 6 and ways["full"] >= 3, ways
    for name in OUTPUTS:
        uri = store.blobs.join(store.path, "tables", name)
        assert sorted(recorded[name]) == list(range(len(recorded[name]))), "one Delta version per run"
        feed = change_feed(uri)
        previous: dict = {}
        for version, want in recorded[name].items():
            assert delta_rs_current(uri, version) == want == polars_current(uri, version), (name, version)
            diff = Counter(want)
            diff.subtract(previous)
            assert feed.get(version, {}) == {k: n for k, n in diff.items() if n} == read[name][version], (name, version)
            previous = want
    for name in OUTPUTS:
        assert_iceberg_snapshots(catalog, name, published[name])
    import polars as pl
    per_day = pl.read_delta(store.blobs.join(store.path, "tables", "per_day"))
    assert per_day.columns == ["day", "count", "multiplicity"], "a data column named count: as ddcli query names it"
