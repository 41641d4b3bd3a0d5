"""Re-checks cost what changed: a URL checked before is asked again with the validators of its
last answer, and a 304 keeps its state. Against Python's own static file server (a real one,
which honours If-Modified-Since) and a route that honours If-None-Match, on both databases."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, Request, TestServer
from prometheus_client import CollectorRegistry
from site_fixture import Site, urlset
from sqlalchemy import select

from monitor.cli.commands import main
from monitor.core.model import utcnow
from monitor.store.db import make_engine
from monitor.store.schema import url_states

PAGE = b"<!doctype html><html><head><title>p</title>%s</head><body>%s</body></html>"


def sitemap_config(tmp_path: Path, sitemap: str) -> Path:
    path = tmp_path / "monitor.yaml"
    path.write_text("defaults:\n  url_checks: {enabled: true, rate: 1000, recheck: 1d}\n"
                    f"targets:\n  - {{name: t, url: '{sitemap}'}}\n")
    return path


def two_rounds(path: Path, db: str, between: Callable[[], None]) -> list[Any]:
    """A check of the sitemap, a round of URL checks, ``between``, then a round two days on
    (every URL due again); each round's result."""
    from monitor import config as config_module
    from monitor.read.fetch import Fetcher
    from monitor.urlhealth import checker as urlcheck

    assert main(["check", "t", "--config", str(path), "--database-url", db]) == 0
    [target] = config_module.load(path).resolved_targets()
    engine = make_engine(db)
    start = utcnow()

    async def go() -> list[Any]:
        fetcher = Fetcher(user_agent=target.settings.user_agent)
        found = []
        try:
            for later in (0, 2):
                if later:
                    between()

                def now(later: int = later) -> datetime:
                    return start + timedelta(days=later)

                done = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                                budget=urlcheck.Budget(), now=now, limit=100)
                assert done is not None
                found.append(done)
        finally:
            await fetcher.aclose()
        return found

    try:
        return asyncio.run(go())
    finally:
        engine.dispose()


def rows(db: str) -> dict[str, tuple[str, str | None, str | None]]:
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            return {r.loc.rsplit("/", 1)[-1]: (r.state, r.etag, r.last_modified)
                    for r in conn.execute(select(u.loc, u.state, u.etag, u.last_modified))}
    finally:
        engine.dispose()


