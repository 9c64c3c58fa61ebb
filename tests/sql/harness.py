"""A SQL model against DuckDB at every time: random updates of the model's tables over
several runs (compaction between), and after each run every materialized view's trace at
every time compared with DuckDB running the same statements on the tables as they were."""

from __future__ import annotations

import random
from typing import Callable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ops.run.run import run_pipeline
from storage.store import Store
from tests.helpers.operations import trace_at
from tests.workloads.tpch import same_rows


def outputs(model: str) -> list[str]:
    return [line.split()[3] for line in model.splitlines() if line.startswith("CREATE MATERIALIZED VIEW")]


def _write(path, schema: pa.Schema, rows: list[dict], t: int, diffs: list[int]) -> str:
    if not rows:  # no change at t: a row of nulls inserted and retracted (the trace's time still moves)
        rows, diffs = [dict.fromkeys(schema.names)] * 2, [1, -1]
    schema = schema.append(pa.field("time", pa.int64())).append(pa.field("diff", pa.int64()))
    pq.write_table(pa.Table.from_pylist([dict(r, time=t, diff=c) for r, c in zip(rows, diffs)], schema=schema), path)
    return str(path)


def reference(model: str, schemas: dict[str, pa.Schema], live: dict[str, list[dict]]) -> dict[str, list[tuple]]:
    """Every output's rows from DuckDB on the tables as ``live`` holds them."""
    con = duckdb.connect()
    for name, rows in live.items():
        con.register(f"{name}_arrow", pa.Table.from_pylist(rows, schema=schemas[name]))
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    con.execute(model.replace("MATERIALIZED VIEW", "VIEW"))
    return {v: con.execute(f"SELECT * FROM {v}").fetchall() for v in outputs(model)}


def check_model(tmp_path, model: str, schemas: dict[str, pa.Schema], makers: dict[str, Callable],
                *, seed: int, runs: int = 2, times_per_run: int = 2, first: int = 25, later: int = 6,
                retractions: int = 4, rel: float = 1e-9, pipeline: str | None = None) -> list:
    """Run ``model`` over random updates (``makers[table](rng, n)`` makes n rows) and
    assert every output equals DuckDB's at every time after every run; the runs' results.
    With ``pipeline`` (a Python pipeline file's text) that pipeline runs, and ``model`` is
    only DuckDB's reference of its outputs."""
    rng = random.Random(seed)
    store = Store(str(tmp_path / "store"))
    path = tmp_path / ("model.sql" if pipeline is None else "model.py")
    path.write_text(model if pipeline is None else pipeline)
    live: dict[str, list[dict]] = {name: [] for name in schemas}
    answers, t, results = {}, 0, []
    for run in range(runs):
        for _ in range(times_per_run):
            for table, make in makers.items():
                inserts = make(rng, first if t == 0 else later)
                retract = rng.sample(live[table], min(len(live[table]), retractions)) if t else []
                file = _write(tmp_path / f"{table}{t}.parquet", schemas[table], inserts + retract, t,
                              [1] * len(inserts) + [-1] * len(retract))
                store.ingest(table, [file])
                for r in retract:
                    live[table].remove(r)
                live[table] += inserts
            answers[t] = reference(model, schemas, live)
            t += 1
        results.append(run_pipeline(store, str(path)))
        problems = []
        for view in outputs(model):
            for when in range(t):
                found = trace_at(store, view, (when,))
                if any(c < 0 for c in found.values()):
                    problems.append(f"{view} at {when}: rows of negative count: {found}")
                    break
                diff = same_rows(answers[when][view], [row for row, c in found.items() for _ in range(c)], rel=rel)
                if diff:
                    problems.append(f"{view} at {when}: {diff}")
                    break
        assert not problems, "\n".join(problems)
        if run == 0 and runs > 1:  # compaction between runs
            for table in schemas:
                store.advance(table, since=str(t - 1))
            store.compact(full=True, grace_seconds=0)
    return results
