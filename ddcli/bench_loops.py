"""``ddcli bench reach --loop-paths``: the two ways a loop runs, side by side (issue 14).

For reach (pairs) and bfs over the roadmap's sliding window (``roots`` roots, ``nodes``
nodes, ``edges`` edges; each update removes the oldest edge or adds a new one, at its own
time), and for each loop path (``round``: round by round on the driver; ``local``: the
whole fixed point of a batch inside Spark tasks), in one process so that ratios compare
like with like: the time of the first run (the initial edges), then updates per second of
a run of ``batch`` updates (after a small warm-up run). Each configuration gets a fresh
store; the path is chosen with ``DDCLI_LOOP_PATH`` and read back from the run's report.
"""

from __future__ import annotations

import os
import time as _time

from ddcli.bench_pipelines import SlidingGraph, _write_parquet

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "pipelines")
OUTPUTS = {"reach": "reach", "bfs": "distances"}


def _one(sample: str, path: str, *, nodes: int, edges: int, roots: int, batch: int, warmup: int,
         work: str, log=None) -> dict:
    import pyarrow as pa

    from ops.run import run_pipeline
    from storage.store import Store

    os.environ["DDCLI_LOOP_PATH"] = path
    st = Store(os.path.join(work, "store"))
    g = SlidingGraph(nodes, edges, 7)
    st.ingest("edges", [_write_parquet(g.initial(), os.path.join(work, "edges_0.parquet"))])
    st.ingest("roots", [_write_parquet(pa.table({"node": list(range(roots)), "time": [0] * roots,
                                                 "diff": [1] * roots}), os.path.join(work, "roots.parquet"))],
              upper="{}")
    pipe = os.path.join(SAMPLES, sample + ".py")
    t0 = _time.perf_counter()
    first = run_pipeline(st, pipe)
    first_s = _time.perf_counter() - t0
    taken = [s for s in first.steps if s["step"] == "loop_path"]
    rows = {}
    for i, n in ((1, warmup), (2, batch)):
        st.ingest("edges", [_write_parquet(g.step(n), os.path.join(work, f"edges_{i}.parquet"))])
        t0 = _time.perf_counter()
        res = run_pipeline(st, pipe)
        rows[i] = (_time.perf_counter() - t0, res.spark_jobs)
        st.advance("edges", since=str(g.time))
        st.advance(OUTPUTS[sample], since=str(g.time))
        st.compact(full=True, grace_seconds=0)
    seconds, jobs = rows[2]
    out = {"sample": sample, "path": taken[0]["path"] if taken else "?", "why": taken[0].get("why", "") if taken else "",
           "first_run_s": round(first_s, 3), "first_run_jobs": first.spark_jobs, "batch": batch,
           "seconds": round(seconds, 3), "spark_jobs": jobs, "updates_per_second": round(batch / seconds, 1)}
    if log:
        log(f"{sample} ({out['path']}): first run {first_s:.1f} s; {batch:,} updates in {seconds:.1f} s "
            f"= {out['updates_per_second']:,.0f} updates/s ({jobs} Spark jobs)")
    return out


def bench_loop_paths(*, samples=("reach", "bfs"), paths=("round", "local"), nodes: int = 1000, edges: int = 2000,
                     roots: int = 10, batch: int = 10_000, warmup: int = 200, work: str, log=None) -> dict:
    res = {"benchmark": "reach loop paths", "nodes": nodes, "edges": edges, "roots": roots, "batch": batch,
           "load_average": os.getloadavg()[0], "runs": []}
    for sample in samples:
        for path in paths:
            d = os.path.join(work, f"{sample}_{path}")
            os.makedirs(d, exist_ok=True)
            res["runs"].append(_one(sample, path, nodes=nodes, edges=edges, roots=roots, batch=batch,
                                    warmup=warmup, work=d, log=log))
    res["load_average_after"] = os.getloadavg()[0]
    by = {(r["sample"], r["path"]): r for r in res["runs"]}
    res["local_over_round"] = {s: round(by[(s, "local")]["updates_per_second"] / by[(s, "round")]["updates_per_second"], 2)
                               for s in samples if (s, "local") in by and (s, "round") in by}
    return res


def plot_loop_paths(res: dict, path: str) -> None:
    """Updates/s and first-run seconds per sample and loop path, as bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = res["runs"]
    labels = [f"{r['sample']}\n{r['path']}" for r in runs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.8))
    ax1.bar(labels, [r["updates_per_second"] for r in runs], color=["C0" if r["path"] == "local" else "C1" for r in runs])
    ax1.set_ylabel("updates / s")
    ax1.set_title(f"runs of {res['batch']:,} updates")
    ax2.bar(labels, [r["first_run_s"] for r in runs], color=["C0" if r["path"] == "local" else "C1" for r in runs])
    ax2.set_ylabel("seconds")
    ax2.set_title("first run (initial edges)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"loop paths, load average {res.get('load_average', 0):.0f} on {os.cpu_count()} cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
