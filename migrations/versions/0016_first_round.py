"""url checks: when a target's first complete round of URL checks ended

``url_checks.first_round_at``: set once every URL the target listed had been checked once.
Until then the URL-health alerts tell no count (a count of a half-checked site is wrong and
grows with every round). Nullable: a target already checked before this migration gets it at
its next round that finds no URL unchecked. A downgrade drops it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 02:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("url_checks",
                  sa.Column("first_round_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # Not batch mode: ALTER TABLE ... DROP COLUMN is in SQLite since 3.35 (as in 0010).
    op.drop_column("url_checks", "first_round_at")
