"""rules v2: every stored document is read again at its next check

Only an unusable loc makes an entry invalid now, an empty optional element is an absent one,
a relative index child is loc-not-absolute and robots.txt is read as Google reads it. The
stored verdicts of a document are those of the old rules, and a document that
comes back 304 or with the same bytes is not read again: forgetting its validators (ETag,
Last-Modified, SHA-256) makes the next check fetch and read it again, so its counts and issues
follow the new rules (a robots.txt with a `Site-map:` line finds its sitemaps then). That
check's diff ignores what only the rules changed (monitor.read.digest.diff_stored), so the upgrade
raises no flood of changes. Nothing is deleted; a downgrade has nothing to undo.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    documents = sa.table(
        "target_documents", sa.column("etag", sa.Text), sa.column("last_modified", sa.Text),
        sa.column("sha256", sa.String),
    )
    op.execute(documents.update().values(etag=None, last_modified=None, sha256=None))


def downgrade() -> None:
    pass
