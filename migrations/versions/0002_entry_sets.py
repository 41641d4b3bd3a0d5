"""entries -> entry_sets: one compressed row per version of a document's entries

The URL set of every target at every past snapshot is kept exactly: for each document, each
interval between two snapshots where its stored entries changed becomes one version.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:30:00
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_FIELDS = ("lastmod", "changefreq", "priority", "extensions")


def _encode(rows: list[Any]) -> bytes:
    """Version 1 of monitor.codec.entryset's format, frozen here as this migration wrote it."""
    columns = ["\x00".join(r.loc for r in rows)]
    absent = []
    for name in _FIELDS:
        values = [getattr(r, name) for r in rows]
        if any(v is not None for v in values):
            columns.append("\x00".join("\x01" if v is None else v for v in values))
        else:
            columns.append("")
            absent.append(name)
    header: dict[str, Any] = {
        "v": 1, "n": len(rows), "invalid": [i for i, r in enumerate(rows) if not r.valid],
    }
    if absent:
        header["absent"] = absent
    rules = {str(i): r.issues for i, r in enumerate(rows) if r.issues}
    if rules:
        header["rules"] = rules
    text = "\x02".join([json.dumps(header, separators=(",", ":"), ensure_ascii=False),
                         *columns])
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def _decode(blob: bytes) -> list[dict[str, Any]]:
    header_text, *texts = zlib.decompress(blob).decode("utf-8", "surrogatepass").split("\x02")
    header = json.loads(header_text)
    size = header["n"]
    absent = set(header.get("absent") or [])
    locs = texts[0].split("\x00") if size else []
    columns = {
        name: [None] * size if name in absent or not size
        else [None if v == "\x01" else v for v in text.split("\x00")]
        for name, text in zip(_FIELDS, texts[1:], strict=True)
    }
    invalid = set(header["invalid"])
    rules = header.get("rules") or {}
    return [
        {
            "loc": loc,
            **{name: columns[name][i] for name in _FIELDS},
            "valid": i not in invalid,
            "issues": rules.get(str(i)),
        }
        for i, loc in enumerate(locs)
    ]


def upgrade() -> None:
    entry_sets = op.create_table(
        "entry_sets",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("target_id", Id, nullable=False),
        sa.Column("document_url", sa.Text(), nullable=False),
        sa.Column("first_snapshot_id", Id, nullable=False),
        sa.Column("removed_snapshot_id", Id, nullable=True),
        sa.Column("urls", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("invalid", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_entry_sets_target_id_targets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entry_sets")),
    )
    with op.batch_alter_table("entry_sets", schema=None) as batch_op:
        batch_op.create_index(
            "ix_entry_sets_target_id_document_url", ["target_id", "document_url"], unique=False
        )
    _convert(entry_sets)
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_index("ix_entries_target_id_loc")
        batch_op.drop_index("ix_entries_target_id_document_url")
    op.drop_table("entries")


def _convert(entry_sets: sa.Table) -> None:
    """Each document's entry rows -> one version per interval where they did not change."""
    bind = op.get_bind()
    entries = sa.table(
        "entries", *(sa.column(name) for name in (
            "id", "target_id", "document_url", "loc", *_FIELDS, "valid", "issues",
            "first_snapshot_id", "removed_snapshot_id",
        ))
    )
    e = entries.c
    documents = bind.execute(sa.select(e.target_id, e.document_url).distinct()).all()
    for target_id, document_url in documents:
        rows = bind.execute(
            sa.select(entries)
            .where(e.target_id == target_id, e.document_url == document_url)
            .order_by(e.id)
        ).all()
        bounds = sorted(
            {r.first_snapshot_id for r in rows}
            | {r.removed_snapshot_id for r in rows if r.removed_snapshot_id is not None}
        )
        for start, end in zip(bounds, [*bounds[1:], None], strict=True):
            live = [
                r for r in rows
                if r.first_snapshot_id <= start
                and (r.removed_snapshot_id is None or r.removed_snapshot_id > start)
            ]
            if not live:
                continue
            bind.execute(sa.insert(entry_sets).values(
                target_id=target_id,
                document_url=document_url,
                first_snapshot_id=start,
                removed_snapshot_id=end,
                urls=sum(1 for r in live if r.valid),
                invalid=sum(1 for r in live if not r.valid),
                data=_encode(live),
            ))


def downgrade() -> None:
    entries = op.create_table(
        "entries",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("target_id", Id, nullable=False),
        sa.Column("document_url", sa.Text(), nullable=False),
        sa.Column("loc", sa.Text(), nullable=False),
        sa.Column("lastmod", sa.Text(), nullable=True),
        sa.Column("changefreq", sa.Text(), nullable=True),
        sa.Column("priority", sa.Text(), nullable=True),
        sa.Column("extensions", sa.Text(), nullable=True),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("issues", sa.Text(), nullable=True),
        sa.Column("first_snapshot_id", Id, nullable=False),
        sa.Column("removed_snapshot_id", Id, nullable=True),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["targets.id"],
            name=op.f("fk_entries_target_id_targets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entries")),
    )
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_entries_target_id_document_url", ["target_id", "document_url"], unique=False
        )
        batch_op.create_index("ix_entries_target_id_loc", ["target_id", "loc"], unique=False)
    bind = op.get_bind()
    versions = sa.table("entry_sets", *(sa.column(name) for name in (
        "id", "target_id", "document_url", "first_snapshot_id", "removed_snapshot_id", "data",
    )))
    v = versions.c
    # Each version's entries become rows of that version: the URL sets stay exact.
    for row in bind.execute(sa.select(versions).order_by(v.id)).all():
        rows = [
            {**entry, "target_id": row.target_id, "document_url": row.document_url,
             "first_snapshot_id": row.first_snapshot_id,
             "removed_snapshot_id": row.removed_snapshot_id}
            for entry in _decode(row.data)
        ]
        if rows:
            bind.execute(sa.insert(entries), rows)
    with op.batch_alter_table("entry_sets", schema=None) as batch_op:
        batch_op.drop_index("ix_entry_sets_target_id_document_url")
    op.drop_table("entry_sets")
