"""What a person sees of a partial check and a robots.txt change, over HTTP from a daemon
watching a real local site: amber, the failed child named with its HTTP status, the robots.txt
diff on the changes page, and a partial series in the metrics (in a real browser:
test_web_browser_partial.py)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, sitemap
from httpserver import Reply, TestServer

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


@pytest.fixture
def partial(http_server: TestServer, tmp_path: Path) -> Iterator[tuple[Daemon, TestServer]]:
    """A daemon over an index whose child b.xml answers 500, after its first partial check;
    yields it and the site, whose robots.txt the test may change."""
    s = http_server
    s.route("/a.xml", Reply(body=sitemap({s.url("/p1"): None})))
    s.route("/b.xml", Reply(500, b"down\n"))
    s.route("/index.xml", Reply(body=(
        f'<?xml version="1.0"?><sitemapindex xmlns="{NS}"><sitemap><loc>{s.url("/a.xml")}'
        f'</loc></sitemap><sitemap><loc>{s.url("/b.xml")}</loc></sitemap></sitemapindex>'
    ).encode()))
    s.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/index.xml")}"}}\n', encoding="utf-8")
    daemon = Daemon(config)
    try:
        daemon.started()
        line = daemon.event("check", target="shop", outcome="partial")
        # the log line is a warning that names the child and its error
        assert line["level"] == "warning"
        assert line["failed_documents"] == [
            f"{s.url('/b.xml')}: HTTP 500 Internal Server Error from {s.url('/b.xml')}"]
        yield daemon, s
    finally:
        daemon.stop()


def robots_changed(daemon: Daemon, s: TestServer) -> None:
    """Change the site's robots.txt and wait for the changes page to show it."""
    s.route("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /private\n"))
    daemon._until(lambda: "pre class" in daemon.get(
        "/targets/shop/changes?kind=robots").text or None, 30, "the robots change")


def test_a_partial_check_is_amber_and_names_its_child(
    partial: tuple[Daemon, TestServer],
) -> None:
    daemon, s = partial
    assert daemon.metric("sitemap_monitor_checks_total", target="shop",
                         outcome="partial") >= 1
    assert daemon.metric("sitemap_monitor_checks_total", target="shop", outcome="ok") == 0

    index = daemon.get("/").text
    assert '<span class="partial"' in index
    assert ">partial</span>" in index
    target = daemon.get("/targets/shop").text
    assert '<span class="partial">partial</span>: 1 document(s) could not be read' in target
    assert f"{s.url('/b.xml')} (HTTP 500)" in target
    [last] = daemon.get("/api/v1/targets/shop/snapshots?limit=1").json()["snapshots"]
    assert last["outcome"] == "partial"
    assert [(d["url"], d["http_status"]) for d in last["failed_documents"]] == [
        (s.url("/b.xml"), 500)]

    robots_changed(daemon, s)
    changes = html.unescape(daemon.get("/targets/shop/changes?kind=robots").text)
    assert "\n-Allow: /\n+Disallow: /private</pre>" in changes
    assert "1 added, 1 removed" in changes
