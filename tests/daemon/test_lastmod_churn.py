"""The lastmod churn gauge of a real daemon: a CMS that writes "lastmod = now"
makes ``sitemap_monitor_lastmod_churn_ratio`` 1 and, from the second re-check on, the
``lastmod-churn`` issue; a restart restores the gauge from the database."""

from __future__ import annotations

import itertools
import json
import signal
import threading
from pathlib import Path

from harness import Daemon, sitemap, write_config
from httpserver import Reply, Request, TestServer
from sqlalchemy import select

from monitor.store import db
from monitor.store.schema import snapshots


def test_the_churn_gauge_is_observed_and_restored(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    pages = [http_server.url(f"/p{i}") for i in range(25)]
    served = itertools.count()
    lock = threading.Lock()

    def now_as_lastmod(_request: Request) -> Reply:
        with lock:  # each request a later minute: every lastmod changes at every check
            n = next(served)
        stamp = f"2024-05-01T{n // 60 % 24:02d}:{n % 60:02d}:00Z"
        return Reply(body=sitemap(dict.fromkeys(pages, stamp)))

    http_server.route("/s.xml", now_as_lastmod)
    url = f"sqlite:///{tmp_path}/monitor.db"
    config = write_config(tmp_path / "c.yaml", url, [("cms", http_server.url("/s.xml"))],
                          extra="scheduler: {shutdown_grace: 0.5s}\n")
    first = Daemon(config)
    daemons.append(first)
    first.started()
    assert first.metric("sitemap_monitor_lastmod_churn_ratio", target="cms") == 0
    first.more_checks("cms", 3)  # the baseline and two re-checks
    assert first.metric("sitemap_monitor_lastmod_churn_ratio", target="cms") == 1
    assert first.metric("sitemap_monitor_issues", target="cms", rule="lastmod-churn") == 1
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    engine = db.make_engine(url)
    with engine.connect() as conn:
        counts = conn.execute(select(snapshots.c.issue_counts).order_by(snapshots.c.id)
                              ).scalars().all()
    engine.dispose()
    # Not on the first re-check: on the second, and on every one after it.
    assert ["lastmod-churn" in json.loads(c) for c in counts[:3]] == [False, False, True]
    assert all("lastmod-churn" in json.loads(c) for c in counts[2:])

    # The next check hangs, so whatever /metrics shows now was restored, not observed.
    http_server.route("/s.xml", Reply(body=sitemap(dict.fromkeys(pages, "2024-01-01")),
                                      delay=30))
    second = Daemon(config)
    daemons.append(second)
    second.started()
    assert second.metric("sitemap_monitor_lastmod_churn_ratio", target="cms") == 1
    assert second.metric("sitemap_monitor_issues", target="cms", rule="lastmod-churn") == 1
    assert second.checks() == []
