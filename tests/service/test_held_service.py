"""The warm engine holds the layers its small runs read by key, when ``DDCLI_HELD_MEMORY``
asks it to (ops/operators/keyed_reads.py): refreshes through it give a Python fold's
answer, its log shows layers held after them, and without the setting it holds none."""

from __future__ import annotations

import random
import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.service.processes import accumulated, commands_served, ddcli, ok, service_folder, service_log

PIPELINE = """
def pipeline(p):
    a, b = p.input("a"), p.input("b")
    p.output("pairs", a.join(b.select(k="k", w="v"), on="k").count(by="k"))
"""


def _updates(path, rng: random.Random, live: list, t: int) -> str:
    gone = rng.sample(live, min(len(live), 3)) if t else []
    new = [(rng.randrange(15), rng.randrange(1000)) for _ in range(40 if t == 0 else 6)]
    for r in gone:
        live.remove(r)
    live.extend(new)
    rows = [(k, v, -1) for k, v in gone] + [(k, v, 1) for k, v in new]
    pq.write_table(pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows],
                             "time": [t] * len(rows), "diff": [r[2] for r in rows]}), path)
    return str(path)


@pytest.mark.parametrize("memory", ["64m", None])
def test_refreshes_through_the_warm_engine_read_held_layers_when_asked(tmp_path, memory):
    rng = random.Random(7)
    (tmp_path / "pairs.py").write_text(PIPELINE)
    env = {"DDCLI_STORE": str(tmp_path / "store")} | ({"DDCLI_HELD_MEMORY": memory} if memory else {})
    live = {"a": [], "b": []}
    with service_folder() as folder:
        for t in range(4):
            for name in live:
                ok(ddcli(["ingest", name, _updates(tmp_path / f"{name}{t}.parquet", rng, live[name], t)],
                         tmp_path, env))
            ok(ddcli(["run", "pairs.py"], tmp_path, env))
        assert commands_served(folder, 4) >= 4, service_log(folder)
        held = [int(n) for n in re.findall(r"ran run for pid .*?; (\d+) layers held decoded", service_log(folder))]
    per_key = Counter(k for k, _ in live["a"])
    expected = {(("count", per_key[k] * n), ("k", k)): 1 for k, n in Counter(k for k, _ in live["b"]).items()
                if per_key[k]}
    assert accumulated(str(tmp_path / "store"), "pairs") == expected
    if memory:
        assert held and held[-1] > 0, held
    else:
        assert held and max(held) == 0, held
