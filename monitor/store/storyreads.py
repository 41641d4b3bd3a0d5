"""One URL's whole story (the ``url`` command, its API route and its page): whether the
target lists it now and where, since when, its fields and issues, its health, and every change
recorded about it, newest first. A URL the sitemap dropped keeps what its removal's check
answered and its last state while listed (``removal_answers``: its ``url_states`` row is gone).

Read in a bounded number of short reads: the live entry sets of the latest snapshot one at a
time (at most 50,000 locs each, found by a text search of their locs, not a split), the
URL's change rows by the ``(target_id, loc)`` index, and the packs of ``changed`` changes
(``monitor.codec.changepacks``), which hold positions, not locs: each version they point into is
searched once for the loc, and only a pack whose version holds it is unpacked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, literal, select

from monitor.codec import changepacks, entryset
from monitor.core.errors import NotFound
from monitor.core.model import RULES, Entry
from monitor.store.checkreads import read_columns, read_sets
from monitor.store.retry import transaction
from monitor.store.schema import (
    changes,
    entry_sets,
    removal_answers,
    snapshots,
    targets,
    url_states,
)
from monitor.store.targetrows import iso_time

__all__ = ["MAX_EVENTS", "PACK_VERSIONS", "read_story"]

MAX_EVENTS = 1000  # changes of one URL shown; a URL that flapped more says how many it left
PACK_VERSIONS = 500  # entry-set versions searched for packed changes, newest first
Describe = Callable[[str, Entry, str], dict[str, Any]]


def _position(stored: entryset.Columns, loc: str) -> int | None:
    """Where ``loc`` is among a version's locs, found in their text (no list of 50,000)."""
    if not stored.size:
        return None
    text = stored.loc_text()
    at = text.find(f"\x00{loc}\x00")
    if at >= 0:
        return text.count("\x00", 0, at + 1)
    if text.startswith(f"{loc}\x00") or text == loc:
        return 0
    if text.endswith(f"\x00{loc}"):
        return stored.size - 1
    return None


def read_story(engine: Engine, name: str, loc: str, describe: Describe) -> dict[str, Any]:
    """The story of ``loc`` in the target ``name``: raises ``NotFound`` for no such target."""

    def heads(conn: Connection) -> tuple[int, int | None, Any]:
        target_id = conn.execute(select(targets.c.id).where(targets.c.name == name)
                                 ).scalar_one_or_none()
        if target_id is None:
            raise NotFound(f"no target named {name!r} in this database")
        s = snapshots.c
        latest = conn.execute(select(s.id).where(s.target_id == target_id)
                              .order_by(s.id.desc()).limit(1)).scalar()
        u = url_states.c
        health = conn.execute(select(u.listed, u.state, u.rule, u.http_status, u.final_url,
                                     u.hops, u.detail, u.since, u.checked_at, u.attempts,
                                     u.due_at)
                              .where(u.target_id == target_id, u.loc == loc)).first()
        return target_id, latest, health

    target_id, latest, health = transaction(engine, heads)
    listed = [] if latest is None else _listed(engine, target_id, latest, loc, describe)
    events, more, oldest = _events(engine, target_id, loc)
    answers = _answers(engine, target_id, loc)
    for event in events:  # what a removed URL answered when its removal was looked at
        if event["kind"] == "removed" and event["snapshot_id"] in answers:
            event["answer"] = answers[event["snapshot_id"]][0]
    removal = None
    if not listed and events:
        dropped = next((e for e in events if e["kind"] in ("added", "removed")), None)
        if dropped is not None and dropped["kind"] == "removed":
            removal = {"snapshot_id": dropped["snapshot_id"], "at": dropped["at"],
                       "reason": dropped["reason"], "answer": dropped.get("answer")}
    entry = listed[0] if listed else None
    last = None
    if health is None and removal is not None:  # its row went with the removal's answer
        last = answers.get(removal["snapshot_id"], (None, None))[1]
    return {
        "target": name, "loc": loc, "snapshot_id": latest,
        "listed": bool(listed),
        "documents": [found["document"] for found in listed],
        "entry": None if entry is None else {k: v for k, v in entry.items() if k != "issues"},
        "issues": [issue for found in listed for issue in found["issues"]],
        "health": _health(health, last),
        "removal": removal,
        "first_listed": _first_listed(engine, target_id, oldest, bool(listed)),
        "changes": events,
        "changes_left": more,
    }


