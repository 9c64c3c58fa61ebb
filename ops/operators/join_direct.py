"""A join whose sides are the run's inputs, in tasks that read their key ranges from the
layer files and write the outputs' layers themselves.

The general join (``ops/operators/join.py``) builds both sides as DataFrames, shuffles
their rows through the JVM by key and converts them to Arrow and back for the sweep: for a
small run that path's fixed cost (planning the frames, a shuffle, a write job) is most of
the run, and for a large one the rows' trips through the JVM are. When

* both sides are the run's inputs themselves (their new updates are layer files, their old
  ones the inputs' stored layers, which a task looks its keys up in),
* the join's only readers are outputs declared on it that a task may write
  (``ops.run.run.task_writes``: nothing of theirs waits beyond the old frontier), and
* the run has no old updates to look up, or few new ones (at most a task's budget: a task
  that looks up holds its new updates whole),

the join runs as a plain Spark job (``ops/spark/one_task.py``) of one task per range of
the first key column: layers are sorted by key in row groups with key statistics, so a
task reads only its range's row groups (pyarrow filters), sweeps them with their keys'
stored old updates exactly as a join task does (``ops.operators.join_task.join_task``: the
same slices in time of a hot key, the same refusal of a key whose live rows are over a
task's budget) and writes the outputs' files; only the files' names come back. One task
takes a run of at most a task's budget of rows; more take a task per budget, at least one
per core. A task holds up to twice the budget in Arrow and spills the rest (ranges follow
row groups, so they are uneven; a DuckDB spill costs more than the join of a million rows).
Ranges need the first key column to be an integer or a string with statistics in every
file; otherwise a run of at most :func:`direct_rows` runs in one task and a larger one takes
the general join. When the keys do not split (one hot key), the tasks take ranges of the
first time coordinate instead: each reads its keys' rows up to the end of its range, sums
those before it into each row's live multiplicity (the history a hot key's slices carry
from one to the next in ``join_task``) and sweeps its own; the last reads every row, so a
run of more than twice :func:`direct_rows` takes the general join, which spills them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from ops.dataflow.graph import Node
from ops.io.read import layer_table
from ops.io.write import write_table_files
from ops.operators.join_sweep import SIDE, JoinSpec
from ops.operators.join_task import as_side, join_task, live_history
from ops.reduce.budget import task_rows
from ops.spark.one_task import WrittenFiles, run_tasks
from ops.spark.session import slots
from storage.blobs.resolve import read_metadata
from storage.key_ranges import file_keys, files_in_range, range_bounds, range_filter
from storage.layer import update_schema

#: The most tasks one join's job takes: a task per budget of rows up to 10^9 rows (a task's
#: fixed cost is some 40 ms; one over its budget spills to DuckDB, which costs more).
MAX_TASKS = 1024


def direct_rows() -> int:
    """The rows a direct join's task holds in Arrow before the rest spill, and the most new
    updates one task takes when they cannot be split by key: twice a task's budget."""
    return 2 * task_rows()


@dataclass(frozen=True)
class DirectJoin:
    """What the tasks need (pickled to them): the join, each side's new layer files and
    their update schema, each side's stored layer files (``lookup``), the outputs' writes,
    and the key ranges: task ``i`` takes the rows whose ``column`` is in
    ``[bounds[i - 1], bounds[i])`` (the first also nulls, the last no upper bound); or the
    time ranges: the rows whose first time coordinate is in ``[cuts[i - 1], cuts[i])``."""

    spec: JoinSpec
    files: tuple[list[str], list[str]]
    schemas: tuple[pa.Schema, pa.Schema]
    lookup: tuple[list[str], list[str]]
    writes: list[dict]  # ``write_table_files`` arguments, with the trace's name
    budget: int  # a task's budget of rows (``ops/reduce/budget.py``)
    hold: int  # the rows a task holds in Arrow before the rest spill
    column: str | None = None
    bounds: tuple = ()
    cuts: tuple = ()
    reads: tuple = ()  # with ``bounds``: per task, the indices of the files (left's, then right's) it reads
    nulls_equal: bool = False  # a null key matches a null key (else a row with one matches nothing)

    @property
    def tasks(self) -> int:
        return len(self.bounds or self.cuts) + 1


