"""What ``ddcli explain`` says about a pipeline, as plain data.

One :class:`Explanation` per pipeline file: its operators (each with the line that declared
it and one sentence), the arrangements and the operators that share them, its loops with
the path each will take and why, the priorities, its inputs and outputs with their
frontiers and how far behind each input the pipeline is, and its state traces with the
rows and bytes the store holds for them. Every part is a dataclass of plain values, so
``--json`` is :func:`dataclasses.asdict` of it, and a new question (say, which operators
changed since the last run) is a new field.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Operator:
    """One node of the graph. ``name`` is how the run, its state traces and the other parts
    of the explanation call it (``reduce_7``); ``loop``: the loop it runs in."""

    id: int
    name: str
    op: str
    where: str  # "file.py:line" of its declaration
    summary: str  # one sentence: what it computes
    inputs: list[str] = field(default_factory=list)
    columns: list[str] | None = None  # None: only Spark can tell
    loop: str | None = None
    defines: str | None = None  # a loop node: the name of the loop whose body follows
    stateful: bool = False  # reads its inputs' old updates (arranged)
    arranged: bool = False  # its own old updates are read by a stateful operator
    change: str | None = None  # against the last run (ops/dataflow/changes.py); None: never ran


@dataclass
class Arrangement:
    """A collection whose old updates stateful operators read, kept as a trace between runs.

    ``kind``: ``input`` (the input trace itself is the arrangement), ``state`` (a state
    trace of the pipeline) or ``entered`` (a collection entered into a loop reads the
    arrangement of the one outside). ``readers``: the operators reading it and by which
    columns; ``shared`` when more than one does."""

    collection: str
    where: str
    kind: str
    trace: str | None
    key: list[str]
    readers: list[str]
    shared: bool
    rows: int | None = None  # from the store, once a run wrote it
    bytes: int | None = None
    layers: int | None = None


@dataclass
class Loop:
    """A loop and the path its batches take: ``local`` (every round inside Spark tasks, rows
    dealt by ``by``), ``resident`` (tasks that run together, exchanging each round's
    changes), ``one_task`` (every row in one task), ``round`` (round by round on the driver,
    a Spark job a round) or ``unknown`` (decided once Spark knows the columns). ``why``
    says why; ``limits`` what would send it round by round while it runs."""

    name: str
    where: str
    max_rounds: int
    path: str
    why: str
    by: list[str] = field(default_factory=list)
    tasks: int | None = None
    broadcast: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    inside: str | None = None  # the enclosing loop of a nested loop
    unknown_types: bool = False  # some of its columns have types only Spark can tell (taken as unknown)


@dataclass
class Priority:
    """A prioritized loop variable or an ``enter_at``: records come in at the iteration
    ``expression`` gives them."""

    operator: str
    where: str
    loop: str
    kind: str  # "variable" or "enter_at"
    expression: str


@dataclass
class Lag:
    """How far behind an input the pipeline is: what its next run reads."""

    consumed: str | None  # the input's upper when the pipeline last ran (None: never ran)
    updates: int  # sealed updates not processed yet
    layers: int
    pending: int  # updates beyond the input's upper (the run cannot read them yet)
    behind: bool
    holds_back: bool = False  # this input's upper is behind another input's: the pipeline waits for it
    behind_by: int | None = None


@dataclass
class TraceInfo:
    """An input or output trace of the pipeline as the store holds it now (``exists``
    False: not yet: an input to ingest, an output the first run creates)."""

    name: str
    role: str  # "input" or "output"
    exists: bool
    key: list[str] = field(default_factory=list)
    d: int | None = None
    since: str | None = None
    upper: str | None = None
    rows: int | None = None
    bytes: int | None = None
    layers: int | None = None
    owner: str | None = None
    lag: Lag | None = None  # inputs only


@dataclass
class StateTrace:
    """A trace that keeps an arranged collection between runs (``pipeline.operator``)."""

    name: str
    operator: str
    where: str
    exists: bool
    rows: int | None = None
    bytes: int | None = None
    layers: int | None = None
    since: str | None = None
    upper: str | None = None


@dataclass
class Explanation:
    pipeline: str
    file: str
    store: str
    runs: int  # runs committed so far
    frontier: str | None  # outputs complete up to it (None: never ran)
    next_run: str  # what the next run would do, in a sentence
    operators: list[Operator] = field(default_factory=list)
    arrangements: list[Arrangement] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    priorities: list[Priority] = field(default_factory=list)
    inputs: list[TraceInfo] = field(default_factory=list)
    outputs: list[TraceInfo] = field(default_factory=list)
    state: list[StateTrace] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    changes: str | None = None  # the operators changed since the last run, in a sentence; None: none
    removed: list[str] = field(default_factory=list)  # operators of the last run no longer in the file
