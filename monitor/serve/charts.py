"""Charts for the web pages as inline SVG, drawn on the server (pure): no JavaScript, no asset.

Every chart is zero-based, with a labelled value axis and its ticks, the first and last
points labelled on the time axis, and each series named in a legend and at its line's end: a
drop from 309 to 282 URLs is drawn as the 9% it is, not as a cliff. A screen reader gets the
numbers as the chart's title and a table (``<desc>``). Each chart is drawn twice, for a wide
box and for a phone's (``SIZES``), as a drawing scaled to a phone's width would shrink its
text to 7 px; the stylesheet shows the one that fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["COLOURS", "NARROW", "SIZES", "WIDE", "Size", "bars", "lines", "sparkline", "ticks"]

# Colours a person tells apart (and with a legend, not by colour alone).
COLOURS = ("#1a56b8", "#b3261e", "#1e7b34", "#8a5a00", "#6b3fa0", "#00796b", "#c2185b",
           "#455a64", "#ef6c00", "#5d4037", "#7cb342")
_GLYPH = 0.62  # a digit's or letter's width, in font sizes: room for a label


@dataclass(frozen=True, slots=True)
class Size:
    """A chart's drawing, in its own units: the stylesheet shows the wide one where it is
    drawn at least ``width`` px wide, the narrow one (a phone) elsewhere. Each is scaled to
    its box, so its text is read at ``font`` times that scale: 11 px or more either way."""

    name: str  # its CSS class beside "chart" ("" for the wide one)
    width: int
    height: int
    font: int
    time_labels: int  # points labelled on the time axis: 2 (first, last) or 3 (and the middle)
    bar_totals: int  # a bar's total is written on top up to this many bars
    right: int = 12

    @property
    def top(self) -> int:
        """The room above the plot: the value axis's title."""
        return 2 * self.font + 4

    @property
    def bottom(self) -> int:
        """The room below the plot: the time labels and the time axis's title."""
        return 2 * self.font + 18


WIDE = Size("", 640, 220, 11, time_labels=3, bar_totals=40)
NARROW = Size("narrow", 360, 250, 12, time_labels=2, bar_totals=12)
SIZES = (WIDE, NARROW)


def ticks(high: float, count: int = 4) -> list[int]:
    """Round values from 0 to at least ``high`` for a value axis (0, 50, 100, 150...)."""
    if high <= 0:
        return [0, 1]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    step = max(1, math.ceil(step))
    top = math.ceil(high / step) * step
    return list(range(0, top + 1, step))


def _number(value: float) -> str:
    return f"{int(value):,}"


def _left(size: Size, scale: list[int]) -> float:
    """Where the plot starts: right of the widest value tick."""
    return max(4.0 * size.font, 10 + len(_number(scale[-1])) * size.font * _GLYPH)


