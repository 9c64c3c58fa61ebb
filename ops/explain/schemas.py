"""Every collection's columns and their types, found without Spark.

A run learns each collection's schema from Spark's analysis of the graph on empty frames
(``ops/run/run.py: check_pipeline``), which needs a JVM. ``ddcli explain`` gets them from the
input traces' schemas in the store and the operators instead: the column walk of the
pre-check (``ops/dataflow/precheck.py``), followed into loops, with the type of a computed
column given by DuckDB where the expression is one DuckDB and Spark evaluate alike
(``ops/loops/plan.py: portable_sql``), the same test the tasks of a loop rely on. Where a
type cannot be told that way it is unknown (``pa.null()``); a collection whose columns
cannot be told at all (a user's per-key function, a calculus operator) has no schema.
"""

from __future__ import annotations

import re

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.precheck import node_columns
from ops.loops.plan import portable_sql
from ops.loops.route import duck_type


_QUOTED = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"')  # a column as portable_sql writes it


def planned_schemas(p: Pipeline, inputs: dict[str, pa.Schema]) -> dict[int, pa.Schema]:
    """Node id -> the data schema of its collection, for every node whose columns follow
    from ``inputs`` (input trace -> schema); a column mistake is a ``PipelineError``."""
    found = node_columns(p, inputs, in_loops=True, expression_type=_expression_type)
    return {nid: pa.schema([(c, t if t is not None else pa.null()) for c, t in cols.items()])
            for nid, cols in found.items() if cols is not None}


def unknown_types(schema: pa.Schema) -> list[str]:
    """The columns of a planned schema whose type only Spark can tell."""
    return [f.name for f in schema if f.type == pa.null()]


def _expression_type(expression, columns: dict) -> pa.DataType | None:
    """DuckDB's type of a portable expression over columns of known types (else None)."""
    sql = portable_sql(expression, list(columns))
    if sql is None or any(columns[c] is None for c in _QUOTED.findall(sql)):
        return None
    return duck_type(sql, pa.schema([(c, t if t is not None else pa.null()) for c, t in columns.items()]))
