"""url checks: a random check order (for the estimate) and each URL's validators

``url_states.turn``: a URL's place in its target's check order, a keyed hash of its loc
(``monitor.sampling``) under ``url_checks.sample_key``, drawn once per target: the URLs checked
first are then a random sample of the listing, and the share of each state among them an
estimate of the whole. The rows already stored get their place at their target's next round
(the key is drawn then; a hash is computed in Python, not SQL). The index the next URLs are
read by becomes ``(target_id, due_at, turn)``, so a round reads them in that order.

``url_states.etag`` and ``last_modified``: the validators of a URL's last answer, sent back
with its re-check (``If-None-Match`` / ``If-Modified-Since``); a 304 keeps its state.

A downgrade drops the columns and puts the previous index back.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("url_states", sa.Column("turn", sa.BigInteger(), nullable=True))
    op.add_column("url_states", sa.Column("etag", sa.Text(), nullable=True))
    op.add_column("url_states", sa.Column("last_modified", sa.Text(), nullable=True))
    op.add_column("url_checks", sa.Column("sample_key", sa.String(32), nullable=True))
    op.drop_index("ix_url_states_target_id_due_at", table_name="url_states")
    op.create_index("ix_url_states_target_id_due_at_turn", "url_states",
                    ["target_id", "due_at", "turn"])


def downgrade() -> None:
    # Not batch mode: ALTER TABLE ... DROP COLUMN is in SQLite since 3.35 (as in 0010).
    op.drop_index("ix_url_states_target_id_due_at_turn", table_name="url_states")
    op.create_index("ix_url_states_target_id_due_at", "url_states", ["target_id", "due_at"])
    op.drop_column("url_checks", "sample_key")
    op.drop_column("url_states", "last_modified")
    op.drop_column("url_states", "etag")
    op.drop_column("url_states", "turn")
