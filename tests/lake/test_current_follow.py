"""The current-state tables follow ddcli's log: after a kill, with the setting off, on S3.

These tests need no Spark: an output is a trace marked as a pipeline's whose updates are
sealed the way a run commits them (``make_output`` and ``seal`` of tests/helpers/store_refs.py). The writer that is
killed runs in a fresh interpreter with ``DDCLI_FAULT`` set (storage/faults.py), so it dies
right there, as SIGKILL would leave it; the next command that changes the store, or
``ddcli compact``, must bring the table up to date. Readers: delta-rs and polars, and
DuckDB's Delta extension (in an environment of its own: the extension's package matches
DuckDB 1.5), compared with a plain-Python fold of the updates the test wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from storage.store import Store
from tests.helpers.delta_reader import storage_options
from tests.helpers.store_refs import fold, make_output, py, run_writer, seal, write_updates

A = [((k, "a"), (0,), 1) for k in range(4)] + [((9, None), (0,), 2)]
B = [((0, "a"), (1,), -1), ((9, None), (1,), 1), ((5, "é"), (1,), 3)]
C = [((5, "é"), (2,), -3), ((1, "a"), (2,), 1)]


SEAL = """
from storage.store import Store
from tests.helpers.store_refs import seal
seal(Store({store}), "out", {path}, {upper})
"""


def current(uri: str, reader: str = "delta-rs") -> dict[tuple, int]:
    import pyarrow as pa
    if reader == "polars":
        import polars as pl
        table = pl.read_delta(uri, storage_options=storage_options(uri)).to_arrow()
    else:
        from deltalake import DeltaTable
        table = pa.table(DeltaTable(uri, storage_options=storage_options(uri)).to_pyarrow_table())
    return {(r["k"], r["v"]): r["count"] for r in table.to_pylist()}


def versions(uri: str) -> list[dict]:
    from deltalake import DeltaTable
    return [h["ddcli"] for h in reversed(DeltaTable(uri, storage_options=storage_options(uri)).history())]


def table_of(store: Store, name: str = "out") -> str:
    return store.blobs.join(store.path, "tables", name)


@pytest.mark.parametrize("next_command", ["seal", "compact"])
@pytest.mark.parametrize("fault", ["tables.before_commit", "tables.after_commit"])
def test_a_kill_between_ddcli_commit_and_the_table_is_caught_up_by_the_next_command(tmp_path, fault, next_command):
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    uri = table_of(store)
    assert current(uri) == fold(A, (0,))
    b = write_updates(str(tmp_path / "b.parquet"), B, 1)
    res = run_writer(SEAL.format(store=py(store.path), path=py(b), upper=2),
                     fault=fault)
    assert res.returncode == 137, f"the writer did not reach {fault}: rc={res.returncode}\n{res.stderr[-2000:]}"
    store = Store(store.path)
    assert store.trace("out").upper.elements == ((2,),), "ddcli's commit stands"
    if fault == "tables.before_commit":
        assert current(uri) == fold(A, (0,)), "the table lags behind ddcli's log, never ahead"
    raw = A + B
    if next_command == "seal":
        seal(store, "out", write_updates(str(tmp_path / "c.parquet"), C, 1), 3)
        raw += C
    else:
        store.compact()
    t = store.trace("out").upper.elements[0][0] - 1
    assert current(uri) == current(uri, "polars") == fold(raw, (t,))
    shown = versions(uri)
    assert shown[-1]["time"] == [t] and len({v["logVersion"] for v in shown}) == len(shown), "no version twice"
    store.compact()  # nothing left to catch up: no new version
    assert len(versions(uri)) == len(shown) and not store.warnings


def test_the_tables_can_be_turned_off_and_on_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCLI_TABLES", "off")
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    seal(store, "out", write_updates(str(tmp_path / "b.parquet"), B, 1), 2)
    assert not store.blobs.exists(store.blobs.join(store.path, "tables"))
    assert os.listdir(store.path) and not os.path.exists(os.path.join(store.path, "tables"))
    assert os.path.exists(os.path.join(store.trace_dir("out"), "_delta_log")), "the trace's own log is still written"
    monkeypatch.setenv("DDCLI_TABLES", "on")
    store = Store(store.path)
    store.ingest("other", [write_updates(str(tmp_path / "o.parquet"), A, 1)])  # any change catches them up
    assert current(table_of(store)) == fold(A + B, (1,))
    assert not os.path.exists(table_of(store, "other")), "an input trace has no current-state table"


def test_a_table_whose_output_is_dropped_is_emptied(tmp_path):
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    store.write_and_commit("drop", lambda written: None, lambda s, _: s.with_traces({"out": None}))
    uri = table_of(store)
    assert current(uri) == {} and "empty" in versions(uri)[-1]
    os.remove(os.path.join(store.path, "_tables_synced.json"))  # the next change checks every table
    store.ingest("other", [write_updates(str(tmp_path / "o.parquet"), A, 1)])
    assert len(versions(uri)) == 2


def test_current_state_tables_on_the_object_store(s3_env, tmp_path):
    from tests.helpers.s3 import new_prefix
    store = Store(new_prefix())
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    raw, uri = list(A), table_of(store)
    assert uri.startswith("s3://")
    for i, rows in enumerate([B, C]):
        seal(store, "out", write_updates(str(tmp_path / f"u{i}.parquet"), rows, 1), i + 2)
        raw += rows
        assert current(uri) == current(uri, "polars") == fold(raw, (i + 1,))
    assert [v["change"] for v in versions(uri)] == ["full", "incremental", "incremental"]
    assert not store.warnings


def test_ddcli_publish_iceberg_applies_each_change_as_one_copy_on_write_snapshot(tmp_path):
    """Created, then one snapshot per change, nothing when current (the first and the last
    publish through the command line)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from storage.lake.iceberg import publish
    from tests.helpers.operations import run_ddcli
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    target = f"sqlite:///{tmp_path}/cat.db#bi.out"
    raw, times = list(A), []
    for i, rows in enumerate([None, B, None, C]):
        if rows is not None:
            seal(store, "out", write_updates(str(tmp_path / f"u{i}.parquet"), rows, 1), len(times) + 1)
            raw += rows
        if i in (0, 3):
            res = run_ddcli(["publish", "out", "--iceberg", target, "--json"], store.path)
            assert res.returncode == 0, res.stderr
        else:
            publish(store, "out", target)
        t = store.trace("out").upper.elements[0][0] - 1
        if not times or times[-1][0] != t:
            times.append((t, fold(raw, (t,))))
    table = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/cat.db").load_table("bi.out")
    assert os.path.isdir(tmp_path / "warehouse"), "the default warehouse is next to the catalog"
    snapshots = table.snapshots()
    assert len(snapshots) == len(times) == 3, "nothing published twice"
    for s, (t, want) in zip(snapshots, times):
        assert s.summary["ddcli.time"] == str(t)
        got = table.scan(snapshot_id=s.snapshot_id).to_arrow().to_pylist()
        assert {(r["k"], r["v"]): r["count"] for r in got} == want
    res = run_ddcli(["publish", "out", "--iceberg", "sqlite:///nowhere.db"], store.path)
    assert res.returncode != 0 and "CATALOG_URI#namespace.table" in res.stderr and len(res.stderr.splitlines()) == 1


