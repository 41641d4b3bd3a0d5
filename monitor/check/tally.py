"""What one check has found so far, document by document: the pure part of a check.

The walk hands each document's outcome here in its listed order; ``Tally`` counts its issues,
keeps its new state, holds back its removals and additions (a URL that moves between two
documents is neither) and the first changes of each kind for the output and the alerts. It
touches no network and no database: the check reads and writes around it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from monitor.model import (
    Change,
    CheckOutcome,
    DocumentResult,
    EntryState,
    Issue,
)
from monitor.rules import RuleId
from monitor.store.checkwriter import DocumentState

__all__ = ["INDEX_KINDS", "Examples", "Tally", "document_state"]

INDEX_KINDS = ("sitemapindex", "robots")


@dataclass(slots=True)
class Examples:
    """Counts of each change kind and the first changes, for output and alerts."""

    limit: int
    counts: Counter[str] = field(default_factory=Counter)
    kept: list[Change] = field(default_factory=list)
    removed_invalid: int = 0  # of counts["removed"]: entries that were invalid

    def add(self, change: Change) -> None:
        self.counts[change.kind] += 1
        if change.kind == "removed" and change.before is not None and not change.before.valid:
            self.removed_invalid += 1
        if len(self.kept) < self.limit:
            self.kept.append(change)

    def add_counted(self, first: list[Change], counts: dict[str, int]) -> None:
        """Changes known by their counts and the first few of them (a baseline's)."""
        self.counts.update(counts)
        self.kept.extend(first[: max(0, self.limit - len(self.kept))])


@dataclass(slots=True)
class Tally:
    """The findings of one check while it walks the target's documents."""

    limit: int  # changes and issues kept as examples
    documents: list[DocumentResult] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)  # the first ``limit``, for the output
    issue_counts: Counter[str] = field(default_factory=Counter)
    check_issues: list[Issue] = field(default_factory=list)  # counted here, not a document's
    robots: list[dict[str, Any]] = field(default_factory=list)
    fetched_bytes: int = 0
    # the root could not be read: the check failed, with this reason
    outcome: CheckOutcome = "ok"
    error_kind: str | None = None
    error_message: str | None = None
    read: dict[str, DocumentState] = field(default_factory=dict)  # read completely
    untouched: list[str] = field(default_factory=list)  # 304 or same hash: previous stands
    failed: set[str] = field(default_factory=set)  # previous state stands, with its subtree
    # Held back to the end of the walk (re-checks only), to tell moves from removals
    pending_removed: dict[str, EntryState] = field(default_factory=dict)
    pending_added: dict[str, EntryState] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)  # entry sets of documents gone
    balances: dict[str, int] = field(default_factory=dict)  # hreflang balance per document
    written: list[str] = field(default_factory=list)  # documents whose entries were digested
    # entries listed before and now with a valid lastmod on both sides, and those whose
    # lastmod changed (an unchanged document's count as unchanged)
    lastmods_compared: int = 0
    lastmods_changed: int = 0
    changes: Examples = field(init=False)

    def __post_init__(self) -> None:
        self.changes = Examples(self.limit)

    def issue(self, rule: RuleId, message: str, document: str | None,
              loc: str | None = None) -> None:
        self.found(Issue(rule, message, loc=loc, document=document))

    def found(self, issue: Issue, *, count: bool = True) -> None:
        """An issue of the check; ``count`` False: a document's own, counted with its state."""
        if count:
            self.issue_counts[issue.rule] += 1
            self.check_issues.append(issue)
        if len(self.issues) < self.limit:
            self.issues.append(issue)

    def fail(self, doc: DocumentResult, kind: str, message: str, status: int | None, *,
             root: bool) -> None:
        """A document that could not be read: the whole check's failure when it is the root."""
        doc.outcome, doc.error, doc.http_status = "failed", message, status or doc.http_status
        self.failed.add(doc.url)
        if root:
            self.outcome, self.error_kind, self.error_message = "failed", kind, message
        else:
            self.issue("child-fetch-failed", message, doc.parent, loc=doc.url)

    def touch(self, previous: DocumentState, doc: DocumentResult) -> None:
        """Keep a document's previous state; store new validators if the server sent some."""
        if (doc.etag, doc.last_modified) == (previous.etag, previous.last_modified):
            self.untouched.append(previous.url)
        else:
            self.read[previous.url] = replace(previous, etag=doc.etag,
                                              last_modified=doc.last_modified)

    def hold(self, change: Change) -> None:
        """A removal or addition of a re-check, settled at the end against the others."""
        if change.after is None:
            assert change.before is not None
            self.pending_removed[change.loc] = change.before
        else:
            self.pending_added[change.loc] = change.after


def document_state(
    url: str, doc: DocumentResult, kind: str, *, children: list[str] | None = None,
    issues: list[dict[str, Any]] | None = None, counts: Counter[str] | None = None,
    lastmods: int | None = None,
) -> DocumentState:
    """A document's new stored state from its result row."""
    return DocumentState(
        url=url, parent_url=doc.parent, kind=kind, etag=doc.etag,
        last_modified=doc.last_modified, sha256=doc.sha256, urls=doc.urls,
        invalid=doc.invalid, children=children or [], issues=issues or [],
        issue_counts=dict(counts or {}), lastmods=lastmods,
    )