def _health(row: Any, last: dict[str, Any] | None) -> dict[str, Any] | None:
    """The URL's health: its row, or once the row went with its removal's answer, the last
    state its checks found while it was listed (``listed`` false); None when never checked."""
    if last is not None:
        return {"rule": None, "final_url": None, "hops": 0, "detail": None, "since": None,
                **last, "listed": False, "attempts": 0, "due_at": None}
    if row is None:
        return None
    return {"state": row.state, "rule": row.rule, "http_status": row.http_status,
            "final_url": row.final_url, "hops": row.hops, "detail": row.detail,
            "since": iso_time(row.since), "checked_at": iso_time(row.checked_at),
            "listed": bool(row.listed),
            # tries in a row without an answer to trust since, and when it is tried again
            "attempts": row.attempts, "due_at": iso_time(row.due_at)}


def _listed(engine: Engine, target_id: int, snapshot_id: int, loc: str, describe: Describe,
            ) -> list[dict[str, Any]]:
    """The loc in each entry set live at the snapshot: its document, fields and issues."""
    v = entry_sets.c
    live = (v.target_id == target_id, v.first_snapshot_id <= snapshot_id,
            v.removed_snapshot_id.is_(None) | (v.removed_snapshot_id > snapshot_id))
    ids = transaction(engine, lambda conn: list(conn.execute(
        select(v.id).where(*live).order_by(v.id)).scalars()))
    found = []
    for set_id in ids:  # one version's columns at a time
        version = _version(engine, set_id)
        if version is None:
            continue
        document, stored = version
        position = _position(stored, loc)
        if position is None:
            continue
        fields = [stored.column(i)[position] for i in range(1, 5)]
        valid = position not in stored.invalid()
        rules = (stored.rules().get(position) or "").split()
        entry = Entry(loc, *fields)
        issues = []
        for rule in rules:
            try:
                issues.append(describe(rule, entry, document))
            except KeyError:  # a rule of a later version of the rules, without a message here
                issues.append({"rule": rule, "severity": RULES.get(rule, "error"), "loc": loc,
                               "document": document, "message": rule})
        found.append({"document": document, "status": "valid" if valid else "invalid",
                      "lastmod": fields[0], "changefreq": fields[1], "priority": fields[2],
                      "extensions": fields[3], "issues": issues})
    return found


def _events(engine: Engine, target_id: int, loc: str,
            ) -> tuple[list[dict[str, Any]], int, tuple[int, str] | None]:
    """Every change about the loc, newest first (at most ``MAX_EVENTS``), how many more, and
    the oldest one's snapshot and kind."""
    c = changes.c

    def plain(conn: Connection) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in conn.execute(
            select(c.snapshot_id, c.id, literal(0), c.kind, c.before, c.after, c.reason,
                   c.rule)
            .where(c.target_id == target_id, c.loc == loc, c.members.is_(None))
            .order_by(c.snapshot_id.desc(), c.id.desc()))]

    rows = transaction(engine, plain) + _packed(engine, target_id, loc)
    rows.sort(key=lambda row: (row[0], row[1], row[2]), reverse=True)
    shown, more = rows[:MAX_EVENTS], max(0, len(rows) - MAX_EVENTS)
    times = _times(engine, {row[0] for row in shown})
    events = []
    for snapshot_id, change_id, _j, kind, before, after, reason, rule in shown:
        was = None if before is None else json.loads(before)
        now = None if after is None else json.loads(after)
        # A health transition carries the time its check found it; other changes their check's.
        at = (now or {}).get("checked_at") if kind == "health" else None
        events.append({"id": change_id, "snapshot_id": snapshot_id,
                       "at": at or times.get(snapshot_id), "kind": kind, "loc": loc,
                       "before": was,
                       "after": now, "reason": reason, "rule": rule})
    oldest = next(((row[0], row[3]) for row in reversed(rows) if row[3] in _LISTED_KINDS), None)
    return events, more, oldest


