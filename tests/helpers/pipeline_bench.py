"""The harness of the pipeline tests: random update streams, their schedule of runs, and
a :class:`Bench` (a store plus the raw updates a test ingested into it) with the checks of
correctness (docs/architecture.md): every output at every time equals the plain
reference; ``verify`` agrees; a mistake is one line before Spark does any work.

The reference itself is tests/helpers/reference.py; nothing here computes an expected
result from what the store holds.
"""

from __future__ import annotations

import os
import textwrap
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.errors import PipelineError
from ops.run.run import run_pipeline
from ops.verify.verify import verify_pipeline
from storage.lattice import time_columns
from storage.store import Store
from tests.helpers import reference as R

# Data columns of the inputs (Arrow types matter: a join needs equal key types).
XS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64())])
YS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("u", pa.int64())])


def xs_row(rng):
    return (rng.randrange(4), rng.choice("pqr"), rng.randrange(5))


def ys_row(rng):
    return (rng.randrange(5), rng.choice("pqr"), rng.randrange(-1, 3))


def _sometimes_null_key(make_row):
    """Rows whose key ``k`` is sometimes null (a null key matches nothing, unless a join says
    ``nulls_equal``)."""
    def row(rng):
        r = make_row(rng)
        return (None,) + r[1:] if rng.random() < 0.12 else r
    return row


xs_row_null, ys_row_null = _sometimes_null_key(xs_row), _sometimes_null_key(ys_row)


# ------------------------------------------------------------------ the harness


def random_updates(rng, make_row, times, n, pool):
    """``n`` or so updates at ``times``: insertions (some of multiplicity 2), retractions of
    rows inserted earlier in the stream (at any time, so also before the insertion),
    retractions of rows never inserted, and exact repeats of an update."""
    out = []
    while len(out) < n:
        t = rng.choice(times)
        x = rng.random()
        if pool and x < 0.3:
            row, diff = rng.choice(pool), -1
        elif x < 0.36:
            row, diff = make_row(rng), -1
        else:
            row, diff = make_row(rng), rng.choice((1, 1, 1, 2))
            pool.append(row)
        out.append((row, t, diff))
        if rng.random() < 0.1:
            out.append((row, t, diff))
    return out


def replaced_every_time(times, live: dict, name: str, make):
    """The hot key 0: its one live row replaced at each of ``times``."""
    out = []
    for t in times:
        row = make(t)
        out.append((row, t, 1))
        if name in live:
            out.append((live[name], t, -1))
        live[name] = row
    return out


def random_changes(rng, times, make_row, pool, n):
    out = []
    for _ in range(n):
        t = rng.choice(times)
        if pool and rng.random() < 0.35:
            out.append((pool.pop(rng.randrange(len(pool))), t, -1))
        else:
            row = make_row(rng)
            pool.append(row)
            out.append((row, t, rng.choice((1, 1, 2))))
    return out


def _beyond(frontier, t) -> bool:
    return any(R.leq(f, t) for f in frontier)


def _upper(d: int, r: int, lag: bool) -> list[tuple]:
    """The upper frontier an input is sealed to by run ``r`` (r = -1: nothing sealed yet).

    On time: 6(r+1) (d = 1), or (2r+2, 0) (d = 2). Lagging: 6r+4, or the two-element
    frontier {(2r+1, 2), (2r+2, 0)} — so inputs are sealed to different frontiers, a
    run consumes some updates beyond the pipeline's frontier, and the next run brings
    updates at times below ones already consumed."""
    if r < 0:
        return [(0,) * d]
    if d == 1:
        return [(6 * r + (4 if lag else 6),)]
    return [(2 * r + 1, 2), (2 * r + 2, 0)] if lag else [(2 * r + 2, 0)]


def schedule(d: int, r: int, lag: bool = False) -> tuple[list[tuple], str | None]:
    """The input times of run ``r`` (every time newly sealed: 6 epochs for d = 1, 8 or so
    product times for d = 2) and the ``upper`` to ingest with (None: d = 1 on time lets
    the store move the upper past the largest time)."""
    prev, cur = _upper(d, r - 1, lag), _upper(d, r, lag)
    hi = cur[-1][0] + 1
    cells = [(a,) for a in range(hi)] if d == 1 else [(a, b) for a in range(hi) for b in range(4)]
    times = [t for t in cells if _beyond(prev, t) and not _beyond(cur, t)]
    upper = None if d == 1 and not lag else " ".join("(" + ",".join(map(str, f)) + ")" for f in cur)
    return times, upper


def run_since(d: int, r: int) -> str:
    """The since requested after run ``r``: partly inside what was consumed, and on odd runs
    ahead of the upper (the pipeline's hold must keep compaction behind it)."""
    if d == 1:
        return str(6 * r + 3) if r % 2 == 0 else str(6 * r + 9)
    return f"({2 * r + 1},1)" if r % 2 == 0 else f"({2 * r + 1},1) ({2 * r},3)"


