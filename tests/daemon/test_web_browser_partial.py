"""A partial check and a robots.txt diff in a real browser (Debian's Chromium through
Playwright), at a desktop width and at 420 px; a screenshot of each goes to the tests'
artifacts, its path printed. Assertions are on content and computed colour, not pixels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import chromium, screenshot
from harness import Daemon
from httpserver import TestServer
from playwright.sync_api import Browser, expect
from test_partial_pages import partial, robots_changed  # noqa: F401 - the fixture


@pytest.fixture
def browser() -> Iterator[Browser]:
    with chromium() as found:
        yield found


def test_a_partial_check_in_amber_and_a_robots_diff(
    partial: tuple[Daemon, TestServer], browser: Browser,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon, s = partial
    robots_changed(daemon, s)
    for width in (1280, 420):
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.goto(daemon.base + "/")
        badge = page.locator("span.partial").first
        expect(badge).to_have_text("partial")
        # amber (the stylesheet's --warn), not the green of ok
        assert badge.evaluate("e => getComputedStyle(e).color") == "rgb(138, 90, 0)"
        page.goto(daemon.base + "/targets/shop")
        expect(page.locator("span.failed-document")).to_have_text(
            f"{s.url('/b.xml')} (HTTP 500)")
        path = screenshot(page, f"partial-target-{width}")
        page.goto(daemon.base + "/targets/shop/changes?kind=robots")
        diff = page.locator("pre.diff").first
        expect(diff).to_contain_text("+Disallow: /private")
        # the diff wraps inside its row, at whatever width the listing's table takes
        assert diff.evaluate("e => e.scrollWidth <= e.clientWidth")
        robots = screenshot(page, f"robots-diff-{width}")
        with capsys.disabled():
            print(f"\n[screenshot] {path}: a partial check in amber, its child's HTTP 500"
                  f" ({width} px)\n[screenshot] {robots}: a robots.txt change as a diff")
        context.close()
