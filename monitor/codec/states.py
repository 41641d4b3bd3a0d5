"""What is stored of a target, as the check and the store hand it to each other (pure
values): each document's state, the target's, and an entry set's current version as stored.

The store reads them (``monitor.store.checkreads``) and writes them
(``monitor.store.checkwriter``); the check and its tally take them as plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.codec import entrydelta

__all__ = ["DocumentState", "StoredSet", "TargetState"]


@dataclass(slots=True)
class DocumentState:
    """The stored state of one document of a target (conditional GET, skipping, carrying)."""

    url: str
    parent_url: str | None = None
    kind: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    sha256: str | None = None
    urls: int = 0
    invalid: int = 0
    children: list[str] = field(default_factory=list)
    issues: list[dict[str, Any]] = field(default_factory=list)
    issue_counts: dict[str, int] = field(default_factory=dict)
    lastmods: int | None = None  # entries with a valid lastmod (None: stored before 0009)


@dataclass(slots=True)
class TargetState:
    """What a check needs to know of the past: the target's id and its current documents."""

    target_id: int
    documents: dict[str, DocumentState]
    # (compared, changed) lastmods of the last re-check that compared any, or None
    lastmods: tuple[int, int] | None = None
    last_snapshot_id: int | None = None  # the newest snapshot when the state was read


@dataclass(frozen=True, slots=True)
class StoredSet:
    """The current version of one document's entries: its row id and its value, whole, or
    as it is stored when read with ``whole=False``: then perhaps a delta, with its base's."""

    id: int
    document_url: str
    data: bytes
    # ``data`` is a delta (monitor.codec.entrydelta) against the full version whose value this is;
    # None: ``data`` is whole (and the version is its own base)
    base_data: bytes | None = None

    @property
    def base_id(self) -> int:
        """The row id of the full version this one is, or is a delta against."""
        return self.id if self.base_data is None else entrydelta.base_of(self.data)

    def whole(self) -> bytes:
        """The version's whole value."""
        return self.data if self.base_data is None else entrydelta.apply(self.base_data,
                                                                         self.data)
