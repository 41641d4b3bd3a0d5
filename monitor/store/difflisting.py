"""The diff of a target between two snapshots, as a listing: what changed, net, each loc
once, in the order its check recorded it (two adjacent snapshots) or of the locs; sorted by
loc (either way) or by kind (a pass over the diff per kind), each row with the cursor that
continues after it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    Table,
    Text,
    func,
    insert,
    select,
)
from sqlalchemy.orm import aliased

from monitor.codec import changepacks
from monitor.core.model import OTHER_CHANGE_KINDS, addition_kind, change_kind
from monitor.listing.params import DIFF_KINDS, BadParameter, Listing, SnapshotRef, read_cursor
from monitor.listing.sorting import Sort, offered
from monitor.store.retry import transaction
from monitor.store.rowreads import Packs, Rows, pinned, snapshot_id, stream, streaming, target_id
from monitor.store.schema import changes

__all__ = ["CHANGE_COLUMNS", "net", "open_diff"]

CHANGE_COLUMNS = ("kind", "loc", "before", "after")


def open_diff(engine: Engine, name: str, start: SnapshotRef, end: SnapshotRef | None,
              kinds: Sequence[str], after: str | None, sort: Sort | None = None) -> Listing:
    """What changed between two snapshots, net: each loc once. When one check recorded every
    change between them (two adjacent snapshots, the usual question), its rows are the answer,
    in the order it recorded them and streamed at once; else the changes are composed by loc
    (in the database's order of locs), which sorts them all before the first row. ``sort``:
    by loc, composed whatever the window; by kind, the diff of each kind in turn."""
    sort = offered(sort, "diff")
    query: list[Any] = [start.text, "" if end is None else end.text, list(kinds)]
    if sort is not None:
        query.append(["sort", sort.text])
    grouped = sort is not None and sort.column == "kind"
    found: list[Any] = []
    if after is not None:  # the snapshots it resolved to, [a group,] then where it stopped
        head = (int, int, int) if grouped else (int, int)
        try:
            found = read_cursor(after, "diff", query, (*head, int, int))
        except BadParameter:
            found = read_cursor(after, "diff", query, (*head, str))

    def resolve(conn: Connection) -> tuple[int, int, int, int | None]:
        target = target_id(conn, name)
        if found:
            first, last = found[0], found[1]
        else:
            first = snapshot_id(conn, target, name, start, "from")
            last = snapshot_id(conn, target, name, end, "to")
        c = changes.c
        # min and max as two subqueries: SQLite answers each with one index lookup, but both
        # in one SELECT by scanning the range (42 ms at 500,000 changes, 0.05 ms so).
        window = (c.target_id == target, c.snapshot_id > first, c.snapshot_id <= last)
        low, high = conn.execute(select(
            select(func.min(c.snapshot_id)).where(*window).scalar_subquery(),
            select(func.max(c.snapshot_id)).where(*window).scalar_subquery(),
        )).one()
        return target, first, last, low if low == high else None

    target, first, last, single = transaction(engine, resolve)
    if first > last:
        raise BadParameter(f"from: snapshot {first} is later than to's, {last}")
    if sort is not None and sort.column == "loc":
        single = None  # composed: in the order of locs
    groups: list[tuple[str, ...]] = [tuple(kinds)]
    if grouped and sort is not None:
        groups = [(kind,) for kind in sorted(kinds or DIFF_KINDS, reverse=sort.descending)]
    position = found[2:] if found else [0] * grouped + ([0, 0] if single is not None else [""])
    group = int(position[0]) if grouped else 0
    inner = position[1:] if grouped else position
    if isinstance(inner[0], int) != (single is not None) or group >= len(groups):
        raise BadParameter(f"cursor: not a cursor of this listing: {after!r:.40}")
    descending = sort is not None and sort.column == "loc" and sort.descending
    rows = _groups(engine, target, first, last, single, groups, group, tuple(inner),
                   descending, grouped)
    return Listing({"target": name, "from_snapshot_id": first, "to_snapshot_id": last},
                   "changes", CHANGE_COLUMNS, pinned(rows, first, last), ("diff", query),
                   table=("kind", "loc"))


def _groups(engine: Engine, target: int, first: int, last: int, single: int | None,
            groups: list[tuple[str, ...]], group: int, inner: tuple[Any, ...],
            descending: bool, grouped: bool) -> Rows:
    """The diff of each group of kinds in turn, from ``inner`` in the group ``group``."""
    for index in range(group, len(groups)):
        start = inner if index == group else (0, 0) if single is not None else ("",)
        if single is not None:
            rows = _recorded_rows(engine, target, single, groups[index],
                                  (int(start[0]), int(start[1])))
        else:
            rows = _diff_rows(engine, target, first, last, groups[index], str(start[0]),
                              descending)
        for row, place in rows:
            yield row, ((index, *place) if grouped else place)


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


def _recorded_rows(engine: Engine, target_id: int, snapshot_id: int, kinds: Sequence[str],
                   after: tuple[int, int]) -> Rows:
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
    with streaming(engine, [statement.order_by(c.id)]) as (conn, (result,)):
        packs = Packs(conn)
        for change_id, loc, raw_before, raw_after, set_id, before_id, members in result:
            if members is None:
                yield from _net_row(loc, raw_before, raw_after, kinds, (change_id, 0))
                continue
            found = packs.members(change_id, set_id, before_id)
            for j in range(done if change_id == after_id else 0, len(found)):
                yield from _net_row(*found[j], kinds, (change_id, j + 1))


def _net_row(loc: str, raw_before: str | None, raw_after: str | None, kinds: Sequence[str],
             position: tuple[Any, ...]) -> Rows:
    before = None if raw_before is None else json.loads(raw_before)
    after = None if raw_after is None else json.loads(raw_after)
    kind = net(before, after)
    if kind is not None and (not kinds or kind in kinds):
        yield {"kind": kind, "loc": loc, "before": before, "after": after}, position


def _diff_rows(engine: Engine, target_id: int, first: int, last: int, kinds: Sequence[str],
               after_loc: str, descending: bool = False) -> Rows:
    """The changes in the window composed by loc, in the order of locs (``descending``: from
    the last), after ``after_loc`` ("": from the first)."""
    c = changes.c
    window = (c.target_id == target_id, c.snapshot_id > first, c.snapshot_id <= last)
    packed = transaction(engine, lambda conn: conn.execute(
        select(c.id, c.entry_set_id, c.before_set_id)
        .where(*window, c.members.is_not(None)).order_by(c.id)).all())
    beyond = ([] if not after_loc
              else [c.loc < after_loc] if descending else [c.loc > after_loc])
    rows = (*window, *beyond, c.kind.not_in(OTHER_CHANGE_KINDS))
    if packed:
        yield from _diff_rows_unpacked(engine, rows, kinds, after_loc,
                                       [tuple(row) for row in packed], descending)
        return
    for loc, raw_before, raw_after in stream(engine, _composed(changes, "id", *rows,
                                                               descending=descending)):
        yield from _net_row(loc, raw_before, raw_after, kinds, (loc,))


def _composed(table: Any, order: str, *where: Any, descending: bool = False) -> Any:
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
            .order_by(grouped.c.loc.desc() if descending else grouped.c.loc))


# The changes of a diff across checks that packed some, one row each: ``ord`` orders them as
# recorded (a row's id times _SPAN, plus a member's place in its pack).
_SPAN = 8192
assert changepacks.MEMBERS < _SPAN
_unpacked = Table("diff_changes", MetaData(), Column("ord", BigInteger, nullable=False),
                  Column("loc", Text, nullable=False), Column("before", Text),
                  Column("after", Text), prefixes=["TEMPORARY"])


def _diff_rows_unpacked(engine: Engine, kept: tuple[Any, ...], kinds: Sequence[str],
                        after_loc: str, packed: list[tuple[int, int, int | None]],
                        descending: bool) -> Rows:
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
            packs = Packs(conn)
            for pack_id, set_id, before_id in packed:
                found = packs.members(pack_id, set_id, before_id)
                rows = [{"ord": pack_id * _SPAN + j, "loc": loc, "before": before,
                         "after": after}
                        for j, (loc, before, after) in enumerate(found)
                        if not after_loc or (loc < after_loc if descending else loc > after_loc)]
                if rows:
                    conn.execute(insert(_unpacked), rows)
            result = conn.execution_options(stream_results=True, yield_per=5000).execute(
                _composed(_unpacked, "ord", descending=descending))
            try:
                for loc, raw_before, raw_after in result:
                    yield from _net_row(loc, raw_before, raw_after, kinds, (loc,))
            finally:
                result.close()
        finally:  # SQLite makes the table outside the transaction: dropped either way
            conn.rollback()
            _unpacked.drop(conn, checkfirst=True)
            conn.commit()
