"""A pipeline's life in a store: listing pipelines and dropping them.

A pipeline that has run owns its output traces and its state traces (``name.node``) and
holds each of its inputs at the frontier it consumed, so compaction keeps the history it
still needs. Those holds last as long as the pipeline's record: ``drop`` is how a user
gives them back. Everything here is metadata work (no Spark); dropping is one commit, and
the files it stops referencing are garbage for ``ddcli compact``.
"""

from __future__ import annotations

from storage.errors import StoreError
from storage.lattice import Frontier, format_frontier
from storage.state import transitions
from storage.state.readers import reader_of
from storage.state.transitions import State


def _record(state: State, store, name: str) -> dict:
    rec = state.pipelines.get(name)
    if not isinstance(rec, dict):
        known = ", ".join(sorted(state.pipelines)) or "none"
        raise StoreError(f"unknown pipeline {name!r} in store {store.path} (pipelines: {known})")
    return rec


def _readers(state: State, traces: list[str], but: str) -> list[tuple[str, str]]:
    """(trace, holder) for every other pipeline or named reader holding one of ``traces``."""
    return [(t, h) for t in traces if t in state.traces for h in sorted(state.traces[t].holds) if h != but]


def pipeline_rows(state: State) -> list[dict]:
    """One row per pipeline: its file and hash, inputs and the holds it keeps on them,
    outputs, state size, and lag (the sealed input updates its next run will process)."""
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if not isinstance(rec, dict):
            continue
        d = rec.get("d", 1)
        holds, waiting = [], 0
        for inp in sorted(rec.get("inputs") or {}):
            t = state.traces.get(inp)
            hold = t.holds.get(name) if t is not None else None
            if hold is None:
                continue
            holds.append(f"{inp}@{format_frontier(hold.since)}")
            waiting += sum(l.rows for l in t.layers if l.seq_lo >= hold.seq)
        st = [state.traces[s] for s in rec.get("state", []) if s in state.traces]
        rows.append({
            "pipeline": name, "file": rec.get("file"), "file_hash": rec.get("fingerprint"),
            "runs": rec.get("runs", 0),
            "frontier": format_frontier(Frontier.from_json(rec["frontier"], d)) if "frontier" in rec else None,
            "inputs": ", ".join(sorted(rec.get("inputs") or {})), "holds": " ".join(holds),
            "outputs": ", ".join(rec.get("outputs", [])),
            "state_traces": len(st), "state_rows": sum(t.rows() for t in st),
            "state_bytes": sum(t.bytes() for t in st),
            "lag_updates": waiting,
        })
    return rows


def drop_pipeline(store, name: str, *, keep_outputs: bool = False) -> dict:
    """Release the pipeline's holds, remove its state traces and (unless ``keep_outputs``)
    its output traces, and forget its record — in one commit.

    Kept outputs become ordinary traces (no owner): readable, and free to be ingested into.
    An output another pipeline reads is only removed once that pipeline is dropped.
    """
    state = store.state(to_write=True)
    rec = _record(state, store, name)
    outputs = [o for o in rec.get("outputs", []) if o in state.traces]
    if not keep_outputs:
        readers = _readers(state, outputs, but=name)
        if readers:
            t, holder = readers[0]
            reader = reader_of(holder)
            if reader is not None:
                raise StoreError(f"output {t!r} of pipeline {name!r} is followed by reader {reader!r}; drop it "
                                 f"first (ddcli changes {t} --reader {reader} --drop), or keep the outputs "
                                 f"with --keep-outputs")
            raise StoreError(f"output {t!r} of pipeline {name!r} is an input of pipeline {holder!r}; "
                             f"drop {holder!r} first, or keep the outputs with --keep-outputs")

    def change(s: State, _) -> State:
        _record(s, store, name)
        return transitions.drop(s, name, outputs, keep_outputs)

    store.write_and_commit("drop", lambda written: None, change)
    return {"pipeline": name, "released_holds": sorted(i for i in rec.get("inputs") or {}),
            "removed_state": sorted(rec.get("state", [])),
            "removed_outputs": [] if keep_outputs else outputs, "kept_outputs": outputs if keep_outputs else []}
