"""``ddcli bench reach``: reachability over a graph whose edges slide.

Reachability from ``roots`` roots over a random graph of ``nodes`` nodes and ``edges``
edges with a sliding window (each step removes the oldest edge and adds a random new one,
each update at its own time). (1) Sustained latency: the time of a run of ``batch``
updates after 10^3, 10^4, ... updates have been processed, and the store's size there;
(2) throughput at full resolution: updates/s for runs of given sizes with Spark
``local[1]`` and ``local[2]`` (each in its own process), and the scaling. Every figure
comes from one process on one machine, so ratios compare like with like.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time as _time

from ddcli.bench.common import OUTPUTS, SAMPLES, dir_bytes, save_figure, step_cdf, write_parquet

REACH_PIPELINE = os.path.join(SAMPLES, "reach.py")


class SlidingGraph:
    """A random graph whose edges slide: remove the oldest, add a random new one."""

    def __init__(self, nodes: int, edges: int, seed: int):
        import numpy as np
        self.rng = np.random.default_rng(seed)
        self.nodes = nodes
        self.window = [tuple(e) for e in self.rng.integers(0, nodes, (edges, 2)).tolist()]
        self.time = 1

    def initial(self):
        import pyarrow as pa
        src, dst = zip(*self.window)
        n = len(src)
        return pa.table({"src": list(src), "dst": list(dst), "time": [0] * n, "diff": [1] * n})

    def step(self, updates: int):
        """``updates`` updates (half removals, half additions), each at its own time."""
        import pyarrow as pa
        src, dst, t, diff = [], [], [], []
        for _ in range(updates // 2):
            old = self.window.pop(0)
            new = tuple(self.rng.integers(0, self.nodes, 2).tolist())
            self.window.append(new)
            for (a, b), dd in ((old, -1), (new, 1)):
                src.append(a), dst.append(b), t.append(self.time), diff.append(dd)
                self.time += 1
        return pa.table({"src": src, "dst": dst, "time": t, "diff": diff})


def _reach_store(work: str, nodes: int, edges: int, roots: int, seed: int):
    import pyarrow as pa

    from storage.store import Store
    st = Store(os.path.join(work, "store"))
    g = SlidingGraph(nodes, edges, seed)
    st.ingest("edges", [write_parquet(g.initial(), os.path.join(work, "edges_0.parquet"))])
    st.ingest("roots", [write_parquet(pa.table({"node": list(range(roots)), "time": [0] * roots,
                                                 "diff": [1] * roots}), os.path.join(work, "roots.parquet"))],
              upper="{}")
    return st, g


def _reach_run(st, g: SlidingGraph, work: str, updates: int, i: int, pipeline: str = REACH_PIPELINE) -> float:
    from ops.run.run import run_pipeline
    path = write_parquet(g.step(updates), os.path.join(work, f"edges_{i}.parquet"))
    st.ingest("edges", [path])
    t0 = _time.perf_counter()
    run_pipeline(st, pipeline)
    seconds = _time.perf_counter() - t0
    os.remove(path)  # the store holds it now; a long benchmark must not fill the disk with copies
    return seconds


def _compact(st, upper_time: int, output: str = "reach") -> None:
    """What an operator of a sliding window does (a cron job between runs): keep no history
    behind the window's end (the pipeline's own state follows its inputs' since by itself)."""
    st.advance("edges", since=str(upper_time))
    st.advance(output, since=str(upper_time))
    st.compact(full=True, grace_seconds=0)


def _store_shape(st) -> dict:
    """Rows and layers of every trace (inputs, outputs, the pipeline's state): what a run
    may have to read, to tell a latency that grows with the store from one that does not."""
    traces = st.state().traces
    return {"store_rows": sum(t.rows() for t in traces.values()),
            "store_layers": sum(len(t.all_layers()) for t in traces.values()),
            "rows_by_trace": {n: t.rows() for n, t in sorted(traces.items())}}


