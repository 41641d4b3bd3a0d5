"""host not-found pages: each host's answer to a path that cannot exist, for soft 404s

The URL checks ask each host, once a day, for a random path; when it answers 2xx the
fingerprint of that page's main content is kept here, and a listed page whose content matches
it is a soft 404. One row per origin, shared by every target on it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 08:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_not_found",
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("probed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("probe_url", sa.Text, nullable=False),
        sa.Column("final_url", sa.Text, nullable=True),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("fingerprint", sa.LargeBinary, nullable=True),
        sa.PrimaryKeyConstraint("origin", name=op.f("pk_host_not_found")),
    )


def downgrade() -> None:
    op.drop_table("host_not_found")
