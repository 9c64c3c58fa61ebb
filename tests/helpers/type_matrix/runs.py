"""Running the matrix: a group's update streams, its runs (isolating failing cells), and
the check of one cell at every time."""

from __future__ import annotations

import os
import random
import re
import traceback
from dataclasses import dataclass, field

import pyarrow as pa

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, run_since, schedule
from tests.helpers.type_matrix.cells import (approximate_columns, expected, expected_types, operators, output_name,
                                             pipeline_source)
from tests.helpers.type_matrix.columns import GROUPS, TYPES, ColumnType

RUNS = 2

# ------------------------------------------------------------------ the update streams


def _row_maker(t: ColumnType, side: str):
    def value(rng):
        return None if rng.random() < 0.12 else rng.choice(t.values)

    def xs_row(rng):
        return (None if rng.random() < 0.12 else rng.randrange(3), rng.randrange(4), value(rng))

    def ys_row(rng):
        return (value(rng), rng.randrange(4))
    return xs_row if side == "xs" else ys_row


def bag_updates(rng, make_row, times, n: int, live: list, first: tuple) -> list:
    """``first`` inserted at the first of ``times`` (never retracted), then about ``n``
    updates at ``times``: insertions (some of multiplicity 2, some repeated), and retractions
    of rows inserted at a time ``<=`` the retraction's (``live`` holds ``[row, time, count]``
    of what is left to retract), so no time sees a negative count."""
    out = [(first, times[0], 1)]
    while len(out) < n:
        t = rng.choice(times)
        ready = [e for e in live if R.leq(e[1], t)]
        if ready and rng.random() < 0.35:
            e = rng.choice(ready)
            k = rng.randint(1, e[2])
            out.append((e[0], t, -k))
            e[2] -= k
            if not e[2]:
                live.remove(e)
            continue
        row, m = make_row(rng), rng.choice((1, 1, 1, 2))
        reps = 2 if rng.random() < 0.1 else 1
        out += [(row, t, m)] * reps
        live.append([row, t, m * reps])
    return out


@dataclass
class Streams:
    """Every input's updates per run, and the upper each is ingested with."""

    d: int
    updates: dict = field(default_factory=dict)  # (trace, run) -> updates
    uppers: dict = field(default_factory=dict)  # (trace, run) -> upper or None


def streams(types: list[str], d: int, seed: int) -> Streams:
    out = Streams(d)
    for t in types:
        rng = random.Random(f"{seed}-{t}-{d}")
        for side, lag, n in (("xs", False, 24), ("ys", True, 14)):
            live: list = []
            for r in range(RUNS):
                times, upper = schedule(d, r, lag)
                # a row whose ``c`` is null on both sides in every run (null keys always meet),
                # in xs under a group of its own (g = 3: a group whose values are all null)
                first = (3, rng.randrange(4), None) if side == "xs" else (None, rng.randrange(4))
                out.updates[(f"{side}_{t}", r)] = bag_updates(rng, _row_maker(TYPES[t], side), times, n, live, first)
                out.uppers[(f"{side}_{t}", r)] = upper
    return out


def schema_of(trace: str) -> pa.Schema:
    side, t = trace.split("_", 1)
    c = pa.field("c", TYPES[t].arrow)
    return pa.schema([("g", pa.int64()), ("id", pa.int64()), c]) if side == "xs" else pa.schema([c, ("id", pa.int64())])


# ------------------------------------------------------------------ running a group


@dataclass
class Outcome:
    """What a group's runs left: per output its updates and types, or the error that stopped
    it; per input trace its updates (for the reference)."""

    d: int
    outputs: dict = field(default_factory=dict)  # output -> (columns, {column: type}, rows)
    errors: dict = field(default_factory=dict)  # output -> one-paragraph error
    updates: dict = field(default_factory=dict)  # input trace -> updates of every run