def test_writers_racing_on_one_store_leave_every_table_showing_its_output(tmp_path):
    """Two writers seal their own outputs in turns: the record is overtaken and rewritten
    out of order, each table still shows its output at its latest time."""
    import threading
    root = str(tmp_path / "store")
    raws = {}
    for name in ("a", "b"):
        make_output(Store(root), name, write_updates(str(tmp_path / f"{name}.parquet"), A, 1))
        raws[name] = list(A)
    errors = []

    def writer(name):
        try:
            store = Store(root)
            for i in range(5):
                rows = [((i, name), (i + 1,), 1), ((9, None), (i + 1,), -1 if i % 2 else 1)]
                seal(store, name, write_updates(str(tmp_path / f"{name}{i}.parquet"), rows, 1), i + 2)
                raws[name] += rows
            assert not store.warnings, store.warnings
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    store = Store(root)
    for name in ("a", "b"):
        assert current(table_of(store, name)) == fold(raws[name], (5,))
        assert versions(table_of(store, name))[-1]["time"] == [5]


def test_compact_vacuums_what_no_version_within_the_retention_names(tmp_path):
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    for i, rows in enumerate([B, C]):
        seal(store, "out", write_updates(str(tmp_path / f"u{i}.parquet"), rows, 1), i + 2)
    uri = table_of(store)
    store.compact()  # the default grace: an hour, nothing is old enough
    data = {n for n in os.listdir(uri) if n.endswith(".parquet")}
    from deltalake import DeltaTable
    live = {u.rsplit("/", 1)[-1] for u in DeltaTable(uri).file_uris()}
    assert live < data, "merges replaced files, which stay for the retention"
    store.compact(grace_seconds=0)
    assert {n for n in os.listdir(uri) if n.endswith(".parquet")} == live
    assert len(versions(uri)) == 3 and all("time" in v for v in versions(uri)), "a vacuum adds no version"
    assert current(uri) == fold(A + B + C, (2,)) and not store.warnings


