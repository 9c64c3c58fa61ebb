"""The store's lineage as an inline SVG picture: input traces -> pipelines -> output traces
-> the pipelines and readers downstream.

Laid out in layers, as Sugiyama's method does in its simplest form: every node sits one
layer right of the furthest node it depends on (so every edge points right), nodes of a
layer are ordered by the mean position of their neighbours in the layer before (a few
sweeps, which removes most crossings of a small graph), then placed in columns and rows.
Edges are curves from the right side of a node to the left side of the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

KINDS = {"trace": ("#e8f0fb", "#3b6fb6"), "pipeline": ("#fdf0e6", "#e07b39"), "reader": ("#e9f6ee", "#3a9a5b")}
ROW, GAP_X, PAD = 54, 70, 16  # row height, space between columns, margin
CHAR = 7.2  # width of a character of the 12px font, for the boxes' widths


@dataclass
class Node:
    id: str  # unique: "trace:words", "pipeline:wordcount", "reader:audit"
    label: str
    kind: str  # "trace", "pipeline" or "reader"
    detail: str = ""  # a second, smaller line
    layer: int = 0
    order: float = 0.0
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)

    def add(self, node: Node) -> None:
        self.nodes.setdefault(node.id, node)

    def link(self, a: str, b: str) -> None:
        if a in self.nodes and b in self.nodes and (a, b) not in self.edges:
            self.edges.append((a, b))


def _layers(g: Graph) -> list[list[Node]]:
    """Longest-path layers (a cycle, which a store cannot hold, is cut after a bound)."""
    preds: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b in g.edges:
        preds[b].append(a)
    for _ in range(len(g.nodes)):
        moved = False
        for n, ps in preds.items():
            want = max((g.nodes[p].layer + 1 for p in ps), default=0)
            if want > g.nodes[n].layer:
                g.nodes[n].layer, moved = want, True
        if not moved:
            break
    layers: list[list[Node]] = [[] for _ in range(1 + max((n.layer for n in g.nodes.values()), default=0))]
    for n in sorted(g.nodes.values(), key=lambda n: n.id):
        layers[n.layer].append(n)
    return layers


def _order(g: Graph, layers: list[list[Node]]) -> None:
    """Order each layer by the mean row of its neighbours in the layer before, and back."""
    for i, layer in enumerate(layers):
        for j, n in enumerate(layer):
            n.order = j
    neighbours: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b in g.edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    for sweep in range(4):
        seq = layers[1:] if sweep % 2 == 0 else layers[-2::-1]
        for layer in seq:
            for n in layer:
                near = [g.nodes[m].order for m in neighbours[n.id] if g.nodes[m].layer != n.layer]
                n.order = sum(near) / len(near) if near else n.order
            layer.sort(key=lambda n: n.order)
            for j, n in enumerate(layer):
                n.order = j


def lineage_svg(g: Graph) -> str:
    """The graph laid out and drawn (an empty store: a sentence instead)."""
    if not g.nodes:
        return '<p class="empty">No traces yet.</p>'
    layers = _layers(g)
    _order(g, layers)
    x = PAD
    rows = max(len(l) for l in layers)
    for layer in layers:
        width = max(max(len(n.label), len(n.detail) * 0.85) * CHAR + 24 for n in layer)
        offset = (rows - len(layer)) * ROW / 2  # centre short layers
        for j, n in enumerate(layer):
            n.x, n.y, n.w = x, PAD + offset + j * ROW, width
        x += width + GAP_X
    width, height = x - GAP_X + PAD, PAD * 2 + rows * ROW - 12
    parts = ['<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>']
    for a, b in g.edges:
        s, t = g.nodes[a], g.nodes[b]
        x1, y1, x2, y2 = s.x + s.w, s.y + 21, t.x, t.y + 21
        mid = (x1 + x2) / 2
        parts.append(f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} '
                     f'{x2:.1f},{y2:.1f}" marker-end="url(#arrow)"/>')
    for n in g.nodes.values():
        fill, stroke = KINDS[n.kind]
        shape = (f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w:.1f}" height="42" rx="{21 if n.kind == "reader" else 6}" '
                 f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>')
        text = (f'<text x="{n.x + 12:.1f}" y="{n.y + 18:.1f}" class="node-label">{escape(n.label)}</text>'
                f'<text x="{n.x + 12:.1f}" y="{n.y + 33:.1f}" class="node-detail">{escape(n.detail)}</text>')
        parts.append(f'<g class="node {n.kind}" data-id="{escape(n.id)}"><title>{escape(n.kind)} {escape(n.label)}'
                     f'</title>{shape}{text}</g>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="lineage" role="img" aria-label="lineage of the store" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">'
            + "".join(parts) + "</svg>")
