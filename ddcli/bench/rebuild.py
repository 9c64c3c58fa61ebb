"""``ddcli bench rebuild``: what an edit of a pipeline file costs.

A three-stage pipeline (orders joined with customers, the amounts summed per region, a
last ``select``) has processed ``orders`` orders over ``times`` distinct times. Then:

* **a comment edit** (a docstring, comments, blank lines, a call split over two lines):
  the next run needs no rebuild; it is timed against the same run of the unedited file
  (both over the same new orders, on copies of one store);
* **the last operator changed** (``sum * 1`` becomes ``sum * 2``): ``run --rebuild``
  recomputes the sum and the select from the join's stored state, timed against
  ``run --rebuild-all``, which recomputes all three stages from the inputs, on copies of
  one store. Both rebuilt outputs are compared at the latest complete time.

Every figure is the median of ``repeat`` timed runs after an untimed warm-up, in one
process, so ratios compare like with like; the load average is reported with them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time as _time
from statistics import median
from typing import Callable

from ddcli.bench.common import write_parquet

THREE_STAGES = '''
def pipeline(p):
    orders = p.input("orders")
    customers = p.input("customers")
    placed = orders.join(customers, on="customer")
    per_region = placed.sum(by="region", column="amount")
    p.output("revenue", per_region.select("region", total="sum * 1"))
'''

COMMENTED = '''
"""Revenue per region, edited by hand: nothing of the dataflow changed."""


def pipeline(p):
    # orders placed by customers, who live in regions
    orders = p.input("orders")
    customers = p.input("customers")

    placed = orders.join(customers,
                         on="customer")  # stage 1
    per_region = placed.sum(by="region", column="amount")  # stage 2
    p.output("revenue", per_region.select("region", total="sum * 1"))  # stage 3
'''

LAST_CHANGED = THREE_STAGES.replace('total="sum * 1"', 'total="sum * 2"')


def _inputs(work: str, orders: int, customers: int, regions: int, times: int, seed: int) -> tuple[str, str]:
    """Orders over ``times`` times (some cancelled later) and customers moving between regions."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    t = rng.integers(0, times, orders)
    cancel_t = np.minimum(t + rng.integers(1, max(2, times // 4), orders), times - 1)
    cancel = (rng.random(orders) < 0.1) & (cancel_t > t)  # a tenth cancelled at a later time
    ids = np.arange(orders, dtype=np.int64)
    who = rng.integers(0, customers, orders).astype(np.int64)
    amount = rng.integers(1, 1000, orders).astype(np.int64)
    o = pa.table({"order_id": np.r_[ids, ids[cancel]], "customer": np.r_[who, who[cancel]],
                  "amount": np.r_[amount, amount[cancel]], "time": np.r_[t, cancel_t[cancel]].astype(np.int64),
                  "diff": np.r_[np.ones(orders, np.int64), -np.ones(int(cancel.sum()), np.int64)]})
    c_ids = np.arange(customers, dtype=np.int64)
    region = rng.integers(0, regions, customers).astype(np.int64)
    m = rng.random(customers) < 0.2  # a fifth of the customers move once
    move_t = rng.integers(1, times, customers)
    new_region = (region + 1 + rng.integers(0, regions - 1, customers)) % regions
    c = pa.table({"customer": np.r_[c_ids, c_ids[m], c_ids[m]],
                  "region": np.r_[region, region[m], new_region[m]],
                  "time": np.r_[np.zeros(customers, np.int64), move_t[m], move_t[m]].astype(np.int64),
                  "diff": np.r_[np.ones(customers, np.int64), -np.ones(int(m.sum()), np.int64),
                                np.ones(int(m.sum()), np.int64)]})
    return (write_parquet(o, os.path.join(work, "orders.parquet")),
            write_parquet(c, os.path.join(work, "customers.parquet")))


def _new_orders(work: str, n: int, customers: int, at: int, seed: int) -> str:
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    o = pa.table({"order_id": np.arange(10**9 + seed * n, 10**9 + (seed + 1) * n, dtype=np.int64),
                  "customer": rng.integers(0, customers, n).astype(np.int64),
                  "amount": rng.integers(1, 1000, n).astype(np.int64),
                  "time": np.full(n, at, np.int64), "diff": np.ones(n, np.int64)})
    return write_parquet(o, os.path.join(work, f"new_orders_{seed}.parquet"))


def _pipeline_file(work: str, source: str) -> str:
    path = os.path.join(work, "revenue.py")  # one file, edited in place: one pipeline name
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    return path


def _timed(fn) -> tuple[float, object]:
    t0 = _time.perf_counter()
    out = fn()
    return _time.perf_counter() - t0, out


def bench_rebuild(*, orders: int = 200_000, customers: int = 20_000, regions: int = 50, times: int = 50,
                  new_orders: int = 1000, repeat: int = 3, workdir: str | None = None,
                  log: Callable[[str], None] | None = None) -> dict:
    """The figures (see the module's docstring)."""
    from ops.run.run import run_pipeline
    from ops.spark.session import get_spark
    from storage.sql.query import as_of
    from storage.store import Store

    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-rebuild-")
    os.makedirs(work, exist_ok=True)
    try:
        get_spark()
        load = [os.getloadavg()[0]]
        base = Store(os.path.join(work, "base"))
        o, c = _inputs(work, orders, customers, regions, times, 1)
        base.ingest("orders", [o], key=["order_id"], upper=str(times))
        base.ingest("customers", [c], key=["customer"], upper=str(times))
        path = _pipeline_file(work, THREE_STAGES)
        if log:
            log(f"first run over {orders:,} orders at {times} times")
        first_s, _ = _timed(lambda: run_pipeline(base, path))

        def copy(name: str) -> Store:
            dst = os.path.join(work, name)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(base.path, dst)
            return Store(dst)

        # a comment edit: the next run over new orders, against the same run of the unedited file
        base.ingest("orders", [_new_orders(work, new_orders, customers, times, 7)], upper=str(times + 1))
        base.advance("customers", upper=str(times + 1))
        plain, commented, comment_rebuilds = [], [], []
        for i in range(repeat + 1):  # the first round warms up, untimed
            _pipeline_file(work, THREE_STAGES)
            s_plain, _ = _timed(lambda: run_pipeline(copy("plain"), path))
            _pipeline_file(work, COMMENTED)
            st = copy("commented")
            s_comment, res = _timed(lambda: run_pipeline(st, path))
            comment_rebuilds.append(res.rebuilt is not None or res.nothing_to_do)
            if i:
                plain.append(s_plain)
                commented.append(s_comment)
        if log:
            log(f"comment edit: {median(commented):.2f} s against {median(plain):.2f} s unedited")

        # the last operator changed: a rebuild of what changed against one of everything
        base = st  # the store after the commented run, consumed up to times + 1
        path = _pipeline_file(work, LAST_CHANGED)
        partial, full, rebuilt, jobs = [], [], None, {}
        for i in range(repeat + 1):
            order = [("partial", dict(rebuild=True)), ("full", dict(rebuild_all=True))]
            for label, how in (order if i % 2 == 0 else order[::-1]):
                s = copy(label)
                seconds, res = _timed(lambda: run_pipeline(s, path, **how))
                if i:
                    (partial if label == "partial" else full).append(seconds)
                if label == "partial":
                    rebuilt = res.rebuilt
                jobs[label] = res.spark_jobs
        latest = (times,)
        same = as_of(Store(os.path.join(work, "partial")), "revenue", latest).equals(
            as_of(Store(os.path.join(work, "full")), "revenue", latest))
        load.append(os.getloadavg()[0])
        if log:
            log(f"last operator changed: rebuild {median(partial):.2f} s, full rebuild {median(full):.2f} s")
        return {
            "benchmark": "rebuild", "orders": orders, "customers": customers, "regions": regions, "times": times,
            "new_orders": new_orders, "repeat": repeat, "load_average": load, "first_run_s": first_s,
            "comment_edit": {"rebuild_needed": any(comment_rebuilds), "unedited_runs_s": plain,
                             "commented_runs_s": commented, "unedited_s": median(plain),
                             "commented_s": median(commented), "ratio": median(commented) / median(plain)},
            "last_operator": {"rebuild_runs_s": partial, "full_rebuild_runs_s": full,
                              "rebuild_s": median(partial), "full_rebuild_s": median(full),
                              "ratio": median(partial) / median(full), "spark_jobs": jobs,
                              "recomputed": rebuilt["recomputed"], "reused_state": rebuilt["reused_state"],
                              "outputs_equal_at_latest_time": bool(same)},
        }
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def plot_rebuild(res: dict, path: str) -> None:
    """The four median times side by side, each run as a dot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ce, lo = res["comment_edit"], res["last_operator"]
    bars = [("run, unedited", ce["unedited_runs_s"]), ("run, comment edited\n(no rebuild)", ce["commented_runs_s"]),
            ("--rebuild, last\noperator changed", lo["rebuild_runs_s"]), ("--rebuild-all", lo["full_rebuild_runs_s"])]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, (label, runs) in enumerate(bars):
        ax.bar(i, median(runs), color=["#8aa", "#8aa", "#4a7", "#c66"][i], width=0.6)
        ax.plot([i] * len(runs), runs, "k.", alpha=0.6)
        ax.text(i, median(runs), f"{median(runs):.1f} s", ha="center", va="bottom")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars])
    ax.set_ylabel("seconds")
    ax.set_title(f"three-stage pipeline over {res['orders']:,} orders at {res['times']} times: "
                 f"rebuild / full = {lo['ratio']:.2f}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
