"""``ddcli report``: one self-contained HTML page of a store.

The page shows the traces (rows, layers, bytes, since, upper), the pipelines and readers
with a lineage graph, each pipeline's run history and lag as plots, and the recent
commits. It fetches nothing: styles are in the page, pictures are inline SVG
(ddcli/report/charts.py, ddcli/report/lineage.py), and a Content-Security-Policy forbids
any other source, so it opens the same from a mail attachment, a CI artefact or offline.
The figures come from the store without Spark (storage/state/, storage/log/recent.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from ddcli.report.charts import bar_chart, line_chart
from ddcli.report.lineage import Graph, Node, lineage_svg
from storage.lattice import Frontier, format_frontier
from storage.log.recent import recent_commits
from storage.state.history import history_rows
from storage.state.lag import lag_rows
from storage.state.readers import reader_rows

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px} .meta{color:#666}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f3f3f3;border-bottom:1px solid #ccc} td{border-bottom:1px solid #eee} td.n{text-align:right}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0} .card{border:1px solid #ddd;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:20px} .charts{display:flex;flex-wrap:wrap;gap:16px}
.chart-title{font-size:13px;font-weight:600} .tick{font-size:11px;fill:#555} .grid{stroke:#e5e5e5}
.node-label{font-size:12px;font-weight:600} .node-detail{font-size:10.5px;fill:#555}
.edge{fill:none;stroke:#999;stroke-width:1.4} .empty{color:#888;font-style:italic} .scroll{overflow-x:auto}
"""