_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _error(e: BaseException, where: str) -> str:
    """One line: where, the error, and the project's innermost line it passed through."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith(_REPO) and "/.venv/" not in f.filename and "/tests/" not in f.filename]
    at = f" (at {os.path.relpath(frames[-1].filename, _REPO)}:{frames[-1].lineno})" if frames else ""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    text = " ... ".join(dict.fromkeys(lines[:1] + lines[-1:]))  # a worker's error ends its traceback
    return f"{where}: {type(e).__name__}: {text}{at}"


def refused_types(root: str, s: Streams, types: list[str]) -> dict[str, str]:
    """Types whose updates ingest refuses (no Spark): type -> the error."""
    out = {}
    for t in types:
        bench = Bench(os.path.join(root, f"ingest_{t}"), s.d)
        try:
            for r in range(RUNS):
                for side in ("xs", "ys"):
                    name = f"{side}_{t}"
                    bench.ingest(name, schema_of(name), s.updates[(name, r)], upper=s.uppers[(name, r)])
        except Exception as e:  # noqa: BLE001 - any refusal is the cell's finding
            out[t] = _error(e, f"ingest of {name} (run {r})")
    return out


def run_cells(root: str, s: Streams, cells: list[tuple[str, str]], outcome: Outcome, label: str = "all") -> None:
    """Run ``cells`` as one pipeline in ``RUNS`` runs on a store of their own. On a failure,
    the cell whose line the error names is left out and the others run again; an error
    that names no line splits the cells by type, or one type's in halves, each run on its own."""
    bench = Bench(os.path.join(root, label), s.d)
    source, lines = pipeline_source(cells)
    path = bench.pipeline("matrix", source)
    inputs = sorted({f"{side}_{t}" for t, _ in cells for side in ("xs", "ys")})
    try:
        for r in range(RUNS):
            for name in inputs:
                bench.ingest(name, schema_of(name), s.updates[(name, r)], upper=s.uppers[(name, r)])
            bench.run(path)
            if r < RUNS - 1:
                bench.advance_and_compact(run_since(s.d, r), full=True)
    except Exception as e:  # noqa: BLE001 - a failing cell is a finding, isolated below
        named = [lines[int(n)] for n in re.findall(r"matrix\.py:(\d+)", str(e)) if int(n) in lines]
        if len(cells) == 1 or named:
            bad = named[0] if named else cells[0]
            outcome.errors[output_name(*bad)] = _error(e, f"run {r + 1} of {RUNS}")
            rest = [c for c in cells if c != bad]
            if rest:
                run_cells(root, s, rest, outcome, label + "r")
            return
        types = sorted({t for t, _ in cells})
        if len(types) > 1:  # most such errors are a type's (its values, its Spark type)
            parts = {f"_{t}": [c for c in cells if c[0] == t] for t in types}
        else:
            parts = {"a": cells[:len(cells) // 2], "b": cells[len(cells) // 2:]}
        for suffix, part in parts.items():
            run_cells(root, s, part, outcome, label + suffix)
        return
    for t, op in cells:
        out = output_name(t, op)
        tr = bench.store.trace(out)
        outcome.outputs[out] = (tr.data_columns, {f.name: f.type for f in tr.schema}, bench.rows(out))
    for name in inputs:
        outcome.updates[name] = bench.updates[name]


def run_group(root: str, group: str, d: int, seed: int = 7) -> Outcome:
    types = GROUPS[group]
    s = streams(types, d, seed)
    outcome = Outcome(d)
    refused = refused_types(root, s, types)
    for t, err in refused.items():
        for op in operators(TYPES[t], d):
            outcome.errors[output_name(t, op)] = err
    cells = [(t, op) for t in types if t not in refused for op in operators(TYPES[t], d)]
    if cells:
        run_cells(root, s, cells, outcome)
    for t in refused:  # the reference still needs the updates the test generated
        for side in ("xs", "ys"):
            outcome.updates[f"{side}_{t}"] = [u for r in range(RUNS) for u in s.updates[(f"{side}_{t}", r)]]
    return outcome


# ------------------------------------------------------------------ checking a cell


def _canonical_updates(updates) -> list:
    return [(tuple(R.canonical(v) for v in row), time, diff) for row, time, diff in updates]


def check_cell(outcome: Outcome, t: str, op: str) -> str:
    """'' when the cell is right at every time of the box, else what is wrong: its error,
    its column types, or the first time at which it differs and how."""
    out = output_name(t, op)
    if out in outcome.errors:
        return outcome.errors[out]
    ctype = TYPES[t]
    columns, types, rows = outcome.outputs[out]
    wrong = {c: (str(want), str(types.get(c))) for c, want in expected_types(ctype, op).items() if types.get(c) != want}
    problems = [f"types: {', '.join(f'{c} should be {w}, is {g}' for c, (w, g) in wrong.items())}"] if wrong else []
    ups = {side: _canonical_updates(outcome.updates[f"{side}_{t}"]) for side in ("xs", "ys")}
    cols = {"xs": ["g", "id", "c"], "ys": ["c", "id"]}

    def at(name, s):
        return ups["xs"] if name == "xs_updates" else R.accumulate(ups[name], cols[name], s)

    tcols = ["time"] if outcome.d == 1 else [f"time_{i}" for i in range(outcome.d)]
    approx = approximate_columns(ctype, op)
    for time in R.box([u[1] for side in ups.values() for u in side]):
        want = expected(ctype, op, {n: at(n, time) for n in ("xs", "ys")}, at, time)
        found = R.fold_updates(rows, columns, tcols, time)
        diff = R.approx_difference(want, found, approx)
        if diff:
            problems.append(f"at time {time}: {diff}")
            break
    return "; ".join(problems)
