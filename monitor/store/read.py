"""Read-only queries for the CLI's ``history`` and ``changes`` (the API has its own pages)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from monitor.store.schema import changes, snapshots, targets

__all__ = ["target_changes", "target_history"]


def _target_id(conn: Connection, name: str) -> int | None:
    return conn.execute(select(targets.c.id).where(targets.c.name == name)).scalar()


def target_history(conn: Connection, name: str, limit: int) -> list[dict[str, Any]] | None:
    """The newest snapshots of a target, newest first; None when the target is unknown."""
    target_id = _target_id(conn, name)
    if target_id is None:
        return None
    s = snapshots.c
    rows = conn.execute(
        select(s.id, s.started_at, s.finished_at, s.outcome, s.urls, s.invalid, s.added,
               s.removed, s.changed, s.invalid_new, s.documents_ok, s.documents_failed,
               s.fetched_bytes, s.duration_seconds, s.error_kind, s.error_message)
        .where(s.target_id == target_id)
        .order_by(s.id.desc())
        .limit(limit)
    )
    return [
        {
            "snapshot_id": r.id,
            "started_at": _iso(r.started_at),
            "finished_at": _iso(r.finished_at),
            "outcome": r.outcome,
            "urls": r.urls,
            "invalid": r.invalid,
            "added": r.added,
            "removed": r.removed,
            "changed": r.changed,
            "invalid_new": r.invalid_new,
            "documents_ok": r.documents_ok,
            "documents_failed": r.documents_failed,
            "fetched_bytes": r.fetched_bytes,
            "duration_seconds": r.duration_seconds,
            "error": None if r.error_kind is None
            else {"kind": r.error_kind, "message": r.error_message},
        }
        for r in rows
    ]


def target_changes(
    conn: Connection, name: str, *, since: datetime | None, kind: str | None, limit: int
) -> list[dict[str, Any]] | None:
    """A target's changes, oldest first, after ``since``; None when the target is unknown."""
    target_id = _target_id(conn, name)
    if target_id is None:
        return None
    c, s = changes.c, snapshots.c
    query = (
        select(c.id, c.snapshot_id, c.kind, c.loc, c.before, c.after, s.finished_at)
        .join(snapshots, s.id == c.snapshot_id)
        .where(c.target_id == target_id)
        .order_by(c.id)
        .limit(limit)
    )
    if since is not None:
        query = query.where(s.finished_at >= since)
    if kind is not None:
        query = query.where(c.kind == kind)
    return [
        {
            "snapshot_id": r.snapshot_id,
            "at": _iso(r.finished_at),
            "kind": r.kind,
            "loc": r.loc,
            "before": None if r.before is None else json.loads(r.before),
            "after": None if r.after is None else json.loads(r.after),
        }
        for r in conn.execute(query)
    ]


def _iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC; SQLite hands back naive datetimes, which are stored as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()
