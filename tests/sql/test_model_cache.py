"""A model planned once in a process (the warm engine plans the same models at every
refresh) is planned again exactly when its text or a schema it reads changed; what it
returns is the pipeline planning would build, and a caller's changes to it stay its own."""

from __future__ import annotations

import pyarrow as pa

from ops.dataflow.fingerprint import fingerprints
from ops.explain.schemas import planned_schemas
from ops.sql import model
from ops.sql.model import load_model

TEXT = "CREATE MATERIALIZED VIEW o AS SELECT k, sum(x) AS s FROM a WHERE x > 0 GROUP BY k;"


def _schemas(x_type: pa.DataType) -> dict[str, pa.Schema]:
    return {"a": pa.schema([("k", pa.int64()), ("x", x_type)])}


def _output(p, schemas) -> pa.Schema:
    planned = planned_schemas(p, schemas)
    out, = (n for n in p.nodes if n.op == "output")
    return planned[out.inputs[0].id]


def test_a_model_is_planned_again_only_when_its_text_or_schemas_change(monkeypatch):
    monkeypatch.setattr(model, "_planned", {})
    plans = []
    real = model._plan
    monkeypatch.setattr(model, "_plan", lambda *a: plans.append(a[2]) or real(*a))
    ints = _schemas(pa.int64())
    first = load_model("m.sql", "m", TEXT, ints.get)
    again = load_model("m.sql", "m", TEXT, ints.get)
    assert len(plans) == 1, "the same text over the same schemas is planned once"
    assert fingerprints(again) == fingerprints(first) and again is not first
    assert _output(again, ints) == _output(first, ints)
    decimals = _schemas(pa.decimal128(12, 2))
    changed = load_model("m.sql", "m", TEXT, decimals.get)
    assert len(plans) == 2 and pa.types.is_decimal(_output(changed, decimals).field("s").type)
    edited = TEXT.replace("x > 0", "x > 1")
    load_model("m.sql", "m", edited, decimals.get)
    assert plans[-1] == edited and len(plans) == 3
    assert fingerprints(load_model("m.sql", "m", edited, decimals.get)) != fingerprints(changed)
    assert len(plans) == 3


def test_a_pipeline_returned_is_the_callers_own(monkeypatch):
    monkeypatch.setattr(model, "_planned", {})
    ints = _schemas(pa.int64())
    before = fingerprints(load_model("m.sql", "m", TEXT, ints.get))
    for _ in range(2):  # planned, then kept: neither is the kept pipeline itself
        taken = load_model("m.sql", "m", TEXT, ints.get)
        assert fingerprints(taken) == before
        taken.nodes.clear()
        taken.outputs.clear()
