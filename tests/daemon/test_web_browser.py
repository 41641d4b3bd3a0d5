"""The web pages in a real browser: Debian's Chromium driven by Playwright, against a
daemon watching a real local site (the ``watched`` fixture: 150 URLs, then 148 removed, one
page answering 404). A person's path from the targets page to a removal's URLs and their CSV,
a filter, a diff and the URL health; a screenshot of each page goes to the tests' artifacts
(tests/browser.py), its path printed in the output. Assertions are on content, not pixels.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from browser import artifacts_dir, chromium, screenshot
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer
from playwright.sync_api import Browser, Page, expect
from test_web_pages import serve_site, watched  # noqa: F401 - the fixture, shared with the HTTP tests


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a context of its own: no cookie, download or history of another test."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def shot(page: Page, name: str, what: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = screenshot(page, name)
    with capsys.disabled():
        print(f"\n[screenshot] {path}: {what}")


def test_from_the_targets_page_to_a_removals_urls_and_their_csv(
    watched: tuple[Daemon, list[str]], page: Page,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon, removed = watched
    page.goto(daemon.base + "/")
    expect(page.get_by_role("heading", name="Targets")).to_be_visible()
    expect(page.locator("svg.spark").first).to_be_visible()
    expect(page.get_by_text("1 broken")).to_be_visible()
    shot(page, "web-1-targets", "the targets page: shop, ok, 2 URLs, its sparkline (150 -> 2), "
         "148 changes, 1 broken page", capsys)

    page.get_by_role("link", name="shop", exact=True).click()
    expect(page.get_by_role("heading", name="shop")).to_be_visible()
    expect(page.get_by_role("link", name="not-found 1")).to_be_visible()
    shot(page, "web-2-target", "the shop page: URL health (ok 1, not-found 1), the change "
         "kinds, snapshots with their removals, the diff form", capsys)

    page.get_by_role("link", name="removed", exact=True).click()
    expect(page.get_by_role("heading", name="Changes of shop")).to_be_visible()
    first = page.locator("td.loc a").all_inner_texts()
    assert len(first) == 100
    shot(page, "web-3-removed", "the removed URLs of shop, first page of 100, with the "
         "filters and the CSV/NDJSON export links", capsys)
    # A click starts a navigation and returns: wait for the next page before reading it (a
    # busy machine read the page before it, and its rows, now and then).
    page.get_by_role("link", name="Next 100 rows").click()
    expect(page.get_by_role("link", name="First page")).to_be_visible()
    rest = page.locator("td.loc a").all_inner_texts()
    assert sorted(first + rest) == sorted(removed)

    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    path = download.value.path()
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert download.value.suggested_filename == "shop-changes.csv"
    assert sorted(r["loc"] for r in rows) == sorted(removed)


def test_filters_a_diff_and_the_url_health(
    watched: tuple[Daemon, list[str]], page: Page,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon, removed = watched
    page.goto(daemon.base + "/targets/shop/changes")
    page.get_by_label("kind").select_option("health")
    page.get_by_label("rule").select_option("url-not-found")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(
        f"{daemon.base}/targets/shop/changes?kind=health&since=&until=&reason=&rule=url-not-found&q=")
    cells = page.locator("tbody tr").all_inner_texts()
    assert len(cells) == 1
    assert "unknown -> not-found (404)" in cells[0]
    shot(page, "web-4-health-changes", "the changes of shop filtered to kind health and rule "
         "url-not-found: /p1 "
         "went from unknown to not-found (404)", capsys)

    page.goto(daemon.base + "/targets/shop")
    page.get_by_role("button", name="Diff").click()  # the two newest snapshots by default
    expect(page.get_by_role("heading", name="Diff of shop")).to_be_visible()
    # the newest checks found nothing new; from the first snapshot on, the removals
    page.get_by_label("from").fill("1")
    page.get_by_label("kind").select_option("removed")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("td.loc a")).to_have_count(100)  # the diff before it had none
    diffed = page.locator("td.loc a").all_inner_texts()
    assert set(diffed) <= set(removed)
    shot(page, "web-5-diff", "the diff of shop from snapshot 1 to the latest, removals: the "
         "first 100 of 148", capsys)

    page.goto(daemon.base + "/targets/shop")
    page.get_by_role("link", name="not-found 1").click()
    expect(page.locator("td.loc a")).to_have_text([removed[0].rsplit("/", 1)[0] + "/p1"])
    shot(page, "web-6-not-found", "the URLs of shop that answer 404 now", capsys)


def test_search_a_urls_story_the_charts_and_a_narrow_screen(
    watched: tuple[Daemon, list[str]], page: Page,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon, removed = watched
    broken = removed[0].rsplit("/", 1)[0] + "/p1"
    page.goto(daemon.base + "/targets/shop")
    charts = page.locator("svg.chart:visible")  # each drawn for a phone too, hidden here
    expect(charts).to_have_count(3)
    expect(page.locator("figcaption")).to_have_text(
        ["URLs per snapshot", "Changes per check, by kind", "URL health, by state"])
    # zero-based, with the values written: 150 URLs, then 2
    expect(charts.nth(0).locator("text", has_text="150").first).to_be_visible()
    expect(page.locator(".legend").first).to_contain_text("valid 2")
    shot(page, "web-7-charts", "the shop page: charts of URLs (150 -> 2, from zero), changes "
         "per check by kind (148 removed) and URL health by state, with axes and values",
         capsys)

    page.get_by_label("find a URL (part of its loc)").fill("/p1")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("td.loc a")).to_have_text([broken])
    shot(page, "web-8-search", "the search for '/p1' among the URLs of shop: the one listed "
         "URL that holds it", capsys)

    page.get_by_role("link", name="story").click()
    expect(page.get_by_role("heading", name=broken)).to_be_visible()
    expect(page.locator("dl.facts")).to_contain_text("HTTP 404")
    expect(page.locator("tbody tr")).to_contain_text(["unknown -> not-found (404)"])
    shot(page, "web-9-url-story", "the story of /p1: listed now, in /s.xml, health not-found "
         "(HTTP 404) since the check that found it, its transition", capsys)

    first = daemon.get("/api/v1/targets/shop/snapshots?sort=id&limit=1").json()
    page.goto(daemon.base + f"/targets/shop/urls?at={first['snapshots'][0]['id']}&q=/p14")
    page.get_by_role("link", name="loc").click()
    page.get_by_role("link", name="loc ▲").click()
    expect(page.locator("td.loc a")).to_have_text(
        sorted((loc for loc in removed if "/p14" in loc), reverse=True))

    narrow = page.context.browser.new_page(viewport={"width": 420, "height": 900})  # type: ignore[union-attr]
    narrow.goto(daemon.base + "/targets/shop/changes?kind=removed")
    cell = narrow.locator("td.loc").first
    box = cell.bounding_box()
    assert box is not None
    assert box["width"] > 150  # a loc is read on a line or two, not a character a line
    for name, what in (("web-10-narrow", "the removals of shop on a 420 px wide screen (its "
                         "first screenful): the table scrolls sideways, each loc reads on a line"),
                       ("web-11-narrow-target", "the shop page at 420 px (its first "
                        "screenful): the charts fit the width")):
        if name == "web-11-narrow-target":
            narrow.goto(daemon.base + "/targets/shop")
        path = screenshot(narrow, name, full_page=False)
        with capsys.disabled():
            print(f"\n[screenshot] {path}: {what}")
    narrow.close()


def _page_kinds(daemon: Daemon, removed: list[str]) -> dict[str, str]:
    """A path of each kind of page the daemon serves, the widest content of each."""
    broken = removed[0].rsplit("/", 1)[0] + "/p1"
    return {
        "targets": "/",
        "target": "/targets/shop",
        "changes": "/targets/shop/changes",
        "urls": "/targets/shop/urls?at=1",
        "urls in a state": "/targets/shop/urls?status=broken",
        "issues": "/targets/shop/issues",
        "diff form": "/targets/shop/diff",
        "diff": "/targets/shop/diff?from=1",
        "snapshots": "/targets/shop/snapshots",
        "one URL, its form": "/targets/shop/url",
        "one URL": "/targets/shop/url?" + urlencode({"loc": broken}),
        "robots.txt and its tester": "/targets/shop/robots?" + urlencode(
            {"urls": f"{broken}\n/private/a-very-long-path-that-a-person-pasted-in-to-test"}),
        "not found": "/targets/nope",
    }


def test_no_page_is_wider_than_a_phone(
    watched: tuple[Daemon, list[str]], browser: Browser,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At 420 px every kind of page fits the screen: a wide table scrolls inside its own box,
    the page itself never sideways."""
    daemon, removed = watched
    context = browser.new_context(viewport={"width": 420, "height": 900})
    page = context.new_page()
    widths = {}
    for kind, path in _page_kinds(daemon, removed).items():
        page.goto(daemon.base + path)
        widths[kind] = page.evaluate("document.documentElement.scrollWidth")
        if kind in ("urls in a state", "diff", "robots.txt and its tester"):
            path = screenshot(page, f"web-14-narrow-{kind.replace(' ', '-')}", full_page=False)
            with capsys.disabled():
                print(f"\n[screenshot] {path}: {kind} at 420 px (its first screenful): its "
                      "table scrolls in its box, the page does not")
    with capsys.disabled():
        print(f"\n[widths at 420 px] {widths}")
    context.close()
    assert {kind: width for kind, width in widths.items() if width > 420} == {}


