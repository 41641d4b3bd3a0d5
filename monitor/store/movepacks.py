"""A check's additions and removals as packs: rows of positions in the entry-set versions
that already hold their locs and states, not a row per URL.

A sitemap that replaces its 20,000 URLs at every check has 40,000 ``added`` and ``removed``
changes a check. As a row each (its loc, its state as JSON, and the loc again in the loc index
and in ``change_locs``) they were 265 bytes a change on SQLite and 1 KiB on PostgreSQL, while
the new version of the document lists every added URL with its state, and the version it
replaced every removed one. So a pack of additions holds the positions of its members in a
version this snapshot stored (``entry_set_id``), a pack of removals their positions in a
version this snapshot ended (also ``entry_set_id``: the states there are the states before);
``before_set_id`` stays NULL (monitor.codec.changepacks). A few bytes a change.

A change that no such version gives back exactly (its loc is not there, or its state there is
not the change's) stays a row of its own; so does every change of a kind with fewer than
``PACK_MIN`` of them (a pack's read costs a version's, which a listing of a few rows should not
pay).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, delete, insert, select, update

from monitor.codec import changepacks, changerows
from monitor.core.model import Change
from monitor.store import changelocs, historysize
from monitor.store.checkreads import read_columns, read_sets
from monitor.store.checkwriter import write_changes
from monitor.store.schema import changes, entry_sets

__all__ = ["PACK_MIN", "take_out", "write_moves"]

PACK_MIN = 64  # changes of a kind below which a check writes them as rows


def write_moves(conn: Connection, target_id: int, snapshot_id: int,
                found: Sequence[Change]) -> int:
    """Write a check's changes across documents (additions, removals, moves), its many
    additions and removals as packs; return how many changes were written."""
    wanted: dict[str, dict[str, str]] = {"added": {}, "removed": {}}
    for change in found:
        if change.kind == "added" and change.after is not None:
            wanted["added"][change.loc] = changerows.row(change)[3] or ""
        elif change.kind == "removed" and change.before is not None:
            wanted["removed"][change.loc] = changerows.row(change)[2] or ""
    packed: set[tuple[str, str]] = set()
    written = 0
    v = entry_sets.c
    for kind, states in wanted.items():
        if len(states) < PACK_MIN:
            continue
        # The versions this snapshot stored (additions) or ended (removals), one at a time.
        column = v.first_snapshot_id if kind == "added" else v.removed_snapshot_id
        ids = list(conn.execute(select(v.id).where(v.target_id == target_id,
                                                   column == snapshot_id)
                                .order_by(v.id)).scalars())
        for set_id in ids:
            rows = read_columns(conn, select(v.data).where(v.id == set_id))
            taken, packs = _gather(changepacks.Version(rows[0][0]), states)
            if packs:
                conn.execute(insert(changes), [
                    {"snapshot_id": snapshot_id, "target_id": target_id, "kind": kind,
                     "loc": loc, "entry_set_id": set_id, "members": members, "pack": value}
                    for loc, members, value, _positional in packs])
                written += sum(members for _loc, members, _value, _positional in packs)
            for loc in taken:
                del states[loc]
            packed.update((kind, loc) for loc in taken)
            if not states:
                break
    rest = [c for c in found if (c.kind, c.loc) not in packed]
    return written + write_changes(conn, target_id, snapshot_id, rest)


def _gather(version: changepacks.Version, states: dict[str, str],
            ) -> tuple[list[str], list[changepacks.Packed]]:
    """The locs of ``states`` that the version holds in that state, and their packs."""
    packer = changepacks.Packer(positional=True)
    taken: list[str] = []
    packs: list[changepacks.Packed] = []
    for position, loc in enumerate(version.locs):
        state = states.get(loc)
        if state is None or state != version.state(position):
            continue
        taken.append(loc)
        full = packer.add(position, loc, None)
        if full is not None:
            packs.append(full)
    packs.extend(packer.finish())
    return taken, packs



def take_out(conn: Connection, target_id: int, removals: Iterable[tuple[int, str]]) -> None:
    """Make a row of its own of each of these removals ((snapshot id, loc)) that a pack holds,
    so that the reason the URL checks found for it can be written there: the pack keeps its
    other members (or goes, if none is left). A removal without a pack is left as it is."""
    c, v = changes.c, entry_sets.c
    by_snapshot: dict[int, set[str]] = {}
    for snapshot_id, loc in removals:
        by_snapshot.setdefault(snapshot_id, set()).add(loc)
    for snapshot_id, locs in by_snapshot.items():
        packs = conn.execute(select(c.id, c.entry_set_id).where(
            c.target_id == target_id, c.snapshot_id == snapshot_id, c.kind == "removed",
            c.members.is_not(None)).order_by(c.id)).all()
        versions: dict[int, changepacks.Version] = {}
        for pack_id, set_id in packs:
            if set_id not in versions:
                rows = read_columns(conn, select(v.data).where(v.id == set_id))
                if not rows:
                    continue
                versions[set_id] = changepacks.Version(rows[0][0])
            version = versions[set_id]
            value = read_sets(conn, select(c.pack).where(c.id == pack_id), whole=False)[0][0]
            members = changepacks.unpack(value)
            out = [m for m in members if version.locs[m[0]] in locs]
            if not out:
                continue
            kept = [m for m in members if version.locs[m[0]] not in locs]
            if kept:
                conn.execute(update(changes).where(c.id == pack_id).values(
                    members=len(kept), pack=changepacks.pack(kept),
                    loc=version.locs[kept[0][0]]))
            else:
                conn.execute(delete(changes).where(c.id == pack_id))
            rows = version.changes(out, None, "removed")
            conn.execute(insert(changes), [
                {"snapshot_id": snapshot_id, "target_id": target_id, "kind": "removed",
                 "loc": loc, "before": before} for loc, before, _after in rows])
            historysize.add(conn, snapshot_id, sum(
                historysize.change_row_bytes(loc, before, None) for loc, before, _a in rows))
            changelocs.note_locs(conn, target_id, [version.locs[m[0]] for m in out])
