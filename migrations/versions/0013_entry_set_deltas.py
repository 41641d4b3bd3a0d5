"""entry-set deltas: a version that lists the same locs as a full one is stored as what differs

A re-check that changed 1% of a document stored the whole new version again (~1 MB for 500
changed lastmods of a 50,000-URL document). Now such a version is stored as a delta against a
full version of the same document (``monitor.codec.entrydelta``): its header and the values of the
positions that differ. ``entry_sets.base_id`` names that full version (NULL for a full one),
so that what keeps a delta readable can be found without reading the values.

A downgrade writes every delta back as the full version it stands for, then drops the column.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from alembic.util import load_python_file

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("entry_sets", sa.Column("base_id", _Id, nullable=True))


def downgrade() -> None:
    # The codecs as this migration knew them, never the live package's (see its __init__.py).
    frozen = load_python_file(Path(__file__).resolve().parents[1] / "frozen", "__init__.py")
    apply = frozen.load("entrydelta").apply

    conn = op.get_bind()
    sets = sa.table("entry_sets", sa.column("id"), sa.column("data"), sa.column("base_id"))
    deltas = conn.execute(sa.select(sets.c.id, sets.c.base_id)
                          .where(sets.c.base_id.is_not(None)).order_by(sets.c.id)).all()
    for set_id, base_id in deltas:
        base = conn.execute(sa.select(sets.c.data).where(sets.c.id == base_id)).scalar()
        delta = conn.execute(sa.select(sets.c.data).where(sets.c.id == set_id)).scalar()
        conn.execute(sets.update().where(sets.c.id == set_id).values(
            data=apply(bytes(base), bytes(delta))))
    # Not batch mode (see 0005): ALTER TABLE ... DROP COLUMN, SQLite 3.35 on.
    op.drop_column("entry_sets", "base_id")
