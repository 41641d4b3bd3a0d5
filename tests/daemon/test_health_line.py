"""A URL's health says one thing, in order: its state and answer, when it was checked, then
what later tries met without an answer to trust. The daemon (a subprocess) checks a real local
page that answers 200, then 500 twice, then 500 for good; the ``url`` command (a subprocess)
and the page say it the same way."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness import Daemon, command, sitemap
from httpserver import Reply, Request, TestServer

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 2000 + b"</body></html>"


def test_a_page_that_answered_500_twice_is_told_in_order(
        http_server: TestServer, tmp_path: Path, daemons: list[Daemon]) -> None:
    s = http_server
    answers = {"count": 0, "fail": False}
    lock = threading.Lock()

    def flaky(_request: Request) -> Reply:
        with lock:
            answers["count"] += 1
            n = answers["count"]
            fail = answers["fail"] or n in (2, 3)
        return Reply(500, b"oops") if fail else Reply(200, PAGE, {"Content-Type": "text/html"})

    s.route("/p1", flaky)
    s.route("/s.xml", Reply(body=sitemap({s.url("/p1"): None})))
    config = tmp_path / "c.yaml"
    # recheck 5s: a 5xx is tried again within 5 s, and the URL rests between
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1h, jitter: 0, timeout: 10s, allow_private: true,"
        " url_checks: {enabled: true, rate: 100, recheck: 5s}}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n', encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    loc = quote(s.url("/p1"), safe="")

    def health() -> dict[str, Any] | None:
        found: dict[str, Any] | None = daemon.get(
            f"/api/v1/targets/shop/url?loc={loc}").json()["health"]
        return found

    daemon.until(lambda: ((h := health()) is not None
                 and "(2 of 3 in a row)" in (h["detail"] or "")) or None, 90, "two 500s in a row")

    def told() -> str:
        done = subprocess.run([*command(), "url", "shop", s.url("/p1"), "--config", str(config)],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "SITEMAP_MONITOR_DATABASE_URL": ""})
        assert done.returncode == 0, done.stderr
        return next(line for line in done.stdout.splitlines() if "health:" in line)

    line = told()
    assert line.startswith("  health: ok (HTTP 200), in this state since "), line
    assert re.search(r"checked [^;]+; then 2 tries without an answer to trust: "
                     r"HTTP 500 \(2 of 3 in a row\); next try ", line), line
    page = daemon.get(f"/targets/shop/url?loc={loc}").text
    assert "HTTP 200 · HTTP 500" not in page
    assert re.search(r"ok</span> \(HTTP 200\), in this state since .*?, checked .*?; then 2 tries "
                     r"without an answer to trust: HTTP 500 \(2 of 3 in a row\)", page), page

    with lock:
        answers["fail"] = True
    daemon.until(lambda: ((h := health()) is not None and h["state"] == "server-error") or None,
                 90, "server-error")
    # (a later 500 may already be pending: then the state's own detail gives way to it)
    line = told()
    assert re.match(r"  health: server-error \(HTTP 500( on 3 checks in a row)?\), ", line), line
    page = daemon.get(f"/targets/shop/url?loc={loc}").text
    assert re.search(r"server-error</span> \(HTTP 500( on 3 checks in a row)?\), ", page)
    assert "HTTP 500 · HTTP 500" not in page