def test_outputs_named_in_the_setting_are_published_to_iceberg_after_each_change(tmp_path, monkeypatch):
    from pyiceberg.catalog.sql import SqlCatalog
    catalog = f"sqlite:///{tmp_path}/cat.db"
    monkeypatch.setenv("DDCLI_ICEBERG_OUTPUTS", f"other=sqlite:///{tmp_path}/x.db#a.b; out={catalog}#bi.out")
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    raw, want = list(A), [fold(A, (0,))]
    for i, rows in enumerate([B, C]):
        seal(store, "out", write_updates(str(tmp_path / f"u{i}.parquet"), rows, 1), i + 2)
        raw += rows
        want.append(fold(raw, (i + 1,)))
    table = SqlCatalog("default", uri=catalog).load_table("bi.out")
    got = [{(r["k"], r["v"]): r["count"] for r in table.scan(snapshot_id=s.snapshot_id).to_arrow().to_pylist()}
           for s in table.snapshots()]
    assert got == want and [s.summary["ddcli.time"] for s in table.snapshots()] == ["0", "1", "2"]
    assert not store.warnings


# DuckDB with its Delta extension, in a process of its own: every version of a table as JSON
DUCKDB_DELTA = """
import glob, json, sys
import duckdb, duckdb_extension_delta
ext = glob.glob(duckdb_extension_delta.__path__[0] + "/extensions/*/delta.duckdb_extension")[0]
con = duckdb.connect()
con.execute(f"LOAD '{ext}'")
uri, count = sys.argv[1], int(sys.argv[2])
print(json.dumps([con.sql(f"SELECT * FROM delta_scan('{uri}', version => {v})").fetchall() for v in range(count)]))
"""


@pytest.fixture(scope="session")
def duckdb_delta(tmp_path_factory) -> str:
    """A Python with DuckDB 1.5 and the ``duckdb-extension-delta`` package (it loads the
    extension from the package, offline)."""
    env = tmp_path_factory.mktemp("duckdb_delta") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = str(env / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "duckdb==1.5.*", "duckdb-extension-delta"], check=True,
                   capture_output=True)
    return python


