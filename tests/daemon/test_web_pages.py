"""The web pages of a daemon watching a real local site: asked over HTTP here, and
driven in a real browser (Debian's Chromium through Playwright) in test_web_browser.py."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Daemon, sitemap
from httpserver import Reply, TestServer

PAGE = b"<!doctype html><html><head><title>p</title></head><body>page</body></html>"


def serve_site(s: TestServer, count: int) -> dict[str, str | None]:
    for i in range(count):
        s.route(f"/p{i}", Reply(404 if i == 1 else 200, PAGE, {"Content-Type": "text/html"}))
    urls: dict[str, str | None] = {s.url(f"/p{i}"): "2026-11-01" for i in range(count)}
    s.route("/s.xml", Reply(body=sitemap(urls)))
    return urls


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[str]]]:
    """A daemon that has seen 150 URLs, then the removal of 148 of them and a new lastmod of
    /p0, and checked the pages; yields it and the removed URLs. One for all the tests of a
    module: they only read what it has seen, and it goes on checking the same site."""
    tmp_path = tmp_path_factory.mktemp("watched")
    with TestServer() as s:
        urls = serve_site(s, 150)
        config = tmp_path / "c.yaml"
        config.write_text(
            f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
            "defaults: {interval: 1s, jitter: 0, timeout: 10s,"
            " url_checks: {enabled: true, rate: 200}}\n"
            f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n', encoding="utf-8")
        daemon = Daemon(config)
        try:
            daemon.started()
            daemon.event("check", target="shop", outcome="ok")
            kept = {loc: urls[loc] for loc in list(urls)[:2]}
            kept[s.url("/p0")] = "2026-11-20"  # a lastmod that moved: a diff shows both
            removed = [loc for loc in urls if loc not in kept]
            mark = len(daemon.lines)
            s.route("/s.xml", Reply(body=sitemap(kept)))
            daemon.wait_for(lambda line: line.get("event") == "check"
                            and line.get("removed") == 148, after=mark)
            daemon._until(lambda: daemon.metric("sitemap_monitor_url_health", target="shop",
                                                state="not-found") == 1 or None, 30,
                          "url health")
            yield daemon, removed
        finally:
            daemon.stop()


def test_the_pages_show_targets_changes_health_and_exports(
    watched: tuple[Daemon, list[str]],
) -> None:
    daemon, removed = watched
    index = daemon.get("/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    assert '<a href="/targets/shop">shop</a>' in index.text
    assert '<svg class="spark"' in index.text
    assert "1 broken" in index.text
    assert "<script" not in index.text  # usable without JavaScript
    assert not re.search(r'(src|href)="https?://(?!127\.0\.0\.1)', index.text)  # nothing external

    target = daemon.get("/targets/shop")
    assert target.status_code == 200
    assert 'href="/targets/shop/urls?status=not-found">not-found 1</a>' in target.text
    assert 'href="/targets/shop/changes?kind=removed"' in target.text

    first = daemon.get("/targets/shop/changes?kind=removed")
    assert first.status_code == 200
    shown = re.findall(r'<td class="loc"><a href="([^"]+)"', first.text)
    assert len(shown) == 100
    more = re.search(r'<a href="([^"]+)" rel="next">', first.text)
    assert more is not None
    second = daemon.get(more.group(1).replace("&amp;", "&"))
    rest = re.findall(r'<td class="loc"><a href="([^"]+)"', second.text)
    assert sorted(shown + rest) == sorted(removed)
    assert 'rel="next"' not in second.text

    export = re.search(r'<a href="([^"]+)">CSV</a>', first.text)
    assert export is not None
    rows = list(csv.DictReader(io.StringIO(daemon.get(export.group(1).replace("&amp;", "&"))
                                           .text)))
    assert sorted(r["loc"] for r in rows) == sorted(removed)
    assert {r["kind"] for r in rows} == {"removed"}

    health = daemon.get("/targets/shop/urls?status=not-found")
    assert re.findall(r'<td class="loc"><a href="([^"]+)"', health.text) == [
        removed[0].rsplit("/", 1)[0] + "/p1"]
    diff = daemon.get("/targets/shop/diff?from=1&kind=removed")
    assert len(re.findall(r'<td class="loc">', diff.text)) == 100

    by_rule = daemon.get("/targets/shop/changes?rule=url-not-found")  # the rule filter
    assert by_rule.status_code == 200
    assert re.findall(r'<td class="loc"><a href="([^"]+)"', by_rule.text) == [
        removed[0].rsplit("/", 1)[0] + "/p1"]
    assert "<option selected>url-not-found</option>" in by_rule.text
    assert "url-nope" in daemon.get("/targets/shop/changes?rule=url-nope").text


def test_every_broken_url_is_one_listing(watched: tuple[Daemon, list[str]]) -> None:
    """"1 broken" on the targets page links to the URLs in any error state, which the API,
    its exports and the page list: the states the index counts as broken, together."""
    daemon, removed = watched
    broken = removed[0].rsplit("/", 1)[0] + "/p1"
    answer = daemon.get("/api/v1/targets/shop/urls?status=broken")
    assert answer.status_code == 200, answer.text
    assert [(u["loc"], u["status"], u["http_status"]) for u in answer.json()["urls"]] == [
        (broken, "not-found", 404)]
    rows = list(csv.DictReader(io.StringIO(
        daemon.get("/api/v1/targets/shop/urls?status=broken&format=csv").text)))
    assert [(r["loc"], r["status"]) for r in rows] == [(broken, "not-found")]
    by_since = daemon.get("/api/v1/targets/shop/urls?status=broken&sort=-since")
    assert [u["loc"] for u in by_since.json()["urls"]] == [broken]
    assert "broken" in daemon.get("/api/v1/openapi.json").text

    index = daemon.get("/").text
    assert '<a class="bad" href="/targets/shop/urls?status=broken">1 broken</a>' in index
    target = daemon.get("/targets/shop").text
    assert 'href="/targets/shop/urls?status=broken">broken 1</a>' in target
    page = daemon.get("/targets/shop/urls?status=broken")
    assert page.status_code == 200
    assert re.findall(r'<td class="loc"><a href="([^"]+)"', page.text) == [broken]
    assert "<option selected>broken</option>" in page.text
    assert '<td class="nowrap bad">not-found</td>' in page.text  # each row says its state


def test_listing_pages_show_what_their_exports_hold(watched: tuple[Daemon, list[str]]) -> None:
    """A diff page has each URL's lastmod before and after (as its CSV has them); the URLs in
    a health state have since when and when they were last checked (the API sorts by both)."""
    daemon, removed = watched
    base = removed[0].rsplit("/", 1)[0]
    diff = daemon.get("/targets/shop/diff?from=1").text
    heads = re.findall(r"<th>(?:<a[^>]*>)?([^<]+)", diff)
    assert heads[:4] == ["kind", "loc", "lastmod before", "lastmod after"]
    moved = re.search(rf'<tr><td class="nowrap">changed</td><td class="loc"><a href="{base}/p0"'
                      r".*?</tr>", diff, re.S)
    assert moved is not None
    assert re.search(r"<td[^>]*>2026-11-01</td><td[^>]*>2026-11-20</td>", moved.group(0))
    gone = re.search(rf'<td class="loc"><a href="{base}/p5".*?</tr>', diff, re.S)
    assert gone is not None
    assert "2026-11-01" in gone.group(0)
    export = list(csv.DictReader(io.StringIO(
        daemon.get("/api/v1/targets/shop/diff?from=1&format=csv").text)))
    p0 = next(r for r in export if r["loc"] == f"{base}/p0")
    assert (json.loads(p0["before"])["lastmod"], json.loads(p0["after"])["lastmod"]) == (
        "2026-11-01", "2026-11-20")

    health = daemon.get("/targets/shop/urls?status=not-found").text
    heads = re.findall(r"<th>(?:<a[^>]*>)?([^<]+)", health)
    assert {"since", "checked_at"} <= {h.strip(" ▲▼") for h in heads}, heads
    row = re.search(r"<tbody>(.*?)</tbody>", health, re.S)
    assert row is not None
    assert len(re.findall(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", row.group(1))) == 2
    assert 'href="/targets/shop/urls?status=not-found&amp;sort=since"' in health


def test_bad_requests_are_pages_that_say_why(watched: tuple[Daemon, list[str]]) -> None:
    daemon, _ = watched
    missing = daemon.get("/targets/nope")
    assert missing.status_code == 404
    assert "no target named &#39;nope&#39;" in missing.text
    bad = daemon.get("/targets/shop/changes?kind=bogus")
    assert bad.status_code == 400
    assert "kind: unknown bogus" in bad.text
    assert httpx.get(daemon.base + "/targets/shop/diff?from=x", timeout=10).status_code == 400


def test_the_targets_page_is_paged(tmp_path: Path, daemons: list[Daemon]) -> None:
    """205 stored targets: 200 on the first page, in name order, and a link to the rest."""
    from datetime import UTC, datetime

    from harness import write_config
    from sqlalchemy import insert

    from monitor.store import db
    from monitor.store.schema import targets

    engine = db.make_engine(f"sqlite:///{tmp_path}/m.db")
    db.upgrade(engine)
    with engine.begin() as conn:  # rows as the daemon registers targets
        conn.execute(insert(targets), [
            {"name": f"t{i:03d}", "url": "http://127.0.0.1/s.xml",
             "created_at": datetime.now(UTC)} for i in range(205)])
    engine.dispose()
    daemon = Daemon(write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db", []))
    daemons.append(daemon)
    daemon.started()
    first = daemon.get("/")
    names = re.findall(r'<a href="/targets/(t\d+)">', first.text)
    assert names == [f"t{i:03d}" for i in range(200)]
    assert "Targets <span class=\"muted\">(205)</span>" in first.text
    more = re.search(r'<a href="(/\?after=[^"]+)">Next targets</a>', first.text)
    assert more is not None
    second = daemon.get(more.group(1))
    assert re.findall(r'<a href="/targets/(t\d+)">', second.text) == [
        f"t{i:03d}" for i in range(200, 205)]
    assert "Next targets" not in second.text


def test_the_snapshots_page_pages_them_and_links_each_removal_to_its_diff(
    tmp_path: Path, daemons: list[Daemon],
) -> None:
    """Two targets checked in turn (so one's snapshot ids are not consecutive): the target
    page shows its 20 newest, the snapshots page 100 at a time to the oldest, and each
    removal links to the diff from the target's own previous snapshot."""
    from datetime import UTC, datetime, timedelta

    from harness import write_config
    from sqlalchemy import insert

    from monitor.store import db
    from monitor.store.schema import snapshots, targets

    engine = db.make_engine(f"sqlite:///{tmp_path}/m.db")
    db.upgrade(engine)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(insert(targets), [
            {"id": i, "name": name, "url": "http://127.0.0.1/s.xml", "created_at": t0}
            for i, name in ((1, "a"), (2, "b"))])
        conn.execute(insert(snapshots), [
            {"id": n, "target_id": 1 + n % 2, "started_at": t0 + timedelta(minutes=n),
             "finished_at": t0 + timedelta(minutes=n), "outcome": "ok", "urls": n,
             "removed": 1} for n in range(1, 261)])  # a: the even ids 2..260
    engine.dispose()
    daemon = Daemon(write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db", []))
    daemons.append(daemon)
    daemon.started()

    def shown(text: str) -> list[int]:
        return [int(n) for n in re.findall(r'<tr><td class="num">(\d+)</td>', text)]

    target = daemon.get("/targets/a")
    assert shown(target.text) == list(range(260, 220, -2))
    assert 'href="/targets/a/diff?from=258&amp;to=260&amp;kind=removed"' in target.text
    assert '<a href="/targets/a/snapshots">Every snapshot</a>' in target.text
    seen: list[int] = []
    page = daemon.get("/targets/a/snapshots")
    while True:
        assert page.status_code == 200
        seen += shown(page.text)
        older = re.search(r'<a href="([^"]+)">Older 100</a>', page.text)
        if older is None:
            break
        page = daemon.get(older.group(1))
    assert seen == list(range(260, 0, -2))
    assert 'href="/targets/a/diff?from=2&amp;to=4&amp;kind=removed"' in page.text
    assert ">2</td><td>2026-01-01 00:02:00 UTC" in page.text  # the oldest: nothing before it
    diff = daemon.get("/targets/a/diff?from=258&to=260&kind=removed")
    assert diff.status_code == 200
    assert daemon.get("/targets/a/snapshots?before=x").status_code == 400
    assert daemon.get("/targets/nope/snapshots").status_code == 404

    # every snapshot exported, from the page's links (CSV and NDJSON, streamed to the end)
    first = daemon.get("/targets/a/snapshots")
    export = re.search(r'<a href="([^"]+)">CSV</a>', first.text)
    assert export is not None
    assert export.group(1) == "/api/v1/targets/a/snapshots?format=csv"
    answer = daemon.get(export.group(1))
    assert answer.headers["content-type"].startswith("text/csv")
    assert 'filename="a-snapshots.csv"' in answer.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [int(r["id"]) for r in rows] == list(range(260, 0, -2))
    assert (rows[0]["outcome"], rows[0]["urls"], rows[0]["removed"]) == ("ok", "260", "1")
    lines = daemon.get("/api/v1/targets/a/snapshots?format=ndjson&before=100").text.splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(98, 0, -2))
    assert daemon.get("/api/v1/targets/nope/snapshots?format=csv").status_code == 404
    assert daemon.get("/api/v1/targets/a/snapshots?format=xml").status_code == 400
