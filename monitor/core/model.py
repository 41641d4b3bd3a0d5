"""Value types shared by the stages: what flows from fetch to alerts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from monitor.core.rules import TABLE, RuleId, Severity

__all__ = ["RuleId", "Severity"]  # re-exported: the value types of a rule, beside the rest

ChangeKind = Literal["added", "removed", "changed", "invalid"]
DocumentKind = Literal["urlset", "sitemapindex", "text", "rss", "atom", "robots"]
DocumentOutcome = Literal["ok", "not_modified", "unchanged", "failed"]
# partial: at least one document failed while others were read (their entries stay current);
# error: the check raised and nothing of it was recorded (the database down, a full disk).
CheckOutcome = Literal["ok", "unchanged", "partial", "failed", "error"]

CHANGE_KINDS: tuple[ChangeKind, ...] = ("added", "removed", "changed", "invalid")
CHECK_OUTCOMES: tuple[CheckOutcome, ...] = ("ok", "unchanged", "partial", "failed", "error")

# The states of a listed URL, each with its rule and that rule's severity (ok and unknown have
# none); a redirect that loops is the rule ``url-redirect-loop``.
URL_STATES: dict[str, tuple[RuleId, Severity] | None] = {
    state: None if rule is None else (rule, rule.severity)
    for state, rule in (
        ("ok", None),
        ("redirect", RuleId.URL_REDIRECT),
        ("not-found", RuleId.URL_NOT_FOUND),
        ("gone", RuleId.URL_GONE),
        # Google treats every 4xx but 429 as "the content does not exist"
        ("forbidden", RuleId.URL_FORBIDDEN),
        ("client-error", RuleId.URL_CLIENT_ERROR),
        ("server-error", RuleId.URL_SERVER_ERROR),
        ("noindex", RuleId.URL_NOINDEX),
        ("canonicalized", RuleId.URL_CANONICALIZED),
        ("soft-404", RuleId.URL_SOFT_404),
        ("disallowed", RuleId.URL_DISALLOWED),
        ("unknown", None),
    )
}
# "Broken" pages are those in an error state: a redirect or a canonical elsewhere is a warning.
BROKEN_STATES: tuple[str, ...] = tuple(
    state for state, rule in URL_STATES.items() if rule is not None and rule[1] == "error")
URL_REDIRECT_LOOP = RuleId.URL_REDIRECT_LOOP
# A canonicalized page whose canonical target is not ok itself (a warning, like the state).
URL_CANONICAL_BROKEN = RuleId.URL_CANONICAL_BROKEN
# The info findings a URL's state may carry as its rule (an ok page whose canonicals disagree):
# never broken, never a health change.
URL_CANONICAL_CONFLICT = RuleId.URL_CANONICAL_CONFLICT
URL_NOTES: tuple[RuleId, ...] = (URL_CANONICAL_CONFLICT,)
URL_RULES: tuple[RuleId, ...] = (
    *(rule[0] for rule in URL_STATES.values() if rule is not None), URL_REDIRECT_LOOP,
    URL_CANONICAL_BROKEN, *URL_NOTES)
# What became of a removed URL, once checked.
REMOVAL_REASONS = ("moved", "gone", "live", "unknown")

# Every rule id with its default severity (docs/rules.md). Stable: used in JSON, metrics, alerts.
RULES: dict[str, Severity] = {
    rule: rule.severity for rule in RuleId if not rule.startswith("url-")}
# The rules that make an entry invalid: its loc is unusable to a crawler . Any
# other issue leaves the entry a URL, counted in ``urls``: search engines still crawl it.
UNUSABLE_LOC = frozenset({RuleId.LOC_MISSING, RuleId.LOC_NOT_ABSOLUTE, RuleId.LOC_TOO_LONG})
MAX_LOC_LENGTH = 2048  # sitemaps.org: "less than 2,048 characters"
# An escape spelled with a lower-case hex digit: the same byte as its upper-case spelling
# (RFC 3986 6.2.2.1), so the same page.
LOWER_ESCAPE = re.compile(r"%(?:[a-f][0-9A-Fa-f]|[0-9A-F][a-f])")


def page(loc: str) -> str:
    """The page a loc names: without its ``#fragment`` (which never reaches the server) and
    with its percent-escapes in upper case. Two locs of one page are ``loc-duplicate``, in one
    document or in two of a target (whose fingerprints are those of their pages)."""
    cut = loc.find("#")
    if cut >= 0:
        loc = loc[:cut]
    if "%" in loc:
        loc = LOWER_ESCAPE.sub(_upper, loc)
    return loc


def own_pages(locs: Sequence[str]) -> bool:
    """Whether each of these locs is its own ``page`` (the usual batch, told by one scan of
    them all in C): no ``#`` in any, and no escape in lower case."""
    joined = "".join(locs)
    return "#" not in joined and ("%" not in joined or LOWER_ESCAPE.search(joined) is None)


