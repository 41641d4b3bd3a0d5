"""Entries -> issues: the sitemaps.org rules for the entries of one document (pure).

Built for hundreds of thousands of entries a check: the common valid entry costs a few dict and
string operations (a prefix test for the scope, a cache of ``lastmod`` verdicts, sets of the
usual ``changefreq`` and ``priority`` spellings); regexes and URL parsing run only off that path.
A distinct ``lastmod`` on a day two or more before the check costs a cached verdict for its date
and one strict pattern for its time (``_CLOCK``) instead of ``_lastmod_rule``'s full parse.

``CleanDocument`` gives the same verdicts to the usual document (every entry valid, without an
issue, no loc twice) a batch of entries at a time, in C: set operations, one pattern over the
batch's distinct lastmods, and no state per entry. Any other document is validated entry by
entry, as always.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from monitor.core.model import (
    LOWER_ESCAPE,
    MAX_LOC_LENGTH,
    UNUSABLE_LOC,
    Entry,
    EntryState,
    Issue,
    Links,
    page,
)
from monitor.core.rules import RuleId, rule_id
from monitor.read import extensions as extension_rules

__all__ = ["CHANGEFREQS", "MAX_LOC_LENGTH", "CleanDocument", "ExtensionSink", "ValidatedDocument",
           "child_issue", "child_scope", "index_issues", "issue", "lastmod_valid", "page",
           "same_host",
           "validate_document"]

CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})

_DEFAULT_PORTS = {"http": 80, "https": 443}
# W3C Datetime (https://www.w3.org/TR/NOTE-datetime): a time needs a timezone designator.
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:[0-9]{2})"
)
# The time of a lastmod whose date part is known to be valid, in ranges fromisoformat accepts
# (a subset of what _DATETIME and fromisoformat accept: off these ranges, ask _lastmod_rule).
_CLOCK = re.compile(
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]+)?)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
# Distinct lastmods joined with \x00, each a date and maybe a time that _CLOCK accepts: when
# their dates are two days or more before the check too, none of them has an issue.
_DAY = "[0-9]{4}-[0-9]{2}-[0-9]{2}"
_PAST_SHAPES = re.compile(f"{_DAY}(?:{_CLOCK.pattern})?(?:\x00{_DAY}(?:{_CLOCK.pattern})?)*")
_DAY_OF = itemgetter(slice(0, 10))
_YEAR_MONTH = re.compile(r"([0-9]{4})(?:-([0-9]{2}))?")
_PRIORITY = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
# The spellings nearly every sitemap uses; anything else goes through the regex.
_PRIORITIES = frozenset(
    {"0", "1", "1.0", "1.00", "0.0", "0.00"}
    | {f"0.{i}" for i in range(10)}
    | {f"0.{i:02d}" for i in range(100)}
)
# Each spelling above as one string: a state keeps it rather than its entry's own copy
# (two strings fewer per entry, about 5 MB of a 50,000-URL document, when the entry is dropped).
_CHANGEFREQ_SPELLINGS = {value: value for value in CHANGEFREQS}
_PRIORITY_SPELLINGS = {value: value for value in _PRIORITIES}
# What RFC 3986 allows unescaped in a URL: anything else (a space, a quote, a raw non-ASCII
# character) is loc-not-encoded. bytes.translate deletes these in C: what is left is not allowed.
_URL_BYTES = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
              b"-._~:/?#[]@!$&'()*+,;=%")
# A "%" that does not start an escape (RFC 3986: "%" and two hex digits) is loc-not-encoded too.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# The first place on Earth where a day begins is UTC+14 (Kiribati): a bare date is in the
# future only once it is later than the date there.
_EASTMOST = timedelta(hours=14)
# The rules named once an entry, bound here: a member read off RuleId costs a metaclass
# __getattr__ on Python 3.11 (monitor.core.rules), a module global does not.
_LOC_TOO_LONG = RuleId.LOC_TOO_LONG
_LOC_NOT_ABSOLUTE = RuleId.LOC_NOT_ABSOLUTE
_LOC_OUT_OF_SCOPE = RuleId.LOC_OUT_OF_SCOPE
_LOC_DUPLICATE = RuleId.LOC_DUPLICATE
_LOC_NOT_ENCODED = RuleId.LOC_NOT_ENCODED
_LASTMOD_INVALID = RuleId.LASTMOD_INVALID
_LASTMOD_FUTURE = RuleId.LASTMOD_FUTURE
_LASTMOD_REGRESSED = RuleId.LASTMOD_REGRESSED
_CHANGEFREQ_INVALID = RuleId.CHANGEFREQ_INVALID
_PRIORITY_INVALID = RuleId.PRIORITY_INVALID
_CACHE_MAX = 100_000  # distinct lastmod values remembered per document
_SHARED_MAX = 10_000  # distinct values of a field a CleanDocument keeps as one string each

# EntryState is a frozen dataclass; setting its slots directly is ~3x cheaper than its __init__.
_new = object.__new__
_SLOTS = vars(EntryState)
_set_lastmod = _SLOTS["lastmod"].__set__
_set_changefreq = _SLOTS["changefreq"].__set__
_set_priority = _SLOTS["priority"].__set__
_set_extensions = _SLOTS["extensions"].__set__
_set_valid = _SLOTS["valid"].__set__


@dataclass(slots=True)
class ValidatedDocument:
    """The entries of one document with their verdicts."""

    # loc -> state (valid=False when any error-level issue); first occurrence wins; in order
    entries: dict[str, EntryState]
    # loc -> space-separated rule ids, only for entries that have issues
    rules: dict[str, str]
    # every entry-level issue, with loc and document
    issues: list[Issue]
    # entries whose loc is unusable (only these are invalid)
    invalid: int
    # later occurrences of a loc already listed, dropped (``loc-duplicate``)
    duplicates: int = 0


class _Scope:
    """Where a sitemap may list URLs: its scheme, host and port, at or below its directory."""

    __slots__ = ("directory", "origin", "prefix")

    def __init__(self, document_url: str) -> None:
        self.prefix: str | None = None  # the literal form, for a cheap startswith()
        self.origin: tuple[str, str, int | None] | None = None
        self.directory = "/"
        try:
            parts = urlsplit(document_url)
            port = parts.port
        except ValueError:
            return
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS or not parts.hostname:
            return  # a local file (``validate FILE``): no scope to check
        self.origin = (scheme, _ascii_host(parts.hostname), port or _DEFAULT_PORTS[scheme])
        self.directory = parts.path[: parts.path.rfind("/") + 1] or "/"
        self.prefix = f"{parts.scheme}://{parts.netloc}{self.directory}"


def _encoded(text: str) -> bool:
    """Whether ``text`` holds only characters a URL may hold unescaped (RFC 3986), each "%"
    the start of an escape."""
    return (text.isascii() and not text.encode("ascii").translate(None, _URL_BYTES)
            and ("%" not in text or _BAD_ESCAPE.search(text) is None))


def _ascii_host(host: str) -> str:
    """A host name as DNS holds it: an internationalized one in its IDNA (punycode) form, so
    that ``bücher.example`` and ``xn--bcher-kva.example`` are one host."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host  # not a valid IDN: compared as written


