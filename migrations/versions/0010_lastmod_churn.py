"""lastmod churn: what the next re-check needs of the last one's lastmods

``targets.lastmod_compared`` and ``targets.lastmod_changed``: of the target's last re-check
that compared lastmods, the entries with a valid lastmod on both sides and those whose lastmod
changed (``lastmod-churn`` needs two re-checks in a row; the churn gauge is restored from them).
``target_documents.lastmods``: a document's entries with a valid lastmod, which a re-check that
finds the document unchanged (304, same body) counts as compared and unchanged. All nullable:
nothing to backfill. A downgrade drops them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 22:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("targets", sa.Column("lastmod_compared", sa.Integer(), nullable=True))
    op.add_column("targets", sa.Column("lastmod_changed", sa.Integer(), nullable=True))
    op.add_column("target_documents", sa.Column("lastmods", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Not batch mode: on SQLite it makes targets again, and dropping the old table would cascade
    # to every snapshot (as in 0005). ALTER TABLE ... DROP COLUMN is in SQLite since 3.35.
    op.drop_column("target_documents", "lastmods")
    op.drop_column("targets", "lastmod_changed")
    op.drop_column("targets", "lastmod_compared")
