"""A pipeline identified by its dataflow, not by its file's bytes.

Every node of the graph gets a *fingerprint*: a hash of its operator, its arguments and
the fingerprints of its inputs, so two nodes share one exactly when they compute the same
collection from the same traces. Comments, docstrings, blank lines, formatting and lines
moving change none of it; an operator's expression, a reducer, a user function's code or
a constant it reads do. A node's stored state (the arrangement a stateful operator reads)
is therefore valid for every later version of the file in which its fingerprint appears
(ops/run/rebuild.py).

How arguments are read, with no Spark started:

* SQL expression strings, column names, numbers: by value;
* Spark ``Column`` objects (which only exist once a Spark session does): by their string
  form, the expression tree Spark prints;
* Python functions (``threshold``, ``reduce_per_key``, a user reducer's methods): by their
  compiled code — bytecode, constants (docstrings left out), names, argument layout — the
  values of the globals and closure cells they read, and their defaults; never by line;
* reducers and other objects: by class and attributes.

A loop is one unit: its fingerprint covers its whole body (nodes referred to by their
position in it) and the fingerprints of what it enters; a body node's fingerprint is the
loop's and its position. Nodes that would share a fingerprint (one operator declared twice
on the same input) are told apart by their order.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import types

from ops.dataflow.graph import Graph, Node, scope_nodes

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# Python 3.14 marks code that has a docstring; before it, a function's first constant is
# its docstring slot (None when it has none)
_HAS_DOCSTRING = getattr(inspect, "CO_HAS_DOCSTRING", None)
_DEPTH = 32  # objects and functions nested deeper than this are read by their text


def digest(value) -> str:
    """A short stable hash of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def canonical(value, ref=None, seen: frozenset = frozenset()):
    """``value`` as a JSON-able structure that changes exactly when its meaning does.

    ``ref(node)`` names a node met among the arguments (a loop variable's result)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    if isinstance(value, Node):
        return ["node", ref(value) if ref else None]
    if isinstance(value, tuple) and callable(getattr(value, "identity", None)):  # a record naming its identifying fields
        return [type(value).__name__] + [canonical(v, ref, seen) for v in value.identity()]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__] + [canonical(v, ref, seen) for v in value]
    if isinstance(value, (set, frozenset)):
        return ["set"] + sorted((canonical(v, ref, seen) for v in value), key=repr)
    if isinstance(value, dict):
        return ["dict"] + [[canonical(k, ref, seen), canonical(v, ref, seen)] for k, v in value.items()]
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return _function(value, seen)
    if isinstance(value, types.BuiltinFunctionType):
        return ["builtin", getattr(value, "__module__", None), value.__qualname__]
    if isinstance(value, type):
        return _class(value, seen)
    module = type(value).__module__ or ""
    if module.startswith("pyspark"):  # a Column: the expression Spark prints, no job
        return ["spark", type(value).__name__, _ADDRESS.sub("", str(value))]
    if module.startswith("pyarrow"):  # a schema or type: its text
        return ["arrow", type(value).__name__, str(value)]
    if module.startswith("numpy") and hasattr(value, "tobytes"):  # an array or scalar: its bytes
        return ["numpy", str(getattr(value, "dtype", "")), list(getattr(value, "shape", ())),
                hashlib.sha256(value.tobytes()).hexdigest()]
    attrs = getattr(value, "__dict__", None)
    if attrs is not None and not module.startswith(("numpy", "pandas")) and ("object", id(value)) not in seen \
            and len(seen) < _DEPTH:  # a reducer or another plain object: its class and attributes
        seen = seen | {("object", id(value))}
        return ["object", _class(type(value), seen), canonical(dict(attrs), ref, seen)]
    return ["repr", type(value).__qualname__, _ADDRESS.sub("", repr(value))]


def _class(cls: type, seen: frozenset):
    """A class by name; one defined in the pipeline file also by its methods' code."""
    name = ["class", cls.__module__, cls.__qualname__]
    if not (cls.__module__ or "").startswith("ddcli_pipeline_") or ("class", id(cls)) in seen:
        return name
    seen = seen | {("class", id(cls))}
    body = {k: canonical(v, None, seen) for k, v in vars(cls).items()
            if not k.startswith("__") or k in ("__call__", "__init__")}
    return name + [["dict"] + sorted(([k, v] for k, v in body.items()), key=repr),
                   [canonical(b, None, seen) for b in cls.__bases__]]


