"""What IndexNow's delivery loop reads from the database: a target's documents only when a
snapshot was written since they were read, a key file's state only once it is due, on every
replica that shares the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from httpserver import TestServer
from indexnow_receiver import KEY, Receiver
from site_fixture import Site, urlset
from sqlalchemy import Engine, event

from monitor.cli.commands import main
from monitor.config import load
from monitor.indexnow import protocol
from monitor.indexnow.submitter import Submitter
from monitor.read.fetch import Fetcher
from monitor.store import indexnowrows
from monitor.store.db import make_engine

FOREIGN = "https://elsewhere.example"


@pytest.fixture
def receiver(http_server: TestServer) -> Receiver:
    """The IndexNow endpoint and the key files, on the site's server."""
    return Receiver(http_server)


@pytest.fixture
def cfg(tmp_path: Path, site: Site, receiver: Receiver) -> str:
    """A configuration whose one target, ``t``, submits to the receiver."""
    path = tmp_path / "monitor.yaml"
    path.write_text(
        "defaults:\n  timeout: 2s\n  read_timeout: 2s\n"
        f"  indexnow: {{enabled: true, key: {KEY}, endpoint: '{receiver.endpoint}'}}\n"
        f"targets:\n  - {{name: t, url: '{site.url('/sitemap.xml')}'}}\n")
    return str(path)


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    made = make_engine(db)
    yield made
    made.dispose()


def check(capsys: pytest.CaptureFixture[str], cfg: str, db: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["check", "t", "--config", cfg, "--database-url", db, "--json"])
    found = capsys.readouterr()
    assert code == 0, found.err
    return dict(json.loads(found.out))


@contextlib.contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine runs meanwhile."""
    seen: list[str] = []

    def note(*args: Any) -> None:
        seen.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


class Replica:
    """One replica's Submitter on the shared database, with a clock the test moves."""

    def __init__(self, cfg: str, engine: Engine, name: str) -> None:
        self.config = load(cfg)
        self.offset = timedelta()
        self.fetcher = Fetcher()
        self.submitter = Submitter(
            self.config.target, indexnowrows.SqlSubmissions(engine), self.fetcher,
            owner=name, clock=self.now, targets=self.config.resolved_targets, concurrency=8)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


def replicas(cfg: str, engine: Engine, count: int,
             test: Callable[..., Awaitable[None]]) -> None:
    """Run ``test`` with ``count`` replicas, their clients closed after."""
    async def run() -> None:
        made = [Replica(cfg, engine, f"replica-{i}") for i in range(count)]
        try:
            await test(*made)
        finally:
            for replica in made:
                await replica.fetcher.aclose()

    asyncio.run(run())


def enqueue_foreign(engine: Engine, scope: str, rows: int) -> None:
    """Rows of an origin that is not one of the target's sitemaps (a loc-out-of-scope loc)."""
    items = [indexnowrows.NewSubmission(FOREIGN, (f"{FOREIGN}/{scope}/{i}",), {"added": 1},
                                        f"{scope}-{i}") for i in range(rows)]
    with engine.begin() as conn:
        indexnowrows.enqueue(conn, "t", None, scope, items, datetime.now(UTC))


def test_rows_of_a_foreign_origin_do_not_read_the_targets_documents_again(
    site: Site, receiver: Receiver, db: str, cfg: str, engine: Engine,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site.set("/sitemap.xml", urlset({site.url(f"/p{i}"): None for i in range(3)}))
    check(capsys, cfg, db)

    async def test(replica: Replica) -> None:
        submitter = replica.submitter
        enqueue_foreign(engine, "first", 5)
        with statements(engine) as first:
            assert await submitter.deliver_due() == 5
        assert len([s for s in first if "target_documents" in s]) == 1
        enqueue_foreign(engine, "second", 5)
        with statements(engine) as second:
            assert await submitter.deliver_due() == 5
        assert [s for s in second if "target_documents" in s] == []
        # A check that writes a snapshot is seen at the next row: its documents are read.
        site.set("/sitemap.xml", urlset({site.url(f"/p{i}"): None for i in range(4)}))
        await asyncio.to_thread(check, capsys, cfg, db)  # the command runs its own loop
        enqueue_foreign(engine, "third", 2)
        with statements(engine) as third:
            assert await submitter.deliver_due() == 3  # the check's own row, and these
        assert len([s for s in third if "target_documents" in s]) == 1

    replicas(cfg, engine, 1, test)
    rows = indexnowrows.SqlSubmissions(engine).history("t", 100)
    assert sorted((r["host"], r["status"]) for r in rows) == sorted(
        [(FOREIGN, "failed")] * 12 + [(site.url(""), "delivered")])
    assert {r["answer"] for r in rows if r["host"] == FOREIGN} == {
        f"out of scope: {FOREIGN} is not the origin of one of the target's sitemaps"}
    assert receiver.urls() == [site.url("/p3")]


def test_the_key_sweep_reads_a_key_files_state_only_once_it_is_due(
    site: Site, receiver: Receiver, db: str, cfg: str, engine: Engine,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site.set("/sitemap.xml", urlset({site.url("/a"): None}))
    check(capsys, cfg, db)

    async def test(one: Replica, two: Replica) -> None:
        await one.submitter.sweep()
        assert receiver.key_fetches == ["127.0.0.1"]
        # The other replica reads the state the first stored, and does not fetch again.
        await two.submitter.sweep()
        assert receiver.key_fetches == ["127.0.0.1"]
        for replica in (one, two):  # a minute on: nothing is due, nothing is read
            replica.offset += timedelta(seconds=60)
            with statements(engine) as seen:
                await replica.submitter.sweep()
            assert [s for s in seen if "indexnow_keys" in s] == []
        # A day on, one fetch again between the two replicas.
        for replica in (one, two):
            replica.offset += timedelta(seconds=protocol.KEY_TTL)
        await two.submitter.sweep()
        await one.submitter.sweep()
        assert receiver.key_fetches == ["127.0.0.1"] * 2
        # A wrong key file is fetched again 15 minutes on, not before.
        receiver.key_body = b"another-key-entirely"
        for replica in (one, two):
            replica.offset += timedelta(seconds=protocol.KEY_TTL)
        await one.submitter.sweep()
        await two.submitter.sweep()
        assert len(receiver.key_fetches) == 3
        receiver.key_body = None
        for replica in (one, two):
            replica.offset += timedelta(seconds=protocol.KEY_RETRY - 60)
        await one.submitter.sweep()
        assert len(receiver.key_fetches) == 3
        for replica in (one, two):
            replica.offset += timedelta(seconds=61)
        await two.submitter.sweep()
        await one.submitter.sweep()
        assert len(receiver.key_fetches) == 4
        states = indexnowrows.SqlSubmissions(engine).keys("t")
        assert [(k.origin, k.ok) for k in states] == [(site.url(""), True)]

    replicas(cfg, engine, 2, test)
