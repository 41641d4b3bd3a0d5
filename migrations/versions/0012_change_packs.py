"""change packs: a re-check's ``changed`` changes as packs of positions in the new entry set

A check that changes every lastmod of a 500,000-URL index made 500,000 ``changes`` rows (loc, the
state before and after as JSON), ~320 bytes and half the check's time each. Now such changes are
packed (``monitor.codec.changepacks``): one row per up to 5,000 of them, ``kind`` ``changed``,
``loc`` the first member's, ``before``/``after`` NULL, and three new columns: ``entry_set_id`` (the
entry-set version the check stored for the document, which holds each member's loc and state after),
``members`` (how many changes the row stands for), ``pack`` (each member's position in that
version and its state before) and ``before_set_id`` (the version that one replaced, which holds
the states before at the same positions when a pack does not). Rows stored before are left as
they are: a listing reads both.

A downgrade writes each pack's changes back as rows of their own (nothing is lost), then drops
the columns.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 04:30:00
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from alembic.util import load_python_file

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("changes", sa.Column("entry_set_id", _Id, nullable=True))
    op.add_column("changes", sa.Column("before_set_id", _Id, nullable=True))
    op.add_column("changes", sa.Column("members", sa.Integer, nullable=True))
    op.add_column("changes", sa.Column("pack", sa.LargeBinary, nullable=True))


def downgrade() -> None:
    # The codecs as this migration knew them, never the live package's (see its __init__.py).
    frozen = load_python_file(Path(__file__).resolve().parents[1] / "frozen", "__init__.py")
    changepacks = frozen.load("changepacks")
    Version, unpack = changepacks.Version, changepacks.unpack

    conn = op.get_bind()
    changes = sa.table("changes", sa.column("id"), sa.column("snapshot_id"),
                       sa.column("target_id"), sa.column("kind"), sa.column("loc"),
                       sa.column("before"), sa.column("after"), sa.column("entry_set_id"),
                       sa.column("before_set_id"), sa.column("pack"))
    entry_sets = sa.table("entry_sets", sa.column("id"), sa.column("data"))
    packs = conn.execute(sa.select(changes.c.id, changes.c.snapshot_id, changes.c.target_id,
                                   changes.c.entry_set_id, changes.c.before_set_id)
                         .where(changes.c.pack.is_not(None)).order_by(changes.c.id)).all()

    def version(set_id: int | None) -> Version | None:
        if set_id is None:
            return None
        return Version(bytes(conn.execute(
            sa.select(entry_sets.c.data).where(entry_sets.c.id == set_id)).scalar()))

    for pack_id, snapshot_id, target_id, set_id, before_id in packs:
        data = conn.execute(sa.select(changes.c.pack).where(changes.c.id == pack_id)).scalar()
        after = version(set_id)
        assert after is not None
        conn.execute(changes.insert(), [
            {"snapshot_id": snapshot_id, "target_id": target_id, "kind": "changed",
             "loc": loc, "before": was, "after": now}
            for loc, was, now in after.changes(unpack(bytes(data)), version(before_id))])
        conn.execute(changes.delete().where(changes.c.id == pack_id))
    # Not batch mode (see 0005): ALTER TABLE ... DROP COLUMN, SQLite 3.35 on.
    op.drop_column("changes", "pack")
    op.drop_column("changes", "members")
    op.drop_column("changes", "before_set_id")
    op.drop_column("changes", "entry_set_id")
