"""One document's CPU work: bytes -> parse -> validate -> diff -> stored entry set.

The pipeline hands each fetched document here. Big documents (over ``IN_PROCESS_MAX`` bytes)
go to a pool of worker processes, so that a sitemap index's children are parsed on every core
while the check fetches the next ones. The pool starts when a second big document arrives: a
lone one (a re-check where one child changed) is digested here, as small ones are, since
starting workers or a round trip to one would cost more than it saves. Each worker and this
process digest one big document at a time; the next waits for whichever frees first.
``digest`` is pure
(no database, no network) and returns only what the check needs: counts, the first issues and
changes, the new entry set ready to store, and the fingerprints of its locs (unless the job
asks for none).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import BrokenExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import chain, islice
from operator import itemgetter
from typing import IO, TYPE_CHECKING

from monitor import (
    changepacks,
    changerows,
    entrydelta,
    entryset,
    extensions,
    parse,
    reread,
    validate,
)
from monitor import diff as diffing
from monitor.model import (
    RULES_VERSION,
    Change,
    ChangeKind,
    DocumentKind,
    Entry,
    EntryState,
    Issue,
    Links,
    ParsedDocument,
    entry_state,
)

# asyncio and tempfile are imported where the calling side uses them (run, Spool): the
# forkserver preloads this module and forks every worker from itself, and neither needs them.
# asyncio (with ssl, subprocess and the rest it loads) is 6.5 MB of each of those processes.
if TYPE_CHECKING:  # the pool's modules load only when a big document comes (start-up time)
    from asyncio import AbstractEventLoop, Semaphore
    from concurrent.futures import Future, ProcessPoolExecutor

__all__ = [
    "IN_PROCESS_MAX",
    "Digest",
    "Job",
    "Lastmods",
    "Spool",
    "WorkerDied",
    "base_value",
    "diff_stored",
    "digest",
    "drop_duplicates",
    "lift_rule",
    "pool_started",
    "return_big_buffers",
    "rule_locs",
    "run",
    "shutdown",
    "warm",
    "whole",
    "workers",
]

IN_PROCESS_MAX = 1 << 20  # bytes; a document this big or smaller is digested in a thread
_CHUNK = 256 * 1024  # a batch of entries (_batches): bigger ones cost less a URL, up to here
_ENV = "SITEMAP_MONITOR_PARSE_WORKERS"
_TASKS_PER_WORKER = 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt() parameters
# Over the 256 KiB asked for by each socket read of asyncio (its transports' max_size) and each
# read of a body from its file (_CHUNK): those come and go by the thousand and are best served
# from the heap (see return_big_buffers).
_MMAP_THRESHOLD = 320 * 1024
_TRIM_THRESHOLD = 1 << 20  # free memory kept at the heap's top: such a buffer, freed there, stays
_INVALID = "lastmod-invalid"


class WorkerDied(Exception):
    """The worker process digesting a document died (killed for memory, most likely)."""


@dataclass(slots=True)
class Job:
    """A fetched document to digest: its bytes (small) or the file holding them (big)."""

    url: str
    now: datetime
    max_bytes: int
    max_urls: int
    max_children: int
    body: bytes | None = None
    path: str | None = None
    # The document's stored entry set, on a re-check: whole, or a delta against the full
    # version whose value is ``previous_base`` (monitor.entrydelta), resolved here
    previous: bytes | None = None
    previous_base: bytes | None = None
    baseline: bool = False  # the target's first check: keep only the first additions
    examples: int = 1000  # issues (and additions of a baseline) kept in full; the rest counted
    fingerprints: bool = True  # False: Digest.hashes is None (monitor.pipeline._digest says why)
    # The row id of the full version ``previous`` is, or is a delta against. Set: a re-read
    # that keeps the locs makes its new version as a delta against it too.
    base_id: int | None = None


@dataclass(slots=True)
class Digest:
    """What the check needs of one document."""

    kind: DocumentKind | None
    failure: Issue | None = None
    issues: list[Issue] = field(default_factory=list)  # the document's own (parse) issues
    entry_issues: list[Issue] = field(default_factory=list)  # the first ``examples``
    counts: Counter[str] = field(default_factory=Counter)  # every issue's rule, counted
    children: list[str] = field(default_factory=list)
    urls: int = 0  # valid entries
    entries: int = 0  # entries kept, valid or not (duplicates and locless ones are not)
    invalid: int = 0  # invalid occurrences: entries with an unusable loc, and without one
    duplicates: int = 0  # later occurrences of a loc already listed, dropped
    duplicate_locs: list[str] = field(default_factory=list)  # their locs
    dropped: dict[str, int] = field(default_factory=dict)  # parse issues counted, not kept
    # The entry set (monitor.entryset); None for an index, and where ``delta`` alone stands
    # for it (``whole`` makes its value)
    data: bytes | None = None
    # The entry set as a delta against the job's base (monitor.entrydelta), when it is worth one
    delta: bytes | None = None
    # ``data`` holds the stored set's entries and verdicts (new bytes, the same document)
    same: bool = False
    # array("Q") of entryset.loc_hash of each kept loc, in order; None if the job asked for none
    hashes: bytes | None = b""
    # Sum of the document's hreflang pairs (monitor.extensions.balance): 0 for most documents
    balance: int = 0
    # Every change against the previous entry set (none: every entry is new) but those in
    # ``rows``. On a baseline, only the first ``examples`` additions: ``urls`` were added,
    # ``entries - urls`` invalid.
    changes: list[Change] = field(default_factory=list)
    # The changes with a before and an after (changed, invalid): the rows to store, compact
    # (monitor.changerows), their counts by kind and the first ``examples`` of them
    rows: bytes = b""
    # ``changed`` ones already packed at their positions in ``data`` (monitor.changepacks),
    # which ``rows`` then lacks; counted and exemplified with the rows
    packs: list[changepacks.Packed] = field(default_factory=list)
    row_counts: dict[str, int] = field(default_factory=dict)
    row_examples: list[Change] = field(default_factory=list)
    # SPEC 12: entries kept with a valid lastmod; of them, those listed in the previous entry
    # set with a valid lastmod too, and those of these whose lastmod changed
    lastmods: int = 0
    lastmod_compared: int = 0
    lastmod_changed: int = 0


@dataclass(slots=True)
class Lastmods:
    """What ``diff_stored`` finds of the lastmods as it diffs (SPEC 12)."""

    rules: dict[str, str]  # loc -> rule ids of the new entries: lastmod-regressed is added here
    bad: int = 0  # new entries whose lastmod is lastmod-invalid
    added: int = 0  # new locs with a valid lastmod
    fresh: int = 0  # locs listed before whose lastmod changed to a valid one
    changed: int = 0  # of those, the ones whose lastmod before was valid too
    regressed: list[str] = field(default_factory=list)  # locs given lastmod-regressed now

    @property
    def compared(self) -> int:
        """Of ``present`` entries with a lastmod, those listed before with a valid lastmod on
        both sides (an unchanged lastmod is as valid as it was)."""
        return -self.bad - self.added - self.fresh + self.changed


def digest(job: Job) -> Digest:
    """Parse, validate and diff one document; encode its entries and changes for storage."""
    result = _digest(job)
    _compact(result, job)
    return result


def _compact(result: Digest, job: Job) -> None:
    """Move the changes with a before and an after into ``rows``, in order."""
    moved = [c for c in result.changes if c.before is not None and c.after is not None]
    if not moved:  # none, or they are rows already (monitor.reread)
        return
    result.changes = [c for c in result.changes if c.before is None or c.after is None]
    result.rows = changerows.encode(changerows.of(moved))
    result.row_counts = dict(Counter(c.kind for c in moved))
    result.row_examples = moved[: job.examples]


def _digest(job: Job) -> Digest:
    if job.previous is None or job.baseline:
        return _digest_new(job)
    stored, base = _stored(job)
    # The usual re-read document lists the stored locs in the stored order: it is compared
    # with the stored set a batch at a time as it is parsed (monitor.reread). One that does
    # not is parsed again from its start, and validated and diffed whole.
    reader = reread.Rereader(stored, job.url, now=job.now, examples=job.examples,
                             fingerprints=job.fingerprints)
    parser = _parser(job)
    for batch, _ in _batches(job, parser):
        if not reader.add(batch):
            del parser, reader
            return _digest_whole(job, stored)
    parsed = parser.close()
    result = _document(parsed)
    if not _has_entries(result):
        return result
    found = reader.finish()
    if found is None:
        return _digest_whole(job, stored)
    _take(result, found, parsed.unkeyed_invalid, job, stored)
    # A delta pays only while under a quarter of the entries moved (entrydelta.compose): where
    # every lastmod moved, the 50,000 positions are not even gathered. It is kept when it is
    # at most half of its base, and then the new version is not packed whole at all (22 ms a
    # W1 child): the check stores the delta, and ``whole`` makes the value where it must.
    if job.base_id is not None and len(found.moved) * 4 <= found.columns.size:
        _, header, positions = base
        order = sorted({*positions, *found.moved})
        result.delta = entrydelta.compose(header, found.columns, order, job.base_id,
                                          len(base_value(job)))
    if result.delta is None:
        result.data = entryset.pack(found.columns)
    return result


def whole(result: Digest, job: Job) -> bytes:
    """The value of the entry set a digest made: ``data``, or its ``delta`` applied to the
    job's base (a re-read stored as a delta alone)."""
    if result.data is not None:
        return result.data
    assert result.delta is not None
    return entrydelta.apply(base_value(job), result.delta)


