"""change rules: the rule id a change is about, so the changes of one rule are a listing

The pages filter a target's changes by rule: a URL that became ``url-not-found`` (a ``health``
change), an entry that became invalid by ``loc-not-absolute`` or ``loc-too-long`` (an
``invalid`` change). ``changes.rule`` holds it (NULL for the other changes), and a partial index
``(target_id, rule, snapshot_id, id) WHERE rule IS NOT NULL`` reads one rule's changes in the
listing's order without a row of the other changes (so it costs nothing on a big re-check's
500,000 ``removed`` rows). Changes recorded before are filled here: a health change by the
state it went to (a redirect loop recorded before is ``url-redirect``: its change did not say
it was a loop), an invalid one by its loc. A downgrade drops the column and the index.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 21:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The URL states and their rule ids, as of this revision (a migration does not import the
# package's tables, which move on).
_STATE_RULES = {
    "redirect": "url-redirect", "not-found": "url-not-found", "gone": "url-gone",
    "forbidden": "url-forbidden", "client-error": "url-client-error",
    "server-error": "url-server-error", "noindex": "url-noindex",
    "canonicalized": "url-canonicalized", "disallowed": "url-disallowed",
}
_WHERE = sa.text("rule IS NOT NULL")


def upgrade() -> None:
    op.add_column("changes", sa.Column("rule", sa.String(40), nullable=True))
    changes = sa.table("changes", sa.column("kind"), sa.column("loc"), sa.column("after"),
                       sa.column("rule"))
    for state, rule in _STATE_RULES.items():
        # health changes are written as compact JSON that starts with the state
        op.execute(changes.update().where(
            changes.c.kind == "health",
            changes.c.after.like(f'{{"state":"{state}",%')).values(rule=rule))
    op.execute(changes.update().where(changes.c.kind == "invalid").values(
        rule=sa.case((sa.func.length(changes.c.loc) >= 2048, "loc-too-long"),
                     else_="loc-not-absolute")))
    op.create_index("ix_changes_target_id_rule", "changes",
                    ["target_id", "rule", "snapshot_id", "id"],
                    sqlite_where=_WHERE, postgresql_where=_WHERE)


def downgrade() -> None:
    op.drop_index("ix_changes_target_id_rule", table_name="changes")
    # Not batch mode (see 0005): ALTER TABLE ... DROP COLUMN, SQLite 3.35 on.
    op.drop_column("changes", "rule")
