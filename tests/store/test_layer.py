"""The layer format: consolidation against a plain fold, the file written tmp → fsync → rename
(or, inside a commit's write, synced with the others just before the commit:
storage/blobs/durability.py), the footer that describes it, row groups that a key look-up
can skip, and metadata round trips."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import layer as layer_mod
from storage.blobs import durability
from storage.blobs.local import LOCAL
from storage.lattice import Frontier, advance, time_columns
from storage.layer import (Layer, LayerFile, consolidate, empty_updates, footer_metadata,
                           read_layer_files, sort_columns, updates_table, write_layer_file)
from storage.state.trace import Hold, Trace, type_from_str, type_to_str
from storage.store import Store

# ------------------------------------------------------------------ consolidation


def update_rows(d):
    return st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "cc"]),
                              st.tuples(*[st.integers(0, 4)] * d), st.integers(-2, 2)), max_size=40)


def as_table(rows, d):
    cols = {"k": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows], pa.string())}
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array([r[2][i] for r in rows], pa.int64())
    cols["diff"] = pa.array([r[3] for r in rows], pa.int64())
    return pa.table(cols)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_consolidate_equals_a_fold_of_advanced_times_sorted_without_zeros(data):
    d = data.draw(st.integers(1, 3))
    rows = data.draw(update_rows(d))
    since = data.draw(st.none() | st.lists(st.tuples(*[st.integers(0, 4)] * d), max_size=3)
                      .map(lambda ts: Frontier(ts, d)))
    key = data.draw(st.sampled_from([["k"], ["v"], ["k", "v"]]))
    # presummed (a reduce's output, said to be consolidated) is checked, not trusted:
    # the result is the same whether the rows really are consolidated or not
    presummed = data.draw(st.booleans())
    out = consolidate(as_table(rows, d), ["k", "v"], key, d, since, presummed=presummed)

    ref = Counter()
    for k, v, t, diff in rows:
        t = advance(t, since) if since is not None else t
        ref[(k, v, t)] += diff
    ref = {x: n for x, n in ref.items() if n}

    tcols = time_columns(d)
    assert out.column_names == ["k", "v"] + tcols + ["diff"]
    assert out.schema.field("diff").type == pa.int64()
    got_rows = out.to_pylist()
    got = {(r["k"], r["v"], tuple(r[c] for c in tcols)): r["diff"] for r in got_rows}
    assert got == ref and len(got_rows) == len(ref)
    order = sort_columns(["k", "v"], key, d)
    keys = [tuple(r[c] for c in order) for r in got_rows]
    assert keys == sorted(keys)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_integer_rows_are_summed_and_sorted_whatever_their_types_and_ranges(data):
    # integer columns take a sort of the rows packed into one int64: signed and unsigned
    # types, negative values, ranges too wide to pack (the hash aggregation then), a null
    # (the same), and several chunks (a merge concatenates sorted layers)
    d = data.draw(st.integers(1, 2))
    types = [data.draw(st.sampled_from([pa.int8(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64()])) for _ in "ab"]
    wide = data.draw(st.booleans())

    def value(typ):
        lo = 0 if pa.types.is_unsigned_integer(typ) else -3
        big = 2 ** (typ.bit_width - 2) if wide and typ.bit_width >= 32 else 3
        return st.sampled_from([lo, 0, 1, 3, big])

    rows = data.draw(st.lists(st.tuples(value(types[0]), value(types[1]) | st.none() if data.draw(st.booleans())
                                        else value(types[1]), st.tuples(*[st.integers(0, 3)] * d),
                                        st.integers(-2, 2)), max_size=40))
    tcols = time_columns(d)

    def table_of(part):
        cols = {"a": pa.array([r[0] for r in part], types[0]), "b": pa.array([r[1] for r in part], types[1])}
        for i, c in enumerate(tcols):
            cols[c] = pa.array([r[2][i] for r in part], pa.int64())
        cols["diff"] = pa.array([r[3] for r in part], pa.int64())
        return pa.table(cols)

    cut = data.draw(st.integers(0, len(rows)))
    table = pa.concat_tables([table_of(rows[:cut]), table_of(rows[cut:])])
    key = data.draw(st.sampled_from([["a"], ["b"], ["b", "a"]]))
    out = consolidate(table, ["a", "b"], key, d)

    ref = Counter()
    for a, b, t, diff in rows:
        ref[(a, b, t)] += diff
    ref = {x: n for x, n in ref.items() if n}
    got_rows = out.to_pylist()
    assert {(r["a"], r["b"], tuple(r[c] for c in tcols)): r["diff"] for r in got_rows} == ref
    assert len(got_rows) == len(ref) and out.schema.field("a").type == types[0]
    order = sort_columns(["a", "b"], key, d)
    keys = [tuple((r[c] is None, r[c] or 0) for c in order) for r in got_rows]
    assert keys == sorted(keys)


def test_presummed_rows_that_are_not_consolidated_are_still_summed_nulls_included():
    rows = pa.table({"k": pa.array([1, 1, 2, 2], pa.int64()), "v": pa.array([None, None, "a", "b"], pa.string()),
                     "time": pa.array([3, 3, 0, 0], pa.int64()), "diff": pa.array([1, 1, 1, -1], pa.int64())})
    out = consolidate(rows, ["k", "v"], ["k"], 1, presummed=True)
    assert out.to_pylist() == [{"k": 1, "v": None, "time": 3, "diff": 2}, {"k": 2, "v": "a", "time": 0, "diff": 1},
                               {"k": 2, "v": "b", "time": 0, "diff": -1}]
    zero = rows.slice(2, 1).set_column(3, "diff", pa.array([0], pa.int64()))
    assert consolidate(zero, ["k", "v"], ["k"], 1, presummed=True).num_rows == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_presummed_rows_in_order_or_nearly_come_out_consolidated_and_sorted(data):
    # a reduce's output arrives sorted: kept as it is when strictly ascending, sorted otherwise
    # (one pair swapped, a tie on every column, a null or a NaN among the values)
    n = data.draw(st.integers(0, 30))
    ks = sorted(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    vals = data.draw(st.lists(st.sampled_from([None, -1.5, 0.0, 0.5, 2.0, float("nan")]), min_size=n, max_size=n))
    rows = [(k, v, t, data.draw(st.sampled_from([-1, 1, 2]))) for t, (k, v) in enumerate(zip(ks, vals))]
    if n >= 2 and data.draw(st.booleans()):
        i = data.draw(st.integers(0, n - 2))
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    if n >= 1 and data.draw(st.booleans()):
        rows.append(rows[data.draw(st.integers(0, n - 1))])  # an equal (data, time): summed
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows], pa.float64()),
                      "time": pa.array([r[2] for r in rows], pa.int64()), "diff": pa.array([r[3] for r in rows], pa.int64())})
    out = consolidate(table, ["k", "v"], ["k"], 1, presummed=True).to_pylist()

    nan = lambda v: "nan" if v != v else v  # noqa: E731 - NaN as a value equal to itself
    ref = Counter()
    for k, v, t, diff in rows:
        ref[(k, nan(v), t)] += diff
    got = Counter({(r["k"], nan(r["v"]), r["time"]): r["diff"] for r in out})
    assert len(got) == len(out) and all(n != 0 for n in got.values())
    assert got == Counter({x: n for x, n in ref.items() if n})
    for a, b in zip(out, out[1:]):  # ascending by (k, v, time), nulls and NaN after numbers
        if a["k"] != b["k"]:
            assert a["k"] < b["k"]
        elif nan(a["v"]) != nan(b["v"]):
            rank = lambda v: (2, 0) if v is None else ((1, 0) if v != v else (0, v))  # noqa: E731
            assert rank(a["v"]) < rank(b["v"])
        else:
            assert a["time"] < b["time"]


def test_sort_order_is_key_then_other_data_then_time():
    assert sort_columns(["a", "b", "c"], ["b"], 2) == ["b", "a", "c", "time_0", "time_1"]
    assert sort_columns(["a", "b"], ["a", "b"], 1) == ["a", "b", "time"]


# ------------------------------------------------------------------ writing files


def make_layer_table(n, d=1):
    rows = [(i // 3, "x" * (i % 3), tuple([i % 5] * d), 1) for i in range(n)]
    return consolidate(as_table(rows, d), ["k", "v"], ["k"], d)


def test_layer_file_footer_describes_the_layer(tmp_path):
    table = make_layer_table(30, d=2)
    lower, upper, since = Frontier([(0, 0)]), Frontier([(5, 0), (0, 5)]), Frontier([(0, 0)])
    f = write_layer_file(table, str(tmp_path), key=["k"], lower=lower, upper=upper, since=since)
    path = os.path.join(tmp_path, f.name)
    assert os.listdir(tmp_path) == [f.name], "no temporary file left behind"
    meta = footer_metadata(path)
    assert Frontier.from_json(meta["lower"], 2) == lower
    assert Frontier.from_json(meta["upper"], 2) == upper
    assert Frontier.from_json(meta["since"], 2) == since
    assert meta["rows"] == f.rows == table.num_rows == 30
    assert meta["key"] == ["k"] and (meta["key_min"], meta["key_max"]) == (0, 9)
    assert (f.key_min, f.key_max) == (0, 9) and f.bytes == os.path.getsize(path)
    back = read_layer_files([path])
    assert back.equals(table)


def test_layer_files_get_unique_names_and_never_overwrite(tmp_path):
    table = make_layer_table(5)
    f = Frontier([(0,)])
    names = {write_layer_file(table, str(tmp_path), key=["k"], lower=f, upper=f, since=f).name for _ in range(5)}
    assert len(names) == 5 and set(os.listdir(tmp_path)) == names


def test_row_group_statistics_let_a_key_lookup_skip_most_of_a_large_layer(tmp_path, monkeypatch):
    monkeypatch.setattr(layer_mod, "ROW_GROUP_ROWS", 1000)
    n = 40_000
    rows = [((i * 7919) % 5000, "v", ((i * 31) % 11,), 1) for i in range(n)]  # unsorted input
    table = consolidate(as_table(rows, 1), ["k", "v"], ["k"], 1)
    f = write_layer_file(table, str(tmp_path), key=["k"], lower=Frontier([(0,)]), upper=Frontier([(11,)]),
                         since=Frontier([(0,)]))
    path = os.path.join(tmp_path, f.name)
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups >= 20
    kidx = md.schema.names.index("k")
    hits = [g for g in range(md.num_row_groups)
            if md.row_group(g).column(kidx).statistics.min <= 1234 <= md.row_group(g).column(kidx).statistics.max]
    assert 1 <= len(hits) <= 2, "a key lives in at most two row groups of a sorted layer"
    # a filtered dataset scan reads only what holds the key, and finds all of it
    got = ds.dataset(path).to_table(filter=ds.field("k") == 1234)
    assert got.num_rows == sum(1 for r in table.column("k").to_pylist() if r == 1234) > 0


def test_read_layer_files_casts_to_the_trace_schema(tmp_path):
    f = Frontier([(0,)])
    t1 = pa.table({"s": pa.array(["a"], pa.string()), "time": pa.array([1], pa.int64()), "diff": pa.array([1], pa.int64())})
    t2 = pa.table({"s": pa.array(["b"], pa.large_string()), "time": pa.array([2], pa.int64()), "diff": pa.array([1], pa.int64())})
    names = [write_layer_file(t, str(tmp_path), key=["s"], lower=f, upper=f, since=f).name for t in (t1, t2)]
    schema = empty_updates(pa.schema([("s", pa.string())]), 1).schema
    out = read_layer_files([os.path.join(tmp_path, n) for n in names], schema=schema)
    assert out.schema.equals(schema) and out.column("s").to_pylist() == ["a", "b"]
    assert read_layer_files([]) is None


def test_updates_table_and_empty_updates_have_the_layer_columns():
    data = pa.table({"k": [1, 2]})
    t = updates_table(data, [pa.array([0, 1]).to_numpy(), pa.array([2, 3]).to_numpy()],
                      pa.array([1, -1]).to_numpy(), 2)
    assert t.column_names == ["k", "time_0", "time_1", "diff"]
    e = empty_updates(pa.schema([("k", pa.int64())]), 1)
    assert e.num_rows == 0 and e.column_names == ["k", "time", "diff"]


# ------------------------------------------------------------------ metadata round trips


def test_layer_and_trace_metadata_round_trip_through_json():
    lf = LayerFile("abc.parquet", 3, 100, 0, 9)
    layer = Layer("id1", [lf], Frontier([(0, 1)]), Frontier([(2, 0), (0, 3)]), Frontier([(0, 0)]), 4, 7, 3, 100)
    assert Layer.from_json(layer.to_json(), 2) == layer
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.timestamp("us", tz="UTC")),
                        ("e", pa.decimal128(10, 2)), ("f", pa.date32()), ("g", pa.bool_()), ("h", pa.float64())])
    tr = Trace("t", schema, ["a"], 2, Frontier([(0, 0)]), Frontier([(2, 0), (0, 3)]), [layer], [],
               5, {"p": Hold(Frontier([(1, 1)]), 3)}, {"sig": 0}, None)
    back = Trace.from_json("t", tr.to_json())
    assert back.schema.equals(schema) and back.to_json() == tr.to_json()
    assert back.holds == tr.holds and back.layers == tr.layers


@pytest.mark.parametrize("t", [pa.int8(), pa.uint64(), pa.float32(), pa.string(), pa.large_string(), pa.binary(),
                               pa.bool_(), pa.date32(), pa.date64(), pa.timestamp("ns"), pa.timestamp("ms", tz="Europe/Paris"),
                               pa.decimal128(38, 9), pa.time64("us"), pa.duration("s"), pa.binary(16)])
def test_column_types_round_trip_through_their_text_form(t):
    assert type_from_str(type_to_str(t)) == t


# ------------------------------------------------------------------ synced before the commit


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
