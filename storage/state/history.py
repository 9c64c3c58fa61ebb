"""Each pipeline's recent runs and their figures, kept with the store.

A run's figures (when it committed, its seconds, the input updates it read and the output
updates it wrote, its Spark jobs and its timed steps: what ``ddcli run --json`` reports)
go into the pipeline's record in the same commit as the run itself
(:func:`storage.state.transitions.append_run`), so the history never tells of a run that
did not commit. The record keeps the newest :func:`history_limit` runs as an object keyed
by the run's number: a commit adds one key and drops the oldest, so the metadata log's
delta of a run stays the size of one entry (storage/log/delta.py). A loop's rounds are
folded into one step per loop, so an entry's size follows the graph, not the rounds
(:func:`fold_steps`).
Stores written before runs were kept have no history; their records read as empty.
"""

from __future__ import annotations

import os

from storage.errors import StoreError

DEFAULT_RUNS = 30  # runs kept per pipeline unless DDCLI_RUN_HISTORY says otherwise (~3 kB each for 40 operators)
HISTORY_KEY = "history"  # the key of a pipeline's record that holds its recent runs


def history_limit() -> int:
    """``DDCLI_RUN_HISTORY`` (a non-negative integer: the runs kept per pipeline), else 30."""
    raw = os.environ.get("DDCLI_RUN_HISTORY", "").strip()
    if not raw:
        return DEFAULT_RUNS
    if not raw.isdigit():
        raise StoreError(f"DDCLI_RUN_HISTORY must be a non-negative integer (runs kept per pipeline), not {raw!r}")
    return int(raw)


def run_key(run: int) -> str:
    """The key of run number ``run`` (zero-padded: keys sort as runs do)."""
    return f"{run:08d}"


def with_run(history: dict | None, run: int, entry: dict, limit: int) -> dict:
    """``history`` with run ``run``'s ``entry`` added and only the newest ``limit`` runs kept."""
    out = dict(history) if isinstance(history, dict) else {}
    out[run_key(run)] = entry
    for k in sorted(out)[:max(0, len(out) - limit)]:
        del out[k]
    return out


def fold_steps(steps: list[dict]) -> list[dict]:
    """A run's steps as the history keeps them: each loop's rounds folded into one step
    (rounds, seconds, rows), and a write step without the lists other steps hold (the
    operators it computed: the operator steps name their writes; the traces written by
    the same job: only their number, ``together``)."""
    out: list[dict] = []
    rounds: dict[str, dict] = {}
    for s in steps:
        if s.get("step") == "write":
            s = {k: (len(v) if k == "together" else v) for k, v in s.items() if k != "operators"}
        if s.get("step") != "loop_round":
            out.append(s)
            continue
        r = rounds.get(s.get("loop"))
        if r is None:
            r = rounds[s.get("loop")] = {"step": "loop_rounds", "loop": s.get("loop"), "rounds": 0,
                                         "seconds": 0.0, "rows": 0}
            out.append(r)
        r["rounds"] += 1
        r["seconds"] = round(r["seconds"] + (s.get("seconds") or 0.0), 3)
        r["rows"] += s.get("rows") or 0
    return out


def run_entry(*, when: str, seconds: float, rows_in: int, outputs: dict[str, int], inputs: dict[str, int],
              spark_jobs: int, frontier: str, steps: list[dict], rebuild: bool = False) -> dict:
    """One run's figures as the history keeps them (the figures of ``ddcli run --json``)."""
    entry = {"when": when, "seconds": round(seconds, 3), "rows_in": rows_in, "rows_out": sum(outputs.values()),
             "outputs": dict(outputs), "inputs": dict(inputs), "spark_jobs": spark_jobs, "frontier": frontier,
             "steps": fold_steps(steps)}
    if rebuild:
        entry["rebuild"] = True
    return entry


HISTORY_COLUMNS = ["pipeline", "run", "when", "seconds", "rows_in", "rows_out", "spark_jobs", "frontier",
                   "outputs", "inputs", "steps"]


def history_rows(state, pipeline: str | None = None) -> list[dict]:
    """Every kept run of every pipeline (or of ``pipeline``), oldest first within a pipeline."""
    if pipeline is not None and not isinstance(state.pipelines.get(pipeline), dict):
        known = ", ".join(sorted(state.pipelines)) or "none"
        raise StoreError(f"unknown pipeline {pipeline!r} (pipelines: {known})")
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if (pipeline is not None and name != pipeline) or not isinstance(rec, dict):
            continue
        history = rec.get(HISTORY_KEY)
        for key in sorted(history) if isinstance(history, dict) else []:
            e = history[key]
            rows.append({"pipeline": name, "run": int(key), **{c: e.get(c) for c in HISTORY_COLUMNS[2:]}})
    return rows