def plan_direct(n: Node, runtime, spark, d: int, delta_rows: int | None, lookup) -> DirectJoin | None:
    """The direct join of ``n`` (top level, in a run), or None when the general one runs:
    see the module's docstring. ``lookup``: each side's stored layer files, or None when
    old updates are not all in them."""
    budget = task_rows()
    if lookup is None or delta_rows is None or (any(lookup) and delta_rows > budget):
        return None
    readers = [m for m in runtime.p.nodes if any(i is n for i in m.inputs)]
    if not readers or n.id in runtime.arranged or ("output", n.id) not in runtime.task_writes \
            or any(m.op != "output" for m in readers) or any(i.op != "input" for i in n.inputs):
        return None
    schemas = runtime.schemas
    on = list(n.args["on"])
    left = tuple(f.name for f in schemas[n.inputs[0].id] if f.name not in on)
    right = () if n.op == "semijoin" else tuple(f.name for f in schemas[n.inputs[1].id] if f.name not in on)
    files = tuple(list(runtime.source_files.get(i.args["trace"], [])) for i in n.inputs)
    job = DirectJoin(JoinSpec(tuple(on), left, right, d), files,
                     tuple(update_schema(schemas[i.id], d) for i in n.inputs), lookup,
                     list(runtime.task_writes[("output", n.id)]), budget, direct_rows(),
                     nulls_equal=n.args.get("nulls_equal", False))
    if delta_rows <= budget:
        return job
    tasks = min(MAX_TASKS, max(slots(spark), -(-delta_rows // budget)))
    keys = file_keys(files[0] + files[1], schemas[n.inputs[0].id].field(on[0]).type, on[0])
    bounds = None if keys is None else range_bounds(keys, tasks)
    if bounds:
        reads = tuple(tuple(files_in_range(keys, bounds, i)) for i in range(len(bounds) + 1))
        return replace(job, column=on[0], bounds=tuple(bounds), reads=reads)
    # one key value: ranges of time, whose last task reads every row (so not too many)
    cuts = time_cuts(files[0] + files[1], job.spec.tcols[0], tasks) \
        if bounds is not None and delta_rows <= 2 * direct_rows() else []
    if cuts:
        return replace(job, cuts=tuple(cuts))
    return job if delta_rows <= direct_rows() else None


def time_cuts(files: list[str], column: str, tasks: int) -> list[int]:
    """Up to ``tasks - 1`` increasing times cutting the span of ``column`` (a time
    coordinate) in ``files`` evenly, from the files' statistics (none without them)."""
    lo = hi = None
    for path in files:
        meta = read_metadata(path)
        index = meta.schema.to_arrow_schema().get_field_index(column)
        if index < 0:
            return []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max:
                return []
            lo = stats.min if lo is None else min(lo, stats.min)
            hi = stats.max if hi is None else max(hi, stats.max)
    if lo is None:
        return []
    return sorted({lo + (hi - lo + 1) * j // tasks for j in range(1, tasks)} - {lo})


def run_direct(spark, job: DirectJoin) -> dict[str, list[dict]]:
    """Run the join's tasks; the layer files they wrote, by trace (``META_SCHEMA`` rows;
    none: the trace has no changes)."""
    files = spark.sparkContext.accumulator([], WrittenFiles())

    def task(i: int) -> None:
        for meta in _joined_and_written(job, i):
            files.add(meta)

    run_tasks(spark, job.tasks, task)
    written: dict[str, list[dict]] = {w["trace"]: [] for w in job.writes}
    for trace, row in files.value:
        written[trace].append(row)
    return written


def task_range(job: DirectJoin, i: int):
    """The filter of task ``i``'s rows (None: every row)."""
    return range_filter(job.column, job.bounds, i) if job.bounds else None


def _joined_and_written(job: DirectJoin, i: int):
    """Inside task ``i``: the join's output changes of its keys (or times) written as each
    output's files; yields the ``(trace, META_SCHEMA row)`` pairs of each file."""
    spec, where = job.spec, task_range(job, i)
    start = job.cuts[i - 1] if i > 0 and job.cuts else None
    end = job.cuts[i] if i < len(job.cuts) else None
    if end is not None:
        where = pc.field(spec.tcols[0]) < end
    if not job.nulls_equal:  # a row with a null key matches nothing (the key is all new updates')
        for k in spec.key:
            where = pc.field(k).is_valid() if where is None else where & pc.field(k).is_valid()
    schema = task_schema(spec, job.schemas)
    paths = [(s, f) for s in (0, 1) for f in job.files[s]]
    if job.reads:  # only the files whose keys meet the task's range
        paths = [paths[j] for j in job.reads[i]]
    tables = [as_side(layer_table(f, job.schemas[s], where), schema, s, new=True) for s, f in paths]
    history = None
    if start is not None:  # the rows before the task's times only as the history they leave
        rows = pa.concat_tables(tables)
        early = pc.less(rows.column(spec.tcols[0]), start)
        tables = [rows.filter(pc.invert(early))]
        history = live_history(rows.filter(early), tables[0], spec, job.budget)
    batches = (b for t in tables for b in t.to_batches())
    out = [b for b in join_task(batches, spec, job.budget, job.lookup, hold=job.hold, history=history)]
    if not out:
        return
    table = pa.Table.from_batches(out)
    for w in job.writes:
        for meta in write_table_files(table, presummed=True, **{k: v for k, v in w.items() if k != "trace"}):
            yield [(w["trace"], row) for row in meta.to_pylist()]


def task_schema(spec: JoinSpec, schemas: tuple[pa.Schema, pa.Schema]) -> pa.Schema:
    """A join task's input rows: key, left columns, right columns, times, diff, newness, side
    (as ``ops.operators.join.sweep_pairs`` builds them)."""
    left, right = schemas
    fields = [left.field(c) for c in (*spec.key, *spec.left)] + [right.field(c) for c in spec.right]
    fields += [pa.field(t, pa.int64()) for t in spec.tcols]
    return pa.schema(fields + [pa.field("diff", pa.int64()), pa.field("_new", pa.bool_()), pa.field(SIDE, pa.int8())])
