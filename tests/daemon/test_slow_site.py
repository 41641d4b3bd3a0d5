"""One slow site never stalls the others on SQLite: a check holds no transaction, and so not
SQLite's single write lock, while it waits on the network.

A target's sitemap index has a child that answers at once and a child whose body drips for as
long as the test wants; four other targets are checked every second meanwhile. Each of them
must be checked again and again, successfully, while the slow child is still dripping, and
``/readyz`` (which proves a write) must answer 200 throughout.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
from harness import Daemon, sitemap
from httpserver import Reply, TestServer

from monitor.store import db

FAST = ("f1", "f2", "f3", "f4")
CHECKS_WHILE_SLOW = 3  # good checks of every fast target while the slow child drips


def _index(*children: str) -> bytes:
    rows = "".join(f"<sitemap><loc>{child}</loc></sitemap>" for child in children)
    return ('<?xml version="1.0" encoding="UTF-8"?><sitemapindex '
            f'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</sitemapindex>'
            ).encode()


def _drip(release: threading.Event, body: bytes) -> Iterator[bytes]:
    """``body`` up to its first entry, then a space every 0.2 s until ``release`` (between two
    elements: white space the parser skips), then the rest."""
    half = body.index(b"<url>")
    yield body[:half]
    while not release.wait(0.2):
        yield b" "
    yield body[half:]


def test_a_slow_child_does_not_stall_the_other_targets_on_sqlite(tmp_path: Path) -> None:
    release = threading.Event()
    with TestServer() as server:
        u = server.url
        server.route("/slow/index.xml", Reply(body=_index(u("/slow/a.xml"), u("/slow/b.xml"))))
        server.route("/slow/a.xml", Reply(body=sitemap({u("/a/1"): None, u("/a/2"): None})))
        slow = sitemap({u("/b/1"): None, u("/b/2"): None})
        server.route("/slow/b.xml", lambda _request: Reply(body=_drip(release, slow)))
        for name in FAST:
            server.route(f"/{name}.xml", Reply(body=sitemap({u(f"/{name}/1"): None})))
        url = f"sqlite:///{tmp_path}/m.db"
        engine = db.make_engine(url)
        db.upgrade(engine)
        engine.dispose()
        targets = [("slow", u("/slow/index.xml")), *[(n, u(f"/{n}.xml")) for n in FAST]]
        config = tmp_path / "c.yaml"
        config.write_text("\n".join([
            f"database_url: {url}",
            "listen: 127.0.0.1:0",
            "defaults: {interval: 1s, jitter: 0, timeout: 300s, check_timeout: 600s}",
            "targets:",
            *[f'  - {{name: "{name}", url: "{target}"}}' for name, target in targets],
        ]) + "\n", encoding="utf-8")
        daemon = Daemon(config)
        try:
            daemon.started(timeout=60)
            # The slow check has read its first child (and stored nothing: it still waits)
            daemon.until(lambda: server.requests_to("/slow/b.xml") or None, 60,
                          "the slow child requested")
            seen = {name: len(daemon.checks(name)) for name in FAST}
            ready: list[int] = []

            def progressed() -> bool | None:
                ready.append(httpx.get(daemon.base + "/readyz", timeout=30).status_code)
                good = {name: [line for line in daemon.checks(name)[seen[name]:]
                               if line.get("outcome") in ("ok", "unchanged")]
                        for name in FAST}
                return all(len(found) >= CHECKS_WHILE_SLOW for found in good.values()) or None

            daemon.until(progressed, 120, f"{CHECKS_WHILE_SLOW} good checks of every other "
                          "target while the slow child drips")
            assert not release.is_set()
            assert daemon.checks("slow") == []  # still dripping: its check has not ended
            bad = [line for name in FAST for line in daemon.checks(name)[seen[name]:]
                   if line.get("outcome") not in ("ok", "unchanged")]
            assert bad == []
            assert set(ready) == {200}, ready
            release.set()
            done = daemon.until(lambda: daemon.checks("slow") or None, 120,
                                 "the slow check's end")
            assert done[0]["outcome"] == "ok", str(done[0])
            assert done[0]["urls"] == 4, done[0]
        finally:
            release.set()
            daemon.stop()
