"""The queries of one check: load a target's state, write a snapshot in one transaction.

The pipeline opens the transaction (``transaction``), so that the snapshot, its entries,
its changes and the alerts it raises commit together. Transient database errors
are retried here and nowhere else.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Select, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from monitor.codec import changepacks, changerows, entrydelta, entryset
from monitor.errors import StoreError
from monitor.model import Change, CheckResult, DocumentResult
from monitor.store import changelocs, historysize
from monitor.store.db import redact
from monitor.store.schema import (
    changes,
    documents,
    entry_sets,
    snapshots,
    target_documents,
    targets,
)

__all__ = [
    "DocumentState",
    "EntrySetWrite",
    "SnapshotWrite",
    "StoredSet",
    "TargetState",
    "close_entry_sets",
    "close_snapshot",
    "load_entry_sets",
    "load_state",
    "open_snapshot",
    "read_columns",
    "read_sets",
    "stored_value",
    "transaction",
    "url_set_at",
    "write_change_rows",
    "write_changes",
    "write_entry_set",
]

T = TypeVar("T")
_BATCH = 5_000  # rows per executemany: bounded memory, few round trips


@dataclass(slots=True)
class DocumentState:
    """The stored state of one document of a target (conditional GET, skipping, carrying)."""

    url: str
    parent_url: str | None = None
    kind: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    sha256: str | None = None
    urls: int = 0
    invalid: int = 0
    children: list[str] = field(default_factory=list)
    issues: list[dict[str, Any]] = field(default_factory=list)
    issue_counts: dict[str, int] = field(default_factory=dict)
    lastmods: int | None = None  # entries with a valid lastmod (None: stored before 0009)


@dataclass(slots=True)
class TargetState:
    """What a check needs to know of the past: the target's id and its current documents."""

    target_id: int
    documents: dict[str, DocumentState]
    # (compared, changed) lastmods of the last re-check that compared any, or None
    lastmods: tuple[int, int] | None = None
    last_snapshot_id: int | None = None  # the newest snapshot when the state was read


@dataclass(frozen=True, slots=True)
class StoredSet:
    """The current version of one document's entries: its row id and its value, whole, or
    as it is stored when read with ``whole=False``: then perhaps a delta, with its base's."""

    id: int
    document_url: str
    data: bytes
    # ``data`` is a delta (monitor.codec.entrydelta) against the full version whose value this is;
    # None: ``data`` is whole (and the version is its own base)
    base_data: bytes | None = None

    @property
    def base_id(self) -> int:
        """The row id of the full version this one is, or is a delta against."""
        return self.id if self.base_data is None else entrydelta.base_of(self.data)

    def whole(self) -> bytes:
        """The version's whole value."""
        return self.data if self.base_data is None else entrydelta.apply(self.base_data,
                                                                         self.data)


def transaction(engine: Engine, work: Callable[[Connection], T], *, attempts: int = 3) -> T:
    """Run ``work`` in one transaction, retrying transient errors a bounded number of times."""
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except IntegrityError:
            raise
        except OperationalError as exc:
            transient = _transient(exc)
            if not transient or attempt == attempts:
                raise StoreError(
                    f"database {redact(str(engine.url))}: {_first_line(exc)}"
                ) from exc
            time.sleep(0.2 * 2**attempt)
        except DBAPIError as exc:
            if not exc.connection_invalidated or attempt == attempts:
                raise StoreError(
                    f"database {redact(str(engine.url))}: {_first_line(exc)}"
                ) from exc
    raise AssertionError("unreachable")


def _transient(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    return exc.connection_invalidated or any(
        word in text for word in ("locked", "busy", "could not serialize", "deadlock",
                                  "connection", "terminating")
    )


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [orig.__class__.__name__])[0]


# The statements every check runs, built once: building a statement and its cache key cost
# more than running it (load_state 236 -> 37 us, a snapshot's INSERT 509 -> 117).
_LAST_SNAPSHOT = (select(func.max(snapshots.c.id)).where(snapshots.c.target_id == targets.c.id)
                  .scalar_subquery())
