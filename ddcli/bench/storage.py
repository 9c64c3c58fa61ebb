"""``ddcli bench storage``: ingest, merge and query figures of the trace store.

The benchmark, with every size a parameter (a test runs it tiny):

1. generate Parquet update files in a work directory: ``updates`` updates over ``keys``
   keys (columns ``key``, ``val``, ``time``, ``diff``; d = 1, times 0..99, diffs +1 and
   -1), then ``small_ingests`` files of ``small_size`` updates at the times after those;
2. ingest the big files in one ``Store.ingest`` (one layer), then every small file in an
   ingest of its own (geometric merging runs after each): updates/s of both phases;
3. layers after the small ingests (O(log n)), bytes on disk against one fully consolidated
   Parquet file of the same updates (written like a layer);
4. ``storage.sql.query.as_of`` at the median update time, at the latest time and for one key,
   against DuckDB computing the same answer directly over the consolidated file (median
   of ``repeat`` timed runs after a warm-up; the ratio is ours / DuckDB's), and the
   warm-up itself as ``first_s``: the first query of a new process, which checks every
   layer's hash (on an object store: fetches every layer once);
5. the metadata log (ddcli/bench/metadata.py): ``meta_ingests`` one-row ingests into a
   fresh store; the log's size and the commit latency after 10^2 of them and after all;
6. the Delta Lake logs (ddcli/bench/delta.py): ``delta_ingests`` small ingests into a store
   that writes a Delta version after each commit and into one that does not, taking turns;
   the ratio of their median latencies, and what importing delta-rs adds to a command's start.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import statistics
import tempfile
import time as _time
from typing import Callable

from ddcli.bench.common import dir_bytes, require_matplotlib, save_figure
from ddcli.bench.s3 import requests_per_commit, store_locations

BIG_TIMES = 100       # distinct times of the big ingest
PART_ROWS = 1_000_000  # rows per generated Parquet file of the big ingest
TRACE = "bench"


def _gen(rng, n: int, keys: int, t0: int, t1: int):
    import numpy as np
    import pyarrow as pa
    key = rng.integers(0, keys, n, dtype=np.int64)
    val = rng.integers(0, 4, n, dtype=np.int64)
    t = rng.integers(t0, t1, n, dtype=np.int64) if t1 > t0 + 1 else np.full(n, t0, np.int64)
    diff = np.where(rng.random(n) < 0.8, 1, -1).astype(np.int64)
    return pa.table({"key": key, "val": val, "time": t, "diff": diff})


def _timed(fn, repeat: int, first: list | None = None) -> tuple[float, object]:
    t0 = _time.perf_counter()
    out = fn()  # warm-up (and the answer)
    if first is not None:
        first.append(_time.perf_counter() - t0)
    times = []
    for _ in range(repeat):
        t0 = _time.perf_counter()
        fn()
        times.append(_time.perf_counter() - t0)
    return statistics.median(times), out


def _forget_checked_layers(store, trace) -> None:
    """Forget that this process checked (and, on an object store, fetched) the layers."""
    from storage import integrity
    integrity.forget_verified()
    for p in store.layer_paths(trace):
        store.blobs.forget_copy(p)


def bench_storage(*, updates: int = 10_000_000, keys: int = 1_000_000, small_ingests: int = 1000,
                  small_size: int = 1000, repeat: int = 5, workdir: str | None = None,
                  seed: int = 1, log: Callable[[str], None] | None = None,
                  meta_ingests: int = 10_000, log_retention: float = 30.0, s3: bool = False,
                  delta_ingests: int = 200) -> dict:
    """Run the storage benchmark and return its figures (see the module docstring)."""
    import duckdb
    import numpy as np
    import pyarrow as pa

    from storage.store import Store

    say = log or (lambda msg: None)
    own = workdir is None
    root = tempfile.mkdtemp(prefix="ddcli-bench-") if own else os.path.abspath(workdir)
    os.makedirs(root, exist_ok=True)
    stack = contextlib.ExitStack()
    try:
        rng = np.random.default_rng(seed)
        gen_dir = os.path.join(root, "input")
        where = stack.enter_context(store_locations(s3, root))
        store_dir = where("store")  # a folder, or an s3:// prefix
        if os.path.exists(store_dir):
            shutil.rmtree(store_dir)
        os.makedirs(gen_dir, exist_ok=True)
        say(f"generating {updates:,} + {small_ingests:,} x {small_size:,} updates in {gen_dir}")
        big_paths, small_paths = _generate(rng, gen_dir, updates, keys, small_ingests, small_size)
        store = Store(store_dir)
        ingests = _ingests(store, big_paths, small_paths, updates, small_size, say)
        commits = ingests.pop("commits")
        tr = store.trace(TRACE)
        say("writing one consolidated Parquet file of the same updates")
        cons_path, cons_bytes, cons_rows = _consolidated_file(store, tr, root)
        queries = _queries(store, tr, cons_path, updates, keys, repeat, say)
        metadata = None
        if meta_ingests:
            from ddcli.bench.metadata import bench_metadata
            metadata = bench_metadata(root, ingests=meta_ingests, log_retention=log_retention, say=say)
        delta = None
        if delta_ingests:
            from ddcli.bench.delta import bench_delta
            delta = bench_delta(root, where, ingests=delta_ingests, say=say)
        return {
            "benchmark": "storage",
            "params": {"updates": updates, "keys": keys, "small_ingests": small_ingests,
                       "small_size": small_size, "repeat": repeat, "big_times": BIG_TIMES,
                       "big_files": len(big_paths), "seed": seed, "delta_ingests": delta_ingests},
            **ingests,
            "store": {"location": store.path, "where": store.blobs.where(), "commits": commits},
            "bytes": {"trace_layers": tr.bytes(), "store_dir": dir_bytes(store_dir) if os.path.isdir(store_dir) else None,
                      "consolidated": cons_bytes,
                      "ratio": tr.bytes() / cons_bytes if cons_bytes else None},
            "rows": {"trace": tr.rows(), "consolidated": cons_rows},
            "query": queries,
            "metadata": metadata,
            "delta": delta,
            "environment": {"python": platform.python_version(), "pyarrow": pa.__version__,
                            "duckdb": duckdb.__version__, "cpus": os.cpu_count(),
                            "machine": platform.machine()},
        }
    finally:
        stack.close()
        if own:
            shutil.rmtree(root, ignore_errors=True)


def _generate(rng, gen_dir: str, updates: int, keys: int, small_ingests: int, small_size: int) -> tuple[list, list]:
    """The Parquet files of the big ingest (``PART_ROWS`` rows each) and of the small ones."""
    import pyarrow.parquet as pq
    big_paths = []
    left, part = updates, 0
    while left > 0:
        n = min(left, PART_ROWS)
        p = os.path.join(gen_dir, f"big_{part:04d}.parquet")
        pq.write_table(_gen(rng, n, keys, 0, BIG_TIMES), p)
        big_paths.append(p)
        left -= n
        part += 1
    small_paths = []
    for i in range(small_ingests):
        p = os.path.join(gen_dir, f"small_{i:05d}.parquet")
        pq.write_table(_gen(rng, small_size, keys, BIG_TIMES + i, BIG_TIMES + i + 1), p)
        small_paths.append(p)
    return big_paths, small_paths


def _ingests(store, big_paths: list[str], small_paths: list[str], updates: int, small_size: int, say) -> dict:
    """Phase 1, one big ingest; phase 2, many small ones: their figures."""
    import numpy as np
    say(f"ingesting {updates:,} updates from {len(big_paths)} Parquet file(s)")
    t0 = _time.perf_counter()
    store.ingest(TRACE, big_paths, key=["key"])
    big_s = _time.perf_counter() - t0
    layers_after_big = len(store.trace(TRACE).layers)
    commits = {"versions_few": store.state().version, "requests_few": requests_per_commit(store)}
    small_ingests = len(small_paths)
    say(f"{small_ingests:,} ingests of {small_size:,} updates")
    latencies, layer_counts = [], []
    for p in small_paths:
        t0 = _time.perf_counter()
        store.ingest(TRACE, [p])
        latencies.append(_time.perf_counter() - t0)
        t = store.trace(TRACE)  # outside the timed part
        layer_counts.append(len(t.layers) + len(t.pending))
    small_s = sum(latencies)
    commits.update(versions_many=store.state().version, requests_many=requests_per_commit(store))
    tr = store.trace(TRACE)
    total_small = small_ingests * small_size
    return {
        "big_ingest": {"updates": updates, "seconds": big_s, "updates_per_s": updates / big_s if big_s else None,
                       "layers": layers_after_big},
        "small_ingests": {"ingests": small_ingests, "updates": total_small, "seconds": small_s,
                          "updates_per_s": total_small / small_s if small_s else None,
                          "ingests_per_s": small_ingests / small_s if small_s else None,
                          "latency_s": _percentiles(latencies),
                          "latencies_s": latencies},
        "layers": {"after_small_ingests": len(tr.layers) + len(tr.pending), "after_each_ingest": layer_counts,
                   "log2_ingests": float(np.log2(max(small_ingests + 1, 2)))},
        "commits": commits,
    }


def _consolidated_file(store, tr, root: str) -> tuple[str, int, int]:
    """The trace's updates in one fully consolidated Parquet file written like a layer:
    its path, bytes and rows."""
    import pyarrow.parquet as pq

    from storage.layer import ROW_GROUP_ROWS, consolidate
    cons_path = os.path.join(root, "consolidated.parquet")
    cons = consolidate(store.read_updates(tr), tr.data_columns, tr.key, tr.d)
    pq.write_table(cons, cons_path, row_group_size=ROW_GROUP_ROWS, compression="zstd")
    return cons_path, os.path.getsize(cons_path), cons.num_rows


def _queries(store, tr, cons_path: str, updates: int, keys: int, repeat: int, say) -> dict:
    """``as_of`` at the median time, at the latest time and for one key, against DuckDB
    over the consolidated file."""
    import duckdb

    from storage.sql.duck import quote
    from storage.sql.query import as_of
    upper = tr.upper.elements[0][0]
    t_mid = BIG_TIMES // 2 - 1 if updates else upper // 2
    t_latest = upper - 1
    probe_key = int(keys // 2)
    cols = ", ".join(quote(c) for c in tr.data_columns)
    con = duckdb.connect()
    src = "read_parquet('" + cons_path.replace("'", "''") + "')"

    def direct(cond: str):
        q = (f"SELECT {cols}, CAST(SUM(diff) AS BIGINT) AS count FROM {src} WHERE {cond} "
             f"GROUP BY {cols} HAVING SUM(diff) <> 0 ORDER BY {cols}")
        return lambda: con.sql(q).to_arrow_table()

    cases = {
        "mid": (t_mid, None, f"time <= {t_mid}"),
        "latest": (t_latest, None, f"time <= {t_latest}"),
        "point": (t_latest, f"key = {probe_key}", f"time <= {t_latest} AND key = {probe_key}"),
    }
    queries = {}
    for name, (t, where, cond) in cases.items():
        say(f"query --as-of {t}" + (f" --where '{where}'" if where else "") + f" ({repeat} runs each)")
        cold: list[float] = []
        _forget_checked_layers(store, tr)  # the first run reads as a new process would
        ours_s, ours = _timed(lambda: as_of(store, TRACE, t, where), repeat, cold)
        base_s, base = _timed(direct(cond), repeat)
        same = ours.num_rows == base.num_rows and \
            ours.column("count").to_pylist() == base.column("count").to_pylist()
        queries[name] = {"as_of": t, "where": where, "rows": ours.num_rows, "store_s": ours_s,
                         "first_s": cold[0],
                         "duckdb_consolidated_s": base_s, "ratio": ours_s / base_s if base_s else None,
                         "same_answer": bool(same)}
    return queries


def _percentiles(xs: list[float]) -> dict:
    if not xs:
        return {}
    import numpy as np
    a = np.asarray(xs)
    return {f"p{q}": float(np.percentile(a, q)) for q in (50, 90, 99)} | {"max": float(a.max())}


def write_plot(result: dict, path: str) -> None:
    """The figures of ``ddcli bench storage`` as a PNG: the latency CDF of the small ingests
    and the number of layers after each of them against log2 of the ingests so far."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    p = result["params"]
    lat = np.sort(np.asarray(result["small_ingests"].get("latencies_s") or [], dtype=float)) * 1000
    layers = result["layers"].get("after_each_ingest") or []
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if len(lat):
        left.step(lat, np.arange(1, len(lat) + 1) / len(lat), where="post")
        for q, style in ((50, ":"), (99, "--")):
            v = float(np.percentile(lat, q))
            left.axvline(v, color="grey", linestyle=style, linewidth=1, label=f"p{q} {v:.1f} ms")
        left.legend(loc="lower right")
        if lat[0] > 0 and lat[-1] / lat[0] > 20:
            left.set_xscale("log")
    left.set_xlabel("ingest latency (ms)")
    left.set_ylabel("fraction of ingests")
    left.set_title(f"{p['small_ingests']:,} ingests of {p['small_size']:,} updates")
    left.grid(alpha=0.3)
    if layers:
        n = np.arange(1, len(layers) + 1)
        right.plot(n, layers, label="layers in the trace")
        right.plot(n, np.log2(n + 1) + 1, linestyle="--", color="grey", label="log2(ingests) + 1")
        right.legend(loc="upper left")
    right.set_xlabel("small ingests so far")
    right.set_ylabel("layers")
    right.set_title("geometric merging keeps O(log n) layers")
    right.grid(alpha=0.3)
    fig.suptitle(f"ddcli bench storage: {p['updates']:,} updates, {p['keys']:,} keys, then small ingests")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def _fmt_s(s) -> str:
    return "-" if s is None else (f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s")


def _fmt_n(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def print_table(res: dict, output: str | None = None) -> None:
    """The figures as one Rich table (stdout, or ``output``)."""
    from rich import box
    from rich.table import Table

    from ddcli.render import _console, _text_out

    p = res["params"]
    t = Table(title=f"ddcli bench storage ({p['updates']:,} updates, {p['keys']:,} keys, "
                    f"{p['small_ingests']:,} x {p['small_size']:,} small ingests)",
              box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("compared with", justify="right")
    b, s = res["big_ingest"], res["small_ingests"]
    t.add_row("big ingest", f"{_fmt_n(b['updates_per_s'])} updates/s", _fmt_s(b["seconds"]))
    t.add_row("small ingests", f"{_fmt_n(s['updates_per_s'])} updates/s",
              f"{s['ingests_per_s']:.1f} ingests/s" if s["ingests_per_s"] else "-")
    lay = res["layers"]
    t.add_row("layers after small ingests", str(lay["after_small_ingests"]),
              f"log2(ingests) = {lay['log2_ingests']:.1f}")
    by = res["bytes"]
    t.add_row("bytes on disk (layers)", _fmt_n(by["trace_layers"]),
              f"consolidated {_fmt_n(by['consolidated'])} ({by['ratio']:.2f}x)" if by["ratio"] else "-")
    t.add_row("store directory", _fmt_n(by["store_dir"]), "")
    st = res.get("store")
    if st:
        c = st["commits"]
        t.add_row("store", st["location"], st["where"])
        if c["requests_few"] is not None:
            t.add_row(f"requests per commit at {c['versions_many']:,} versions", f"{c['requests_many']:.1f}",
                      f"at {c['versions_few']:,} versions: {c['requests_few']:.1f}")
    for name, q in res["query"].items():
        label = f"query --as-of {q['as_of']}" + (f" --where {q['where']}" if q["where"] else "")
        ratio = f"{q['ratio']:.2f}x" if q["ratio"] is not None else "-"
        t.add_row(f"{label} ({q['rows']:,} rows)", _fmt_s(q["store_s"]),
                  f"DuckDB on consolidated {_fmt_s(q['duckdb_consolidated_s'])} ({ratio})"
                  + (f"; first run {_fmt_s(q['first_s'])}" if q.get("first_s") is not None else "")
                  + ("" if q["same_answer"] else " DIFFERENT ANSWER"))
    m = res.get("metadata")
    if m:
        e, l = m["early"], m["late"]
        t.add_row(f"log after {e['ingests']:,} / {l['ingests']:,} ingests",
                  f"{_fmt_n(l['log_bytes'])} bytes, {l['log_files']:,} files",
                  f"{_fmt_n(e['log_bytes'])} bytes, {e['log_files']:,} files")
        t.add_row(f"commit latency after {l['ingests']:,} ingests (median)",
                  _fmt_s(l["commit_latency_s"]["median"]),
                  f"after {e['ingests']:,}: {_fmt_s(e['commit_latency_s']['median'])} ({m['latency_ratio']:.2f}x)")
    dl = res.get("delta")
    if dl:
        w, wo = dl["with_delta_s"], dl["without_delta_s"]
        t.add_row(f"ingest latency with Delta logs ({dl['ingests']:,} ingests, median)", _fmt_s(w["median"]),
                  f"without: {_fmt_s(wo['median'])} ({dl['latency_ratio']:.2f}x; p90 {dl['p90_ratio']:.2f}x)")
        t.add_row("start cost of importing delta-rs", _fmt_s(dl["import_deltalake_s"]), "commands that commit")
    with _text_out(output) as fh:
        _console(fh).print(t)
