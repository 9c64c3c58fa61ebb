"""``ddcli bench reach --loop-paths``: the two ways a loop runs, side by side.

For reach (pairs), bfs and cc (over the same edges) on the roadmap's sliding window (``roots`` roots, ``nodes``
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

import pyarrow as pa

from ddcli.bench.common import OUTPUTS, SAMPLES, save_figure, write_parquet
from ddcli.bench.reach import SlidingGraph

PATHWAY_SAMPLES = ("reach", "bfs", "cc")  # the queries ddcli/bench/pathway.py replays


def _one(sample: str, path: str, *, nodes: int, edges: int, roots: int, batch: int, warmup: int,
         work: str, log=None, keep: dict | None = None) -> dict:
    """One sample on one loop path; ``keep`` (when given) receives the stream's tables and
    the output trace's updates after the timed run, for the Pathway comparison."""
    from ops.run.run import run_pipeline
    from storage.store import Store

    os.environ["DDCLI_LOOP_PATH"] = path
    st = Store(os.path.join(work, "store"))
    g = SlidingGraph(nodes, edges, 7)
    initial = g.initial()
    st.ingest("edges", [write_parquet(initial, os.path.join(work, "edges_0.parquet"))])
    st.ingest("roots", [write_parquet(pa.table({"node": list(range(roots)), "time": [0] * roots,
                                                 "diff": [1] * roots}), os.path.join(work, "roots.parquet"))],
              upper="{}")
    pipe = os.path.join(SAMPLES, sample + ".py")
    t0 = _time.perf_counter()
    first = run_pipeline(st, pipe)
    first_s = _time.perf_counter() - t0
    taken = [s for s in first.steps if s["step"] == "loop_path"]
    rows, stream = {}, {"initial": initial}
    for i, n in ((1, warmup), (2, batch)):
        stream[i] = g.step(n)
        st.ingest("edges", [write_parquet(stream[i], os.path.join(work, f"edges_{i}.parquet"))])
        t0 = _time.perf_counter()
        res = run_pipeline(st, pipe)
        rows[i] = (_time.perf_counter() - t0, res.spark_jobs)
        timed = res.steps
        if i == 2 and keep is not None:
            keep.update(initial=initial, warm=stream[1], batch=stream[2], since=g.time - batch,
                        ours=st.read_updates(st.trace(OUTPUTS[sample])))
        st.advance("edges", since=str(g.time))
        st.advance(OUTPUTS[sample], since=str(g.time))
        st.compact(full=True, grace_seconds=0)
    seconds, jobs = rows[2]
    out = {"sample": sample, "path": taken[0]["path"] if taken else "?", "why": taken[0].get("why", "") if taken else "",
           "first_run_s": round(first_s, 3), "first_run_jobs": first.spark_jobs,
           # the Spark session's start, part of the first run of the first sample in a process
           "first_run_spark_start_s": round(sum(s.get("seconds", 0) for s in first.steps if s["step"] == "spark_start"), 3),
           "batch": batch,
           "seconds": round(seconds, 3), "spark_jobs": jobs, "updates_per_second": round(batch / seconds, 1),
           # the timed run's path (a task over DDCLI_LOOP_TASK_ROWS hands the loop to rounds)
           # and the most rows a loop's task held after a round
           "timed_path": next((s["path"] for s in timed if s["step"] == "loop_path"), "?"),
           "held_rows": max((s.get("held_rows", 0) for s in timed if s["step"] == "loop_local"), default=0)}
    if log:
        log(f"{sample} ({out['path']}): first run {first_s:.1f} s; {batch:,} updates in {seconds:.1f} s "
            f"= {out['updates_per_second']:,.0f} updates/s ({jobs} Spark jobs)")
    return out