def same_host(first: str | None, second: str | None) -> bool:
    """Whether two host names (``urlsplit(...).hostname``) are one host, compared as DNS
    names (IDNA)."""
    if first is None or second is None:
        return first == second
    return first == second or _ascii_host(first) == _ascii_host(second)


def _other_page(loc: str) -> str | None:
    """``page(loc)`` when it is not ``loc`` itself (the usual loc: None, two scans in C)."""
    if "#" in loc or ("%" in loc and LOWER_ESCAPE.search(loc) is not None):
        return page(loc)
    return None


def _latest_day(now: datetime) -> date:
    """The date at ``now`` where it is latest on Earth (UTC+14)."""
    try:
        return (now.astimezone(UTC) + _EASTMOST).date()
    except OverflowError:
        return date.max


def child_issue(child: str, index_url: str) -> Issue | None:
    """``loc-not-absolute`` for a child of an index that is not an absolute http(s) URL (a
    relative one is never resolved: crawlers do not), else None."""
    try:
        parts = urlsplit(child)
        if parts.scheme.lower() in _DEFAULT_PORTS and parts.hostname:
            return None
    except ValueError:
        pass
    return Issue(RuleId.LOC_NOT_ABSOLUTE, f"sitemap {child} of an index is not an absolute "
                 "http(s) URL; not read", loc=child, document=index_url)


