"""issue listings: the issues of every snapshot can be listed without the documents

A snapshot keeps the issues found by the check itself and its indexes' own issues
(``snapshots.issues``, JSON); a document's entry set keeps the document's parse issues and the
locs of its duplicates with its entries (codec.entryset). Sets stored before carry neither, so
the validators of every document are forgotten, as 0003 did: the next check reads everything
again and writes a new entry set only where the document has such issues. Its diff is empty
for documents whose entries did not change. A downgrade drops the column.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("issues", sa.Text(), nullable=False,
                                         server_default=sa.text("'[]'")))
    documents = sa.table(
        "target_documents", sa.column("etag", sa.Text), sa.column("last_modified", sa.Text),
        sa.column("sha256", sa.String),
    )
    op.execute(documents.update().values(etag=None, last_modified=None, sha256=None))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("issues")