def base_value(job: Job) -> bytes:
    """The value of the full version the job's stored set is, or is a delta against: the
    stored locs, in the stored order."""
    assert job.previous is not None
    return job.previous if job.previous_base is None else job.previous_base


def _digest_whole(job: Job, stored: entryset.Columns) -> Digest:
    """A re-read document whose locs are not the stored ones: validated and diffed whole."""
    parsed = _parse(job)
    result = _document(parsed)
    if not _has_entries(result):
        return result
    checked = validate.validate_document(parsed.entries, job.url, now=job.now)
    del parsed.entries
    return _finish(result, checked, parsed.unkeyed_invalid, job, stored)


def _digest_new(job: Job) -> Digest:
    """A document with nothing stored to compare with (or a baseline): validated as it is
    parsed, so that its parsed entries and their states are never all held at once, and its
    states dropped before the entry set is compressed (a worker's peak memory, twice over).
    The usual document, without an issue, is kept as columns and never has states at all; its
    extensions column is compressed as it comes (``_Extensions``)."""
    parser = _parser(job)
    batches = _batches(job, parser)
    sink = _Extensions(job.examples if job.baseline else 0, fingerprints=job.fingerprints)
    clean = validate.CleanDocument(job.url, now=job.now, sink=sink)
    checked = None
    for batch, links in batches:
        if not clean.add(batch, links):
            entries = chain(clean.release(), chain.from_iterable(map(itemgetter(0), batches)))
            checked = validate.validate_document(entries, job.url, now=job.now)
            break
    else:
        if not clean.locs_ok():
            checked = validate.validate_document(clean.release(), job.url, now=job.now)
    parsed = parser.close()
    del parser
    result = _document(parsed)
    if not _has_entries(result):
        return result
    if checked is None:
        return _finish_clean(result, clean, sink, parsed.unkeyed_invalid, job)
    return _finish(result, checked, parsed.unkeyed_invalid, job, None)