def _upper(match: re.Match[str]) -> str:
    return match.group().upper()


def utcnow() -> datetime:
    """The current time, timezone-aware UTC: the one clock every stage reads."""
    return datetime.now(UTC)


def change_kind(was_valid: bool, is_valid: bool) -> ChangeKind:
    """The kind of change of an entry listed before and now whose state differs: ``invalid``
    when it was valid and is not any more, else ``changed``. Every path that diffs asks this."""
    return "invalid" if was_valid and not is_valid else "changed"


def addition_kind(is_valid: bool) -> ChangeKind:
    """The kind of change of an entry listed now and not before: ``added``, or ``invalid``
    for an entry whose loc is unusable (it was never a URL)."""
    return "added" if is_valid else "invalid"


def invalid_rule(loc: str) -> RuleId:
    """The rule that made an entry with this loc invalid (an ``invalid`` change is about it):
    a loc too long is that first, as validation lists it."""
    return RuleId.LOC_TOO_LONG if len(loc) >= MAX_LOC_LENGTH else RuleId.LOC_NOT_ABSOLUTE


# The rule ids a recorded change can be about (``changes.rule``): an entry that became invalid,
# a URL whose health moved to a broken state (the pages filter changes by them).
CHANGE_RULES: tuple[RuleId, ...] = (
    RuleId.LOC_NOT_ABSOLUTE, RuleId.LOC_TOO_LONG, *(r for r in URL_RULES if r not in URL_NOTES),
    RuleId.ROBOTS_CHANGED)
# Changes that are not about the URL set, which a diff compares: the URL checks' health
# transitions and the new versions of a host's robots.txt.
OTHER_CHANGE_KINDS = ("health", "robots")


# The version of the rules' verdicts, stored with each entry set: bump it whenever a rule would
# judge the same entry differently, so that no stored verdict is reused (monitor.read.reread).
# 2: only an unusable loc invalidates an entry; an empty optional element is an absent one.
# 3: extension data is judged too (news, video, image, hreflang rules).
# 4: scripts in hreflang codes, relative hrefs, news and video field bounds, one URL per page
#    (a #fragment, the case of a percent-escape), bare dates judged against UTC+14.
RULES_VERSION = 4


@dataclass(frozen=True, slots=True)
class Issue:
    """One validation finding with a stable rule id."""

    rule: RuleId
    message: str
    loc: str | None = None
    document: str | None = None

    @property
    def severity(self) -> Severity:
        """The rule's severity (docs/rules.md), for every rule id, the URL checks' included."""
        return TABLE[self.rule].severity

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of the command line's output (docs/cli.md)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "loc": self.loc,
            "document": self.document,
            "message": self.message,
        }


class Entry(NamedTuple):
    """One URL of a document as the parser read it: raw, stripped strings.

    ``extensions`` is canonical JSON (sorted keys, no spaces) of the extension data
    (``image``, ``video``, ``news``, ``alternates``), or None when there is none. A named tuple:
    the parser builds up to 50,000 a document, and ``tuple.__new__`` is the cheapest way.
    """

    loc: str
    lastmod: str | None = None
    changefreq: str | None = None
    priority: str | None = None
    extensions: str | None = None