_LOAD_STATE = (
    select(targets.c.id.label("target_id_"), targets.c.url.label("target_url_"),
           targets.c.lastmod_compared.label("lastmod_compared_"),
           targets.c.lastmod_changed.label("lastmod_changed_"),
           _LAST_SNAPSHOT.label("last_snapshot_id_"), target_documents)
    .outerjoin(target_documents, target_documents.c.target_id == targets.c.id)
    .where(targets.c.name == bindparam("target_name"))
)
_NEW_SNAPSHOT = insert(snapshots).returning(snapshots.c.id)
_END_SNAPSHOT = update(snapshots).where(snapshots.c.id == bindparam("snapshot"))
_COUNT_HISTORY = (
    update(targets).where(targets.c.id == bindparam("target"))
    .values(snapshot_count=targets.c.snapshot_count + 1,
            change_count=targets.c.change_count + bindparam("written"))
)
_COUNT_HISTORY_AND_LASTMODS = _COUNT_HISTORY.values(  # a check that did not fail
    lastmod_compared=bindparam("compared"), lastmod_changed=bindparam("lastmods_changed"))
_SEEN_AGAIN = (
    update(target_documents)
    .where(target_documents.c.target_id == bindparam("target"),
           target_documents.c.url == bindparam("doc"))
    .values(last_snapshot_id=bindparam("snapshot"))
)


def load_state(conn: Connection, name: str, url: str, now: datetime) -> TargetState:
    """The target's id (created on first sight) and its current documents, in one query."""
    t = targets.c
    rows = conn.execute(_LOAD_STATE, {"target_name": name}).all()
    if not rows:
        try:
            with conn.begin_nested():
                target_id = conn.execute(
                    insert(targets).values(name=name, url=url, created_at=now)
                    .returning(targets.c.id)
                ).scalar_one()
        except IntegrityError:  # another replica created it first
            target_id = conn.execute(select(t.id).where(t.name == name)).scalar_one()
        return TargetState(target_id=target_id, documents={})
    target_id = rows[0].target_id_
    compared, changed = rows[0].lastmod_compared_, rows[0].lastmod_changed_
    lastmods = None if compared is None or changed is None else (compared, changed)
    if rows[0].target_url_ != url:
        conn.execute(update(targets).where(t.id == target_id).values(url=url))
    docs: dict[str, DocumentState] = {}
    for d in rows:
        if d.url is None:  # the outer join's row of a target without documents
            continue
        docs[d.url] = DocumentState(
            url=d.url,
            parent_url=d.parent_url,
            kind=d.kind,
            etag=d.etag,
            last_modified=d.last_modified,
            sha256=d.sha256,
            urls=d.urls,
            invalid=d.invalid,
            children=json.loads(d.children) if d.children else [],
            issues=json.loads(d.issues),
            issue_counts=json.loads(d.issue_counts),
            lastmods=d.lastmods,
        )
    return TargetState(target_id=target_id, documents=docs, lastmods=lastmods,
                       last_snapshot_id=rows[0].last_snapshot_id_)


def load_entry_sets(
    conn: Connection, target_id: int, document_urls: Collection[str], *, whole: bool = True,
) -> dict[str, StoredSet]:
    """The current entry set of each of these documents of a target that has one. ``whole``
    False: a version stored as a delta comes as it is, with its base's value, for the reader
    to resolve (a re-read's digest does, into the columns it needs: applying the delta here
    and packing it whole, to be unpacked there, took 45 ms of this process a 50,000-URL child)."""
    result: dict[str, StoredSet] = {}
    v = entry_sets.c
    urls = list(document_urls)
    for start in range(0, len(urls), 500):
        query = select(v.id, v.document_url, v.data).where(
            v.target_id == target_id,
            v.removed_snapshot_id.is_(None),
            v.document_url.in_(urls[start : start + 500]),
        )
        for row_id, url, data in read_sets(conn, query, whole=False):
            if not entrydelta.is_delta(data):
                result[url] = StoredSet(row_id, url, data)
                continue
            base = stored_value(conn, entrydelta.base_of(data))
            result[url] = (StoredSet(row_id, url, entrydelta.apply(base, data)) if whole
                           else StoredSet(row_id, url, data, base))
    return result


