"""An independent oracle for ``ddcli verify``: a pipeline's graph evaluated from scratch
with plain Spark DataFrame operations.

``ddcli run`` turns changes into changes (ops/run/evaluate.py, the reducers, the join and
iterate drivers). A bug in that code would be invisible to a check that reuses it, so
this module shares nothing with it but the pipeline's graph (ops/dataflow/graph.py): each node
is evaluated on *collections* — rows with a multiplicity, one collection per checked
time, told apart by the column ``_at`` — with joins, group-bys, window functions and a
plain driver loop for fixed points. It follows the model's definitions (docs/architecture.md), not the engine:

* a collection is consolidated: one row per distinct (``_at``, data) with a non-zero
  multiplicity ``_m``;
* ``join`` multiplies multiplicities of rows with equal keys: SQL's ``=``, so a null key
  matches nothing, or Spark's ``<=>`` when the join says ``nulls_equal``; ``semijoin``
  multiplies by the key's multiplicity on the right;
* ``reduce``: for every key whose accumulated input is non-empty, the key's output rows
  are ``f(input rows of the key)``, each once unless ``f`` says otherwise (an ``agg``
  with ``when_empty``, SQL's aggregate without GROUP BY, has its row at every time);
* ``iterate``: ``x0 = input``, ``x(i+1) = body(x(i))`` until a round changes nothing.
  Priorities (``enter_at``, ``iterate(priority=…)``) only order the arrival of records;
  once every priority is past, a prioritized loop that stops is at a fixed point of the
  same body, so it is checked against the plain fixed point. (A body whose fixed point
  depends on the order of arrival would be reported as differing: priorities are meant
  for monotone bodies, see ops/loops/priority.py.)

Operators whose value at a time depends on *when* their input changed, not only on what
it holds then (``differentiate``, ``as_of_join``, ...), cannot be checked this way and
are refused in one line, as is any operator this module does not know yet.
"""

from __future__ import annotations

from types import SimpleNamespace

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node
from ops.dataflow.windows import WindowFunction, value_frame
from ops.errors import PipelineError

AT = "_at"  # which checked time a row belongs to
M = "_m"  # the row's multiplicity in the collection at that time

# depend on the history of their inputs, not on the inputs accumulated at one time
TIME_DEPENDENT = {"differentiate": "a differentiated collection (differentiate)",
                  "as_of_pending": "an as-of join (as_of_join)", "as_of_join": "an as-of join (as_of_join)"}
KNOWN = {"input", "output", "arrange", "consolidate", "integrate", "moments", "select", "filter", "flat_map", "concat", "negate",
         "join", "semijoin", "reduce", "distinct", "threshold", "loop", "variable", "enter", "leave",
         "delta_join"}
REDUCERS = {"Count", "Sum", "Min", "Max", "CountDistinct", "TopK", "PerKey", "Agg", "Window"}


def check_supported(p: Pipeline) -> None:
    """Refuse, before any Spark work, a pipeline the oracle cannot evaluate."""
    for n in p.nodes:
        if n.op in TIME_DEPENDENT:
            raise PipelineError(f"{n.describe()}: verify cannot recompute {TIME_DEPENDENT[n.op]} from "
                                f"scratch: it depends on when its input changed, not only on what it holds")
        if n.op not in KNOWN:
            raise PipelineError(f"{n.describe()}: verify does not support {n.op} yet")
        if n.op == "reduce" and type(n.args["reducer"]).__name__ not in REDUCERS:
            raise PipelineError(f"{n.describe()}: verify does not support the reducer "
                                f"{type(n.args['reducer']).__name__} yet")
        if n.op == "reduce" and any(isinstance(f, WindowFunction) and value_frame(f.frame)
                                    for f in getattr(n.args["reducer"], "functions", {}).values()):
            raise PipelineError(f"{n.describe()}: verify does not support RANGE frames with an offset yet "
                                f"(n PRECEDING / m FOLLOWING by value)")
        if n.op == "loop" or n.op == "variable":
            extra = set(n.args) - {"max_rounds", "scope", "result", "priority", "partition_by"}
            if extra:
                raise PipelineError(f"{n.describe()}: verify does not support {n.op} with "
                                    f"{', '.join(sorted(extra))} yet")


def data_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c not in (AT, M)]


