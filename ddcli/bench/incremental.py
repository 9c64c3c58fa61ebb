"""``ddcli bench incremental``: an incremental run against from-scratch evaluation.

Count by key over ``updates`` updates of ``keys`` keys, already processed; then a run with
``new_updates`` updates at as many distinct times. Reports the incremental run's time, the
from-scratch time (``verify`` at the last time), their ratio, and the incremental run's time
when the prior state has ``scale`` times more keys (the same number of updates, so the
arrangement the run must consult is ``scale`` times larger): the cost should follow the
change, not the state. Every figure comes from one process on one machine, so ratios
compare like with like.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _time
from typing import Callable

from ddcli.bench.common import save_figure, step_cdf, write_parquet

COUNT_PIPELINE = '''
def pipeline(p):
    p.output("counts", p.input("events").count(by="key"))
'''


def _count_state(work: str, name: str, updates: int, keys: int, seed: int, log, where=None) -> tuple:
    """A store whose count pipeline has processed ``updates`` updates over ``keys`` keys
    (``where(name)``: the store's location; default a folder under ``work``)."""
    import numpy as np
    import pyarrow as pa

    from ops.run.run import run_pipeline
    from storage.store import Store

    rng = np.random.default_rng(seed)
    st = Store(where(name) if where else os.path.join(work, name))
    pipe = os.path.join(work, "count_pipeline.py")
    with open(pipe, "w") as fh:
        fh.write(COUNT_PIPELINE)
    files, chunk = [], 2_000_000
    for i, start in enumerate(range(0, updates, chunk)):
        n = min(chunk, updates - start)
        # every key at least once, then random keys; 100 distinct times
        key = (np.arange(start, start + n, dtype=np.int64) % keys) if start < keys else rng.integers(0, keys, n)
        tbl = pa.table({"key": key.astype(np.int64), "time": rng.integers(0, 100, n).astype(np.int64),
                        "diff": np.ones(n, np.int64)})
        files.append(write_parquet(tbl, os.path.join(work, f"{name}_{i}.parquet")))
    if log:
        log(f"{name}: ingest {updates:,} updates over {keys:,} keys")
    st.ingest("events", files)
    t0 = _time.perf_counter()
    run_pipeline(st, pipe)
    first = _time.perf_counter() - t0
    st.advance("events", since="100")
    st.compact(full=True, grace_seconds=0)
    return st, pipe, first


def _new_updates(work: str, name: str, n: int, keys: int, t0: int, seed: int) -> str:
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    tbl = pa.table({"key": rng.integers(0, keys, n).astype(np.int64),
                    "time": np.arange(t0, t0 + n, dtype=np.int64),
                    "diff": np.where(rng.random(n) < 0.7, 1, -1).astype(np.int64)})
    return write_parquet(tbl, os.path.join(work, f"{name}_new.parquet"))


def bench_incremental(*, updates: int = 10_000_000, keys: int = 1_000_000, new_updates: int = 1000,
                      scale: int = 10, repeat: int = 10, workdir: str | None = None,
                      log: Callable[[str], None] | None = None, s3: bool = False) -> dict:
    """Figures use the median of ``repeat`` timed incremental runs (after one warm-up);
    ``s3``: the stores on a local S3-compatible server (ddcli/bench/s3.py)."""
    import contextlib
    from statistics import median

    from ddcli.bench.s3 import requests_per_commit, store_locations
    from ops.run.run import run_pipeline
    from ops.spark.session import get_spark
    from ops.verify.verify import verify_pipeline

    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-incr-")
    os.makedirs(work, exist_ok=True)
    stack = contextlib.ExitStack()
    try:
        where = stack.enter_context(store_locations(s3, work))
        get_spark()
        res: dict = {"benchmark": "incremental", "updates": updates, "keys": keys,
                     "new_updates": new_updates, "scale": scale, "repeat": repeat}
        figures = {}
        for label, k in (("base", keys), ("scaled", keys * scale)):
            st, pipe, first = _count_state(work, label, updates, k, 1, log, where)
            prior_rows = st.trace("events").rows()
            t_next = 100
            runs = []
            for i in range(repeat + 1):  # the first is a warm-up (Python workers, JIT), not timed
                st.ingest("events", [_new_updates(work, f"{label}_{i}", new_updates, k, t_next, 2 + i)])
                t_next += new_updates
                t0 = _time.perf_counter()
                run_pipeline(st, pipe)
                if i:
                    runs.append(_time.perf_counter() - t0)
            if log:
                log(f"{label}: {repeat} incremental runs of {new_updates:,} updates at {new_updates:,} times: "
                    f"median {median(runs):.2f} s")
            f = {"first_run_s": first, "incremental_runs_s": runs, "incremental_s": median(runs),
                 "prior_state_rows": prior_rows, "store": st.path,
                 "versions": st.state().version, "requests_per_commit": requests_per_commit(st)}
            if label == "base":
                if log:
                    log("base: from-scratch evaluation (verify at the last time)")
                t0 = _time.perf_counter()
                v = verify_pipeline(st, pipe, at=[(t_next - 1,)])
                f["from_scratch_s"] = _time.perf_counter() - t0
                f["verified"] = v.ok
            figures[label] = f
        res["figures"] = figures
        res["speedup_vs_from_scratch"] = figures["base"]["from_scratch_s"] / figures["base"]["incremental_s"]
        res["scaled_over_base"] = figures["scaled"]["incremental_s"] / figures["base"]["incremental_s"]
        return res
    finally:
        stack.close()
        if own:
            shutil.rmtree(work, ignore_errors=True)


def plot_incremental(res: dict, path: str) -> None:
    """Latency CDFs of the incremental runs (base and scaled state) beside the from-scratch time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = res["figures"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    step_cdf(ax, f["base"]["incremental_runs_s"], f"{res['keys']:,} keys of prior state")
    step_cdf(ax, f["scaled"]["incremental_runs_s"], f"{res['keys'] * res['scale']:,} keys ({res['scale']}x)")
    ax.axvline(f["base"]["from_scratch_s"], color="grey", linestyle="--",
               label=f"from scratch {f['base']['from_scratch_s']:.1f} s")
    ax.set_xscale("log")
    ax.set_xlabel("seconds per run")
    ax.set_ylabel("fraction of runs")
    ax.set_title(f"count by key: runs of {res['new_updates']:,} updates after {res['updates']:,}")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
