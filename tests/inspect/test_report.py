"""The report page without Spark or a browser: self-contained by construction, every trace
and reader in its lineage graph, edges that all point downstream, ticks that cover the
data. (tests/inspect/test_after_runs.py opens a page of a store that ran in Chromium.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ddcli.report.charts import bar_chart, line_chart, nice_ticks
from ddcli.report.lineage import Graph, Node, lineage_svg
from storage.lattice import Frontier
from storage.state.transitions import with_hold
from tests.helpers.cli import cli, ok, one_line_error, write


class Tags(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse(html: str) -> list[tuple[str, dict]]:
    p = Tags()
    p.feed(html)
    return p.tags


def test_the_page_names_every_trace_and_reader_and_loads_nothing(tmp_path, store_dir):
    ok(cli(store_dir, "ingest", "words", write(tmp_path / "w.csv", "word,time\na,1\nb,2\n")))
    ok(cli(store_dir, "ingest", "prices", write(tmp_path / "p.csv", "item,price,time\nx,3,1\n")))
    ok(cli(store_dir, "changes", "words", "--reader", "audit", "--format", "csv", "--ack"))
    page = tmp_path / "r.html"
    out = ok(cli(store_dir, "report", "-o", str(page))).stdout
    assert out.startswith(f"wrote {page}")
    html = page.read_text()
    tags = parse(html)
    assert not [t for t, _ in tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    urls = [v for _, a in tags for k, v in a.items() if k in ("src", "href", "action", "xlink:href")]
    assert urls == [], urls
    outside = html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # a name, never fetched
    assert "://" not in outside and not re.search(r"[\"'(]//", outside), "no address outside the page"
    [csp] = [a["content"] for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp
    nodes = {a["data-id"] for t, a in tags if t == "g" and "node" in a.get("class", "")}
    assert nodes == {"trace:words", "trace:prices", "reader:audit"}
    assert "No runs kept yet" in html and "words created (+2 rows)" in html


def test_an_output_inside_the_store_is_refused(store_dir, tmp_path):
    ok(cli(store_dir, "ingest", "words", write(tmp_path / "w.csv", "word,time\na,1\n")))
    err = one_line_error(cli(store_dir, "report", "-o", f"{store_dir}/r.html"))
    assert "inside the store" in err


def test_lineage_layers_point_every_edge_downstream():
    g = Graph()
    for n, kind in [("a", "trace"), ("P", "pipeline"), ("b", "trace"), ("Q", "pipeline"), ("c", "trace"),
                    ("d", "trace"), ("r", "reader")]:
        g.add(Node(n, n, kind))
    for e in [("a", "P"), ("P", "b"), ("b", "Q"), ("d", "Q"), ("Q", "c"), ("a", "r")]:
        g.link(*e)
    svg = lineage_svg(g)
    assert svg.count('class="edge"') == 6 and svg.count("<g class=\"node") == 7
    assert all(g.nodes[a].x + g.nodes[a].w < g.nodes[b].x for a, b in g.edges)
    assert [g.nodes[n].layer for n in "aPbQc"] == [0, 1, 2, 3, 4] and g.nodes["d"].layer == 0


def test_chart_ticks_cover_the_data_and_each_value_is_drawn():
    for top in (0, 0.3, 7, 12, 99, 1001, 123456):
        ticks = nice_ticks(top)
        assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 7
    bars = bar_chart("s", ["1", "2", "3"], [1.5, 0.0, 4.0], "seconds")
    assert bars.count("<rect") == 3
    lines = line_chart("u", {"in": [(1, 5), (2, 7)], "out": [(1, 1), (2, 0)]}, "updates", "run")
    assert lines.count("<polyline") == 2 and lines.count("<circle") == 4


def test_a_commit_is_described_by_what_changed_between_two_states():
    import pyarrow as pa

    from storage.layer import Layer
    from storage.state.changes import describe
    from storage.state.trace import Trace
    from storage.state.transitions import State

    def f(t):
        return Frontier([(t,)], 1)

    def layer(lid, rows):
        return Layer(lid, [], f(0), f(1), f(0), 0, 1, rows, 8 * rows)

    t = Trace("t", pa.schema([("w", pa.string())]), ["w"], 1, f(0), f(3), [layer("a", 3), layer("b", 2)])
    s1 = State(1, {"t": t}, {"p": {"runs": 1}})
    merged = State(2, {"t": t.with_(layers=[layer("c", 5)])}, {"p": {"runs": 1}})
    assert describe(s1, merged) == "t 2 layers merged into 1"
    sealed = State(2, {"t": t.with_(layers=t.layers + [layer("d", 4)], upper=f(5), since=f(2))}, {"p": {"runs": 1}})
    assert describe(s1, sealed) == "t +4 rows, upper 5, since 2"
    held = with_hold(t, "p", f(3), 1)
    ran = State(2, {"t": held, "o": t.with_(name="o", owner="p")}, {"p": {"runs": 2}})
    assert describe(s1, ran) == "run 2 of pipeline p: o created (+5 rows), t held by p at 3"
    assert describe(ran, State(3, {"t": t}, {})) == "drop pipeline p: o removed, t released by p"
    assert describe(None, s1) == "the oldest version kept: 1 trace, 1 pipeline"
