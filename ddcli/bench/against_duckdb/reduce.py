"""``ddcli bench reduce``: reduce on a wide table, hot keys against uniform keys.

One process, one machine, side by side:

1. **hot**: ``updates`` insertions of distinct rows (a unique ``id``, an ``amount``, a
   ``carrier`` string) over ``hot_keys`` keys at ``times`` distinct times, in one run of a
   pipeline with four outputs: ``count``, ``sum(amount)``, ``min(amount)`` and
   ``top_k(3, amount)`` by key;
2. **uniform**: the same updates over ``uniform_keys`` keys;
3. **duckdb**: the per-time answers computed directly by DuckDB window functions over the
   same raw file -- the reference that also checks every output of both runs at every
   (key, time).

Figures: seconds of each run (Spark's session start is measured once and reported apart),
peak memory of the JVM and its Python workers together (sampled from ``/proc``), DuckDB's
time, and the ratios the issue aims at (hot / uniform <= 1.5 in time, peak <= 2 GB, within
5x of DuckDB). Then incremental runs of ``new_updates`` updates on each store: hot keys
against uniform keys (aim: within 2x).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _time
from typing import Callable

from ddcli.bench.common import save_figure
from ddcli.bench.process import Usage

PIPELINE = '''
def pipeline(p):
    rows = p.input("flights")
    p.output("n", rows.count(by="key"))
    p.output("total", rows.sum(by="key", column="amount", name="total"))
    p.output("least", rows.min(by="key", column="amount", name="least"))
    p.output("top3", rows.top_k(by="key", k=3, order_by="amount", descending=True))
'''


def _raw_table(n: int, keys: int, times: int, seed: int, first_id: int = 0, first_time: int = 0):
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    carriers = np.array(["AA", "B6", "DL", "EV", "MQ", "UA", "US", "WN", "9E", "VX"])
    return pa.table({
        "id": np.arange(first_id, first_id + n, dtype=np.int64),
        "key": rng.integers(0, keys, n).astype(np.int64),
        "amount": rng.integers(0, 1_000_000, n).astype(np.int64),
        "carrier": pa.array(carriers[rng.integers(0, len(carriers), n)]),
        "time": (first_time + rng.integers(0, times, n)).astype(np.int64),
        "diff": np.ones(n, np.int64),
    })


_WINDOW = "WINDOW w AS (PARTITION BY key ORDER BY time RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
REFERENCE_SQL = {
    # per (key, time): the answer at that time, by window functions over the raw rows
    "n": f"SELECT DISTINCT key, time, SUM(diff) OVER w AS v FROM raw {_WINDOW}",
    "total": f"SELECT DISTINCT key, time, SUM(amount * diff) OVER w AS v FROM raw {_WINDOW}",
    "least": f"SELECT DISTINCT key, time, MIN(amount) OVER w AS v FROM raw {_WINDOW}",
    # the sum of the three largest amounts present
    "top3": f"SELECT DISTINCT key, time, list_sum(max(amount, 3) OVER w) AS v FROM raw {_WINDOW}",
}

# the same per (key, time) figure from an output trace: its updates folded up to each time
FROM_TRACE_SQL = {
    "n": 'SUM("count" * diff)', "total": "SUM(total * diff)", "least": "SUM(least * diff)", "top3": "SUM(amount * diff)",
}


def _read_parquet(raw_path: str | list[str]) -> str:
    """DuckDB's ``read_parquet`` of one raw file or of several (the one-key case)."""
    paths = [raw_path] if isinstance(raw_path, str) else list(raw_path)
    return "read_parquet([" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "])"


def duckdb_reference(raw_path: str | list[str]) -> tuple[dict, float]:
    """Per output, a table of (key, time, value) at every (key, time) of the input."""
    import duckdb
    con = duckdb.connect()
    t0 = _time.perf_counter()
    con.execute(f"CREATE VIEW raw AS SELECT * FROM {_read_parquet(raw_path)}")
    answers = {name: con.sql(q).to_arrow_table() for name, q in REFERENCE_SQL.items()}
    return answers, _time.perf_counter() - t0