def _frame(size: Size, title: str, axis: str, scale: list[int], labels: Sequence[str],
           x_of: list[float], left: float) -> list[str]:
    """The axes, the value ticks with grid lines, the first and last time labels."""
    top = scale[-1] or 1
    inner = size.height - size.top - size.bottom
    right = size.width - size.right
    parts = [f'<text x="4" y="{size.top - size.font - 3}" class="axis-title">'
             f"{escape(axis)}</text>"]
    for value in scale:
        y = size.top + inner - value / top * inner
        parts.append(f'<line x1="{left:.1f}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" '
                     'class="grid"/>')
        parts.append(f'<text x="{left - 6:.1f}" y="{y + size.font / 3:.1f}" '
                     f'text-anchor="end">{_number(value)}</text>')
    base = size.top + inner
    parts.append(f'<line x1="{left:.1f}" x2="{right}" y1="{base}" y2="{base}" class="axis"/>')
    parts.append(f'<line x1="{left:.1f}" x2="{left:.1f}" y1="{size.top}" y2="{base}" '
                 'class="axis"/>')
    if labels:
        last = len(labels) - 1
        picks = sorted({0, last} | ({last // 2} if size.time_labels > 2 else set()))
        for i in picks:
            anchor = "start" if i == 0 else ("end" if i == last else "middle")
            parts.append(f'<text x="{x_of[i]:.1f}" y="{base + size.font + 5}" '
                         f'text-anchor="{anchor}">{escape(labels[i])}</text>')
    parts.append(f'<text x="{(left + right) / 2:.0f}" y="{size.height - 4}" '
                 f'text-anchor="middle" class="axis-title">{escape(title)}</text>')
    return parts


def _legend(names: Sequence[str], totals: Mapping[str, int] | None = None) -> str:
    items = []
    for i, name in enumerate(names):
        value = "" if totals is None else f" {_number(totals[name])}"
        # An SVG swatch: its fill is a presentation attribute, which the pages'
        # Content-Security-Policy allows, where a style="" attribute is refused.
        items.append('<span class="key"><svg class="swatch" viewBox="0 0 10 10" '
                     f'aria-hidden="true"><rect width="10" height="10" '
                     f'fill="{COLOURS[i % len(COLOURS)]}"/></svg>{escape(name)}{value}</span>')
    return f'<p class="legend">{"".join(items)}</p>'


def _svg(size: Size, label: str, parts: list[str], desc: str) -> str:
    # The text's size is a presentation attribute, in the drawing's units, so it scales
    # with the drawing (the stylesheet sets none).
    kind = f"chart {size.name}".strip()
    return (f'<svg class="{kind}" viewBox="0 0 {size.width} {size.height}" '
            f'font-size="{size.font}" role="img" aria-label="{escape(label)}">'
            f"<title>{escape(label)}</title><desc>{escape(desc)}</desc>{''.join(parts)}</svg>")


def _end_labels(size: Size, ends: list[tuple[float, str, str]]) -> list[float]:
    """The heights of the lines' last values (each at its line's end when it can be), bottom
    up and at least a line of text apart, moved down together when the top one would leave
    the drawing."""
    gap = size.font + 2
    placed: list[float] = []
    for y, _colour, _text in ends:
        placed.append(min(y, placed[-1] - gap) if placed else y)
    overflow = size.font - min(placed, default=size.font)
    return [y + overflow for y in placed] if overflow > 0 else placed


def lines(series: Mapping[str, Sequence[int]], labels: Sequence[str], *, label: str,
          axis: str, title: str) -> str:
    """A line per series over the points of ``labels`` (oldest first), from zero up, each
    line's last value written at its end with the series' name: a drawing for wide screens
    and one for narrow ones, and their legend."""
    names = [name for name, values in series.items() if values]
    if not labels or not names:
        return ""
    desc = "; ".join(f"{name}: " + ", ".join(_number(v) for v in series[name]) for name in names)
    drawn = "".join(_svg(size, label, _line_parts(size, series, names, labels, axis, title),
                         desc) for size in SIZES)
    return drawn + _legend(names, {n: series[n][-1] for n in names})


def _line_parts(size: Size, series: Mapping[str, Sequence[int]], names: list[str],
                labels: Sequence[str], axis: str, title: str) -> list[str]:
    count = len(labels)
    high = max(max(series[name]) for name in names)
    scale = ticks(high)
    left = _left(size, scale)
    inner_w = size.width - left - size.right
    inner_h = size.height - size.top - size.bottom
    x_of = [left + (i / (count - 1) * inner_w if count > 1 else inner_w / 2)
            for i in range(count)]
    parts = _frame(size, title, axis, scale, labels, x_of, left)
    ends = []
    for n, name in enumerate(names):
        colour = COLOURS[n % len(COLOURS)]
        points = [(x_of[i], size.top + inner_h - v / scale[-1] * inner_h)
                  for i, v in enumerate(series[name])]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
        last_x, last_y = points[-1]
        parts.append(f'<circle cx="{last_x:.1f}" cy="{last_y:.1f}" r="3" fill="{colour}"/>')
        ends.append((last_y - 6, colour, f"{name} {_number(series[name][-1])}"))
    ends.sort(reverse=True)  # bottom up
    for y, (_, colour, text) in zip(_end_labels(size, ends), ends, strict=True):
        parts.append(f'<text x="{x_of[-1] - 6:.1f}" y="{y:.1f}" text-anchor="end" '
                     f'class="value" fill="{colour}">{escape(text)}</text>')
    return parts


def bars(stacks: Sequence[Mapping[str, int]], labels: Sequence[str], names: Sequence[str], *,
         label: str, axis: str, title: str) -> str:
    """A stacked bar per point (oldest first), each of the ``names`` a colour, from zero up:
    a drawing for wide screens and one for narrow ones, and their legend."""
    if not labels:
        return ""
    shown = [name for name in names if any(s.get(name) for s in stacks)]
    desc = "; ".join(f"{labels[i]}: " + ", ".join(f"{n} {s.get(n, 0)}" for n in shown)
                     for i, s in enumerate(stacks))
    drawn = "".join(_svg(size, label, _bar_parts(size, stacks, labels, shown, axis, title),
                         desc) for size in SIZES)
    totals = {name: sum(s.get(name, 0) for s in stacks) for name in shown}
    return drawn + _legend(shown, totals)


def _bar_parts(size: Size, stacks: Sequence[Mapping[str, int]], labels: Sequence[str],
               shown: list[str], axis: str, title: str) -> list[str]:
    count = len(labels)
    high = max((sum(s.get(n, 0) for n in shown) for s in stacks), default=0)
    scale = ticks(high)
    left = _left(size, scale)
    inner_w = size.width - left - size.right
    inner_h = size.height - size.top - size.bottom
    slot = inner_w / count
    width = max(1.0, min(slot * 0.7, 40))
    x_of = [left + slot * (i + 0.5) for i in range(count)]
    parts = _frame(size, title, axis, scale, labels, x_of, left)
    for i, stack in enumerate(stacks):
        y = float(size.top + inner_h)
        total = 0
        for n, name in enumerate(shown):
            value = stack.get(name, 0)
            if not value:
                continue
            height = value / scale[-1] * inner_h
            y -= height
            total += value
            parts.append(f'<rect x="{x_of[i] - width / 2:.1f}" y="{y:.1f}" width="{width:.1f}" '
                         f'height="{height:.1f}" fill="{COLOURS[n % len(COLOURS)]}">'
                         f'<title>{escape(labels[i])}: {escape(name)} {_number(value)}</title>'
                         '</rect>')
        if total and count <= size.bar_totals:
            parts.append(f'<text x="{x_of[i]:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                         f'class="value">{_number(total)}</text>')
    return parts


def sparkline(values: Sequence[int], width: int = 120, height: int = 28) -> str:
    """A small line of the values from zero up, its last value written beside it."""
    if len(values) < 2:
        return ""
    high = max(values) or 1
    plot = width - 44  # room for the last value
    step = plot / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - v / high * (height - 6):.1f}"
                      for i, v in enumerate(values))
    last_y = height - 2 - values[-1] / high * (height - 6)
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="URLs over the last {len(values)} snapshots, from zero: {values[0]} '
            f'to {values[-1]}"><line x1="0" x2="{plot}" y1="{height - 2}" y2="{height - 2}" '
            f'class="axis"/><polyline fill="none" stroke="currentColor" stroke-width="1.5" '
            f'points="{points}"/><text x="{plot + 4}" '
            f'y="{min(height - 3.0, max(10.0, last_y + 4)):.1f}" '
            f'class="value">{_number(values[-1])}</text></svg>')