def child_scope(child: str, index_url: str) -> str | None:
    """Why an index's child (an absolute URL: ``child_issue``) is out of the index's scope:
    ``"host"`` (another host, compared as DNS names), ``"directory"`` (on its host, but not at
    or below the index's directory), or None."""
    try:
        child_parts, index_parts = urlsplit(child), urlsplit(index_url)
    except ValueError:
        return "host"
    if not same_host(child_parts.hostname, index_parts.hostname):
        return "host"
    directory = index_parts.path[: index_parts.path.rfind("/") + 1] or "/"
    return None if (child_parts.path or "/").startswith(directory) else "directory"


def _loc_rules(loc: str, scope: _Scope) -> list[RuleId]:
    """The slow path for a loc that does not start with the document's own prefix."""
    rules: list[RuleId] = []
    if len(loc) >= MAX_LOC_LENGTH:
        rules.append(_LOC_TOO_LONG)
    try:
        parts = urlsplit(loc)
        port = parts.port
    except ValueError:
        return [*rules, _LOC_NOT_ABSOLUTE]
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return [*rules, _LOC_NOT_ABSOLUTE]
    if scope.origin is not None and (
        (scheme, _ascii_host(parts.hostname), port or _DEFAULT_PORTS[scheme]) != scope.origin
        or not (parts.path or "/").startswith(scope.directory)
    ):
        rules.append(_LOC_OUT_OF_SCOPE)
    return rules


def _lastmod_rule(value: str, now: datetime, today: date) -> RuleId | None:
    """``lastmod-invalid``, ``lastmod-future`` or None; ``today``: the latest date on Earth at
    ``now`` (``_latest_day``), which a bare date, a month or a year must pass to be future."""
    size = len(value)
    try:
        if size == 10:
            if _DATE.fullmatch(value) is None:
                return _LASTMOD_INVALID
            # A bare date is in the future only when the whole day is.
            return _LASTMOD_FUTURE if date.fromisoformat(value) > today else None
        if size > 10:
            if _DATETIME.fullmatch(value) is None:
                return _LASTMOD_INVALID
            moment = datetime.fromisoformat(value)  # checks the calendar; Python >= 3.11 takes Z
            return _LASTMOD_FUTURE if moment > now else None
        match = _YEAR_MONTH.fullmatch(value)
        if match is None:
            return _LASTMOD_INVALID
        year, month = int(match.group(1)), int(match.group(2) or 1)
        if year < 1 or not 1 <= month <= 12:
            return _LASTMOD_INVALID
        if match.group(2) is None:
            return _LASTMOD_FUTURE if year > today.year else None
        later = (year, month) > (today.year, today.month)
        return _LASTMOD_FUTURE if later else None
    except ValueError:
        return _LASTMOD_INVALID


def index_issues(child_lastmods: Iterable[tuple[str, str]], index_url: str,
                 now: datetime) -> list[Issue]:
    """``lastmod-invalid`` and ``lastmod-future`` of a sitemap index's children, judged as an
    entry's ``lastmod`` is (search engines read it to choose which sitemaps to fetch again)."""
    today = _latest_day(now)
    found = []
    for child, lastmod in child_lastmods:
        rule = _lastmod_rule(lastmod, now, today)
        if rule is not None:
            found.append(issue(rule, Entry(child, lastmod, None, None, None),
                               index_url))
    return found


