"""The versions of the robots.txt of a target's hosts, in the check's transaction.

``current`` reads the version in force of each robots.txt a target watches; ``save`` keeps a
new version (the first fetch, a change) as a row, rewrites the validators of the version in
force otherwise, and records each change as a ``robots`` change (before/after text, rule
``robots-changed``). ``in_force`` reads the same versions with the time each was read, for
the URL checks, so that a version a check read is in force for them too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update

from monitor.core.rules import RuleId
from monitor.store.schema import changes, robots_files, targets

__all__ = ["VERSIONS_SHOWN", "Version", "current", "history", "in_force", "save"]

VERSIONS_SHOWN = 5  # per robots.txt on a page: its newest versions, each as a diff


@dataclass(frozen=True, slots=True)
class Version:
    """One robots.txt after a check: ``new`` keeps it as a version, ``before`` (when
    ``changed``) is the text it replaced."""

    url: str
    http_status: int | None
    text: str | None
    etag: str | None
    last_modified: str | None
    new: bool
    validators_moved: bool = True  # the version in force gets these validators
    changed: bool = False
    before: str | None = None


def current(conn: Connection, target_id: int) -> dict[str, tuple[str | None, str | None,
                                                                  str | None]]:
    """The version in force of each robots.txt of the target: url -> (text, etag,
    last_modified)."""
    r = robots_files.c
    newest = (select(func.max(r.id)).where(r.target_id == target_id).group_by(r.url)
              .scalar_subquery())
    rows = conn.execute(select(r.url, r.text, r.etag, r.last_modified).where(r.id.in_(newest)))
    return {url: (text, etag, modified) for url, text, etag, modified in rows}


def in_force(engine: Engine, target_id: int) -> dict[str, tuple[str | None, datetime]]:
    """The version in force of each robots.txt the target's checks watch: url -> (text, when
    it was read last)."""
    r = robots_files.c
    newest = (select(func.max(r.id)).where(r.target_id == target_id).group_by(r.url)
              .scalar_subquery())
    with engine.connect() as conn:
        rows = conn.execute(select(r.url, r.text, r.fetched_at).where(r.id.in_(newest)))
        return {url: (text, fetched_at) for url, text, fetched_at in rows}


def history(engine: Engine, name: str, shown: int = VERSIONS_SHOWN,
            ) -> list[dict[str, Any]] | None:
    """The robots.txt a target watches, each with its version in force and its newest
    ``shown`` versions (newest first, each with the text it replaced); None when no target
    has that name."""
    r = robots_files.c
    with engine.connect() as conn:
        target_id = conn.execute(select(targets.c.id).where(targets.c.name == name)).scalar()
        if target_id is None:
            return None
        heads = conn.execute(select(r.id, r.url).where(r.target_id == target_id)
                             .order_by(r.url, r.id.desc())).all()
        wanted: dict[str, list[int]] = {}
        for row_id, url in heads:  # one more than shown: the text the oldest shown replaced
            kept = wanted.setdefault(url, [])
            if len(kept) <= shown:
                kept.append(row_id)
        ids = [i for kept in wanted.values() for i in kept]
        rows = {row.id: row for row in conn.execute(
            select(r.id, r.snapshot_id, r.fetched_at, r.http_status, r.text)
            .where(r.id.in_(ids)))} if ids else {}
    found = []
    for url, kept in wanted.items():
        versions = [{"id": i, "snapshot_id": rows[i].snapshot_id, "read_at": rows[i].fetched_at,
                     "http_status": rows[i].http_status, "text": rows[i].text,
                     "first": n == len(kept) - 1 and len(kept) <= shown,
                     "before": rows[kept[n + 1]].text if n + 1 < len(kept) else None}
                    for n, i in enumerate(kept[:shown])]
        found.append({"url": url, "text": versions[0]["text"], "versions": versions,
                      "more": len(kept) > shown})
    return found


def save(conn: Connection, target_id: int, snapshot_id: int | None, now: datetime,
         versions: Sequence[Version]) -> int:
    """Store this check's robots.txt versions; return the change rows written (for
    ``SnapshotWrite.changes_written``)."""
    r = robots_files.c
    written = 0
    for v in versions:
        if v.new:
            conn.execute(insert(robots_files).values(
                target_id=target_id, url=v.url, snapshot_id=snapshot_id, fetched_at=now,
                http_status=v.http_status, text=v.text, etag=v.etag,
                last_modified=v.last_modified))
        elif v.validators_moved:
            newest = select(func.max(r.id)).where(r.target_id == target_id, r.url == v.url)
            conn.execute(update(robots_files).where(r.id == newest.scalar_subquery()).values(
                fetched_at=now, etag=v.etag, last_modified=v.last_modified))
        if v.changed and snapshot_id is not None:
            conn.execute(insert(changes).values(
                snapshot_id=snapshot_id, target_id=target_id, kind="robots", loc=v.url,
                before=json.dumps({"text": v.before}, ensure_ascii=False),
                after=json.dumps({"text": v.text, "http_status": v.http_status},
                                 ensure_ascii=False),
                rule=RuleId.ROBOTS_CHANGED))
            written += 1
    return written  # counted in targets.change_count with the check's other changes
