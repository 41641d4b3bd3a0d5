"""entry-set format 2: a full version keeps its locs in a deflate stream of their own

``monitor.codec.entryset`` now writes version 2 of the stored value: the locs after the other short
columns, compressed on their own, with a chain of digests of them in the header, so that a
re-read document's locs are compared with the digests and its new version copies the stored
stream. Nothing changes in the schema, and sets of version 1 are read as they are: the upgrade
does nothing.

A downgrade writes every set of version 2 back as version 1, which releases before this one
read: a full version in the format 1 layout (one deflate stream), and a delta's header (whose
first keys are its version's) saying version 1, so that it applies to a full version 1.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from alembic.util import load_python_file

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    # The codecs as this migration knew them, never the live package's (see its __init__.py).
    frozen = load_python_file(Path(__file__).resolve().parents[1] / "frozen", "__init__.py")
    entrydelta, entryset = frozen.load("entrydelta"), frozen.load("entryset")

    conn = op.get_bind()
    sets = sa.table("entry_sets", sa.column("id"), sa.column("data"))
    ids = conn.execute(sa.select(sets.c.id).order_by(sets.c.id)).scalars().all()
    for set_id in ids:  # one at a time: a full version can be megabytes
        data = bytes(conn.execute(sa.select(sets.c.data).where(sets.c.id == set_id)).scalar())
        back = (entrydelta.in_version_1(data) if entrydelta.is_delta(data)
                else entryset.in_version_1(data))
        if back is not None:
            conn.execute(sets.update().where(sets.c.id == set_id).values(data=back))