_LISTED_KINDS = ("added", "removed", "changed", "invalid", "health")  # about a listed URL


def _answers(engine: Engine, target_id: int, loc: str,
             ) -> dict[int, tuple[dict[str, Any], dict[str, Any] | None]]:
    """What the URL answered at each of its removals' checks, and its last state before."""
    a = removal_answers.c
    return transaction(engine, lambda conn: {
        row.snapshot_id: (json.loads(row.answer), None if row.last is None
                          else json.loads(row.last))
        for row in conn.execute(select(a.snapshot_id, a.answer, a.last)
                                .where(a.target_id == target_id, a.loc == loc))})


def _first_listed(engine: Engine, target_id: int, oldest: tuple[int, str] | None,
                  listed: bool) -> dict[str, Any] | None:
    """When the URL was first listed: its oldest ``added`` change, or, when its oldest change
    is of another kind (or it has none and is listed), the target's first check kept, whose
    baseline listed it without a change row."""
    if oldest is not None and oldest[1] == "added":
        return {"snapshot_id": oldest[0], "at": _times(engine, {oldest[0]}).get(oldest[0]),
                "first_check": False}
    if oldest is None and not listed:
        return None
    s = snapshots.c
    first = transaction(engine, lambda conn: conn.execute(
        select(s.id, s.started_at).where(s.target_id == target_id).order_by(s.id).limit(1)
    ).first())
    if first is None:
        return None
    return {"snapshot_id": first.id, "at": iso_time(first.started_at), "first_check": True}


def _packed(engine: Engine, target_id: int, loc: str) -> list[tuple[Any, ...]]:
    """The loc's ``changed`` changes held in packs, as rows like the plain ones."""
    c = changes.c
    packs = transaction(engine, lambda conn: [tuple(row) for row in conn.execute(
        select(c.id, c.snapshot_id, c.entry_set_id, c.before_set_id, c.kind, c.reason, c.rule)
        .where(c.target_id == target_id, c.members.is_not(None))
        .order_by(c.id.desc()))])
    versions: list[int] = []
    for pack in packs:
        if pack[2] not in versions and len(versions) < PACK_VERSIONS:
            versions.append(pack[2])
    out: list[tuple[Any, ...]] = []
    for set_id in versions:
        found = _version(engine, set_id)
        if found is None:
            continue
        stored = found[1]
        position = _position(stored, loc)
        if position is None:
            continue
        version = changepacks.Version(stored)
        for change_id, snapshot_id, pack_set, before_id, kind, reason, rule in packs:
            if pack_set != set_id:
                continue
            members = changepacks.unpack(_pack(engine, change_id))
            for j, member in enumerate(members):
                if member[0] != position:
                    continue
                before = None
                if member[1] is None and before_id is not None:
                    older = _version(engine, before_id)
                    before = None if older is None else changepacks.Version(older[1])
                _loc, was, now = version.changes([member], before, kind)[0]
                out.append((snapshot_id, change_id, j + 1, kind, was, now, reason, rule))
    return out


def _version(engine: Engine, set_id: int) -> tuple[str, entryset.Columns] | None:
    """An entry-set version's document and columns, in a short read of its own."""
    v = entry_sets.c

    def read(conn: Connection) -> list[tuple[Any, ...]]:
        return read_columns(conn, select(v.document_url, v.data).where(v.id == set_id))

    rows = transaction(engine, read)
    return (str(rows[0][0]), rows[0][1]) if rows else None


def _pack(engine: Engine, change_id: int) -> bytes:
    """A pack row's stored members."""
    c = changes.c

    def read(conn: Connection) -> bytes:
        return bytes(read_sets(conn, select(c.id, c.pack).where(c.id == change_id),
                               whole=False)[0][1])

    return transaction(engine, read)


def _times(engine: Engine, ids: set[int]) -> dict[int, str | None]:
    if not ids:
        return {}
    s = snapshots.c
    return transaction(engine, lambda conn: {
        row.id: iso_time(row.started_at)
        for row in conn.execute(select(s.id, s.started_at).where(s.id.in_(sorted(ids))))})
