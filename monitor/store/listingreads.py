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

import functools
import heapq
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    func,
    select,
)

from monitor.codec import entryset
from monitor.core.model import RULES, Entry
from monitor.core.rules import RuleId
from monitor.listing import sorting
from monitor.listing.params import (
    HEALTH_FILTERS,
    BadParameter,
    Listing,
    SnapshotRef,
    matches,
    read_cursor,
    states_of,
)
from monitor.listing.sorting import Key, Sort
from monitor.store import keyset
from monitor.store.changelisting import open_changes
from monitor.store.difflisting import net, open_diff
from monitor.store.retry import transaction
from monitor.store.rowreads import Rows
from monitor.store.rowreads import next_set as _next_set
from monitor.store.rowreads import pinned as _pinned
from monitor.store.rowreads import snapshot_id as _snapshot
from monitor.store.rowreads import stream as _stream
from monitor.store.rowreads import target_id as _target_id
from monitor.store.schema import snapshots, url_states

__all__ = ["net", "open_changes", "open_diff", "open_issues", "open_snapshots", "open_urls"]

_ROWS = Rows
# (rule id, entry, document URL) -> the issue as JSON: validate.describe.
Describe = Callable[[str, Entry, str], dict[str, Any]]


def _text(ref: SnapshotRef | None) -> str:
    return "" if ref is None else ref.text


# ---- urls ----------------------------------------------------------------------------------

URL_COLUMNS = ("loc", "document", "status", "lastmod", "changefreq", "priority", "extensions")


def open_urls(engine: Engine, name: str, at: SnapshotRef | None, status: str | None,
              after: str | None, q: str | None = None, sort: Sort | None = None) -> Listing:
    """The URL set at a snapshot (the latest by default), valid and invalid entries alike
    unless ``status`` says which; a health state lists the URLs in it now, ``broken`` those in
    any error state; ``q`` keeps the locs that hold it (case aside). In document order, or
    ``sort``ed (``sorting.SORTS``: ``urls`` for the URL set, ``health`` for a health state)."""
    q = q.lower() if q else None
    if status in HEALTH_FILTERS:
        if at is not None:
            raise BadParameter(f"status: {status!r} is a URL's health now, which has no "
                               "history: leave out at")
        return _open_health(engine, name, status, after, q, sorting.offered(sort, "health"))
    sort = sorting.offered(sort, "urls")

    def resolve(conn: Connection) -> tuple[int, int]:
        target_id = _target_id(conn, name)
        return target_id, _snapshot(conn, target_id, name, at, "at")

    query: list[Any] = [_text(at), status or ""]
    if q:
        query.append(q)
    if sort is not None:  # a cursor of another order would skip rows: refused
        query.append(["sort", sort.text])
    if after is None:
        target_id, snapshot_id = transaction(engine, resolve)
        start: list[Any] = [0, 0]
    else:
        shape = (int, int, int) if sort is None else (int, int, str, int, int)
        snapshot_id, *start = read_cursor(after, "urls", query, shape)
        target_id = transaction(engine, lambda conn: _target_id(conn, name))
    if sort is None:
        rows = _url_rows(engine, target_id, snapshot_id, status, start[0], start[1], q)
    else:
        last = tuple(start) if after is not None else None
        rows = _passes(lambda last, count: _url_pass(
            engine, target_id, snapshot_id, status, q, sort, last, count), last)
    return Listing({"target": name, "snapshot_id": snapshot_id}, "urls", URL_COLUMNS,
                   _pinned(rows, snapshot_id), ("urls", query),
                   table=("status", "loc", "lastmod", "document"))


# Rows a sorted listing of the stored documents keeps from its first read of them (an API
# page's), then from each read after it; each read is of every document.
FIRST_PASS = 1_000
PASS = 10_000
Pass = Callable[[Key | None, int], list[tuple[Key, dict[str, Any]]]]


