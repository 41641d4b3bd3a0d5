"""IndexNow: the submissions' outbox and the verified key files

Two new tables, empty at first: ``indexnow_submissions`` (written with the snapshots whose
changes they submit, delivered later) and ``indexnow_keys`` (the last fetch of each host's
key file). A downgrade drops them, with whatever was not yet submitted.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 02:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "indexnow_submissions",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("target_name", sa.String(200), nullable=False),
        sa.Column("snapshot_id", _ID, nullable=True),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("url_count", sa.Integer, nullable=False),
        sa.Column("kinds", sa.Text, nullable=False, server_default=sa.text("'{}'")),
        sa.Column("urls", sa.LargeBinary, nullable=False),
        sa.Column("created_at", _UTC, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", _UTC, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_until", _UTC, nullable=True),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("attempted_at", _UTC, nullable=True),
        sa.Column("delivered_at", _UTC, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_indexnow_submissions")),
        sa.UniqueConstraint("idempotency_key",
                            name=op.f("uq_indexnow_submissions_idempotency_key")),
    )
    op.create_index("ix_indexnow_submissions_status_next_attempt_at", "indexnow_submissions",
                    ["status", "next_attempt_at"])
    op.create_index("ix_indexnow_submissions_target_name_id", "indexnow_submissions",
                    ["target_name", "id"])
    op.create_table(
        "indexnow_keys",
        sa.Column("target_name", sa.String(200), nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("key_digest", sa.String(64), nullable=False),
        sa.Column("checked_at", _UTC, nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("target_name", "origin", name=op.f("pk_indexnow_keys")),
    )


def downgrade() -> None:
    op.drop_table("indexnow_keys")
    op.drop_index("ix_indexnow_submissions_target_name_id", table_name="indexnow_submissions")
    op.drop_index("ix_indexnow_submissions_status_next_attempt_at",
                  table_name="indexnow_submissions")
    op.drop_table("indexnow_submissions")