def load_set_heads(conn: Connection, target_id: int, document_urls: Collection[str],
                   size: int = 512) -> dict[str, bytes]:
    """The first ``size`` bytes of the current entry set of each of these documents (enough to
    read the start of its header: ``entryset.head``), without reading the whole sets."""
    v = entry_sets.c
    result: dict[str, bytes] = {}
    urls = list(document_urls)
    for start in range(0, len(urls), 500):
        query = select(v.document_url, func.substr(v.data, 1, size)).where(
            v.target_id == target_id, v.removed_snapshot_id.is_(None),
            v.document_url.in_(urls[start : start + 500]))
        for url, data in read_sets(conn, query, whole=False):
            result[url] = bytes(data)
    return result


def replace_entry_set(conn: Connection, set_id: int, data: bytes) -> None:
    """Put new verdicts into an entry set this snapshot wrote (the same entries: a verdict of
    the whole target, known once every document was read)."""
    conn.execute(update(entry_sets).where(entry_sets.c.id == set_id).values(
        data=data, base_id=None))  # whole now, whether it was a delta or not


def url_set_at(conn: Connection, target_id: int, snapshot_id: int) -> set[str]:
    """Every loc a target listed as of a snapshot (recoverable at any past time)."""
    v = entry_sets.c
    query = select(v.data).where(
        v.target_id == target_id,
        v.first_snapshot_id <= snapshot_id,
        v.removed_snapshot_id.is_(None) | (v.removed_snapshot_id > snapshot_id),
    )
    found: set[str] = set()
    for (columns,) in read_columns(conn, query):
        found.update(columns.locs())
    return found


def read_sets(conn: Connection, query: Select[Any], *, whole: bool = True,
              ) -> list[tuple[Any, ...]]:
    """The rows of a query that reads entry sets, whose last column, ``data``, comes as bytes:
    a version stored as a delta (``monitor.codec.entrydelta``) comes whole, unless ``whole`` is
    False (a query of other bytes, or of the first bytes of sets).

    PostgreSQL sends them in binary: bytea as text is hex, twice the bytes, and decoding it
    took 10 ms a megabyte here against 2 (a re-check reads the changed document's set).
    """
    if conn.dialect.name != "postgresql":
        rows = [(*row[:-1], bytes(row[-1])) for row in conn.execute(query)]
    else:
        compiled = query.compile(dialect=conn.dialect,
                                 compile_kwargs={"render_postcompile": True})
        driver = conn.connection.driver_connection
        with driver.cursor(binary=True) as cursor:  # type: ignore[union-attr]
            cursor.execute(compiled.string, compiled.params)
            rows = cursor.fetchall()
    if whole:
        for i, row in enumerate(rows):
            if entrydelta.is_delta(row[-1]):
                rows[i] = (*row[:-1], entrydelta.apply(stored_value(
                    conn, entrydelta.base_of(row[-1])), row[-1]))
    return rows


def read_columns(conn: Connection, query: Select[Any]) -> list[tuple[Any, ...]]:
    """``read_sets``, each row's last column the entry set's columns (``entryset.unpack``):
    a delta is applied to its base's, not packed whole to be unpacked again."""
    rows = read_sets(conn, query, whole=False)
    for i, row in enumerate(rows):
        data = row[-1]
        rows[i] = (*row[:-1], entrydelta.resolve(
            stored_value(conn, entrydelta.base_of(data)), data)[0]
            if entrydelta.is_delta(data) else entryset.unpack(data))
    return rows


def stored_value(conn: Connection, set_id: int) -> bytes:
    """An entry-set version's stored value as it is (a delta stays one)."""
    found = read_sets(conn, select(entry_sets.c.data).where(entry_sets.c.id == set_id),
                      whole=False)
    if not found:
        raise StoreError(f"entry set {set_id} is missing: a delta's base was deleted")
    return bytes(found[0][0])