def check_outputs(store, raw_path: str | list[str], reference: dict, outputs=tuple(FROM_TRACE_SQL)) -> dict[str, int]:
    """Compare each output trace, folded at every (key, time) of the input, with DuckDB's
    answer; returns the number of (key, time) points checked per output."""
    import duckdb
    con = duckdb.connect()
    con.execute(f"CREATE VIEW raw AS SELECT * FROM {_read_parquet(raw_path)}")
    checked = {}
    for name in outputs:
        expr = FROM_TRACE_SQL[name]
        con.register("expected", reference[name])
        con.register("updates", store.read_updates(store.trace(name)))
        points, wrong = con.sql(f"""
            WITH per_time AS (SELECT key, time, {expr} AS v FROM updates GROUP BY ALL),
                 running AS (SELECT key, time, SUM(v) OVER (PARTITION BY key ORDER BY time) AS v FROM per_time)
            SELECT COUNT(*), COUNT(*) FILTER (WHERE r.v IS DISTINCT FROM e.v)
            FROM expected e ASOF LEFT JOIN running r ON e.key = r.key AND e.time >= r.time""").fetchall()[0]
        if wrong or not points:
            raise AssertionError(f"bench reduce: output {name!r} differs from DuckDB at {wrong} of {points} (key, time) points")
        checked[name] = int(points)
    return checked


