"""document counts: a snapshot counts its documents by outcome; a 304 writes no document row

A check wrote one ``documents`` row per document, so an unchanged target grew by a row per
document per check (35-90 MB a year for a 500,000-URL index checked hourly) for a history nothing
reads: only the documents read or failed get a row now, and the snapshot keeps how many
documents had each outcome (``document_counts``, JSON), which the restored
``sitemap_monitor_documents`` gauge reads. Snapshots before this one keep their rows, and the
gauge is restored from those. A downgrade drops the column.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("document_counts", sa.Text(), nullable=False,
                                         server_default=sa.text("'{}'")))


def downgrade() -> None:
    # Not batch mode (see 0005): ALTER TABLE ... DROP COLUMN, SQLite 3.35 on.
    op.drop_column("snapshots", "document_counts")
