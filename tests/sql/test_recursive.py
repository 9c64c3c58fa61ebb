"""WITH RECURSIVE is the loop a Python pipeline writes with ``iterate``: the sample
reachability (sample_data/pipelines/reach.py) and the same walk as a SQL model, run on the
same random graph over several runs (edges removed as well as added, cycles), agree at
every time."""

from __future__ import annotations

import random
import shutil

from ops.run.run import run_pipeline
from storage.store import Store
from tests.helpers.cli import SAMPLE
from tests.helpers.operations import trace_at

MODEL = """
CREATE MATERIALIZED VIEW reach_sql AS
  WITH RECURSIVE walk(root, node) AS (
    SELECT node, node FROM roots
    UNION
    SELECT walk.root, edges.dst FROM walk JOIN edges ON edges.src = walk.node)
  SELECT root, node FROM walk;
"""


def test_with_recursive_equals_the_iterate_pipeline(tmp_path):
    rng = random.Random(5)
    store = Store(str(tmp_path / "store"))
    shutil.copy(SAMPLE / "pipelines" / "reach.py", tmp_path / "reach.py")
    (tmp_path / "reach_sql.sql").write_text(MODEL)
    nodes = [f"n{i}" for i in range(12)]
    live: list[tuple[str, str]] = []
    for t in range(3):
        added = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(10)]
        removed = rng.sample(live, min(3, len(live)))
        rows = [f"{s},{d},{t},1" for s, d in added] + [f"{s},{d},{t},-1" for s, d in removed]
        (tmp_path / f"e{t}.csv").write_text("src,dst,time,diff\n" + "\n".join(rows) + "\n")
        store.ingest("edges", [str(tmp_path / f"e{t}.csv")])
        (tmp_path / f"r{t}.csv").write_text(f"node,time,diff\n{rng.choice(nodes)},{t},1\n")
        store.ingest("roots", [str(tmp_path / f"r{t}.csv")])
        for e in removed:
            live.remove(e)
        live += added
        for pipeline in ("reach.py", "reach_sql.sql"):
            run_pipeline(store, str(tmp_path / pipeline))
        for when in range(t + 1):
            python = trace_at(store, "reach", (when,))
            sql = trace_at(store, "reach_sql", (when,))
            assert python and sql == python, f"at {when}: SQL {sorted(sql)} vs iterate {sorted(python)}"
