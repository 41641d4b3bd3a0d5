"""history bytes: each snapshot's count of the bytes its rows take, for retention's max_bytes

``retention.max_bytes`` bounds the bytes a target's history takes. Summing them from the
change rows every hour would read every row; instead each snapshot keeps the count of its own
rows (``snapshots.history_bytes``: its row, its documents, its change rows and robots.txt
versions, each its variable-length values' lengths and 48 bytes, a plain change row's loc four
times and 48 bytes three; monitor.store.historysize), written in its transaction from now on
and filled here from the rows already stored (one pass, by the snapshot indexes).

From this revision on a check's many additions and removals are stored as packs of positions
in entry-set versions (``changes`` rows of kind ``added`` or ``removed`` with ``members`` set,
monitor.store.movepacks). The rows stored before stay as they are. A downgrade writes each such
pack back as rows of their own (their locs back in ``change_locs``): nothing is lost.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 08:40:00
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from alembic.util import load_python_file

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROW = 48  # as monitor.store.historysize.ROW was when this was written


def _length(column: str) -> str:
    return f"COALESCE(LENGTH({column}), 0)"


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("history_bytes", sa.BigInteger, nullable=False,
                                         server_default=sa.text("0")))
    documents = " + ".join(_length(c) for c in ("url", "parent_url", "etag", "last_modified",
                                                "sha256", "error"))
    changes = (f"{_length('loc')} + CASE WHEN members IS NULL THEN 3 * {_length('loc')} "
               f"+ {2 * _ROW} ELSE 0 END + {_length('before')} + {_length('after')} "
               f"+ {_length('pack')}")
    own = " + ".join(_length(c) for c in ("issues", "issue_counts", "document_counts",
                                          "error_message"))
    op.execute(
        f"UPDATE snapshots SET history_bytes = {_ROW} + {own}"
        f" + COALESCE((SELECT SUM({_ROW} + {documents}) FROM documents"
        f" WHERE documents.snapshot_id = snapshots.id), 0)"
        f" + COALESCE((SELECT SUM({_ROW} + {changes}) FROM changes"
        f" WHERE changes.snapshot_id = snapshots.id), 0)"
        f" + COALESCE((SELECT SUM({_ROW} + {_length('text')} + {_length('url')})"
        f" FROM robots_files WHERE robots_files.snapshot_id = snapshots.id), 0)")


def downgrade() -> None:
    # The codecs as this migration knew them, never the live package's (see its __init__.py).
    frozen = load_python_file(Path(__file__).resolve().parents[1] / "frozen", "__init__.py")
    changepacks = frozen.load("changepacks")
    version_of, unpack = changepacks.Version, changepacks.unpack

    conn = op.get_bind()
    changes = sa.table("changes", sa.column("id"), sa.column("snapshot_id"),
                       sa.column("target_id"), sa.column("kind"), sa.column("loc"),
                       sa.column("before"), sa.column("after"), sa.column("entry_set_id"),
                       sa.column("pack"), sa.column("members"))
    entry_sets = sa.table("entry_sets", sa.column("id"), sa.column("data"))
    change_locs = sa.table("change_locs", sa.column("target_id"), sa.column("loc"))
    packs = conn.execute(sa.select(changes.c.id, changes.c.snapshot_id, changes.c.target_id,
                                   changes.c.kind, changes.c.entry_set_id)
                         .where(changes.c.members.is_not(None),
                                changes.c.kind.in_(("added", "removed")))
                         .order_by(changes.c.id)).all()
    for pack_id, snapshot_id, target_id, kind, set_id in packs:
        data = conn.execute(sa.select(changes.c.pack).where(changes.c.id == pack_id)).scalar()
        version = version_of(bytes(conn.execute(
            sa.select(entry_sets.c.data).where(entry_sets.c.id == set_id)).scalar()))
        rows = []
        for position, _was in unpack(bytes(data)):
            state = version.state(position)
            rows.append({"snapshot_id": snapshot_id, "target_id": target_id, "kind": kind,
                         "loc": version.locs[position],
                         "before": state if kind == "removed" else None,
                         "after": state if kind == "added" else None})
        conn.execute(changes.insert(), rows)
        held = set(conn.execute(sa.select(change_locs.c.loc).where(
            change_locs.c.target_id == target_id,
            change_locs.c.loc.in_([r["loc"] for r in rows]))).scalars())
        new = sorted({r["loc"] for r in rows} - held)
        if new:
            conn.execute(change_locs.insert(), [{"target_id": target_id, "loc": loc}
                                                for loc in new])
        conn.execute(changes.delete().where(changes.c.id == pack_id))
    # Not batch mode (see 0005): ALTER TABLE ... DROP COLUMN, SQLite 3.35 on.
    op.drop_column("snapshots", "history_bytes")
