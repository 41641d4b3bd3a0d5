"""A robots.txt that changes re-judges its host's listed URLs at once: the daemon (a
subprocess) watches a real local site whose pages are checked only once a week; a new
``Disallow:`` turns the pages it covers ``disallowed`` at the next round, without a request,
and the url_health alert, heard by a real webhook receiver, names them; the pages allowed again
are checked first."""

from __future__ import annotations

from pathlib import Path

from harness import Daemon, Inbox, cli_database_url, sitemap
from httpserver import Reply, TestServer
from sqlalchemy import Engine

PAGE = b"<!doctype html><html><head><title>p</title></head><body>page</body></html>"


def test_a_new_disallow_turns_listed_urls_disallowed_in_the_next_round(
    http_server: TestServer, tmp_path: Path, engine: Engine, daemons: list[Daemon],
) -> None:
    database_url = cli_database_url(engine)

    s = http_server
    inbox = Inbox(s)
    paths = ("/p1", "/p2", "/shop/a", "/shop/b")
    for path in paths:
        s.route(path, Reply(200, PAGE, headers={"Content-Type": "text/html"}))
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in paths})))
    s.route("/robots.txt", Reply(200, b"User-agent: *\nAllow: /\n"))
    path = tmp_path / "c.yaml"
    path.write_text(
        f"database_url: {database_url}\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s, allow_private: true,"
        " url_checks: {enabled: true, rate: 50, recheck: 7d}}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n'
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{s.url("/hook")}"}}\n'
        "  delivery: {initial_backoff: 0.1s}\n"
        "  rules:\n"
        "    - {name: blocked, when: url_health, state: [disallowed], channels: [hook]}\n",
        encoding="utf-8")
    daemon = Daemon(path)
    daemons.append(daemon)
    daemon.started()

    def metric(state: str) -> float | None:
        return daemon.metric("sitemap_monitor_url_health", target="shop", state=state)

    daemon._until(lambda: metric("ok") == 4 or None, 30, "every page checked once")
    requested = {p: len(s.requests_to(p)) for p in paths}

    # Googlebot may no longer crawl /shop/: the next check reads it, the next round applies it.
    s.route("/robots.txt", Reply(200, b"User-agent: *\nDisallow: /shop/\n"))
    daemon._until(lambda: metric("disallowed") == 2 or None, 30,
                  "the /shop/ pages disallowed without waiting a week")
    assert metric("ok") == 2
    assert {p: len(s.requests_to(p)) for p in paths} == requested  # judged, not requested
    [blocked, *_] = daemon._until(lambda: inbox.messages("blocked") or None, 30,
                                  "the url_health alert")
    assert blocked["state"] == "firing"
    assert sorted(blocked["examples"]["disallowed"]) == [s.url("/shop/a"), s.url("/shop/b")]
    listed = daemon.get("/api/v1/targets/shop/urls?status=disallowed").json()["urls"]
    assert sorted(u["loc"] for u in listed) == [s.url("/shop/a"), s.url("/shop/b")]
    health = daemon.get("/api/v1/targets/shop/changes?kind=health").json()["changes"]
    assert sorted(c["loc"] for c in health) == [s.url("/shop/a"), s.url("/shop/b")]
    assert {c["after"]["state"] for c in health} == {"disallowed"}

    # Allowed again: those pages are checked first, not in a week.
    s.route("/robots.txt", Reply(200, b"User-agent: *\nAllow: /\n"))
    daemon._until(lambda: metric("ok") == 4 or None, 30, "the /shop/ pages checked again")
    assert len(s.requests_to("/shop/a")) == requested["/shop/a"] + 1
    assert len(s.requests_to("/p1")) == requested["/p1"]