class _Extensions:
    """A new document's extensions column, as ``CleanDocument`` takes it batch by batch
    (``validate.ExtensionSink``): compressed as it comes (``entryset.Stream``: a W1H child's
    18 MB of text were a third of a digest's peak, held as strings and then joined), with the
    sums ``_extension_data`` makes of the column worked out a batch at a time, and the first
    ``keep`` values (a baseline's example additions). With ``fingerprints``, it also works
    out the locs' fingerprints (``Digest.hashes``) a batch at a time, which the balance then
    uses."""

    __slots__ = ("_keep", "balance", "hashes", "head", "news", "stream")

    def __init__(self, keep: int, *, fingerprints: bool = False) -> None:
        self.stream = entryset.Stream()
        self.balance = 0  # extensions.balance of the entries so far
        self.news = 0  # news:news tags so far
        self.head: list[str | None] = []
        self.hashes: array[int] | None = array("Q") if fingerprints else None
        self._keep = keep

    def add(self, locs: Sequence[str], values: Sequence[str | None], links: Links | None,
            ) -> None:
        if len(self.head) < self._keep:
            self.head += values[: self._keep - len(self.head)]
        hashes = None
        if self.hashes is not None:
            hashes = array("Q", entryset.loc_hashes(locs))
            self.hashes += hashes
        text = self.stream.add(values)
        balance = (extensions.balance_of(locs, text, hashes) if links is None
                   else extensions.links_balance(locs, links, hashes))
        self.balance = (self.balance + balance) & extensions.MASK
        if '"news":' in text:
            self.news += extensions.news_count(values)

    def values(self) -> list[str | None]:
        """Every value taken (a document validated entry by entry after all): the sink no
        longer holds them."""
        values, self.stream = self.stream.values(), entryset.Stream()
        return values


def _parser(job: Job) -> parse.DocumentParser:
    return parse.DocumentParser(
        job.url, max_bytes=job.max_bytes, max_urls=job.max_urls, max_children=job.max_children
    )


def _parse(job: Job) -> ParsedDocument:
    parser = _parser(job)
    for chunk in _chunks(job):
        parser.feed(chunk)
    return parser.close()


def _batches(job: Job, parser: parse.DocumentParser,
             ) -> Iterator[tuple[list[Entry], Links | None]]:
    """The document's entries as each chunk yields them (not the document's if it fails),
    with the parser's ``Links`` of them if it gave them."""
    for chunk in _chunks(job):
        parser.feed(chunk)
        yield parser.take_batch()
    parser.close()
    yield parser.take_batch()