def open_snapshot(conn: Connection, target_id: int, started_at: datetime) -> int:
    """Insert the check's snapshot row (completed by ``close_snapshot``); return its id."""
    snapshot_id: int = conn.execute(_NEW_SNAPSHOT, {
        "target_id": target_id, "started_at": started_at, "finished_at": started_at,
        "outcome": "failed",
    }).scalar_one()
    return snapshot_id


@dataclass(slots=True)
class EntrySetWrite:
    """A document's new entry set, replacing its current version (if any)."""

    target_id: int
    snapshot_id: int
    document_url: str
    previous_id: int | None
    urls: int
    invalid: int
    data: bytes | None  # None: ``made`` stands for it
    delta: bool = False  # whether to try storing it as a delta: few of its entries changed
    made: tuple[int, bytes] | None = None  # the delta to store, already made: (base id, value)


def write_entry_set(conn: Connection, w: EntrySetWrite) -> int:
    """Close the document's current version and insert the new one; return its id. The new
    one is stored as a delta against the current one's base (the current one, if it is whole)
    when it lists the same locs and the delta is small (``monitor.codec.entrydelta``)."""
    value, base_id = w.data, None
    if w.previous_id is not None:
        close_entry_sets(conn, [w.previous_id], w.snapshot_id)
        if w.made is not None:  # made where the version was (monitor.read.digest)
            base_id, value = w.made
        elif w.delta:
            assert w.data is not None
            previous = stored_value(conn, w.previous_id)
            base_id = entrydelta.base_of(previous) if entrydelta.is_delta(previous) else (
                w.previous_id)
            base = stored_value(conn, base_id) if base_id != w.previous_id else previous
            del previous
            delta = entrydelta.make(base, w.data, base_id)
            value, base_id = (w.data, None) if delta is None else (delta, base_id)
    if value is None:
        raise ValueError(f"{w.document_url}: a version without its value or a delta")
    inserted = conn.execute(insert(entry_sets).values(
        target_id=w.target_id, document_url=w.document_url, first_snapshot_id=w.snapshot_id,
        urls=w.urls, invalid=w.invalid, data=value, base_id=base_id,
    )).inserted_primary_key
    assert inserted is not None
    return int(inserted[0])


def close_entry_sets(conn: Connection, ids: Collection[int], snapshot_id: int) -> None:
    """End these versions at this snapshot (their documents changed or went)."""
    if ids:
        conn.execute(
            update(entry_sets).where(entry_sets.c.id == bindparam("row"))
            .values(removed_snapshot_id=snapshot_id),
            [{"row": i} for i in ids],
        )


def write_changes(
    conn: Connection, target_id: int, snapshot_id: int, found: Iterable[Change]
) -> int:
    """One row per change (re-checks; a first check is the baseline and writes none); return
    how many rows were written (for ``SnapshotWrite.changes_written``)."""
    return write_change_rows(conn, target_id, snapshot_id, changerows.of(found))


def write_change_rows(
    conn: Connection, target_id: int, snapshot_id: int, rows: Iterable[changerows.Row],
    version: tuple[int, bytes, int | None] | None = None,
    packed: Iterable[changepacks.Packed] = (),
) -> int:
    """``write_changes`` of changes already made rows (``monitor.codec.changerows``), and packs of
    ``changed`` ones already made (``monitor.codec.changepacks``); return how many changes were
    written. ``version``: the entry-set version the check stored for their document (id,
    data) and the one it replaced (id), which the packs point into; the ``changed`` rows the
    new version gives back are packed too."""
    if version is None:
        return _copy(conn, changes, _CHANGE_COLUMNS, (
            (snapshot_id, target_id, kind, loc, before, after, rule)
            for kind, loc, before, after, rule in rows
        ))
    set_id, data, previous_id = version
    packs = list(packed)  # compressed: ~50 KB for 5,000 changes at most

    def plain() -> Iterator[tuple[Any, ...]]:
        for item in changepacks.split(rows, data):
            if len(item) == 4:
                packs.append(item)
            else:
                kind, loc, before, after, rule = item
                yield snapshot_id, target_id, kind, loc, before, after, rule

    written = _copy(conn, changes, _CHANGE_COLUMNS, plain())
    if packs:  # after the rows
        if previous_id is None and any(positional for *_rest, positional in packs):
            raise StoreError("a pack of positions without the version before it")
        conn.execute(insert(changes), [
            {"snapshot_id": snapshot_id, "target_id": target_id, "kind": "changed",
             "loc": loc, "entry_set_id": set_id, "members": members, "pack": value,
             "before_set_id": previous_id if positional else None}
            for loc, members, value, positional in packs])
    return written + sum(members for _loc, members, _value, _positional in packs)


