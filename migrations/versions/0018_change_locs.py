"""change locs: a search of the changes by a part of the loc reads each loc once

``changes TARGET --loc TEXT`` (the API's ``q=``, the changes page's search) read the target's
change rows newest first until a page was full: millions of rows when few locs hold the text.
``change_locs`` holds each loc a target's change rows are about, once: the search reads it
(a row per URL, not per change), then the changes of the locs it found by the
``(target_id, loc)`` index. Filled here from the rows already stored (one ``SELECT DISTINCT``:
seconds for millions of rows), then by each transaction that writes change rows.

And a partial index of the removals by reason, which a listing sorted or filtered by reason
reads in order instead of every removal.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 05:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "change_locs",
        sa.Column("target_id", _ID, nullable=False),
        sa.Column("loc", sa.Text, nullable=False),
        sa.ForeignKeyConstraint(["target_id"], ["targets.id"], ondelete="CASCADE",
                                name=op.f("fk_change_locs_target_id_targets")),
        sa.PrimaryKeyConstraint("target_id", "loc", name=op.f("pk_change_locs")),
    )
    # A pack's members are found through its entry-set version, not by this table.
    op.execute("INSERT INTO change_locs (target_id, loc) "
               "SELECT DISTINCT target_id, loc FROM changes WHERE members IS NULL")
    reason = sa.text("reason IS NOT NULL")
    op.create_index("ix_changes_target_id_reason", "changes",
                    ["target_id", "reason", "snapshot_id", "id"],
                    sqlite_where=reason, postgresql_where=reason)


def downgrade() -> None:
    op.drop_index("ix_changes_target_id_reason", table_name="changes")
    op.drop_table("change_locs")