def test_duckdbs_delta_extension_reads_every_version(tmp_path, duckdb_delta):
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    seal(store, "out", write_updates(str(tmp_path / "b.parquet"), B, 1), 2)
    seal(store, "out", write_updates(str(tmp_path / "c.parquet"), C, 1), 3)
    uri = table_of(store)
    shown = versions(uri)
    res = subprocess.run([duckdb_delta, "-c", DUCKDB_DELTA, uri, str(len(shown))], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    read = json.loads(res.stdout)
    assert [v["time"] for v in shown] == [[0], [1], [2]]
    for version, rows in zip(shown, read):
        assert {(k, v): n for k, v, n in rows} == fold(A + B + C, tuple(version["time"])), version


def test_commits_of_one_command_give_each_table_one_version(tmp_path):
    """Inside ``following_once`` (the pipelines of one ``ddcli run``) several outputs
    change, one of them twice: each table gets one version, at the end, showing the
    output's latest time; the tables are brought up a few at once."""
    store = Store(str(tmp_path / "store"))
    names = [f"o{i}" for i in range(6)]
    raws = {}
    for n in names:
        make_output(store, n, write_updates(str(tmp_path / f"{n}.parquet"), A, 1))
        raws[n] = list(A)
    before = {n: len(versions(table_of(store, n))) for n in names}
    with store.following_once():
        for i, n in enumerate(names):
            for j, rows in enumerate([B, C] if i == 0 else [B]):
                seal(store, n, write_updates(str(tmp_path / f"{n}_{j}.parquet"), rows, 1), j + 2)
                raws[n] += rows
            assert len(versions(table_of(store, n))) == before[n], "nothing follows before the end"
    for n in names:
        t = store.trace(n).upper.elements[0][0] - 1
        assert current(table_of(store, n)) == current(table_of(store, n), "polars") == fold(raws[n], (t,))
        assert len(versions(table_of(store, n))) == before[n] + 1
    assert not store.warnings


def test_a_table_that_fails_leaves_the_others_brought_up_and_is_caught_up_next(tmp_path, monkeypatch):
    import storage.lake.outputs as outputs
    store = Store(str(tmp_path / "store"))
    for n in ("a", "b", "c"):
        make_output(store, n, write_updates(str(tmp_path / f"{n}.parquet"), A, 1))
    real = outputs.bring_up

    def failing(store_, name, trace, version):
        if name == "b":
            raise OSError("disk gone")
        return real(store_, name, trace, version)

    monkeypatch.setattr(outputs, "bring_up", failing)
    with store.following_once():
        for n in ("a", "b", "c"):
            seal(store, n, write_updates(str(tmp_path / f"{n}1.parquet"), B, 1), 2)
    assert [w for w in store.warnings if "'b'" in w and "disk gone" in w] and len(store.warnings) == 1
    for n in ("a", "c"):
        assert current(table_of(store, n)) == fold(A + B, (1,))
    assert current(table_of(store, "b")) == fold(A, (0,)), "behind, never wrong"
    monkeypatch.setattr(outputs, "bring_up", real)
    store.ingest("other", [write_updates(str(tmp_path / "o.parquet"), A, 1)])  # the next change catches up
    assert current(table_of(store, "b")) == fold(A + B, (1,))


@pytest.mark.parametrize("stop", [ValueError, KeyboardInterrupt])
def test_an_error_inside_one_command_still_follows_an_interrupt_does_not(tmp_path, stop):
    store = Store(str(tmp_path / "store"))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    with pytest.raises(stop):
        with store.following_once():
            seal(store, "out", write_updates(str(tmp_path / "b.parquet"), B, 1), 2)
            raise stop()
    want = fold(A + B, (1,)) if stop is ValueError else fold(A, (0,))
    assert current(table_of(store)) == want
    store.compact()
    assert current(table_of(store)) == fold(A + B, (1,))


def test_an_outputs_table_is_computed_within_upkeeps_memory_spilling_the_rest(tmp_path, monkeypatch):
    """The collection behind a new table is grouped over every update of the output; with
    upkeep's DuckDB held to 64 MB, 1.5 million distinct rows spill and the table still
    shows the fold. Queries of the user's keep DuckDB's default."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import storage.sql.duck as duck
    monkeypatch.setattr(duck, "UPKEEP_MEMORY", "64MB")
    monkeypatch.setattr(duck, "_BASES", {})
    n = 1_500_000
    k = pa.array(range(n), pa.int64())
    table = pa.table({"k": k, "v": pa.compute.cast(k, pa.string()), "time": pa.array([0] * n, pa.int64()),
                      "diff": pa.array([1] * n, pa.int64())})
    path = str(tmp_path / "wide.parquet")
    pq.write_table(table, path)
    store = Store(str(tmp_path / "store"))
    tail = write_updates(str(tmp_path / "tail.parquet"), [((k_, "x"), (1,), 2) for k_ in range(3)], 1)
    store.ingest("out", [path])
    make_output(store, "out", tail)
    assert os.path.isdir(duck.upkeep_folder()), "the table was computed by upkeep's database"
    with duck.connect(store, upkeep=True) as con:
        limit = con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    with duck.connect(store) as con:
        default = con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit != default and limit.startswith("61"), (limit, default)  # 64 MB as DuckDB prints it: 61.0 MiB
    want = {(i, str(i)): 1 for i in range(n)} | {(i, "x"): 2 for i in range(3)}
    assert current(table_of(store)) == want
    assert not store.warnings