def _document(parsed: ParsedDocument) -> Digest:
    """The digest of what the parse itself found: a failure, an index's children, issues."""
    result = Digest(kind=parsed.kind, failure=parsed.failure)
    if parsed.failure is not None:
        return result
    result.issues = parsed.issues
    result.counts.update(i.rule for i in parsed.issues)
    result.counts.update(parsed.dropped_issues)
    result.dropped = dict(parsed.dropped_issues)
    if parsed.kind == "sitemapindex":
        result.children = parsed.children
    return result


def _has_entries(result: Digest) -> bool:
    return result.failure is None and result.kind != "sitemapindex"


def _finish(result: Digest, checked: validate.ValidatedDocument, unkeyed_invalid: int,
            job: Job, stored: entryset.Columns | None) -> Digest:
    result.counts.update(i.rule for i in checked.issues)
    result.entry_issues = checked.issues[: job.examples]
    result.duplicates = checked.duplicates
    if checked.duplicates:
        result.duplicate_locs = [i.loc for i in checked.issues
                                 if i.rule == "loc-duplicate" and i.loc is not None]
    columns = _fill(result, checked.entries, checked.rules, checked.invalid + unkeyed_invalid,
                    job, stored)
    checked.entries, checked.rules = {}, {}  # the states go before their columns are compressed
    result.data = _pack(result, columns, job.url, stored=stored)
    return result


def _finish_clean(result: Digest, clean: validate.CleanDocument, sink: _Extensions,
                  unkeyed_invalid: int, job: Job) -> Digest:
    """``_finish`` for a document without an issue, from its columns."""
    locs, fields = clean.take()
    result.entries = result.urls = len(locs)
    result.invalid = unkeyed_invalid
    result.hashes = None if sink.hashes is None else sink.hashes.tobytes()
    if job.baseline:  # the first additions only: their extensions are the sink's head
        n = len(sink.head)
        result.changes = list(_clean_additions(locs[:n], (*(f[:n] for f in fields[:3]),
                                                          sink.head)))
    else:
        result.changes = list(_clean_additions(locs, (*fields[:3], sink.stream.values())))
    columns = entryset.clean_columns(locs, fields, sink.stream)
    del locs, fields  # the values go before their columns are compressed
    result.balance = sink.balance
    _news(result, sink.news, job.url)
    result.data = _pack(result, columns, job.url, sink.stream)
    return result


def _pack(result: Digest, columns: entryset.Columns, url: str,
          stream: entryset.Stream | None = None, balance: int | None = None,
          stored: entryset.Columns | None = None) -> bytes:
    """The stored entry set: ``_annotate``'s columns, packed. ``stream``: their extensions,
    compressed as they came (``_Extensions``, which summed them already)."""
    _annotate(result, columns, url, stream, balance, stored)
    return entryset.pack(columns, stream)


def _annotate(result: Digest, columns: entryset.Columns, url: str,
              stream: entryset.Stream | None = None, balance: int | None = None,
              stored: entryset.Columns | None = None) -> None:
    """An entry set's columns with what the document itself said. ``balance``: the hreflang
    balance, if known (a re-read whose extensions are as stored); ``stored``: the set stored
    before, to tell whether this one is the same (``Digest.same``)."""
    if stream is None:
        _extension_data(result, columns, url, balance)
    entryset.annotate(columns, issues=[{"rule": i.rule, "message": i.message, "loc": i.loc}
                                       for i in result.issues],
                      dropped=result.dropped, duplicates=result.duplicate_locs,
                      balance=result.balance)
    result.lastmods = columns.present(1) - result.counts.get(_INVALID, 0)
    result.same = stored is not None and entryset.same(columns, stored)


def _extension_data(result: Digest, columns: entryset.Columns, url: str,
                    balance: int | None) -> None:
    """The document-wide part of SPEC 12: ``news-too-many``, and the hreflang balance the
    check sums over the target (unless known). One search of the extensions column each when
    it has none."""
    text = columns.texts[4]
    result.balance = 0
    if balance is not None:
        result.balance = balance
    elif '"alternates":' in text:
        hashes = None
        if result.hashes:  # the locs' fingerprints, in the same order
            hashes = array("Q")
            hashes.frombytes(result.hashes)
        result.balance = extensions.balance_of(columns.locs(), text, hashes)
    if '"news":' in text:
        _news(result, extensions.news_count(columns.column(4)), url)


def _news(result: Digest, news: int, url: str) -> None:
    """``news-too-many``, unless the parse found it already."""
    if news > extensions.MAX_NEWS and not any(i.rule == "news-too-many" for i in result.issues):
        result.issues.append(Issue("news-too-many", f"{news} news:news tags; the limit "
                                   f"is {extensions.MAX_NEWS} a document", document=url))
        result.counts["news-too-many"] += 1


