"""The listings' reads: the URL set, the issues, the net diff and the changes of a
target, each row with the cursor that continues after it.

Constant memory whatever the size: ``urls`` and ``issues`` read one entry set (one document
version, at most 50,000 entries) at a time, each in a short read of its own, so a slow reader
holds no connection between documents; ``diff`` and ``changes`` are one query each, read as a
stream. What a row is made of at a snapshot:

- ``urls``: the entry sets live at the snapshot (schema: ``first_snapshot_id <= S`` and not
  removed by then), in the order they were stored, each in document order.
- ``issues``: the snapshot's own (``snapshots.issues``: those the check found and its indexes'),
  then each live entry set's: its document's parse issues, the count of those not kept, its
  dropped duplicates, and each entry's rules, whose messages are made again from the stored
  fields (``validate.issue``). Nothing is fetched or parsed again.
- ``diff``: the changes after ``from`` up to ``to``, composed per loc (the first's ``before``,
  the last's ``after``): what a comparison of the two URL sets gives, without either set in
  memory.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    Table,
    Text,
    and_,
    func,
    insert,
    select,
    tuple_,
)
from sqlalchemy.orm import aliased

from monitor import robotsdiff
from monitor.codec import changepacks, entryset
from monitor.errors import StoreError
from monitor.listings import (
    HEALTH,
    BadParameter,
    Listing,
    NotFound,
    SnapshotRef,
    matches,
    read_cursor,
)
from monitor.model import OTHER_CHANGE_KINDS, RULES, Entry, addition_kind, change_kind
from monitor.store.checkwriter import read_columns, read_sets, transaction
from monitor.store.schema import changes, entry_sets, snapshots, targets, url_states

__all__ = ["open_changes", "open_diff", "open_issues", "open_urls"]

_ROWS = Iterator[tuple[dict[str, Any], tuple[Any, ...]]]
# (rule id, entry, document URL) -> the issue as JSON: validate.describe.
Describe = Callable[[str, Entry, str], dict[str, Any]]


def _pinned(rows: _ROWS, *ids: int) -> _ROWS:
    """Rows whose cursors also hold the snapshots the listing resolved (``ids``): a listing of
    the latest snapshot, or of one 24 hours ago, goes on from the same one page after page,
    whatever was checked meanwhile."""
    for row, position in rows:
        yield row, (*ids, *position)


def _text(ref: SnapshotRef | None) -> str:
    return "" if ref is None else ref.text


def _target_id(conn: Connection, name: str) -> int:
    found: int | None = conn.execute(
        select(targets.c.id).where(targets.c.name == name)).scalar_one_or_none()
    if found is None:
        raise NotFound(f"no target named {name!r} in this database")
    return found


def _snapshot(conn: Connection, target_id: int, name: str, ref: SnapshotRef | None,
              param: str) -> int:
    """The id of the snapshot ``ref`` names (the latest when None)."""
    s = snapshots.c
    query = select(func.max(s.id)).where(s.target_id == target_id)
    if ref is not None and ref.id is not None:
        query = query.where(s.id == ref.id)
    elif ref is not None and ref.time is not None:
        query = query.where(s.started_at <= ref.time)
    found: int | None = conn.execute(query).scalar_one_or_none()
    if found is not None:
        return found
    if ref is None:
        raise NotFound(f"target {name!r} has no snapshots yet")
    if ref.id is not None:
        raise NotFound(f"{param}: target {name!r} has no snapshot {ref.id}")
    assert ref.time is not None
    when = ref.time.isoformat().replace("+00:00", "Z")
    raise NotFound(f"{param}: target {name!r} has no snapshot at or before {when}")


def _live(target_id: int, snapshot_id: int) -> Any:
    v = entry_sets.c
    return and_(v.target_id == target_id, v.first_snapshot_id <= snapshot_id,
                v.removed_snapshot_id.is_(None) | (v.removed_snapshot_id > snapshot_id))


def _next_set(engine: Engine, target_id: int, snapshot_id: int, from_id: int,
              status: str | None = None) -> tuple[int, str, entryset.Columns] | None:
    """The first entry set live at the snapshot with an id of ``from_id`` or more."""
    v = entry_sets.c
    query = select(v.id, v.document_url, v.data).where(_live(target_id, snapshot_id),
                                                       v.id >= from_id)
    if status == "valid":
        query = query.where(v.urls > 0)
    elif status == "invalid":
        query = query.where(v.invalid > 0)
    query = query.order_by(v.id).limit(1)
    rows = transaction(engine, lambda conn: read_columns(conn, query))
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


# ---- urls ----------------------------------------------------------------------------------

URL_COLUMNS = ("loc", "document", "status", "lastmod", "changefreq", "priority", "extensions")


def open_urls(engine: Engine, name: str, at: SnapshotRef | None, status: str | None,
              after: str | None, q: str | None = None) -> Listing:
    """The URL set at a snapshot (the latest by default), valid and invalid entries alike
    unless ``status`` says which; a health state lists the URLs in it now; ``q``
    keeps the locs that hold it (case aside)."""
    q = q.lower() if q else None
    if status in HEALTH:
        if at is not None:
            raise BadParameter(f"status: {status!r} is a URL's health now, which has no "
                               "history: leave out at")
        return _open_health(engine, name, status, after, q)

    def resolve(conn: Connection) -> tuple[int, int]:
        target_id = _target_id(conn, name)
        return target_id, _snapshot(conn, target_id, name, at, "at")

    query: list[Any] = [_text(at), status or ""]
    if q:
        query.append(q)
    if after is None:
        target_id, snapshot_id = transaction(engine, resolve)
        start = [0, 0]
    else:
        snapshot_id, *start = read_cursor(after, "urls", query, (int, int, int))
        target_id = transaction(engine, lambda conn: _target_id(conn, name))
    rows = _pinned(_url_rows(engine, target_id, snapshot_id, status, start[0], start[1], q),
                   snapshot_id)
    return Listing({"target": name, "snapshot_id": snapshot_id}, "urls", URL_COLUMNS, rows,
                   ("urls", query), table=("status", "loc", "lastmod", "document"))


def _url_rows(engine: Engine, target_id: int, snapshot_id: int, status: str | None,
              set_id: int, position: int, q: str | None = None) -> _ROWS:
    while (found := _next_set(engine, target_id, snapshot_id, set_id, status)) is not None:
        next_id, document, stored = found
        if q and q not in stored.loc_text().lower():  # one search of the text, not a split
            del found, stored
            set_id, position = next_id + 1, 0
            continue
        rows = _set_urls(next_id, document, stored, position if next_id == set_id else 0,
                         status, q)
        # One document's entries held at a time: not the last one's with the next (its rows
        # hold its columns until they end; these names would hold them past that).
        del found, stored
        yield from rows
        set_id, position = next_id + 1, 0


def _set_urls(set_id: int, document: str, stored: entryset.Columns, start: int,
              status: str | None, q: str | None = None) -> _ROWS:
    locs = stored.locs()
    lastmods, changefreqs, priorities, extensions = (stored.column(i) for i in range(1, 5))
    invalid = stored.invalid()
    del stored
    for i in range(start, len(locs)):
        state = "invalid" if i in invalid else "valid"
        if status is not None and state != status:
            continue
        if q and q not in locs[i].lower():
            continue
        yield ({"loc": locs[i], "document": document, "status": state,
                "lastmod": lastmods[i], "changefreq": changefreqs[i],
                "priority": priorities[i], "extensions": extensions[i]}, (set_id, i + 1))


HEALTH_COLUMNS = ("loc", "status", "rule", "http_status", "final_url", "hops", "detail", "since",
                  "checked_at")


def _open_health(engine: Engine, name: str, state: str, after: str | None,
                 q: str | None = None) -> Listing:
    """The URLs a target lists that are in ``state`` now, in the order of their locs."""
    query: list[Any] = ["", state]
    if q:
        query.append(q)
    start = "" if after is None else read_cursor(after, "urls", query, (str,))[0]

    def resolve(conn: Connection) -> tuple[int, int]:
        target_id = _target_id(conn, name)
        return target_id, _snapshot(conn, target_id, name, None, "at")

    target_id, snapshot_id = transaction(engine, resolve)
    return Listing({"target": name, "snapshot_id": snapshot_id, "status": state}, "urls",
                   HEALTH_COLUMNS,
                   _health_rows(engine, target_id, state, start, q), ("urls", query),
                   table=("status", "http_status", "loc", "detail"))


def _health_rows(engine: Engine, target_id: int, state: str, after: str,
                 q: str | None = None) -> _ROWS:
    from monitor.store.targets import iso_time

    u = url_states.c
    statement = (select(u.loc, u.rule, u.http_status, u.final_url, u.hops, u.detail, u.since,
                        u.checked_at)
                 .where(u.target_id == target_id, u.listed.is_(True), u.state == state,
                        u.loc > after).order_by(u.loc))
    if q:
        statement = statement.where(func.lower(u.loc).contains(q, autoescape=True))
    for row in _stream(engine, statement):
        yield ({"loc": row.loc, "status": state, "rule": row.rule,
                "http_status": row.http_status, "final_url": row.final_url, "hops": row.hops,
                "detail": row.detail, "since": iso_time(row.since),
                "checked_at": iso_time(row.checked_at)}, (row.loc,))


# ---- issues --------------------------------------------------------------------------------

ISSUE_COLUMNS = ("rule", "severity", "loc", "document", "message")


def open_issues(engine: Engine, name: str, at: SnapshotRef | None, rules: Sequence[str],
                after: str | None, describe: Describe) -> Listing:
    """The issues current at a snapshot (the latest by default), of the rules the globs
    select (every rule when none). An entry's issue is stored as its rule id; ``describe``
    (validate.describe) makes it whole again, with its message."""

    query = [_text(at), list(rules)]
    pinned, *start = [0, 0, 0] if after is None else read_cursor(after, "issues", query,
                                                                  (int, int, int))

    def resolve(conn: Connection) -> tuple[int, int, list[dict[str, Any]]]:
        target_id = _target_id(conn, name)
        snapshot_id = pinned or _snapshot(conn, target_id, name, at, "at")
        raw = conn.execute(select(snapshots.c.issues).where(snapshots.c.id == snapshot_id)
                           ).scalar_one_or_none()
        return target_id, snapshot_id, json.loads(raw or "[]")

    target_id, snapshot_id, own = transaction(engine, resolve)
    rows = _pinned(_issue_rows(engine, target_id, snapshot_id, own, rules, start[0], start[1],
                               describe), snapshot_id)
    return Listing({"target": name, "snapshot_id": snapshot_id}, "issues", ISSUE_COLUMNS, rows,
                   ("issues", query), table=("severity", "rule", "loc", "message"))


def _issue(rule: str, message: str, loc: str | None, document: str | None) -> dict[str, Any]:
    return {"rule": rule, "severity": RULES.get(rule, "error"), "loc": loc,
            "document": document, "message": message}


def _stored_issue(item: dict[str, Any], document: str | None) -> dict[str, Any]:
    """An issue as ``snapshots.issues`` or an entry set's header keeps it."""
    rule = str(item.get("rule"))
    if "dropped" in item:
        return _issue(rule, f"{item['dropped']} more {rule} issues in this document: counted, "
                      "not kept (the first ones of each rule are)", None, document)
    return _issue(rule, str(item.get("message")), item.get("loc"),
                  item.get("document", document))


