"""Every column type through every operator family, at d = 1 and 2, against the reference.

A cell is (time dimension, column type, operator): the output the operator makes of a
random update stream with a column ``c`` of the type (tests/helpers/type_matrix/: edge
cases of the type, nulls in keys and values, retractions, several distinct times per run,
several runs with compaction between), accumulated at every time of a box around the
input times, must equal the plain-Python reference (tests/helpers/reference.py) evaluated
on the inputs the test generated, and have the column types the reference says. Doubles
that are a mean or a sum of doubles are compared within 1e-12 relative to the exact result
(fractions); everything else exactly.

The meaning followed is SQL's as DuckDB has it (checked with DuckDB 2.0):

* a null key matches nothing in join, semijoin, antijoin, as-of join and delta join; an
  antijoin keeps the rows whose key is null;
* grouping (count by ``c``, distinct, count_distinct) puts nulls together, NaN with NaN and
  -0.0 with 0.0 (``SELECT x, count(*) ... GROUP BY x`` gives one row for -0.0 and 0.0, one
  for NaN); joins find NaN = NaN and -0.0 = 0.0;
* ordering (min, max, top_k) puts NaN after every other number (max is NaN when a NaN is
  present) and nulls last in both directions (``ORDER BY x`` and ``ORDER BY x DESC``);
  min and max leave nulls out and are null when every value is;
* sum and avg leave nulls out and are null when every value is (the key still has a row);
  a sum of DECIMAL(p, s) is exact and a DECIMAL(38, s), avg is a double, a sum of doubles
  or floats is a double (an int64 sum stays int64 where DuckDB gives HUGEINT);
* a timestamp with a zone is an instant and keeps its zone in the output's type; one
  without a zone is a wall-clock time that no operator reads in any zone.

One pipeline per group of types (GROUPS of tests/helpers/type_matrix/columns.py) holds all the
group's cells, so a few runs check them all; a group runs once per test session, even
when its cells are spread over xdist workers (the first to need it computes it, under a
lock, the others read what it left). Cells of ``agg`` run only where
``Collection.agg`` exists (``AGG_READY``).
"""

from __future__ import annotations

import fcntl
import os
import pickle

import pytest

from tests.helpers.type_matrix import cells as C
from tests.helpers.type_matrix import columns, runs

CELLS = [(d, t, op) for d in (1, 2) for t in columns.TYPES for op in C.operators(columns.TYPES[t], d, agg=False)]
AGG_CELLS = [(d, t, "agg") for d in (1, 2) for t in columns.TYPES]


def _group_of(t: str) -> str:
    return next(g for g, types in columns.GROUPS.items() if t in types)


@pytest.fixture(scope="session")
def matrix(tmp_path_factory, request):
    """``outcome(group, d)``: the group's runs, computed once per test session (xdist's
    workers share the parent of their temporary folders)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if hasattr(request.config, "workerinput") else base
    done: dict = {}

    def outcome(group: str, d: int) -> runs.Outcome:
        key = (group, d)
        if key not in done:
            path = shared / f"type_matrix_{group}_d{d}.pickle"
            with open(str(path) + ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not path.exists():
                    root = tmp_path_factory.mktemp(f"type_matrix_{group}_d{d}")
                    result = runs.run_group(str(root), group, d)
                    with open(str(path) + ".tmp", "wb") as fh:
                        pickle.dump(result, fh)
                    os.replace(str(path) + ".tmp", path)
                with open(path, "rb") as fh:
                    done[key] = pickle.load(fh)
        return done[key]

    return outcome


def _check(matrix, spark, d: int, t: str, op: str) -> None:
    problem = runs.check_cell(matrix(_group_of(t), d), t, op)
    assert not problem, f"{t} x {op} at d = {d}: {problem}"



# Cells that fail on the engine, each a defect still to fix, marked xfail (not strict) so
# the rest guards what works. A fix removes its cells; none is known today.
KNOWN_FAILING: set = set()


def _cells(cells):
    return [pytest.param(d, t, op, id=f"d{d}-{t}-{op}",
                         marks=[pytest.mark.xfail(reason="a known defect (KNOWN_FAILING)", strict=False)]
                         if (d, t, op) in KNOWN_FAILING else [])
            for d, t, op in cells]


@pytest.mark.parametrize("d,t,op", _cells(CELLS))
def test_cell_equals_the_reference_at_every_time(matrix, spark, d, t, op):
    _check(matrix, spark, d, t, op)


@pytest.mark.skipif(not C.AGG_READY, reason="Collection.agg does not exist yet")
@pytest.mark.parametrize("d,t,op", _cells(AGG_CELLS))
def test_agg_cell_equals_the_reference_at_every_time(matrix, spark, d, t, op):
    _check(matrix, spark, d, t, op)
