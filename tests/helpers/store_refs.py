"""Plain-Python references and small builders shared by the storage tests.

Nothing here uses ``storage/sql/query.py``: the collection at a time is computed from the raw
updates of a trace (``Store.read_updates``) with numpy and dictionaries, and compared with a
fold of the updates the test generated itself.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from storage.lattice import Frontier, advance, leq, time_columns
from tests.helpers import REPO

# An update in the tests: ((k, v), time tuple, diff); data columns are k (int64) and v (string).
DATA_COLUMNS = ["k", "v"]


# ------------------------------------------------------------------ update files


def write_updates(path: str, updates, d: int, *, with_diff: bool = True) -> str:
    """Write updates as an update file; the extension (.csv or .parquet) picks the format."""
    cols = {
        "k": pa.array([u[0][0] for u in updates], pa.int64()),
        "v": pa.array([u[0][1] for u in updates], pa.string()),
    }
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array([u[1][i] for u in updates], pa.int64())
    if with_diff:
        cols["diff"] = pa.array([u[2] for u in updates], pa.int64())
    table = pa.table(cols)
    if path.endswith(".csv"):
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


# ------------------------------------------------------------------ a pipeline's output without Spark


def make_output(store, name: str, path: str) -> None:
    """Ingest ``path`` as trace ``name``, then mark it as pipeline ``p``'s output."""
    store.ingest(name, [path])
    store.write_and_commit("own", lambda written: None,
                           lambda s, _: s.with_traces({name: s.traces[name].with_(owner="p")}))


def seal(store, name: str, path: str, upper: int) -> None:
    """What a run commits to its output: the updates of ``path`` sealed up to ``upper``."""
    import pyarrow.parquet as pq

    from storage.lattice import parse_frontier
    from storage.state import transitions
    trace, frontier = store.trace(name), parse_frontier(str(upper), 1)
    table = pq.read_table(path).cast(store.read_updates(trace, []).schema)
    store.write_and_commit("run", lambda written: store.write_seal(trace, table, frontier, written),
                           lambda s, sealed: transitions.advance(s, trace, sealed, frontier, None))


# ------------------------------------------------------------------ references


def fold(updates, t) -> dict:
    """The collection at time ``t``: the sum of the diffs of updates at times ``<= t``, zeros dropped."""
    acc: Counter = Counter()
    for data, s, diff in updates:
        if leq(tuple(s), tuple(t)):
            acc[tuple(data)] += diff
    return {k: v for k, v in acc.items() if v != 0}


class Updates:
    """A table of updates, ready to be accumulated at many times (numpy, no query engine)."""

    def __init__(self, table: pa.Table, d: int, data_columns=DATA_COLUMNS):
        self.d = d
        self.times = np.stack([table.column(c).to_numpy() for c in time_columns(d)], axis=1) \
            if table.num_rows else np.zeros((0, d), dtype=np.int64)
        self.diff = table.column("diff").to_numpy() if table.num_rows else np.zeros(0, dtype=np.int64)
        self.data = list(zip(*[table.column(c).to_pylist() for c in data_columns])) if table.num_rows else []
        self.raw = [(self.data[i], tuple(int(x) for x in self.times[i]), int(self.diff[i]))
                    for i in range(len(self.data))]

    def at(self, t) -> dict:
        if not len(self.diff):
            return {}
        mask = np.all(self.times <= np.asarray(t, dtype=np.int64), axis=1)
        acc: Counter = Counter()
        for i in np.flatnonzero(mask):
            acc[self.data[i]] += int(self.diff[i])
        return {k: v for k, v in acc.items() if v != 0}


def collection_at(store, trace, t, layers=None) -> dict:
    return Updates(store.read_updates(trace, layers), trace.d).at(t)


def box(d: int, lo: int, hi: int):
    """Every time with coordinates in ``[lo, hi]``."""
    return list(itertools.product(range(lo, hi + 1), repeat=d))


def check_equivalence(store, name: str, raw_updates, hi: int, *, frontier: Frontier | None = None) -> int:
    """Assert the trace's collection equals the fold at every time of ``[0, hi]^d`` beyond
    ``frontier`` (default: the trace's since). Returns how many times were checked."""
    trace = store.trace(name)
    frontier = trace.since if frontier is None else frontier
    got = Updates(store.read_updates(trace), trace.d)
    ref = Updates(_as_table(raw_updates, trace.d), trace.d)
    checked = 0
    for t in box(trace.d, 0, hi):
        if not frontier.beyond(t):
            continue
        assert got.at(t) == ref.at(t), f"collection of {name} at {t} differs from the fold"
        checked += 1
    return checked


