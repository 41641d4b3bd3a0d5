"""history counts: a target's snapshot and change counts kept, changes found by kind

``/api/v1/targets`` counted every snapshot and change row of every target at each call (1.4-2.3
s at 2.5 M change rows): the counts are now columns of ``targets``, moved by the
snapshot's own transaction and filled here once from the rows. The changes are indexed by
``(target_id, snapshot_id, id)`` and ``(target_id, kind, snapshot_id, id)`` instead of
``(target_id, id)``: a listing since a time, or of one kind, reads only the rows it lists.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for column in ("snapshot_count", "change_count"):
        op.add_column("targets", sa.Column(column, sa.BigInteger(), nullable=False,
                                           server_default=sa.text("0")))
    op.execute("UPDATE targets SET "
               "snapshot_count = (SELECT count(*) FROM snapshots "
               "WHERE snapshots.target_id = targets.id), "
               "change_count = (SELECT count(*) FROM changes "
               "WHERE changes.target_id = targets.id)")
    # The changes of a target in the order they were recorded, and of one kind: what
    # ix_changes_target_id_id gave, and the ranges by snapshot that it could not.
    op.create_index("ix_changes_target_id_snapshot_id", "changes",
                    ["target_id", "snapshot_id", "id"])
    op.create_index("ix_changes_target_id_kind", "changes",
                    ["target_id", "kind", "snapshot_id", "id"])
    op.drop_index("ix_changes_target_id_id", "changes")


def downgrade() -> None:
    op.create_index("ix_changes_target_id_id", "changes", ["target_id", "id"])
    op.drop_index("ix_changes_target_id_kind", "changes")
    op.drop_index("ix_changes_target_id_snapshot_id", "changes")
    # Not batch mode: on SQLite it makes targets again, and dropping the old table would cascade
    # to every snapshot. ALTER TABLE ... DROP COLUMN is in SQLite since 3.35.
    op.drop_column("targets", "change_count")
    op.drop_column("targets", "snapshot_count")
