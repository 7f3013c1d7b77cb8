"""Inline SVG charts for the HTML report, drawn from data with no library and no script.

The invariant: a chart is a pure function of its data, one ``<svg>`` element whose marks carry
their values (a ``<title>`` per bar or point, shown as a tooltip by every browser), so the page
needs no network, no JavaScript and no fonts beyond the browser's own, and a test can count the
marks in the rendered DOM (``class="bar"``, ``class="point"``). Every text is XML-escaped.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

WIDTH, HEIGHT = 760, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 24, 42


def _fmt(value: float) -> str:
    """A compact axis number: 1234567 -> 1.2M."""
    v = abs(value)
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


def _scale(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(0.0, *values), max(0.0, *values)
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def _frame(title: str, name: str, lo: float, hi: float, labels: Sequence[str], xs: Sequence[float],
           inner: list[str], width: int) -> str:
    """Axes, ticks, thinned x labels and the title around the marks ``inner``."""
    plot_h = HEIGHT - _TOP - _BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(name)}" '
           f'viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}" role="img" '
           f'aria-label="{escape(title)}">',
           f'<text class="title" x="{_LEFT}" y="15">{escape(title)}</text>']
    for i in range(5):
        value = lo + (hi - lo) * i / 4
        y = _TOP + plot_h - plot_h * i / 4
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(value)}</text>')
    step = max(1, -(-len(labels) * 90 // width))  # a label per ~90 px at most
    for i in range(0, len(labels), step):
        out.append(f'<text class="tick" x="{xs[i]:.1f}" y="{HEIGHT - _BOTTOM + 16}" '
                   f'text-anchor="middle">{escape(labels[i])}</text>')
    out += inner
    out.append(f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_TOP + plot_h}"/>')
    out.append("</svg>")
    return "\n".join(out)


class _Plot:
    """The geometry shared by the charts: a value scale from 0 (or the lowest value) to the
    highest, and one slot per label."""

    def __init__(self, labels: Sequence[str], values: Sequence[float | None], width: int):
        self.lo, self.hi = _scale([float(v) for v in values if v is not None] or [0.0])
        self.h = HEIGHT - _TOP - _BOTTOM
        self.slot = (width - _LEFT - _RIGHT) / len(labels)
        self.xs = [_LEFT + self.slot * (i + 0.5) for i in range(len(labels))]

    def y(self, value: float) -> float:
        return _TOP + self.h - self.h * (float(value) - self.lo) / (self.hi - self.lo)


def bar_chart(title: str, name: str, labels: Sequence[str], values: Sequence[float | None],
              width: int = WIDTH) -> str:
    """One bar per label (a missing value draws nothing but keeps its slot)."""
    if not labels:
        return empty(title, name, width=width)
    plot = _Plot(labels, values, width)
    zero, marks = plot.y(0), []
    for x, label, value in zip(plot.xs, labels, values):
        if value is None:
            continue
        y = plot.y(value)
        top, height = min(y, zero), max(abs(zero - y), 0.5)
        marks.append(f'<rect class="bar" x="{x - plot.slot * 0.4:.1f}" y="{top:.1f}" '
                     f'width="{max(plot.slot * 0.8, 0.5):.1f}" height="{height:.1f}">'
                     f'<title>{escape(label)}: {escape(str(value))}</title></rect>')
    return _frame(title, name, plot.lo, plot.hi, labels, plot.xs, marks, width)


def line_chart(title: str, name: str, labels: Sequence[str], values: Sequence[float | None],
               width: int = WIDTH) -> str:
    """A polyline through the known values, with a point (and its tooltip) at each."""
    if not labels:
        return empty(title, name, width=width)
    plot = _Plot(labels, values, width)
    points, marks = [], []
    for x, label, value in zip(plot.xs, labels, values):
        if value is None:
            continue
        points.append(f"{x:.1f},{plot.y(value):.1f}")
        marks.append(f'<circle class="point" cx="{x:.1f}" cy="{plot.y(value):.1f}" r="3">'
                     f'<title>{escape(label)}: {escape(str(value))}</title></circle>')
    line = [f'<polyline class="line" fill="none" points="{" ".join(points)}"/>'] if len(points) > 1 else []
    return _frame(title, name, plot.lo, plot.hi, labels, plot.xs, line + marks, width)


def empty(title: str, name: str, why: str = "no data", width: int = WIDTH) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart empty" data-chart="{escape(name)}" '
            f'viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}"><text class="title" x="{_LEFT}" y="15">'
            f'{escape(title)}</text><text class="tick" x="{_LEFT}" y="40">{escape(why)}</text></svg>')
