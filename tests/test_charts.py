"""The pages' charts (monitor.serve.charts, pure): zero-based, with values a person can read."""

from __future__ import annotations

import re

from monitor.serve import charts


def _points(svg: str) -> list[tuple[float, float]]:
    found = re.search(r'<polyline[^>]*points="([^"]+)"', svg)
    assert found
    return [(float(x), float(y)) for x, y in (p.split(",") for p in found[1].split())]


def test_a_small_drop_is_drawn_as_small_from_zero() -> None:
    height = 28
    spark = charts.sparkline([309, 282], 120, height)
    (_, first), (_, last) = _points(spark)
    drawn = (last - first) / (height - 6)  # the share of the height the drop takes
    assert 0.05 < drawn < 0.15  # 9%, not a cliff from top to bottom
    assert 'class="value">282</text>' in spark


def test_value_axes_start_at_zero_and_reach_the_highest_value() -> None:
    for high in (1, 7, 150, 309, 12_345, 2_500_000):
        scale = charts.ticks(high)
        assert scale[0] == 0
        assert scale[-1] >= high
        assert len(scale) <= 7
    svg = charts.lines({"valid": [150, 2], "invalid": [0, 0]}, ["#1", "#2"], label="URLs",
                       axis="URLs", title="snapshots")
    assert re.search(r'text-anchor="end">0</text>', svg)
    assert re.search(r'text-anchor="end">150</text>', svg)
    assert "<desc>valid: 150, 2; invalid: 0, 0</desc>" in svg
    labels = [float(y) for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)" text-anchor="end" '
                                           r'class="value"', svg)]
    assert abs(labels[0] - labels[1]) >= 12  # two last values near each other stay apart


def test_bars_stack_the_kinds_and_say_their_totals() -> None:
    svg = charts.bars([{"added": 150}, {"removed": 148, "health": 1}], ["#1", "#2"],
                      ("added", "removed", "changed", "health"), label="changes",
                      axis="changes", title="checks")
    assert 'class="value">150</text>' in svg
    assert 'class="value">149</text>' in svg
    assert "changed" not in svg.split("<desc>")[1]  # a kind no check had is left out


def test_no_chart_carries_a_style_attribute_the_pages_policy_would_refuse() -> None:
    """The pages' Content-Security-Policy refuses inline styles: a legend's colours are SVG
    fills, not style attributes."""
    drawn = charts.lines({"valid": [3, 2], "invalid": [0, 1]}, ["1", "2"], label="URLs",
                         axis="snapshot", title="URLs per snapshot")
    assert "style=" not in drawn
    assert 'fill="' in drawn
