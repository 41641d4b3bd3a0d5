"""What the listings read rows with: a query's rows as the database sends them, on a
connection of their own; the changes a pack row stands for; the cursors' pinned snapshots.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, select

from monitor.codec import changepacks, entryset
from monitor.core.errors import NotFound, StoreError
from monitor.listing.params import SnapshotRef
from monitor.store.checkreads import read_columns, read_sets
from monitor.store.retry import transaction
from monitor.store.schema import changes, entry_sets, snapshots, targets

__all__ = ["Packs", "Rows", "live", "next_set", "pinned", "snapshot_id", "stream", "streaming",
           "target_id"]

Rows = Iterator[tuple[dict[str, Any], tuple[Any, ...]]]


def pinned(rows: Rows, *ids: int) -> Rows:
    """Rows whose cursors also hold the snapshots the listing resolved (``ids``): a listing of
    the latest snapshot, or of one 24 hours ago, goes on from the same one page after page,
    whatever was checked meanwhile."""
    for row, position in rows:
        yield row, (*ids, *position)


def target_id(conn: Connection, name: str) -> int:
    """The id of the target named ``name``; ``NotFound`` when there is none."""
    found: int | None = conn.execute(
        select(targets.c.id).where(targets.c.name == name)).scalar_one_or_none()
    if found is None:
        raise NotFound(f"no target named {name!r} in this database")
    return found


def snapshot_id(conn: Connection, target: int, name: str, ref: SnapshotRef | None,
                param: str) -> int:
    """The id of the snapshot ``ref`` names (the latest when None)."""
    s = snapshots.c
    query = select(func.max(s.id)).where(s.target_id == target)
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


def live(target: int, snapshot: int) -> Any:
    """The entry sets live at a snapshot: the target's URL set then."""
    v = entry_sets.c
    return and_(v.target_id == target, v.first_snapshot_id <= snapshot,
                v.removed_snapshot_id.is_(None) | (v.removed_snapshot_id > snapshot))


def next_set(engine: Engine, target: int, snapshot: int, from_id: int,
             status: str | None = None) -> tuple[int, str, entryset.Columns] | None:
    """The first entry set live at the snapshot with an id of ``from_id`` or more (one that
    holds entries of that status), in a short read of its own."""
    v = entry_sets.c
    query = select(v.id, v.document_url, v.data).where(live(target, snapshot),
                                                       v.id >= from_id)
    if status == "valid":
        query = query.where(v.urls > 0)
    elif status == "invalid":
        query = query.where(v.invalid > 0)
    query = query.order_by(v.id).limit(1)
    rows = transaction(engine, lambda conn: read_columns(conn, query))
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


@contextmanager
def streaming(engine: Engine, statements: Sequence[Any],
              ) -> Iterator[tuple[Connection, list[Any]]]:
    """Queries whose rows come as the database sends them, on one connection of their own
    (which can also run small queries meanwhile)."""
    with engine.connect() as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=5000)
        results = [streamed.execute(statement) for statement in statements]
        try:
            yield conn, results
        finally:  # also when the reader stops early: PostgreSQL's cursors are closed, not dropped
            for result in results:
                result.close()


def stream(engine: Engine, statement: Any) -> Iterator[Any]:
    """The rows of one query as the database sends them (``streaming``)."""
    with streaming(engine, [statement]) as (_conn, (result,)):
        yield from result


class Packs:
    """The changes a pack row stands for (``monitor.codec.changepacks``), read on the listing's
    connection: its members and the entry-set versions that hold their locs and states (the
    version the check stored, and the one it replaced), kept for the next pack (a document's
    packs point into the same two)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._versions: dict[int, changepacks.Version] = {}
        # A search's: the positions of each version's locs that hold its text, the version
        # kept while it has some (a few: newest first, a version's additions and its removals
        # are a pack of another version apart); the versions without one, all of them.
        self._hits: dict[tuple[int, str], tuple[changepacks.Version, set[int]]] = {}
        self._without: set[tuple[int, str]] = set()

    def members(self, pack_id: int, set_id: int, before_id: int | None,
                ) -> list[tuple[str, str | None, str | None]]:
        """(loc, before, after) of each member, in the order the check recorded them (a pack
        of ``added`` or ``removed`` changes: monitor.store.movepacks)."""
        wanted = [set_id] if before_id is None else [set_id, before_id]
        self._versions = {i: v for i, v in self._versions.items() if i in wanted}
        for i in wanted:
            if i not in self._versions:
                self._versions[i] = changepacks.Version(self._columns(i, pack_id))
        kind, data = self._pack(pack_id)
        version, before = self._versions[set_id], (
            None if before_id is None else self._versions[before_id])
        return version.changes(changepacks.unpack(data), before, kind)

    def found(self, pack_id: int, set_id: int, before_id: int | None, q: str,
              ) -> dict[int, tuple[str, str | None, str | None]]:
        """The members whose locs hold ``q`` (lower case), by their place in the pack (as
        ``members`` lists them): (loc, before, after). A version is searched once, as one
        text; the states of the members it lists alone are built, and a pack into a version
        without one is not read."""
        key = (set_id, q)
        if key in self._without:
            return {}
        if key not in self._hits:
            columns = self._columns(set_id, pack_id)
            holding = changepacks.holding(columns.loc_text(), q)
            if not holding:
                self._without.add(key)
                return {}
            if len(self._hits) >= 3:
                del self._hits[next(iter(self._hits))]
            self._hits[key] = (changepacks.Version(columns), set(holding))
        version, positions = self._hits[key]
        kind, data = self._pack(pack_id)
        hits = changepacks.at_positions(data, positions)
        before = None
        if kind == "changed" and before_id is not None and any(
                was is None for _p, was in hits.values()):
            if before_id not in self._versions:  # the version before: the same for a document
                self._versions = {before_id: changepacks.Version(
                    self._columns(before_id, pack_id))}
            before = self._versions[before_id]
        return {j: version.changes([member], before, kind)[0] for j, member in hits.items()}

    def _columns(self, set_id: int, pack_id: int) -> entryset.Columns:
        v = entry_sets.c
        rows = read_columns(self._conn, select(v.id, v.data).where(v.id == set_id))
        if not rows:
            raise StoreError(f"entry set {set_id}, which the changes of row {pack_id} "
                             "point into, is missing")
        columns: entryset.Columns = rows[0][1]
        return columns

    def _pack(self, pack_id: int) -> tuple[str, bytes]:
        c = changes.c
        kind, data = read_sets(self._conn, select(c.kind, c.pack).where(c.id == pack_id),
                               whole=False)[0]
        return kind, data
