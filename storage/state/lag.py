"""How far each pipeline is behind each of its inputs: a pure reading of one store state.

``ddcli status`` shows it (``--lag``); a scheduler reads it to decide whether a run has work.
"""

from __future__ import annotations

import pyarrow as pa

from storage.lattice import Frontier, format_frontier
from storage.state.seal import hold_back

LAG_COLUMNS = [("pipeline", "string"), ("input", "string"), ("behind", "bool"), ("consumed", "string"),
               ("upper", "string"), ("layers", "int64"), ("updates", "int64"), ("pending", "int64"),
               ("consumed_seq", "int64"), ("input_seq", "int64"), ("frontier", "string"),
               ("holds_back", "bool"), ("behind_by", "int64")]


def lag_rows(state, trace: str | None = None) -> list[dict]:
    """How far each pipeline is behind each of its inputs, from one store state.

    For every pipeline that has run and every input it reads: ``consumed`` is the input's
    upper when the pipeline last ran, ``upper`` the input's upper now; ``layers`` and
    ``updates`` are what the next run would read (the input's layers sealed after the
    position the pipeline holds it at), ``pending`` the updates ingested beyond the upper
    (a run cannot read them until ``advance --upper`` seals them); ``consumed_seq`` and
    ``input_seq`` are the positions in the input's sequence of seals. ``frontier`` is
    the pipeline's own frontier: its outputs are complete up to it. ``holds_back`` is true
    for an input whose upper is behind another input's (the pipeline waits for it; a
    dimension table that is complete for good is sealed with ``advance --seal``), and
    ``behind_by`` says by how much (one-dimensional times).
    """
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if not isinstance(rec, dict):
            continue
        d = rec.get("d", 1)
        frontier = format_frontier(Frontier.from_json(rec["frontier"], d)) if "frontier" in rec else None
        waits = hold_back({inp: state.traces[inp].upper for inp in (rec.get("inputs") or {})
                           if inp in state.traces})
        for inp, pos in sorted((rec.get("inputs") or {}).items()):
            if trace is not None and trace not in (inp, name):
                continue
            t = state.traces.get(inp)
            if t is None:
                continue
            hold = t.holds.get(name)
            seq = hold.seq if hold is not None else int(pos.get("seq", 0))
            new = [l for l in t.layers if l.seq_lo >= seq]
            consumed = Frontier.from_json(pos["upper"], t.d) if "upper" in pos else None
            rows.append({
                "pipeline": name, "input": inp,
                "behind": bool(new) or (consumed is not None and consumed != t.upper),
                "consumed": format_frontier(consumed) if consumed is not None else None,
                "upper": format_frontier(t.upper),
                "layers": len(new), "updates": sum(l.rows for l in new),
                "pending": sum(l.rows for l in t.pending),
                "consumed_seq": seq, "input_seq": t.next_seq, "frontier": frontier,
                "holds_back": waits[inp][0], "behind_by": waits[inp][1],
            })
    return rows


def lag_table(state, trace: str | None = None):
    """:func:`lag_rows` as an Arrow table (an empty one has the same columns)."""
    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in LAG_COLUMNS])
    return pa.Table.from_pylist(lag_rows(state, trace), schema=schema)
