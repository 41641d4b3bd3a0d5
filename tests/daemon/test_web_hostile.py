"""A watched site is not trusted: its locs are text, never script, in the daemon's pages.

A daemon checks a sitemap full of hostile locs (``javascript:`` in every spelling a browser
reads as one, ``data:``, ``vbscript:``), then a second version of it, so the locs are on every
kind of page: URLs, issues, changes, the diff. A real Chromium then opens every page reachable
from ``/`` and clicks every link on each, and no script may run (no dialog, no request a payload
would make). Every answer of the port carries the security headers, the pages' policy allows no
script, and the only links left to a watched site are http(s).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from browser import chromium
from harness import Daemon
from httpserver import Reply, TestServer
from playwright.sync_api import Page

from monitor.serve.headers import CONTENT_SECURITY_POLICY
from monitor.serve.links import web_href

# As they appear in the XML (entities included): each becomes ``javascript:`` (or another
# scheme that runs script) once a browser has read the href.
HOSTILE_A = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(2)",
    "java&#9;script:alert(3)",
    "java&#10;script:fetch('/ran-4')",
    "jav&#13;ascript:alert(5)",
    "javascript://www.example.com/products/%0Aalert(document.domain)",
]
HOSTILE_B = [
    "&#9;javascript:alert(7)",
    "javascript&#9;:fetch('/ran-8')",
    "data:text/html,&lt;script&gt;alert(9)&lt;/script&gt;",
    "vbscript:msgbox(10)",
    "JAVASCRIPT:alert(11)",
    "javascript:alert(document.cookie)//http://www.example.com/",
]


def _urlset(locs: list[str]) -> bytes:
    rows = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>'
            ).encode()


@pytest.fixture
def hostile(http_server: TestServer, tmp_path: Path) -> Iterator[Daemon]:
    """A daemon that has checked the hostile sitemap twice (A, then B): every kind of page
    lists hostile locs."""
    s = http_server
    page = b"<!doctype html><title>p</title><p>page</p>"
    for i in range(3):
        s.route(f"/p{i}", Reply(200, page, {"Content-Type": "text/html"}))
    good = [s.url(f"/p{i}") for i in range(3)]
    s.route("/s.xml", Reply(body=_urlset([*good[:2], *HOSTILE_A])))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n', encoding="utf-8")
    daemon = Daemon(config)
    try:
        daemon.started()
        daemon.event("check", target="shop")
        mark = len(daemon.lines)
        s.route("/s.xml", Reply(body=_urlset([good[0], good[2], *HOSTILE_A[:3], *HOSTILE_B])))
        daemon.wait_for(lambda line: line.get("event") == "check"
                        and (line.get("added") or 0) > 0, after=mark, timeout=30)
        yield daemon
    finally:
        daemon.stop()


def _is_page(base: str, url: str) -> bool:
    """A page of the daemon worth opening (not the JSON API, /metrics or an export)."""
    if not url.startswith(base):
        return False
    path = urlsplit(url).path
    return not path.startswith(("/api/", "/metrics", "/static/", "/healthz", "/readyz"))


def _kind(url: str) -> tuple[str, frozenset[str]]:
    """What makes a page another kind of page: its path and which parameters it has. One page
    of each kind is opened (every loc's story page, every sort order and every cursor render
    the same template with other values; the hostile locs are on each one opened)."""
    parts = urlsplit(url)
    keys = frozenset(pair.partition("=")[0] for pair in parts.query.split("&") if pair)
    return parts.path, keys


def test_no_script_runs_when_every_link_of_every_page_is_clicked(
    hostile: Daemon, http_server: TestServer,
) -> None:
    base = hostile.base
    ran: list[str] = []
    pages_seen: list[str] = []
    links_clicked = 0
    no_policy: list[str] = []
    not_web: list[str] = []  # links neither to the daemon nor to an http(s) URL
    with chromium() as browser:
        context = browser.new_context(accept_downloads=True)
        page: Page = context.new_page()
        page.on("dialog", lambda dialog: (ran.append(f"dialog {dialog.message!r}"),
                                          dialog.dismiss()))
        context.on("request", lambda request: ran.append(f"request {request.url}")
                   if "/ran-" in request.url else None)
        # The snapshots page and a whole diff are linked only from longer histories.
        queue = [base + "/", base + "/targets/shop/snapshots", base + "/targets/shop/diff?from=1"]
        queued = {_kind(url) for url in queue}
        deadline = time.monotonic() + 240
        while queue:
            assert time.monotonic() < deadline, f"crawl too slow: {len(pages_seen)} pages"
            url = queue.pop(0)
            answer = page.goto(url)
            assert answer is not None
            if answer.headers.get("content-security-policy") != CONTENT_SECURITY_POLICY:
                no_policy.append(url)
            pages_seen.append(url)
            hrefs = page.eval_on_selector_all(
                "a", "links => links.map(a => a.getAttribute('href'))")
            for index, href in enumerate(hrefs):
                if page.url != url:
                    page.goto(url)
                absolute = urljoin(url, href or "")
                if not absolute.startswith(base) and web_href(href) is None:
                    not_web.append(href or "")
                page.locator("a").nth(index).click()  # waits for what it starts to load
                page.wait_for_load_state()
                links_clicked += 1
                if _is_page(base, absolute) and _kind(absolute) not in queued:
                    queued.add(_kind(absolute))
                    queue.append(absolute)
        context.close()
    print(f"\n{len(pages_seen)} pages, {links_clicked} links clicked, scripts run: {len(ran)}, "
          f"links to neither the daemon nor a web URL: {len(not_web)}, pages without the "
          f"policy: {len(no_policy)}")
    assert {"/", "/targets/shop"} <= {urlsplit(u).path for u in pages_seen}
    for kind in ("urls", "issues", "changes", "diff", "snapshots"):
        assert any(urlsplit(u).path == f"/targets/shop/{kind}" for u in pages_seen), kind
    assert ran == []
    assert not_web == []
    assert no_policy == []
    # The good locs are still links, the hostile ones text.
    listed = httpx.get(base + "/targets/shop/urls", timeout=10).text
    assert f'<a href="{http_server.url("/p0")}" rel="noreferrer">' in listed
    assert "javascript:alert(1)</td>" in listed


def test_every_answer_carries_the_security_headers(hostile: Daemon) -> None:
    paths = ["/", "/targets/shop", "/targets/shop/urls", "/targets/nothing", "/api/v1/targets",
             "/api/v1/targets/shop/urls?format=csv", "/api/v1/nothing", "/metrics", "/healthz",
             "/readyz", "/static/style.css"]
    for path in paths:
        answer = httpx.get(hostile.base + path, timeout=10)
        assert answer.headers.get("content-security-policy") == CONTENT_SECURITY_POLICY, path
        assert answer.headers.get("x-content-type-options") == "nosniff", path
        assert answer.headers.get("referrer-policy") == "no-referrer", path
        assert "strict-transport-security" not in answer.headers, path  # no TLS here
    # uvicorn's own answer to a request it cannot read, too
    host, port = hostile.base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 400 ")
    assert f"content-security-policy: {CONTENT_SECURITY_POLICY}".encode() in head.lower()
    assert b"x-content-type-options: nosniff" in head.lower()
    assert "script-src 'none'" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    # The stylesheet the pages link to is served from the daemon, as the policy requires.
    index = httpx.get(hostile.base + "/", timeout=10).text
    assert "<style" not in index
    sheet = index.split('<link rel="stylesheet" href="', 1)[1].split('"', 1)[0]
    css = httpx.get(hostile.base + sheet, timeout=10)
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
