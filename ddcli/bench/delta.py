"""The Delta Lake part of ``ddcli bench storage``: what following ddcli's log costs a commit.

``ingests`` small ingests go into two fresh stores side by side, one writing a Delta
version after each commit (storage/lake/) and one not (``Store(delta=False)``), taking
turns so both see the same load. Each ingest is timed whole (write the layer, commit,
merge geometrically, and in the first store the Delta versions of what changed): the
ratio of the median latencies is the figure. Also what importing delta-rs costs a
process: a command imports it only to create a table, to catch up, to checkpoint a table
(every 100th version) or to collect garbage; the other commits append a JSON commit.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time as _time
from typing import Callable


def _latencies(xs: list[float]) -> dict:
    s = sorted(xs)
    return {"median": statistics.median(s), "p90": s[min(len(s) - 1, int(0.9 * len(s)))], "ingests": len(s)}


def _import_seconds(repeat: int = 3) -> float:
    """Median time a fresh interpreter that has pyarrow already takes to import delta-rs."""
    code = ("import time, pyarrow\nt = time.perf_counter()\nimport deltalake, deltalake.transaction\n"
            "print(time.perf_counter() - t)")
    out = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
           for _ in range(repeat)]
    return statistics.median(out)


def bench_delta(root: str, where: Callable[[str], str], *, ingests: int = 200, rows: int = 100,
                say: Callable[[str], None] = lambda m: None) -> dict:
    """Run the comparison in ``root`` (a work folder); ``where(name)`` places each store."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.store import Store

    rng = np.random.default_rng(3)
    src = os.path.join(root, "delta_input")
    os.makedirs(src, exist_ok=True)
    stores = {"with": Store(where("delta_with"), delta=True), "without": Store(where("delta_without"), delta=False)}
    lat: dict[str, list[float]] = {k: [] for k in stores}
    say(f"{ingests:,} ingests of {rows:,} updates into a store with Delta logs and one without")
    for i in range(ingests):
        p = os.path.join(src, f"d{i}.parquet")
        pq.write_table(pa.table({"key": rng.integers(0, 1000, rows), "val": rng.integers(0, 4, rows),
                                 "time": np.full(rows, i, np.int64)}), p)
        order = ("with", "without") if i % 2 else ("without", "with")
        for k in order:
            t0 = _time.perf_counter()
            stores[k].ingest("bench", [p], key=["key"])
            lat[k].append(_time.perf_counter() - t0)
        os.unlink(p)
    with_, without = _latencies(lat["with"]), _latencies(lat["without"])
    say("start cost of importing delta-rs")
    return {"ingests": ingests, "rows": rows, "with_delta_s": with_, "without_delta_s": without,
            "latency_ratio": with_["median"] / without["median"],
            "p90_ratio": with_["p90"] / without["p90"],
            "delta_versions": _delta_versions(stores["with"]),
            "import_deltalake_s": _import_seconds()}


def _delta_versions(store) -> int | None:
    try:
        from deltalake import DeltaTable

        from storage.lake.table import storage_options
        return DeltaTable(store.trace_dir("bench"), storage_options=storage_options(store.blobs)).version() + 1
    except Exception:  # noqa: BLE001 - a figure, not a check
        return None
