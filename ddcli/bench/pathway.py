"""The reach, bfs and cc streams replayed by Pathway (``ddcli bench reach --loop-paths``).

The same sliding-window stream as ``ddcli/bench/loops.py`` (the initial edges at time 0,
then every update at its own time), fed to Pathway as one static stream and computed by
one ``pw.run``: the query written with ``pw.iterate`` over ``(root, node)`` pairs (reach)
or ``(root, node, dist)`` with a per-pair minimum (bfs), or ``node`` alone (reach_nodes:
the set any root reaches), or ``(node, label)`` with a
per-node minimum over the edges taken both ways (cc: the smallest node id of the
component, like ``sample_data/pipelines/cc.py``). Pathway's times are even and
start above 0 (time 0 is only backfilled), so ddcli time ``t`` is Pathway time
``2 (t + 1)``. Output changes are written by Pathway's own CSV writer (no Python per
row in the timed part) and read back to compare with ddcli's output trace.

Timing: Pathway's static replay computes the whole stream before it closes any time
(its time-end callbacks all fire at the end), so a batch is timed by difference: one
``pw.run`` over the initial edges (the first run, start-up included as in ddcli's), one
over the initial edges and the warm-up updates, and one over the whole stream (initial,
warm-up, timed batch), whose output changes are compared; the batch's time is the
difference of the last two. Pathway runs with its default of one worker thread unless
``PATHWAY_THREADS`` says otherwise.
"""

from __future__ import annotations

import os
import time as _time

import pyarrow as pa

#: the data columns of each replayed query's output, as ddcli's output trace names them
DATA = {"reach": ["root", "node"], "bfs": ["root", "node", "dist"], "cc": ["node", "label"], "reach_nodes": ["node"]}


def available() -> str | None:
    """Pathway's version, or None when it is not installed (``pip install 'ddcli[bench]'``)."""
    try:
        import pathway as pw
    except ImportError:
        return None
    return getattr(pw, "__version__", "?")


def edge_stream(initial: pa.Table, steps: list[pa.Table]) -> pa.Table:
    """The stream as rows ``(eid, src, dst, time, diff)``: every edge instance gets an id
    (the window is first in, first out), so a removal names the row it removes."""
    import numpy as np

    n0 = initial.num_rows
    parts = [pa.table({"eid": np.arange(n0, dtype=np.int64), "src": initial["src"], "dst": initial["dst"],
                       "time": initial["time"], "diff": initial["diff"]})]
    added, removed = n0, 0
    for s in steps:
        diff = np.asarray(s["diff"].to_numpy(), np.int64)
        eid = np.empty(len(diff), np.int64)
        adds = diff > 0
        eid[adds] = np.arange(added, added + int(adds.sum()))
        eid[~adds] = np.arange(removed, removed + int((~adds).sum()))
        added, removed = added + int(adds.sum()), removed + int((~adds).sum())
        parts.append(pa.table({"eid": eid, "src": s["src"], "dst": s["dst"], "time": s["time"], "diff": s["diff"]}))
    return pa.concat_tables([p.cast(parts[0].schema) for p in parts])


def _pathway_run(sample: str, edges: pa.Table, roots: int, out_csv: str) -> float:
    """One ``pw.run`` of ``sample`` over ``edges``; the seconds of ``pw.run`` alone."""
    import pathway as pw
    from pathway.internals.parse_graph import G

    G.clear()
    df = edges.to_pandas()
    df["__time__"] = 2 * (df.pop("time") + 1)
    df["__diff__"] = df.pop("diff")
    e = pw.debug.table_from_pandas(df, id_from=["eid"])
    import pandas as pd
    r = pw.debug.table_from_pandas(pd.DataFrame({"node": list(range(roots)), "__time__": [2] * roots,
                                                 "__diff__": [1] * roots}))
    if sample == "reach":
        start = r.select(root=r.node, node=r.node).groupby(pw.this.root, pw.this.node).reduce(pw.this.root, pw.this.node)

        def body(reach, edges, start):
            hop = reach.join(edges, reach.node == edges.src).select(root=reach.root, node=edges.dst)
            both = pw.Table.concat_reindex(start, hop)
            return {"reach": both.groupby(pw.this.root, pw.this.node).reduce(pw.this.root, pw.this.node)}

        out = pw.iterate(body, reach=pw.iterate_universe(start), edges=e, start=start)["reach"]
    elif sample == "bfs":
        start = r.select(root=r.node, node=r.node).groupby(pw.this.root, pw.this.node).reduce(
            pw.this.root, pw.this.node, dist=0)

        def body(dist, edges, start):
            hop = dist.join(edges, dist.node == edges.src).select(root=dist.root, node=edges.dst, dist=dist.dist + 1)
            both = pw.Table.concat_reindex(start, hop)
            return {"dist": both.groupby(pw.this.root, pw.this.node).reduce(
                pw.this.root, pw.this.node, dist=pw.reducers.min(pw.this.dist))}

        out = pw.iterate(body, dist=pw.iterate_universe(start), edges=e, start=start)["dist"]
    elif sample == "reach_nodes":  # the set of nodes any root reaches (sample_data/pipelines/reach_nodes.py)
        start = r.groupby(pw.this.node).reduce(pw.this.node)

        def body(reached, edges, start):
            hop = reached.join(edges, reached.node == edges.src).select(node=edges.dst)
            return {"reached": pw.Table.concat_reindex(start, hop).groupby(pw.this.node).reduce(pw.this.node)}

        out = pw.iterate(body, reached=pw.iterate_universe(start), edges=e, start=start)["reached"]
    elif sample == "cc":
        links = pw.Table.concat_reindex(e.select(node=e.src, other=e.dst), e.select(node=e.dst, other=e.src))
        nodes = links.groupby(pw.this.node).reduce(pw.this.node, label=pw.this.node)

        def body(labels, links, nodes):
            offered = labels.join(links, labels.node == links.node).select(node=links.other, label=labels.label)
            both = pw.Table.concat_reindex(nodes, offered)
            return {"labels": both.groupby(pw.this.node).reduce(pw.this.node, label=pw.reducers.min(pw.this.label))}

        out = pw.iterate(body, labels=pw.iterate_universe(nodes), links=links, nodes=nodes)["labels"]
    else:
        raise ValueError(f"no Pathway replay of {sample!r}: use one of {', '.join(DATA)}")
    pw.io.csv.write(out, out_csv)
    t0 = _time.perf_counter()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    seconds = _time.perf_counter() - t0
    G.clear()
    return seconds