def _as_table(updates, d: int) -> pa.Table:
    cols = {"k": pa.array([u[0][0] for u in updates], pa.int64()),
            "v": pa.array([u[0][1] for u in updates], pa.string())}
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array([u[1][i] for u in updates], pa.int64())
    cols["diff"] = pa.array([u[2] for u in updates], pa.int64())
    return pa.table(cols)


# ------------------------------------------------------------------ layer invariants


def check_layers(store, name: str) -> None:
    """Every layer file of the trace is sorted, consolidated and describes itself."""
    from storage.layer import footer_metadata, sort_columns

    trace = store.trace(name)
    tcols = time_columns(trace.d)
    order = sort_columns(trace.data_columns, trace.key, trace.d)
    for layer in trace.all_layers():
        assert layer.rows == sum(f.rows for f in layer.files)
        firsts = []  # the first and last sort keys of each file: a layer's files follow each other
        for f, path in zip(layer.files, store.layer_paths(trace, [layer])):
            table = pq.read_table(path)
            assert table.column_names == trace.data_columns + tcols + ["diff"]
            rows = table.select(order).to_pylist()
            keys = [tuple(r[c] for c in order) for r in rows]
            assert keys == sorted(keys), f"{path} is not sorted by {order}"
            assert len(set(keys)) == len(keys), f"{path} has duplicate (data, time)"
            assert 0 not in table.column("diff").to_pylist(), f"{path} has a zero diff"
            if keys:
                firsts.append((keys[0], keys[-1]))
            meta = footer_metadata(path)
            assert meta["rows"] == table.num_rows == f.rows
            assert Frontier.from_json(meta["lower"], trace.d) == layer.lower
            assert Frontier.from_json(meta["upper"], trace.d) == layer.upper
            assert Frontier.from_json(meta["since"], trace.d) == layer.since
            if table.num_rows and not layer.since.is_empty():
                # every time was advanced to the layer's since: advancing again moves nothing
                times = [tuple(r[c] for c in tcols) for r in table.select(tcols).to_pylist()]
                assert all(advance(t, layer.since) == t for t in times), f"{path} has times not advanced to its since"
        for (_, last), (first, _) in zip(firsts, firsts[1:]):
            assert _nulls_first(last) < _nulls_first(first), f"the files of layer {layer.id} overlap or are out of order"


def _nulls_first(key: tuple) -> tuple:
    return tuple((v is not None, v) for v in key)


def files_on_disk(store) -> set[str]:
    """Every file under the store's trace directories and stray temporary log files."""
    out = set()
    blobs = store.blobs
    root = blobs.join(store.path, "traces")
    for t in blobs.list_folders(root):
        out.update(blobs.join(root, t, n) for n in blobs.list(blobs.join(root, t)))
    out.update(store.log.stray_tmp_files())
    return out


def referenced_files(store) -> set[str]:
    state = store.state()
    out = set()
    for t in state.traces.values():
        out.update(store.layer_paths(t))
    return out


# ------------------------------------------------------------------ subprocess writers


def run_writer(code: str, *, fault: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh interpreter (the repository importable), optionally
    with ``DDCLI_FAULT`` set."""
    env = dict(os.environ)
    env.pop("DDCLI_FAULT", None)
    if fault:
        env["DDCLI_FAULT"] = fault
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def py(value) -> str:
    """A Python literal for ``value`` (for code passed to :func:`run_writer`)."""
    return json.dumps(value)


# ------------------------------------------------------------------ the store's clock (storage/clock.py)


def moment_between() -> float:
    """A time after every file written so far and before every file written once this
    returns, on a local folder and on an object store alike (whose object times are whole
    seconds): files are made old by moving the store's clock past it (:func:`set_store_clock`),
    not by setting their times back, which an object store cannot do."""
    import time
    t = time.time()
    edge = math.floor(t) + 1            # > t >= every earlier file's time (floored or not)
    time.sleep(max(0.0, edge + 1 - time.time()))  # later files: time >= edge + 1, floored or not
    return edge + 0.5


def set_store_clock(monkeypatch, now: float) -> None:
    """Fix the store's clock at ``now`` for this test and every process it starts."""
    from storage.clock import TEST_NOW
    monkeypatch.setenv(TEST_NOW, repr(now))
