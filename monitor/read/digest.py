"""One document's CPU work: bytes -> parse -> validate -> diff -> stored entry set.

``digest`` is pure (no database, no network) and returns only what the check needs: counts,
the first issues and changes, the new entry set ready to store, and the fingerprints of its
locs (unless the job asks for none). Where it runs (a thread, or a worker process for a big
document) is ``workers.DigestPool``'s business.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import chain, islice
from operator import itemgetter
from typing import Literal

from monitor.codec import changepacks, changerows, columnstream, entrydelta, entryset
from monitor.codec.fingerprints import loc_hashes
from monitor.core.model import (
    Change,
    DocumentKind,
    Entry,
    EntryState,
    Issue,
    Links,
    ParsedDocument,
    addition_kind,
    entry_state,
    page,
)
from monitor.core.rules import RuleId
from monitor.read import alternates, extensions, parse, reread, validate
from monitor.read import diff as diffing

# The forkserver of workers.DigestPool preloads this module and forks every worker from itself:
# it imports neither asyncio nor the pool's modules.

__all__ = [
    "IN_PROCESS_MAX",
    "Digest",
    "Job",
    "ValidationPath",
    "base_value",
    "digest",
    "drop_duplicates",
    "lift_rule",
    "rule_locs",
    "validation_path",
    "whole",
]

IN_PROCESS_MAX = 1 << 20  # bytes; a document this big or smaller is digested in a thread
_CHUNK = 256 * 1024  # a batch of entries (_batches): bigger ones cost less a URL, up to here


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
    # version whose value is ``previous_base`` (monitor.codec.entrydelta), resolved here
    previous: bytes | None = None
    previous_base: bytes | None = None
    baseline: bool = False  # the target's first check: keep only the first additions
    examples: int = 1000  # issues (and additions of a baseline) kept in full; the rest counted
    fingerprints: bool = True  # False: Digest.hashes is None (check.pipeline._digest says why)
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
    # The entry set (monitor.codec.entryset); None for an index, and where ``delta`` alone stands
    # for it (``whole`` makes its value)
    data: bytes | None = None
    # The entry set as a delta against the job's base (codec.entrydelta), when it is worth one
    delta: bytes | None = None
    # ``data`` holds the stored set's entries and verdicts (new bytes, the same document)
    same: bool = False
    # array("Q") of fingerprints.loc_hash of each kept loc, in order; None if the job asked for none
    hashes: bytes | None = b""
    # Sum of the document's hreflang pairs (monitor.read.alternates.balance): 0 for most documents
    balance: int = 0
    # Every change against the previous entry set (none: every entry is new) but those in
    # ``rows``. On a baseline, only the first ``examples`` additions: ``urls`` were added,
    # ``entries - urls`` invalid.
    changes: list[Change] = field(default_factory=list)
    # The changes with a before and an after (changed, invalid): the rows to store, compact
    # (monitor.codec.changerows), their counts by kind and the first ``examples`` of them
    rows: bytes = b""
    # ``changed`` ones already packed at their positions in ``data`` (monitor.codec.changepacks),
    # which ``rows`` then lacks; counted and exemplified with the rows
    packs: list[changepacks.Packed] = field(default_factory=list)
    row_counts: dict[str, int] = field(default_factory=dict)
    row_examples: list[Change] = field(default_factory=list)
    # entries kept with a valid lastmod; of them, those listed in the previous entry
    # set with a valid lastmod too, and those of these whose lastmod changed
    lastmods: int = 0
    lastmod_compared: int = 0
    lastmod_changed: int = 0


def digest(job: Job) -> Digest:
    """Parse, validate and diff one document; encode its entries and changes for storage."""
    result = _digest(job)
    _compact(result, job)
    return result


def _compact(result: Digest, job: Job) -> None:
    """Move the changes with a before and an after into ``rows``, in order."""
    moved = [c for c in result.changes if c.before is not None and c.after is not None]
    if not moved:  # none, or they are rows already (monitor.read.reread)
        return
    result.changes = [c for c in result.changes if c.before is None or c.after is None]
    result.rows = changerows.encode(changerows.of(moved))
    result.row_counts = dict(Counter(c.kind for c in moved))
    result.row_examples = moved[: job.examples]


ValidationPath = Literal["new", "reread"]


def validation_path(job: Job) -> ValidationPath:
    """Which way a document is validated: the one place that chooses, and the map of them.

    A document is validated three ways, each equal in its verdicts to ``validate_document``
    (``tests/test_digest.py`` and ``tests/test_reread.py`` hold the others to it):

    - ``"new"``: nothing stored to compare with, or a baseline (``_digest_new``). Each batch
      of entries goes through ``validate.CleanDocument``, the fast path for entries without
      an issue; from the first batch that may hold one, the rest of the document goes entry
      by entry through ``validate.validate_document``.
    - ``"reread"``: a stored entry set to compare with (``_digest_reread``). The document is
      compared with it a batch at a time (``monitor.read.reread``), and only the entries that
      differ are validated: the others keep their stored verdicts. A document whose locs are
      not the stored ones, in the stored order, or whose stored verdicts come from other
      rules, is parsed again and validated whole by ``validate_document`` (``_digest_whole``).
    """
    return "new" if job.previous is None or job.baseline else "reread"


def _digest(job: Job) -> Digest:
    if validation_path(job) == "new":
        return _digest_new(job)
    return _digest_reread(job)


def _digest_reread(job: Job) -> Digest:
    """A document with a stored entry set: see ``validation_path``."""
    stored, base = _stored(job)
    # The usual re-read document lists the stored locs in the stored order: it is compared
    # with the stored set a batch at a time as it is parsed (monitor.read.reread). One that does
    # not is parsed again from its start, and validated and diffed whole.
    reader = reread.Rereader(stored, job.url, now=job.now, examples=job.examples,
                             fingerprints=job.fingerprints)
    parser = _parser(job)
    for batch, _ in _batches(job, parser):
        if not reader.add(batch):
            del parser, reader
            return _digest_whole(job, stored)
    parsed = parser.close()
    result = _document(parsed, job)
    if not _has_entries(result):
        return result
    found = reader.finish()
    if found is None:
        return _digest_whole(job, stored)
    _take(result, found, parsed.unkeyed_invalid, job, stored)
    # A delta pays only while under a quarter of the entries moved (entrydelta.compose): where
    # every lastmod moved, the 50,000 positions are not even gathered. It is kept when it is
    # at most half of its base, and then the new version is not packed whole at all (22 ms a
    # 50,000-URL child): the check stores the delta, and ``whole`` makes the value where it must.
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
    result = _document(parsed, job)
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
    result = _document(parsed, job)
    if not _has_entries(result):
        return result
    if checked is None:
        return _finish_clean(result, clean, sink, parsed.unkeyed_invalid, job)
    return _finish(result, checked, parsed.unkeyed_invalid, job, None)


class _Extensions:
    """A new document's extensions column, as ``CleanDocument`` takes it batch by batch
    (``validate.ExtensionSink``): compressed as it comes (``columnstream.Stream``: a 50,000-URL
    child's, with hreflang and images, 18 MB of text were a third of a digest's peak, held as
    strings and then joined), with the sums ``_extension_data`` makes of the column worked out a
    batch at a time, and the first ``keep`` values (a baseline's example additions). With
    ``fingerprints``, it also works out the locs' fingerprints (``Digest.hashes``) a batch at a
    time, which the balance then uses."""

    __slots__ = ("_keep", "balance", "hashes", "head", "news", "stream")

    def __init__(self, keep: int, *, fingerprints: bool = False) -> None:
        self.stream = columnstream.Stream()
        self.balance = 0  # alternates.balance of the entries so far
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
            hashes = array("Q", loc_hashes(locs))
            self.hashes += hashes
        text = self.stream.add(values)
        balance = (alternates.balance_of(locs, text, hashes) if links is None
                   else alternates.links_balance(locs, links, hashes))
        self.balance = (self.balance + balance) & alternates.MASK
        if '"news":' in text:
            self.news += extensions.news_count(values)

    def values(self) -> list[str | None]:
        """Every value taken (a document validated entry by entry after all): the sink no
        longer holds them."""
        values, self.stream = self.stream.values(), columnstream.Stream()
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


def _document(parsed: ParsedDocument, job: Job) -> Digest:
    """The digest of what the parse itself found: a failure, an index's children (and their
    lastmods' issues), issues."""
    result = Digest(kind=parsed.kind, failure=parsed.failure)
    if parsed.failure is not None:
        return result
    if parsed.child_lastmods:
        parsed.issues += validate.index_issues(parsed.child_lastmods, job.url, job.now)
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
                                 if i.rule == RuleId.LOC_DUPLICATE and i.loc is not None]
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
          stream: columnstream.Stream | None = None, balance: int | None = None,
          stored: entryset.Columns | None = None) -> bytes:
    """The stored entry set: ``_annotate``'s columns, packed. ``stream``: their extensions,
    compressed as they came (``_Extensions``, which summed them already)."""
    _annotate(result, columns, url, stream, balance, stored)
    return entryset.pack(columns, stream)


