"""TPC-H's 22 queries as SQL models, against DuckDB running the same text at every refresh.

The models (ddcli/bench/tpch/queries/qNN.sql, which `ddcli bench tpch` runs too) are the specification's queries with its
validation parameters, each a ``CREATE MATERIALIZED VIEW`` (Q15's view a ``CREATE VIEW``).
Scale factor 0.015 is the smallest where every query has rows (below 0.014 Q17 finds no part
and Q20 no supplier). After the base load and after each of three refreshes (300 orders
deleted with their lineitems, 300 inserted, 100 customers moved: most queries' answers change)
one ``ddcli run`` runs every model (the first run takes the base and the first refresh, two
times at once; a run per file would cost a Spark session each, one model of all 22 queries
took twice as long), with compaction after the first run; then each view, at every time so far,
must hold the bag of rows DuckDB gets from scratch on the tables as they were then
(decimals exactly, doubles within 1e-12 relative). DuckDB runs each file's text with its views
made plain views, over tables tests/workloads/tpch.py changes as the store's inputs change. The
answers cut by a LIMIT (Q3, Q10) have no tie at the cut on this data, so DuckDB's are the only ones.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import pytest

from ddcli.bench.tpch.data import query_files
from storage.store import Store
from tests.helpers.cli import ddcli
from tests.helpers.operations import trace_at
from tests.workloads.tpch import CHANGING, TABLES, Reference, generate, same_rows

SCALE = 0.015
REFRESHES = 3
ORDERS_PER_REFRESH, CUSTOMERS_PER_REFRESH = 300, 100
MODELS = query_files()
QUERIES = [os.path.basename(m)[:-len(".sql")] for m in MODELS]


def outputs(text: str) -> list[str]:
    """The output traces a model file declares (its materialized views)."""
    return re.findall(r"(?i)\bcreate\s+materialized\s+view\s+(\w+)", text)


def as_duckdb(text: str) -> str:
    """The model's statements as DuckDB views (DuckDB has no materialized ones)."""
    return re.sub(r"(?i)\bcreate\s+(materialized\s+)?view\b", "CREATE OR REPLACE VIEW", text)


@dataclass
class Runs:
    """What the runs over the base and the refreshes found, per query."""
    answers: dict[int, dict[str, list[tuple]]] = field(default_factory=dict)  # refresh -> view -> rows
    problems: dict[str, str] = field(default_factory=dict)  # query -> its first problem


def run_models(store_dir: str, models: list[str]) -> dict[str, str]:
    """Run the model files in one command; the error line of each that failed (each failed
    one is run again alone for its own error: a failed model commits nothing)."""
    res = ddcli(store_dir, "run", *models)
    if res.exit_code == 0:
        return {}
    failed = [m for m in models if m in res.stderr] if len(models) > 1 else models
    errors = {}
    for m in failed or models:
        alone = ddcli(store_dir, "run", m) if len(models) > 1 else res
        if alone.exit_code != 0:
            errors[m] = _error(alone)
    return errors


def _error(res) -> str:
    lines = [line for line in (res.stderr or "").splitlines() if line.startswith("error")]
    if lines:
        return lines[-1]
    return f"exit {res.exit_code}: {res.exception!r}"


def _compare(store: Store, view: str, columns: list[str], answers: dict, upto: int) -> str | None:
    """The first difference between ``view`` at the times 0..``upto`` and DuckDB's answers."""
    trace = store.trace(view)
    named = [c for c in columns if re.fullmatch(r"\w+", c)]
    if len(trace.data_columns) != len(columns) or any(c not in trace.data_columns for c in named):
        return f"{view}: columns {trace.data_columns}, DuckDB's {columns}"
    for t in range(upto + 1):
        found = trace_at(store, view, (t,))
        negative = {row: n for row, n in found.items() if n < 0}
        if negative:
            return f"{view} at refresh {t}: rows of negative count {negative}"
        diff = same_rows(answers[t][view], [row for row, n in found.items() for _ in range(n)])
        if diff:
            return f"{view} at refresh {t}: {diff}"
    return None


@pytest.fixture(scope="module")
def tpch_sql_runs(tmp_path_factory) -> Runs:
    work = tmp_path_factory.mktemp("tpch_sql")
    base = generate(str(work / "base"), SCALE)
    store_dir = str(work / "store")
    store = Store(store_dir)
    ref = Reference(base, str(work), ORDERS_PER_REFRESH, CUSTOMERS_PER_REFRESH)
    views, columns = {}, {}
    for query, model in zip(QUERIES, MODELS):
        with open(model, encoding="utf-8") as fh:
            text = fh.read()
        ref.con.execute(as_duckdb(text))
        views[query] = outputs(text)
        for v in views[query]:
            columns[v] = ref.con.sql(f"SELECT * FROM {v}").columns
    for t in TABLES:
        store.ingest(t, [os.path.join(base, f"{t}.parquet")], time=0)
    runs = Runs()
    for r in range(REFRESHES + 1):
        if r:
            for table, file in ref.refresh(r).items():
                store.ingest(table, [file])
            for t in set(TABLES) - set(CHANGING):
                store.advance(t, upper=str(r + 1))
        runs.answers[r] = {v: ref.answer(f"SELECT * FROM {v}") for vs in views.values() for v in vs}
        if r == 0:
            continue
        active = [m for q, m in zip(QUERIES, MODELS) if q not in runs.problems]
        for model, error in run_models(store_dir, active).items():
            runs.problems[os.path.basename(model)[:-len(".sql")]] = f"ddcli run at refresh {r}: {error}"
        for query in QUERIES:
            for v in views[query] if query not in runs.problems else []:
                diff = _compare(store, v, columns[v], runs.answers, r)
                if diff:
                    runs.problems[query] = f"after the run at refresh {r}: {diff}"
        if r == 1:  # compaction between runs: merged layers, times advanced to what was consumed
            for t in TABLES:
                store.advance(t, since=str(r))
            store.compact(full=True, grace_seconds=0)
    return runs


def test_every_query_equals_duckdb_at_every_refresh(tpch_sql_runs):
    """One test over the one fixture: pytest-xdist would run a module fixture once on every
    worker that takes one of its tests, and this one costs minutes."""
    answers = tpch_sql_runs.answers
    for view in answers[0]:  # the reference is not vacuous: a value in every view at every refresh
        for r in answers:
            assert any(v is not None for row in answers[r][view] for v in row), f"{view} at refresh {r}"
    changed = [v for v in answers[0] if any(sorted(map(repr, answers[r][v])) != sorted(map(repr, answers[0][v]))
                                          for r in answers)]
    assert len(changed) >= 12, changed  # and the refreshes change most answers
    problems = tpch_sql_runs.problems
    assert not problems, "\n".join(f"{q}: {p}" for q, p in sorted(problems.items()))
