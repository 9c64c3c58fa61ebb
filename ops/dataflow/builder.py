"""The pipeline API: a builder that declares inputs, operators and named outputs.

A pipeline file defines ``def pipeline(p):`` and uses the builder ``p``::

    def pipeline(p):
        words = p.input("words")
        p.output("counts", words.count(by="word"))

Declaring builds a graph of :class:`Node` values; nothing runs until ``ddcli run`` (or
``verify``) executes the graph on Spark. Operators work on named columns; expressions
are Spark column expressions or SQL expression strings, evaluated inside Spark.
Each node remembers the line of the pipeline file that declared it, for error messages.
"""

from __future__ import annotations

from typing import Callable

from ops.dataflow.calculus import MOMENTS, ORDINARY, domain, require_domain
from ops.dataflow.graph import Node, column_list, declared_at
from ops.dataflow.outer_joins import aligned, outer_join
from ops.dataflow.reducers import Agg, Count, CountDistinct, Max, Min, PerKey, Reducer, Sum, TopK, sort_directions
from ops.dataflow.window_reducer import Window
from ops.errors import PipelineError
from storage.state.trace import NAME_RE


class Collection:
    """A collection that changes over time: the result of an operator in a pipeline."""

    def __init__(self, builder: "Pipeline", node: Node):
        self._p = builder
        self.node = node

    @property
    def scope(self) -> "Scope | None":
        return self.node.scope

    def _new(self, op: str, inputs: list["Collection"], **args) -> "Collection":
        for c in inputs:
            if not isinstance(c, Collection) or c._p is not self._p:
                raise PipelineError(f"{op} ({declared_at()}): expects a collection of this pipeline, got {c!r}")
        scope = _innermost([c.scope for c in inputs], op)
        nodes = [scope.enter(c).node if scope is not None and c.scope is not scope else c.node for c in inputs]
        return self._p._add(op, nodes, args, scope)

    # ---- linear operators (no state)
    def select(self, *columns, **exprs) -> "Collection":
        """Keep/compute columns: ``select("a", b="a + 1")`` (strings are SQL expressions)."""
        if not columns and not exprs:
            raise PipelineError(f"select ({declared_at()}): give at least one column")
        for c in columns:
            _expression("select", c, "a column")
        for name, e in exprs.items():
            _expression("select", e, f"column {name!r}")
        return self._new("select", [self], columns=list(columns), exprs=dict(exprs))

    map = select

    def filter(self, condition) -> "Collection":
        """Keep rows where the SQL expression (or Spark column) is true."""
        return self._new("filter", [self], condition=_expression("filter", condition, "the condition"))

    def flat_map(self, column: str, expr, keep: list[str] | None = None) -> "Collection":
        """One row per element of the array ``expr``, named ``column`` (explode).

        ``keep`` lists the columns carried along (default: all others)."""
        return self._new("flat_map", [self], column=_name("flat_map", column, "column"),
                         expr=_expression("flat_map", expr, "the array"),
                         keep=None if keep is None else _names("flat_map", keep, "keep"))

    def concat(self, *others: "Collection") -> "Collection":
        """The sum of this collection and ``others`` (same columns): multiplicities add."""
        return self._new("concat", [self, *others])

    def negate(self) -> "Collection":
        """Every multiplicity negated: ``c.concat(d.negate())`` is ``c - d``."""
        return self._new("negate", [self])

    def consolidate(self) -> "Collection":
        """Updates of equal (row, time) summed and zeros dropped (the same collection, fewer updates)."""
        return self._new("consolidate", [self])

    # ---- join family
    def join(self, other: "Collection", on, *, nulls_equal: bool = False) -> "Collection":
        """Inner join on key columns: diffs multiply, times join. As in SQL, a row with a
        null in any key column matches nothing; ``nulls_equal=True`` matches null with null
        (SQL's ``IS NOT DISTINCT FROM``). A key named differently on each side is a pair:
        ``on=[("c_custkey", "o_custkey")]`` (the output keeps the left name)."""
        other, on = self._keyed("join", other, on)
        return self._new("join", [self, other], **_join_args("join", on, nulls_equal))

    def semijoin(self, other: "Collection", on, *, nulls_equal: bool = False) -> "Collection":
        """Rows of ``self`` whose key is in ``other`` (multiplied by its multiplicity there);
        a null key is in nothing unless ``nulls_equal=True`` (as in ``join``)."""
        other, on = self._keyed("semijoin", other, on)
        return self._new("semijoin", [self, other], **_join_args("semijoin", on, nulls_equal))

    def left_join(self, other: "Collection", on) -> "Collection":
        """SQL's LEFT OUTER JOIN: the inner join, plus every row of ``self`` whose key
        ``other`` does not hold, with ``other``'s columns null (ops/dataflow/outer_joins.py)."""
        return outer_join(self, other, on, "left")

    def right_join(self, other: "Collection", on) -> "Collection":
        """SQL's RIGHT OUTER JOIN: ``other``'s unmatched rows kept, ``self``'s columns null."""
        return outer_join(self, other, on, "right")

    def full_join(self, other: "Collection", on) -> "Collection":
        """SQL's FULL OUTER JOIN: the unmatched rows of both sides, padded with nulls."""
        return outer_join(self, other, on, "full")

    def _keyed(self, op: str, other, on):
        """``other`` and ``on`` with key pairs resolved: the right side's keys renamed."""
        if isinstance(other, Collection) and (isinstance(on, tuple) or (isinstance(on, list) and any(
                isinstance(x, tuple) for x in on))):
            return aligned(op, self, other, on)
        return other, on

    def antijoin(self, other: "Collection", on, *, nulls_equal: bool = False) -> "Collection":
        """Rows of ``self`` whose key is not in ``other``: ``self - self.semijoin(other)``, so
        a row with a null key stays (SQL's ``NOT EXISTS``) unless ``nulls_equal=True``."""
        return self.concat(self.semijoin(other, on, nulls_equal=nulls_equal).negate())

    # ---- reduce family
    def reduce(self, by, reducer: Reducer) -> "Collection":
        """Per key: output ``reducer(input accumulated at t)`` at every time where it changes
        (``by=[]`` or None: the whole collection as one group)."""
        if not isinstance(reducer, Reducer):
            raise PipelineError(f"reduce ({declared_at()}): expects a reducer (Count(), Sum(col), ...), got {reducer!r}")
        key = [] if by is None else _names("reduce", by, "by")
        if getattr(reducer, "when_empty", False) and (key or self.scope is not None):
            raise PipelineError(f"reduce ({declared_at()}): when_empty=True gives the row of an empty input to a "
                                f"reduce over no key (by=[]) outside loops only")
        return self._new("reduce", [self], key=key, reducer=reducer)

    def agg(self, by, **aggregates) -> "Collection":
        """Per key, several aggregates in one reduce: ``agg("k", n=count(), total=sum("x"),
        mean=avg("x"), low=min("y"), kinds=count_distinct("z"))`` (ops/dataflow/aggregates.py;
        SQL's null rules, :class:`~ops.dataflow.reducers.Agg`). One output row per key."""
        try:
            reducer = Agg(aggregates)
        except ValueError as e:
            raise PipelineError(f"agg ({declared_at()}): {e}") from None
        return self.reduce(by, reducer)

    def count(self, by) -> "Collection":
        """Per key (``by``: a column or a list): the number of rows present, column ``count``."""
        return self.reduce(by, Count())

    def sum(self, by, column: str, name: str | None = None) -> "Collection":
        """Per key: the sum of ``column`` (times multiplicity), named ``name`` (default ``sum``)."""
        return self.reduce(by, Sum(_name("sum", column, "column"), name=name))

    def min(self, by, column: str, name: str | None = None) -> "Collection":
        """Per key: the smallest value of ``column``, named ``name`` (default ``min``)."""
        return self.reduce(by, Min(_name("min", column, "column"), name=name))

    def max(self, by, column: str, name: str | None = None) -> "Collection":
        """Per key: the largest value of ``column``, named ``name`` (default ``max``)."""
        return self.reduce(by, Max(_name("max", column, "column"), name=name))

    def count_distinct(self, by, name: str = "distinct") -> "Collection":
        """Per key: the number of distinct rows present, named ``name``."""
        return self.reduce(by, CountDistinct(name=name))

    def avg(self, by, column: str, name: str | None = None) -> "Collection":
        """Per key: the mean of ``column`` over the rows present (nulls left out), a double
        named ``name`` (default ``avg``); NULL for a key with no value (all null, or values
        whose multiplicities cancel), as SQL's AVG. Built as the sum of the values and the
        sum of a not-null mark, joined by key (a null key too: a group, as in GROUP BY)."""
        keys = _names("avg", by, "by")
        column = _name("avg", column, "column")
        name = name or "avg"
        marked = self.select(*keys, column, __avg_n=f"CASE WHEN `{column}` IS NULL THEN 0 ELSE 1 END")
        total = marked.sum(keys, column, name="__avg_sum")
        n = marked.sum(keys, "__avg_n", name="__avg_n")
        joined = total.join(n, on=keys, nulls_equal=True)
        return joined.select(*keys, **{name: "try_divide(CAST(__avg_sum AS DOUBLE), __avg_n)"})

    def mean(self, by, column: str, name: str | None = None) -> "Collection":
        """The same as :meth:`avg` (default name ``mean``)."""
        return self.avg(by, column, name=name or "mean")

    def distinct(self) -> "Collection":
        """Every row present (positive multiplicity) once."""
        return self._new("distinct", [self])

    def threshold(self, fn: Callable) -> "Collection":
        """Every row with multiplicity ``fn(count)`` (``fn`` vectorised over numpy arrays)."""
        return self._new("threshold", [self], fn=_function("threshold", fn))

    def top_k(self, by, k: int, order_by, descending: bool | list[bool] = False) -> "Collection":
        """Per key (``by=[]``: over the whole collection): the ``k`` rows first in ``order_by``,
        with their multiplicities. ``order_by`` is a column or a list of columns, each
        ascending or, with ``descending=True``, descending; a column may name its own
        direction: ``order_by=[("revenue", "desc"), "o_orderdate"]`` (``ORDER BY revenue
        DESC, o_orderdate``). Nulls come last; ties are broken by the other columns, ascending."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise PipelineError(f"top_k ({declared_at()}): k must be a positive integer, got {k!r}")
        try:
            sort_directions(order_by, descending)
        except ValueError as e:
            raise PipelineError(f"top_k ({declared_at()}): {e}") from None
        return self.reduce(by, TopK(k, order_by, descending=descending))

    def window(self, partition_by, order_by=None, descending: bool | list[bool] = False, **columns) -> "Collection":
        """SQL's window functions: every row with new columns, each a function of its
        partition (the rows equal on ``partition_by``; ``[]``: one partition) in
        ``order_by`` order (as ``top_k`` takes it; nulls last). The columns are window
        functions of ops/dataflow/windows.py: ``xs.window("k", "t", n=row_number(),
        prev=lag("x"), total=running_sum("x", frame=rows(2)))`` is ``ROW_NUMBER() OVER w,
        LAG(x) OVER w, SUM(x) OVER (w ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)`` with ``w``
        ``(PARTITION BY k ORDER BY t)``. A row of multiplicity ``c`` is ``c`` rows; rows
        tied in ``order_by`` are ordered by their other columns. The output's columns are
        the partition columns, the others, then the new ones."""
        key = [] if partition_by is None else _names("window", partition_by, "partition_by")
        try:
            reducer = Window(order_by, descending, columns, partition_by=key)
        except ValueError as e:
            raise PipelineError(f"window ({declared_at()}): {e}") from None
        return self.reduce(key, reducer)

    def reduce_per_key(self, by, fn: Callable) -> "Collection":
        """User logic per key: ``fn(pa.Table of the key's rows with _count) -> pa.Table``.

        ``fn`` gets one key's accumulated rows (the value columns and ``_count``, the
        multiplicity) and returns the output rows for that key (a ``_count`` column is
        optional; default 1). It must be a pure function of its input: it is called at
        every time where the key's input changes.
        """
        return self.reduce(by, PerKey(_function("reduce_per_key", fn)))

    # ---- calculus: moment time (ops/dataflow/calculus.py), as-of joins (ops/operators/asof.py)
    def differentiate(self) -> "Collection":
        """This collection's changes, each only at the moment it happens (in moment time)."""
        require_domain("differentiate", [self.node], ORDINARY)
        return self._new("differentiate", [self])

    def integrate(self) -> "Collection":
        """A differentiated collection back in ordinary time: ``integrate(differentiate(c)) == c``."""
        require_domain("integrate", [self.node], MOMENTS)
        return self._new("integrate", [self])

    def moments(self, neu: bool = False) -> "Collection":
        """This collection in moment time, to combine with differentiated ones (``neu``: one moment later)."""
        require_domain("moments", [self.node], ORDINARY)
        return self._new("moments", [self], neu=bool(neu))

    def as_of_join(self, other: "Collection", on) -> "Collection":
        """Each update joined with ``other`` as it was at the update's time; later changes of
        ``other`` never change past results. A null key matches nothing, as in ``join``."""
        if not isinstance(other, Collection):
            raise PipelineError(f"as_of_join ({declared_at()}): expects a collection to look values up in, "
                                f"got {other!r}")
        on = _names("as_of_join", on, "on") if on else []
        if not on:
            raise PipelineError(f"as_of_join ({declared_at()}): give the key columns to join on")
        require_domain("as_of_join", [self.node, other.node], ORDINARY)
        pending = self._new("as_of_pending", [self], on=on)
        return pending._new("as_of_join", [pending, other], on=on)

    # ---- arrangements
    def arrange(self, by) -> "Collection":
        """One indexed copy of this collection, shared by every operator that uses it."""
        return self._new("arrange", [self], key=_names("arrange", by, "by"))

    # ---- iteration
    def iterate(self, body: Callable[["Collection"], "Collection"], *, max_rounds: int = 10_000,
                name: str | None = None, priority=None, partition_by=None) -> "Collection":
        """The fixed point of ``body`` starting from this collection.

        ``body`` receives the loop variable (this collection inside the loop, where times
        gain an iteration coordinate) and returns its next value. Collections from outside
        used in ``body`` are entered into the loop automatically; the result leaves it.

        ``priority`` (a SQL expression giving a non-negative integer per row): the
        variable's records enter at that iteration instead of 0, and a record the body
        returns enters at the next iteration or at its priority, whichever is later
        (``ops/loops/priority.py``), so records settle in priority order.

        ``partition_by`` (a column or a list): the body only combines rows that agree on
        these columns, so each batch's fixed point may run inside Spark tasks, rows dealt
        by them (``ops/loops/plan.py`` checks it; without it, it tries each column).
        """
        loop = self._p.loop(max_rounds=max_rounds, name=name, parent=self.scope)
        if partition_by is not None:
            loop.node.args["partition_by"] = _names("iterate", partition_by, "partition_by")
        x = loop.variable(self, priority=priority)
        x.set(_function("iterate", body)(x))
        return loop.leave(x)

    def enter(self, loop: "Scope") -> "Collection":
        """This collection brought into ``loop`` (every time gains iteration coordinate 0)."""
        return loop.enter(self)

    def enter_at(self, loop, iteration) -> "Collection":
        """This collection brought into ``loop`` (a loop variable or a :class:`Scope`), each
        record at the iteration ``iteration`` gives it (a SQL expression: a non-negative
        integer) instead of 0: differential dataflow's ``enter_at``, for prioritized loops."""
        scope = loop.scope if isinstance(loop, Collection) else loop
        if not isinstance(scope, Scope):
            raise PipelineError(f"enter_at ({declared_at()}): expects a loop variable or a loop, got {loop!r}")
        return scope.enter_at(self, iteration)

    def leave(self) -> "Collection":
        """This collection brought out of its loop (iteration coordinates are summed away)."""
        if self.scope is None:
            raise PipelineError(f"leave ({declared_at()}): the collection is not inside a loop")
        return self.scope.leave(self)

    def set(self, result: "Collection") -> None:
        """Define a loop variable: its next value is ``result`` (mutual recursion allowed)."""
        if self.node.op != "variable":
            raise PipelineError(f"set ({declared_at()}): only a loop variable can be set")
        if self.node.args.get("result") is not None:
            raise PipelineError(f"set ({declared_at()}): variable {self.node.name} is already set")
        if result.scope is not self.scope:
            result = self.scope.enter(result) if _is_ancestor(result.scope, self.scope) else result
            if result.scope is not self.scope:
                raise PipelineError(f"set ({declared_at()}): the result lives in a different loop than the variable")
        self.node.args["result"] = result.node