def _annotate(result: Digest, columns: entryset.Columns, url: str,
              stream: columnstream.Stream | None = None, balance: int | None = None,
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
    result.lastmods = columns.present(1) - result.counts.get(diffing.INVALID, 0)
    result.same = stored is not None and entryset.same(columns, stored)


def _extension_data(result: Digest, columns: entryset.Columns, url: str,
                    balance: int | None) -> None:
    """The document-wide extension rules: ``news-too-many``, and the hreflang balance the
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
        result.balance = alternates.balance_of(columns.locs(), text, hashes)
    if '"news":' in text:
        _news(result, extensions.news_count(columns.column(4)), url)


def _news(result: Digest, news: int, url: str) -> None:
    """``news-too-many``, unless the parse found it already."""
    if news > extensions.MAX_NEWS and not any(
            i.rule == RuleId.NEWS_TOO_MANY for i in result.issues):
        result.issues.append(Issue(RuleId.NEWS_TOO_MANY, f"{news} news:news tags; the limit "
                                   f"is {extensions.MAX_NEWS} a document", document=url))
        result.counts[RuleId.NEWS_TOO_MANY] += 1


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
    return array("Q", loc_hashes(locs)).tobytes() if job.fingerprints else None


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
        lastmods = diffing.Lastmods(rules)
        result.changes = diffing.diff_stored(stored, states, lastmods)
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


def _additions(states: dict[str, EntryState]) -> Iterator[Change]:
    for loc, state in states.items():
        yield Change(addition_kind(state.valid), loc, None, state)


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
    """Drop the locs of pages an earlier document of the check listed (``loc-duplicate``:
    ``duplicates`` are that document's locs; a loc of the same page with another #fragment or
    escapes in another case is one too), in place, in document order.

    The rare path (a URL in two children of one index): decode, drop, encode again.
    """
    stored = entryset.decode(whole(result, job))
    states, rules = stored.states, stored.rules
    pages = set(map(page, duplicates))
    dropped = set()
    for loc in [loc for loc in states if loc in pages or page(loc) in pages]:
        state = states.pop(loc)
        dropped.add(loc)
        result.duplicate_locs.append(loc)
        for rule in (rules.pop(loc, "") or "").split():
            result.counts[rule] -= 1
        result.invalid -= not state.valid  # a duplicate now, as within a document
        result.duplicates += 1
        result.counts[RuleId.LOC_DUPLICATE] += 1
        if len(result.entry_issues) < job.examples:
            result.entry_issues.append(Issue(
                RuleId.LOC_DUPLICATE, "loc is listed more than once in this target", loc=loc,
                document=job.url,
            ))
    result.counts = +result.counts
    # A duplicate is not validated further: its other issues go (as within a document).
    result.entry_issues = [
        i for i in result.entry_issues if i.loc not in dropped or i.rule == RuleId.LOC_DUPLICATE
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

