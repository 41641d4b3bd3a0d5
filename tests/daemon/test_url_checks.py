"""The daemon checks listed URLs on its own: a real local site, the daemon as a
subprocess scraped over HTTP, alerts delivered to a real webhook receiver, and PostgreSQL
replicas sharing the URL checks without checking a URL twice in one period."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from harness import Daemon, Inbox, cli_database_url, sitemap
from httpserver import Reply, TestServer
from sqlalchemy import Engine

PAGE = b"<!doctype html><html><head><title>p</title>%s</head><body>page</body></html>"


def page(head: bytes = b"", status: int = 200) -> Reply:
    return Reply(status, PAGE % head, headers={"Content-Type": "text/html"})


def config(tmp_path: Path, database_url: str, site: str, *, rate: float, recheck: str,
           lease: str = "60s", extra: str = "") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"database_url: {database_url}\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s, allow_private: true,"
        f" url_checks: {{enabled: true, rate: {rate}, recheck: {recheck}}}}}\n"
        f"scheduler: {{lease: {lease}}}\n"
        f'targets:\n  - {{name: shop, url: "{site}"}}\n' + extra, encoding="utf-8")
    return path


def test_the_daemon_finds_broken_urls_alerts_and_triages_removals(
    http_server: TestServer, tmp_path: Path, engine: Engine, daemons: list[Daemon],
) -> None:
    database_url = cli_database_url(engine)

    inbox = Inbox(http_server)
    s = http_server
    s.route("/p1", page())
    s.route("/p2", page(status=404))
    s.route("/p3", page(b'<meta name="robots" content="noindex">'))
    urls: dict[str, str | None] = {s.url(p): None for p in ("/p1", "/p2", "/p3")}
    s.route("/s.xml", Reply(body=sitemap(urls)))
    alerts = (
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{s.url("/hook")}"}}\n'
        "  delivery: {initial_backoff: 0.1s}\n"
        "  rules:\n"
        "    - {name: broken-pages, when: url_health, state: [not-found, noindex],"
        " threshold: 2, channels: [hook]}\n"
        "    - {name: live-removals, when: removed, reason: [live], channels: [hook]}\n")
    daemon = Daemon(config(tmp_path, database_url, s.url("/s.xml"), rate=50, recheck="2s",
                           extra=alerts))
    daemons.append(daemon)
    daemon.started()

    def metric(state: str) -> float | None:
        return daemon.metric("sitemap_monitor_url_health", target="shop", state=state)

    daemon._until(lambda: (metric("noindex") == 1 and metric("not-found") == 1) or None, 20,
                  "the URL states in the metrics")
    assert metric("ok") == 1
    assert daemon.metric("sitemap_monitor_url_check_coverage_ratio", target="shop") == 1.0
    # every URL checked: the estimate is the count's share, with no margin
    assert daemon.metric("sitemap_monitor_url_health_estimate", target="shop",
                         state="not-found") == 1 / 3
    assert daemon.metric("sitemap_monitor_url_health_estimate_margin", target="shop",
                         state="not-found") == 0
    told = daemon.get("/api/v1/targets/shop/url-health").json()
    assert (told["listed"], told["checked"], told["complete"]) == (3, 3, True)
    assert told["estimate"]["noindex"]["exact"] is True
    assert daemon.metric("sitemap_monitor_url_checks_total", target="shop",
                         outcome="not-found") >= 1
    listed = daemon.get("/api/v1/targets/shop/urls?status=not-found").json()
    assert [(u["loc"], u["rule"]) for u in listed["urls"]] == [(s.url("/p2"), "url-not-found")]
    daemon.outbox_drained()
    # /p2 is fixed: at its next check (recheck 2s) the rule resolves.
    s.route("/p2", page())
    daemon._until(lambda: metric("not-found") == 0 or None, 20, "/p2 ok again")
    daemon.outbox_drained()
    # The deploy drops /p1, which still answers 200: a "live" removal.
    del urls[s.url("/p1")]
    s.route("/s.xml", Reply(body=sitemap(urls)))
    daemon._until(lambda: inbox.messages("live-removals") or None,
                  20, "the live-removals alert")
    received = inbox.messages()
    messages = [(m["rule"], m["state"]) for m in received]
    live = next(m for m in received if m["rule"] == "live-removals")
    assert messages == [("broken-pages", "firing"), ("broken-pages", "resolved"),
                        ("live-removals", "firing")]
    assert live["examples"] == {"removed:live": [s.url("/p1")]}
    assert live["counts"]["reasons"] == {"live": 1}
    changes = daemon.get("/api/v1/targets/shop/changes?kind=removed").json()["changes"]
    assert [(c["loc"], c["reason"]) for c in changes] == [(s.url("/p1"), "live")]


def test_replicas_share_the_url_checks_without_checking_a_url_twice(
    http_server: TestServer, tmp_path: Path, migrated_postgres_url: str, daemons: list[Daemon],
) -> None:
    s = http_server
    paths = [f"/p{i}" for i in range(40)]
    for p in paths:
        s.route(p, page())
    s.route("/s.xml", Reply(body=sitemap({s.url(p): None for p in paths})))
    url = migrated_postgres_url.replace("postgresql+psycopg://", "postgresql://")
    # a lease of 4 s: rounds of 5 URLs (rate 5), so the replicas take turns
    path = config(tmp_path, url, s.url("/s.xml"), rate=5, recheck="1h", lease="4s")
    for _ in range(2):
        daemon = Daemon(path)
        daemons.append(daemon)
        daemon.started()

    def checked() -> int:
        return sum(1 for r in s.requests if r.route in paths)

    daemons[0]._until(lambda: checked() >= 40 or None, 60, "every URL checked")
    time.sleep(3)  # a round that would check one again has had its time
    counts = Counter(r.route for r in s.requests if r.route in paths)
    assert counts == Counter(dict.fromkeys(paths, 1))
    rounds = [sum(1 for line in d.lines if line.get("event") == "url checks") for d in daemons]
    assert sum(rounds) >= 8
    # robots.txt is read by the sitemap checks (SPEC 12), not once a round by the URL checks:
    # the version a check read is in force for them, whichever replica checked the sitemap
    # (at most one read per check; the URL checks' own reads would be beside them)
    sitemap_checks = len(s.requests_to("/s.xml"))
    assert 1 <= len(s.requests_to("/robots.txt")) <= sitemap_checks
    # each replica's gauges follow the database, whichever checked
    for daemon in daemons:
        daemon._until(lambda d=daemon: d.metric("sitemap_monitor_url_health", target="shop",
                                                state="ok") == 40 or None, 30,
                      "the url_health gauge on every replica")
    # No more than 5 a second across both replicas (the lease holds the host's rate).
    times = sorted(r.time for r in s.requests if r.route in paths)
    for i in range(len(times) - 6):
        assert times[i + 6] - times[i] >= 1.0 - 0.05, "more than 5 requests in a second"


def test_the_daemon_reads_pages_as_a_browser_and_asks_each_host_once_a_day(
    http_server: TestServer, tmp_path: Path, engine: Engine, daemons: list[Daemon],
) -> None:
    """A meta refresh followed as a redirect, a canonical to a 404 named, and a page that is
    the host's own not-found page a soft 404: the host is asked for a missing path once,
    however many rounds check its pages (recheck 2s)."""
    database_url = cli_database_url(engine)
    s = http_server
    sorry = (b"<!doctype html><html><head><title>Shop</title></head><body><nav>Home Shop"
             b"</nav><main><p>Nothing lives at this address any more: the item may have "
             b"sold out, or the link you followed was mistyped.</p></main></body></html>")
    s.missing = Reply(200, sorry, headers={"Content-Type": "text/html"})
    s.route("/p1", page())
    s.route("/old", page(b'<meta http-equiv="refresh" content="0; url=/p1">'))
    s.route("/c", page(b'<link rel="canonical" href="/dead">'))
    s.route("/dead", page(status=404))
    s.route("/sold-out", Reply(200, sorry, headers={"Content-Type": "text/html"}))
    urls: dict[str, str | None] = {s.url(p): None for p in ("/p1", "/old", "/c", "/sold-out")}
    s.route("/s.xml", Reply(body=sitemap(urls)))
    daemon = Daemon(config(tmp_path, database_url, s.url("/s.xml"), rate=50, recheck="2s"))
    daemons.append(daemon)
    daemon.started()

    def metric(state: str) -> float | None:
        return daemon.metric("sitemap_monitor_url_health", target="shop", state=state)

    daemon._until(lambda: (metric("redirect") == 1 and metric("canonicalized") == 1
                           and metric("soft-404") == 1 and metric("ok") == 1) or None, 30,
                  "the URL states in the metrics")
    listed = daemon.get("/api/v1/targets/shop/urls?status=canonicalized").json()
    assert [(u["loc"], u["rule"]) for u in listed["urls"]] == [(s.url("/c"),
                                                                "url-canonical-broken")]
    # more rounds check the pages again; none asks the host for a missing path again
    def rounds() -> int:
        return sum(1 for line in daemon.lines
                   if line.get("event") == "url checks" and line.get("checked"))

    daemon._until(lambda: rounds() >= 3 or None, 60, "three rounds that checked pages")
    probes = [r for r in s.requests if r.route.startswith("/sitemap-monitor-")]
    assert len(probes) == 1
