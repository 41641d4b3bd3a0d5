"""``sitemap-monitor run`` as a subprocess against sitemaps served on 127.0.0.1."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer
from sqlalchemy import func, select
from test_metrics import promtool_problems

from monitor.store import db
from monitor.store.schema import changes, documents, entry_sets, snapshots, targets


def count(url: str, table: object) -> int:
    """Rows of a table."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


def test_checks_metrics_and_api_follow_the_sitemap(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    page = http_server.url("/p")
    # p3's date is wrong (an error of the field: still a URL); /p6 is relative (invalid)
    v1 = {f"{page}1": "2024-01-01", f"{page}2": "2024-01-02", f"{page}3": "2024-13-45",
          "/p6": None}
    http_server.route("/sitemap.xml", Reply(body=sitemap(v1)))
    url = f"sqlite:///{tmp_path}/monitor.db"
    config = write_config(tmp_path / "c.yaml", url, [("shop", http_server.url("/sitemap.xml"))])
    daemon = Daemon(config)
    daemons.append(daemon)
    started = daemon.started()
    assert started["metrics"].endswith("/metrics")
    first = daemon.event("check", target="shop")
    assert (first["outcome"], first["urls"], first["invalid"], first["added"]) == ("ok", 3, 1, 3)
    assert daemon.metric("sitemap_monitor_urls", target="shop") == 3
    assert daemon.metric("sitemap_monitor_invalid_urls", target="shop") == 1
    assert daemon.metric("sitemap_monitor_issues", target="shop", rule="lastmod-invalid") == 1
    assert daemon.metric("sitemap_monitor_target_interval_seconds", target="shop") == 1.0
    # 23 series a target (checks_total by its 5 outcomes, "partial" and "error" included),
    # plus one per document outcome and issue rule it has had.
    shop = [line for line in daemon.get("/metrics").text.splitlines()
            if not line.startswith("#") and 'target="shop"' in line]
    outcomes = [line for line in shop if line.startswith("sitemap_monitor_documents{")]
    rules = [line for line in shop if line.startswith("sitemap_monitor_issues{")]
    # One document, answered: "ok", or by the time of this scrape (a busy machine reads the
    # metrics above one by one, a second apart) a re-check's "not_modified" beside an "ok" at 0.
    assert sum(float(line.rsplit(" ", 1)[1]) for line in outcomes) == 1
    assert 1 <= len(outcomes) <= 2
    assert rules
    assert len(shop) == 23 + len(outcomes) + len(rules)

    v2 = {f"{page}1": "2024-02-01", f"{page}2": "2024-01-02", f"{page}4": None, f"{page}5": None,
          "/p6": None}
    mark = len(daemon.lines)
    http_server.route("/sitemap.xml", Reply(body=sitemap(v2)))
    second = daemon.wait_for(
        lambda line: line.get("event") == "check" and line["outcome"] == "ok", after=mark)
    assert (second["added"], second["changed"], second["urls"], second["invalid"]) == (2, 1, 4, 1)
    assert daemon.metric("sitemap_monitor_urls", target="shop") == 4
    assert daemon.metric("sitemap_monitor_changes_total", target="shop", kind="added") == 5
    assert daemon.metric("sitemap_monitor_issues", target="shop", rule="lastmod-invalid") == 0

    changed = daemon.get("/api/v1/targets/shop/changes?kind=added&limit=1").json()
    assert [c["loc"] for c in changed["changes"]] in ([f"{page}4"], [f"{page}5"])
    assert changed["next_cursor"] is not None
    # The first check is the baseline: it counts its URLs as added but lists no change rows.
    every = daemon.get("/api/v1/targets/shop/changes?kind=added").json()
    assert sorted(c["loc"] for c in every["changes"]) == [f"{page}4", f"{page}5"]
    listed = daemon.get("/api/v1/targets").json()["targets"]
    assert [t["name"] for t in listed] == ["shop"]
    assert listed[0]["last_snapshot"]["urls"] == 4
    assert daemon.get("/readyz").json() == {"status": "ok"}
    assert daemon.get("/healthz").status_code == 200
    assert promtool_problems(daemon.get("/metrics").content) == ""

    # On schedule: three more checks, never closer than the 1 s interval (less what a busy
    # machine moves a check's start by).
    began = time.monotonic()
    daemon.more_checks("shop", 3, timeout=60)
    assert time.monotonic() - began >= 1.5
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert count(url, snapshots) == len(daemon.checks("shop"))


def test_sigterm_during_a_slow_check_exits_0_and_writes_nothing(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    body = sitemap({http_server.url(f"/p{i}"): None for i in range(50)})
    pieces = [body[i : i + 100] for i in range(0, len(body), 100)]
    http_server.route("/slow.xml", Reply(body=lambda: iter(pieces), chunk_delay=0.5))
    url = f"sqlite:///{tmp_path}/monitor.db"
    config = write_config(tmp_path / "c.yaml", url, [("slow", http_server.url("/slow.xml"))],
                          extra="scheduler: {shutdown_grace: 1s}\n")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    deadline = time.monotonic() + 10
    while not http_server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert http_server.requests, "the check never started"
    time.sleep(0.5)  # well inside the body, which takes over 10 s
    sent = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
    assert time.monotonic() - sent < 9  # the 1 s grace, not the body's 15 s
    assert daemon.event("stopped")["checks_cancelled"] == 1
    for table in (snapshots, documents, entry_sets, changes):
        assert count(url, table) == 0, table
    engine = db.make_engine(url)
    with engine.connect() as conn:
        lease = conn.execute(select(targets.c.lease_owner)).scalar_one()
    engine.dispose()
    assert lease is None


def test_a_restart_restores_the_gauges(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    entries_v1 = {http_server.url(f"/p{i}"): "2024-01-01" for i in range(7)}
    entries_v1[http_server.url("/late")] = "yesterday"  # a URL with a bad date: still a URL
    entries_v1["/bad"] = None  # a relative loc: invalid
    http_server.route("/s.xml", Reply(body=sitemap(entries_v1)))
    url = f"sqlite:///{tmp_path}/monitor.db"
    config = write_config(tmp_path / "c.yaml", url, [("shop", http_server.url("/s.xml"))],
                          extra="scheduler: {shutdown_grace: 0.5s}\n")
    first = Daemon(config)
    daemons.append(first)
    first.started()
    line = first.event("check", target="shop")
    assert (line["urls"], line["invalid"]) == (8, 1)
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    engine = db.make_engine(url)
    with engine.connect() as conn:
        finished = conn.execute(select(func.max(snapshots.c.finished_at))).scalar_one()
    engine.dispose()

    # The next check hangs, so whatever /metrics shows now was restored, not observed.
    http_server.route("/s.xml", Reply(body=sitemap(entries_v1), delay=30))
    second = Daemon(config)
    daemons.append(second)
    second.started()
    assert second.metric("sitemap_monitor_urls", target="shop") == 8
    assert second.metric("sitemap_monitor_invalid_urls", target="shop") == 1
    assert second.metric("sitemap_monitor_issues", target="shop", rule="lastmod-invalid") == 1
    assert second.metric("sitemap_monitor_documents", target="shop", outcome="ok") == 1
    restored = second.metric("sitemap_monitor_last_success_timestamp_seconds", target="shop")
    assert restored == pytest.approx(finished.timestamp(), abs=1e-3)
    assert second.metric("sitemap_monitor_checks_total", target="shop", outcome="ok") == 0
    assert second.checks() == []


def test_sighup_with_a_bad_config_keeps_the_old_one(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    http_server.route("/a.xml", Reply(body=sitemap({http_server.url("/a1"): None})))
    http_server.route("/b.xml", Reply(body=sitemap({http_server.url("/b1"): None})))
    url = f"sqlite:///{tmp_path}/monitor.db"
    path = tmp_path / "c.yaml"
    write_config(path, url, [("a", http_server.url("/a.xml"))])
    daemon = Daemon(path)
    daemons.append(daemon)
    daemon.started()
    daemon.event("check", target="a")
    assert daemon.metric("sitemap_monitor_config_last_reload_successful") == 1

    path.write_text(path.read_text() + "surprise: true\n")
    mark = len(daemon.lines)
    daemon.signal(signal.SIGHUP)
    refused = daemon.event("configuration reload refused; keeping the running one", after=mark)
    assert "surprise" in refused["error"]
    assert daemon.metric("sitemap_monitor_config_last_reload_successful") == 0
    mark = len(daemon.lines)
    daemon.event("check", target="a", after=mark)  # still checking with the old config

    write_config(path, url, [("a", http_server.url("/a.xml")), ("b", http_server.url("/b.xml"))])
    daemon.signal(signal.SIGHUP)
    daemon.event("configuration reloaded", after=mark)
    assert daemon.metric("sitemap_monitor_config_last_reload_successful") == 1
    assert daemon.event("check", target="b")["urls"] == 1
    names = [t["name"] for t in daemon.get("/api/v1/targets").json()["targets"]]
    assert names == ["a", "b"]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_second_run_on_one_sqlite_file_is_refused(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    http_server.route("/a.xml", Reply(body=sitemap({})))
    url = f"sqlite:///{tmp_path}/monitor.db"
    config = write_config(tmp_path / "c.yaml", url, [("a", http_server.url("/a.xml"))],
                          interval="1h")
    first = Daemon(config)
    daemons.append(first)
    first.started()
    second = Daemon(config)
    daemons.append(second)
    assert second.wait(20) == 2
    errors = [line for line in second.lines if line.get("level") == "error"]
    assert len(errors) == 1
    assert "in use by another 'sitemap-monitor run'" in errors[0]["error"]
    assert first.proc.poll() is None


@pytest.mark.postgres
def test_postgres_behind_the_newest_migration_is_refused(
    tmp_path: Path, postgres_url: str, daemons: list[Daemon]
) -> None:
    config = write_config(tmp_path / "c.yaml", postgres_url, [])
    daemon = Daemon(config)
    daemons.append(daemon)
    assert daemon.wait(20) == 2
    (line,) = [line for line in daemon.lines if line.get("level") == "error"]
    assert "sitemap-monitor db upgrade" in line["error"]


def test_no_secret_reaches_the_log(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    token = "T0KEN-abcdef123456"  # noqa: S105 - the secret the test hunts for
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    http_server.route(f"/hook/{token}", Reply(500, body=b"no"))
    url = f"sqlite:///{tmp_path}/monitor.db"
    extra = (
        "alerts:\n"
        "  channels:\n"
        f'    - {{name: ops, type: webhook, url: "{http_server.url("/hook/" + token)}", '
        'secret: "hmac-s3cret-value"}\n'
        "  rules:\n"
        "    - {name: new-urls, when: added, channels: [ops]}\n"
        "  delivery: {initial_backoff: 0.2s}\n"
    )
    config = write_config(tmp_path / "c.yaml", url, [("shop", http_server.url("/s.xml"))],
                          extra=extra)
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    daemon.event("check", target="shop")
    # A first check is no change to alert on; a new URL on the next one is.
    http_server.route("/s.xml", Reply(body=sitemap(
        {http_server.url("/p"): None, http_server.url("/new"): None})))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        r.route.startswith("/hook/") for r in http_server.requests
    ):
        time.sleep(0.1)
    assert any(r.route.startswith("/hook/") for r in http_server.requests), daemon.raw
    daemon.wait_for(lambda line: str(line.get("event", "")).startswith(
        ("notification delivery failed", "notification not delivered")), timeout=30)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    text = "".join(daemon.raw)
    assert "delivery failed" in text or "not delivered" in text
    assert token not in text
    assert "hmac-s3cret-value" not in text
