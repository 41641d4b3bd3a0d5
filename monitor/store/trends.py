"""What a target's charts draw: its last snapshots' URL counts and changes by kind, and the
health states of its listed URLs after each of them.

The URL checks write only transitions (a ``health`` change: the state before and after), so
the states after an older snapshot are the current counts with the later transitions undone,
newest first. A URL removed since then had its state dropped with it: the counts of the past
are those of the URLs listed now, which the chart says.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from monitor.store.retry import transaction
from monitor.store.schema import changes, snapshots, targets, url_states
from monitor.store.targetrows import iso_time

__all__ = ["POINTS", "trend"]

POINTS = 60  # snapshots a chart draws
_TRANSITIONS = 200_000  # health transitions read to undo at most; past that the chart stops


def trend(engine: Engine, name: str, count: int = POINTS) -> dict[str, Any] | None:
    """The last ``count`` completed snapshots of a target, oldest first, each with its
    changes by kind and (when its URLs are checked) its URLs by health state."""

    def read(conn: Connection) -> dict[str, Any] | None:
        target_id = conn.execute(select(targets.c.id).where(targets.c.name == name)
                                 ).scalar_one_or_none()
        if target_id is None:
            return None
        s = snapshots.c
        rows = list(conn.execute(
            select(s.id, s.started_at, s.urls, s.invalid, s.added, s.removed, s.changed,
                   s.invalid_new, s.outcome)
            .where(s.target_id == target_id, s.outcome != "failed")
            .order_by(s.id.desc()).limit(count)))
        rows.reverse()
        points = [{"id": r.id, "at": iso_time(r.started_at), "urls": r.urls, "invalid": r.invalid,
                   "changes": {"added": r.added, "removed": r.removed, "changed": r.changed,
                               "invalid": r.invalid_new}} for r in rows]
        if not points:
            return {"points": [], "health": False}
        first = points[0]["id"]
        c = changes.c
        for snapshot_id, kind, n in conn.execute(
                select(c.snapshot_id, c.kind, func.count())
                .where(c.target_id == target_id, c.kind.in_(("health", "robots")),
                       c.snapshot_id >= first)
                .group_by(c.snapshot_id, c.kind)):
            for point in points:
                if point["id"] == snapshot_id:
                    point["changes"][kind] = int(n)
        u = url_states.c
        now = {state: int(n) for state, n in conn.execute(
            select(u.state, func.count()).where(u.target_id == target_id, u.listed.is_(True))
            .group_by(u.state))}
        if not now:
            return {"points": points, "health": False}
        moves = conn.execute(
            select(c.snapshot_id, c.before, c.after)
            .where(c.target_id == target_id, c.kind == "health", c.snapshot_id > first)
            .order_by(c.snapshot_id.desc(), c.id.desc()).limit(_TRANSITIONS)).all()
        _undo(points, now, list(moves))
        return {"points": points, "health": True}

    return transaction(engine, read)


def _state(raw: str | None) -> str:
    return str(json.loads(raw).get("state")) if raw else "unknown"


def _undo(points: list[dict[str, Any]], now: dict[str, int], moves: list[Any]) -> None:
    """Each point's health counts: ``now`` for the last, then back through the transitions
    recorded after each point (newest first)."""
    counts = dict(now)
    i = 0
    for point in reversed(points):
        while i < len(moves) and moves[i].snapshot_id > point["id"]:
            _, before, after = moves[i]
            was, became = _state(before), _state(after)
            counts[became] = max(0, counts.get(became, 0) - 1)
            counts[was] = counts.get(was, 0) + 1
            i += 1
        point["health"] = {state: n for state, n in counts.items() if n}
