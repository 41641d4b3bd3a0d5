"""An alert's link lists exactly what fired, later too: the daemon (a subprocess) watches a
real local site and notifies a real webhook receiver; each message's examples are of its own
kind, and its links, followed on the daemon's port after later checks, list the same rows."""

from __future__ import annotations

import re
import socket
from html import unescape
from pathlib import Path
from typing import Any

from harness import Daemon, Inbox, sitemap
from httpserver import Reply, TestServer

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 2000 + b"</body></html>"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_links_stay_exact_and_examples_are_of_their_kind(
        http_server: TestServer, tmp_path: Path, daemons: list[Daemon]) -> None:
    s = http_server

    inbox = Inbox(s)

    def messages(rule: str) -> list[dict[str, Any]]:
        return inbox.messages(rule, "firing")

    paths = [f"/p{i}" for i in range(1, 9)]
    for p in paths:
        s.route(p, Reply(200, PAGE, {"Content-Type": "text/html"}))
    s.route("/p8", Reply(410, b"gone", {"Content-Type": "text/html"}))
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in [*paths[:7], "/p8"]})))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:{port}\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s, allow_private: true,"
        " url_checks: {enabled: true, rate: 100, recheck: 1s}}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n'
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{s.url("/hook")}"}}\n'
        f"  delivery: {{initial_backoff: 0.1s, examples: 5, api_base_url: '{base}'}}\n"
        "  rules:\n"
        "    - {name: removals, when: removed, channels: [hook]}\n"
        "    - {name: additions, when: added, channels: [hook]}\n"
        "    - {name: live-removals, when: removed, reason: [live], channels: [hook]}\n"
        "    - {name: broken, when: url_health, state: [gone, not-found], channels: [hook]}\n",
        encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    daemon.until(lambda: messages("broken") or None, 60, "the first url_health message")
    first = messages("broken")[0]
    # not news: the URLs of the state that fired, in the API and on a page
    assert first["link"] == f"{base}/api/v1/targets/shop/urls?status=gone"
    assert first["page"] == f"{base}/targets/shop/urls?status=gone"

    # A check drops /p1 and /p2 (still pages) and adds /p9; a later one drops /p3.
    s.route("/p9", Reply(200, PAGE, {"Content-Type": "text/html"}))
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in [*paths[2:7], "/p8", "/p9"]})))
    daemon.until(lambda: len(messages("live-removals")) == 1 or None, 60, "live removals")
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in [*paths[3:7], "/p8", "/p9"]})))
    daemon.until(lambda: len(messages("live-removals")) == 2 or None, 60, "more live removals")
    # and /p4 breaks: news
    s.route("/p4", Reply(404, b"nope", {"Content-Type": "text/html"}))
    daemon.until(lambda: len(messages("broken")) >= 2 or None, 60, "url_health news")
    daemon.outbox_drained()

    def listed(link: str) -> list[str]:
        assert link.startswith(base)
        answer = daemon.get(link[len(base):])
        assert answer.status_code == 200, answer.text
        return sorted(row["loc"] for row in answer.json()["changes"])

    removal = messages("removals")[0]
    assert set(removal["examples"]) == {"removed"}  # no added URL in a removal's message
    assert removal["examples"]["removed"] == [s.url("/p1"), s.url("/p2")]
    assert listed(removal["link"]) == [s.url("/p1"), s.url("/p2")]  # not /p3, removed later
    page = daemon.get(removal["page"][len(base):]).text  # the page lists the same rows
    assert sorted(unescape(loc) for loc in re.findall(r'<td class="loc"><a href="([^"]+)"',
                                                      page)) == [s.url("/p1"), s.url("/p2")]
    addition = messages("additions")[0]
    assert set(addition["examples"]) == {"added"}
    assert listed(addition["link"]) == [s.url("/p9")]
    live = messages("live-removals")[0]
    assert live["link"] is not None
    assert listed(live["link"]) == [s.url("/p1"), s.url("/p2")]
    assert "until=" in live["page"]

    news = messages("broken")[1]
    assert news["link"] is not None
    assert "rule=url-not-found" in news["link"]
    assert "status=gone" not in news["page"]  # the news is the not-found page, not the gone one
    assert s.url("/p4") in listed(news["link"])
    assert s.url("/p8") not in listed(news["link"])