def _passes(read: Pass, last: Key | None) -> _ROWS:
    """A sorted listing of rows that live in the stored documents: each ``read`` of them all
    keeps the first ``count`` rows after ``last`` (in the memory of those rows), until a read
    keeps fewer."""
    count = FIRST_PASS
    while True:
        page = read(last, count)
        for found, row in page:
            yield row, found
        if len(page) < count:
            return
        last, count = page[-1][0], PASS


def _url_pass(engine: Engine, target_id: int, snapshot_id: int, status: str | None,
              q: str | None, sort: Sort, last: Key | None, count: int,
              ) -> list[tuple[Key, dict[str, Any]]]:
    """The first ``count`` URLs after ``last`` in the sort, from every live document."""
    page: list[tuple[Key, dict[str, Any]]] = []
    set_id = 0
    while (found := _next_set(engine, target_id, snapshot_id, set_id, status)) is not None:
        next_id, document, stored = found
        del found
        set_id = next_id + 1
        if q and q not in stored.loc_text().lower():
            continue
        page = sorting.best([*page, *_sorted_set_urls(next_id, document, stored, status, q,
                                                       sort, last, count)],
                            count, sort.descending)
    return page


def _sorted_set_urls(set_id: int, document: str, stored: entryset.Columns,
                     status: str | None, q: str | None, sort: Sort, last: Key | None,
                     count: int) -> list[tuple[Key, dict[str, Any]]]:
    """A document's first ``count`` URLs after ``last`` in the sort, each with its key."""
    locs = stored.locs()
    invalid = stored.invalid()
    positions: Iterable[int] = range(len(locs))
    if status is not None:
        positions = [i for i in positions if (i in invalid) == (status == "invalid")]
    if q:
        positions = [i for i in positions if q in locs[i].lower()]
    column = sort.column
    values: Sequence[str | None] = (
        locs if column == "loc" else stored.column(1) if column == "lastmod"
        else [document] * len(locs) if column == "document"
        else ["invalid" if i in invalid else "valid" for i in range(len(locs))])
    chosen = _first_positions(values, positions, set_id, sort.descending, last, count)
    rows = _set_urls(set_id, document, stored, 0, None, None, chosen)
    return [(sorting.key(values[i], set_id, i), row)
            for i, (row, _position) in zip(chosen, rows, strict=True)]


def _first_positions(values: Sequence[str | None], positions: Iterable[int], set_id: int,
                     descending: bool, last: Key | None, count: int) -> list[int]:
    """Of a document's ``positions``, those of its first ``count`` values after ``last`` in
    the sort (``sorting``: empty values last, ties by position): the values compared as they
    are, not a key made for each of 50,000."""
    kept = list(positions)
    present = [i for i in kept if values[i]]
    empty_from = 0  # the empty values from this position on are left
    if last is not None:
        empty, value, tie_set, tie = last[0], last[1], last[2], last[3]
        if empty:
            present = []
            empty_from = tie + 1 if tie_set == set_id else 0 if tie_set < set_id else len(values)
        else:
            same = -1 if tie_set < set_id else tie if tie_set == set_id else len(values)
            present = [i for i in present if (v := values[i]) is not None and (
                (v < value if descending else v > value) or (v == value and i > same))]
    # nsmallest and nlargest keep the order of equal values: by position
    pick = heapq.nlargest if descending else heapq.nsmallest
    chosen = pick(count, present, key=lambda i: values[i] or "")
    if len(chosen) < count:
        absent = (i for i in kept if i >= empty_from and not values[i])
        chosen += list(itertools.islice(absent, count - len(chosen)))
    return chosen


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
              status: str | None, q: str | None = None,
              positions: Iterable[int] | None = None) -> _ROWS:
    """A document's URLs from ``start`` (or at ``positions``, in their order)."""
    locs = stored.locs()
    lastmods, changefreqs, priorities, extensions = (stored.column(i) for i in range(1, 5))
    invalid = stored.invalid()
    del stored
    for i in range(start, len(locs)) if positions is None else positions:
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
                 q: str | None = None, sort: Sort | None = None) -> Listing:
    """The URLs a target lists that are in ``state`` now (``broken``: in any error state, each
    row with its own), in the order of their locs, or
    ``sort``ed: read a page at a time (``ORDER BY`` the column and the loc, ``LIMIT``), each
    read going on after the last row's (value, loc)."""
    sort = None if sort == Sort("loc") else sort  # the order they are read in anyway
    query: list[Any] = ["", state]
    if q:
        query.append(q)
    if sort is not None:
        query.append(["sort", sort.text])
    # (loc), or (1 when the value is empty, the value as text, loc)
    shape = (str,) if sort is None else (int, str, str)
    start = None if after is None else tuple(read_cursor(after, "urls", query, shape))

    def resolve(conn: Connection) -> tuple[int, int]:
        target_id = _target_id(conn, name)
        return target_id, _snapshot(conn, target_id, name, None, "at")

    target_id, snapshot_id = transaction(engine, resolve)
    return Listing({"target": name, "snapshot_id": snapshot_id, "status": state}, "urls",
                   HEALTH_COLUMNS,
                   _health_rows(engine, target_id, states_of(state), start, q, sort),
                   ("urls", query), table=("status", "http_status", "loc", "detail"))


