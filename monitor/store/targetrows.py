"""The daemon's queries: configured targets, claims with a lease, gauges to restore, the API.

Replicas coordinate only through the ``targets`` row : the due times live
there (``next_due_at``), and a replica runs a check only after a conditional ``UPDATE`` took a
free lease on the due target. ``claim_due`` takes a batch of the longest-due free targets in
one statement, as job queues on PostgreSQL do: the rows are picked ``FOR UPDATE SKIP LOCKED``,
so replicas claiming at once take different rows instead of queueing on the same ones, and the
lease condition is checked again under each row's lock, so a row goes to one replica only. On
SQLite (one writer) the same statement without the locking clause. Times are passed in (UTC),
never read from the database's clock, so tests can drive them; replicas' clocks are NTP-close.

A claim, a renewal and a release are each one statement, run in autocommit: the statement is
its own transaction, so it stays atomic, without the round trips of ``BEGIN`` and ``COMMIT``.
The daemon gives a lease back, with the target's next due time, inside the check's own
transaction (``release_in``); ``release`` is for a check that did not commit.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    Text,
    Update,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from monitor.core.errors import LeaseLost
from monitor.core.rules import RuleId
from monitor.listing.params import cursor, read_cursor
from monitor.listing.sorting import Sort, offered
from monitor.store import keyset
from monitor.store.retry import transaction
from monitor.store.schema import documents, snapshots, targets

__all__ = [
    "NEWEST",
    "PARKED",
    "Lease",
    "TargetGauges",
    "claim_due",
    "configured",
    "get_target",
    "give_back",
    "last_gauges",
    "list_snapshots",
    "list_targets",
    "next_due",
    "release",
    "release_in",
    "renew",
    "snapshot_cursor",
    "upsert_targets",
]


_AUTOCOMMIT: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def _autocommit(engine: Engine) -> Engine:
    """The engine, its connections in autocommit: for work that is one statement."""
    found = _AUTOCOMMIT.get(engine)
    if found is None:
        found = _AUTOCOMMIT[engine] = engine.execution_options(isolation_level="AUTOCOMMIT")
    return found


def _utc(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; every time this package writes is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def iso_time(value: datetime | None) -> str | None:
    """A time as the API and the listings write it: ISO 8601 in UTC, ``Z`` for the zone."""
    moment = _utc(value)
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


# The statements of every check, built once: building a statement and its cache key cost more
# than running it. Times are typed, so SQLite stores them as SQLAlchemy does.
_t = targets.c
_now = bindparam("now", type_=_t.lease_until.type)


# The due time of a target no replica is configured for (removed from the configuration):
# never due, so claims do not read it, until a configuration names it again.
PARKED = datetime(9999, 1, 1, tzinfo=UTC)


def _claim_statement(dialect: str, *, listed: bool) -> Update:
    """Lease up to ``limit`` due, free targets, the longest-due first; ``listed``: only those
    among ``names`` (a JSON list)."""
    due = (
        select(_t.id)
        .where(_t.next_due_at <= _now, or_(_t.lease_until.is_(None), _t.lease_until < _now))
        .order_by(_t.next_due_at)
        .limit(bindparam("limit"))
    )
    if listed:
        names = bindparam("names", type_=Text)
        if dialect == "postgresql":
            among = select(func.json_array_elements_text(cast(names, JSON)))
        else:
            among = select(func.json_each(names).table_valued("value").c.value)
        due = due.where(_t.name.in_(among))
    if dialect == "postgresql":
        due = due.with_for_update(skip_locked=True)
    return (
        update(targets)
        .where(_t.id.in_(due.scalar_subquery()))
        .values(
            lease_owner=bindparam("owner"),
            lease_until=bindparam("until", type_=_t.lease_until.type),
        )
        .returning(_t.name, _t.next_due_at)
    )


_CLAIMS = {
    (dialect, listed): _claim_statement(dialect, listed=listed)
    for dialect in ("postgresql", "sqlite") for listed in (False, True)
}
_RELEASE = (
    update(targets)
    .where(_t.name == bindparam("target_name"), _t.lease_owner == bindparam("owner"))
    .values(lease_owner=None, lease_until=None)
)
# A target a reload removed while it was checked is parked already: it stays parked.
_RELEASE_DUE = _RELEASE.values(next_due_at=case(
    (_t.next_due_at == bindparam("parked", type_=_t.next_due_at.type), _t.next_due_at),
    else_=bindparam("due", type_=_t.next_due_at.type)))
# The earliest due time still to come of a free target, by the next_due_at index (an ORDER BY
# and LIMIT, not min(): SQLite reads min() under a WHERE from every row in range).
_NEXT_DUE = (
    select(_t.next_due_at)
    .where(_t.next_due_at > _now, _t.next_due_at < bindparam("parked", type_=_t.next_due_at.type),
           or_(_t.lease_until.is_(None), _t.lease_until < _now))
    .order_by(_t.next_due_at)
    .limit(1)
)
_SET_DUE = (
    update(targets)
    .where(_t.name == bindparam("target_name"))
    .values(next_due_at=bindparam("due", type_=_t.next_due_at.type))
)


def upsert_targets(
    engine: Engine, configured: Sequence[tuple[str, str, datetime]], now: datetime
) -> None:
    """Make the stored targets what this configuration says: a row for every configured (name,
    url, first due time) that has none, URL changes followed, the targets it no longer names
    parked (``PARKED``) and those it names again due at their first due time. A target's row
    keeps its due time across restarts and reloads."""
    dialect_insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    wanted = {name: (url, first) for name, url, first in configured}

    def work(conn: Connection) -> None:
        rows = [{"name": name, "url": url, "created_at": now, "next_due_at": first}
                for name, url, first in configured]
        for start in range(0, len(rows), 500):
            statement = dialect_insert(targets).on_conflict_do_nothing(index_elements=["name"])
            conn.execute(statement, rows[start : start + 500])
        stored = conn.execute(select(_t.name, _t.url, _t.next_due_at)).all()
        park, unpark = [], []
        for name, url, due in stored:
            parked = due is not None and _utc(due) == PARKED
            if name not in wanted:
                if not parked:
                    park.append(name)
                continue
            if wanted[name][0] != url:
                conn.execute(update(targets).where(_t.name == name).values(url=wanted[name][0]))
            if parked or due is None:
                unpark.append({"target_name": name, "due": wanted[name][1]})
        for start in range(0, len(park), 500):
            conn.execute(update(targets).where(_t.name.in_(park[start : start + 500]))
                         .values(next_due_at=PARKED))
        if unpark:
            conn.execute(_SET_DUE, unpark)

    transaction(engine, work)


def configured(names: Iterable[str]) -> str:
    """The names ``claim_due`` may claim, as it takes them: made once a (re)load, not a claim."""
    return json.dumps(sorted(names))


def claim_due(
    engine: Engine,
    names: str | None,
    owner: str,
    now: datetime,
    *,
    lease: float,
    limit: int,
) -> list[tuple[str, datetime | None]]:
    """Lease up to ``limit`` due, unleased targets, the longest-due first: each (name, due
    time) this owner got, in one statement. ``names`` (``configured``) limits the claim to
    those targets; None claims any target (every replica knows every unparked target).

    The due time stays as it was: the check's release sets the next one. A target whose
    holder died is claimable once its lease has run out (its due time has long passed).
    """
    if limit <= 0:
        return []
    params = {"names": names, "now": now, "owner": owner, "limit": limit,
              "until": now + timedelta(seconds=lease)}
    dialect = "postgresql" if engine.dialect.name == "postgresql" else "sqlite"
    statement = _CLAIMS[dialect, names is not None]

    def work(conn: Connection) -> list[tuple[str, datetime | None]]:
        return [(name, _utc(due)) for name, due in conn.execute(statement, params)]

    return transaction(_autocommit(engine), work)


def next_due(engine: Engine, now: datetime) -> datetime | None:
    """When the next free target comes due after ``now`` (parked ones never), or None.

    Every replica reads it after its claims, so all of them wake when work comes due, not only
    the one whose check set that due time.
    """
    params = {"now": now, "parked": PARKED}
    return transaction(
        _autocommit(engine),
        lambda conn: _utc(conn.execute(_NEXT_DUE, params).scalar_one_or_none()),
    )


def renew(engine: Engine, name: str, owner: str, now: datetime, *, lease: float) -> bool:
    """Extend a lease this replica holds (a long check); False if it was lost."""
    t = targets.c
    statement = (
        update(targets)
        .where(t.name == name, t.lease_owner == owner)
        .values(lease_until=now + timedelta(seconds=lease))
    )
    return transaction(_autocommit(engine), lambda conn: conn.execute(statement).rowcount) == 1


def release_in(
    conn: Connection, name: str, owner: str, *, next_due_at: datetime | None = None
) -> bool:
    """Give the lease back in the caller's transaction; False if this owner no longer held it.

    ``next_due_at``: when the target is due next (None keeps the due time it has).
    """
    if next_due_at is None:
        done = conn.execute(_RELEASE, {"target_name": name, "owner": owner})
    else:
        done = conn.execute(_RELEASE_DUE, {"target_name": name, "owner": owner,
                                           "due": next_due_at, "parked": PARKED})
    return bool(done.rowcount == 1)


@dataclass(frozen=True, slots=True)
class Lease:
    """A replica's lease on a target while it checks it: given back, with the time the target
    is due next, in the transaction that stores the check (``give_back``)."""

    name: str
    owner: str
    next_due_at: datetime


def give_back(conn: Connection, lease: Lease) -> None:
    """Give the lease back in the check's transaction; LeaseLost (the transaction rolls back)
    when this replica no longer holds it: another one took the target over meanwhile."""
    if not release_in(conn, lease.name, lease.owner, next_due_at=lease.next_due_at):
        raise LeaseLost(f"{lease.name}: the lease was taken over while this check ran")


def release(
    engine: Engine, name: str, owner: str, *, next_due_at: datetime | None = None
) -> bool:
    """Give the lease back on its own; False if this owner no longer held it."""
    return transaction(
        _autocommit(engine),
        lambda conn: release_in(conn, name, owner, next_due_at=next_due_at),
    )


@dataclass(slots=True)
class TargetGauges:
    """What the gauges of one target showed after its last stored check."""

    name: str
    last_check: datetime | None = None
    last_success: datetime | None = None
    urls: int = 0
    invalid: int = 0
    issue_counts: dict[str, int] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=dict)
    lastmod_churn: float = 0.0  # of the last re-check that compared lastmods


def _last_ids(outcome_not: str | None = None) -> Any:
    s = snapshots.c
    query = select(s.target_id, func.max(s.id).label("id")).group_by(s.target_id)
    if outcome_not is not None:
        query = query.where(s.outcome != outcome_not)
    return query.subquery()


def last_gauges(engine: Engine, names: Iterable[str]) -> list[TargetGauges]:
    """The last snapshot of each named target, for restoring gauges at start-up."""
    wanted = set(names)
    s = snapshots.c

    def work(conn: Connection) -> list[TargetGauges]:
        last = _last_ids()
        rows = conn.execute(
            select(targets.c.name, targets.c.lastmod_compared, targets.c.lastmod_changed,
                   snapshots)
            .join(last, last.c.target_id == targets.c.id)
            .join(snapshots, s.id == last.c.id)
        ).all()
        ok = _last_ids("failed")
        success = dict(conn.execute(
            select(targets.c.name, s.finished_at)
            .join(ok, ok.c.target_id == targets.c.id)
            .join(snapshots, s.id == ok.c.id)
        ).all())
        by_snapshot: dict[int, dict[str, int]] = {}
        # Only snapshots from before 0006 count their documents by their rows.
        doc_rows = conn.execute(
            select(documents.c.snapshot_id, documents.c.outcome, func.count())
            .join(last, last.c.id == documents.c.snapshot_id)
            .join(snapshots, s.id == documents.c.snapshot_id)
            .where(s.document_counts == "{}")
            .group_by(documents.c.snapshot_id, documents.c.outcome)
        ).all()
        for snapshot_id, outcome, count in doc_rows:
            by_snapshot.setdefault(snapshot_id, {})[outcome] = count
        out = []
        for row in rows:
            if row.name not in wanted:
                continue
            out.append(TargetGauges(
                name=row.name,
                last_check=_utc(row.finished_at),
                last_success=_utc(success.get(row.name)),
                urls=row.urls,
                invalid=row.invalid,
                issue_counts=json.loads(row.issue_counts or "{}"),
                documents=json.loads(row.document_counts) or by_snapshot.get(row.id, {}),
                lastmod_churn=(row.lastmod_changed / row.lastmod_compared
                               if row.lastmod_compared and row.lastmod_changed is not None
                               else 0.0),
            ))
        return out

    return transaction(engine, work)


# ---- read side of the JSON API ----------------------------------------------------------


def _snapshot_json(row: Any) -> dict[str, Any]:
    issues = json.loads(row.issue_counts or "{}")
    return {
        "id": row.id,
        "started_at": iso_time(row.started_at),
        "finished_at": iso_time(row.finished_at),
        "outcome": row.outcome,
        "urls": row.urls,
        "invalid": row.invalid,
        "duplicates": issues.get(RuleId.LOC_DUPLICATE, 0),
        "added": row.added,
        "removed": row.removed,
        "changed": row.changed,
        "invalid_new": row.invalid_new,
        "documents_ok": row.documents_ok,
        "documents_failed": row.documents_failed,
        "fetched_bytes": row.fetched_bytes,
        "duration_seconds": row.duration_seconds,
        "issues": issues,
        "error": None if row.error_kind is None
        else {"kind": row.error_kind, "message": row.error_message},
    }


FAILED_DOCUMENTS_SHOWN = 20  # of one snapshot; ``documents_failed`` counts them all


def _with_failed_documents(conn: Connection, found: Sequence[dict[str, Any]]) -> None:
    """Name the documents each snapshot could not read (``failed_documents``: url,
    http_status, error), so a partial check says which ones, wherever it is shown."""
    for snapshot in found:
        snapshot["failed_documents"] = []
    ids = {s["id"]: s for s in found if s["documents_failed"]}
    if not ids:
        return
    d = documents.c
    rows = conn.execute(select(d.snapshot_id, d.url, d.http_status, d.error)
                        .where(d.snapshot_id.in_(list(ids)), d.outcome == "failed")
                        .order_by(d.snapshot_id, d.id))
    for snapshot_id, url, status, error in rows:
        shown = ids[snapshot_id]["failed_documents"]
        if len(shown) < FAILED_DOCUMENTS_SHOWN:
            shown.append({"url": url, "http_status": status, "error": error})


def _targets_json(conn: Connection, name: str | None, *, after: str | None = None,
                  limit: int | None = None) -> list[dict[str, Any]]:
    t, s = targets.c, snapshots.c
    # The counts are kept by each snapshot's transaction: counting the rows here read every
    # change of every target at each call; the last snapshot is one index lookup
    # per target, not a GROUP BY over every target's snapshots.
    last_id = select(func.max(s.id)).where(s.target_id == t.id).scalar_subquery()
    query = (
        select(
            t.id, t.name, t.url, t.next_due_at, t.lease_owner, t.lease_until,
            t.snapshot_count, t.change_count, last_id.label("last_id"),
        )
        .order_by(t.name)
    )
    if name is not None:
        query = query.where(t.name == name)
    if after is not None:
        query = query.where(t.name > after)
    if limit is not None:
        query = query.limit(limit)
    rows = conn.execute(query).all()
    ids = [r.last_id for r in rows if r.last_id is not None]
    snaps: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for srow in conn.execute(select(snapshots).where(s.id.in_(chunk))):
            snaps[srow.id] = _snapshot_json(srow)
    _with_failed_documents(conn, list(snaps.values()))
    return [
        {
            "name": r.name,
            "url": r.url,
            # A parked target (no longer configured) is due at no time.
            "next_due_at": None if _utc(r.next_due_at) == PARKED else iso_time(r.next_due_at),
            "leased_by": r.lease_owner if r.lease_until is not None else None,
            "snapshots": r.snapshot_count or 0,
            "changes": r.change_count or 0,
            "last_snapshot": snaps.get(r.last_id) if r.last_id is not None else None,
        }
        for r in rows
    ]


def list_targets(engine: Engine) -> list[dict[str, Any]]:
    """Every stored target with its last snapshot and its counts."""
    return transaction(engine, lambda conn: _targets_json(conn, None))


def page_targets(engine: Engine, after: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    """The ``limit`` targets named after ``after`` (in name order), and how many there are."""

    def read(conn: Connection) -> tuple[list[dict[str, Any]], int]:
        total = conn.execute(select(func.count()).select_from(targets)).scalar_one()
        return _targets_json(conn, None, after=after, limit=limit), int(total)

    return transaction(engine, read)


def get_target(engine: Engine, name: str) -> dict[str, Any] | None:
    """One stored target with its last snapshot and counts, or None."""
    found = transaction(engine, lambda conn: _targets_json(conn, name))
    return found[0] if found else None


def target_id_of(conn: Connection, name: str) -> int | None:
    """The id of the target configured as ``name``, or None when it has none yet."""
    found: int | None = conn.execute(
        select(targets.c.id).where(targets.c.name == name)
    ).scalar_one_or_none()
    return found


def list_snapshots(
    engine: Engine, name: str, *, limit: int, before: int | None = None,
    sort: Sort | None = None, cursor: str | None = None,
) -> list[dict[str, Any]] | None:
    """A target's snapshots, newest first, with ids below ``before``; None if no such target.
    ``sort``ed (``sorting.SORTS['snapshots']``), those after ``cursor``
    (``snapshot_cursor``): ``ORDER BY`` the column and the id."""
    s = snapshots.c
    sort = None if offered(sort, "snapshots") == NEWEST else sort
    column = None if sort is None else s[sort.column]
    last = None if cursor is None or sort is None else tuple(read_cursor(
        cursor, "snapshots", [sort.text], (int, str, int)))

    def work(conn: Connection) -> list[dict[str, Any]] | None:
        target_id = target_id_of(conn, name)
        if target_id is None:
            return None
        query = select(snapshots).where(s.target_id == target_id)
        if sort is None or column is None:
            if before is not None:
                query = query.where(s.id < before)
            query = query.order_by(s.id.desc())
        else:
            if last is not None:
                query = query.where(keyset.after(column, s.id, sort.descending, last))
            query = query.order_by(*keyset.order(column, s.id, sort.descending))
        found = [_snapshot_json(row) for row in conn.execute(query.limit(limit))]
        _with_failed_documents(conn, found)
        return found

    return transaction(engine, work)


NEWEST = Sort("id", descending=True)  # the snapshots' own order


def snapshot_cursor(sort: Sort, row: dict[str, Any]) -> str:
    """The cursor that goes on after a snapshot (as ``list_snapshots`` gives it) in a sort."""
    value = row[sort.column]
    if sort.column in ("started_at", "finished_at"):
        value = datetime.fromisoformat(value) if value else None
    return cursor("snapshots", [sort.text], keyset.key(value, row["id"]))


def url_series(engine: Engine, names: Sequence[str], count: int = 30) -> dict[str, list[int]]:
    """The URL counts of each target's last ``count`` completed snapshots, oldest first (the
    pages' sparklines): one statement, each target's newest ``count`` read backwards from its
    last snapshot by the (target_id, id) index, whatever its history (a window over all of a
    target's snapshots read every one of them)."""
    if not names:
        return {}
    s, t = snapshots.c, targets.c
    newest = [
        select(literal(i).label("i"), s.id, s.urls)
        .where(s.target_id == select(t.id).where(t.name == name).scalar_subquery(),
               s.outcome != "failed")
        .order_by(s.id.desc()).limit(count).subquery().select()
        for i, name in enumerate(names)
    ]

    def read(conn: Connection) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for i, _id, urls in conn.execute(union_all(*newest).order_by("i", "id")):
            found.setdefault(names[i], []).append(int(urls))
        return found

    return transaction(engine, read)
