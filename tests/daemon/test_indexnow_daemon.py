"""IndexNow through the running daemon: a submission committed with its snapshot survives a
SIGKILL before its delivery and is delivered once by the next start, on both databases."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from harness import Daemon, sitemap
from httpserver import Reply, TestServer
from indexnow_receiver import KEY, Receiver
from sqlalchemy import Engine, select
from waiting import until

from monitor.store.schema import indexnow_submissions


def _config(path: Path, database_url: str, server: TestServer, receiver: Receiver) -> Path:
    path.write_text(
        f"database_url: {database_url}\n"
        "listen: 127.0.0.1:0\n"
        "scheduler: {lease: 5s}\n"  # the killed replica's target is taken over soon
        "defaults:\n"
        "  interval: 1s\n  jitter: 0\n  timeout: 2s\n  read_timeout: 2s\n"
        f"  indexnow: {{enabled: true, key: {KEY}, endpoint: '{receiver.endpoint}'}}\n"
        f"targets:\n  - {{name: shop, url: '{server.url('/sitemap.xml')}'}}\n",
        encoding="utf-8")
    return path


def test_a_submission_survives_a_sigkill_before_delivery_and_goes_once(
    http_server: TestServer, engine: Engine, migrated_database_url: str, tmp_path: Path,
    daemons: list[Daemon],
) -> None:
    receiver = Receiver(http_server, stall=60.0)
    base = http_server.url("/")
    http_server.route("/sitemap.xml", Reply(200, sitemap({f"{base}a": None})))
    config = _config(tmp_path / "monitor.yaml", migrated_database_url, http_server, receiver)
    first = Daemon(config)
    daemons.append(first)
    first.started()
    first.more_checks("shop", 1, timeout=30)  # the baseline
    receiver.answer = "stall"
    http_server.route("/sitemap.xml", Reply(200, sitemap(
        {f"{base}a": None, f"{base}b": None, f"{base}c": None})))
    # Committed with its snapshot, then sent: the endpoint holds the request unanswered.
    until(lambda: bool(http_server.requests_to("/indexnow")), within=30, what="submission sent")
    with engine.connect() as conn:
        assert conn.execute(select(indexnow_submissions.c.status)).scalars().all() == [
            "pending"]
    first.signal(signal.SIGKILL)
    first.wait()
    assert receiver.accepted == []
    receiver.answer = 200
    second = Daemon(config)
    daemons.append(second)
    second.started()
    # The killed replica's lease on the row runs out (2 x 2 s + 10 s), then it goes.
    until(lambda: bool(receiver.accepted), within=60, what="submission accepted")
    second.more_checks("shop", 3, timeout=30)  # more checks: nothing new to submit
    assert Counter(receiver.urls()) == {f"{base}b": 1, f"{base}c": 1}
    assert len(receiver.accepted) == 1
    assert second.metric("sitemap_monitor_indexnow_urls_total", target="shop",
                         outcome="submitted") == 2
    assert second.metric("sitemap_monitor_indexnow_urls_total", target="shop",
                         outcome="rejected") == 0
    with engine.connect() as conn:
        assert conn.execute(select(indexnow_submissions.c.status)).scalars().all() == [
            "delivered"]
    # The target's page shows its last submissions.
    page = second.get("/targets/shop").text
    section = page.split("<h2>IndexNow</h2>", 1)[1].split("<h2>", 1)[0]
    assert http_server.url("").rstrip("/") in section
    assert ">delivered<" in section
    assert "HTTP 200" in section


def test_a_wrong_key_file_is_reported_before_anything_is_submitted(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    """A target whose sitemap never changes submits nothing, yet hears that its key file is
    wrong: the daemon fetches it when IndexNow is enabled, not before a first submission."""
    http_server.route("/sitemap.xml", Reply(200, sitemap({http_server.url("/a"): None})))
    http_server.route(f"/{KEY}.txt", Reply(200, b"not-the-key\n"))
    config = tmp_path / "monitor.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\n"
        "listen: 127.0.0.1:0\n"
        "defaults:\n  interval: 1s\n  jitter: 0\n  timeout: 2s\n"
        f"  indexnow: {{enabled: true, key: {KEY}, endpoint: '{http_server.url('/indexnow')}'}}\n"
        f"targets:\n  - {{name: shop, url: '{http_server.url('/sitemap.xml')}'}}\n",
        encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    line = daemon.event("indexnow key file not verified", timeout=30)
    assert line["level"] == "error"
    assert line["rule"] == "indexnow-key-missing"
    assert line["host"] == http_server.url("").rstrip("/")
    assert line["location"] == http_server.url("/[key].txt")
    assert "it does not hold exactly the key" in line["error"]
    # The next check carries the issue; its metric says so.
    daemon.more_checks("shop", 2, timeout=30)
    assert daemon.metric("sitemap_monitor_issues", target="shop",
                         rule="indexnow-key-missing") == 1
    assert http_server.requests_to("/indexnow") == []
    assert len(http_server.requests_to(f"/{KEY}.txt")) == 1  # once, not at every pass
    assert not [raw for raw in daemon.raw if KEY in raw]