class StaticServer:
    """``python -m http.server`` on a directory, its request log read as it comes."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
             "--directory", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...)"
        found = re.search(r"port (\d+)", line)
        assert found, line
        self.base = f"http://127.0.0.1:{found.group(1)}"
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def answers(self, path: str) -> list[str]:
        """The statuses the server logged for ``GET path``, in order."""
        return [m.group(1) for line in list(self.log)
                if (m := re.search(rf'"GET {re.escape(path)} HTTP/1\.[01]" (\d+)', line))]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._reader.join(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def static(tmp_path: Path) -> Iterator[tuple[StaticServer, Path]]:
    root = tmp_path / "site"
    root.mkdir()
    server = StaticServer(root)
    try:
        yield server, root
    finally:
        server.stop()


def test_a_real_server_answers_304_to_an_unchanged_page_and_its_state_stands(
    static: tuple[StaticServer, Path], db: str, tmp_path: Path,
) -> None:
    """Python's http.server sends Last-Modified and answers If-Modified-Since: the re-check of
    the unchanged pages (one ok, one noindex) is a 304 that keeps each state; the page that
    changed (now noindex) is read again and judged again."""
    server, root = static
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    (root / "same.html").write_bytes(PAGE % (b"", b"x" * 20_000))
    (root / "hidden.html").write_bytes(
        PAGE % (b'<meta name="robots" content="noindex">', b"x" * 20_000))
    (root / "changes.html").write_bytes(PAGE % (b"", b"x" * 20_000))
    pages = ("same.html", "hidden.html", "changes.html")
    (root / "sitemap.xml").write_bytes(urlset({f"{server.base}/{p}": None for p in pages}))

    def edit() -> None:
        changed = root / "changes.html"
        changed.write_bytes(PAGE % (b'<meta name="robots" content="noindex">', b"y" * 20_000))
        later = changed.stat().st_mtime + 60  # Last-Modified has a resolution of a second
        os.utime(changed, (later, later))

    first, second = two_rounds(sitemap_config(tmp_path, f"{server.base}/sitemap.xml"), db, edit)
    assert first.outcomes == {"ok": 2, "noindex": 1}
    assert second.outcomes == {"not_modified": 2, "noindex": 1}
    assert second.states == {"ok": 1, "noindex": 2}
    assert second.transitions == 1  # changes.html: ok -> noindex; nothing else written
    assert server.answers("/same.html") == ["200", "304"]
    assert server.answers("/hidden.html") == ["200", "304"]
    assert server.answers("/changes.html") == ["200", "200"]
    stored = rows(db)
    assert stored["same.html"][0] == "ok"
    assert stored["hidden.html"][0] == "noindex"
    assert stored["same.html"][2] is not None
    assert stored["same.html"][2].endswith(" GMT")


def test_an_etag_is_sent_back_and_a_304_keeps_a_broken_state(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
) -> None:
    """A server that sends an ETag gets it back in If-None-Match; its 304 keeps the page's
    noindex. A page without validators is read whole each time; a 404 keeps none."""
    etag = '"v1"'

    def tagged(request: Request) -> Reply:
        if request.headers.get("if-none-match") == etag:
            return Reply(304, headers={"ETag": etag})
        return Reply(body=PAGE % (b'<meta name="robots" content="noindex">', b"x" * 5000),
                     headers={"Content-Type": "text/html", "ETag": etag})

    http_server.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
    http_server.route("/tagged", tagged)
    http_server.route("/plain", Reply(body=PAGE % (b"", b"x" * 5000),
                                      headers={"Content-Type": "text/html"}))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/tagged", "/plain",
                                                                  "/missing")}))
    first, second = two_rounds(sitemap_config(tmp_path, site.url("/sitemap.xml")), db,
                               lambda: None)
    assert first.outcomes == {"noindex": 1, "ok": 1, "not-found": 1}
    assert second.outcomes == {"not_modified": 1, "ok": 1, "not-found": 1}
    assert second.states == first.states
    asked = [r.headers.get("if-none-match") for r in http_server.requests_to("/tagged")]
    assert asked == [None, etag]
    assert all("if-modified-since" not in r.headers and "if-none-match" not in r.headers
               for r in http_server.requests_to("/plain") + http_server.requests_to("/missing"))
    assert rows(db)["tagged"] == ("noindex", etag, None)


def test_not_modified_is_an_outcome_of_url_checks_total() -> None:
    """url_checks_total{outcome="not_modified"} and the estimate's label sets exist at 0 from
    the start, and a round's 304s are counted there."""
    from monitor.core.sampling import Strata
    from monitor.observe.metrics import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry, ["t"], [])
    metrics.set_url_targets(["t"])
    name = "sitemap_monitor_url_checks_total"
    assert registry.get_sample_value(name, {"target": "t", "outcome": "not_modified"}) == 0
    for gauge in ("sitemap_monitor_url_health_estimate",
                  "sitemap_monitor_url_health_estimate_margin"):
        assert registry.get_sample_value(gauge, {"target": "t", "state": "not-found"}) == 0
    metrics.observe_urls("t", {"not_modified": 7, "ok": 1}, {"ok": 8}, 8, 8,
                         Strata(100, {"ok": 8}))
    assert registry.get_sample_value(name, {"target": "t", "outcome": "not_modified"}) == 7
    share = registry.get_sample_value("sitemap_monitor_url_health_estimate",
                                      {"target": "t", "state": "ok"})
    margin = registry.get_sample_value("sitemap_monitor_url_health_estimate_margin",
                                       {"target": "t", "state": "ok"})
    assert share == 1.0
    assert margin is not None
    assert 0.2 < margin < 0.5