def consolidated(df: DataFrame) -> DataFrame:
    """One row per (time, data), multiplicities summed, zeros dropped."""
    cols = data_columns(df)
    return (df.groupBy(AT, *cols).agg(F.sum(M).alias(M)).filter(F.col(M) != 0)
            .select(AT, *cols, M))


def _expr(e):
    return F.expr(e) if isinstance(e, str) else e


def _same_keys(keys: list[str], nulls_equal: bool = False):
    """The join condition of a row and a partner whose columns are renamed ``_r...``."""
    cond = F.col(AT) == F.col(f"_r{AT}")
    for k in keys:
        cond = cond & (F.col(k).eqNullSafe(F.col(f"_r{k}")) if nulls_equal else F.col(k) == F.col(f"_r{k}"))
    return cond


class Oracle:
    """Evaluates a pipeline's nodes on collections; ``inputs`` maps each input trace to its
    collection at every checked time (``_at``, data columns, ``_m``)."""

    def __init__(self, spark, p: Pipeline, inputs: dict[str, DataFrame], checked: DataFrame | None = None):
        self.spark, self.p, self.inputs = spark, p, inputs
        self.checked = checked  # every checked time (``_at``): where a global aggregate has its row

    def output(self, node: Node) -> DataFrame:
        return consolidated(self.value(node, {}))

    # ------------------------------------------------------------ one node

    def value(self, n: Node, env: dict[int, DataFrame]) -> DataFrame:
        """The collection of ``n``; ``env`` holds what is known in the current scope
        (inside a loop: the variables' current values)."""
        if n.id not in env:
            env[n.id] = self._evaluate(n, env)
        return env[n.id]

    def _evaluate(self, n: Node, env: dict) -> DataFrame:
        a = n.args
        if n.op == "input":
            return self.inputs[a["trace"]]
        if n.op == "leave":
            loop, inner = n.inputs
            return self.value(inner, self._fixed_point(loop, env))
        if n.op == "delta_join":
            return self._delta_join(n, [self.value(i, env) for i in n.inputs])
        ins = [self.value(i, env) for i in n.inputs]
        if n.op in ("output", "arrange", "enter", "integrate", "moments"):
            # moment time tells changes apart, not collections: without differentiate (refused),
            # bringing a collection into moment time and back leaves it as it is
            return ins[0]
        if n.op == "consolidate":
            return consolidated(ins[0])
        if n.op == "select":
            cols = [F.col(c) if isinstance(c, str) else c for c in a["columns"]]
            cols += [_expr(e).alias(name) for name, e in a["exprs"].items()]
            return ins[0].select(AT, *cols, M)
        if n.op == "filter":
            return ins[0].filter(_expr(a["condition"]))
        if n.op == "flat_map":
            keep = a["keep"] if a["keep"] is not None else [c for c in data_columns(ins[0]) if c != a["column"]]
            return ins[0].select(AT, *keep, F.explode(_expr(a["expr"])).alias(a["column"]), M)
        if n.op == "concat":
            out = ins[0]
            for other in ins[1:]:
                out = out.unionByName(other.select(*out.columns))
            return out
        if n.op == "negate":
            return ins[0].withColumn(M, -F.col(M))
        if n.op == "join":
            return self._join(ins[0], ins[1], a["on"], a.get("nulls_equal", False))
        if n.op == "semijoin":
            return self._semijoin(ins[0], ins[1], a["on"], a.get("nulls_equal", False))
        if n.op == "distinct":
            df = consolidated(ins[0]).filter(F.col(M) > 0)
            return df.withColumn(M, F.lit(1).cast("long"))
        if n.op == "threshold":
            return self._threshold(consolidated(ins[0]), a["fn"])
        if n.op == "reduce":
            return self._reduce(n, consolidated(ins[0]), list(a["key"]), a["reducer"])
        raise PipelineError(f"{n.describe()}: verify does not support {n.op} yet")

    # ------------------------------------------------------------ joins

    def _join(self, left: DataFrame, right: DataFrame, on: list[str], nulls_equal: bool) -> DataFrame:
        left, right = consolidated(left), consolidated(right)
        lrest = [c for c in data_columns(left) if c not in on]
        rrest = [c for c in data_columns(right) if c not in on]
        r = right.select(*[F.col(c).alias(f"_r{c}") for c in right.columns])
        j = left.join(r, _same_keys(on, nulls_equal), "inner")
        return j.select(AT, *on, *lrest, *[F.col(f"_r{c}").alias(c) for c in rrest],
                        (F.col(M) * F.col(f"_r{M}")).alias(M))

    def _semijoin(self, left: DataFrame, right: DataFrame, on: list[str], nulls_equal: bool) -> DataFrame:
        keys = consolidated(right.select(AT, *on, M))
        r = keys.select(*[F.col(c).alias(f"_r{c}") for c in keys.columns])
        j = consolidated(left).join(r, _same_keys(on, nulls_equal), "inner")
        return j.select(AT, *data_columns(left), (F.col(M) * F.col(f"_r{M}")).alias(M))

    def _delta_join(self, n: Node, frames: list[DataFrame]) -> DataFrame:
        """The natural join of the relations on their shared variables."""
        out, variables = None, []
        for i, (frame, (kind, spec)) in enumerate(zip(frames, n.args["relations"])):
            cols = data_columns(frame)
            if kind == "all":
                mapping = {c: c for c in cols}
            elif kind == "positional":
                mapping = dict(zip(spec, cols))
            else:
                mapping = dict(spec)
            rel = consolidated(frame.select(AT, *[F.col(c).alias(v) for v, c in mapping.items()], M))
            if out is None:
                out, variables = rel, list(mapping)
                continue
            shared = [v for v in mapping if v in variables]
            r = rel.select(*[F.col(c).alias(f"_r{c}") for c in rel.columns])
            new = [v for v in mapping if v not in variables]
            out = out.join(r, _same_keys(shared), "inner").select(AT, *variables, *[F.col(f"_r{v}").alias(v) for v in new],
                                                    (F.col(M) * F.col(f"_r{M}")).alias(M))
            variables += new
        return out

    # ------------------------------------------------------------ reductions

    def _threshold(self, df: DataFrame, fn) -> DataFrame:
        import numpy as np
        import pyarrow as pa

        cols = df.columns
        schema = df.schema

        def apply(batches):
            for b in batches:
                m = np.asarray(fn(b.column(M).to_numpy(zero_copy_only=False))).astype(np.int64).reshape(-1)
                t = pa.Table.from_batches([b]).set_column(cols.index(M), M, pa.array(m, pa.int64()))
                yield from t.filter(pa.array(m != 0)).to_batches()
        return df.mapInArrow(apply, schema)

    def _sum(self, df: DataFrame, group: list, reducer, *also) -> DataFrame:
        """A sum: long for integers, double for floats, decimal(38, s) for decimals. A
        decimal times the multiplicity keeps its scale (no precision given up for digits
        the product cannot have): the setting is read when the expression is typed."""
        t = dict(df.dtypes)[reducer.col]
        decimal = t.startswith("decimal")
        out_t = f"decimal(38,{t.split(',')[1]}" if decimal else "double" if t in ("float", "double") else "long"
        conf, key = self.spark.conf, "spark.sql.decimalOperations.allowPrecisionLoss"
        before = conf.get(key)
        if decimal:
            conf.set(key, "false")
        try:
            m = F.col(M).cast("decimal(19,0)") if decimal else F.col(M)
            v = F.coalesce(F.col(reducer.col).cast(out_t), F.lit(0).cast(out_t)) * m
            return df.groupBy(*group).agg(F.sum(v).cast(out_t).alias(reducer.name), *also)
        finally:
            conf.set(key, before)

    def _reduce(self, n: Node, df: DataFrame, key: list[str], reducer) -> DataFrame:
        kind = type(reducer).__name__
        group = [AT, *key]
        values = [c for c in data_columns(df) if c not in key]
        one = F.lit(1).cast("long").alias(M)
        if kind == "Count":
            return df.groupBy(*group).agg(F.sum(M).alias(reducer.name)).select(*group, reducer.name, one)
        if kind == "Sum":
            return self._sum(df, group, reducer).select(*group, reducer.name, one)
        present = df.filter(F.col(M) > 0)
        if kind in ("Min", "Max"):
            agg = F.min if kind == "Min" else F.max
            return present.groupBy(*group).agg(agg(reducer.col).alias(reducer.name)).select(*group, reducer.name, one)
        if kind == "CountDistinct":
            return present.groupBy(*group).agg(F.count(F.lit(1)).cast("long").alias(reducer.name)) \
                .select(*group, reducer.name, one)
        if kind == "TopK":
            order = [F.col(c).desc_nulls_last() if d == "descending" else F.col(c).asc_nulls_last()
                     for c, d in zip(reducer.order_by, reducer.directions)]
            order += [F.col(c).asc_nulls_last() for c in values if c not in reducer.order_by]
            w = Window.partitionBy(*group).orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
            before = F.coalesce(F.sum(M).over(w), F.lit(0))
            m = F.least(F.col(M), F.greatest(F.lit(reducer.k) - before, F.lit(0)))
            return present.withColumn(M, m.cast("long")).filter(F.col(M) > 0)
        if kind == "Agg":
            out = self._agg(df, group, reducer).select(*group, *reducer.components, one)
            if reducer.when_empty and self.checked is not None:  # SQL's one row of an empty input too
                types = dict(out.dtypes)
                absent = self.checked.select(AT).join(out.select(AT), AT, "left_anti")
                out = out.unionByName(absent.select(AT, *[F.lit(v).cast(types[c]).alias(c)
                                                          for c, v in reducer.empty_row().items()], one))
            return out
        if kind == "Window":
            return self._window(present, group, values, reducer)
        if kind == "PerKey":
            return self._per_key(present_or_all=df, group=group, values=values, fn=reducer.fn,
                                 declared=getattr(reducer, "schema", None))
        raise PipelineError(f"{n.describe()}: verify does not support the reducer {kind} yet")

    def _agg(self, df: DataFrame, group: list[str], reducer) -> DataFrame:
        """Each component by a group-by of its own (SQL's aggregates over the rows whose
        column is not null, multiplicities as weights), left-joined to every key present;
        a sum as :meth:`_sum` computes it, an average that sum as a double over the count."""
        out = df.select(*group).distinct()
        for name, (kind, col) in reducer.components.items():
            rows = df if col is None else df.filter(F.col(col).isNotNull())
            present = rows.filter(F.col(M) > 0)
            if kind in ("sum", "avg"):
                part = self._sum(rows, group, SimpleNamespace(col=col, name=name), F.sum(M).alias("_n"))
                if kind == "avg":
                    part = part.select(*group, F.when(F.col("_n") != 0, F.col(name).cast("double")
                                                      / F.col("_n").cast("double")).alias(name))
                part, fill = part.select(*group, name), None
            else:
                if kind == "count":
                    value, fill = F.sum(M), 0
                elif kind == "count_distinct":
                    value, fill, rows = F.countDistinct(col), 0, present
                else:
                    value, fill, rows = (F.min if kind == "min" else F.max)(col), None, present
                part = rows.groupBy(*group).agg(value.alias(name))
            part = part.select(*[F.col(c).alias(f"_p{c}") for c in group], name)
            cond = None
            for c in group:
                eq = F.col(c).eqNullSafe(F.col(f"_p{c}"))
                cond = eq if cond is None else cond & eq
            out = out.join(part, cond, "left").drop(*[f"_p{c}" for c in group])
            if fill is not None:
                out = out.withColumn(name, F.coalesce(F.col(name), F.lit(fill).cast("long")))
        return out

    def _window(self, present: DataFrame, group: list[str], values: list[str], reducer) -> DataFrame:
        """Every row present, once per unit of its multiplicity, with Spark's window functions
        over its key's rows: nulls last in either direction, rows tied in the order by the
        other columns ascending (``row_number``, ``lag``, ``lead``, ROWS frames), a RANGE
        frame to the current row's last peer, sums of decimals as decimal(38, s)."""
        rows = present.withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col(M)))).drop("_copy", M)
        order = [F.col(c).desc_nulls_last() if d == "descending" else F.col(c).asc_nulls_last()
                 for c, d in zip(reducer.order_by, reducer.directions)]
        full = order + [F.col(c).asc_nulls_last() for c in values if c not in reducer.order_by]
        part = Window.partitionBy(*group)
        peers, by_row = (part.orderBy(*order) if order else part), part.orderBy(*full)
        types = dict(rows.dtypes)
        new = []
        for name, f in reducer.functions.items():
            if f.kind == "row_number":
                value = F.row_number().over(by_row)
            elif f.kind in ("rank", "dense_rank"):
                fn = F.rank() if f.kind == "rank" else F.dense_rank()
                value = fn.over(peers) if order else F.lit(1)
            elif f.kind in ("lag", "lead"):
                shift = F.lag if f.kind == "lag" else F.lead
                value = shift(f.column, f.offset).over(by_row)
                if f.default is not None:  # where no row is that far: not a null value's row
                    value = F.when(shift(F.lit(1), f.offset).over(by_row).isNull(),
                                   F.lit(f.default).cast(types[f.column])).otherwise(value)
            else:
                frame = _spark_frame(f.frame, part, peers, by_row, bool(order))
                t = types.get(f.column, "")
                if f.kind == "count":
                    value = F.count(F.lit(1) if f.column is None else F.col(f.column)).over(frame)
                elif f.kind == "avg":
                    value = F.avg(F.col(f.column).cast("double")).over(frame)
                else:
                    out_t = f"decimal(38,{t.split(',')[1]}" if t.startswith("decimal") else \
                        "double" if t in ("float", "double") else "long"
                    value = F.sum(F.col(f.column).cast(out_t)).over(frame).cast(out_t)
            new.append(value.cast("long").alias(name) if f.kind in ("row_number", "rank", "dense_rank", "count")
                       else value.alias(name))
        return consolidated(rows.select(*group, *values, *new, F.lit(1).cast("long").alias(M)))

    def _per_key(self, present_or_all: DataFrame, group: list[str], values: list[str], fn, declared) -> DataFrame:
        """The user's function on each key's rows (its value columns plus ``_count``)."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        from ops.spark.arrow_types import arrow_schema

        df = present_or_all
        in_schema = arrow_schema(df.select(*values).schema)
        if declared is not None:
            out_fields = list(pa.schema(declared))
        else:
            probe = pa.schema(list(in_schema) + [pa.field("_count", pa.int64())]).empty_table()
            out_fields = [f for f in fn(probe).schema if f.name != "_count"]
        key_fields = list(arrow_schema(df.select(*group).schema))
        result = pa.schema(key_fields + out_fields + [pa.field(M, pa.int64())])

        def per_group(table: pa.Table) -> pa.Table:
            rows = table.select(values + [M]).rename_columns(values + ["_count"])
            res = fn(rows)
            n = res.num_rows
            cnt = res.column("_count").cast(pa.int64()) if "_count" in res.column_names else pa.array([1] * n, pa.int64())
            cols = {f.name: pa.array([table.column(f.name)[0].as_py()] * n, f.type) for f in key_fields}
            cols.update({f.name: res.column(f.name).cast(f.type) for f in out_fields})
            cols[M] = cnt
            return pa.table(cols, schema=result)
        return df.groupBy(*group).applyInArrow(per_group, from_arrow_schema(result))

    # ------------------------------------------------------------ loops

    def _fixed_point(self, loop: Node, outer: dict) -> dict:
        """The environment of ``loop``'s scope at its fixed point: a plain driver loop,
        every variable's next value computed from the current ones, until none changes."""
        key = ("fixed", loop.id)
        if key in outer:
            return outer[key]
        scope = loop.args["scope"]
        base = dict(outer)
        # checkpoints made by the job that compares the rounds: one Spark job a round
        current = {v.id: consolidated(self.value(v.inputs[0], base)).localCheckpoint(eager=False)
                   for v in scope.variables}
        for _ in range(loop.args["max_rounds"]):
            env = dict(base)
            env.update(current)
            nxt = {v.id: consolidated(self.value(v.args["result"], env)).localCheckpoint(eager=False)
                   for v in scope.variables}
            changed = _differs([(current[i], nxt[i]) for i in current])
            current = nxt
            if not changed:
                env = dict(base)
                env.update(current)
                outer[key] = env
                return env
        raise PipelineError(f"{loop.describe()}: verify found no fixed point in {loop.args['max_rounds']} rounds")


def _differs(pairs: list[tuple[DataFrame, DataFrame]]) -> bool:
    """Whether any pair of collections differs, in one job that reads every partition of
    each (so that job also makes their lazy checkpoints)."""
    diffs = [consolidated(a.unionByName(b.withColumn(M, -F.col(M)).select(*a.columns))).select(F.lit(1).alias("d"))
             for a, b in pairs]
    out = diffs[0]
    for d in diffs[1:]:
        out = out.union(d)
    return out.count() > 0


def _spark_frame(frame, part, peers, by_row, ordered: bool):
    """A window function's frame as a Spark window: ROWS over ``by_row``, RANGE over
    ``peers`` (without an order every row is a peer: the whole partition)."""
    lo = Window.unboundedPreceding if frame.preceding is None else -frame.preceding
    hi = Window.unboundedFollowing if frame.following is None else frame.following
    if frame.unit == "rows":
        return by_row.rowsBetween(lo, hi)
    if not ordered:
        return part.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    return peers.rangeBetween(lo, hi)
