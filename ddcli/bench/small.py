"""``ddcli bench small``: what a small change costs, around a run as well as inside it.

Every command is a real ``ddcli`` process, as a scheduler starts it, timed from outside:

1. **Word count, one new word a run.** A run of ``sample_data/pipelines/wordcount.py`` after
   a one-update ingest, against a ``ddcli query counts`` of the same store, ``repeat``
   times (medians): *cold*, with the warm engine off (``DDCLI_SERVICE=0``: every run starts
   Spark), and *warm*, through the benchmark's own service (ddcli/service/), after a
   first run and two warm-up runs.
2. **Node-set reach** (``sample_data/pipelines/reach_nodes.py``) over the sliding window of
   ``ddcli bench reach`` (``nodes`` nodes, ``edges`` edges, ``roots`` roots), through the
   warm engine: its first run (the initial edges), a run of ``updates`` updates each at its
   own time (after a warm-up run of 200), and a run of one update; the same stream replayed
   by Pathway (ddcli/bench/pathway.py) when it is installed, its output changes compared.

The aims it reports: a warm one-update run within 3x a query (``run_over_query``); the
node-set reach ahead of Pathway (``ddcli_over_pathway`` above 1); reach's first run within
2x a warm one-update run (``first_over_one_update``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time as _time

import pyarrow as pa

from ddcli.bench.common import SAMPLES, write_parquet

WORDCOUNT = os.path.join(SAMPLES, "wordcount.py")
REACH_NODES = os.path.join(SAMPLES, "reach_nodes.py")
WORDS = [os.path.join(os.path.dirname(SAMPLES), f"words_{i}.csv") for i in (1, 2)]


def _ddcli(args: list[str], env: dict) -> float:
    """Seconds of one ``ddcli ARGS`` process (its output is checked, not kept)."""
    t0 = _time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "ddcli", *args], env=env, capture_output=True, text=True,
                         timeout=3600, stdin=subprocess.DEVNULL)
    seconds = _time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"ddcli {' '.join(args)} exited {res.returncode}: {res.stderr.strip()}")
    return seconds


def _one_word(store, i: int, work: str) -> None:
    """Ingest one new word just past the trace's upper."""
    t = store.trace("words").upper.elements[0][0]
    path = os.path.join(work, f"word_{i}.csv")
    with open(path, "w") as fh:
        fh.write(f"word,time\nnew{i},{t}\n")
    store.ingest("words", [path])


def _wordcount(mode: str, env: dict, repeat: int, work: str, log) -> dict:
    from storage.store import Store
    folder = os.path.join(work, f"wordcount_{'warm' if mode == '1' else 'cold'}")
    os.makedirs(folder, exist_ok=True)
    store = Store(os.path.join(folder, "store"))
    store.ingest("words", WORDS)
    env = {**env, "DDCLI_SERVICE": mode, "DDCLI_STORE": store.path}
    first = _ddcli(["run", WORDCOUNT], env)
    for i in range(2 if mode == "1" else 0):  # the engine's warm-up: its first jobs compile
        _one_word(store, 1000 + i, folder)
        _ddcli(["run", WORDCOUNT], env)
    runs, queries = [], []
    for i in range(repeat):
        _one_word(store, i, folder)
        runs.append(_ddcli(["run", WORDCOUNT], env))
        queries.append(_ddcli(["query", "counts"], env))
    out = {"first_run_s": round(first, 3), "run_s": round(statistics.median(runs), 3),
           "query_s": round(statistics.median(queries), 3), "runs_s": [round(x, 3) for x in runs],
           "queries_s": [round(x, 3) for x in queries]}
    out["run_over_query"] = round(out["run_s"] / out["query_s"], 2)
    if log:
        log(f"word count ({'warm' if mode == '1' else 'cold'}): a one-update run {out['run_s']:.2f} s, "
            f"a query {out['query_s']:.2f} s (median of {repeat}): {out['run_over_query']:.1f}x")
    return out