def _set_issues(document: str, stored: entryset.Columns, describe: Describe,
                ) -> Iterator[dict[str, Any]]:
    """The issues a stored document version holds, in order: its own, then its entries'."""
    for item in stored.document_issues():
        yield _stored_issue(item, document)
    for rule, count in sorted(stored.dropped().items()):
        yield _stored_issue({"rule": rule, "dropped": count}, document)
    for loc in stored.duplicates():
        yield _issue("loc-duplicate", "loc is listed more than once in this target", loc,
                     document)
    by_position = stored.rules()
    if not by_position:
        return
    locs = stored.locs()
    fields = [stored.column(i) for i in range(1, 5)]
    for i in sorted(by_position):
        entry = Entry(locs[i], fields[0][i], fields[1][i], fields[2][i], fields[3][i])
        for rule in by_position[i].split():
            try:
                yield describe(rule, entry, document)
            except KeyError:  # a rule of a later version of the rules, without a message here
                yield _issue(rule, rule, entry.loc, document)


def _issue_rows(engine: Engine, target_id: int, snapshot_id: int, own: list[dict[str, Any]],
                rules: Sequence[str], set_id: int, index: int, describe: Describe) -> _ROWS:
    if set_id == 0:  # the snapshot's own issues come first (position 0)
        for i in range(index, len(own)):
            row = _stored_issue(own[i], None)
            if matches(row["rule"], rules):
                yield row, (0, i + 1)
        set_id, index = 1, 0
    while (found := _next_set(engine, target_id, snapshot_id, set_id)) is not None:
        next_id, document, stored = found
        start = index if next_id == set_id else 0
        rows = _set_issues(document, stored, describe)
        del found, stored  # as _url_rows: not this document's columns with the next one's
        for i, row in enumerate(rows):
            if i >= start and matches(row["rule"], rules):
                yield row, (next_id, i + 1)
        set_id, index = next_id + 1, 0


