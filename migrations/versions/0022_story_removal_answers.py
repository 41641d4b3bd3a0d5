"""removal answers: what a dropped URL answered, and its last state while listed

``removal_answers`` keeps, for each removal the URL checks looked at, the answer of that check
(a moved URL's final URL, a gone URL's 404) and the last state the URL's checks found while it
was listed: its ``url_states`` row is deleted once its removal has a reason, and its story would
otherwise forget both. Removals triaged before this migration have none. A downgrade drops it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "removal_answers",
        sa.Column("target_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=False),
        sa.Column("snapshot_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=False),
        sa.Column("loc", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("last", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["target_id"], ["targets.id"], ondelete="CASCADE",
                                name=op.f("fk_removal_answers_target_id_targets")),
        sa.ForeignKeyConstraint(["snapshot_id"], ["snapshots.id"], ondelete="CASCADE",
                                name=op.f("fk_removal_answers_snapshot_id_snapshots")),
        sa.PrimaryKeyConstraint("target_id", "snapshot_id", "loc",
                                name=op.f("pk_removal_answers")),
    )
    op.create_index("ix_removal_answers_target_id_loc", "removal_answers",
                    ["target_id", "loc", "snapshot_id"])


def downgrade() -> None:
    op.drop_index("ix_removal_answers_target_id_loc", table_name="removal_answers")
    op.drop_table("removal_answers")