def _reach_nodes(env: dict, *, updates: int, nodes: int, edges: int, roots: int, work: str, pathway: bool,
                 log) -> dict:
    from ddcli.bench import pathway as bench_pathway
    from ddcli.bench.reach import SlidingGraph
    from storage.store import Store

    folder = os.path.join(work, "reach_nodes")
    os.makedirs(folder, exist_ok=True)
    store = Store(os.path.join(folder, "store"))
    g = SlidingGraph(nodes, edges, 7)
    initial = g.initial()
    store.ingest("edges", [write_parquet(initial, os.path.join(folder, "edges_0.parquet"))])
    store.ingest("roots", [write_parquet(pa.table({"node": list(range(roots)), "time": [0] * roots,
                                                    "diff": [1] * roots}), os.path.join(folder, "roots.parquet"))],
                 upper="{}")
    env = {**env, "DDCLI_SERVICE": "1", "DDCLI_STORE": store.path}
    timed, stream = {}, {}
    for name, n in (("first", 0), ("warm", 200), ("batch", updates), ("one_update", 2)):
        if n:
            stream[name] = g.step(n)
            store.ingest("edges", [write_parquet(stream[name], os.path.join(folder, f"edges_{name}.parquet"))])
        timed[name] = _ddcli(["run", REACH_NODES], env)
        if name == "batch":
            since, ours = g.time - updates, store.read_updates(store.trace("reached"))
    out = {"nodes": nodes, "edges": edges, "roots": roots, "updates": updates,
           "first_run_s": round(timed["first"], 3), "run_s": round(timed["batch"], 3),
           "updates_per_second": round(updates / timed["batch"], 1), "one_update_run_s": round(timed["one_update"], 3)}
    if log:
        log(f"node-set reach (warm): first run {out['first_run_s']:.1f} s, {updates:,} updates in "
            f"{out['run_s']:.1f} s, one update in {out['one_update_run_s']:.1f} s")
    if pathway and bench_pathway.available():
        pw_folder = os.path.join(folder, "pathway")
        os.makedirs(pw_folder, exist_ok=True)
        pr = bench_pathway.bench_pathway("reach_nodes", initial, stream["warm"], stream["batch"], roots=roots,
                                         work=pw_folder, ours=ours, since=since, log=log)
        out["pathway"] = pr
        out["ddcli_over_pathway"] = round(pr["seconds"] / out["run_s"], 3)
    elif pathway:
        out["pathway_skipped"] = "Pathway is not installed (pip install pathway): no Pathway figures"
    return out


def bench_small(*, repeat: int = 5, updates: int = 10_000, nodes: int = 1000, edges: int = 2000, roots: int = 10,
                work: str, log=None, pathway: bool = True) -> dict:
    """The figures of the module's docstring. The warm engine is the benchmark's own (a
    service folder under ``work``), stopped at the end: a user's service is never touched."""
    from ddcli.service.client import stop
    from ddcli.service.folder import keys

    services = os.path.join(work, "svc")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDCLI_SERVICE")}
    env["DDCLI_SERVICE_DIR"] = services
    res = {"benchmark": "small", "repeat": repeat, "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        res["wordcount_cold"] = _wordcount("0", env, repeat, work, log)
        res["wordcount_warm"] = _wordcount("1", env, repeat, work, log)
        res["reach_nodes"] = _reach_nodes(env, updates=updates, nodes=nodes, edges=edges, roots=roots, work=work,
                                          pathway=pathway, log=log)
    finally:
        for key in keys(services):
            stop(services, key)
    res["load_average_after"] = os.getloadavg()[0]
    warm, rn = res["wordcount_warm"], res["reach_nodes"]
    res["aims"] = {
        "warm_one_update_run_over_query": {"value": warm["run_over_query"], "aim": "<= 3",
                                           "met": warm["run_over_query"] <= 3},
        "cold_one_update_run_over_query": {"value": res["wordcount_cold"]["run_over_query"]},
        "reach_nodes_ddcli_over_pathway": {"value": rn.get("ddcli_over_pathway"), "aim": "> 1",
                                           "met": (rn.get("ddcli_over_pathway") or 0) > 1},
        "reach_nodes_first_run_over_warm_one_update_run": {
            "value": round(rn["first_run_s"] / warm["run_s"], 2), "aim": "<= 2",
            "met": rn["first_run_s"] / warm["run_s"] <= 2},
    }
    return res


def plot_small(res: dict, path: str) -> None:
    """Three panels: word count's one-update run against a query, cold and warm; the
    node-set reach's batch against Pathway's; and its first and one-update runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    cold, warm = res["wordcount_cold"], res["wordcount_warm"]
    ax = axes[0]
    x = [0, 1]
    ax.bar([i - 0.2 for i in x], [cold["run_s"], warm["run_s"]], 0.4, label="ddcli run (one update)")
    ax.bar([i + 0.2 for i in x], [cold["query_s"], warm["query_s"]], 0.4, label="ddcli query")
    ax.set_xticks(x, ["cold (no service)", "warm engine"])
    ax.set_ylabel("seconds (median)")
    ax.set_title("word count: a one-update run against a query")
    ax.legend()
    rn = res["reach_nodes"]
    ax = axes[1]
    names, values = ["ddcli (warm)"], [rn["run_s"]]
    if "pathway" in rn:
        names.append(f"Pathway {rn['pathway']['pathway']}")
        values.append(rn["pathway"]["seconds"])
    ax.bar(names, values, color=["C0", "C2"][:len(values)])
    ax.set_ylabel("seconds")
    ax.set_title(f"node-set reach: {rn['updates']:,} updates, one run")
    ax = axes[2]
    ax.bar(["first run", "one-update run", "word count\none-update run"],
           [rn["first_run_s"], rn["one_update_run_s"], warm["run_s"]], color=["C1", "C0", "C0"])
    ax.set_ylabel("seconds")
    ax.set_title("warm engine: node-set reach's runs")
    fig.suptitle(f"ddcli bench small (load {res['load_average']:.1f} at the start, {res['cpus']} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
