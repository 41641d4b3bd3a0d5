"""Fixtures of the daemon's tests: migrated databases and rows written as a check would."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness import Daemon
from sqlalchemy import Engine, insert, update

from monitor.store import changelocs, db
from monitor.store.schema import changes, documents, snapshots, targets

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Daemons started by a test, stopped whatever happens."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.stop()


@pytest.fixture
def engine(migrated_database_url: str) -> Iterator[Engine]:
    """A migrated database, once on SQLite and once on PostgreSQL."""
    eng = db.make_engine(migrated_database_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: Path, sqlite_template: Path) -> Iterator[Engine]:
    """A migrated SQLite file."""
    shutil.copyfile(sqlite_template, tmp_path / "monitor.db")
    eng = db.make_engine(f"sqlite:///{tmp_path}/monitor.db")
    yield eng
    eng.dispose()


def add_target(engine: Engine, name: str, url: str = "http://127.0.0.1/sitemap.xml", *,
               due: datetime = T0) -> int:
    """Insert a target row, due at ``due`` (when it was made, as upsert_targets makes it);
    return its id."""
    with engine.begin() as conn:
        return int(conn.execute(
            insert(targets).values(name=name, url=url, created_at=T0, next_due_at=due)
            .returning(targets.c.id)
        ).scalar_one())


def add_snapshot(
    engine: Engine,
    target_id: int,
    *,
    at: datetime = T0,
    outcome: str = "ok",
    urls: int = 0,
    invalid: int = 0,
    issue_counts: dict[str, int] | None = None,
    docs: tuple[str, ...] = ("ok",),
    change_list: tuple[tuple[str, str], ...] = (),
    counted: bool = False,
) -> int:
    """Insert a snapshot with documents of these outcomes and these (kind, loc) changes;
    ``counted``: as 0006 on stores them (counts in the snapshot, rows only for ok and failed),
    else as before (a row each)."""
    with engine.begin() as conn:
        snapshot_id = int(conn.execute(
            insert(snapshots).values(
                target_id=target_id, started_at=at, finished_at=at + timedelta(seconds=1),
                outcome=outcome, urls=urls, invalid=invalid,
                added=sum(k == "added" for k, _ in change_list),
                removed=sum(k == "removed" for k, _ in change_list),
                issue_counts=json.dumps(issue_counts or {}),
                document_counts=json.dumps(Counter(docs)) if counted else "{}",
                error_kind="http-status" if outcome == "failed" else None,
                error_message="HTTP 500" if outcome == "failed" else None,
            ).returning(snapshots.c.id)
        ).scalar_one())
        for i, doc_outcome in enumerate(docs):
            if counted and doc_outcome not in ("ok", "failed"):
                continue
            conn.execute(insert(documents).values(
                snapshot_id=snapshot_id, url=f"http://127.0.0.1/doc{i}.xml", outcome=doc_outcome))
        for kind, loc in change_list:
            conn.execute(insert(changes).values(
                snapshot_id=snapshot_id, target_id=target_id, kind=kind, loc=loc,
                after=json.dumps({"lastmod": None}) if kind != "removed" else None))
        # As a check's own transaction keeps them (store.checkwriter.close_snapshot).
        changelocs.note_snapshot(conn, target_id, snapshot_id)
        conn.execute(update(targets).where(targets.c.id == target_id).values(
            snapshot_count=targets.c.snapshot_count + 1,
            change_count=targets.c.change_count + len(change_list)))
    return snapshot_id