def bench_loop_paths(*, samples=("reach", "bfs"), paths=("round", "local"), nodes: int = 1000, edges: int = 2000,
                     roots: int = 10, batch: int = 10_000, warmup: int = 200, work: str, log=None,
                     pathway: bool = True) -> dict:
    """Each sample on each loop path and, when ``pathway`` and Pathway is installed, the
    same stream replayed by Pathway (``ddcli/bench/pathway.py``): its updates/s, whether
    its output changes equal each path's, and the ratio ddcli / Pathway per path."""
    from ddcli.bench import pathway as bench_pathway

    version = bench_pathway.available() if pathway else None
    res = {"benchmark": "reach loop paths", "nodes": nodes, "edges": edges, "roots": roots, "batch": batch,
           "warmup": warmup, "load_average": os.getloadavg()[0], "runs": [], "pathway_runs": []}
    if pathway and version is None:
        res["pathway_skipped"] = "Pathway is not installed (pip install 'ddcli[bench]'): no Pathway column"
        if log:
            log(res["pathway_skipped"])
    outputs: dict[tuple[str, str], pa.Table] = {}
    for sample in samples:
        keep: dict = {}
        for path in paths:
            d = os.path.join(work, f"{sample}_{path}")
            os.makedirs(d, exist_ok=True)
            res["runs"].append(_one(sample, path, nodes=nodes, edges=edges, roots=roots, batch=batch,
                                    warmup=warmup, work=d, log=log, keep=keep))
            outputs[(sample, path)] = keep.get("ours")
        if version is not None and keep and sample in PATHWAY_SAMPLES:
            d = os.path.join(work, f"{sample}_pathway")
            os.makedirs(d, exist_ok=True)
            pr = bench_pathway.bench_pathway(sample, keep["initial"], keep["warm"], keep["batch"], roots=roots,
                                             work=d, ours=None, since=keep["since"], log=log)
            for path in paths:
                data = bench_pathway.DATA[sample]
                got = bench_pathway.read_changes(os.path.join(d, "pathway_all.csv"), data)
                cmp = bench_pathway.compare(outputs[(sample, path)], got, data, keep["since"])
                pr[f"same_as_{path}"] = cmp["same"]
                pr["ddcli_changes"], pr["pathway_changes"] = cmp["ddcli_changes"], cmp["pathway_changes"]
                if log:
                    log(f"{sample}: ddcli ({path}) and Pathway output changes "
                        + ("are the same" if cmp["same"] else f"differ in {cmp['mismatched']:,} rows")
                        + f" ({cmp['ddcli_changes']:,} changes from the timed run's first time on)")
            res["pathway_runs"].append(pr)
    res["load_average_after"] = os.getloadavg()[0]
    by = {(r["sample"], r["path"]): r for r in res["runs"]}
    res["local_over_round"] = {s: round(by[(s, "local")]["updates_per_second"] / by[(s, "round")]["updates_per_second"], 2)
                               for s in samples if (s, "local") in by and (s, "round") in by}
    pw_by = {r["sample"]: r for r in res["pathway_runs"]}
    res["ddcli_over_pathway"] = {f"{s} {p}": round(by[(s, p)]["updates_per_second"] / pw_by[s]["updates_per_second"], 3)
                                 for (s, p) in by if s in pw_by}
    res["first_run_ddcli_over_pathway"] = {f"{s} {p}": round(by[(s, p)]["first_run_s"] / pw_by[s]["first_run_s"], 1)
                                           for (s, p) in by if s in pw_by}
    return res


def plot_loop_paths(res: dict, path: str) -> None:
    """Updates/s and first-run seconds per sample and loop path, as bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(res["runs"]) + [dict(r, path="Pathway") for r in res.get("pathway_runs", [])]
    runs.sort(key=lambda r: r["sample"] != "reach")
    labels = [f"{r['sample']}\n{r['path']}" for r in runs]
    colors = [{"local": "C0", "round": "C1", "resident": "C3"}.get(r["path"], "C2") for r in runs]  # C2: a peer
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.bar(labels, [r["updates_per_second"] for r in runs], color=colors)
    ax1.set_ylabel("updates / s")
    ax1.set_yscale("log")
    ax1.set_title(f"runs of {res['batch']:,} updates")
    ax2.bar(labels, [r["first_run_s"] for r in runs], color=colors)
    ax2.set_ylabel("seconds")
    ax2.set_title("first run (initial edges)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"loop paths, load average {res.get('load_average', 0):.0f} on {os.cpu_count()} cores", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