def bench_reach_latency(*, nodes: int, edges: int, roots: int, batch: int, points: list[int],
                        repeat: int, filler: int, work: str, log=None, on_point=None,
                        sample: str = "reach") -> list[dict]:
    """The points; ``on_point(point)`` is called as soon as each is measured. ``sample``:
    one of the loop samples (reach, bfs, cc) over the same stream."""
    from ops.run.run import run_pipeline
    pipeline = os.path.join(SAMPLES, sample + ".py")
    st, g = _reach_store(work, nodes, edges, roots, 7)
    run_pipeline(st, pipeline)
    processed, i, out = 0, 1, []
    for target in points:
        fill_s, filled = 0.0, 0
        while processed < target:
            n = min(filler, target - processed)
            n += n % 2
            if log:
                log(f"{sample}: processing {n:,} updates ({processed:,} done, next point {target:,})")
            fill_s += _reach_run(st, g, work, n, i, pipeline)
            processed += n
            filled += n
            i += 1
            _compact(st, g.time, OUTPUTS[sample])
        runs, load = [], []
        for _ in range(repeat):
            load.append(round(os.getloadavg()[0], 2))
            runs.append(_reach_run(st, g, work, batch, i, pipeline))
            processed += batch
            i += 1
            _compact(st, g.time, OUTPUTS[sample])
        out.append({"processed": target, "run_seconds": runs, "load_average": load,
                    "store_bytes": dir_bytes(st.path), **_store_shape(st),
                    "filled": filled, "fill_seconds": round(fill_s, 3)})
        if on_point:
            on_point(out[-1])
        if log:
            log(f"{sample}: after {target:,} updates a run of {batch:,} took {min(runs):.2f}-{max(runs):.2f} s "
                f"(load {min(load):.1f}-{max(load):.1f}); store {out[-1]['store_bytes']:,} bytes, "
                f"{out[-1]['store_rows']:,} rows in {out[-1]['store_layers']} layers")
    return out


def sustained_points(total: int, first: int = 1000) -> list[int]:
    """10^3, 10^4, ... below ``total``, then ``total``: the updates processed before each
    measurement of ``ddcli bench reach --sustained``."""
    pts, p = [], min(first, total)
    while p < total:
        pts.append(p)
        p *= 10
    return pts + [total]


def bench_reach_sustained(*, nodes: int = 1000, edges: int = 2000, roots: int = 10, run: int = 1000,
                          total: int = 1_000_000, repeat: int = 3, filler: int = 100_000, sample: str = "reach",
                          workdir: str | None = None, log=None, progress=None) -> dict:
    """Sustained latency on one store: the seconds of a run of ``run`` updates
    after 10^3, 10^4, ... ``total`` updates, the bulk fed in runs of at most ``filler``
    updates with the window's since advanced and the store compacted after every run, as a
    cron job would; ``latest_over_first`` is the fastest run at the last point over the
    fastest at the first (the aim: within 1.2x). ``progress(res)`` after every point."""
    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-sustained-")
    os.makedirs(work, exist_ok=True)
    res = {"benchmark": "reach sustained", "sample": sample, "nodes": nodes, "edges": edges, "roots": roots,
           "batch": run, "total": total, "filler": filler, "repeat": repeat,
           "loop_path": os.environ.get("DDCLI_LOOP_PATH", "auto"), "cpus": os.cpu_count(), "latency": []}

    def point_measured(point: dict) -> None:
        res["latency"].append(point)
        first = res["latency"][0]
        res["reached"] = point["processed"]
        res["latest_over_first"] = round(min(point["run_seconds"]) / min(first["run_seconds"]), 3)
        res["store_growth"] = point["store_bytes"] / first["store_bytes"]
        if progress:
            progress(res)

    try:
        bench_reach_latency(nodes=nodes, edges=edges, roots=roots, batch=run, points=sustained_points(total),
                            repeat=repeat, filler=filler, work=work, log=log, on_point=point_measured,
                            sample=sample)
        return res
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def bench_reach_throughput(*, nodes: int, edges: int, roots: int, batch: int, work: str) -> dict:
    """A warm-up run (starts Python workers, warms the JIT), then one timed run of ``batch``
    updates: updates per second."""
    from ops.run.run import run_pipeline
    st, g = _reach_store(work, nodes, edges, roots, 11)
    run_pipeline(st, REACH_PIPELINE)
    _reach_run(st, g, work, min(batch, 1000), 1)
    _compact(st, g.time)
    seconds = _reach_run(st, g, work, batch, 2)
    return {"batch": batch, "seconds": seconds, "updates_per_second": batch / seconds}


