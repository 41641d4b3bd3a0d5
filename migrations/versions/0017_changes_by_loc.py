"""changes by loc: one URL's whole story reads its changes without scanning the target's

``sitemap-monitor url TARGET LOC`` (and its API and page) lists every change of one URL,
newest first. Without an index on the loc, a target with millions of change rows is read
whole for each such question; with ``(target_id, loc, snapshot_id, id)`` it reads the URL's
rows only, in order.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_changes_target_id_loc", "changes",
                    ["target_id", "loc", "snapshot_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_changes_target_id_loc", table_name="changes")
