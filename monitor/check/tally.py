"""What one check has found, folded from the frozen outcomes of its stages (pure).

Each stage of a check takes its inputs and returns what it found as a frozen value: a
document's ``DocumentOutcome`` (its result row, its issues, its new state, its entries'
changes), a ``Touched`` document whose previous state stands, the ``Gone`` entry sets of
documents no longer listed, the ``Marked`` entries of a target-wide verdict, the robots.txt
``RobotsFound``, the ``Moves`` settled at the end. ``Tally.take`` is the one function that folds
them, in the order they come, into the check's totals: it counts the issues, keeps the new
states, holds back removals and additions (a URL that moves between two documents is
neither) and keeps the first changes of each kind for the output and the alerts. The stages
read the tally; nothing else writes it. It touches no network and no database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from monitor.check.targetwide import Moves
from monitor.codec.states import DocumentState
from monitor.core.model import (
    Change,
    CheckOutcome,
    DocumentResult,
    EntryState,
    Issue,
)
from monitor.core.rules import RuleId

__all__ = [
    "INDEX_KINDS",
    "Admitted",
    "DocumentOutcome",
    "Examples",
    "Found",
    "Gone",
    "Marked",
    "Outcome",
    "Recorded",
    "RobotsFound",
    "Tally",
    "Touched",
    "Wire",
    "document_state",
    "failure",
    "one_issue",
    "touched",
]

INDEX_KINDS = ("sitemapindex", "robots")


@dataclass(frozen=True, slots=True)
class Found:
    """Issues a step found, in order; ``counted`` False: a document's own issues, counted
    with its stored state (they only join the output's first issues here)."""

    issues: Sequence[Issue]
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Wire:
    """Bytes read on the wire for the check (a document's answer, a robots.txt)."""

    bytes: int


@dataclass(frozen=True, slots=True)
class Admitted:
    """A document the walk will read: its row takes its place in the listed order."""

    result: DocumentResult


@dataclass(frozen=True, slots=True)
class Touched:
    """A document whose previous state stands (304, or the same bytes); ``state`` its stored
    state with the new validators the server sent, None when they did not move."""

    url: str
    state: DocumentState | None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A sitemap's new entry set as recorded: what it adds to the counts and the changes."""

    url: str
    lastmods_compared: int
    lastmods_changed: int
    balance: int  # hreflang balance (``monitor.read.alternates.balance``)
    # a baseline's changes, known by their counts and the first few (else None)
    counted: tuple[Sequence[Change], Mapping[str, int]] | None = None
    held: Sequence[Change] = ()  # removals and additions, settled at the end
    more: tuple[Sequence[Change], Mapping[str, int]] | None = None  # the change rows'


@dataclass(frozen=True, slots=True)
class Gone:
    """Entry sets of documents that no longer list URLs: closed, their locs held as removed."""

    closed: Sequence[int]
    removed: Mapping[str, EntryState]


@dataclass(frozen=True, slots=True)
class DocumentOutcome:
    """What one document gave the check, in its listed turn (``monitor.check.turn``)."""

    result: DocumentResult
    found: Sequence[Found] = ()  # in the order they were found
    state: DocumentState | None = None  # its new stored state, when it was read
    failed: bool = False  # not read: its previous state stands, with its subtree
    root_failure: tuple[str, str] | None = None  # (kind, message): the check failed
    lastmods_compared: int = 0  # an unchanged document's entries, compared and unchanged
    recorded: Recorded | None = None  # a sitemap's entries
    fetched_bytes: int = 0  # read on its behalf after the fetch (robots.txt of its hosts)


@dataclass(frozen=True, slots=True)
class Marked:
    """A document's entries given a target-wide verdict anew: its new state and the first
    issues of that verdict (its own, counted with the state)."""

    url: str
    state: DocumentState
    issues: Sequence[Issue]


@dataclass(frozen=True, slots=True)
class RobotsFound:
    """The robots.txt watch of the target's hosts: its issues, each host's row of the output
    and the bytes it read."""

    issues: Sequence[Issue]
    robots: Sequence[dict[str, Any]]
    fetched_bytes: int


Outcome = Found | Admitted | Touched | DocumentOutcome | Gone | Marked | RobotsFound | Moves | Wire


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

    def add_counted(self, first: Sequence[Change], counts: Mapping[str, int]) -> None:
        """Changes known by their counts and the first few of them (a baseline's)."""
        self.counts.update(counts)
        self.kept.extend(first[: max(0, self.limit - len(self.kept))])


@dataclass(slots=True)
class Tally:
    """The findings of one check, folded by ``take`` from its stages' outcomes."""

    limit: int  # changes and issues kept as examples
    documents: dict[str, DocumentResult] = field(default_factory=dict)  # in listed order
    issues: list[Issue] = field(default_factory=list)  # the first ``limit``, for the output
    issue_counts: Counter[str] = field(default_factory=Counter)
    check_issues: list[Issue] = field(default_factory=list)  # counted here, not a document's
    robots: list[dict[str, Any]] = field(default_factory=list)
    fetched_bytes: int = 0
    # the root could not be read: the check failed, with this reason (kind, message)
    failure: tuple[str, str] | None = None
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

    def take(self, outcome: Outcome) -> None:
        """Fold one stage's outcome into the check's totals (the only writer of the tally)."""
        match outcome:
            case Found():
                self._found(outcome)
            case DocumentOutcome():
                self._document(outcome)
            case Admitted():  # its place in the listed order, its row filled in its turn
                self.documents[outcome.result.url] = outcome.result
            case Touched():
                if outcome.state is None:
                    self.untouched.append(outcome.url)
                else:
                    self.read[outcome.url] = outcome.state
            case Gone():
                self._gone(outcome)
            case Marked():
                if outcome.url in self.untouched:  # a new version of its entries now
                    self.untouched.remove(outcome.url)
                self.read[outcome.url] = outcome.state
                self._found(Found(outcome.issues, counted=False))
            case RobotsFound():
                self._found(Found(outcome.issues))
                self.robots.extend(outcome.robots)
                self.fetched_bytes += outcome.fetched_bytes
            case Moves():
                self.lastmods_compared += outcome.compared
                self.lastmods_changed += outcome.changed
                for change in outcome.changes:
                    self.changes.add(change)
            case Wire():
                self.fetched_bytes += outcome.bytes

    @property
    def outcome(self) -> CheckOutcome:
        """``failed`` when the root could not be read, else ``ok``."""
        return "ok" if self.failure is None else "failed"

    def room(self) -> int:
        """How many more issues the output keeps."""
        return max(0, self.limit - len(self.issues))

    def _found(self, found: Found) -> None:
        for issue in found.issues:
            if found.counted:
                self.issue_counts[issue.rule] += 1
                self.check_issues.append(issue)
            if len(self.issues) < self.limit:
                self.issues.append(issue)

    def _document(self, outcome: DocumentOutcome) -> None:
        doc = outcome.result
        self.documents[doc.url] = doc
        self.fetched_bytes += outcome.fetched_bytes
        for found in outcome.found:
            self._found(found)
        if outcome.failed:
            self.failed.add(doc.url)
        if outcome.root_failure is not None:
            self.failure = outcome.root_failure
        if outcome.state is not None:
            self.read[doc.url] = outcome.state
        self.lastmods_compared += outcome.lastmods_compared
        if outcome.recorded is not None:
            self._recorded(outcome.recorded)

    def _gone(self, gone: Gone) -> None:
        self.closed.extend(gone.closed)
        for loc, state in gone.removed.items():
            self.pending_removed.setdefault(loc, state)

    def _recorded(self, recorded: Recorded) -> None:
        self.written.append(recorded.url)
        self.lastmods_compared += recorded.lastmods_compared
        self.lastmods_changed += recorded.lastmods_changed
        self.balances[recorded.url] = recorded.balance
        if recorded.counted is not None:
            self.changes.add_counted(*recorded.counted)
        for change in recorded.held:
            if change.after is None:
                assert change.before is not None
                self.pending_removed[change.loc] = change.before
            else:
                self.pending_added[change.loc] = change.after
        if recorded.more is not None:
            self.changes.add_counted(*recorded.more)


def failure(doc: DocumentResult, kind: str, message: str, status: int | None, *, root: bool,
            found: Sequence[Found] = ()) -> DocumentOutcome:
    """A document that could not be read: the whole check's failure when it is the root,
    else ``child-fetch-failed`` of its parent."""
    result = replace(doc, outcome="failed", error=message, http_status=status or doc.http_status)
    if root:
        return DocumentOutcome(result, found, failed=True, root_failure=(kind, message))
    child = Issue(RuleId.CHILD_FETCH_FAILED, message, loc=doc.url, document=doc.parent)
    return DocumentOutcome(result, (*found, Found((child,))), failed=True)


def one_issue(rule: RuleId, message: str, document: str | None, loc: str | None = None,
              ) -> Found:
    """One issue of the check, counted (not a document's own)."""
    return Found((Issue(rule, message, loc=loc, document=document),))


def touched(previous: DocumentState, doc: DocumentResult) -> Touched:
    """A document whose previous state stands: new validators are kept if the server sent
    some."""
    if (doc.etag, doc.last_modified) == (previous.etag, previous.last_modified):
        return Touched(previous.url, None)
    return Touched(previous.url, replace(previous, etag=doc.etag,
                                         last_modified=doc.last_modified))


def document_state(
    url: str, doc: DocumentResult, kind: str, *, children: list[str] | None = None,
    issues: list[dict[str, Any]] | None = None, counts: Mapping[str, int] | None = None,
    lastmods: int | None = None,
) -> DocumentState:
    """A document's new stored state from its result row."""
    return DocumentState(
        url=url, parent_url=doc.parent, kind=kind, etag=doc.etag,
        last_modified=doc.last_modified, sha256=doc.sha256, urls=doc.urls,
        invalid=doc.invalid, children=children or [], issues=issues or [],
        issue_counts=dict(counts or {}), lastmods=lastmods,
    )
