"""The changes of a target, as a listing: newest first, or sorted by time, kind, reason or
rule, each row with the cursor that continues after it; and a search of their locs.

Read in the order of the indexes ``(target_id, snapshot_id, id)`` and ``(target_id, kind |
rule | reason, snapshot_id, id)``, which for one target is the order the changes were recorded
in (its checks run one at a time): a page costs the rows it lists, whatever the history.
Several kinds, rules or reasons are one ordered read each, merged. A sort by kind, reason or
rule lists the groups one after the other (a group's rows newest first); ``at`` lists them
oldest first.

A search (``q``, a part of the loc) first finds the locs that hold it among the target's
change locs (``store.changelocs``: a row per URL, not per change); when they are few, their
rows are read by the ``(target_id, loc)`` index and sorted, else the rows are read in order
and those of other locs skipped, which finds a page soon when many locs match.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select, tuple_

from monitor.core.model import CHANGE_RULES, REMOVAL_REASONS
from monitor.listing.params import KINDS, Listing, SnapshotRef, read_cursor
from monitor.listing.sorting import Sort, offered
from monitor.robots import versiondiff
from monitor.store import changelocs
from monitor.store.retry import transaction
from monitor.store.rowreads import Packs, Rows, pinned, streaming, target_id
from monitor.store.schema import changes, removal_answers, snapshots
from monitor.store.targetrows import iso_time

__all__ = ["CHANGES_COLUMNS", "SEARCH_LOCS", "open_changes"]

CHANGES_COLUMNS = ("id", "snapshot_id", "at", "kind", "loc", "before", "after", "reason",
                   "rule")
# Locs found by a search whose rows are read by the loc index and sorted; a search that finds
# more reads the rows in order (many matching locs fill a page soon).
SEARCH_LOCS = 10_000
Member = tuple[str, str | None, str | None]  # a change's loc, before and after, as stored
NEWEST_FIRST = Sort("at", descending=True)  # the stored order: no sort to name in a cursor
_PACKED = ("added", "removed", "changed")  # the kinds a pack holds (store.movepacks)


@dataclass(frozen=True, slots=True)
class _Group:
    """The rows of one group of a sorted listing (all of them when not sorted by a group)."""

    kinds: Sequence[str]
    reasons: Sequence[str]
    rules: Sequence[str]
    none_of: str | None = None  # a column NULL in every row of the group: reason, rule


def open_changes(engine: Engine, name: str, since: datetime | SnapshotRef | None,
                 kinds: Sequence[str], after: str | None, since_text: str = "",
                 reasons: Sequence[str] = (), rules: Sequence[str] = (),
                 q: str | None = None, sort: Sort | None = None, *,
                 until: SnapshotRef | None = None) -> Listing:
    """Every change recorded for a target, newest first unless ``sort`` says otherwise
    (``q``: of the locs that hold it). ``since`` is a time or a snapshot (its changes and
    later ones), ``until`` a snapshot or a time (its changes and earlier ones: a link that lists
    the same rows a month later). ``since_text`` is ``since`` as given: a cursor holds it, and
    the snapshot it resolved to. ``reasons`` keeps the removals the URL checks gave one of
    those reasons; ``rules`` the changes about those rule ids."""
    if isinstance(since, SnapshotRef):
        since_text = since_text or since.text
    query = [since_text or ("" if since is None else str(since)), list(kinds)]
    if until is not None:
        query.append(["until", until.text])
    if reasons:
        query.append(list(reasons))
        kinds = ["removed"]
    if rules:
        query.append(["rule", *rules])
    q = q.lower() if q else None
    if q:
        query.append(["loc", q])
    sort = None if offered(sort, "changes") == NEWEST_FIRST else sort
    if sort is not None:  # a cursor of another order would skip rows: refused
        query.append(["sort", sort.text])
    # (since's snapshot, [group,] snapshot id, row id, a pack's members still to list)
    shape = (int,) * (4 if sort is None else 5)
    found = None if after is None else read_cursor(after, "changes", query, shape)

    def resolve(conn: Connection) -> tuple[int, int, int | None]:
        target = target_id(conn, name)
        s = snapshots.c
        ceiling = None
        if until is not None and until.id is not None:
            ceiling = until.id
        elif until is not None:  # the newest snapshot that started by then (0: none)
            ceiling = conn.execute(select(s.id).where(
                s.target_id == target, s.started_at <= until.time)
                .order_by(s.id.desc()).limit(1)).scalar() or 0
        if found is not None:
            return target, found[0], ceiling
        if since is None:
            return target, 0, ceiling
        if isinstance(since, SnapshotRef) and since.id is not None:
            return target, since.id, ceiling
        moment = since.time if isinstance(since, SnapshotRef) else since
        # The newest snapshot that started before ``since``, read from the newest down: the
        # target's snapshots start in the order of their ids.
        before = conn.execute(
            select(s.id).where(s.target_id == target, s.started_at < moment)
            .order_by(s.id.desc()).limit(1)
        ).scalar()
        return target, 0 if before is None else before + 1, ceiling

    target, floor, ceiling = transaction(engine, resolve)
    position = (0, 0, 0, 0) if found is None else (0, *found[1:]) if sort is None else found[1:]
    groups = _groups(sort, kinds, reasons, rules)
    ascending = sort is not None and sort.column == "at"
    rows = _grouped(engine, (target, ceiling), floor, groups, tuple(position), q, ascending,
                    grouped=sort is not None)
    rows = _with_answers(engine, target, rows)
    return Listing({"target": name}, "changes", CHANGES_COLUMNS, pinned(rows, floor),
                   ("changes", query),
                   table=("snapshot_id", "at", "kind", "loc", "reason", "rule", "detail"),
                   below="diff")


ANSWERS_AT_ONCE = 500  # rows a read of their removals' answers covers


def _with_answers(engine: Engine, target: int, rows: Rows) -> Rows:
    """The rows, each triaged removal with ``answer``: what its URL answered when the URL
    checks looked (a moved URL's final URL), read for ``ANSWERS_AT_ONCE`` rows at a time."""
    batch: list[tuple[dict[str, Any], tuple[Any, ...]]] = []
    for item in rows:
        batch.append(item)
        if len(batch) >= ANSWERS_AT_ONCE:
            yield from _answered(engine, target, batch)
            batch = []
    yield from _answered(engine, target, batch)


def _answered(engine: Engine, target: int, batch: list[tuple[dict[str, Any], tuple[Any, ...]]],
              ) -> Rows:
    wanted = {(row["snapshot_id"], row["loc"]) for row, _ in batch
              if row["kind"] == "removed" and row["reason"] is not None}
    if wanted:
        a = removal_answers.c
        found = transaction(engine, lambda conn: {
            (r.snapshot_id, r.loc): r.answer for r in conn.execute(
                select(a.snapshot_id, a.loc, a.answer).where(
                    a.target_id == target, a.loc.in_(sorted({loc for _, loc in wanted}))))})
        for row, _ in batch:
            answer = found.get((row["snapshot_id"], row["loc"]))
            if answer is not None:
                row["answer"] = json.loads(answer)
    yield from batch


def _groups(sort: Sort | None, kinds: Sequence[str], reasons: Sequence[str],
            rules: Sequence[str]) -> list[_Group]:
    """The groups a sort lists one after the other, in its order: one when it sorts by time.
    Empty values (a change with no reason, no rule) come last either way."""
    if sort is None or sort.column == "at":
        return [_Group(kinds, reasons, rules)]
    groups: list[_Group] = []
    if sort.column == "kind":
        values = sorted(kinds or KINDS, reverse=sort.descending)
        return [_Group((kind,), reasons, rules) for kind in values]
    if sort.column == "reason":
        if not kinds or "removed" in kinds:
            values = sorted(reasons or REMOVAL_REASONS, reverse=sort.descending)
            groups = [_Group(("removed",), (reason,), rules) for reason in values]
        if not reasons:
            groups.append(_Group(kinds, (), rules, none_of="reason"))
        return groups
    values = sorted(rules or CHANGE_RULES, reverse=sort.descending)
    groups = [_Group(kinds, reasons, (rule,)) for rule in values]
    if not rules:
        groups.append(_Group(kinds, reasons, (), none_of="rule"))
    return groups


def _grouped(engine: Engine, bounded: tuple[int, int | None], floor: int,
             groups: list[_Group], position: tuple[int, int, int, int], q: str | None,
             ascending: bool, *, grouped: bool) -> Rows:
    """Each group's rows from ``position`` on: (group, snapshot id, row id, a pack's members
    still to list); a cursor of a listing not sorted by groups has no group. ``bounded``: the
    target and the last snapshot listed (None: no end)."""
    target = bounded[0]
    locs = _searched(engine, target, q)
    first, at = position[0], position[1:]
    for index in range(first, len(groups)):
        rows = _change_rows(engine, bounded, floor, groups[index],
                            at if index == first else (0, 0, 0), q, locs, ascending)
        for row, place in rows:
            yield row, ((index, *place) if grouped else place)


def _searched(engine: Engine, target: int, q: str | None) -> list[str] | None:
    """The locs a search found among the target's change locs, when they are few enough to
    read by the loc index; None to read the rows in order (no search, or many locs)."""
    if not q:
        return None
    found = transaction(engine, lambda conn: changelocs.matching(conn, target, q,
                                                                 SEARCH_LOCS + 1))
    return found if len(found) <= SEARCH_LOCS else None


def _statements(bounded: tuple[int, int | None], floor: int, group: _Group,
                at: tuple[int, int, int], q: str | None, locs: list[str] | None,
                ascending: bool) -> list[Any]:
    """The ordered reads whose rows, merged, are the group's from ``at`` on."""
    c = changes.c
    target, ceiling = bounded
    point, left = at[:2], at[2]

    def read(*where: Any, order: Any = (c.snapshot_id, c.id)) -> Any:
        query = select(c.id, c.snapshot_id, c.kind, c.loc, c.before, c.after, c.reason,
                       c.rule, c.entry_set_id, c.before_set_id, c.members
                       ).where(c.target_id == target, *where)
        if floor:
            query = query.where(c.snapshot_id >= floor)
        if ceiling is not None:
            query = query.where(c.snapshot_id <= ceiling)
        if group.none_of is not None:
            query = query.where(c[group.none_of].is_(None))
        if point != (0, 0):
            column, value = tuple_(c.snapshot_id, c.id), tuple_(*point)
            if ascending:
                query = query.where(column >= value if left else column > value)
            else:
                query = query.where(column <= value if left else column < value)
        return query.order_by(*(o if ascending else o.desc() for o in order))

    kinds, reasons, rules = (list(v) for v in (group.kinds, group.reasons, group.rules))
    if locs is not None:
        # The found locs' rows by the loc index, then sorted: ``+ 0`` keeps the database
        # from reading the time index in order instead, through every other loc's rows.
        kept = [c.kind.in_(kinds)] if kinds else []
        kept += [c.reason.in_(reasons)] if reasons else []
        kept += [c.rule.in_(rules)] if rules else []
        found = [read(c.loc.in_(locs), c.members.is_(None), *kept,
                      order=(c.snapshot_id + 0, c.id + 0))] if locs else []
        packed = [kind for kind in kinds or _PACKED if kind in _PACKED]
        if not (reasons or rules) and packed:
            # A pack's members have locs of their own: they are searched once unpacked. The
            # packs by their own index, few, then sorted.
            # The kinds as an expression: the packs' own index, not the kinds' (every row).
            by_kind = [c.kind.concat("").in_(packed)] if len(packed) < len(_PACKED) else []
            found.append(read(c.members.is_not(None), *by_kind,
                              order=(c.snapshot_id + 0, c.id + 0)))
        return found
    searched = ([c.members.is_not(None) | func.lower(c.loc).contains(q, autoescape=True)]
                if q else [])
    if rules:
        by_kind = [c.kind.in_(kinds)] if kinds else []
        by_reason = [c.reason.in_(reasons)] if reasons else []
        return [read(c.rule == rule, *by_kind, *by_reason, *searched) for rule in rules]
    if reasons:  # by the reason index, a read per reason
        by_kind = [c.kind.in_(kinds)] if kinds else []
        return [read(c.reason == reason, *by_kind, *searched) for reason in reasons]
    if kinds:
        return [read(c.kind == kind, *searched) for kind in kinds]
    return [read(*searched)]


def _change_rows(engine: Engine, bounded: tuple[int, int | None], floor: int, group: _Group,
                 at: tuple[int, int, int], q: str | None, locs: list[str] | None,
                 ascending: bool) -> Rows:
    """The group's changes newest first (oldest with ``ascending``) from ``at``: (snapshot
    id, row id, members of that row's pack still to list), the last 0 after a plain row or a
    pack's last member. Newest first, a pack's members are listed from its last, as its rows
    would have been; they share its id."""
    s = snapshots.c
    point, left = at[:2], at[2]
    statements = _statements(bounded, floor, group, at, q, locs, ascending)
    if not statements:
        return
    loads = json.loads
    times: dict[int, str | None] = {}
    with streaming(engine, statements) as (conn, results):
        merged: Iterator[Any] = results[0] if len(results) == 1 else heapq.merge(
            *results, key=lambda row: (row.snapshot_id, row.id), reverse=not ascending)
        packs = Packs(conn)
        for (change_id, snapshot_id, kind, loc, before_text, after_text, reason, rule, set_id,
             before_id, members) in merged:
            if snapshot_id not in times:  # a time per snapshot, not per row
                times[snapshot_id] = iso_time(conn.execute(
                    select(s.started_at).where(s.id == snapshot_id)).scalar())
            # a list, or the members of a pack that hold ``q`` by their places in it
            found: Sequence[Member] | Mapping[int, Member]
            places: Iterable[int]
            if members is None:
                found, places = [(loc, before_text, after_text)], (0,)
            else:
                rest = left if (snapshot_id, change_id) == point else members
                if q:  # the members that hold it, by their place in the pack
                    found = packs.found(change_id, set_id, before_id, q)
                    places = sorted((j for j in found if (j >= members - rest if ascending
                                                          else j < rest)),
                                    reverse=not ascending)
                else:
                    found = packs.members(change_id, set_id, before_id)
                    places = (range(members - rest, members) if ascending
                              else reversed(range(rest)))
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
                    row["diff"] = versiondiff.of_change(row["before"], row["after"],
                                                       loc).as_json()
                still = (members - j - 1 if ascending else j) if members is not None else 0
                yield row, (snapshot_id, change_id, still)