def _clean_additions(locs: list[str], fields: tuple[list[str | None], ...]) -> Iterator[Change]:
    """``diff.diff({}, states)`` of a document without an issue, from its columns (entries
    with the same values share one state, as ``validate_document`` makes them)."""
    shared: dict[tuple[str | None, ...], EntryState] = {}
    for loc, lastmod, changefreq, priority, data in zip(locs, *fields, strict=True):
        key = (lastmod, changefreq, priority, data)
        state = shared.get(key)
        if state is None:
            state = entry_state(lastmod, changefreq, priority, data, True)
            if len(shared) < 10_000:
                shared[key] = state
        yield Change("added", loc, None, state)


def _fingerprints(locs: Iterable[str], job: Job) -> bytes | None:
    """``Digest.hashes`` of these locs, or None when the job asks for none."""
    return array("Q", entryset.loc_hashes(locs)).tobytes() if job.fingerprints else None


def _previous(job: Job) -> entryset.Columns | None:
    return None if job.previous is None else _stored(job)[0]


def _stored(job: Job) -> tuple[entryset.Columns, entrydelta.Base]:
    """The stored set's columns, and the full version it is or is a delta against (its header
    and the positions at which the stored set differs from it)."""
    assert job.previous is not None
    if job.previous_base is not None:
        return entrydelta.resolve(job.previous_base, job.previous)
    columns = entryset.unpack(job.previous)
    return columns, (job.base_id or 0, columns.header, [])


def _take(result: Digest, found: reread.Reread, unkeyed_invalid: int, job: Job,
          stored: entryset.Columns) -> None:
    result.counts.update(found.counts)
    result.entry_issues = found.issues
    result.entries = found.columns.size
    result.urls = result.entries - found.invalid
    result.invalid = found.invalid + unkeyed_invalid
    _annotate(result, found.columns, job.url, balance=found.balance, stored=stored)
    result.hashes = found.hashes
    result.rows, result.packs, result.row_counts = found.rows, found.packs, found.row_counts
    result.row_examples = found.row_examples
    result.lastmod_compared, result.lastmod_changed = found.lastmod_compared, found.lastmod_changed


def _fill(
    result: Digest, states: dict[str, EntryState], rules: dict[str, str], invalid: int, job: Job,
    stored: entryset.Columns | None,
) -> entryset.Columns:
    """Everything but the stored entry set, whose columns it returns (to be compressed once
    the states are dropped)."""
    result.entries = len(states)
    result.invalid = invalid
    result.hashes = _fingerprints(states, job)
    lastmods = None
    if job.baseline:
        result.changes = list(islice(_additions(states), job.examples))
    elif stored is None:  # a document new to the target: everything in it is new
        result.changes = diffing.diff({}, states)
    else:  # the stored set could not serve (reread): other locs, or verdicts of other rules
        lastmods = Lastmods(rules)
        result.changes = diff_stored(stored, states, lastmods)
        for loc in lastmods.regressed:
            result.counts[diffing.REGRESSED] += 1
            if len(result.entry_issues) < job.examples:
                result.entry_issues.append(validate.issue(
                    diffing.REGRESSED, Entry(loc, states[loc].lastmod), job.url))
    columns = entryset.columns(states, rules)  # with the verdicts diff_stored added
    result.urls = result.entries - len(columns.invalid())
    if lastmods is not None:
        result.lastmod_compared = columns.present(1) + lastmods.compared
        result.lastmod_changed = lastmods.changed
    return columns


