"""url health: the state of each listed URL, the URL checks' leases, a removal's reason

``url_states`` keeps the current state of every URL a target lists (one row a URL,
rewritten by each check; a transition also writes a ``health`` change), ``url_checks`` how far
those rows follow the target's snapshots and which replica holds the lease of a batch, and
``changes.reason`` what became of a removed URL (moved, gone, live, unknown). A downgrade drops
them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 18:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("changes", sa.Column("reason", sa.String(16), nullable=True))
    op.create_table(
        "url_states",
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", ondelete="CASCADE",
                                                 name="fk_url_states_target_id_targets"),
                  nullable=False),
        sa.Column("loc", sa.Text(), nullable=False),
        sa.Column("listed", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("state", sa.String(16), nullable=False, server_default=sa.text("'unknown'")),
        sa.Column("rule", sa.String(32), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("final_url", sa.Text(), nullable=True),
        sa.Column("hops", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("since", UTC, nullable=True),
        sa.Column("checked_at", UTC, nullable=True),
        sa.Column("due_at", UTC, nullable=True),
        sa.Column("removed_snapshot_id", Id, nullable=True),
        sa.PrimaryKeyConstraint("target_id", "loc", name="pk_url_states"),
    )
    op.create_index("ix_url_states_target_id_due_at", "url_states", ["target_id", "due_at"])
    op.create_table(
        "url_checks",
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", ondelete="CASCADE",
                                                 name="fk_url_checks_target_id_targets"),
                  nullable=False),
        sa.Column("synced_snapshot_id", Id, nullable=True),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_until", UTC, nullable=True),
        sa.PrimaryKeyConstraint("target_id", name="pk_url_checks"),
    )


def downgrade() -> None:
    op.drop_table("url_checks")
    op.drop_index("ix_url_states_target_id_due_at", table_name="url_states")
    op.drop_table("url_states")
    op.drop_column("changes", "reason")
