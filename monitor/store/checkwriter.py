"""The writes of one check: its snapshot, its entry sets, its changes and its documents' new
states, in the one transaction the check's plan opens (``monitor.store.checkplan``), so that
they and the alerts it raises commit together. Its reads are ``monitor.store.checkreads``;
transient errors are retried by ``monitor.store.retry``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, update

from monitor.codec import changepacks, changerows, entrydelta
from monitor.codec.states import DocumentState
from monitor.core.errors import StoreError
from monitor.core.model import Change, CheckResult, DocumentResult
from monitor.store import changelocs, historysize
from monitor.store.checkreads import stored_value
from monitor.store.schema import (
    changes,
    documents,
    entry_sets,
    snapshots,
    target_documents,
    targets,
)

__all__ = [
    "EntrySetWrite",
    "SnapshotWrite",
    "close_entry_sets",
    "close_snapshot",
    "open_snapshot",
    "replace_entry_set",
    "write_change_rows",
    "write_changes",
    "write_entry_set",
]

_BATCH = 5_000  # rows per executemany: bounded memory, few round trips


# The statements every check runs, built once: building a statement and its cache key cost
# more than running it (a snapshot's INSERT 509 -> 117 us).
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



def replace_entry_set(conn: Connection, set_id: int, data: bytes) -> None:
    """Put new verdicts into an entry set this snapshot wrote (the same entries: a verdict of
    the whole target, known once every document was read)."""
    conn.execute(update(entry_sets).where(entry_sets.c.id == set_id).values(
        data=data, base_id=None))  # whole now, whether it was a delta or not


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