# ---- diff ----------------------------------------------------------------------------------

CHANGE_COLUMNS = ("kind", "loc", "before", "after")


def open_diff(engine: Engine, name: str, start: SnapshotRef, end: SnapshotRef | None,
              kinds: Sequence[str], after: str | None) -> Listing:
    """What changed between two snapshots, net: each loc once. When one check recorded every
    change between them (two adjacent snapshots, the usual question), its rows are the answer,
    in the order it recorded them and streamed at once; else the changes are composed by loc
    (in the database's order of locs), which sorts them all before the first row."""

    query = [_text(start), _text(end), list(kinds)]
    pinned: list[Any] = []
    if after is not None:  # the snapshots it resolved to, then where it stopped (an int or a loc)
        try:
            pinned = read_cursor(after, "diff", query, (int, int, int, int))
        except BadParameter:
            pinned = read_cursor(after, "diff", query, (int, int, str))

    def resolve(conn: Connection) -> tuple[int, int, int, int | None]:
        target_id = _target_id(conn, name)
        if pinned:
            first, last = pinned[0], pinned[1]
        else:
            first = _snapshot(conn, target_id, name, start, "from")
            last = _snapshot(conn, target_id, name, end, "to")
        c = changes.c
        # min and max as two subqueries: SQLite answers each with one index lookup, but both
        # in one SELECT by scanning the range (42 ms at 500,000 changes, 0.05 ms so).
        window = (c.target_id == target_id, c.snapshot_id > first, c.snapshot_id <= last)
        low, high = conn.execute(select(
            select(func.min(c.snapshot_id)).where(*window).scalar_subquery(),
            select(func.max(c.snapshot_id)).where(*window).scalar_subquery(),
        )).one()
        return target_id, first, last, low if low == high else None

    target_id, first, last, single = transaction(engine, resolve)
    if first > last:
        raise BadParameter(f"from: snapshot {first} is later than to's, {last}")
    position = pinned[2:] if pinned else [0, 0] if single is not None else [""]
    if isinstance(position[0], int) != (single is not None):
        raise BadParameter(f"cursor: not a cursor of this listing: {after!r:.40}")
    if single is not None:
        rows = _pinned(_recorded_rows(engine, target_id, single, kinds,
                                      (int(position[0]), int(position[1]))), first, last)
    else:
        rows = _pinned(_diff_rows(engine, target_id, first, last, kinds, str(position[0])),
                       first, last)
    return Listing({"target": name, "from_snapshot_id": first, "to_snapshot_id": last},
                   "changes", CHANGE_COLUMNS, rows, ("diff", query), table=("kind", "loc"))