def read_changes(csv: str, data: list[str]) -> pa.Table:
    """The output changes Pathway wrote to ``csv`` as updates (``data`` columns, time, diff),
    its times mapped back to the stream's."""
    import pyarrow.csv as pcsv

    if not os.path.exists(csv) or os.path.getsize(csv) == 0:
        return pa.table({**{c: pa.array([], pa.int64()) for c in data}, "time": pa.array([], pa.int64()),
                         "diff": pa.array([], pa.int64())})
    t = pcsv.read_csv(csv)
    import pyarrow.compute as pc
    time = pc.subtract(pc.divide(t["time"].cast(pa.int64()), 2), 1)
    return pa.table({**{c: t[c].cast(pa.int64()) for c in data}, "time": time, "diff": t["diff"].cast(pa.int64())})


def compare(ours: pa.Table, theirs: pa.Table, data: list[str], since: int) -> dict:
    """Both outputs' changes with times advanced to ``since`` (ddcli's output trace is
    compacted there before the timed run), consolidated: equal, and how many."""
    import duckdb

    con = duckdb.connect()
    cols = ", ".join(data)

    def norm(name: str, t: pa.Table):
        con.register(name, t.select(data + ["time", "diff"]))
        return f"SELECT {cols}, greatest(time, {since}) AS time, sum(diff)::BIGINT AS diff FROM {name} " \
               f"GROUP BY ALL HAVING sum(diff) <> 0"

    a, b = norm("a", ours), norm("b", theirs)
    n = con.sql(f"SELECT count(*) FROM ({a})").fetchall()[0][0]
    m = con.sql(f"SELECT count(*) FROM ({b})").fetchall()[0][0]
    diff = con.sql(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b}) UNION ALL (({b}) EXCEPT ALL ({a})))").fetchall()[0][0]
    con.close()
    return {"ddcli_changes": int(n), "pathway_changes": int(m), "mismatched": int(diff), "same": diff == 0}


def bench_pathway(sample: str, initial: pa.Table, warm: pa.Table, batch: pa.Table, *, roots: int, work: str,
                  ours: pa.Table | None, since: int, log=None) -> dict:
    """Pathway's first run (the initial edges) and updates/s of the timed batch, and whether
    its output changes equal ``ours`` (ddcli's output trace, compacted to ``since``)."""
    data = DATA[sample]
    full_csv = os.path.join(work, "pathway_all.csv")
    first = _pathway_run(sample, edge_stream(initial, []), roots, os.path.join(work, "pathway_first.csv"))
    head = _pathway_run(sample, edge_stream(initial, [warm]), roots, os.path.join(work, "pathway_head.csv"))
    full = _pathway_run(sample, edge_stream(initial, [warm, batch]), roots, full_csv)
    seconds = max(full - head, 1e-3)
    out = {"sample": sample, "pathway": available(), "threads": int(os.environ.get("PATHWAY_THREADS", "1") or 1),
           "first_run_s": round(first, 3), "whole_stream_s": round(full, 3), "batch": batch.num_rows,
           "seconds": round(seconds, 3), "updates_per_second": round(batch.num_rows / seconds, 1)}
    if ours is not None:
        theirs = read_changes(full_csv, data)
        out.update(compare(ours, theirs, data, since))
    if log:
        same = "" if ours is None else (", same output changes" if out["same"] else
                                        f", {out['mismatched']:,} output changes differ")
        log(f"{sample} (Pathway {out['pathway']}): first run {first:.1f} s; {batch.num_rows:,} updates in "
            f"{seconds:.1f} s = {out['updates_per_second']:,.0f} updates/s{same}")
    return out