@dataclass(slots=True)
class Links:
    """The hreflang alternates (``xhtml:link rel="alternate"``) of a batch of entries as the
    parser read them, in three flat columns: alternate k names ``hrefs[k]`` for ``codes[k]``
    (raw, stripped) and belongs to the batch's entry ``owners[k]``, in document order.

    The parser hands them over only for a batch in which every entry with extension data has
    the usual shape (alternates, then at most a lone image): then they are all of the batch's
    alternates, and the hreflang rules and balance read them here rather than split the JSON
    text of ``Entry.extensions`` again (about a quarter of a 50,000-URL child's, with hreflang and
    images, digest).
    """

    owners: list[int] = field(default_factory=list)
    hrefs: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ParsedDocument:
    """What the parser made of one document.

    ``failure`` is set when the document could not be read completely (malformed, truncated,
    DOCTYPE, unknown root, over a limit): then ``entries`` and ``children`` must not be used,
    so that a broken document never looks like a shorter one.
    """

    kind: DocumentKind | None
    entries: list[Entry] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    # (child, lastmod) of each index child with a non-empty <lastmod>, for its rules
    child_lastmods: list[tuple[str, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    failure: Issue | None = None
    # Occurrences that cannot be entries (no loc): counted as invalid.
    unkeyed_invalid: int = 0
    # Issues counted but not kept in ``issues`` (one per entry, past the first few), by rule.
    dropped_issues: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EntryState:
    """An entry as the diff compares it: its attributes and whether it is valid."""

    lastmod: str | None = None
    changefreq: str | None = None
    priority: str | None = None
    extensions: str | None = None
    valid: bool = True

    def as_json(self) -> dict[str, Any]:
        """The ``before``/``after`` shape of a change in JSON."""
        return {
            "lastmod": self.lastmod,
            "changefreq": self.changefreq,
            "priority": self.priority,
            "extensions": self.extensions,
            "valid": self.valid,
        }


# EntryState is a frozen dataclass; setting its slots directly is ~3x cheaper than its __init__,
# and hundreds of thousands are built per check (validation, stored entry sets).
_SLOTS = vars(EntryState)
_SETTERS = tuple(_SLOTS[name].__set__ for name in (
    "lastmod", "changefreq", "priority", "extensions", "valid"))


def entry_state(
    lastmod: str | None, changefreq: str | None, priority: str | None, extensions: str | None,
    valid: bool,
) -> EntryState:
    """``EntryState(...)`` the fast way: equal to it, and hashing equal."""
    state: EntryState = object.__new__(EntryState)
    set_lastmod, set_changefreq, set_priority, set_extensions, set_valid = _SETTERS
    set_lastmod(state, lastmod)
    set_changefreq(state, changefreq)
    set_priority(state, priority)
    set_extensions(state, extensions)
    set_valid(state, valid)
    return state


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two snapshots of a target."""

    kind: ChangeKind
    loc: str
    before: EntryState | None
    after: EntryState | None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of the command line's output (docs/cli.md)."""
        return {
            "kind": self.kind,
            "loc": self.loc,
            "before": None if self.before is None else self.before.as_json(),
            "after": None if self.after is None else self.after.as_json(),
        }


@dataclass(frozen=True, slots=True)
class DocumentResult:
    """The fingerprint and outcome of one fetched document in one check (built once, by the
    check's tally from the document's outcome)."""

    url: str
    outcome: DocumentOutcome
    kind: DocumentKind | None = None
    parent: str | None = None
    http_status: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    sha256: str | None = None
    urls: int = 0
    invalid: int = 0
    duplicates: int = 0
    bytes: int = 0
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of the command line's output (docs/cli.md)."""
        return {
            "url": self.url,
            "outcome": self.outcome,
            "kind": self.kind,
            "parent": self.parent,
            "http_status": self.http_status,
            "urls": self.urls,
            "invalid": self.invalid,
            "duplicates": self.duplicates,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check of one target: what the CLI prints and the daemon reports."""

    target: str
    url: str
    outcome: CheckOutcome
    snapshot_id: int | None = None
    urls: int = 0
    invalid: int = 0
    duplicates: int = 0  # repeated occurrences of a loc, dropped: not in urls or invalid
    added: int = 0
    removed: int = 0
    changed: int = 0
    invalid_new: int = 0
    # of ``removed``: entries that were invalid (a cleanup, never a mass removal)
    removed_invalid: int = 0
    documents: list[DocumentResult] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    changes_truncated: bool = False
    # the robots.txt of the target's hosts (robots.judge), texts where one changed
    robots: list[dict[str, Any]] = field(default_factory=list)
    error_kind: str | None = None
    error_message: str | None = None
    duration_seconds: float = 0.0
    fetched_bytes: int = 0
    # rule id -> count of the target's current issues after this check (what the gauges show)
    issue_counts: dict[str, int] = field(default_factory=dict)
    baseline: bool = False  # the target's first stored URL set: no change rows were written
    # documents that a completely read index no longer lists, with the URLs each held: the
    # reason of their removals
    dropped_documents: dict[str, int] = field(default_factory=dict)
    started_at: datetime | None = None
    # entries listed before and after this re-check with a valid lastmod on both
    # sides, and those of them whose lastmod changed; None when the check compared nothing
    # (a baseline, a failed check).
    lastmod_compared: int | None = None
    lastmod_changed: int | None = None

    @property
    def lastmod_churn(self) -> float | None:
        """The share of the compared lastmods that changed (0 when none were compared)."""
        if self.lastmod_compared is None or self.lastmod_changed is None:
            return None
        return self.lastmod_changed / self.lastmod_compared if self.lastmod_compared else 0.0

    @property
    def failed_documents(self) -> list[DocumentResult]:
        """The documents this check could not read (a ``partial`` check names them)."""
        return [d for d in self.documents if d.outcome == "failed"]

    def change_counts(self) -> dict[str, int]:
        """The changes this check found, by kind (``invalid``: entries newly invalid)."""
        return {"added": self.added, "removed": self.removed, "changed": self.changed,
                "invalid": self.invalid_new}

    def as_json(self) -> dict[str, Any]:
        """The ``check --json`` object (docs/cli.md)."""
        return {
            "target": self.target,
            "url": self.url,
            "snapshot_id": self.snapshot_id,
            "outcome": self.outcome,
            "urls": self.urls,
            "invalid": self.invalid,
            "duplicates": self.duplicates,
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "documents": [d.as_json() for d in self.documents],
            "issues": [i.as_json() for i in self.issues],
            "changes": [c.as_json() for c in self.changes],
            "changes_truncated": self.changes_truncated,
            "robots": [{k: v for k, v in r.items() if k not in ("before", "after")}
                       for r in self.robots],
            "error": (
                None
                if self.error_kind is None
                else {"kind": self.error_kind, "message": self.error_message}
            ),
            "duration_seconds": round(self.duration_seconds, 3),
        }


NotificationState = Literal["firing", "resolved", "test"]


@dataclass(frozen=True, slots=True)
class Notification:
    """One alert message for one channel, as rules produce it and the outbox stores it.

    ``idempotency_key`` is derived from (target, rule, channel, snapshot, state), so writing or
    delivering the same notification twice is recognisable as one alert. ``send`` False: the
    state moves (a resolve) but the channel is not told (its ``send_resolved`` is off).
    """

    target_name: str
    rule: str
    channel: str
    state: NotificationState
    severity: str
    idempotency_key: str
    payload: dict[str, Any]
    send: bool = True


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What alert rules need to know about a target's history before the current check.

    ``firing`` maps the name of each rule firing for the target to when it started.
    """

    previous_urls: int | None = None
    consecutive_failures: int = 0
    last_content_change_at: datetime | None = None
    first_check_at: datetime | None = None
    firing: Mapping[str, datetime] = field(default_factory=dict)
    # the current issues by rule at the previous completed check (``when: issues``)
    previous_issue_counts: Mapping[str, int] = field(default_factory=dict)