def net(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """The kind of change from ``before`` to ``after`` (None: no change), as a check names
    the change between its two snapshots (monitor.check.pipeline)."""
    if before is None:
        return None if after is None else addition_kind(after.get("valid", True))
    if after is None:
        return "removed"
    if before == after:
        return None
    return change_kind(before.get("valid", True), after.get("valid", True))


@contextmanager
def _streaming(engine: Engine, statements: Sequence[Any],
               ) -> Iterator[tuple[Connection, list[Any]]]:
    """Queries whose rows come as the database sends them, on one connection of their own
    (which can also run small queries meanwhile)."""
    with engine.connect() as conn:
        streaming = conn.execution_options(stream_results=True, yield_per=5000)
        results = [streaming.execute(statement) for statement in statements]
        try:
            yield conn, results
        finally:  # also when the reader stops early: PostgreSQL's cursors are closed, not dropped
            for result in results:
                result.close()


def _stream(engine: Engine, statement: Any) -> Iterator[Any]:
    """The rows of one query as the database sends them (``_streaming``)."""
    with _streaming(engine, [statement]) as (_conn, (result,)):
        yield from result


class _Packs:
    """The changes a pack row stands for (``monitor.codec.changepacks``), read on the listing's
    connection: its members and the entry-set versions that hold their locs and states (the
    version the check stored, and the one it replaced), kept for the next pack (a document's
    packs point into the same two)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._versions: dict[int, changepacks.Version] = {}

    def members(self, pack_id: int, set_id: int, before_id: int | None,
                ) -> list[tuple[str, str, str]]:
        """(loc, before, after) of each member, in the order the check recorded them."""
        c = changes.c
        wanted = [set_id] if before_id is None else [set_id, before_id]
        self._versions = {i: v for i, v in self._versions.items() if i in wanted}
        for i in wanted:
            if i not in self._versions:
                v = entry_sets.c
                rows = read_columns(self._conn, select(v.id, v.data).where(v.id == i))
                if not rows:
                    raise StoreError(f"entry set {i}, which the changes of row {pack_id} "
                                     "point into, is missing")
                self._versions[i] = changepacks.Version(rows[0][1])
        data = read_sets(self._conn, select(c.id, c.pack).where(c.id == pack_id),
                         whole=False)[0][1]
        return self._versions[set_id].changes(
            changepacks.unpack(data), None if before_id is None else self._versions[before_id])


def _recorded_rows(engine: Engine, target_id: int, snapshot_id: int, kinds: Sequence[str],
                   after: tuple[int, int]) -> _ROWS:
    """The check's changes in the order it recorded them; ``after`` is where a page stopped:
    (row id, members of that row's pack already listed), or (row id, 0) after a plain row."""
    c = changes.c
    after_id, done = after
    # The target named, so that the (target_id, snapshot_id, id) index gives the rows in
    # order: without it PostgreSQL read and sorted all 500,000 removals of a 500,000-URL index
    # before the first (420 ms a page).
    statement = select(c.id, c.loc, c.before, c.after, c.entry_set_id, c.before_set_id,
                       c.members).where(
        c.target_id == target_id, c.snapshot_id == snapshot_id,
        c.id >= after_id if done else c.id > after_id, c.kind.not_in(OTHER_CHANGE_KINDS))
    with _streaming(engine, [statement.order_by(c.id)]) as (conn, (result,)):
        packs = _Packs(conn)
        for change_id, loc, raw_before, raw_after, set_id, before_id, members in result:
            if members is None:
                yield from _net_row(loc, raw_before, raw_after, kinds, (change_id, 0))
                continue
            found = packs.members(change_id, set_id, before_id)
            for j in range(done if change_id == after_id else 0, len(found)):
                yield from _net_row(*found[j], kinds, (change_id, j + 1))


def _net_row(loc: str, raw_before: str | None, raw_after: str | None, kinds: Sequence[str],
             position: tuple[Any, ...]) -> _ROWS:
    before = None if raw_before is None else json.loads(raw_before)
    after = None if raw_after is None else json.loads(raw_after)
    kind = net(before, after)
    if kind is not None and (not kinds or kind in kinds):
        yield {"kind": kind, "loc": loc, "before": before, "after": after}, position


def _diff_rows(engine: Engine, target_id: int, first: int, last: int, kinds: Sequence[str],
               after_loc: str) -> _ROWS:
    c = changes.c
    window = (c.target_id == target_id, c.snapshot_id > first, c.snapshot_id <= last)
    packed = transaction(engine, lambda conn: conn.execute(
        select(c.id, c.entry_set_id, c.before_set_id)
        .where(*window, c.kind == "changed", c.members.is_not(None)).order_by(c.id)).all())
    rows = (*window, c.loc > after_loc, c.kind.not_in(OTHER_CHANGE_KINDS))
    if packed:
        yield from _diff_rows_unpacked(engine, rows, kinds, after_loc,
                                       [tuple(row) for row in packed])
        return
    for loc, raw_before, raw_after in _stream(engine, _composed(changes, "id", *rows)):
        yield from _net_row(loc, raw_before, raw_after, kinds, (loc,))


def _composed(table: Any, order: str, *where: Any) -> Any:
    """Each loc of ``table``'s rows (those ``where`` keeps) once, with its first row's
    ``before`` and its last row's ``after`` (first and last by the column ``order``), in the
    order of locs: what the changes in a window compose into."""
    t = table.c
    grouped = (select(t.loc, func.min(t[order]).label("first"), func.max(t[order]).label("last"))
               .where(*where).group_by(t.loc).subquery())
    opening, closing = aliased(table), aliased(table)
    return (select(grouped.c.loc, opening.c.before, closing.c.after)
            .join(opening, opening.c[order] == grouped.c.first)
            .join(closing, closing.c[order] == grouped.c.last)
            .order_by(grouped.c.loc))


# The changes of a diff across checks that packed some, one row each: ``ord`` orders them as
# recorded (a row's id times _SPAN, plus a member's place in its pack).
_SPAN = 8192
assert changepacks.MEMBERS < _SPAN
_unpacked = Table("diff_changes", MetaData(), Column("ord", BigInteger, nullable=False),
                  Column("loc", Text, nullable=False), Column("before", Text),
                  Column("after", Text), prefixes=["TEMPORARY"])


def _diff_rows_unpacked(engine: Engine, kept: tuple[Any, ...], kinds: Sequence[str],
                        after_loc: str, packed: list[tuple[int, int, int | None]]) -> _ROWS:
    """``_diff_rows`` when some of the changes are in packs: the window's changes (those
    ``kept`` keeps), packs unpacked one at a time, go to a temporary table of the listing's
    connection, which the same grouped query then reads (the database holds them, not the
    process)."""
    c = changes.c
    with engine.connect() as conn:
        _unpacked.drop(conn, checkfirst=True)  # the connection's, should a reader have died
        _unpacked.create(conn)
        try:
            conn.execute(insert(_unpacked).from_select(
                ["ord", "loc", "before", "after"],
                select(c.id * _SPAN, c.loc, c.before, c.after).where(
                    *kept, c.members.is_(None))))
            packs = _Packs(conn)
            for pack_id, set_id, before_id in packed:
                found = packs.members(pack_id, set_id, before_id)
                rows = [{"ord": pack_id * _SPAN + j, "loc": loc, "before": before,
                         "after": after}
                        for j, (loc, before, after) in enumerate(found) if loc > after_loc]
                if rows:
                    conn.execute(insert(_unpacked), rows)
            result = conn.execution_options(stream_results=True, yield_per=5000).execute(
                _composed(_unpacked, "ord"))
            try:
                for loc, raw_before, raw_after in result:
                    yield from _net_row(loc, raw_before, raw_after, kinds, (loc,))
            finally:
                result.close()
        finally:  # SQLite makes the table outside the transaction: dropped either way
            conn.rollback()
            _unpacked.drop(conn, checkfirst=True)
            conn.commit()


# ---- snapshots -----------------------------------------------------------------------------

SNAPSHOT_COLUMNS = ("id", "started_at", "finished_at", "outcome", "urls", "invalid", "added",
                    "removed", "changed", "invalid_new", "documents_ok", "documents_failed",
                    "fetched_bytes", "duration_seconds", "error_kind", "error_message")


def open_snapshots(engine: Engine, name: str, before: int | None) -> Listing:
    """Every snapshot of a target (with an id below ``before``), newest first, streamed: the
    CSV and NDJSON exports of the snapshots page (the JSON API pages them itself)."""
    from monitor.store.targets import iso_time

    target_id = transaction(engine, lambda conn: _target_id(conn, name))
    s = snapshots.c
    statement = select(*(s[column] for column in SNAPSHOT_COLUMNS)).where(
        s.target_id == target_id)
    if before is not None:
        statement = statement.where(s.id < before)

    def rows() -> _ROWS:
        for row in _stream(engine, statement.order_by(s.id.desc())):
            found = dict(row._mapping)
            found["started_at"] = iso_time(found["started_at"])
            found["finished_at"] = iso_time(found["finished_at"])
            yield found, (found["id"],)

    return Listing({"target": name}, "snapshots", SNAPSHOT_COLUMNS, rows(),
                   ("snapshots", [before]), table=("id", "finished_at", "outcome", "urls"))


# ---- changes -------------------------------------------------------------------------------

CHANGES_COLUMNS = ("id", "snapshot_id", "at", "kind", "loc", "before", "after", "reason",
                   "rule")


def open_changes(engine: Engine, name: str, since: datetime | None, kinds: Sequence[str],
                 after: str | None, since_text: str = "",
                 reasons: Sequence[str] = (), rules: Sequence[str] = (),
                 q: str | None = None) -> Listing:
    """Every change recorded for a target, newest first (``q``: of the locs that hold it).

    Read in the order of the indexes ``(target_id, snapshot_id, id)`` and ``(target_id, kind,
    snapshot_id, id)``, which for one target is the order the changes were recorded in (its
    checks run one at a time): a page costs the rows it lists, whatever the history; several
    kinds are one ordered read each, merged. ``since_text`` is ``since`` as given: a cursor
    holds it, and the snapshot it resolved to. ``reasons`` keeps the removals the URL checks
    gave one of those reasons; ``rules`` the changes about those rule ids
    (``changes.rule``: one ordered read of its partial index per rule, merged)."""
    query = [since_text or ("" if since is None else since.isoformat()), list(kinds)]
    if reasons:
        query.append(list(reasons))
        kinds = ["removed"]
    if rules:
        query.append(["rule", *rules])
    q = q.lower() if q else None
    if q:
        query.append(["loc", q])
    pinned = None if after is None else read_cursor(after, "changes", query,
                                                    (int, int, int, int))

    def resolve(conn: Connection) -> tuple[int, int]:
        target_id = _target_id(conn, name)
        if pinned is not None:
            return target_id, pinned[0]
        if since is None:
            return target_id, 0
        # The newest snapshot that started before ``since``, read from the newest down: the
        # target's snapshots start in the order of their ids.
        s = snapshots.c
        before = conn.execute(
            select(s.id).where(s.target_id == target_id, s.started_at < since)
            .order_by(s.id.desc()).limit(1)
        ).scalar()
        return target_id, 0 if before is None else before + 1

    target_id, floor = transaction(engine, resolve)
    position = (0, 0, 0) if pinned is None else (pinned[1], pinned[2], pinned[3])
    rows = _pinned(_change_rows(engine, target_id, floor, kinds, position, reasons, rules, q),
                   floor)
    return Listing({"target": name}, "changes", CHANGES_COLUMNS, rows, ("changes", query),
                   table=("snapshot_id", "at", "kind", "loc", "reason", "rule", "detail"),
                   below="diff")


def _change_rows(engine: Engine, target_id: int, floor: int, kinds: Sequence[str],
                 before: tuple[int, int, int], reasons: Sequence[str] = (),
                 rules: Sequence[str] = (), q: str | None = None) -> _ROWS:
    """The changes newest first, before ``before``: (snapshot id, row id, members of that
    row's pack still to list), the last 0 after a plain row or a pack's last member. A pack's
    members are listed from its last, as its rows would have been; they share its id."""
    from monitor.store.targets import iso_time

    c, s = changes.c, snapshots.c
    at, left = before[:2], before[2]

    def statement(kind: str | None, rule: str | None) -> Any:
        query = select(c.id, c.snapshot_id, c.kind, c.loc, c.before, c.after, c.reason,
                       c.rule, c.entry_set_id, c.before_set_id, c.members
                       ).where(c.target_id == target_id)
        if rule is not None:
            query = query.where(c.rule == rule)
            if kinds:
                query = query.where(c.kind.in_(list(kinds)))
        elif kind is not None:
            query = query.where(c.kind == kind)
        if reasons:
            query = query.where(c.reason.in_(list(reasons)))
        if q:  # a pack's members have locs of their own: they are searched once unpacked
            query = query.where(c.members.is_not(None)
                                | func.lower(c.loc).contains(q, autoescape=True))
        if floor:
            query = query.where(c.snapshot_id >= floor)
        if at != (0, 0):
            column, position = tuple_(c.snapshot_id, c.id), tuple_(*at)
            query = query.where(column <= position if left else column < position)
        return query.order_by(c.snapshot_id.desc(), c.id.desc())

    loads = json.loads
    times: dict[int, str | None] = {}
    wanted: list[Any] = ([(None, rule) for rule in rules] if rules
                         else [(kind, None) for kind in kinds] or [(None, None)])
    with _streaming(engine, [statement(*which) for which in wanted]) as (conn, results):
        merged = results[0] if len(results) == 1 else heapq.merge(
            *results, key=lambda row: (row.snapshot_id, row.id), reverse=True)
        packs = _Packs(conn)
        for (change_id, snapshot_id, kind, loc, before_text, after_text, reason, rule, set_id,
             before_id, members) in merged:
            if snapshot_id not in times:  # a time per snapshot, not per row
                times[snapshot_id] = iso_time(conn.execute(
                    select(s.started_at).where(s.id == snapshot_id)).scalar())
            if members is None:
                found = [(loc, before_text, after_text)]
                places: Iterable[int] = (0,)
            else:
                found = packs.members(change_id, set_id, before_id)
                places = reversed(range(left if (snapshot_id, change_id) == at else members))
            for j in places:
                loc, before_text, after_text = found[j]
                if q and q not in loc.lower():
                    continue
                after_value = None if after_text is None else loads(after_text)
                # A health transition is timed when its check found it, not by its snapshot.
                found_at = ((after_value or {}).get("checked_at") if kind == "health"
                            else None) or times[snapshot_id]
                row = {"id": change_id, "snapshot_id": snapshot_id, "at": found_at,
                       "kind": kind, "loc": loc,
                       "before": None if before_text is None else loads(before_text),
                       "after": after_value, "reason": reason, "rule": rule}
                if kind == "robots":  # the lines that moved, not two whole files to compare
                    row["diff"] = robotsdiff.of_change(row["before"], row["after"],
                                                       loc).as_json()
                yield row, (snapshot_id, change_id, j)