def test_charts_read_at_phone_width(
    watched: tuple[Daemon, list[str]], browser: Browser,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a phone (420 px) as on a laptop (1366 px) a chart's text, its tick labels among it,
    is drawn at 11 px or more, and each line's last value says whose it is (its state's name
    beside the number)."""
    daemon, _ = watched
    for width in (420, 1366):
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.goto(daemon.base + "/targets/shop")
        shown = page.locator("svg.chart:visible")
        expect(shown).to_have_count(3)
        # a text's size is in the drawing's units: times the scale the drawing is shown at
        fonts = shown.evaluate_all(
            "svgs => svgs.map(svg => parseFloat(getComputedStyle(svg.querySelector("
            "'text')).fontSize) * svg.getBoundingClientRect().width"
            " / svg.viewBox.baseVal.width)")
        ends = shown.nth(2).locator("text.value").all_text_contents()
        path = artifacts_dir() / f"web-12-charts-{width}.png"
        page.locator(".charts").screenshot(path=path)
        with capsys.disabled():
            print(f"\n[screenshot] {path}: the charts of shop at {width} px; their text "
                  f"drawn at {', '.join(f'{f:.1f}' for f in fonts)} px; the health chart's "
                  f"line ends: {ends}")
        context.close()
        assert min(fonts) >= 11, (width, fonts)
        assert {"ok 1", "not-found 1"} <= set(ends)
        assert all(re.fullmatch(r"[a-z-]+ [\d,]+", end) for end in ends), ends


def test_the_targets_page_fits_a_phone_with_real_names(
    tmp_path: Path, daemons: list[Daemon], browser: Browser,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Targets named as people name them, their sitemaps at long addresses, thousands of URLs
    and a broken one: at 420 px the targets page still fits, its table scrolling in its box."""
    with TestServer() as s:
        path = "/sitemaps/products/sitemap-products-en-gb-2026-11.xml"
        urls = serve_site(s, 1_200)
        s.route(path, Reply(body=sitemap(urls)))
        names = ["shop-en-gb-products", "shop-de-de-products", "magazine-articles-archive"]
        config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                              [(name, s.url(path)) for name in names], interval="1h")
        daemon = Daemon(config)
        daemons.append(daemon)
        daemon.started()
        for name in names:
            daemon.event("check", target=name)
        context = browser.new_context(viewport={"width": 420, "height": 900})
        page = context.new_page()
        page.goto(daemon.base + "/")
        expect(page.get_by_role("link", name="magazine-articles-archive")).to_be_visible()
        width = page.evaluate("document.documentElement.scrollWidth")
        shot = screenshot(page, "web-13-narrow-targets")
        with capsys.disabled():
            print(f"\n[screenshot] {shot}: three targets at 420 px, {width} px wide")
        context.close()
    assert width <= 420
