"""One URL's story, the search of locs, charts, sorting and the small things a person trips on,
asked over HTTP of a daemon watching a real local site (the ``watched`` fixture: 150 URLs,
then 148 removed, /p1 answering 404); driven in a browser in test_web_browser.py."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import quote

from harness import Daemon
from test_web_pages import watched  # noqa: F401 - the fixture, shared with the HTTP tests


def locs_of(html: str) -> list[str]:
    return [unescape(v) for v in re.findall(r'<td class="loc"><a href="([^"]+)"', html)]


def test_one_urls_story_in_the_api_and_on_its_page(
        watched: tuple[Daemon, list[str]]) -> None:  # noqa: F811
    daemon, removed = watched
    broken = removed[0].rsplit("/", 1)[0] + "/p1"
    answer = daemon.get(f"/api/v1/targets/shop/url?loc={quote(broken, safe='')}")
    assert answer.status_code == 200
    story = answer.json()
    assert story["listed"] is True
    assert story["documents"] == [removed[0].rsplit("/", 1)[0] + "/s.xml"]
    assert story["health"]["state"] == "not-found"
    assert story["health"]["http_status"] == 404
    health = [e for e in story["changes"] if e["kind"] == "health"]
    assert health
    assert health[0]["after"]["state"] == "not-found"
    # timed when the URL check found it, not by the snapshot it followed
    assert health[0]["at"] == health[0]["after"]["checked_at"]

    gone = daemon.get(f"/api/v1/targets/shop/url?loc={quote(removed[5], safe='')}").json()
    assert gone["listed"] is False
    assert [e["kind"] for e in gone["changes"]] == ["removed"]

    missing = daemon.get("/api/v1/targets/shop/url")
    assert missing.status_code == 400
    assert missing.json()["error"]["message"].startswith("loc:")
    assert daemon.get("/api/v1/targets/nope/url?loc=x").status_code == 404
    paths = daemon.get("/api/v1/openapi.json").json()["paths"]
    assert "/api/v1/targets/{name}/url" in paths

    page = daemon.get(f"/targets/shop/url?loc={quote(broken, safe='')}")
    assert page.status_code == 200
    assert "not-found" in page.text
    assert "HTTP 404" in page.text
    assert "unknown -&gt; not-found (404)" in page.text
    assert daemon.get("/targets/shop/url").status_code == 200  # the empty form


def test_a_search_of_the_locs(watched: tuple[Daemon, list[str]]) -> None:  # noqa: F811
    daemon, removed = watched
    wanted = sorted(loc for loc in removed if "/p14" in loc)
    api = daemon.get("/api/v1/targets/shop/changes?kind=removed&q=/P14").json()
    assert sorted(r["loc"] for r in api["changes"]) == wanted
    urls = daemon.get("/api/v1/targets/shop/urls?q=/p1").json()
    assert [r["loc"] for r in urls["urls"]] == [removed[0].rsplit("/", 1)[0] + "/p1"]
    health = daemon.get("/api/v1/targets/shop/urls?status=not-found&q=/P1").json()
    assert [r["loc"] for r in health["urls"]] == [removed[0].rsplit("/", 1)[0] + "/p1"]
    assert daemon.get("/api/v1/targets/shop/urls?status=not-found&q=/p2").json()["urls"] == []
    page = daemon.get("/targets/shop/changes?kind=removed&q=/p14")
    assert sorted(locs_of(page.text)) == wanted
    # the box keeps what was searched, and refuses to take more than a search may hold
    assert 'name="q" type="search" maxlength="2048" value="/p14"' in page.text
    assert daemon.get("/targets/shop/urls?q=nothing-holds-this").text.count("No rows.") == 1


def test_listings_sort_whole_page_after_page(watched: tuple[Daemon, list[str]]) -> None:  # noqa: F811
    daemon, _ = watched
    # The snapshot of 150 URLs (the first) leads the snapshots by URLs, down.
    api = daemon.get("/api/v1/targets/shop/snapshots?sort=-urls&limit=1").json()
    first = api["snapshots"][0]
    assert first["urls"] == 150
    assert "cursor=" in api["next"]
    every = daemon.get(f"/api/v1/targets/shop/urls?at={first['id']}").json()["urls"]
    assert len(every) == 150
    # Its URLs by loc, down, on two pages: the second goes on where the first stopped.
    page = daemon.get(f"/targets/shop/urls?at={first['id']}&sort=-loc").text
    shown = locs_of(page)
    assert len(shown) == 100
    following = re.search(r'<a href="([^"]+)" rel="next">', page)
    assert following is not None
    assert "sort=-loc" in unescape(following.group(1))
    shown += locs_of(daemon.get(unescape(following.group(1))).text)
    assert shown == sorted((row["loc"] for row in every), reverse=True)
    assert "sort=loc" in page  # the head's link turns the order round

    # The changes by kind, through the API a page of 30 at a time.
    stored = daemon.get("/api/v1/targets/shop/changes").json()["changes"]
    kinds: list[str] = []
    link: str | None = "/api/v1/targets/shop/changes?sort=kind&limit=30"
    while link is not None:
        answer = daemon.get(link).json()
        kinds += [row["kind"] for row in answer["changes"]]
        link = answer["next"]
    assert kinds == sorted(row["kind"] for row in stored)
    assert len(set(kinds)) > 1  # removals and health transitions

    bad = daemon.get("/targets/shop/changes?sort=password")
    assert bad.status_code == 400
    assert "sort:" in bad.text
    assert "at, kind, reason, rule" in daemon.get("/api/v1/targets/shop/changes?sort=loc"
                                                  ).json()["error"]["message"]
    assert daemon.get("/api/v1/targets?sort=password").status_code == 400
    assert daemon.get("/api/v1/targets?sort=-urls").json()["targets"][0]["name"] == "shop"
    assert daemon.get("/?sort=-urls").status_code == 200
    snapshots = daemon.get("/targets/shop/snapshots?sort=-urls").text
    urls = re.findall(r'</td><td class="num">([\d,]+)</td><td class="num">\d+</td><td class="num">',
                      snapshots)
    assert urls[0] == "150"
    assert urls[1:] == ["2"] * (len(urls) - 1)


def test_charts_times_the_empty_diff_and_the_started_line(
        watched: tuple[Daemon, list[str]]) -> None:  # noqa: F811
    daemon, _ = watched
    target = daemon.get("/targets/shop").text
    charts = re.findall(r'<svg class="chart".*?</svg>', target, re.S)
    assert len(charts) == 3  # URLs, changes, URL health
    urls = charts[0]
    assert re.search(r'text-anchor="end">0</text>', urls)  # zero-based, labelled
    assert re.search(r'text-anchor="end">150</text>', urls)
    assert re.search(r"<desc>valid: 150(, 150)*(, 2)+; invalid: 0(, 0)*</desc>", urls)
    # The check that removed 148 URLs has its bar, which says its count: a URL check's health
    # change may land in the same check's stack, so the count is the stack's total.
    desc = re.search(r"<desc>(.*?)</desc>", charts[1], re.S)
    assert desc is not None
    stack = next(part for part in desc.group(1).split("; ") if "removed 148" in part)
    total = sum(int(n) for n in re.findall(r" (\d+)(?=,|$)", stack))
    assert f">{total}</text>" in charts[1]
    index = daemon.get("/").text
    assert re.search(r'<svg class="spark".*class="value">2</text>', index, re.S)

    changes = daemon.get("/targets/shop/changes").text
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", changes)
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \((just now|\d+ (s|min) ago)\)",
                     changes)

    diff = daemon.get("/targets/shop/diff")
    assert diff.status_code == 200
    assert 'name="from"' in diff.text
    assert "Choose the snapshot" in diff.text

    started = daemon.event("started")
    assert started["pages"] == daemon.base + "/"
