"""The pages' charts (monitor.serve.charts, pure): zero-based, with values a person can read."""

from __future__ import annotations

import re
from itertools import pairwise

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


def _drawings(html: str) -> dict[str, str]:
    """A chart's drawings by their class: ``chart`` (wide) and ``chart narrow``."""
    return dict(re.findall(r'<svg class="(chart[^"]*)"(.*?)</svg>', html, re.S))


def test_each_chart_is_drawn_for_a_wide_screen_and_for_a_phone() -> None:
    """A phone shows a drawing of its own, 360 wide at 12 (its text about 13 px on a 420 px
    screen), not the wide one scaled down to 7 px text."""
    for drawn in (charts.lines({"valid": [150, 2]}, ["#1", "#2"], label="URLs", axis="URLs",
                               title="snapshots"),
                  charts.bars([{"added": 3}], ["#1"], ("added",), label="changes",
                              axis="changes", title="checks")):
        found = _drawings(drawn)
        assert set(found) == {"chart", "chart narrow"}
        assert 'viewBox="0 0 640 220" font-size="11"' in found["chart"]
        assert 'viewBox="0 0 360 250" font-size="12"' in found["chart narrow"]
        assert drawn.count('<p class="legend">') == 1  # one legend, in the page's own text
    # drawn 400 px wide (a 420 px screen's page) and 640 px (the stylesheet's least for the
    # wide one), their text is 11 px or more
    assert charts.NARROW.font * 400 / charts.NARROW.width >= 11
    assert charts.WIDE.font * 640 / charts.WIDE.width >= 11


def test_each_lines_last_value_says_whose_it_is() -> None:
    states = {"ok": [0, 5, 120], "not-found": [0, 3, 19], "noindex": [0, 0, 2],
              "unknown": [150, 142, 9]}
    svg = charts.lines(states, ["#1", "#2", "#3"], label="health", axis="URLs", title="t")
    for drawing in _drawings(svg).values():
        ends = re.findall(r'y="([\d.-]+)" text-anchor="end" class="value" fill="[^"]+">([^<]+)<',
                          drawing)
        assert sorted(text for _, text in ends) == sorted(
            ["ok 120", "not-found 19", "noindex 2", "unknown 9"])
        heights = sorted(float(y) for y, _ in ends)
        # a line of text apart, and none above the drawing
        assert all(b - a >= 12 for a, b in pairwise(heights))
        assert heights[0] >= 11


def test_end_labels_stay_in_the_drawing_when_many_lines_end_together() -> None:
    """Eleven states ending near the top: stacked upwards they would leave the drawing; they
    are moved down together instead."""
    many = {f"state-{i}": [100, 100 - i] for i in range(11)}
    svg = charts.lines(many, ["#1", "#2"], label="health", axis="URLs", title="t")
    for drawing in _drawings(svg).values():
        heights = [float(y) for y in re.findall(
            r'y="([\d.-]+)" text-anchor="end" class="value"', drawing)]
        assert len(heights) == 11
        assert min(heights) >= 11