def bench_reduce(*, updates: int = 1_000_000, hot_keys: int = 10, uniform_keys: int = 100_000, times: int = 10_000,
                 new_updates: int = 1000, repeat: int = 3, one_key: int = 0, one_key_times: int = 100_000,
                 workdir: str | None = None, log: Callable[[str], None] | None = None) -> dict:
    import pyarrow.parquet as pq

    from ops.run.run import run_pipeline
    from ops.spark.session import get_spark
    from storage.store import Store

    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-reduce-")
    os.makedirs(work, exist_ok=True)
    say = log or (lambda _m: None)
    try:
        res: dict = {"benchmark": "reduce", "updates": updates, "hot_keys": hot_keys, "uniform_keys": uniform_keys,
                     "times": times, "new_updates": new_updates, "repeat": repeat, "load_average": os.getloadavg()[0]}
        pipe = os.path.join(work, "reduce_bench.py")
        with open(pipe, "w") as fh:
            fh.write(PIPELINE)
        t0 = _time.perf_counter()
        get_spark()
        res["spark_start_s"] = _time.perf_counter() - t0
        say(f"Spark session started in {res['spark_start_s']:.1f} s")
        # warm-up, not timed: the JVM's JIT and the Python workers, on a small table
        warm = os.path.join(work, "warm.parquet")
        pq.write_table(_raw_table(2000, hot_keys, 100, seed=0), warm)
        st = Store(os.path.join(work, "store_warm"))
        st.ingest("flights", [warm])
        run_pipeline(st, pipe)
        figures = {}
        for label, keys in (("hot", hot_keys), ("uniform", uniform_keys)):
            raw = os.path.join(work, f"{label}.parquet")
            pq.write_table(_raw_table(updates, keys, times, seed=1), raw)
            st = Store(os.path.join(work, f"store_{label}"))
            st.ingest("flights", [raw])
            with Usage() as mem:
                t0 = _time.perf_counter()
                run_pipeline(st, pipe)
                seconds = _time.perf_counter() - t0
            say(f"{label}: {updates:,} updates over {keys:,} keys at {times:,} times: {seconds:.1f} s, "
                f"peak memory {mem.peak / 2**30:.2f} GiB")
            reference, duck_s = duckdb_reference(raw)
            checked = check_outputs(st, raw, reference)
            say(f"{label}: DuckDB's window functions {duck_s:.2f} s; every output equals them at "
                f"{min(checked.values()):,} (key, time) points")
            incr = []
            for i in range(repeat + 1):  # the first is a warm-up
                new = os.path.join(work, f"{label}_new_{i}.parquet")
                pq.write_table(_raw_table(new_updates, keys, new_updates, seed=10 + i,
                                          first_id=updates + i * new_updates, first_time=times + i * new_updates), new)
                st.ingest("flights", [new])
                t0 = _time.perf_counter()
                run_pipeline(st, pipe)
                if i:
                    incr.append(_time.perf_counter() - t0)
            say(f"{label}: incremental runs of {new_updates:,} updates: " + ", ".join(f"{s:.2f}" for s in incr) + " s")
            figures[label] = {"run_s": seconds, "peak_memory_bytes": mem.peak, "duckdb_s": duck_s,
                              "checked_points": checked, "incremental_runs_s": incr,
                              "incremental_s": sorted(incr)[len(incr) // 2]}
        res["figures"] = figures
        h, u = figures["hot"], figures["uniform"]
        res["hot_over_uniform"] = h["run_s"] / u["run_s"]
        res["hot_over_duckdb"] = h["run_s"] / h["duckdb_s"]
        res["uniform_over_duckdb"] = u["run_s"] / u["duckdb_s"]
        res["peak_memory_bytes"] = max(h["peak_memory_bytes"], u["peak_memory_bytes"])
        res["incremental_hot_over_uniform"] = h["incremental_s"] / u["incremental_s"]
        if one_key:
            res["one_key"] = _one_key(work, pipe, one_key, one_key_times, say)
        res["load_average_after"] = os.getloadavg()[0]
        res["aims"] = {"run_over_duckdb": {
            "value": {"hot": round(res["hot_over_duckdb"], 2), "uniform": round(res["uniform_over_duckdb"], 2)},
            "aim": "<= 5 for both tables (Spark's start apart)",
            "met": res["hot_over_duckdb"] <= 5 and res["uniform_over_duckdb"] <= 5}}
        return res
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _one_key(work: str, pipe: str, updates: int, times: int, say) -> dict:
    """One key holding every update, on the default settings: time and peak memory, and
    every output checked against DuckDB's window functions at every time, as above."""
    import pyarrow.parquet as pq

    from ops.run.run import run_pipeline
    from storage.store import Store
    files = []
    for i, start in enumerate(range(0, updates, 2_000_000)):  # written in slices: bounded memory here too
        n = min(2_000_000, updates - start)
        files.append(os.path.join(work, f"one_key_{i}.parquet"))
        pq.write_table(_raw_table(n, 1, times, seed=100 + i, first_id=start), files[-1])
    st = Store(os.path.join(work, "store_one_key"))
    st.ingest("flights", files)
    with Usage() as mem:
        t0 = _time.perf_counter()
        run_pipeline(st, pipe)
        seconds = _time.perf_counter() - t0
    say(f"one key: {updates:,} updates at {times:,} times: {seconds:.1f} s, peak memory {mem.peak / 2**30:.2f} GiB")
    reference, duck_s = duckdb_reference(files)
    checked = check_outputs(st, files, reference)
    say(f"one key: DuckDB's window functions {duck_s:.2f} s; every output equals them at "
        f"{min(checked.values()):,} (key, time) points")
    return {"updates": updates, "times": times, "run_s": seconds, "peak_memory_bytes": mem.peak,
            "duckdb_s": duck_s, "checked_points": checked}


def plot_reduce(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    f = res["figures"]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4))
    labels = ["hot", "uniform"]
    a.bar([f"ddcli {x}" for x in labels] + [f"DuckDB {x}" for x in labels],
          [f[x]["run_s"] for x in labels] + [f[x]["duckdb_s"] for x in labels], color=["C0", "C1", "C2", "C2"])
    a.set_ylabel("seconds")
    a.set_title(f"{res['updates']:,} updates at {res['times']:,} times, one run")
    b.bar(labels, [f[x]["peak_memory_bytes"] / 2**30 for x in labels], color=["C0", "C1"])
    b.axhline(2, color="red", linestyle="--", label="aim: 2 GB")
    b.set_ylabel("GiB (JVM + Python workers)")
    b.set_title("peak memory")
    b.legend()
    c.bar(labels, [f[x]["incremental_s"] for x in labels], color=["C0", "C1"])
    c.set_ylabel("seconds")
    c.set_title(f"incremental run of {res['new_updates']:,} updates")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