def _health_rows(engine: Engine, target_id: int, states: Sequence[str],
                 after: tuple[Any, ...] | None, q: str | None, sort: Sort | None) -> _ROWS:
    from monitor.store.targetrows import iso_time

    u = url_states.c
    statement = (select(u.loc, u.state, u.rule, u.http_status, u.final_url, u.hops, u.detail,
                        u.since, u.checked_at)
                 .where(u.target_id == target_id, u.listed.is_(True), u.state.in_(states)))
    if q:
        statement = statement.where(func.lower(u.loc).contains(q, autoescape=True))
    if sort is None:
        rows: Iterable[tuple[Any, tuple[Any, ...]]] = (
            (row, (row.loc,)) for row in _stream(engine, statement.where(
                u.loc > ("" if after is None else after[0])).order_by(u.loc)))
    else:
        rows = _keyset_pages(engine, statement, u[sort.column], u.loc, sort.descending, after)
    for row, position in rows:
        yield ({"loc": row.loc, "status": row.state, "rule": row.rule,
                "http_status": row.http_status, "final_url": row.final_url, "hops": row.hops,
                "detail": row.detail, "since": iso_time(row.since),
                "checked_at": iso_time(row.checked_at)}, position)


def _keyset_pages(engine: Engine, statement: Any, column: Any, tie: Any, descending: bool,
                  after: tuple[Any, ...] | None) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """The rows of ``statement`` by ``column`` then ``tie`` (``store.keyset``), read
    ``FIRST_PASS`` then ``PASS`` rows at a time, each read after the last row of the one
    before: a first page costs a top-N sort, not a sort of every row. Each row with its key."""
    count = FIRST_PASS
    while True:
        query = statement.order_by(*keyset.order(column, tie, descending)).limit(count)
        if after is not None:
            query = query.where(keyset.after(column, tie, descending, after))
        rows = transaction(engine, functools.partial(_all, query))
        for row in rows:
            after = keyset.key(row._mapping[column.name], row._mapping[tie.name])
            yield row, after
        if len(rows) < count:
            return
        count = PASS


def _all(query: Any, conn: Connection) -> list[Any]:
    return list(conn.execute(query).all())


# ---- issues --------------------------------------------------------------------------------

ISSUE_COLUMNS = ("rule", "severity", "loc", "document", "message")


