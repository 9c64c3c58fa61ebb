"""Each engine's side of ``ddcli bench tpch``: ddcli as the commands a user types (real
processes, timed from outside), DuckDB recomputing the 22 queries from scratch, and the check
that ddcli's every output holds DuckDB's rows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time as _time
from decimal import Decimal

from ddcli.bench.process import Usage, tree_rss

MATERIALIZED = re.compile(r"(?i)\bcreate\s+materialized\s+view\s+(\w+)")
REL = 1e-9  # doubles agree within this relative difference; everything else exactly


def query_name(path: str) -> str:
    return os.path.basename(path)[:-len(".sql")]


def as_duckdb(text: str) -> str:
    """A model's statements as DuckDB views (DuckDB has no materialized ones)."""
    return re.sub(r"(?i)\bcreate\s+(materialized\s+)?view\b", "CREATE OR REPLACE VIEW", text)


class ServiceMemory:
    """Peak resident memory of the warm engines in ``folder`` (each with its JVM and Python
    workers) over a ``with`` block, sampled every ``interval`` seconds: a service is detached,
    so no descendant of the benchmark."""

    def __init__(self, folder: str, interval: float = 0.2):
        self.folder, self.interval, self.peak = folder, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from ddcli.service import folder as place
        while not self._stop.is_set():
            pids = [place.holder(self.folder, k) for k in place.keys(self.folder)] if os.path.isdir(self.folder) else []
            self.peak = max(self.peak, sum(tree_rss(p) for p in pids if p))
            self._stop.wait(self.interval)

    def __enter__(self) -> "ServiceMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def ddcli(args: list[str], env: dict, services: str | None = None) -> dict:
    """One ``ddcli ARGS`` process: its exit code, stdout, last error line, wall seconds and
    peak resident memory (its own process tree, and the warm engine's when ``services``)."""
    with Usage() as usage, (ServiceMemory(services) if services else _Nothing()) as svc:
        res = subprocess.run([sys.executable, "-m", "ddcli", *args], env=env, capture_output=True, text=True,
                             timeout=6 * 3600, stdin=subprocess.DEVNULL)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error")]
    return {"code": res.returncode, "stdout": res.stdout, "error": errors[-1] if errors else res.stderr.strip()[-300:],
            "seconds": usage.wall, "cpu_seconds": usage.cpu, "peak_bytes": max(usage.peak, svc.peak)}


class _Nothing:
    peak = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def ingest(table: str, path: str, env: dict, *, base: bool, sealed: bool) -> dict:
    """``ddcli ingest`` of one file: seconds and peak memory. The base ingest is at time 0;
    a table no refresh changes is sealed for all times (its upper the empty frontier)."""
    args = ["ingest", table, path] + (["--time", "0"] if base else []) + (["--upper", "{}"] if sealed else [])
    res = ddcli(args, env)
    if res["code"] != 0:
        raise RuntimeError(f"ddcli {' '.join(args)} exited {res['code']}: {res['error']}")
    return {"seconds": round(res["seconds"], 3), "peak_bytes": res["peak_bytes"]}


def run_models(models: list[str], env: dict, services: str | None) -> dict:
    """One ``ddcli run`` of every model: the command's seconds and peak memory, and each
    pipeline's own seconds as ``ddcli run --json`` reports them; a failed pipeline's error."""
    res = ddcli(["run", *models, "--json"], env, services)
    records = [json.loads(line) for line in res["stdout"].splitlines() if line.startswith("{")]
    out = {"seconds": round(res["seconds"], 3), "cpu_seconds": round(res["cpu_seconds"], 2),
           "peak_bytes": res["peak_bytes"],
           "per_query_s": {r["pipeline"]: r["seconds"] for r in records},
           "spark_jobs": {r["pipeline"]: r.get("spark_jobs") for r in records}}
    if res["code"] != 0:
        out["error"] = res["error"]
    return out


def duckdb_all(con, views: dict[str, list[str]]) -> tuple[dict[str, float], dict[str, tuple]]:
    """Every query from scratch: seconds per query, and each view's columns and rows."""
    seconds, answers = {}, {}
    for query, names in views.items():
        t0 = _time.perf_counter()
        for v in names:
            rel = con.sql(f"SELECT * FROM {v}")
            answers[v] = (rel.columns, rel.fetchall())
        seconds[query] = round(_time.perf_counter() - t0, 4)
    return seconds, answers


def check(store_path: str, answers: dict[str, tuple], views: dict[str, list[str]], skip=()) -> dict[str, str]:
    """query -> the first difference between ddcli's views (at their latest time) and
    DuckDB's answers, for every query not in ``skip``."""
    from storage.sql.query import as_of, count_column
    from storage.store import Store
    store, problems = Store(store_path), {}
    for query, names in views.items():
        for v in names if query not in skip else []:
            try:
                trace = store.trace(v)
                table = as_of(store, v)
            except Exception as e:  # noqa: BLE001 - a missing or unreadable output is a mismatch
                problems[query] = f"{v}: {str(e).splitlines()[0]}"
                break
            columns, want = answers[v]
            cols = trace.data_columns
            if len(cols) != len(columns):
                problems[query] = f"{v}: columns {cols}, DuckDB's {columns}"
                break
            order = [c if c in cols else cols[i] for i, c in enumerate(columns)]
            counts = table.column(count_column(trace)).to_pylist()
            if min(counts, default=1) < 0:
                problems[query] = f"{v}: rows of negative count"
                break
            rows = list(zip(*[table.column(c).to_pylist() for c in order])) if table.num_rows else []
            diff = same_bag(want, [row for row, n in zip(rows, counts) for _ in range(n)])
            if diff:
                problems[query] = f"{v}: {diff}"
                break
    return problems


def same_bag(want: list[tuple], got: list[tuple]) -> str | None:
    """None when the two bags of rows agree (doubles within ``REL``, everything else
    exactly), else the first difference in words."""
    want, got = sorted(want, key=_order), sorted(got, key=_order)
    if len(want) != len(got):
        return f"{len(want)} rows expected, {len(got)} found"
    for a, b in zip(want, got):
        if len(a) != len(b) or not all(_same(x, y) for x, y in zip(a, b)):
            return f"expected {a}, found {b}"
    return None


def _same(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        if x is None or y is None:
            return x is y
        return abs(float(x) - float(y)) <= REL * max(abs(float(x)), abs(float(y)), 1e-300)
    if isinstance(x, Decimal) or isinstance(y, Decimal):
        return x is not None and y is not None and Decimal(x) == Decimal(y)
    return x == y


def _order(row):
    return tuple((v is None, str(v) if not isinstance(v, (int, float, Decimal)) else float(v)) for v in row)