def diff_stored(previous: entryset.Columns, states: dict[str, EntryState],
                lastmods: Lastmods | None = None) -> list[Change]:
    """``diff.diff`` against a stored entry set, without decoding it into EntryStates: its rows
    are plain tuples, and a state is built only for what changed (the same changes, in the
    same order).

    A set stored under other rules (``model.RULES_VERSION``) is compared by what the sitemap
    says, not by what the rules made of it: a verdict, or an empty element the old rules kept
    as "", that only the new rules see otherwise is no change (an upgrade raises no flood).

    With ``lastmods`` (the new entries' rule ids), the same loop counts the lastmods it
    compares and adds ``lastmod-regressed`` to the rule ids of each entry whose lastmod went
    back, or that had it before and keeps its lastmod (SPEC 12)."""
    before, old_rules = entryset.rows_and_rules(previous)
    if previous.header.get("verdicts") != RULES_VERSION:
        before = {loc: _as_now(row, states.get(loc)) for loc, row in before.items()}
    new_bad = old_bad = frozenset[str]()
    kept: list[str] = []
    if lastmods is not None:
        new_bad = _having(lastmods.rules, _INVALID)
        old_bad = _having(old_rules, _INVALID)
        lastmods.bad = len(new_bad)
        kept = [loc for loc in _having(old_rules, diffing.REGRESSED)
                if loc in states and loc in before and states[loc].lastmod == before[loc][0]]
    added = fresh = both = 0
    regressed: list[str] = []
    changes: list[Change] = []
    append = changes.append
    pop = before.pop
    for loc, after in states.items():
        row = pop(loc, None)
        if row is None:
            append(Change("added" if after.valid else "invalid", loc, None, after))
            if after.lastmod is not None and loc not in new_bad:
                added += 1
        elif row != (after.lastmod, after.changefreq, after.priority, after.extensions,
                     after.valid):
            kind: ChangeKind = "invalid" if row[4] and not after.valid else "changed"
            append(Change(kind, loc, entry_state(*row), after))
            lastmod, was = after.lastmod, row[0]
            if lastmod != was and lastmod is not None and loc not in new_bad:
                fresh += 1
                if was is not None and loc not in old_bad:
                    both += 1
                    if diffing.lastmod_earlier(lastmod, was):
                        regressed.append(loc)
    for loc, row in before.items():
        append(Change("removed", loc, entry_state(*row), None))
    if lastmods is not None:
        lastmods.added, lastmods.fresh, lastmods.changed = added, fresh, both
        rules = lastmods.rules
        for loc in chain(regressed, kept):
            ids = rules.get(loc)
            if ids is None:
                rules[loc] = diffing.REGRESSED
            elif diffing.REGRESSED not in ids.split():
                rules[loc] = f"{ids} {diffing.REGRESSED}"
            else:
                continue  # already there (drop_duplicates diffs its own set again)
            lastmods.regressed.append(loc)
    return changes


def _having(rules: dict[str, str], rule: str) -> frozenset[str]:
    """The locs whose rule ids include ``rule``."""
    return frozenset(loc for loc, ids in rules.items() if rule in ids.split())


def _as_now(row: entryset.Row, now: EntryState | None) -> entryset.Row:
    """A row stored under older rules as the current rules would have stored the same entry:
    empty fields unset, and the verdict of the entry as it is now when it is still listed."""
    lastmod, changefreq, priority, extensions, valid = row
    return (lastmod or None, changefreq or None, priority or None, extensions,
            valid if now is None else now.valid)


def _additions(states: dict[str, EntryState]) -> Iterator[Change]:
    for loc, state in states.items():
        yield Change("added" if state.valid else "invalid", loc, None, state)


def _chunks(job: Job) -> Iterator[bytes]:
    if job.body is not None:
        for start in range(0, len(job.body), _CHUNK):
            yield job.body[start : start + _CHUNK]
        return
    assert job.path is not None
    with open(job.path, "rb") as body:
        while chunk := body.read(_CHUNK):
            yield chunk


def drop_duplicates(result: Digest, duplicates: Collection[str], job: Job) -> None:
    """Drop locs an earlier document of the check listed (``loc-duplicate``), in place.

    The rare path (a URL in two children of one index): decode, drop, encode again.
    """
    stored = entryset.decode(whole(result, job))
    states, rules = stored.states, stored.rules
    dropped = set()
    for loc in duplicates:
        state = states.pop(loc, None)
        if state is None:
            continue
        dropped.add(loc)
        result.duplicate_locs.append(loc)
        for rule in (rules.pop(loc, "") or "").split():
            result.counts[rule] -= 1
        result.invalid -= not state.valid  # a duplicate now, as within a document
        result.duplicates += 1
        result.counts["loc-duplicate"] += 1
        if len(result.entry_issues) < job.examples:
            result.entry_issues.append(Issue(
                "loc-duplicate", "loc is listed more than once in this target", loc=loc,
                document=job.url,
            ))
    result.counts = +result.counts
    # A duplicate is not validated further: its other issues go (SPEC 4, as within a document).
    result.entry_issues = [
        i for i in result.entry_issues if i.loc not in dropped or i.rule == "loc-duplicate"
    ]
    # The check has fingerprints of this document's locs (it found their duplicates): it needs
    # those of the locs that stay.
    result.rows, result.packs, result.delta = b"", [], None  # _fill diffs again: positions move
    result.row_counts, result.row_examples = {}, []
    previous = _previous(job)
    columns = _fill(result, states, rules, result.invalid, replace(job, fingerprints=True),
                    previous)
    del states, rules, stored
    result.data = _pack(result, columns, job.url, stored=previous)
    _compact(result, job)


def rule_locs(result: Digest, job: Job, rule: str) -> list[str]:
    """The locs of a digested document whose verdicts include ``rule`` (the rare path, as
    ``drop_duplicates``: the entry set decoded)."""
    rules = entryset.decode(whole(result, job)).rules
    return [loc for loc, ids in rules.items() if rule in ids.split()]


