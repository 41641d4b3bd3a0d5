"""Two checks of one target at once (a ``check`` from the command line beside the daemon):
each reads the target's state at its start and writes at its end, so the one that ends second
would diff against a state that is no longer current. It stores nothing and says why."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from httpserver import Reply, Request, TestServer
from site_fixture import urlset
from sqlalchemy import func, select
from waiting import until_async

from monitor.check.pipeline import run_check
from monitor.cli.commands import main
from monitor.config import Target
from monitor.core.errors import LeaseLost
from monitor.read.fetch import Fetcher
from monitor.store.db import make_engine
from monitor.store.schema import entry_sets, snapshots


def _drip(release: threading.Event, body: bytes) -> Iterator[bytes]:
    cut = body.index(b"<url>")
    yield body[:cut]
    while not release.wait(0.05):
        yield b" "
    yield body[cut:]


def test_a_check_that_finds_a_newer_snapshot_of_its_target_stores_nothing(
    http_server: TestServer, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["db", "upgrade", "--database-url", db]) == 0
    capsys.readouterr()
    u = http_server.url
    body = urlset({u("/1"): None, u("/2"): None})
    release, requests = threading.Event(), []

    def reply(request: Request) -> Reply:
        requests.append(request)
        # The first check's sitemap drips until the test lets it end; the second's does not.
        return Reply(body=_drip(release, body) if len(requests) == 1 else body)

    http_server.route("/s.xml", reply)
    target = Target.model_validate({"name": "shop", "url": u("/s.xml")})
    engine = make_engine(db)

    async def both() -> None:
        fetcher = Fetcher(user_agent="conflict-test")
        try:
            slow = asyncio.create_task(run_check(target, engine=engine, fetcher=fetcher))
            await until_async(lambda: requests, what="the first check's request")
            fast = await run_check(target, engine=engine, fetcher=fetcher)
            assert (fast.outcome, fast.urls, fast.snapshot_id) == ("ok", 2, 1)
            release.set()
            with pytest.raises(LeaseLost, match="another process stored a check of this target"):
                await slow
        finally:
            release.set()
            await fetcher.aclose()

    try:
        asyncio.run(both())
        with engine.connect() as conn:
            stored = conn.execute(select(func.count()).select_from(snapshots)).scalar_one()
            current = conn.execute(select(func.count()).select_from(entry_sets).where(
                entry_sets.c.removed_snapshot_id.is_(None))).scalar_one()
    finally:
        engine.dispose()
    assert (stored, current) == (1, 1)  # the second check's snapshot and entry set only
