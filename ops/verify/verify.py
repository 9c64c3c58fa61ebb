"""``ddcli verify``: recompute a pipeline from scratch and compare with its output traces.

For each checked time ``t`` the inputs are accumulated at ``t`` (as the pipeline last
consumed them) and the graph is evaluated on those collections by an independent oracle
(ops/verify/oracle.py: plain Spark joins, group-bys and a driver loop, sharing no operator code
with ``ddcli run``); every checked time is one more value of the column ``_at``, so all
times are evaluated in one Spark plan. The output traces accumulated at ``t`` must hold
the same rows with the same counts; floating-point columns are equal within a relative
:data:`TOLERANCE` (two evaluations may sum doubles in different orders), so a found row
whose doubles are that close to an expected row's is paired with it. Every time an output can tell apart is
checked (the grid of the time coordinates its inputs and outputs hold, within the
pipeline's frontier and beyond every since), unless ``max_times`` caps them. This is the
user's audit and the test suite's oracle.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
from pyspark.sql import functions as F

from ops.dataflow.load import load_pipeline, trace_schemas
from ops.errors import PipelineError
from ops.io.read import read_layers
from ops.verify.oracle import AT, M, Oracle, check_supported, consolidated
from storage.lattice import Frontier, Time, format_frontier, format_time, time_columns
from storage.layer import update_schema
from storage.store import Store

DEFAULT_MAX_TIMES = None  # every time
#: Two floating-point values are equal when ``|a - b| <= TOLERANCE * max(|a|, |b|)`` (or both
#: are NaN): the last bits of a sum of doubles depend on the order it adds them in.
TOLERANCE = 1e-9


@dataclass
class Difference:
    output: str
    time: Time
    row: dict
    expected: int
    found: int

    def describe(self) -> str:
        row = ", ".join(f"{k}={v!r}" for k, v in self.row.items())
        return (f"output {self.output!r} at time {format_time(self.time)}: row ({row}) "
                f"expected count {self.expected}, found {self.found}")


@dataclass
class VerifyResult:
    pipeline: str
    times: list[Time]
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def _beyond_all(t: Time, frontiers: list[Frontier]) -> bool:
    return all(f.beyond(t) for f in frontiers)


def verify_pipeline(store: Store, path: str, *, name: str | None = None, at: list[Time] | None = None,
                    master: str | None = None, max_times: int | None = DEFAULT_MAX_TIMES,
                    progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Check pipeline ``path``'s outputs at the times ``at`` (default: every time they tell
    apart); ``progress`` receives a line as each long piece of work starts."""
    say = progress or (lambda msg: None)
    state = store.state()
    p = load_pipeline(path, name, trace_schemas(state.traces))
    check_supported(p)
    record = state.pipelines.get(p.name)
    if not record:
        raise PipelineError(f"pipeline {p.name!r} has not run yet in store {store.path}; nothing to verify")
    d = record["d"]
    frontier = Frontier.from_json(record["frontier"], d)
    inputs = {}
    for n in p.inputs:
        t = state.traces.get(n)
        if t is None:
            raise PipelineError(f"input trace {n!r} does not exist in store {store.path}")
        seq = record["inputs"][n]["seq"]
        inputs[n] = (t, [l for l in t.layers if l.seq_hi <= seq])
    outputs = {o: state.traces[o] for o in p.outputs if o in state.traces}
    sinces = [t.since for t, _ in inputs.values()] + [t.since for t in outputs.values()]

    from ops.spark.session import get_spark, size_partitions
    say("starting Spark")
    started = time.monotonic()
    spark = get_spark(master)
    say(f"Spark ready in {time.monotonic() - started:.1f} s")
    size_partitions(spark, sum(l.rows for _, layers in inputs.values() for l in layers))

    def read(t, layers):
        return read_layers(spark, store.read_paths(t, layers), _schema(update_schema(t.schema, d)))
    frames = {n: read(t, layers) for n, (t, layers) in inputs.items() if layers}
    actual_frames = {o: read(t, t.layers) for o, t in outputs.items() if t.layers}

    if at:
        for t in at:
            if len(t) != d:
                raise PipelineError(f"time {format_time(t)} has {len(t)} coordinate(s); pipeline {p.name!r} has {d}")
            if frontier.beyond(t):
                raise PipelineError(f"time {format_time(t)} is not complete yet (the pipeline's frontier is {format_frontier(frontier)})")
            if not _beyond_all(t, sinces):
                raise PipelineError(f"time {format_time(t)} is not beyond the since of every input and output; "
                                    f"their history before it is compacted")
        times = sorted(set(at))
    else:
        say("finding the times the inputs and outputs tell apart")
        times = _default_times(list(frames.values()) + list(actual_frames.values()), d, frontier, sinces, max_times)
    result = VerifyResult(p.name, times)
    if not times:
        return result

    tcols = time_columns(d)
    tdf = F.broadcast(spark.createDataFrame(pa.table({AT: list(range(len(times))),
                                                      **{f"_at_{c}": [t[i] for t in times] for i, c in enumerate(tcols)}})))

    def accumulate(df, data_cols):
        """The collection at every checked time: (_at, data columns, _m)."""
        cond = None
        for c in tcols:
            x = F.col(c) <= F.col(f"_at_{c}")
            cond = x if cond is None else cond & x
        return consolidated(df.join(tdf, cond).select(AT, *data_cols, F.col("diff").alias(M)))

    empty = {n: spark.createDataFrame([], _schema(pa.schema([pa.field(AT, pa.int64())] + list(t.schema)
                                                              + [pa.field(M, pa.int64())])))
             for n, (t, _) in inputs.items()}
    sources = {n: accumulate(frames[n], inputs[n][0].data_columns) if n in frames else empty[n] for n in inputs}
    oracle = Oracle(spark, p, sources, checked=tdf)

    for out, node in p.outputs.items():
        say(f"checking output {out} at {len(times)} time{'s' if len(times) != 1 else ''}: the pipeline from "
            f"scratch against the trace")
        expected = oracle.output(node)
        trace = outputs.get(out)
        data_cols = trace.data_columns if trace else [c for c in expected.columns if c not in (AT, M)]
        parts = [expected.select(AT, *data_cols, F.col(M).alias("_expected"), F.lit(0).cast("long").alias("_found"))]
        if out in actual_frames:
            actual = accumulate(actual_frames[out], data_cols)
            parts.append(actual.select(AT, *data_cols, F.lit(0).cast("long").alias("_expected"), F.col(M).alias("_found")))
        both = parts[0]
        for x in parts[1:]:
            both = both.unionByName(x)
        bad = _paired_within_tolerance(_differing(both, data_cols), data_cols).orderBy(AT, *data_cols).limit(5).collect()
        for r in bad:
            result.differences.append(Difference(out, times[r[AT]], {c: r[c] for c in data_cols}, r["_expected"], r["_found"]))
    result.differences.sort(key=lambda x: x.time)
    return result


