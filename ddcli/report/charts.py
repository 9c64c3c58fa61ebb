"""Small charts as inline SVG: bars for one figure per run, lines for figures over time.

A report page must fetch nothing, so its pictures are SVG text in the page itself, drawn
here with a few rectangles, polylines and labels: an axis with round ticks, one colour per
series, a legend. Values are numbers >= 0 (seconds, rows, updates).
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 40  # margins around the plot area
COLOURS = ["#3b6fb6", "#e07b39", "#3a9a5b", "#b5465e", "#7d5ba6", "#8c6d31", "#4a9bb0", "#c0a030"]


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _frame(title: str, ticks: list[float], unit: str, y) -> list[str]:
    """The chart's title, horizontal grid lines and tick labels."""
    parts = [f'<text x="{LEFT}" y="16" class="chart-title">{escape(title)}</text>']
    for t in ticks:
        py = y(t)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end" class="tick">{_fmt(t)}</text>')
    parts.append(f'<text x="12" y="{TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f}" class="tick" '
                 f'transform="rotate(-90 12 {TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f})" '
                 f'text-anchor="middle">{escape(unit)}</text>')
    return parts


def _svg(parts: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{escape(label)}" '
            f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">' + "".join(parts) + "</svg>")


def bar_chart(title: str, labels: list[str], values: list[float], unit: str) -> str:
    """One bar per label (e.g. per run)."""
    ticks = nice_ticks(max(values, default=0))
    top = ticks[-1] or 1
    plot_h = HEIGHT - TOP - BOTTOM
    y = lambda v: TOP + plot_h * (1 - v / top)  # noqa: E731
    parts = _frame(title, ticks, unit, y)
    n = max(1, len(values))
    slot = (WIDTH - LEFT - RIGHT) / n
    every = max(1, math.ceil(n / 12))  # at most a dozen labels under the axis
    for i, (label, v) in enumerate(zip(labels, values)):
        x = LEFT + i * slot + slot * 0.15
        parts.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{slot * 0.7:.1f}" height="{max(0.0, plot_h - (y(v) - TOP)):.1f}" '
                     f'fill="{COLOURS[0]}"><title>{escape(label)}: {v:g} {escape(unit)}</title></rect>')
        if i % every == 0:
            parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" '
                         f'class="tick">{escape(label)}</text>')
    return _svg(parts, title)


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], unit: str, x_label: str) -> str:
    """One line per series of ``(x, y)`` points (x: a run or a version number)."""
    points = [p for pts in series.values() for p in pts]
    ticks = nice_ticks(max((p[1] for p in points), default=0))
    top = ticks[-1] or 1
    xs = [p[0] for p in points] or [0, 1]
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1
    plot_h = HEIGHT - TOP - BOTTOM
    y = lambda v: TOP + plot_h * (1 - v / top)  # noqa: E731
    x = lambda v: LEFT + (WIDTH - LEFT - RIGHT) * ((v - lo) / span if hi > lo else 0.5)  # noqa: E731
    parts = _frame(title, ticks, unit, y)
    for v in sorted({round(lo + (hi - lo) * k / 4) for k in range(5)}):  # x values are whole numbers
        parts.append(f'<text x="{x(v):.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" class="tick">'
                     f'{_fmt(round(v))}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end" class="tick">{escape(x_label)}</text>')
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in sorted(pts))
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for a, b in pts:
            parts.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(name)}: {b:g} at {a:g}</title></circle>')
        parts.append(f'<rect x="{LEFT + 130 * i}" y="22" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{LEFT + 14 + 130 * i}" y="31" class="tick">{escape(name[:18])}</text>')
    return _svg(parts, title)
