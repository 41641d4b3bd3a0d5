"""robots files: the versions of the robots.txt of a target's hosts

Each check fetches the robots.txt of the hosts its sitemaps live on, conditionally, and keeps a
row per version: the first fetch, then each change (with the check that found it). The newest
row of a URL is in force and holds the validators of the next fetch. A downgrade drops the
table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 22:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "robots_files",
        sa.Column("id", Id, autoincrement=True),
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", ondelete="CASCADE",
                                                 name="fk_robots_files_target_id_targets"),
                  nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("snapshot_id", Id, nullable=True),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_robots_files"),
    )
    op.create_index("ix_robots_files_target_id_url_id", "robots_files",
                    ["target_id", "url", "id"])


def downgrade() -> None:
    op.drop_index("ix_robots_files_target_id_url_id", table_name="robots_files")
    op.drop_table("robots_files")