@dataclass(slots=True)
class SnapshotWrite:
    """The end of a check: its outcome, counts, documents and their new states."""

    snapshot_id: int | None  # None: the check wrote nothing before its end
    target_id: int
    started_at: datetime
    finished_at: datetime
    result: CheckResult
    issue_counts: dict[str, int]
    document_states: list[DocumentState]  # documents read (or revalidated) this check
    dropped_documents: list[str]  # documents no longer listed by a complete index
    untouched_documents: list[str]  # 304 or same body: only last_snapshot_id moves
    issues: list[dict[str, Any]] = field(default_factory=list)  # snapshots.issues
    changes_written: int = 0  # change rows this check wrote (targets.change_count)


def close_snapshot(conn: Connection, w: SnapshotWrite) -> int:
    """Complete the snapshot row (inserted whole if no write opened it) and record each
    document's fingerprint and state; return the snapshot's id."""
    r = w.result
    values = {
        "finished_at": w.finished_at,
        "outcome": r.outcome,
        "urls": r.urls,
        "invalid": r.invalid,
        "added": r.added,
        "removed": r.removed,
        "changed": r.changed,
        "invalid_new": r.invalid_new,
        "documents_ok": sum(d.outcome != "failed" for d in r.documents),
        "documents_failed": sum(d.outcome == "failed" for d in r.documents),
        "fetched_bytes": r.fetched_bytes,
        "duration_seconds": r.duration_seconds,
        "issue_counts": json.dumps(w.issue_counts, sort_keys=True),
        "issues": json.dumps(w.issues, ensure_ascii=False),
        "document_counts": json.dumps(Counter(d.outcome for d in r.documents), sort_keys=True),
        "error_kind": r.error_kind,
        "error_message": r.error_message,
    }
    snapshot_id = w.snapshot_id
    # The bytes of its rows (store.historysize), its change rows read back only when it wrote
    # some: an unchanged re-check stays two reads and one short write.
    own = [historysize.row_bytes(*(str(values[k]) for k in ("issues", "issue_counts",
                                                             "document_counts")),
                                 r.error_message)]
    own += [historysize.row_bytes(d.url, d.parent, d.etag, d.last_modified, d.sha256, d.error)
            for d in r.documents if d.outcome in ("ok", "failed")]
    values["history_bytes"] = sum(own) + (
        historysize.change_bytes(conn, snapshot_id)
        if snapshot_id is not None and w.changes_written else 0)
    if snapshot_id is None:  # an unchanged re-check, a failed one: one statement
        snapshot_id = int(conn.execute(
            _NEW_SNAPSHOT, {"target_id": w.target_id, "started_at": w.started_at, **values}
        ).scalar_one())
    else:
        conn.execute(_END_SNAPSHOT, {"snapshot": snapshot_id, **values})
    _write_documents(conn, snapshot_id, r.documents)
    _write_document_states(conn, snapshot_id, w)

    if w.changes_written:
        changelocs.note_snapshot(conn, w.target_id, snapshot_id)
    if r.outcome == "failed":  # lastmod-churn looks at the last re-check that compared any
        conn.execute(_COUNT_HISTORY, {"target": w.target_id, "written": w.changes_written})
    else:  # a baseline compared nothing: NULL, so that no churn spans it
        conn.execute(_COUNT_HISTORY_AND_LASTMODS, {
            "target": w.target_id, "written": w.changes_written,
            "compared": r.lastmod_compared, "lastmods_changed": r.lastmod_changed})
    return snapshot_id


