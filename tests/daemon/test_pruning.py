"""The daemon prunes history past each target's retention on its interval, while the
checks go on, on both databases."""

from __future__ import annotations

import itertools
from pathlib import Path

from harness import Daemon, sitemap, write_config
from httpserver import Reply, Request, TestServer
from sqlalchemy import Row, func, select
from waiting import until

from monitor.store import db
from monitor.store.schema import entry_sets, snapshots, targets


def test_the_daemon_keeps_only_what_retention_keeps_while_it_checks(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon], migrated_database_url: str,
) -> None:
    url = migrated_database_url.replace("postgresql+psycopg://", "postgresql://")
    page = http_server.url("/p")
    counter = itertools.count()

    def changing(_request: Request) -> Reply:  # every check finds one lastmod moved
        n = next(counter)
        return Reply(body=sitemap({f"{page}{i}": f"2024-01-{(n + i) % 28 + 1:02d}"
                                   for i in range(5)}))

    http_server.route("/sitemap.xml", changing)
    config = write_config(
        tmp_path / "c.yaml", url, [("shop", http_server.url("/sitemap.xml"))],
        extra="scheduler: {prune_interval: 1s}\n")
    text = config.read_text().replace(
        "defaults: {interval: 1s, jitter: 0, timeout: 20s}",
        "defaults: {interval: 1s, jitter: 0, timeout: 20s, "
        "retention: {snapshots: 1s, keep_last: 2}}")
    config.write_text(text)
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    pruned = daemon.event("history pruned", timeout=30, target="shop")
    assert pruned["snapshots"] >= 1
    # Checks go on, and the history stays a few snapshots long.
    later = daemon.wait_for(lambda line: line.get("event") == "history pruned"
                            and line["kept_from_snapshot"] >= pruned["kept_from_snapshot"] + 3,
                            timeout=30)
    engine = db.make_engine(url)

    def history() -> Row[tuple[int, int, int, int]]:
        """Snapshots kept, the first kept, the target's count of them and the stored entry
        sets, in one statement: no check or prune lands between the reads."""
        with engine.connect() as conn:
            return conn.execute(select(
                select(func.count()).select_from(snapshots).scalar_subquery(),
                select(func.min(snapshots.c.id)).scalar_subquery(),
                select(targets.c.snapshot_count).scalar_subquery(),
                select(func.count()).select_from(entry_sets).scalar_subquery(),
            )).one()

    try:
        # A prune removes snapshots, then the entry sets no kept snapshot uses (a later
        # transaction): the history is a few snapshots long once it has caught up.
        kept, first, counted, live_sets = until(
            lambda: (row := history())[0] <= 6 and row[3] <= row[0] + 1 and row,
            what="a short history, entry sets pruned")
    finally:
        engine.dispose()
    assert first >= later["kept_from_snapshot"]
    assert counted == kept  # the count is kept in the same transactions as the rows
    assert live_sets <= kept + 1  # one version a kept snapshot (one document), at most
    size = daemon.metric("sitemap_monitor_database_bytes")  # read at the scrape
    assert size is not None
    assert size >= 4096
    listed = daemon.get("/api/v1/targets/shop").json()
    assert listed["snapshots"] >= 2
    assert daemon.get("/api/v1/targets/shop/urls").status_code == 200
    daemon.stop()