def _differing(rows, data_cols: list[str]):
    """The rows (``AT``, data columns) whose expected and found counts differ, with both."""
    return (rows.groupBy(AT, *data_cols).agg(F.sum("_expected").alias("_expected"), F.sum("_found").alias("_found"))
            .filter("_expected != _found"))


def _paired_within_tolerance(diffs, data_cols: list[str]):
    """``diffs`` (:func:`_differing`) with each row found too often paired with a row found
    too rarely at the same time that equals it elsewhere and whose floating-point values
    are within :data:`TOLERANCE` (the least such row, so the choice is deterministic): it
    takes that row's values, and the rows differing only in their last bits cancel. Only
    the differing rows are compared, so a check that finds none costs nothing more."""
    types = dict(diffs.dtypes)
    floats = [c for c in data_cols if types[c] in ("double", "float")]
    if not floats:
        return diffs
    exact = [AT] + [c for c in data_cols if c not in floats]
    extra = diffs.filter(F.col("_found") > F.col("_expected"))
    missing = diffs.filter(F.col("_found") < F.col("_expected"))
    e = missing.select(*[F.col(c).alias(f"_e{c}") for c in exact + floats])
    cond = None
    for c in exact:
        x = F.col(c).eqNullSafe(F.col(f"_e{c}"))
        cond = x if cond is None else cond & x
    for c in floats:
        v, w = F.col(c), F.col(f"_e{c}")
        close = (F.abs(v - w) <= F.lit(TOLERANCE) * F.greatest(F.abs(v), F.abs(w))) | v.eqNullSafe(w)
        cond = cond & F.coalesce(close, F.lit(False))
    rows = [AT, *data_cols]
    best = extra.select(*rows).join(e, cond).groupBy(*rows) \
        .agg(F.min(F.struct(*[F.col(f"_e{c}") for c in floats])).alias("_best"))
    best = best.select(*[F.col(c).alias(f"_b{c}") for c in rows], "_best")
    same = None
    for c in rows:
        x = F.col(c).eqNullSafe(F.col(f"_b{c}"))
        same = x if same is None else same & x
    snapped = extra.join(best, same, "left").select(
        *[F.coalesce(F.col(f"_best._e{c}"), F.col(c)).alias(c) if c in floats else F.col(c) for c in rows],
        "_expected", "_found")
    return _differing(snapped.unionByName(missing), data_cols)


def _default_times(frames: list, d: int, frontier: Frontier, sinces: list[Frontier],
                   max_times: int | None) -> list[Time]:
    """Every time an output can tell apart: the grid of the time coordinates of the inputs
    and the outputs (for ``d = 1``: every distinct time), within the frontier and beyond
    every since. ``max_times`` keeps an even sample of them, the last one included."""
    tcols = time_columns(d)
    values: list[set[int]] = [set() for _ in range(d)]
    for df in frames:
        rows = df.select(*tcols).distinct().toArrow()
        for i, c in enumerate(tcols):
            values[i].update(rows.column(c).to_pylist())
    for f in sinces:  # times advanced to a since are represented by the since itself
        for t in f:
            for i in range(d):
                values[i].add(t[i])
    grid = [t for t in itertools.product(*[sorted(v) for v in values])
            if not frontier.beyond(t) and _beyond_all(t, sinces)]
    if max_times is not None and len(grid) > max_times:
        step = len(grid) / max_times
        grid = sorted({grid[int(i * step)] for i in range(max_times)} | {grid[-1]})
    return grid


def _schema(arrow_schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(arrow_schema)
