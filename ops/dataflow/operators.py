"""Every operator a pipeline can declare, and the facts the passes ask of it.

One row per operator name (``Node.op``): the passes (the pre-check, the evaluator, the loop
planner and router, the task evaluator, explain, the rebuild planner) read these facts
instead of listing operator names, so an operator is described here once. What computes an
operator's changes stays a dispatch table keyed by the name (``EVALUATORS`` in
ops/run/evaluate.py, ``TASK_EVALUATORS`` in ops/loops/task.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ops.dataflow.reducers import Reducer, Threshold, presence

# families: what kind of computation an operator is
IO = "io"  # reads or writes a trace
LINEAR = "linear"  # each output change from one input change, keeping no state
JOIN = "join"  # a binary equi-join: each side's changes meet the other side's arrangement
MULTIWAY = "multiway join"  # a join of many relations at once
REDUCE = "reduce"  # a function of each key's rows, reading the input's arrangement
LOOP = "loop"  # a loop and the collections that enter, iterate in and leave it
CALCULUS = "calculus"  # depends on when updates happen: moment time, as-of joins


@dataclass(frozen=True)
class Operator:
    """What the passes know of one operator.

    ``sentence``: what it computes, for ``ddcli explain`` (ops/explain/operators.py fills
    in ``{in0}``, ``{in1}``, ``{ins}`` (input names), ``{loop}``, ``{detail}`` and the
    node's arguments by name).
    ``stateful``: it reads its inputs' old updates, so they are arranged.
    ``linear``: each change from one change of its inputs, cheaply (no state).
    ``same_columns``: its output has the columns of the collection it reads.
    ``carries``: the input whose collection (and so its key) it passes on as is.
    ``keyed_by``: the argument naming the key its output is arranged by (optional when it
    ``carries`` an input); ``read_by``: the argument naming the columns it reads its inputs'
    arrangements by (None: the whole row).
    ``no_new_rows``: it never has more updates than its one input.
    ``in_task``: a loop's task evaluates it (ops/loops/task.py); ``broadcast_ok``: inside
    such a loop it may read a collection every task holds whole.
    ``reducer``: a reduce-family operator's reducer, from its node.
    """

    family: str
    sentence: str
    stateful: bool = False
    linear: bool = False
    same_columns: bool = False
    carries: int | None = None
    no_new_rows: bool = False
    keyed_by: str | None = None
    read_by: str | None = None
    in_task: bool = False
    broadcast_ok: bool = False
    reducer: Callable[[Any], Reducer] | None = None


OPERATORS: dict[str, Operator] = {
    "input": Operator(IO, "reads trace {trace}: its new updates, and its history as an arrangement"),
    "output": Operator(IO, "writes {in0} to trace {trace}{detail}", linear=True, same_columns=True, carries=0,
                       keyed_by="key"),
    "select": Operator(LINEAR, "from {in0}: {detail}", linear=True, in_task=True, broadcast_ok=True,
                       no_new_rows=True),
    "filter": Operator(LINEAR, "keeps the rows of {in0} where {condition}", linear=True, same_columns=True,
                       in_task=True, broadcast_ok=True, no_new_rows=True),
    "flat_map": Operator(LINEAR, "one row of {in0} per element of {expr}, as column {column}", linear=True),
    "concat": Operator(LINEAR, "the sum of {ins} (multiplicities add)", linear=True, in_task=True),
    "negate": Operator(LINEAR, "{in0} with every multiplicity negated", linear=True, same_columns=True,
                       in_task=True, broadcast_ok=True, no_new_rows=True),
    "consolidate": Operator(LINEAR, "{in0} with updates of equal row and time summed", linear=True,
                            same_columns=True, in_task=True, no_new_rows=True),
    "arrange": Operator(LINEAR, "one indexed copy of {in0} by {key}, shared by the operators that read it",
                        linear=True, same_columns=True, keyed_by="key", in_task=True, no_new_rows=True),
    "join": Operator(JOIN, "joins {in0} with {in1} on {on} (reads both sides' arrangements)", stateful=True,
                     keyed_by="on", read_by="on", in_task=True, broadcast_ok=True),
    "semijoin": Operator(JOIN, "the rows of {in0} whose {on} is in {in1} (reads both sides' arrangements)",
                         stateful=True, keyed_by="on", read_by="on", in_task=True, broadcast_ok=True),
    "reduce": Operator(REDUCE, "{detail} in {in0} (reads its arrangement)", stateful=True, keyed_by="key",
                       read_by="key", in_task=True, reducer=lambda n: n.args["reducer"]),
    "distinct": Operator(REDUCE, "every row of {in0} present, once (reads its arrangement)", stateful=True,
                         same_columns=True, in_task=True, reducer=lambda n: Threshold(presence)),
    "threshold": Operator(REDUCE, "every row of {in0} with its multiplicity through a function (reads its "
                          "arrangement)", stateful=True, same_columns=True, in_task=True,
                          reducer=lambda n: Threshold(n.args["fn"])),
    "loop": Operator(LOOP, "loop {loop}: the fixed point of its body, at most {max_rounds:,} rounds"),
    "enter": Operator(LOOP, "brings {in0} into loop {loop}{detail}", same_columns=True, carries=0, in_task=True,
                      no_new_rows=True),
    "variable": Operator(LOOP, "variable of loop {loop}: starts from {in0}, next value {detail}", same_columns=True,
                         carries=0, in_task=True),
    "leave": Operator(LOOP, "brings {in1} out of loop {loop}", same_columns=True, carries=1),
    "differentiate": Operator(CALCULUS, "the changes of {in0}, each at the moment it happens"),
    "integrate": Operator(CALCULUS, "{in0} back in ordinary time"),
    "moments": Operator(CALCULUS, "{in0} in moment time{detail}"),
    "as_of_pending": Operator(CALCULUS, "the updates of {in0} waiting for their as-of join on {on}"),
    "as_of_join": Operator(CALCULUS, "each update of {in0} joined with {in1} as it was at the update's time, "
                           "on {on}", stateful=True, read_by="on"),
    "delta_join": Operator(MULTIWAY, "the join of {ins} on shared variables, keeping no intermediate results",
                           stateful=True),
}
