"""Prioritized fixed points: the same loops with and without priority.

Connected components (``cc_prioritized.py`` against its plain version) and weighted
shortest paths (``sssp.py`` against its plain version) over one random graph of ``nodes``
nodes and ``edges`` edges with random weights 1..``max_weight``: a first run over the
whole graph, then ``runs`` runs of ``updates`` updates each (a sliding window: the oldest
edge leaves, a random new one arrives, each move at its own time). For every run and
variant: the run time, the rounds of the loop and the updates it processed (entered
records and fed-back changes, summed over rounds), from ``run_pipeline(loop_stats=…)``.

    ddcli bench priority --nodes 10000 --edges 20000 --out priority.json

Each variant is its own pipeline over the same input traces, run one after another in one
process (so Spark is warm for all but the first). Figures from one machine compare like
with like; the machine's load moves the run times, not the rounds or the updates.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time as _time

from ddcli.bench.common import SAMPLES

VARIANT = '''
import importlib.util


def pipeline(p):
    spec = importlib.util.spec_from_file_location("sample", {path!r})
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    edges = p.input("edges")
    {body}
'''
VARIANTS = {
    "cc_prioritized": ("cc_prioritized.py", 'p.output("labels_p", sample.components(edges, prioritized=True), key="node")'),
    "cc_plain": ("cc_prioritized.py", 'p.output("labels", sample.components(edges, prioritized=False), key="node")'),
    "sssp_prioritized": ("sssp.py", 'p.output("distances_p", sample.shortest_paths(edges, p.input("roots"), '
                                    'prioritized=True), key=["root", "node"])'),
    "sssp_plain": ("sssp.py", 'p.output("distances", sample.shortest_paths(edges, p.input("roots"), '
                              'prioritized=False), key=["root", "node"])'),
}


def _ingest(store, work: str, name: str, table, upper: int, key: str) -> None:
    import pyarrow.parquet as pq
    path = os.path.join(work, f"{name}_{upper}.parquet")
    pq.write_table(table, path)
    store.ingest(name, [path], key=[key], upper=str(upper))


def bench_priority(nodes: int = 10_000, edges: int = 20_000, roots: int = 1, updates: int = 1_000,
                   runs: int = 1, max_weight: int = 10, seed: int = 17, variants: list[str] | None = None,
                   log=lambda msg: None) -> dict:
    """The figures of every run of every variant (see the module docstring); ``log``
    receives each as a JSON line when it is measured."""
    import numpy as np
    import pyarrow as pa

    from ops.run.run import run_pipeline
    from storage.store import Store

    rng = np.random.default_rng(seed)
    work = tempfile.mkdtemp(prefix="ddcli-bench-priority-")
    try:
        store = Store(os.path.join(work, "store"))
        paths = {}
        for v in variants or list(VARIANTS):
            sample, body = VARIANTS[v]
            paths[v] = os.path.join(work, f"{v}.py")
            with open(paths[v], "w") as fh:
                fh.write(VARIANT.format(path=os.path.join(SAMPLES, sample), body=body))
        src = rng.integers(0, nodes, edges)
        dst = rng.integers(0, nodes, edges)
        weight = rng.integers(1, max_weight + 1, edges)
        window = list(zip(src.tolist(), dst.tolist(), weight.tolist()))
        schema = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("weight", pa.int64()),
                            ("time", pa.int64()), ("diff", pa.int64())])
        _ingest(store, work, "edges", pa.table({"src": src, "dst": dst, "weight": weight,
                                                 "time": np.zeros(edges, np.int64), "diff": np.ones(edges, np.int64)},
                                                schema=schema), 1, "src")
        _ingest(store, work, "roots", pa.table({"node": pa.array(range(roots), pa.int64()),
                                                 "time": pa.array([0] * roots, pa.int64())}), 1, "node")
        figures = []
        t = 1
        for r in range(runs + 1):
            if r:  # a sliding window: each move (one edge out, one in) at its own time
                rows = []
                for _ in range(updates // 2):
                    rows.append((*window.pop(0), t, -1))
                    new = (int(rng.integers(0, nodes)), int(rng.integers(0, nodes)), int(rng.integers(1, max_weight + 1)))
                    window.append(new)
                    rows.append((*new, t, 1))
                    t += 1
                cols = list(zip(*rows))
                _ingest(store, work, "edges", pa.table({n: pa.array(c, pa.int64()) for n, c in
                                                        zip(schema.names, cols)}), t, "src")
                store.advance("roots", upper=str(t))
            for v, path in paths.items():
                stats: list = []
                start = _time.perf_counter()
                run_pipeline(store, path, loop_stats=stats)
                seconds = _time.perf_counter() - start
                row = {"run": "first" if r == 0 else f"{updates} updates", "variant": v, "seconds": round(seconds, 1),
                       "rounds": sum(s["rounds"] for s in stats), "loop_updates": sum(s["updates"] for s in stats)}
                figures.append(row)
                log(json.dumps(row))
        return {"nodes": nodes, "edges": edges, "roots": roots, "max_weight": max_weight, "figures": figures}
    finally:
        shutil.rmtree(work, ignore_errors=True)
