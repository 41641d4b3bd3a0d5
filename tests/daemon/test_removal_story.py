"""What a person is told about a URL after the sitemap dropped it: the daemon (a subprocess)
watches a real local site whose sitemap drops a live page, a moved one and a gone one; the
API, the page and the ``url`` command (a subprocess) keep its last state, what its removal's
check answered, and when it was first listed."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from harness import Daemon, command, sitemap
from httpserver import Reply, TestServer

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 2000 + b"</body></html>"
HTML = {"Content-Type": "text/html"}


@pytest.fixture(scope="module")
def dropped(tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[Daemon, TestServer, Path]]:
    """A daemon that checked five pages, then saw /c/p55 (still a page), /c/p56 (a 301 to
    the listed /b/item-90) and /c/p57 (a 404) dropped and triaged them."""
    tmp_path = tmp_path_factory.mktemp("dropped")
    with TestServer() as s:
        paths = ["/c/p55", "/c/p56", "/c/p57", "/b/item-90", "/b/keep"]
        for path in paths:
            s.route(path, Reply(200, PAGE, HTML))
        s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in paths})))
        config = tmp_path / "c.yaml"
        config.write_text(
            f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
            "defaults: {interval: 1s, jitter: 0, timeout: 10s,"
            " url_checks: {enabled: true, rate: 200}}\n"
            f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n', encoding="utf-8")
        daemon = Daemon(config)
        try:
            daemon.started()
            daemon.until(lambda: daemon.metric("sitemap_monitor_url_health", target="shop",
                                               state="ok") == 5 or None, 60, "5 ok pages")
            s.route("/c/p56", Reply(301, b"", {"Location": s.url("/b/item-90")}))
            s.route("/c/p57", Reply(404, b"gone", HTML))
            s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in paths[3:]})))

            def triaged() -> bool | None:
                rows = daemon.get("/api/v1/targets/shop/changes?kind=removed").json()["changes"]
                return (len(rows) == 3 and all(r["reason"] for r in rows)) or None

            daemon.until(triaged, 60, "three removals with their reasons")
            yield daemon, s, config
        finally:
            daemon.stop()


def story(daemon: Daemon, loc: str) -> dict[str, Any]:
    answer = daemon.get(f"/api/v1/targets/shop/url?loc={quote(loc, safe='')}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_dropped_urls_story_keeps_its_last_state_and_its_removals_answer(
        dropped: tuple[Daemon, TestServer, Path]) -> None:
    daemon, s, _ = dropped
    live = story(daemon, s.url("/c/p55"))
    assert live["listed"] is False
    assert live["health"] is not None
    assert live["health"]["state"] == "ok"
    assert live["health"]["http_status"] == 200
    assert live["health"]["listed"] is False
    assert live["health"]["checked_at"]
    assert live["removal"]["reason"] == "live"
    assert live["removal"]["answer"]["http_status"] == 200
    first = daemon.get("/api/v1/targets/shop/snapshots?sort=id&limit=1").json()["snapshots"][0]
    assert live["first_listed"]["snapshot_id"] == first["id"]
    assert live["first_listed"]["first_check"] is True

    moved = story(daemon, s.url("/c/p56"))
    assert moved["removal"]["reason"] == "moved"
    assert moved["removal"]["answer"]["final_url"] == s.url("/b/item-90")
    assert s.url("/b/item-90") in moved["changes"][0]["answer"]["final_url"]

    gone = story(daemon, s.url("/c/p57"))
    assert gone["removal"]["reason"] == "gone"
    assert gone["removal"]["answer"]["http_status"] == 404
    assert gone["health"]["state"] == "ok"  # what it was while listed

    kept = story(daemon, s.url("/b/keep"))
    assert kept["removal"] is None
    assert kept["first_listed"]["snapshot_id"] == first["id"]


def test_the_page_says_what_the_api_says(dropped: tuple[Daemon, TestServer, Path]) -> None:
    daemon, s, _ = dropped
    live = daemon.get(f"/targets/shop/url?loc={quote(s.url('/c/p55'), safe='')}").text
    assert "url_checks.enabled" not in live
    assert "health while listed" in live
    assert "HTTP 200" in live
    assert "reason live" in live
    assert "first listed" in live
    moved = daemon.get(f"/targets/shop/url?loc={quote(s.url('/c/p56'), safe='')}").text
    assert s.url("/b/item-90") in moved
    gone = daemon.get(f"/targets/shop/url?loc={quote(s.url('/c/p57'), safe='')}").text
    assert "not-found (HTTP 404)" in gone


def test_the_url_command_says_it_too(dropped: tuple[Daemon, TestServer, Path]) -> None:
    _daemon, s, config = dropped

    def url(loc: str, *more: str) -> str:
        done = subprocess.run([*command(), "url", "shop", loc, "--config", str(config), *more],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "SITEMAP_MONITOR_DATABASE_URL": ""})
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = url(s.url("/c/p55"))
    assert "health: not checked" not in out
    assert "health while listed: ok (HTTP 200)" in out
    assert "reason live: it answered ok (HTTP 200)" in out
    assert "first listed in snapshot" in out
    assert "(the first check)" in out
    out = url(s.url("/c/p56"))
    assert f"to {s.url('/b/item-90')}" in out
    out = url(s.url("/c/p57"))
    assert "reason gone: it answered not-found (HTTP 404)" in out
    assert json.loads(url(s.url("/c/p57"), "--json"))["removal"]["answer"]["http_status"] == 404