def open_issues(engine: Engine, name: str, at: SnapshotRef | None, rules: Sequence[str],
                after: str | None, describe: Describe, sort: Sort | None = None) -> Listing:
    """The issues current at a snapshot (the latest by default), of the rules the globs
    select (every rule when none). An entry's issue is stored as its rule id; ``describe``
    (validate.describe) makes it whole again, with its message. In the order they are stored
    in, or ``sort``ed."""
    sort = sorting.offered(sort, "issues")
    query = [_text(at), list(rules)]
    if sort is not None:
        query.append(["sort", sort.text])
    shape = (int, int, int) if sort is None else (int, int, str, int, int)
    pinned, *start = ([0, 0, 0] if sort is None else [0]) if after is None else read_cursor(
        after, "issues", query, shape)

    def resolve(conn: Connection) -> tuple[int, int, list[dict[str, Any]]]:
        target_id = _target_id(conn, name)
        snapshot_id = pinned or _snapshot(conn, target_id, name, at, "at")
        raw = conn.execute(select(snapshots.c.issues).where(snapshots.c.id == snapshot_id)
                           ).scalar_one_or_none()
        return target_id, snapshot_id, json.loads(raw or "[]")

    target_id, snapshot_id, own = transaction(engine, resolve)
    if sort is None:
        rows = _issue_rows(engine, target_id, snapshot_id, own, rules, start[0], start[1],
                           describe)
    else:
        rows = _passes(lambda last, count: _issue_pass(
            engine, target_id, snapshot_id, own, rules, describe, sort, last, count),
            tuple(start) if start else None)
    return Listing({"target": name, "snapshot_id": snapshot_id}, "issues", ISSUE_COLUMNS,
                   _pinned(rows, snapshot_id), ("issues", query),
                   table=("severity", "rule", "loc", "message"))


def _issue_pass(engine: Engine, target_id: int, snapshot_id: int, own: list[dict[str, Any]],
                rules: Sequence[str], describe: Describe, sort: Sort, last: Key | None,
                count: int) -> list[tuple[Key, dict[str, Any]]]:
    """The first ``count`` issues after ``last`` in the sort: the snapshot's own (document 0),
    then each live document's."""

    def kept(set_id: int, rows: Iterable[dict[str, Any]]) -> list[tuple[Key, dict[str, Any]]]:
        found = ((sorting.key(row[sort.column], set_id, i), row) for i, row in enumerate(rows)
                 if matches(row["rule"], rules))
        return sorting.best((pair for pair in found if last is None
                             or sorting.follows(pair[0], last, sort.descending)),
                            count, sort.descending)

    page = kept(0, (_stored_issue(item, None) for item in own))
    set_id = 1
    while (stored := _next_set(engine, target_id, snapshot_id, set_id)) is not None:
        set_id = stored[0] + 1
        page = sorting.best([*page, *kept(stored[0], _set_issues(stored[1], stored[2],
                                                                   describe))],
                            count, sort.descending)
        del stored
    return page


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
        yield _issue(RuleId.LOC_DUPLICATE, "loc is listed more than once in this target", loc,
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


# ---- snapshots -----------------------------------------------------------------------------

SNAPSHOT_COLUMNS = ("id", "started_at", "finished_at", "outcome", "urls", "invalid", "added",
                    "removed", "changed", "invalid_new", "documents_ok", "documents_failed",
                    "fetched_bytes", "duration_seconds", "error_kind", "error_message")


def open_snapshots(engine: Engine, name: str, before: int | None,
                   sort: Sort | None = None) -> Listing:
    """Every snapshot of a target (with an id below ``before``), newest first or ``sort``ed,
    streamed: the CSV and NDJSON exports of the snapshots page (the JSON API pages them
    itself)."""
    from monitor.store.targetrows import iso_time

    sort = sorting.offered(sort, "snapshots")
    target_id = transaction(engine, lambda conn: _target_id(conn, name))
    s = snapshots.c
    statement = select(*(s[column] for column in SNAPSHOT_COLUMNS)).where(
        s.target_id == target_id)
    if before is not None:
        statement = statement.where(s.id < before)
    order = ([s.id.desc()] if sort is None
             else keyset.order(s[sort.column], s.id, sort.descending))

    def rows() -> _ROWS:
        for row in _stream(engine, statement.order_by(*order)):
            found = dict(row._mapping)
            found["started_at"] = iso_time(found["started_at"])
            found["finished_at"] = iso_time(found["finished_at"])
            yield found, (found["id"],)

    return Listing({"target": name}, "snapshots", SNAPSHOT_COLUMNS, rows(),
                   ("snapshots", [before]), table=("id", "finished_at", "outcome", "urls"))