class Bench:
    """A store, the raw updates the test ingested into it, pipeline files, and the checks of
    correctness (docs/architecture.md)."""

    def __init__(self, root, d: int = 1):
        self.root = str(root)
        os.makedirs(self.root, exist_ok=True)
        self.d = d
        self.tcols = time_columns(d)
        self.store = Store(os.path.join(self.root, "store"))
        self.schemas: dict[str, pa.Schema] = {}
        self.updates: dict[str, list] = defaultdict(list)
        self.files = 0

    # -- inputs
    def ingest(self, name: str, schema: pa.Schema, updates, *, upper: str | None = None, fmt: str = "parquet"):
        self.files += 1
        cols = {f.name: pa.array([u[0][i] for u in updates], f.type) for i, f in enumerate(schema)}
        for i, c in enumerate(self.tcols):
            cols[c] = pa.array([u[1][i] for u in updates], pa.int64())
        cols["diff"] = pa.array([u[2] for u in updates], pa.int64())
        path = os.path.join(self.root, f"{name}_{self.files}.{fmt}")
        table = pa.table(cols)
        if fmt == "csv":
            import pyarrow.csv as pacsv
            pacsv.write_csv(table, path)
        else:
            pq.write_table(table, path)
        self.store.ingest(name, [path], key=[schema.names[0]], upper=upper)
        self.schemas[name] = schema
        self.updates[name] += updates

    def advance_and_compact(self, since: str, *, full: bool):
        for name in self.schemas:
            self.store.advance(name, since=since)
        self.store.compact(full=full, grace_seconds=0)

    def inputs_at(self, t) -> dict[str, R.Coll]:
        return {n: R.accumulate(self.updates[n], s.names, t) for n, s in self.schemas.items()}

    def times(self):
        return [u[1] for ups in self.updates.values() for u in ups]

    # -- pipelines
    def pipeline(self, name: str, source: str) -> str:
        path = os.path.join(self.root, f"{name}.py")
        with open(path, "w") as fh:
            fh.write(textwrap.dedent(source))
        return path

    def run(self, path: str, **kw):
        return run_pipeline(self.store, path, **kw)

    def rows(self, out: str) -> list[dict]:
        return python_rows(self.store.read_updates(self.store.trace(out)))

    def output_at(self, out: str, t, rows=None) -> R.Coll:
        tr = self.store.trace(out)
        return R.fold_updates(self.rows(out) if rows is None else rows, tr.data_columns, self.tcols, t)

    def state(self, pipeline: str) -> dict[str, tuple[int, int]]:
        """The pipeline's state traces: name -> (rows, bytes)."""
        s = self.store.state()
        return {n: (t.rows(), t.bytes()) for n, t in s.traces.items() if n.startswith(pipeline + ".")}

    def check_at_every_time(self, outputs, expected_at, times=None):
        """Every output, accumulated at every time of the box, equals ``expected_at(t)[out]``."""
        times = times or R.box(self.times())
        problems = []
        for out in outputs:
            rows = self.rows(out)
            for t in times:
                want, got = expected_at(t)[out], self.output_at(out, t, rows)
                if want != got:
                    problems.append(f"output {out!r} at time {t}: {R.describe_difference(want, got)}")
                    break
        assert not problems, "\n".join(problems)

    def check(self, path: str, ref, outputs, *, times=None, beyond=None, name=None, verify=True):
        """(a) every output at every time of the box equals the reference; (b) verify is ok."""
        times = times or R.box(self.times())
        if beyond is not None:
            times = [t for t in times if beyond(t)]
        assert times
        expected = {t: ref(self.inputs_at(t)) for t in times}
        problems = []
        for out in outputs:
            tr = self.store.trace(out)  # every output exists after a run, even if empty
            rows = python_rows(self.store.read_updates(tr))
            for t in times:
                found = R.fold_updates(rows, tr.data_columns, self.tcols, t)
                if found != expected[t][out]:
                    problems.append(f"output {out!r} at time {t}: {R.describe_difference(expected[t][out], found)}")
                    break  # the first failing time of each output
        assert not problems, "\n".join(problems)
        if not verify:
            return
        v = verify_pipeline(self.store, path, name=name)
        assert v.times, "verify checked no time"
        assert v.ok, "\n".join(x.describe() for x in v.differences)


def assert_refused(bench: Bench, path: str, spark_jobs, must_contain, run=None, jobs_ok: bool = False) -> str:
    """A one-line PipelineError, nothing written, no Spark job started (unless ``jobs_ok``)."""
    version, jobs = bench.store.state().version, spark_jobs()
    with pytest.raises(PipelineError) as e:
        (run or bench.run)(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.strip(), msg
    for s in must_contain:
        assert s in msg, (s, msg)
    assert bench.store.state().version == version
    assert jobs_ok or spark_jobs() == jobs
    return msg


def python_rows(table: pa.Table) -> list[dict]:
    """``table``'s rows as Python values, timestamps with a zone as UTC instants: a zone's
    local time of an instant may be beyond Python's years, and aware datetimes compare as
    instants whatever their zone."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz:
            table = table.set_column(i, f.name, table.column(i).cast(pa.timestamp(f.type.unit, "UTC")))
    return table.to_pylist()