class Pipeline:
    """The builder handed to a pipeline file's ``pipeline(p)`` function."""

    def __init__(self, name: str = "pipeline"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: dict[str, Node] = {}
        self.outputs: dict[str, Node] = {}
        # where the nodes being added are declared, when not a line of Python (a SQL model's view)
        self.declared_here: str | None = None
        # input trace -> its schema (ops/dataflow/load.py), for operators that need columns
        # when declared (ops/dataflow/outer_joins.py); None outside a store
        self.tables = None
        # what the commands tell about the pipeline without refusing it (one line each)
        self.notes: list[str] = []

    def _add(self, op: str, inputs: list[Node], args: dict, scope: "Scope | None" = None) -> Collection:
        node = Node(op, inputs, args, self.declared_here or declared_at(), len(self.nodes), scope=scope)
        node.name = f"{op}_{node.id}"
        self.nodes.append(node)
        return Collection(self, node)

    def loop(self, *, max_rounds: int = 10_000, name: str | None = None, parent: "Scope | None" = None) -> "Scope":
        """A new loop scope for mutually recursive variables (see :class:`Scope`)."""
        loop_node = self._add("loop", [], {"max_rounds": max_rounds}, parent).node
        scope = Scope(self, loop_node, parent, name or loop_node.name)
        loop_node.args["scope"] = scope
        return scope

    def input(self, trace: str) -> Collection:
        """An existing trace of the store (already an arrangement by its key)."""
        if not isinstance(trace, str) or not NAME_RE.match(trace):
            raise PipelineError(f"input ({declared_at()}): bad trace name {trace!r}: use letters, digits and _, "
                                f"not starting with a digit")
        if trace in self.inputs:
            return Collection(self, self.inputs[trace])
        c = self._add("input", [], {"trace": trace})
        self.inputs[trace] = c.node
        return c

    def output(self, name: str, collection: Collection, key=None) -> None:
        """Write ``collection`` to the output trace ``name`` (created on the first run)."""
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise PipelineError(f"output ({declared_at()}): bad trace name {name!r}: use letters, digits and _, "
                                f"not starting with a digit")
        if not isinstance(collection, Collection):
            raise PipelineError(f"output {name!r} ({declared_at()}): expects a collection, got {collection!r}")
        if name in self.outputs:
            raise PipelineError(f"output {name!r} ({declared_at()}) is declared twice")
        if name in self.inputs:
            raise PipelineError(f"output {name!r} ({declared_at()}) clashes with an input of the same name")
        out = self._add("output", [collection.node], {"trace": name, "key": column_list(key)})
        self.outputs[name] = out.node

    def delta_join(self, relations) -> Collection:
        """The natural join of ``relations`` on shared variables, keeping no intermediate results:
        each item is a collection, ``(collection, "a", "b", ...)`` or ``(collection, {"a": "col"})``.
        A null in a shared variable matches nothing, as in ``join``."""
        where = declared_at()
        if not isinstance(relations, (list, tuple)) or len(relations) < 2:
            raise PipelineError(f"delta_join ({where}): give a list of at least two relations")
        colls, specs = [], []
        for i, r in enumerate(relations, 1):
            coll, spec = _relation(r, i, where)
            if coll._p is not self:
                raise PipelineError(f"delta_join ({where}): relation {i} is a collection of another pipeline")
            colls.append(coll)
            specs.append(spec)
        if len({domain(c.node) for c in colls}) > 1:
            raise PipelineError(f"delta_join ({where}): combines differentiated collections with ordinary ones; "
                                f"bring the ordinary ones into moment time with .moments()")
        return colls[0]._new("delta_join", colls, relations=specs)


def _join_args(op: str, on, nulls_equal) -> dict:
    """A join's arguments; ``nulls_equal`` only when set, so that a pipeline written before
    the option keeps its fingerprint."""
    if not isinstance(nulls_equal, bool):
        raise PipelineError(f"{op} ({declared_at()}): nulls_equal is True or False, got {nulls_equal!r}")
    args = {"on": _names(op, on, "on")}
    if nulls_equal:
        args["nulls_equal"] = True
    return args


def _relation(r, i: int, where: str) -> tuple[Collection, tuple]:
    """Relation ``i`` of a delta join (ops/operators/delta_join.py): its collection, and how
    its columns bind variables: ``("all", None)``, ``("positional", [variables])`` or
    ``("mapping", {variable: column})``."""
    if isinstance(r, Collection):
        return r, ("all", None)
    if not (isinstance(r, tuple) and r and isinstance(r[0], Collection)):
        raise PipelineError(f"delta_join ({where}): relation {i} is not a collection or "
                            f"(collection, variables...), got {r!r}")
    coll, rest = r[0], r[1:]
    if len(rest) == 1 and isinstance(rest[0], dict):
        mapping = rest[0]
        if not mapping or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
            raise PipelineError(f"delta_join ({where}): relation {i}: the mapping must name "
                                f"variables as columns, e.g. {{'a': 'src'}}")
        return coll, ("mapping", dict(mapping))
    if rest and all(isinstance(v, str) for v in rest):
        if len(set(rest)) != len(rest):
            raise PipelineError(f"delta_join ({where}): relation {i} binds a variable twice "
                                f"({', '.join(rest)}); filter on equal columns instead")
        return coll, ("positional", list(rest))
    raise PipelineError(f"delta_join ({where}): relation {i}: give (collection, 'var', ...) "
                        f"or (collection, {{'var': 'column'}})")


class Scope:
    """A loop: collections inside it have one more time coordinate, the iteration.

    ``variable(initial)`` declares a loop variable; ``var.set(result)`` gives its next
    value, possibly after other variables used it (mutual recursion). ``leave(c)`` brings a
    collection out. The loop runs rounds until no variable changes, at most ``max_rounds``.
    """

    def __init__(self, p: Pipeline, node: Node, parent: "Scope | None", name: str):
        self._p = p
        self.node = node
        self.parent = parent
        self.name = name
        self.depth = 1 + (parent.depth if parent else 0)
        self._entered: dict[int, Node] = {}
        self.variables: list[Node] = []

    def enter(self, c: Collection) -> Collection:
        if c.scope is self:
            return c
        if not _is_ancestor(c.scope, self):
            raise PipelineError(f"enter ({declared_at()}): the collection is not from an enclosing scope of loop {self.name}")
        outer = self.parent.enter(c) if c.scope is not self.parent else c
        node = self._entered.get(outer.node.id)
        if node is None:
            node = self._p._add("enter", [outer.node], {}, self).node
            self._entered[outer.node.id] = node
            self.node.inputs.append(outer.node)
        return Collection(self._p, node)

    def enter_at(self, c: Collection, iteration) -> Collection:
        """``c`` entered with each record at the iteration ``iteration`` gives it (see
        ``ops/loops/priority.py``); a new node for every call, never shared."""
        if iteration is None:
            return self.enter(c)
        _expression("enter_at", iteration, "the iteration")
        if c.scope is self or not _is_ancestor(c.scope, self):
            raise PipelineError(f"enter_at ({declared_at()}): the collection is not from an enclosing scope "
                                f"of loop {self.name}")
        outer = self.parent.enter(c) if c.scope is not self.parent else c
        node = self._p._add("enter", [outer.node], {"priority": iteration}, self).node
        self.node.inputs.append(outer.node)
        return Collection(self._p, node)

    def variable(self, initial: Collection, priority=None) -> Collection:
        """A loop variable starting from ``initial``; with ``priority``, prioritized (see
        :meth:`Collection.iterate`)."""
        if priority is not None and initial.scope is self:
            raise PipelineError(f"variable ({declared_at()}): a priority needs an initial collection from outside "
                                f"loop {self.name}")
        inner = self.enter_at(initial, priority) if initial.scope is not self else initial
        v = self._p._add("variable", [inner.node], {"result": None, "priority": priority}, self)
        self.variables.append(v.node)
        return v

    def leave(self, c: Collection) -> Collection:
        if c.scope is not self:
            raise PipelineError(f"leave ({declared_at()}): the collection is not in loop {self.name}")
        return self._p._add("leave", [self.node, c.node], {}, self.parent)


def _is_column(value) -> bool:
    """A pyspark ``Column``, told without importing pyspark (pipelines load without Spark)."""
    return type(value).__name__ == "Column" and type(value).__module__.startswith("pyspark.")


def _expression(op: str, value, what: str):
    """``value`` if it is an expression (a SQL string or a Spark column), else the one line
    a wrong argument gets before Spark starts."""
    if isinstance(value, str) and value.strip() or _is_column(value):
        return value
    raise PipelineError(f"{op} ({declared_at()}): {what} must be a SQL expression (a string) or a Spark "
                        f"column, got {value!r}")


def _name(op: str, value, what: str) -> str:
    if isinstance(value, str) and value:
        return value
    raise PipelineError(f"{op} ({declared_at()}): {what} must be a column name (a string), got {value!r}")


def _names(op: str, value, what: str) -> list[str]:
    """A column name or a list of them, as a list; anything else is one line."""
    if isinstance(value, (list, tuple)):
        return [_name(op, v, what) for v in value]
    return [_name(op, value, what)]


def _function(op: str, fn):
    if callable(fn):
        return fn
    raise PipelineError(f"{op} ({declared_at()}): expects a function, got {fn!r}")


def _is_ancestor(outer: "Scope | None", inner: "Scope | None") -> bool:
    """True when ``outer`` encloses ``inner`` (None is the pipeline itself)."""
    s = inner
    while s is not None:
        s = s.parent
        if s is outer:
            return True
    return False


def _innermost(scopes: list, op: str) -> "Scope | None":
    inner = None
    for s in scopes:
        if s is inner or _is_ancestor(s, inner):
            continue
        if _is_ancestor(inner, s):
            inner = s
        else:
            raise PipelineError(f"{op} ({declared_at()}): combines collections of two unrelated loops")
    return inner