def bench_reach(*, nodes: int = 1000, edges: int = 2000, roots: int = 10, batch: int = 10_000,
                points: list[int] | None = None, repeat: int = 3, filler: int = 100_000,
                throughput_batches: list[int] | None = None, masters: list[str] | None = None,
                workdir: str | None = None, log=None, progress=None) -> dict:
    """Throughput first, then sustained latency; ``progress(res)`` after every figure, so a
    long benchmark's figures so far can be saved."""
    points = points or [1_000, 10_000, 100_000, 1_000_000]
    throughput_batches = throughput_batches or [10_000, 100_000]
    masters = masters or ["local[1]", "local[2]"]
    own = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-reach-")
    os.makedirs(work, exist_ok=True)
    try:
        res = {"benchmark": "reach", "nodes": nodes, "edges": edges, "roots": roots, "batch": batch,
               "throughput": [], "latency": []}
        for b in throughput_batches:
            row = {"batch": b}
            for m in masters:
                if log:
                    log(f"reach throughput: {b:,} updates per run on {m}")
                row[m] = _throughput_subprocess(m, nodes, edges, roots, b, os.path.join(work, f"tp_{b}_{m[6:-1]}"))
            if len(masters) == 2:
                row["scaling"] = row[masters[1]]["updates_per_second"] / row[masters[0]]["updates_per_second"]
            res["throughput"].append(row)
            if progress:
                progress(res)
        lat = os.path.join(work, "latency")
        os.makedirs(lat, exist_ok=True)

        def point_measured(point: dict) -> None:
            res["latency"].append(point)
            first = res["latency"][0]
            res["latency_last_over_first"] = min(point["run_seconds"]) / min(first["run_seconds"])
            res["store_growth"] = point["store_bytes"] / first["store_bytes"]
            if progress:
                progress(res)

        bench_reach_latency(nodes=nodes, edges=edges, roots=roots, batch=batch, points=points, repeat=repeat,
                            filler=filler, work=lat, log=log, on_point=point_measured)
        return res
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _throughput_subprocess(master: str, nodes: int, edges: int, roots: int, batch: int, work: str) -> dict:
    """Spark's parallelism is fixed when its JVM starts: each setting gets its own process."""
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, DDCLI_SPARK_MASTER=master)
    code = ("import json,sys; from ddcli.bench.reach import bench_reach_throughput as b; "
            f"print(json.dumps(b(nodes={nodes}, edges={edges}, roots={roots}, batch={batch}, work={work!r})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot_reach(res: dict, path: str) -> None:
    """Latency CDF per point and store size: the sustained-latency figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = res["latency"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for p in pts:
        step_cdf(ax1, p["run_seconds"], f"after {p['processed']:,} updates")
    ax1.set_xlabel(f"seconds for a run of {res['batch']:,} updates")
    ax1.set_ylabel("fraction of runs")
    ax1.set_title("reach: sustained latency")
    ax1.legend(loc="lower right")
    ax1.grid(alpha=0.3)
    ax2.plot([p["processed"] for p in pts], [p["store_bytes"] / 1e6 for p in pts], marker="o")
    ax2.set_xscale("log")
    ax2.set_xlabel("updates processed")
    ax2.set_ylabel("store size (MB)")
    ax2.set_title("store size")
    ax2.set_ylim(bottom=0)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
