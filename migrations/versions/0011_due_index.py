"""due times claimed in order: an index on ``targets.next_due_at``

Replicas claim the longest-due free targets (``store.daemon.claim_due``): with this index a
claim reads the few due rows in order instead of every target. Every target has a due time
from now on (a new one gets its first when its row is made, a removed one is parked far in the
future): the rows a version before this one had not checked yet are due at once.
A downgrade drops the index.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 00:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("UPDATE targets SET next_due_at = created_at WHERE next_due_at IS NULL")
    op.create_index("ix_targets_next_due_at", "targets", ["next_due_at"])


def downgrade() -> None:
    op.drop_index("ix_targets_next_due_at", "targets")