def report_html(store, *, commits: int = 30) -> str:
    """The page for ``store`` as it is now (its newest version)."""
    state = store.state()
    lags = lag_rows(state)
    runs = history_rows(state)
    recent = recent_commits(store.log, commits)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = [f"<h1>ddcli store report</h1><p class=\"meta\">{escape(store.path)} · version {state.version} · "
            f"made {escape(now)}</p>", _cards(state), "<h2>Lineage</h2>",
            "<p class=\"meta\">input traces → pipelines → output traces → readers (hover for details)</p>",
            f'<div class="scroll">{lineage_svg(_lineage(state))}</div>',
            "<h2>Traces</h2>", _traces(state), "<h2>Pipelines</h2>", _pipelines(state, lags), _readers(state),
            "<h2>Run history</h2>", _history(runs), "<h2>Lag</h2>", _lag(lags, recent),
            "<h2>Recent commits</h2>", _commits(recent)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>ddcli report: {escape(store.path)}</title><style>{STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset(), cls: str = "") -> str:
    if not rows:
        return '<p class="empty">None.</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{_cell(v)}</td>'
                                    for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    return escape(str(v))


def _readers_of(state) -> list[tuple[str, str]]:
    """``(reader, trace)`` for every named reader (``ddcli changes``) of every trace."""
    return [(r["reader"], r["trace"]) for r in reader_rows(state)]


def _cards(state) -> str:
    user = [t for n, t in state.traces.items() if "." not in n]
    cards = [("traces", len(user)), ("pipelines", len(state.pipelines)), ("readers", len(_readers_of(state))),
             ("rows", sum(t.rows() for t in state.traces.values())),
             ("bytes", sum(t.bytes() for t in state.traces.values()))]
    return '<div class="cards">' + "".join(f'<div class="card"><b>{v:,}</b>{k}</div>' for k, v in cards) + "</div>"


def _lineage(state) -> Graph:
    g = Graph()
    for name, t in state.traces.items():
        if "." not in name:
            g.add(Node(f"trace:{name}", name, "trace", f"{t.rows():,} rows · upper {format_frontier(t.upper)}"))
    for name, rec in state.pipelines.items():
        if not isinstance(rec, dict):
            continue
        runs = rec.get("runs", 0)
        g.add(Node(f"pipeline:{name}", name, "pipeline", f"{runs} run{'s' if runs != 1 else ''}"))
        for i in rec.get("inputs") or {}:
            g.link(f"trace:{i}", f"pipeline:{name}")
        for o in rec.get("outputs") or []:
            g.link(f"pipeline:{name}", f"trace:{o}")
    for reader, trace in _readers_of(state):
        g.add(Node(f"reader:{reader}", reader, "reader", "reader"))
        g.link(f"trace:{trace}", f"reader:{reader}")
    return g


def _traces(state) -> str:
    rows = []
    for name, t in sorted(state.traces.items(), key=lambda kv: ("." in kv[0], kv[0])):
        kind = f"state of {t.owner}" if "." in name else (f"output of {t.owner}" if t.owner else "input")
        rows.append([name, kind, ", ".join(t.schema.names), ", ".join(t.key), t.d, format_frontier(t.since),
                     format_frontier(t.upper), len(t.layers), sum(l.rows for l in t.pending), t.rows(), t.bytes(),
                     " ".join(f"{h}@{format_frontier(x.since)}" for h, x in sorted(t.holds.items()))])
    return _table(["trace", "kind", "columns", "key", "d", "since", "upper", "layers", "pending rows", "rows",
                   "bytes", "holds"], rows, {4, 7, 8, 9, 10}, "traces")


def _pipelines(state, lags: list[dict]) -> str:
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if not isinstance(rec, dict):
            continue
        st = [state.traces[s] for s in rec.get("state") or [] if s in state.traces]
        waiting = sum(r["updates"] for r in lags if r["pipeline"] == name)
        d = rec.get("d", 1)
        frontier = format_frontier(Frontier.from_json(rec["frontier"], d)) if "frontier" in rec else None
        rows.append([name, rec.get("file"), rec.get("runs", 0), frontier, ", ".join(sorted(rec.get("inputs") or {})),
                     ", ".join(rec.get("outputs") or []), len(st), sum(t.rows() for t in st),
                     sum(t.bytes() for t in st), waiting])
    return _table(["pipeline", "file", "runs", "complete up to", "inputs", "outputs", "state traces", "state rows",
                   "state bytes", "updates waiting"], rows, {2, 6, 7, 8, 9}, "pipelines")


def _readers(state) -> str:
    found = reader_rows(state)
    if not found:
        return ""
    rows = [[r["reader"], r["trace"], r["position"] or "new", r["upper"], r["updates"], r["holds_since"]]
            for r in found]
    return "<h3>Readers</h3>" + _table(["reader", "trace", "position", "upper", "updates not acknowledged",
                                        "holds history at"], rows, {4}, "readers")


def _history(runs: list[dict]) -> str:
    if not runs:
        return '<p class="empty">No runs kept yet (a run keeps its figures from this version of ddcli on).</p>'
    out = []
    for name in sorted({r["pipeline"] for r in runs}):
        mine = [r for r in runs if r["pipeline"] == name]
        labels = [str(r["run"]) for r in mine]
        out.append(f"<h3>{escape(name)}</h3><div class=\"charts\">")
        out.append(bar_chart(f"{name}: seconds per run", labels, [float(r["seconds"] or 0) for r in mine], "seconds"))
        out.append(line_chart(f"{name}: updates per run", {
            "rows in": [(r["run"], r["rows_in"] or 0) for r in mine],
            "rows out": [(r["run"], r["rows_out"] or 0) for r in mine]}, "updates", "run"))
        out.append("</div>")
        rows = [[r["run"], r["when"], r["seconds"], r["rows_in"], r["rows_out"], r["spark_jobs"], r["frontier"]]
                for r in mine[::-1][:10]]
        out.append(_table(["run", "when", "seconds", "rows in", "rows out", "Spark jobs", "complete up to"],
                          rows, {0, 2, 3, 4, 5}, "runs"))
    return "".join(out)


def _lag(lags: list[dict], recent: list[dict]) -> str:
    out = []
    series: dict[str, list[tuple[float, float]]] = {}
    for c in recent[::-1]:
        for p, n in c["lag"].items():
            series.setdefault(p, []).append((c["version"], n))
    if series:
        out.append('<div class="charts">' + line_chart("sealed input updates waiting for each pipeline, by version",
                                                        series, "updates", "version") + "</div>")
    rows = [[r["pipeline"], r["input"], r["consumed"], r["upper"], r["updates"], r["layers"], r["pending"],
             "yes" if r["holds_back"] else ""] for r in lags]
    out.append(_table(["pipeline", "input", "consumed up to", "input upper", "updates waiting", "layers waiting",
                       "pending beyond upper", "holds it back"], rows, {4, 5, 6}, "lag"))
    return "".join(out)


def _commits(recent: list[dict]) -> str:
    rows = [[c["version"], c["when"], c["change"]] for c in recent]
    return _table(["version", "when (UTC)", "what changed"], rows, {0}, "commits")