def _function(fn, seen: frozenset):
    """A function by its code, the globals and closure cells it reads, and its defaults."""
    if isinstance(fn, types.MethodType):
        return ["method", _function(fn.__func__, seen), canonical(fn.__self__, None, seen)]
    code = fn.__code__
    if ("code", id(code)) in seen:  # recursion: the name is enough
        return ["recursive", code.co_name]
    seen = seen | {("code", id(code))}
    names = sorted(_global_names(code))
    glob = fn.__globals__
    reads = [[n, canonical(glob[n], None, seen)] for n in names if n in glob]
    cells = [canonical(_cell(c), None, seen) for c in (fn.__closure__ or ())]
    return ["function", _code(code), reads, cells, canonical(fn.__defaults__, None, seen),
            canonical(fn.__kwdefaults__, None, seen)]


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None


def _global_names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _global_names(c)
    return out


def _code(code: types.CodeType):
    """Compiled code without what formatting changes: no line table, no docstring."""
    consts = list(code.co_consts)
    if _has_docstring(code):
        consts[0] = None
    return ["code", code.co_code.hex(),
            [(_code(c) if isinstance(c, types.CodeType) else canonical(c)) for c in consts],
            list(code.co_names), list(code.co_varnames), list(code.co_freevars), list(code.co_cellvars),
            code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount, code.co_flags]


def _has_docstring(code: types.CodeType) -> bool:
    if code.co_name.startswith("<"):  # lambdas, comprehensions, modules have no docstring
        return False
    if _HAS_DOCSTRING is not None:
        return bool(code.co_flags & _HAS_DOCSTRING)
    return bool(code.co_consts) and isinstance(code.co_consts[0], str)


# ------------------------------------------------------------------ nodes


_SKIPPED_ARGS = {"scope", "result"}  # a loop's scope object; a variable's result (structure)


def own_description(n: Node) -> list:
    """What a node is by itself: its operator and arguments, no inputs (see :func:`own`)."""
    args = {k: v for k, v in n.args.items() if k not in _SKIPPED_ARGS}
    if n.op == "loop":
        scope = n.args.get("scope")
        if scope is not None and scope.name != n.name:  # a name the user gave
            args["name"] = scope.name
    return [n.op, canonical(args)]


def own(n: Node) -> str:
    """The fingerprint of a node's own definition, whatever it reads: tells an operator that
    changed from one recomputed only because something upstream did."""
    return digest(own_description(n))


def fingerprints(p: Graph) -> dict[int, str]:
    """Every node's fingerprint (node id -> hash): its definition and everything upstream."""
    fps: dict[int, str] = {}
    seen: dict[str, int] = {}

    def unique(fp: str) -> str:  # an identical twin declared earlier: told apart by order
        k = seen.get(fp, 0)
        seen[fp] = k + 1
        return fp if k == 0 else digest([fp, k])

    for n in scope_nodes(p, None):
        if n.op == "loop":
            fps[n.id] = unique(_loop_fingerprint(p, n, fps))
            for i, m in enumerate(loop_body(p, n)):
                fps[m.id] = digest([fps[n.id], i])
        else:
            fps[n.id] = unique(digest(own_description(n) + [[fps[i.id] for i in n.inputs]]))
    return fps


def loop_body(p: Graph, loop: Node) -> list[Node]:
    """The nodes inside ``loop``, nested loops' included, in declaration order."""
    scope = loop.args["scope"]

    def inside(s) -> bool:
        while s is not None:
            if s is scope:
                return True
            s = s.parent
        return False

    return [n for n in p.nodes if inside(n.scope)]


def _loop_fingerprint(p: Graph, loop: Node, fps: dict[int, str]) -> str:
    body = loop_body(p, loop)
    local = {m.id: i for i, m in enumerate(body)}

    def ref(m: Node):
        if m.id in local:
            return ["body", local[m.id]]
        return ["self"] if m is loop else ["outer", fps[m.id]]

    desc = []
    for m in body:
        args = {k: v for k, v in m.args.items() if k != "scope"}
        scope = ["self"] if m.scope is loop.args["scope"] else ref(m.scope.node)
        desc.append([own_description(m), canonical(args, ref), [ref(i) for i in m.inputs], scope])
    return digest(["loop", own_description(loop), desc])


def dataflow_fingerprint(fps: dict[int, str]) -> str:
    """One hash for the whole pipeline: equal exactly when every node's fingerprint is."""
    return digest(sorted(fps.values()))