def lastmod_valid(value: str) -> bool:
    """Whether a lastmod is a W3C Datetime (``lastmod-invalid`` is not raised for it)."""
    now = datetime.now(UTC)
    return _lastmod_rule(value, now, _latest_day(now)) != _LASTMOD_INVALID


def _past_cutoff(today: date) -> str:
    """The last date whose every moment, in any timezone, is before ``today`` began in UTC.

    Offsets are less than 24 hours, so every moment of day D is before D+2 00:00 UTC.
    """
    try:
        return (today - timedelta(days=2)).isoformat()
    except OverflowError:
        return ""  # no date is that early; every value takes _lastmod_rule


def _past_day(day: str, cutoff: str, now: datetime, today: date) -> bool:
    # ``today``: as _lastmod_rule takes it; ``cutoff``: from the date in UTC (_past_cutoff)
    """``day`` (10 characters) is a valid YYYY-MM-DD no later than ``cutoff``."""
    # Valid dates are ASCII digits in fixed places, so they compare as strings.
    return _lastmod_rule(day, now, today) is None and day <= cutoff


def _priority_ok(value: str) -> bool:
    return _PRIORITY.fullmatch(value) is not None and 0.0 <= float(value) <= 1.0


_MESSAGES = {
    RuleId.LOC_NOT_ABSOLUTE: "loc is not an absolute http(s) URL",
    RuleId.LOC_TOO_LONG: f"loc has {MAX_LOC_LENGTH} characters or more",
    RuleId.LOC_OUT_OF_SCOPE: (
        "loc is on another scheme, host or port than the sitemap, or above its directory"
    ),
    RuleId.LOC_DUPLICATE: "loc is listed more than once in this target",
    RuleId.NEWS_DISALLOWED: ("robots.txt disallows this news URL to Googlebot-News (to "
                             "Googlebot when it has no group for Googlebot-News)"),
    RuleId.IMAGE_DISALLOWED: ("robots.txt disallows an image of this URL to Googlebot-Image (to "
                              "Googlebot when it has no group for Googlebot-Image)"),
    RuleId.LOC_NOT_ENCODED: ("loc holds characters a URL must escape (a space, a quote, "
                             "non-ASCII, a % not followed by two hex digits)"),
}


def issue(rule: RuleId, entry: Entry, document_url: str) -> Issue:
    """The issue ``rule`` raises for one entry of a document, with its message."""
    if rule == _LASTMOD_REGRESSED:  # found by the diff, listed as an entry's issue
        message = f"lastmod {entry.lastmod!r} is earlier than the lastmod this URL had before"
    elif rule.startswith("lastmod"):
        what = "not a W3C Datetime" if rule == _LASTMOD_INVALID else "later than the check"
        message = f"lastmod {entry.lastmod!r} is {what}"
    elif rule == _CHANGEFREQ_INVALID:
        message = f"changefreq {entry.changefreq!r} is not one of {', '.join(sorted(CHANGEFREQS))}"
    elif rule == _PRIORITY_INVALID:
        message = f"priority {entry.priority!r} is not a number from 0.0 to 1.0"
    elif rule in _MESSAGES:
        message = _MESSAGES[rule]
    else:  # the extension rules (KeyError for an unknown rule, as before)
        message = extension_rules.message(rule, entry.loc, entry.extensions)
    return Issue(rule, message, loc=entry.loc, document=document_url)


def describe(rule: str, entry: Entry, document_url: str) -> dict[str, Any]:
    """``issue`` as JSON: how a listing of stored issues gives back an entry's issue."""
    return issue(rule_id(rule), entry, document_url).as_json()