def lift_rule(result: Digest, job: Job, rule: str, locs: Collection[str]) -> None:
    """Take ``rule`` back from the verdicts of these locs, in place (a warning that the check
    found does not hold, such as ``loc-out-of-scope`` of a cross-submitted sitemap): decode,
    drop, encode again, as ``drop_duplicates`` does."""
    stored = entryset.decode(whole(result, job))
    states, rules = stored.states, stored.rules
    lifted = set()
    for loc in locs:
        ids = rules.get(loc)
        if ids is None or rule not in ids.split():
            continue
        lifted.add(loc)
        kept = " ".join(r for r in ids.split() if r != rule)
        if kept:
            rules[loc] = kept
        else:
            del rules[loc]
    if not lifted:
        return
    result.counts[rule] -= len(lifted)
    result.counts = +result.counts
    result.entry_issues = [i for i in result.entry_issues
                           if i.rule != rule or i.loc not in lifted]
    result.rows, result.packs, result.delta = b"", [], None  # _fill diffs again
    result.row_counts, result.row_examples = {}, []
    previous = _previous(job)
    columns = _fill(result, states, rules, result.invalid, job, previous)
    del states, rules, stored
    result.data = _pack(result, columns, job.url, stored=previous)
    _compact(result, job)


class Spool:
    """A document's bytes as they arrive: in memory while small, then in a file of its own
    (which a worker process reads)."""

    def __init__(self) -> None:
        self.data: bytearray | None = bytearray()
        self.path: str | None = None
        self._file: IO[bytes] | None = None

    def write(self, chunk: bytes) -> None:
        if self.data is not None and len(self.data) + len(chunk) <= IN_PROCESS_MAX:
            self.data += chunk
            return
        if self._file is None:
            _big_document()
            import tempfile  # here, not at the top: see the imports

            self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in finish/close)
                prefix="sitemap-monitor-", suffix=".body", delete=False
            )
            self.path = self._file.name
            assert self.data is not None
            self._file.write(self.data)
            self.data = None
        self._file.write(chunk)

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()

    def read(self) -> bytes:
        if self.path is None:
            return bytes(self.data or b"")
        with open(self.path, "rb") as file:
            return file.read()

    def close(self) -> None:
        self.finish()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None


