"""Every newly broken page is news: the daemon checks a real local site's pages
a few at a time and a real webhook receiver, which verifies each signature, hears of the
broken pages once the first complete round is done, then once for each round that finds more,
and never for a round that finds none."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from pathlib import Path
from typing import Any

from harness import Daemon, sitemap
from httpserver import Reply, Request, TestServer
from sqlalchemy import Engine

PAGE = b"<!doctype html><html><head><title>p</title>%s</head><body>page</body></html>"
SECRET = "news-hook-key"  # noqa: S105 - a test key, not a credential


def page(head: bytes = b"", status: int = 200) -> Reply:
    return Reply(status, PAGE % head, headers={"Content-Type": "text/html"})


def test_one_message_per_round_that_finds_newly_broken_pages(
    http_server: TestServer, tmp_path: Path, engine: Engine, daemons: list[Daemon],
) -> None:
    database_url = engine.url.render_as_string(hide_password=False).replace(
        "postgresql+psycopg://", "postgresql://")
    s = http_server
    received: list[dict[str, Any]] = []
    lock = threading.Lock()

    def hook(request: Request) -> Reply:
        expected = "sha256=" + hmac.new(SECRET.encode(), request.body,
                                        hashlib.sha256).hexdigest()
        assert hmac.compare_digest(
            expected, request.headers.get("x-sitemap-monitor-signature", ""))
        with lock:
            received.append(json.loads(request.body))
        return Reply(200, b"{}")

    def messages() -> list[dict[str, Any]]:
        with lock:
            return [m for m in received if m["rule"] == "broken-pages"]

    s.route("/hook", hook)
    paths = [f"/p{i}" for i in range(1, 8)]
    for p in paths:
        s.route(p, page())
    for p in ("/p2", "/p6"):  # found in different rounds of the first pass
        s.route(p, page(status=404))
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in paths})))
    config = tmp_path / "c.yaml"
    # rate 4/s and a 4 s lease: rounds of 4 URLs, so a pass over the 7 takes 2 rounds
    config.write_text(
        f"database_url: {database_url}\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1h, jitter: 0, timeout: 10s, allow_private: true,"
        " url_checks: {enabled: true, rate: 4, recheck: 1s}}\n"
        "scheduler: {lease: 4s}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n'
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{s.url("/hook")}",'
        f" secret: {SECRET}}}\n"
        "  delivery: {initial_backoff: 0.1s, examples: 5}\n"
        "  rules:\n"
        "    - {name: broken-pages, when: url_health, channels: [hook]}\n", encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()

    def rounds() -> int:
        return sum(1 for line in list(daemon.lines) if line.get("event") == "url checks")

    def more_rounds(count: int) -> None:
        seen = rounds()
        daemon._until(lambda: rounds() >= seen + count or None, 60, f"{count} more rounds")
        daemon.outbox_drained()

    daemon._until(lambda: messages() or None, 60, "the first broken-pages message")
    daemon.outbox_drained()
    [first] = messages()
    # not before every URL was checked once: both 404s, whichever round found them
    assert first["state"] == "firing"
    assert first["examples"] == {"not-found": [s.url("/p2"), s.url("/p6")]}
    assert (first["counts"]["broken"], first["counts"]["unchecked"]) == (2, 0)
    assert rounds() >= 2
    more_rounds(3)  # every URL checked again: nothing new, nothing said
    assert len(messages()) == 1

    s.route("/p4", page(b'<meta name="robots" content="noindex">'))
    daemon._until(lambda: len(messages()) > 1 or None, 60, "the message of /p4")
    more_rounds(3)
    assert len(messages()) == 2
    news = messages()[1]
    assert news["state"] == "firing"
    assert news["since"] == first["since"]  # the same alert, worse
    assert news["examples"] == {"noindex": [s.url("/p4")]}
    assert (news["counts"]["new"], news["counts"]["broken"]) == (1, 3)
    assert news["summary"].startswith("shop: 1 more listed URLs broke (noindex 1); 3 listed")

    s.route("/p1", page(status=410))
    daemon._until(lambda: len(messages()) > 2 or None, 60, "the message of /p1")
    more_rounds(3)
    assert [m["examples"] for m in messages()[2:]] == [{"gone": [s.url("/p1")]}]

    s.route("/p2", page(status=410))  # broken before, broken still: no news
    more_rounds(4)
    assert len(messages()) == 3
