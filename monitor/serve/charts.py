"""Charts for the web pages as inline SVG, drawn on the server (pure): no JavaScript, no asset.

Every chart is zero-based, with a labelled value axis and its ticks, the first and last
points labelled on the time axis, and each series named in a legend: a drop from 309 to 282
URLs is drawn as the 9% it is, not as a cliff. A screen reader gets the numbers as the
chart's title and a table (``<desc>``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["COLOURS", "bars", "lines", "sparkline", "ticks"]

# Colours a person tells apart (and with a legend, not by colour alone).
COLOURS = ("#1a56b8", "#b3261e", "#1e7b34", "#8a5a00", "#6b3fa0", "#00796b", "#c2185b",
           "#455a64", "#ef6c00", "#5d4037", "#7cb342")
_W, _H = 640, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 26, 40
_LABEL_GAP = 12  # the least distance between two series' last values, so both can be read


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


def _frame(title: str, axis: str, scale: list[int], labels: Sequence[str],
           x_of: list[float]) -> list[str]:
    """The axes, the value ticks with grid lines, the first and last time labels."""
    top = scale[-1] or 1
    inner = _H - _TOP - _BOTTOM
    parts = [f'<text x="4" y="{_TOP - 14}" class="axis-title">{escape(axis)}</text>']
    for value in scale:
        y = _TOP + inner - value / top * inner
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'class="grid"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{_number(value)}</text>')
    base = _TOP + inner
    parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{base}" y2="{base}" class="axis"/>')
    parts.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{base}" class="axis"/>')
    if labels:
        picks = sorted({0, len(labels) - 1, (len(labels) - 1) // 2})
        for i in picks:
            anchor = "start" if i == 0 else ("end" if i == len(labels) - 1 else "middle")
            parts.append(f'<text x="{x_of[i]:.1f}" y="{base + 16}" text-anchor="{anchor}">'
                         f'{escape(labels[i])}</text>')
    parts.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2:.0f}" y="{_H - 4}" '
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


def _svg(label: str, parts: list[str], desc: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" '
            f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
            f'<desc>{escape(desc)}</desc>{"".join(parts)}</svg>')


def lines(series: Mapping[str, Sequence[int]], labels: Sequence[str], *, label: str,
          axis: str, title: str) -> str:
    """A line per series over the points of ``labels`` (oldest first), from zero up."""
    names = [name for name, values in series.items() if values]
    count = len(labels)
    if count == 0 or not names:
        return ""
    high = max(max(values) for values in series.values() if values)
    scale = ticks(high)
    inner_w, inner_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    x_of = [_LEFT + (i / (count - 1) * inner_w if count > 1 else inner_w / 2)
            for i in range(count)]
    parts = _frame(title, axis, scale, labels, x_of)
    ends = []
    for n, name in enumerate(names):
        colour = COLOURS[n % len(COLOURS)]
        points = [(x_of[i], _TOP + inner_h - v / scale[-1] * inner_h)
                  for i, v in enumerate(series[name])]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
        last_x, last_y = points[-1]
        parts.append(f'<circle cx="{last_x:.1f}" cy="{last_y:.1f}" r="3" fill="{colour}"/>')
        ends.append((last_y - 6, colour, series[name][-1]))
    placed: list[float] = []
    for y, colour, value in sorted(ends, reverse=True):  # bottom up, each above the last
        y = min(y, placed[-1] - _LABEL_GAP) if placed else y
        placed.append(y)
        parts.append(f'<text x="{x_of[-1] - 6:.1f}" y="{y:.1f}" text-anchor="end" '
                     f'class="value" fill="{colour}">{_number(value)}</text>')
    desc = "; ".join(f"{name}: " + ", ".join(_number(v) for v in series[name]) for name in names)
    return _svg(label, parts, desc) + _legend(names, {n: series[n][-1] for n in names})


def bars(stacks: Sequence[Mapping[str, int]], labels: Sequence[str], names: Sequence[str], *,
         label: str, axis: str, title: str) -> str:
    """A stacked bar per point (oldest first), each of the ``names`` a colour, from zero up."""
    count = len(labels)
    shown = [name for name in names if any(s.get(name) for s in stacks)]
    if count == 0:
        return ""
    high = max((sum(s.get(n, 0) for n in shown) for s in stacks), default=0)
    scale = ticks(high)
    inner_w, inner_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    slot = inner_w / count
    width = max(1.0, min(slot * 0.7, 40))
    x_of = [_LEFT + slot * (i + 0.5) for i in range(count)]
    parts = _frame(title, axis, scale, labels, x_of)
    for i, stack in enumerate(stacks):
        y = float(_TOP + inner_h)
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
        if total and count <= 40:
            parts.append(f'<text x="{x_of[i]:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                         f'class="value">{_number(total)}</text>')
    desc = "; ".join(f"{labels[i]}: " + ", ".join(f"{n} {s.get(n, 0)}" for n in shown)
                     for i, s in enumerate(stacks))
    totals = {name: sum(s.get(name, 0) for s in stacks) for name in shown}
    return _svg(label, parts, desc) + _legend(shown, totals)


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
