"""How ``ddcli explain`` shows an explanation (ops/explain/model.py) to a person.

Sections, each a Rich tree or table: the operators (one line each: where it is declared,
its name, what it computes, its columns; a loop's body nested under the loop), the
arrangements and who shares them, the loops' paths and why, the priorities, the inputs
with how far behind them the pipeline is, the outputs and the state traces.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

PATHS = {"local": "in tasks, partition-local", "resident": "in tasks, resident",
         "one_task": "in one task", "round": "round by round", "unknown": "decided when the run starts"}


def explanation(ex) -> Group:
    """The whole explanation of one pipeline, as one Rich renderable."""
    parts = [_header(ex), _operators(ex), Text()]
    if ex.arrangements:
        parts.append(_arrangements(ex))
    if ex.loops:
        parts += [_loops(ex), Text()]
    if ex.priorities:
        parts.append(_priorities(ex))
    parts += [_traces("inputs", ex.inputs, lag=True), _traces("outputs", ex.outputs, lag=False)]
    if ex.state:
        parts.append(_state(ex))
    if ex.notes:
        parts.append(Text.from_markup("\n".join(f"[yellow]note:[/] {escape(n)}" for n in ex.notes)))
    return Group(*parts)


def _header(ex) -> Text:
    ran = (f"{ex.runs} run{'s' if ex.runs != 1 else ''}; outputs complete up to {ex.frontier}"
           if ex.runs else "never ran")
    return Text.from_markup(f"[bold]pipeline {escape(ex.pipeline)}[/] [dim]({escape(ex.file)})[/]\n"
                            f"store {escape(ex.store)}: {ran}; {escape(ex.next_run)}\n")


def _size(rows, nbytes) -> str:
    if rows is None:
        return "not written yet"
    return f"{rows:,} rows, {_bytes(nbytes or 0)}"


def _bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


CHANGE_STYLES = {"changed": "bold red", "new": "bold green", "affected": "yellow"}


def _operator_line(o) -> Text:
    cols = f" [dim]→ {escape(', '.join(o.columns))}[/]" if o.columns else ""
    mark = " [magenta](arranged: its old updates are read)[/]" if o.arranged and o.op != "input" else ""
    change = f"[{CHANGE_STYLES[o.change]}]\\[{o.change} since the last run][/] " if o.change in CHANGE_STYLES else ""
    return Text.from_markup(f"[cyan]{escape(o.where or '?')}[/]  {change}[bold]{escape(o.name)}[/]  "
                            f"{escape(o.summary)}{mark}{cols}")


def _operators(ex) -> Tree:
    tree = Tree(Text(f"operators ({len(ex.operators)})", style="bold"), guide_style="dim")
    branches = {None: tree}  # loop name -> the branch of its body
    for o in ex.operators:
        node = branches.get(o.loop, tree).add(_operator_line(o))
        if o.defines:
            branches[o.defines] = node
    for r in ex.removed:
        tree.add(Text.from_markup(f"[bold red]\\[removed since the last run][/] {escape(r)}"))
    return tree


def _table(title: str, columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def _arrangements(ex) -> Table:
    t = _table("arrangements (old updates that stateful operators read)",
               ["collection", "declared", "kept in", "key", "read by", "shared", "size"])
    for a in ex.arrangements:
        where = {"input": f"input trace {a.trace}", "state": f"state trace {a.trace}",
                 "entered": "the arrangement outside the loop"}[a.kind]
        t.add_row(a.collection, a.where, where, ", ".join(a.key), "; ".join(a.readers),
                  "yes" if a.shared else "no", _size(a.rows, a.bytes) if a.kind != "entered" else "")
    return t


def _loops(ex) -> Tree:
    tree = Tree(Text("loops", style="bold"), guide_style="dim")
    for lo in ex.loops:
        by = f" by {', '.join(lo.by)}" if lo.by else ""
        tasks = f" ({lo.tasks} tasks)" if lo.path == "resident" and lo.tasks else ""
        inside = f", inside loop {lo.inside}" if lo.inside else ""
        node = tree.add(Text.from_markup(f"[bold]{escape(lo.name)}[/] [cyan]{escape(lo.where)}[/]{escape(inside)}: "
                                         f"[green]{PATHS.get(lo.path, lo.path)}{escape(by)}{tasks}[/]"))
        node.add(Text(f"why: {lo.why}"))
        if lo.broadcast:
            node.add(Text(f"broadcast to every task: {'; '.join(lo.broadcast)}"))
        for limit in lo.limits:
            node.add(Text(f"at run time: {limit}", style="dim"))
    return tree


def _priorities(ex) -> Table:
    t = _table("priorities (records enter their loop at the iteration these give)",
               ["operator", "declared", "loop", "kind", "iteration"])
    for p in ex.priorities:
        t.add_row(p.operator, p.where, p.loop, p.kind, p.expression)
    return t


def _traces(title: str, traces, *, lag: bool) -> Table:
    cols = ["trace", "key", "since", "upper", "size", "layers"] + (["behind", "next run reads"] if lag else ["owner"])
    t = _table(title, cols)
    for i in traces:
        if not i.exists:
            t.add_row(i.name, "", "", "", "does not exist yet", "", *([""] * (2 if lag else 1)))
            continue
        row = [i.name, ", ".join(i.key), i.since, i.upper, _size(i.rows, i.bytes), str(i.layers)]
        if lag:
            row += _lag_cells(i.lag)
        else:
            row.append(i.owner or "")
        t.add_row(*row)
    return t


def _lag_cells(lag) -> list[str]:
    if lag is None:
        return ["", ""]
    behind = "yes" if lag.behind else "no"
    if lag.consumed is not None:
        behind += f" (consumed up to {lag.consumed})"
    if lag.holds_back:
        behind += "; holds the pipeline back" + (f" by {lag.behind_by:,}" if lag.behind_by is not None else "")
    reads = f"{lag.updates:,} update{'s' if lag.updates != 1 else ''} in {lag.layers} layer{'s' if lag.layers != 1 else ''}"
    if lag.pending:
        reads += f" (+{lag.pending:,} pending beyond the upper)"
    return [behind, reads]


def _state(ex) -> Table:
    t = _table("state traces (kept between runs)", ["trace", "operator", "declared", "size", "layers", "since",
                                                    "upper"])
    for s in ex.state:
        t.add_row(s.name, s.operator, s.where, _size(s.rows, s.bytes) if s.exists else "not written yet",
                  str(s.layers) if s.exists else "", s.since or "", s.upper or "")
    return t
