"""``ddcli ingest TRACE iceberg:…``: an Iceberg table written by pyiceberg through a SQL
catalog on SQLite (appends, filtered deletes, overwrites), ingested in several steps,
equals pyiceberg's own scan of every snapshot of the main branch.

The reference is pyiceberg reading each snapshot (``table.scan(snapshot_id=…)``); ddcli's
side is ``ddcli query --as-of SEQUENCE_NUMBER``. Both are compared as multisets.
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from tests.helpers.cli import jsonl, ok, one_line_error
from tests.sources.lake_writers import SCHEMA, ddcli, ddcli_at, rows

ICEBERG_SCHEMA = pa.schema([f.with_nullable(f.name != "id") for f in SCHEMA])


def catalog(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    uri = f"sqlite:///{tmp_path}/catalog.db"
    cat = SqlCatalog("lake", uri=uri, warehouse=f"file://{tmp_path}/warehouse")
    cat.create_namespace_if_not_exists("shop")
    return cat, uri


def iceberg_rows(rng: random.Random, n: int) -> pa.Table:
    return rows(rng, n).cast(ICEBERG_SCHEMA)


def write_snapshots(table, rng: random.Random, steps: int) -> None:
    """Snapshots made by pyiceberg, each step one kind of change."""
    for _ in range(steps):
        kind = rng.choice(["append", "append", "delete", "overwrite", "overwrite_where", "duplicate"])
        if kind == "append":
            table.append(iceberg_rows(rng, rng.randrange(1, 12)))
        elif kind == "duplicate":
            table.append(table.scan().to_arrow().slice(0, 3).cast(ICEBERG_SCHEMA))
        elif kind == "delete":
            table.delete(rng.choice(["id < 10", "x < 0", "grp == 'a'", "day IS NULL"]))
        elif kind == "overwrite":
            table.overwrite(iceberg_rows(rng, rng.randrange(1, 10)))
        else:
            table.overwrite(iceberg_rows(rng, 4), overwrite_filter=f"id >= {rng.randrange(40)}")


def snapshots(table) -> list:
    from pyiceberg.table.snapshots import ancestors_of
    return list(reversed(list(ancestors_of(table.current_snapshot(), table.metadata))))


def pyiceberg_at(table, snapshot_id: int) -> Counter:
    return Counter(tuple(r.values()) for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


@pytest.mark.parametrize("seed", [1, 2])
def test_a_written_table_ingested_in_steps_equals_pyiceberg_at_every_snapshot(tmp_path, seed):
    rng = random.Random(seed)
    cat, uri = catalog(tmp_path)
    table = cat.create_table("shop.orders", schema=ICEBERG_SCHEMA)
    store, source = str(tmp_path / "store"), f"iceberg:{uri}#shop.orders"
    table.append(iceberg_rows(rng, 20))
    write_snapshots(table, rng, 3)
    first = jsonl(ok(ddcli(store, "ingest", "orders", source, "--max-versions", "2", "--json")).stdout)[0]
    assert first["created"] and len(first["versions"]) == 2
    for _ in range(2):
        table = cat.load_table("shop.orders")
        write_snapshots(table, rng, 4)
        ok(ddcli(store, "ingest", "orders", source))
    assert jsonl(ok(ddcli(store, "ingest", "orders", source, "--json")).stdout)[0]["noop"]
    table = cat.load_table("shop.orders")
    for s in snapshots(table):
        assert ddcli_at(store, "orders", s.sequence_number, tmp_path) == pyiceberg_at(table, s.snapshot_id), s


def test_a_metadata_file_and_commit_times(tmp_path):
    """``iceberg:METADATA.json``: a later metadata file of the same table continues where
    the trace stopped (the table is known by its UUID); --time-from timestamp."""
    from pyiceberg.table import StaticTable
    rng = random.Random(5)
    cat, _ = catalog(tmp_path)
    table = cat.create_table("shop.t", schema=ICEBERG_SCHEMA)
    table.append(iceberg_rows(rng, 10))
    write_snapshots(table, rng, 2)
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "t", f"iceberg:{table.metadata_location[len('file://'):]}", "--time-from", "timestamp"))
    table = cat.load_table("shop.t")
    write_snapshots(table, rng, 3)
    table = cat.load_table("shop.t")
    ok(ddcli(store, "ingest", "t", f"iceberg:{table.metadata_location}", "--time-from", "timestamp"))
    static = StaticTable.from_metadata(table.metadata_location)
    times: list[int] = []
    for s in snapshots(static):
        times.append(max(s.timestamp_ms * 1000, times[-1] + 1) if times else s.timestamp_ms * 1000)
        assert ddcli_at(store, "t", times[-1], tmp_path) == pyiceberg_at(static, s.snapshot_id)


def test_unknown_tables_are_one_line(tmp_path):
    _, uri = catalog(tmp_path)
    store = str(tmp_path / "store")
    assert "cannot be opened" in one_line_error(ddcli(store, "ingest", "t", f"iceberg:{uri}#shop.nope"))
    assert "cannot be opened" in one_line_error(ddcli(store, "ingest", "t", f"iceberg:{tmp_path}/no.metadata.json"))