def validate_document(
    entries: Iterable[Entry],
    document_url: str,
    *,
    now: datetime,
    seen: set[str] | None = None,
    messages: bool = True,
) -> ValidatedDocument:
    """Check every entry of one document; ``seen`` carries locs across a target's documents.
    Without ``messages`` the result's ``issues`` is empty (the rule ids are all a re-read
    needs: monitor.read.reread makes the few issues it keeps itself)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    today = _latest_day(now)
    scope = _Scope(document_url)
    prefix = scope.prefix
    states: dict[str, EntryState] = {}
    known: set[str] | dict[str, EntryState] = states if seen is None else seen
    # The pages of the locs listed so far that are not their own page (a #fragment, a
    # lower-case escape): a loc of one of them is a duplicate too.
    pages: set[str] = set() if seen is None else seen
    rules_by_loc: dict[str, str] = {}
    issues: list[Issue] = []
    invalid = duplicates = 0
    lastmod_cache: dict[str, RuleId | None] = {}
    cutoff = _past_cutoff(now.astimezone(UTC).date())
    past_days: dict[str, bool] = {}  # a lastmod's first 10 characters -> _past_day()
    clock = _CLOCK.fullmatch
    changefreq_spellings, priority_spellings = _CHANGEFREQ_SPELLINGS.get, _PRIORITY_SPELLINGS.get
    shared: dict[tuple[str | None, str | None, str | None, str | None, bool], EntryState] = {}
    extension_issues = extension_rules.Checker(now).rules
    for entry in entries:
        loc = entry.loc
        other = _other_page(loc)
        if (loc in known or (pages and loc in pages)
                or (other is not None and (other in known or other in pages))):
            issues.append(issue(_LOC_DUPLICATE, entry, document_url))
            duplicates += 1
            continue
        if seen is not None:
            seen.add(loc)
        if other is not None:
            pages.add(other)
        rules: list[RuleId] | None = None
        valid = True
        if prefix is None or len(loc) >= MAX_LOC_LENGTH or not loc.startswith(prefix):
            rules = _loc_rules(loc, scope) or None
            valid = rules is None or UNUSABLE_LOC.isdisjoint(rules)
        if not _encoded(loc):
            rules = [_LOC_NOT_ENCODED] if rules is None else [*rules, _LOC_NOT_ENCODED]
        lastmod = entry.lastmod
        repeated = True  # worth looking for a state to share: a lastmod seen before, or none
        if lastmod is not None:
            rule: RuleId | Literal[""] | None = lastmod_cache.get(lastmod, "")  # "": not cached
            if rule == "":
                repeated = False
                rule = None
                size = len(lastmod)
                past: bool | None = False
                if size >= 10:
                    day = lastmod[:10]
                    past = past_days.get(day)
                    if past is None:
                        past = _past_day(day, cutoff, now, today)
                        if len(past_days) < _CACHE_MAX:
                            past_days[day] = past
                # A valid date two days before the check, and a valid time if any: no rule.
                if not (past and (size == 10 or clock(lastmod, 10) is not None)):
                    rule = _lastmod_rule(lastmod, now, today)
                if len(lastmod_cache) < _CACHE_MAX:
                    lastmod_cache[lastmod] = rule
            if rule:  # a rule id (not "" or None)
                rules = [rule] if rules is None else [*rules, rule]
        changefreq = entry.changefreq
        if changefreq is not None:
            spelling = changefreq_spellings(changefreq)
            if spelling is not None:
                changefreq = spelling
            elif changefreq.lower() not in CHANGEFREQS:
                rules = ([_CHANGEFREQ_INVALID] if rules is None
                         else [*rules, _CHANGEFREQ_INVALID])
        priority = entry.priority
        if priority is not None:
            spelling = priority_spellings(priority)
            if spelling is not None:
                priority = spelling
            elif not _priority_ok(priority):
                rules = [_PRIORITY_INVALID] if rules is None else [*rules, _PRIORITY_INVALID]
        if entry.extensions is not None:
            found = extension_issues(loc, entry.extensions)
            if found is not None:
                rules = found if rules is None else [*rules, *found]
        if rules is not None:
            # One rule: the member itself, shared, as its string literal was (str.join copies
            # a lone item that is not an exact str).
            rules_by_loc[loc] = rules[0] if len(rules) == 1 else " ".join(rules)
            if messages:
                issues.extend(issue(rule, entry, document_url) for rule in rules)
            invalid += not valid
        # EntryState is immutable: entries with the same attributes share one (most do).
        state = None
        if repeated:
            key = (lastmod, changefreq, priority, entry.extensions, valid)
            state = shared.get(key)
        if state is None:
            state = _new(EntryState)
            _set_lastmod(state, lastmod)
            _set_changefreq(state, changefreq)
            _set_priority(state, priority)
            _set_extensions(state, entry.extensions)
            _set_valid(state, valid)
            if repeated and len(shared) < _CACHE_MAX:
                shared[key] = state
        states[loc] = state
    return ValidatedDocument(states, rules_by_loc, issues, invalid, duplicates)


class ExtensionSink(Protocol):
    """Where a ``CleanDocument`` puts its entries' extensions (``monitor.read.digest``)."""

    def add(self, locs: Sequence[str], values: Sequence[str | None], links: Links | None,
            ) -> object:
        """Take a batch's extensions (and its locs and the parser's ``links`` of it, which the
        sink may look at)."""

    def values(self) -> list[str | None]:
        """Every value taken, in order; the sink no longer holds them."""


