"""The metadata part of ``ddcli bench storage``: does the log stay small?

``ingests`` one-row ingests into a fresh store, through the Store API (a subprocess per
ingest would measure Python start-up, not the log). Reports, after 10^2 ingests and after
all of them: the log folder's bytes and files, and the commit latency (each
``Log.commit`` of the last ``WINDOW`` ingests before that point, median and p90). The
ratio of the two medians is the figure: a commit that costs O(1) whatever the number of
versions keeps it near 1. Old versions are pruned behind ``log_retention`` seconds.
"""

from __future__ import annotations

import os
import statistics
import time as _time
from typing import Callable

WINDOW = 100  # commits compared at each point
EARLY = 100   # the early point: after 10^2 ingests


def _log_size(log_dir: str) -> tuple[int, int]:
    total = files = 0
    for n in os.listdir(log_dir):
        try:
            total += os.path.getsize(os.path.join(log_dir, n))
            files += 1
        except OSError:
            pass
    return total, files


def _point(ingests: int, commits: list[float], log_dir: str, version: int) -> dict:
    lat = sorted(commits[-WINDOW:])
    size, files = _log_size(log_dir)
    return {"ingests": ingests, "version": version, "log_bytes": size, "log_files": files,
            "commit_latency_s": {"median": statistics.median(lat),
                                 "p90": lat[min(len(lat) - 1, int(0.9 * len(lat)))],
                                 "commits": len(lat)}}


def bench_metadata(root: str, *, ingests: int = 10_000, log_retention: float = 30.0,
                   say: Callable[[str], None] = lambda m: None) -> dict:
    """Run the metadata benchmark in ``root`` (a fresh folder) and return its figures."""
    from storage.store import Store

    src = os.path.join(root, "meta_input")
    os.makedirs(src, exist_ok=True)
    store = Store(os.path.join(root, "meta_store"), log_retention=log_retention)
    commits: list[float] = []  # seconds of every Log.commit, in order
    per_ingest: list[int] = []  # commits after each ingest
    real_commit = store.log.commit

    def timed_commit(change, **kw):
        t0 = _time.perf_counter()
        try:
            return real_commit(change, **kw)
        finally:
            commits.append(_time.perf_counter() - t0)
    store.log.commit = timed_commit

    say(f"{ingests:,} one-row ingests (log retention {log_retention:g} s)")
    points = {}
    t_start = _time.perf_counter()
    for i in range(ingests):
        p = os.path.join(src, f"m{i}.csv")
        with open(p, "w", encoding="utf-8") as fh:
            fh.write(f"key,val,time\n{i % 97},{i},{i}\n")
        store.ingest("meta", [p], key=["key"])
        os.unlink(p)
        per_ingest.append(len(commits))
        n = i + 1
        if n == min(EARLY, ingests) or n == ingests:
            points[n] = _point(n, commits, store.log.dir, store.state().version)
    total_s = _time.perf_counter() - t_start
    early, late = points[min(EARLY, ingests)], points[ingests]
    ratio = late["commit_latency_s"]["median"] / early["commit_latency_s"]["median"]
    return {"ingests": ingests, "log_retention_s": log_retention, "seconds": total_s,
            "commits": len(commits), "early": early, "late": late, "latency_ratio": ratio,
            "log_bytes_ratio": late["log_bytes"] / early["log_bytes"] if early["log_bytes"] else None}
