"""The check's reads of the store: a target's state as a check begins, its documents' current
entry sets (whole, as stored, or their first bytes), and the reading of entry-set rows that
every store module which reads entries shares (a delta resolved against its base).

Each runs in the caller's connection; ``monitor.check.context`` gives each a short one of its
own, so no transaction is held while a check waits on the network.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from monitor.codec import entrydelta, entryset
from monitor.codec.states import DocumentState, StoredSet, TargetState
from monitor.core.errors import StoreError
from monitor.store.schema import entry_sets, snapshots, target_documents, targets

__all__ = [
    "load_entry_sets",
    "load_set_heads",
    "load_state",
    "read_columns",
    "read_sets",
    "stored_value",
    "url_set_at",
]

# The statement every check runs, built once: building a statement and its cache key cost
# more than running it (load_state 236 -> 37 us).
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