class CleanDocument:
    """``validate_document`` for the usual document, a batch of entries at a time.

    A document whose every entry is valid and without an issue, with no loc twice, gets from
    ``validate_document`` no issue and a state per entry holding the entry's own values. Such a
    document is checked here with set operations and patterns over each batch (as the parser
    yields them) and kept as columns of those values: less than half the work, and less
    memory, than a state per entry (a 50,000-URL child: 0.09 s against 0.22 s). ``add`` keeps a
    batch and returns False when it may hold an issue; ``unique`` tells, at the end, whether no loc
    came twice. Otherwise the caller validates ``release()``'s entries, and the rest of the
    document, entry by entry.

    ``sink``: where the extensions column goes instead of ``fields[3]`` (which then stays
    empty), batch by batch; ``release`` takes them back from it.
    """

    __slots__ = ("_cutoff", "_extensions", "_now", "_past_days", "_prefix", "_shared", "_sink",
                 "_today", "fields", "locs")

    def __init__(self, document_url: str, *, now: datetime,
                 sink: ExtensionSink | None = None) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self._now = now
        self._today = _latest_day(now)
        self._cutoff = _past_cutoff(now.astimezone(UTC).date())
        self._prefix = _Scope(document_url).prefix
        self._past_days: set[str] = set()
        self._extensions = extension_rules.Checker(now)
        self._sink = sink
        # lastmods, changefreqs, priorities: each distinct value (up to _SHARED_MAX) as kept
        self._shared: tuple[dict[str, str], ...] = (
            {}, dict(_CHANGEFREQ_SPELLINGS), dict(_PRIORITY_SPELLINGS))
        self.locs: list[str] = []
        # lastmods, changefreqs, priorities, extensions: the columns of entryset.FIELDS
        self.fields: tuple[list[str | None], ...] = ([], [], [], [])

    def add(self, batch: list[Entry], links: Links | None = None) -> bool:
        """Keep a batch of entries; False when one of them may have an issue. ``links``: the
        parser's of the batch, if it gave them (``DocumentParser.take_batch``)."""
        if not batch:
            return True
        locs, lastmods, changefreqs, priorities, extensions = zip(*batch, strict=True)
        self.locs += locs
        kept = self.fields
        if self._sink is None:
            kept[3].extend(extensions)
        else:
            self._sink.add(locs, extensions, links)
        distinct = [_set(values) for values in (lastmods, changefreqs, priorities)]
        for column, values, values_set, shared in zip(
            kept[:3], (lastmods, changefreqs, priorities), distinct, self._shared, strict=True
        ):
            # Equal values as one string, as validate_document's shared states hold them
            # (a string per entry and field is ~100 bytes: 5 MB of a 50,000-URL document).
            room = _SHARED_MAX - len(shared)
            if room > 0:
                shared.update({value: value for value in
                               islice(values_set.difference(shared), room)})
            column += map(shared.get, values, values)
        return self._usual(locs, distinct, extensions, links)

    def check(self, batch: list[Entry]) -> bool:
        """Whether no entry of a batch may have an issue, its locs known to be unique (a
        re-read's are the stored ones: ``monitor.read.reread``): ``add`` and ``locs_ok`` without
        keeping the batch."""
        if not batch:
            return True
        locs, lastmods, changefreqs, priorities, extensions = zip(*batch, strict=True)
        distinct = [_set(values) for values in (lastmods, changefreqs, priorities)]
        return self._usual(locs, distinct, extensions, None) and _encoded("".join(locs))

    def lastmods_ok(self, lastmods: Iterable[str | None]) -> bool:
        """Whether no lastmod of a batch has an issue, the rest of its entries known to have
        none (a re-read's entries whose lastmod alone moved: ``monitor.read.reread``)."""
        return self._lastmods_ok(_set(lastmods))

    def _usual(self, locs: tuple[str, ...], distinct: list[set[str]],
               extensions: tuple[str | None, ...], links: Links | None) -> bool:
        """Whether no entry of a batch may have an issue (but a loc twice, or not encoded)."""
        prefix = self._prefix
        return (prefix is not None and max(map(len, locs)) < MAX_LOC_LENGTH
                and all(map(str.startswith, locs, repeat(prefix)))
                and self._lastmods_ok(distinct[0])
                and _spelled(distinct[1], CHANGEFREQS, _changefreq_ok)
                and _spelled(distinct[2], _PRIORITIES, _priority_ok)
                and self._extensions_ok(locs, extensions, links))

    def _extensions_ok(self, locs: tuple[str, ...], extensions: tuple[str | None, ...],
                       links: Links | None) -> bool:
        """Whether no entry's extension data raises a rule (a batch without any: one count)."""
        if extensions.count(None) == len(extensions):
            return True
        return extension_rules.batch_ok(self._extensions, locs, extensions, links)

    def locs_ok(self) -> bool:
        """Whether no page was listed twice and every loc is encoded as a URL must be (the
        usual document: one check of all its locs at once, not one a loc)."""
        locs = self.locs
        if len(set(locs)) != len(locs):
            return False
        joined = "".join(locs)  # after the set is gone: the two would add to the peak
        if not _encoded(joined):
            return False
        if "#" in joined or LOWER_ESCAPE.search(joined) is not None:  # rare: by their pages
            del joined
            return len(set(map(page, locs))) == len(locs)
        return True

    def take(self) -> tuple[list[str], tuple[list[str | None], ...]]:
        """The column of the locs added and those of their ``FIELDS``; this object no longer
        holds them."""
        locs, fields = self.locs, self.fields
        self.locs, self.fields = [], ([], [], [], [])
        return locs, fields

    def release(self) -> Iterator[Entry]:
        """The entries added, in order, as the parser gave them; this object no longer holds
        them."""
        locs, fields = self.take()
        if self._sink is not None:
            fields = (*fields[:3], self._sink.values())
        return map(Entry._make, zip(locs, *fields, strict=True))

    def _lastmods_ok(self, values: set[str]) -> bool:
        if not values:
            return True
        if _PAST_SHAPES.fullmatch("\x00".join(values)) is not None and self._past(
            set(map(_DAY_OF, values))
        ):
            return True
        now, today = self._now, self._today
        return all(_lastmod_rule(value, now, today) is None for value in values)

    def _past(self, days: set[str]) -> bool:
        """Whether each of these dates (shaped YYYY-MM-DD) is valid and two days or more
        before the check."""
        for day in days.difference(self._past_days):
            if not _past_day(day, self._cutoff, self._now, self._today):
                return False
            self._past_days.add(day)
        return True


def _set(values: Iterable[str | None]) -> set[str]:
    """The distinct values that are set."""
    distinct = set(values)
    distinct.discard(None)
    return distinct  # type: ignore[return-value]


def _spelled(values: set[str], usual: frozenset[str], ok: Callable[[str], bool]) -> bool:
    return values <= usual or all(map(ok, values))


def _changefreq_ok(value: str) -> bool:
    return value.lower() in CHANGEFREQS
