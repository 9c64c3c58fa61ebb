"""How ``ddcli status`` shows a pipeline and a wide schema: words, not raw JSON.

A pipeline's record in the store's log holds frontiers as lists of lists and its inputs
as a dict of positions; status shows the frontier as a time (``7``, ``(1,2)``), inputs as
``words@7`` (the upper each input had when the pipeline last ran), and outputs and state
traces as comma-separated names. A schema of many columns is shortened in the terminal
(``--json`` keeps every column).
"""

from __future__ import annotations

import json

import pyarrow as pa

from storage.lattice import Frontier, format_frontier

SHOWN_COLUMNS = 4


def _frontier(value, d: int) -> str | None:
    try:
        return format_frontier(Frontier.from_json(value, d))
    except (TypeError, ValueError):
        return json.dumps(value)


def pipeline_row(name: str, rec) -> dict:
    """One row of the pipelines table from a pipeline's record."""
    if not isinstance(rec, dict):
        return {"pipeline": name, "state": json.dumps(rec, default=str)}
    d = rec.get("d", 1)
    inputs = rec.get("inputs") or {}
    return {
        "pipeline": name,
        "file": rec.get("file"),
        "fingerprint": rec.get("fingerprint"),
        "runs": rec.get("runs"),
        "frontier": _frontier(rec["frontier"], d) if "frontier" in rec else None,
        "d": d,
        "inputs": ", ".join(f"{n}@{_frontier(pos['upper'], d)}" if isinstance(pos, dict) and "upper" in pos else n
                            for n, pos in sorted(inputs.items())),
        "outputs": ", ".join(rec.get("outputs") or []),
        "state": ", ".join(rec.get("state") or []),
    }


def short_columns(text: str) -> str:
    """``a:int64, b:string, …`` cut to its first columns and a count of the rest."""
    cols = [c for c in text.split(", ") if c]
    if len(cols) <= SHOWN_COLUMNS:
        return text
    return ", ".join(cols[:SHOWN_COLUMNS]) + f", … (+{len(cols) - SHOWN_COLUMNS} more)"


def pipelines_table(pipelines: dict) -> pa.Table:
    """One row per pipeline (name -> its record in the store's log), as ``ddcli status`` shows them."""
    rows = [pipeline_row(name, rec) for name, rec in sorted(pipelines.items())]
    if not rows:
        return pa.table({"pipeline": pa.array([], pa.string())})
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    # a column with mixed kinds of values is shown as text
    cols = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        kinds = {type(v) for v in vals if v is not None}
        if len(kinds) > 1:
            vals = [None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in vals]
        cols[k] = vals
    return pa.table(cols)
