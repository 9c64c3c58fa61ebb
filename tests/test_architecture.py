"""The layout the code promises (docs/architecture.md), read from the code itself.

Every import of the project's modules counts, the ones inside functions too: a lazy import
that keeps the CLI from loading pyspark is fine, but it may not close a circle or point up.

* no import circle among the modules of ``ddcli``, ``ops`` and ``storage``;
* floors ``ddcli`` (the command line) over ``ops`` (Spark) over ``storage`` (no Spark):
  a module imports its own floor or a lower one, never a higher one;
* no folder holds more than 15 modules (the tests' folders included);
* no function is longer than 120 lines.

Standard library only (``ast``): the check reads the files, it imports none of them.
"""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOORS = {"ddcli": 2, "ops": 1, "storage": 0}  # a higher floor may import a lower one
MAX_MODULES = 15
MAX_FUNCTION_LINES = 120


def _python_files(top: str) -> list[str]:
    """The modules under ``top``; ``tests/data`` holds pipeline files as test inputs, not modules."""
    found = []
    for folder, dirs, names in os.walk(os.path.join(REPO, top)):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "data") and not d.startswith("."))
        found += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return found


def project_modules() -> dict[str, str]:
    """Dotted module name -> file, for every module of the three packages."""
    modules = {}
    for top in FLOORS:
        for path in _python_files(top):
            parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _project_module(name: str, modules: dict[str, str]) -> str | None:
    """The project module an import of ``name`` loads (its longest known prefix), if any."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: str, modules: dict[str, str]) -> set[str]:
    """The project modules ``module`` imports anywhere in its file (functions included)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_project_module(a.name, modules) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from pkg import module` imports pkg.module
                found.add(_project_module(f"{base}.{alias.name}", modules))
    found.discard(None)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports from a module to one on a higher floor."""
    return [f"{m} -> {t}" for m, targets in sorted(graph.items()) for t in sorted(targets)
            if FLOORS[t.split(".")[0]] > FLOORS[m.split(".")[0]]]


def test_no_import_points_up():
    up = upward(import_graph())
    assert not up, "imports pointing up (ddcli -> ops -> storage):\n" + "\n".join(up)


def test_no_folder_over_15_modules():
    counts = {}
    for top in (*FLOORS, "tests"):
        for path in _python_files(top):
            folder = os.path.relpath(os.path.dirname(path), REPO)
            counts[folder] = counts.get(folder, 0) + 1
    big = {f: n for f, n in sorted(counts.items()) if n > MAX_MODULES}
    assert not big, f"folders of more than {MAX_MODULES} modules: {big}"


def test_no_function_over_120_lines():
    long = []
    for top in (*FLOORS, "tests"):
        for path in _python_files(top):
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            long += [f"{os.path.relpath(path, REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
                     for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions of more than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_checks_see_a_circle_an_upward_import_and_imports_inside_functions(tmp_path):
    """The checks can fail: a made-up graph with a circle and an arrow up is caught, and
    imports inside a function, relative or not, resolve to the modules they load."""
    graph = {"storage.a": {"storage.b"}, "storage.b": {"storage.a"}, "ops.c": {"storage.a"},
             "storage.d": {"ops.c"}, "ops.e": set()}
    assert circles(graph) == [["storage.a", "storage.b"]]
    assert upward(graph) == ["storage.d -> ops.c"]
    modules = {"ops": "", "ops.x": "", "ops.x.y": "", "ops.z": "", "storage": "", "storage.s": ""}
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from . import y\n    from ..z import w\n    import storage.s.t\n")
    assert imports_of("ops.x.q", str(probe), modules) == {"ops.x.y", "ops.z", "storage.s"}