def return_big_buffers() -> None:
    """Have glibc hand big freed buffers (entry sets, joined columns) back to the system, and
    keep this process's heap in one arena.

    glibc serves a request over its mmap threshold with a mapping of its own, unmapped on free,
    but each such free raises the threshold to that size (up to 32 MiB): after a few documents,
    big buffers come from the heap and stay there, fragmented (about 10 MB of peak RSS in the
    W1 benchmark). Setting the threshold keeps it where it is. It is set just over the buffers
    that a fetch and a digest take and free by the thousand (``_MMAP_THRESHOLD``): at the
    default of 128 KiB, each of them was a mapping of its own, mapped, faulted in page by page
    and unmapped, and that was 0.25 s of CPU in W1's check (96 MB fetched, 12% of the main
    process) and a tenth of W1H's. The heap keeps up to ``_TRIM_THRESHOLD`` free at its top
    (128 KiB by default), or such a buffer freed there would go back to the system each time.

    Each thread that allocates would get an arena of its own (up to 8 a core), each holding
    its own freed memory: this process's threads (the check's, the digests', the database's)
    take turns under the GIL, and one arena serves them. With the higher threshold alone, W1's
    and W1H's peak grew by 5-10 MB; with one arena it is where it was.
    Elsewhere than glibc (musl, macOS) this does nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    mallopt(_M_ARENA_MAX, 1)


def _worker_start() -> None:
    # A worker only digests: automatic garbage collection would walk the ~200,000 objects of
    # each document again and again for ~12% of its time, and a digest makes no reference
    # cycles. Workers are replaced every 20 documents all the same.
    gc.disable()
    return_big_buffers()
    _exit_with_parent()


def _exit_with_parent() -> None:
    """End this worker when the process that started the pool dies, however it dies.

    A worker waits on its task queue, whose pipe it holds both ends of, so a parent killed by
    SIGKILL (the OOM killer, a node drain) left it waiting for ever, and with it the
    forkserver (which lives while a worker holds its "alive" pipe) and the resource tracker
    (while anyone holds its pipe): about 55 MB a set. The worker's parent sentinel is a pipe
    only that process writes to, so it reads as closed once it has died; a thread here waits
    for that and ends the worker at once, whatever it was doing. The forkserver and the
    resource tracker then see their pipes close and exit by themselves. (PR_SET_PDEATHSIG
    would not do: a worker's parent is the forkserver, not the daemon.)
    """
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch(sentinel: int) -> None:
        wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, args=(parent.sentinel,), name="parent-watch",
                     daemon=True).start()


def workers() -> int:
    """Worker processes for big documents: $SITEMAP_MONITOR_PARSE_WORKERS, else one fewer than
    the CPUs this process may use, at most 3 (this process digests too when they are busy)."""
    configured = os.environ.get(_ENV, "").strip()
    if configured:
        try:
            return max(0, int(configured))
        except ValueError:
            raise ValueError(f"{_ENV}={configured!r}: not a whole number") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return min(3, cpus - 1)


_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_ready: Future[int] | None = None  # done once a worker answered: the pool is warm
_busy = 0  # digests submitted to the pool and not back yet
_inline = 0  # big documents being digested in a thread of this process
_big = 0  # big documents this process has received
_gate: tuple[AbstractEventLoop, int, Semaphore] | None = None  # see _slot


def _big_document() -> None:
    """A big document is arriving. The first is digested here; from the second on, this
    process has more than one to digest (an index's children, many targets) and the pool
    pays for its start-up: start it now, so that it is ready when the body has arrived."""
    global _big
    _big += 1
    if _big >= 2:
        warm()


def warm() -> None:
    """Start the pool in the background (starting worker processes blocks for a while)."""
    size = workers()
    if size > 0 and _pool is None:
        threading.Thread(target=_get_pool, args=(size,), name="digest-pool-start",
                         daemon=True).start()


def _get_pool(size: int) -> ProcessPoolExecutor:
    global _pool, _ready
    with _lock:
        if _pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context(
                "forkserver" if "forkserver" in methods else "spawn"
            )
            if "forkserver" in methods:
                context.set_forkserver_preload(["monitor.digest"])
            # The forkserver (or a spawned worker) is a `python -c`, which puts the working
            # directory first on its path: a `monitor` folder there would be what the workers
            # import. PYTHONSAFEPATH (Python 3.11) leaves it out; the workers inherit it.
            os.environ.setdefault("PYTHONSAFEPATH", "1")
            _pool = ProcessPoolExecutor(
                max_workers=size, mp_context=context, initializer=_worker_start,
                max_tasks_per_child=_TASKS_PER_WORKER,
            )
            _ready = _pool.submit(os.getpid)
            atexit.register(shutdown)
        return _pool


def shutdown() -> None:
    """Stop the worker processes (at exit: before the interpreter tears its modules down)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


def pool_started() -> bool:
    """Whether this process has started its pool of worker processes."""
    return _pool is not None


def _reset_pool(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


def _slot(size: int) -> Semaphore:
    """One slot per worker process and one for this process: a big document waits here for
    whichever frees first. Handed to the pool at once, it would wait in the pool's queue behind
    another while this process had nothing to digest (a tenth of W1's first check, idle)."""
    import asyncio  # here, not at the top: see the imports

    global _gate
    loop = asyncio.get_running_loop()
    if _gate is None or _gate[0] is not loop or _gate[1] != size:
        _gate = (loop, size, asyncio.Semaphore(size + 1))
    return _gate[2]


async def run(job: Job, *, here: bool = True) -> Digest:
    """Digest a document: small ones in a thread here, big ones in a worker process, or in a
    thread here while the pool is still starting or every worker is busy (this process is one
    more worker). ``here`` False: a big one goes to a worker all the same, however long it
    waits for one (the caller holds what grows with its index, SPEC 3.4, and a digest of this
    process's own on top of it would be the peak)."""
    import asyncio  # here, not at the top: see the imports

    size = workers()
    if job.path is None or size == 0:
        return await asyncio.to_thread(digest, job)
    async with _slot(size):  # now a worker or this process is free (or the pool starting)
        warm_pool = _ready is not None and _ready.done()
        if here and _inline == 0 and (_busy >= size or not warm_pool):
            return await _here(job)
        return await _in_pool(job, size)


async def _here(job: Job) -> Digest:
    import asyncio  # here, not at the top: see the imports

    global _inline
    _inline += 1
    try:
        return await asyncio.to_thread(digest, job)
    finally:
        _inline -= 1


async def _in_pool(job: Job, size: int) -> Digest:
    import asyncio  # here, not at the top: see the imports

    global _busy
    _busy += 1
    pool = None
    try:
        pool = await asyncio.to_thread(_get_pool, size)  # may start it: not on the loop
        return await asyncio.get_running_loop().run_in_executor(pool, digest, job)
    except BrokenExecutor as exc:  # BrokenProcessPool
        if pool is not None:
            _reset_pool(pool)
        raise WorkerDied(f"{job.url}: the worker process parsing it died") from exc
    finally:
        _busy -= 1