def _write_documents(conn: Connection, snapshot_id: int, docs: Iterable[DocumentResult]) -> None:
    """A row for each document read or failed; one answered 304 or unchanged is counted in its
    snapshot's ``document_counts`` only (its state moves in target_documents)."""
    _bulk(conn, documents, (
        {
            "snapshot_id": snapshot_id,
            "url": d.url,
            "parent_url": d.parent,
            "kind": d.kind,
            "outcome": d.outcome,
            "http_status": d.http_status,
            "etag": d.etag,
            "last_modified": d.last_modified,
            "sha256": d.sha256,
            "urls": d.urls,
            "invalid": d.invalid,
            "bytes": d.bytes,
            "error": d.error,
        }
        for d in docs if d.outcome in ("ok", "failed")
    ))


def _write_document_states(conn: Connection, snapshot_id: int, w: SnapshotWrite) -> None:
    td = target_documents.c
    replaced = [s.url for s in w.document_states] + list(w.dropped_documents)
    for start in range(0, len(replaced), 500):
        conn.execute(
            delete(target_documents).where(
                td.target_id == w.target_id, td.url.in_(replaced[start : start + 500])
            )
        )
    _bulk(conn, target_documents, (
        {
            "target_id": w.target_id,
            "url": s.url,
            "parent_url": s.parent_url,
            "kind": s.kind,
            "etag": s.etag,
            "last_modified": s.last_modified,
            "sha256": s.sha256,
            "urls": s.urls,
            "invalid": s.invalid,
            "children": json.dumps(s.children) if s.kind in ("sitemapindex", "robots") else None,
            "issues": json.dumps(s.issues),
            "issue_counts": json.dumps(s.issue_counts, sort_keys=True),
            "last_snapshot_id": snapshot_id,
            "lastmods": s.lastmods,
        }
        for s in w.document_states
    ))
    if w.untouched_documents:
        conn.execute(_SEEN_AGAIN, [
            {"target": w.target_id, "doc": url, "snapshot": snapshot_id}
            for url in w.untouched_documents
        ])


_CHANGE_COLUMNS = ("snapshot_id", "target_id", "kind", "loc", "before", "after", "rule")


def _copy(
    conn: Connection, table: Any, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]]
) -> int:
    """Insert many rows fast, inside the caller's transaction; return how many.

    The change rows of a re-check that changed much: PostgreSQL gets COPY, SQLite the driver's
    own executemany over tuples; both skip SQLAlchemy's per-row work, which measured 4x
    (SQLite) to 10x (PostgreSQL) slower for 100,000 rows.
    """
    driver = conn.connection.driver_connection
    names = ", ".join(columns)
    if conn.dialect.name == "postgresql":
        with driver.cursor() as cursor, cursor.copy(  # type: ignore[union-attr]
            f"COPY {table.name} ({names}) FROM STDIN"
        ) as copy:
            count = 0
            for count, row in enumerate(rows, 1):  # noqa: B007 - the count is the point
                copy.write_row(row)
        return count
    statement = f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(columns))})"
    batch: list[tuple[Any, ...]] = []
    count = 0
    for row in rows:
        batch.append(row)
        if len(batch) >= _BATCH:
            driver.executemany(statement, batch)  # type: ignore[union-attr]
            count += len(batch)
            batch = []
    if batch:
        driver.executemany(statement, batch)  # type: ignore[union-attr]
    return count + len(batch)


def _bulk(conn: Connection, table: Any, rows: Iterable[dict[str, Any]]) -> None:
    """executemany in batches, so memory stays bounded whatever the row count."""
    batch: list[dict[str, Any]] = []
    statement = insert(table)
    for row in rows:
        batch.append(row)
        if len(batch) >= _BATCH:
            conn.execute(statement, batch)
            batch = []
    if batch:
        conn.execute(statement, batch)
