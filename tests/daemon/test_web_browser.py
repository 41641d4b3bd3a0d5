"""The web pages in a real browser: Debian's Chromium driven by Playwright, against a
daemon watching a real local site (the ``watched`` fixture: 150 URLs, then 148 removed, one
page answering 404). A person's path from the targets page to a removal's URLs and their CSV,
a filter, a diff and the URL health; a screenshot of each page goes to the tests' artifacts
(tests/browser.py), its path printed in the output. Assertions are on content, not pixels.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

import pytest
from browser import chromium, screenshot
from harness import Daemon
from playwright.sync_api import Browser, Page, expect
from test_web_pages import watched  # noqa: F401 - the fixture, shared with the HTTP tests


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
        f"{daemon.base}/targets/shop/changes?kind=health&since=&reason=&rule=url-not-found&q=")
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
    charts = page.locator("svg.chart")
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
