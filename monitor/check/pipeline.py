"""ONE check of one target: the only module that composes the stages.

fetch -> parse -> validate -> diff -> store, document by document, in one transaction
. The children of an index are fetched a few at a time and digested (parse, validate,
diff, encode: ``monitor.read.digest``) in worker processes, but applied to the check strictly in
their listed order. Memory holds a few documents' entries at a time: each document's
entries are stored as one entry set as soon as it is read; a re-check diffs each document
against its own previous entry set and keeps only the changes. Removals and additions are held
back to the end, so a URL that moves between two children is neither added nor removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from array import array
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urljoin

from sqlalchemy import Connection, Engine

from monitor.check import robotsread, targetwide
from monitor.check import robotswatch as robots
from monitor.codec import changerows, entryset
from monitor.config import Alerts, Target
from monitor.errors import FetchError, WorkerDied
from monitor.indexnow import submissions
from monitor.model import (
    RULES,
    RULES_VERSION,
    Change,
    CheckResult,
    DocumentResult,
    Entry,
    EntryState,
    Issue,
    utcnow,
)
from monitor.net.addresses import is_private_target
from monitor.read import digest as digesting
from monitor.read import extensions, parse, validate
from monitor.read.fetch import Fetcher
from monitor.read.robotstxt import robots_url
from monitor.read.workers import DigestPool, Spool
from monitor.rules import RuleId, rule_id
from monitor.store import checkwriter as store
from monitor.store import robotsfiles as robots_store
from monitor.store.checkwriter import DocumentState, StoredSet

__all__ = ["run_check", "utcnow"]

INDEX_KINDS = ("sitemapindex", "robots")
NOT_RECIPROCAL: RuleId = "hreflang-not-reciprocal"
_AHEAD_MAX = 64  # children started and not yet applied, unchanged ones included
ROBOTS_HOSTS = 10  # robots.txt watched per target: its sitemaps' hosts, the first ten
_OUT_OF_SCOPE = "loc-out-of-scope"
# Past this many loc fingerprints held (8 MB), this process leaves big documents to the worker
# processes: the fingerprints grow with the index, and a digest of its own on top
# of them was the check's peak (an index of 50 x 50,000 URLs, tree PSS: 147 / 152 -> 140-142 / 141
# MB on SQLite / PostgreSQL, 27-28 -> 28-32 s). An index of up to 20 children of 50,000 URLs is
# digested on every core as before.
DIGEST_HERE_MAX = 1_000_000
# lastmod-churn: on two re-checks in a row, at least this share (in percent) of at
# least this many compared lastmods changed


async def run_check(
    target: Target,
    *,
    engine: Engine,
    fetcher: Fetcher,
    alerts: Alerts | None = None,
    now: Callable[[], datetime] | None = None,
    max_changes: int = 1000,
    in_transaction: Callable[[Connection], None] | None = None,
    digests: DigestPool | None = None,
    robots_cache: robotsread.RobotsCache | None = None,
) -> CheckResult:
    """Check one target: fetch, parse, validate, diff and store one snapshot; never raises
    for anything the target's server does (a failed check is a value).

    ``in_transaction`` runs in the snapshot's transaction just before it commits (the daemon
    gives its lease back there, saving a transaction per check). ``digests`` is where big
    documents are digested: a caller that runs many checks passes one pool to all of them;
    without one, the check makes its own and stops its workers at the end. ``robots_cache``:
    the robots.txt versions this check reads are put in force there (the URL checks' cache).
    """
    pool = digests or DigestPool()
    try:
        return await _run(target, engine, fetcher, alerts, now or utcnow, max_changes,
                          in_transaction, pool, robots_cache)
    finally:
        if pool is not digests:
            await asyncio.to_thread(pool.shutdown)


async def _run(
    target: Target,
    engine: Engine,
    fetcher: Fetcher,
    alerts: Alerts | None,
    clock: Callable[[], datetime],
    max_changes: int,
    in_transaction: Callable[[Connection], None] | None,
    digests: DigestPool,
    robots_cache: robotsread.RobotsCache | None,
) -> CheckResult:
    check = _Check(target, engine, fetcher, alerts, clock(), max_changes, digests)
    check.in_transaction = in_transaction
    check.robots_cache = robots_cache
    try:
        return await check.run(clock)
    except _PastDeadline:
        pass
    # Past its deadline the walk was cancelled and everything it wrote rolled back; the check
    # stores a failed snapshot instead, as for a root that could not be read: the previous
    # entries stay current, and the check's slot is free again.
    failed = _Check(target, engine, fetcher, alerts, check.started, max_changes, digests)
    failed.in_transaction = in_transaction
    return await failed.run(clock, timed_out=True)


class _PastDeadline(Exception):
    """The walk of a check ran past the target's ``check_timeout``."""


@dataclass(slots=True)
class _Got:
    """One document as fetched (and digested) ahead of its turn."""

    url: str
    doc: DocumentResult
    previous: DocumentState | None
    error: FetchError | None = None
    unchanged: bool = False
    robots: str | None = None  # the text of a site's robots.txt
    job: digesting.Job | None = None
    digest: digesting.Digest | None = None
    stored: StoredSet | None = None  # the document's entry set before this check


@dataclass(slots=True)
class _Examples:
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


class _Check:
    """The state of one check while it walks the target's documents."""

    def __init__(
        self,
        target: Target,
        engine: Engine,
        fetcher: Fetcher,
        alerts: Alerts | None,
        started: datetime,
        max_changes: int,
        digests: DigestPool,
    ) -> None:
        self.target = target
        self.digests = digests
        self.settings = target.settings
        self.engine = engine
        self.fetcher = fetcher
        self.alerts = alerts
        self.started = started
        self.result = CheckResult(target=target.name, url=target.url, outcome="ok",
                                  started_at=started)
        self.changes = _Examples(max_changes)
        self.issue_limit = max_changes
        self.issue_counts: Counter[str] = Counter()
        self.check_issues: list[Issue] = []  # those counted here (not a document's own)
        self.seen = entryset.Fingerprints()  # of every loc read this check
        self.digesting = 0  # documents being digested
        self.written: list[str] = []  # documents whose new entry set this check stored
        self.stored_now: set[str] = set()  # of those, the ones whose entry set was written
        self.balances: dict[str, int] = {}  # hreflang balance of each document digested
        self.visited: set[str] = set()
        self.read: dict[str, DocumentState] = {}  # documents read completely this check
        self.untouched: list[str] = []  # 304 or same hash: previous state stands
        self.failed: set[str] = set()  # previous state stands, with its subtree
        self.allow_private = target.settings.allow_private
        self.conn: Connection | None = None
        self.db_lock = asyncio.Lock()
        self.snapshot_id: int | None = None
        self.changes_written = 0  # change rows written so far (the target's change_count)
        self.first = True  # no previous documents: nothing to diff against
        self.state: store.TargetState | None = None
        # the robots.txt versions in force: url -> (text, etag, last_modified)
        self.robots_stored: dict[str, tuple[str | None, str | None, str | None]] = {}
        self.root_robots: robots.Answer | None = None  # a site target's root, as read
        self.robots_cache: robotsread.RobotsCache | None = None
        # the Sitemap: lines of the robots.txt of hosts a sitemap lists URLs on (read once)
        self.cross_robots: dict[str, frozenset[str]] = {}
        # Held back to the end of the walk (re-checks only): see the module docstring.
        self.pending_removed: dict[str, EntryState] = {}
        self.pending_added: dict[str, EntryState] = {}
        self.closed: list[int] = []  # entry sets of documents gone from their index
        self.dropped: list[str] = []
        # Children in flight: one digested in each worker and here, and two fetched ahead
        # (one waiting for a free digester, one that finished before the child before it).
        self.window = digests.size + 3
        self.in_transaction: Callable[[Connection], None] | None = None
        # entries listed before and now with a valid lastmod on both sides, and those
        # of them whose lastmod changed (an unchanged document's count as unchanged)
        self.lastmods_compared = 0
        self.lastmods_changed = 0

    # -- the walk -------------------------------------------------------------------------

    async def run(self, clock: Callable[[], datetime], *, timed_out: bool = False,
                  ) -> CheckResult:
        """Walk the target and store the snapshot; with ``timed_out`` (an earlier run of this
        check ran past its check_timeout) store only that failure, reading nothing."""
        t0 = time.monotonic()
        limit = self.settings.check_timeout
        # The deadline bounds the walk (the servers' part); the final write always completes,
        # so a check is never stored twice, once whole and once as timed out.
        deadline = asyncio.timeout_at(asyncio.get_running_loop().time() + limit)
        # Connect, begin and load in one trip to a database thread, as _end writes, commits
        # and closes in one: a thread hop costs more CPU than a small query.
        conn = self.conn = await asyncio.to_thread(self._open)
        try:
            assert self.state is not None
            self.first = not self.state.documents
            if not timed_out:
                try:
                    async with deadline:
                        self.allow_private = (self.allow_private
                                              or await is_private_target(self.target.url))
                        await self._walk_root()
                        await self._watch_robots()
                except TimeoutError:
                    if not deadline.expired():
                        raise
                    raise _PastDeadline from None
            else:
                elapsed = (clock() - self.started).total_seconds()
                t0 -= elapsed  # the duration is the whole check's
                self._time_out(limit, elapsed)
            await self._finish(clock, t0)  # commits and closes
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_rollback, conn))
            raise
        finally:
            if not conn.closed:
                await asyncio.shield(asyncio.to_thread(conn.close))
        return self.result

    def _open(self) -> Connection:
        """A connection in a transaction, with the target's stored state loaded."""
        conn = self.engine.connect()
        try:
            conn.begin()
            self.state = store.load_state(conn, self.target.name, self.target.url, self.started)
            self.robots_stored = robots_store.current(conn, self.state.target_id)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _db(self, fn: Callable[..., Any], *args: Any, **options: Any) -> Any:
        assert self.conn is not None
        async with self.db_lock:  # one connection: one statement at a time
            return await asyncio.to_thread(fn, self.conn, *args, **options)

    async def _walk_root(self) -> None:
        url = self.target.url
        if self.target.site:
            url = urljoin(url if url.endswith("/") else url + "/", "/robots.txt")
        doc = self._admit(url, None, frozenset())
        assert doc is not None
        got = await self._obtain(url, doc, root=True)
        await self._apply(got, 0, frozenset(), root=True)

    async def _watch_robots(self) -> None:
        """The robots.txt of each host the target's documents live on, fetched
        conditionally, judged by ``monitor.check.robotswatch``, its versions kept in the check's
        transaction."""
        hosts: dict[str, list[str]] = {}
        for doc in self.result.documents:
            robots_of = robots_url(doc.url)
            if robots_of not in hosts and len(hosts) >= ROBOTS_HOSTS:
                continue
            sitemaps = hosts.setdefault(robots_of, [])
            if doc.url != robots_of:
                sitemaps.append(doc.url)
        stored = self.robots_stored
        root, root_robots_url = self.target.url, robots_url(self.target.url)
        # A site target's root is its robots.txt, read by this check already (a 304 of it
        # before its first version is stored is read again, whole).
        root_robots = self.root_robots if self.target.site else None
        if root_robots is not None and root_robots.not_modified and root_robots_url not in stored:
            root_robots = None
        answers = await asyncio.gather(*(
            self._robots_answer(url, stored.get(url))
            if root_robots is None or url != root_robots_url else _answered(root_robots)
            for url in hosts))
        versions = []
        for (url, sitemaps), answer in zip(hosts.items(), answers, strict=True):
            previous = None if url not in stored else robots.Stored(*stored[url])
            found = robots.judge(url, previous, answer, sitemaps=sitemaps, listed=(
                [root] if not self.target.site and url == root_robots_url else []))
            for issue in found.issues:
                self._issue_obj(issue)
            self.result.robots.append(found.as_json(with_text=found.changed))
            if self.robots_cache is not None and found.outcome != "unreachable":
                self.robots_cache.offer(url, found.text, self.started)
            # new validators to keep (an answer without any, a 304 of the root, keeps the old)
            moved = (answer.etag or answer.last_modified) is not None and (
                (answer.etag, answer.last_modified) != (stored.get(url) or (None,) * 3)[1:])
            if found.outcome != "unreachable" and (found.store or moved):
                versions.append(robots_store.Version(
                    url, answer.status, found.text, answer.etag, answer.last_modified,
                    new=found.store, validators_moved=moved, changed=found.changed,
                    before=found.before))
        if not versions:  # an unchanged robots.txt writes nothing
            return
        if any(v.changed for v in versions):
            await self._snapshot()
        written = await self._db(robots_store.save, self._target_id(), self.snapshot_id,
                                 self.started, versions)
        self.changes_written += written

    async def _robots_answer(self, url: str, stored: tuple[str | None, str | None, str | None]
                             | None) -> robots.Answer:
        etag, modified = (None, None) if stored is None else stored[1:]
        answer, wire = await robotsread.read(self.fetcher, url, self.settings, etag=etag,
                                             last_modified=modified,
                                             allow_private=self.allow_private)
        self.result.fetched_bytes += wire
        return answer

    def _time_out(self, limit: float, elapsed: float) -> None:
        """The check's outcome when it ran past ``check_timeout``: failed at its root."""
        doc = DocumentResult(url=self.target.url, outcome="failed")
        self.result.documents.append(doc)
        self._fail(doc, "check-timeout", f"the check did not finish within its check_timeout "
                   f"of {limit:g} s ({elapsed:.1f} s)", None, root=True)

    def _admit(self, url: str, parent: str | None, ancestors: frozenset[str],
               ) -> DocumentResult | None:
        """The document's result row, or None when it is not to be read (cycle, seen, scope)."""
        if url in ancestors:
            self._issue("index-cycle", f"{url} lists an index that reaches it again", parent)
            return None
        if url in self.visited:
            return None
        self.visited.add(url)
        if parent is not None and not self._in_scope(url, parent):
            return None
        doc = DocumentResult(url=url, outcome="failed", parent=parent)
        self.result.documents.append(doc)
        return doc

    async def _obtain(self, url: str, doc: DocumentResult, *, root: bool = False) -> _Got:
        """Fetch a document and digest it; touches nothing the listed order matters to."""
        assert self.state is not None
        got = _Got(url, doc, self.state.documents.get(url))
        site = root and self.target.site
        try:
            body = await self._fetch(url, got.previous, doc)
        except FetchError as exc:
            got.error = exc
            if site:
                self.root_robots = _robots_failed(exc)
            return got
        if body is None:  # 304 or the same bytes as last time
            got.unchanged = True
            if site:
                self.root_robots = robots.Answer(doc.http_status, not_modified=True)
            return got
        try:
            if site:
                got.robots = body.read()[:robots.MAX_BYTES].decode("utf-8", errors="replace")
                self.root_robots = robots.Answer(doc.http_status, got.robots.lstrip("\ufeff"),
                                                 etag=doc.etag,
                                                 last_modified=doc.last_modified)
                return got
            await self._digest(got, body)
        except WorkerDied as exc:
            got.error = FetchError("worker-died", str(exc))
        finally:
            body.close()
        return got

    async def _digest(self, got: _Got, body: Spool) -> None:
        if not self.first:
            sets = await self._db(store.load_entry_sets, self._target_id(), [got.url],
                                  whole=False)
            got.stored = sets.get(got.url)
        limits = self.target.limits
        got.job = digesting.Job(
            url=got.url, now=self.started, max_bytes=limits.max_bytes,
            max_urls=limits.max_urls, max_children=limits.max_children,
            body=None if body.data is None else bytes(body.data), path=body.path,
            previous=None if got.stored is None else got.stored.data,
            previous_base=None if got.stored is None else got.stored.base_data,
            base_id=None if got.stored is None else got.stored.base_id,
            baseline=self.first, examples=self.issue_limit,
            # The fingerprints of a document's locs find their duplicates in the documents read
            # after it. A first check reads every document; a re-check reads those that changed,
            # and the first of them digested while nothing else is may well be the only one
            # (one sitemap, or one changed child of an index): _dedupe works its fingerprints
            # out of its entry set only if another document comes.
            fingerprints=self.first or self.digesting > 0 or bool(self.seen),
        )
        self.digesting += 1
        try:
            got.digest = await self.digests.run(got.job,
                                                here=self.seen.held < DIGEST_HERE_MAX)
        finally:
            self.digesting -= 1

    async def _apply(self, got: _Got, depth: int, ancestors: frozenset[str], *,
                     root: bool = False) -> None:
        """Take a document's outcome into the check, in its listed order."""
        doc, previous = got.doc, got.previous
        if got.error is not None:
            if got.error.kind in RULES:  # a reason with a rule id (size-too-large, gzip-invalid)
                self._issue(rule_id(got.error.kind), got.error.message, got.url)
            self._fail(doc, got.error.kind, got.error.message, got.error.status, root=root)
            return
        if got.unchanged:
            assert previous is not None
            doc.kind = previous.kind  # type: ignore[assignment]
            doc.urls, doc.invalid = previous.urls, previous.invalid
            doc.duplicates = previous.issue_counts.get("loc-duplicate", 0)
            self.lastmods_compared += _lastmods(previous)
            await self._children(got.url, previous.children, depth, ancestors, previous.kind)
            return
        if got.robots is not None:
            await self._robots(got.url, got.robots, doc, depth, ancestors)
            return
        await self._sitemap(got, depth, ancestors, root=root)

    async def _fetch(
        self, url: str, previous: DocumentState | None, doc: DocumentResult
    ) -> Spool | None:
        """The document's body, or None when it did not change since last time."""
        etag = previous.etag if previous else None
        last_modified = previous.last_modified if previous else None
        async with self.fetcher.fetch(
            url, self.settings, etag=etag, last_modified=last_modified,
            allow_private=self.allow_private,
        ) as response:
            doc.http_status = response.status
            doc.etag = response.etag or etag
            doc.last_modified = response.last_modified or last_modified
            if response.not_modified:
                self.result.fetched_bytes += response.wire_bytes
                if previous is None:
                    raise FetchError("protocol", f"{url}: 304 Not Modified without a stored copy")
                doc.outcome = "not_modified"
                doc.sha256 = previous.sha256
                self._touch(previous, doc)
                return None
            body = Spool(on_big=self.digests.big_document)
            digest = hashlib.sha256()
            try:
                async for chunk in response.chunks():
                    digest.update(chunk)
                    body.write(chunk)
                    doc.bytes += len(chunk)
                body.finish()
            except BaseException:
                body.close()
                raise
            finally:
                self.result.fetched_bytes += response.wire_bytes
        doc.sha256 = digest.hexdigest()
        if previous is not None and previous.sha256 == doc.sha256:
            body.close()
            doc.outcome = "unchanged"
            self._touch(previous, doc)
            return None
        return body

    def _touch(self, previous: DocumentState, doc: DocumentResult) -> None:
        """Keep a document's previous state; store new validators if the server sent some."""
        if (doc.etag, doc.last_modified) == (previous.etag, previous.last_modified):
            self.untouched.append(previous.url)
        else:
            self.read[previous.url] = replace(
                previous, etag=doc.etag, last_modified=doc.last_modified
            )

    async def _robots(
        self, url: str, text: str, doc: DocumentResult, depth: int, ancestors: frozenset[str],
    ) -> None:
        limit = self.target.limits.max_children
        relative: list[str] = []
        children = parse.parse_robots(text, url, limit=limit + 1, relative=relative)
        doc.outcome, doc.kind = "ok", "robots"
        for value in relative:
            self._issue("robots-sitemap-relative", f"{url} has a relative Sitemap: line "
                        f"{value!r}: search engines require a full URL, it is ignored", url)
        if len(children) > limit:
            self._issue("index-too-many", f"{url} lists more than {limit} sitemaps; "
                        f"the first {limit} are read", url)
            del children[limit:]
        if not children:
            self._fail(doc, "no-sitemaps", f"{url} lists no Sitemap: lines", None, root=True)
            return
        self.read[url] = self._state(url, doc, "robots", children=children)
        await self._children(url, children, depth, ancestors, "robots")

    async def _sitemap(
        self, got: _Got, depth: int, ancestors: frozenset[str], *, root: bool,
    ) -> None:
        url, doc, found = got.url, got.doc, got.digest
        assert found is not None
        doc.kind = found.kind
        if found.failure is not None:
            self._issue_obj(found.failure)
            self._fail(doc, found.failure.rule, found.failure.message, doc.http_status,
                       root=root)
            return
        doc.outcome = "ok"
        for issue in found.issues:
            self._issue_obj(issue, count=False)
        stored_issues = [
            {"rule": i.rule, "message": i.message, "loc": i.loc} for i in found.issues
        ]
        if found.kind == "sitemapindex":
            if doc.parent is not None and self._kind(doc.parent) == "sitemapindex":
                self._issue("index-nested", f"{url} is a sitemap index inside an index",
                            doc.parent)
            self.read[url] = self._state(url, doc, "sitemapindex", children=found.children,
                                         issues=stored_issues, counts=found.counts)
            if got.stored is not None:  # it listed URLs before: they are gone from it
                await self._gone([got.stored])
            await self._children(url, found.children, depth, ancestors, "sitemapindex")
            return
        await self._cross_submitted(got)
        await self._dedupe(got)
        for issue in found.entry_issues:
            self._issue_obj(issue, count=False)
        doc.urls, doc.invalid, doc.duplicates = found.urls, found.invalid, found.duplicates
        self.read[url] = self._state(url, doc, found.kind or "urlset", issues=stored_issues,
                                     counts=found.counts, lastmods=found.lastmods)
        await self._entries(got)

    async def _children(
        self, url: str, children: list[str], depth: int, ancestors: frozenset[str],
        kind: str | None,
    ) -> None:
        """Read an index's children: a few fetched ahead, each applied in its turn."""
        if kind not in INDEX_KINDS:
            return
        if depth + 1 > self.target.limits.max_depth:
            self._issue("index-nested", f"{url}: index depth limit "
                        f"{self.target.limits.max_depth} reached; children not read", url)
            self.failed.add(url)
            return
        inner = ancestors | {url}
        ahead: deque[asyncio.Task[_Got]] = deque()
        try:
            for child in children:
                doc = self._admit(child, url, inner)
                if doc is None:
                    continue
                await self._make_room(ahead, depth + 1, inner)
                ahead.append(asyncio.create_task(self._obtain(child, doc)))
            while ahead:
                await self._apply(await ahead.popleft(), depth + 1, inner)
        finally:
            for task in ahead:
                task.cancel()
            if ahead:
                await asyncio.gather(*ahead, return_exceptions=True)

    async def _make_room(self, ahead: deque[asyncio.Task[_Got]], depth: int,
                         ancestors: frozenset[str]) -> None:
        """Apply the children at the head that are done; return once another may start.

        At most ``window`` children are in flight or read and waiting for their turn. One that
        came back unchanged (304) holds nothing and does not count: while a changed child is
        digested, the unchanged ones after it are fetched (up to ``_AHEAD_MAX`` in all).
        """
        while True:
            while ahead and ahead[0].done():
                await self._apply(ahead.popleft().result(), depth, ancestors)
            held = len(ahead) - sum(map(_unchanged, ahead))
            if held < self.window and len(ahead) < _AHEAD_MAX:
                return
            # The head is not done (it would have been applied): something is pending.
            await asyncio.wait([task for task in ahead if not task.done()],
                               return_when=asyncio.FIRST_COMPLETED)

    def _kind(self, url: str) -> str | None:
        """The kind of a document read this check, else of its stored state."""
        assert self.state is not None
        state = self.read.get(url) or self.state.documents.get(url)
        return None if state is None else state.kind

    def _in_scope(self, url: str, parent: str) -> bool:
        relative = validate.child_issue(url, parent)
        if relative is not None:
            self._issue_obj(relative)
            return False
        where = validate.child_scope(url, parent)
        if where is None or self._kind(parent) == "robots":
            return True  # a robots.txt may name sitemaps on any host (a CDN, say)
        if self.settings.allow_cross_host_children:
            return True
        if where == "directory":
            # Out of the index's scope as another host is (sitemaps.org, Google): not read.
            self._issue("index-child-out-of-scope", f"{url} is outside the directory of its "
                        "index; not fetched", parent, loc=url)
            return False
        self._issue("index-child-out-of-scope",
                    f"{url} is on another host than its index; not fetched", parent)
        return False

    def _fail(
        self, doc: DocumentResult, kind: str, message: str, status: int | None, *, root: bool,
    ) -> None:
        doc.outcome, doc.error, doc.http_status = "failed", message, status or doc.http_status
        self.failed.add(doc.url)
        if root:
            self.result.outcome = "failed"
            self.result.error_kind, self.result.error_message = kind, message
        else:
            self._issue("child-fetch-failed", message, doc.parent, loc=doc.url)

    def _issue(self, rule: RuleId, message: str, document: str | None, loc: str | None = None,
               ) -> None:
        self._issue_obj(Issue(rule, message, loc=loc, document=document))

    def _issue_obj(self, issue: Issue, *, count: bool = True) -> None:
        if count:
            self.issue_counts[issue.rule] += 1
            self.check_issues.append(issue)
        if len(self.result.issues) < self.issue_limit:
            self.result.issues.append(issue)

    def _state(
        self, url: str, doc: DocumentResult, kind: str, *, children: list[str] | None = None,
        issues: list[dict[str, Any]] | None = None, counts: Counter[str] | None = None,
        lastmods: int | None = None,
    ) -> DocumentState:
        return DocumentState(
            url=url, parent_url=doc.parent, kind=kind, etag=doc.etag,
            last_modified=doc.last_modified, sha256=doc.sha256, urls=doc.urls,
            invalid=doc.invalid, children=children or [], issues=issues or [],
            issue_counts=dict(counts or {}), lastmods=lastmods,
        )

    # -- entries and changes --------------------------------------------------------------

    async def _cross_submitted(self, got: _Got) -> None:
        """Take ``loc-out-of-scope`` back from the locs on hosts whose robots.txt names this
        sitemap (or its index, or the target's URL) in a ``Sitemap:`` line: cross-submission,
        which Google and Bing document. The hosts are those of the document's first issues
        (its examples), each host's robots.txt read once a check; only when one of them names
        the sitemap is the entry set decoded, and every loc on such a host lifted."""
        found, job = got.digest, got.job
        assert found is not None
        assert job is not None
        if not found.counts.get(_OUT_OF_SCOPE):
            return
        hosts = list(dict.fromkeys(robots_url(i.loc) for i in found.entry_issues
                                   if i.rule == _OUT_OF_SCOPE and i.loc is not None))
        names = {got.url, self.target.url} | ({got.doc.parent} if got.doc.parent else set())
        listing = set()
        for robots_of in hosts[:ROBOTS_HOSTS]:
            named = self.cross_robots.get(robots_of)
            if named is None:
                answer = await self._robots_answer(robots_of, None)
                ok = answer.status is not None and 200 <= answer.status < 300
                named = frozenset(parse.parse_robots(answer.text or "", robots_of) if ok else ())
                self.cross_robots[robots_of] = named
            if not named.isdisjoint(names):
                listing.add(robots_of)
        if not listing:
            return
        locs = await asyncio.to_thread(digesting.rule_locs, found, job, _OUT_OF_SCOPE)
        lifted = [loc for loc in locs if robots_url(loc) in listing]
        await asyncio.to_thread(digesting.lift_rule, found, job, _OUT_OF_SCOPE, lifted)

    async def _dedupe(self, got: _Got) -> None:
        """Drop locs that an earlier document of this check listed (``loc-duplicate``)."""
        found, job = got.digest, got.job
        assert found is not None
        assert job is not None
        await self._dedupe_unchanged(got)
        if found.hashes is None:  # digested without its fingerprints (see _digest)
            # Its locs: a version stored as a delta alone lists its base's
            listed = found.data if found.data is not None else digesting.base_value(job)
            if not self.seen:
                self.seen.add_later(listed)
                return
            found.hashes = (await asyncio.to_thread(entryset.fingerprints, listed)).tobytes()
        if self.seen.unsettled:
            await asyncio.to_thread(self.seen.settle)
        hashes = array("Q")
        hashes.frombytes(found.hashes)
        hits = self.seen.hits(hashes)
        if hits:
            duplicates: set[str] = set()
            # One earlier document's entry set at a time: an index of 50 x 50,000 URLs with one
            # duplicate in its 50th child peaked at 233 MB (tree PSS) with all 49 loaded at once,
            # 185 now.
            async for data in self._entry_sets(self.written):
                duplicates.update(_listed(data, hits))
            if duplicates:
                await asyncio.to_thread(digesting.drop_duplicates, found, duplicates, job)
                assert found.hashes is not None
                hashes = array("Q")
                hashes.frombytes(found.hashes)
        self.seen.add(hashes)

    async def _dedupe_unchanged(self, got: _Got) -> None:
        """Drop the locs new to a re-read document that a document of this check lists which
        was not read again (304 or the same body, ``untouched``): ``seen`` holds only the
        documents read, and such a loc was a URL added and counted twice. A document read
        again is never among them, so a URL that moves between two changed documents stays a
        move. One whose answer comes later than this document is not looked at (the
        duplicate then stays, as before). The usual re-read document has no new loc and
        costs nothing here."""
        found, job = got.digest, got.job
        assert found is not None
        assert job is not None
        assert self.state is not None
        new = {c.loc for c in found.changes if c.before is None}
        if self.first or not new:
            return
        unread = [url for url in self.untouched
                   if (state := self.state.documents.get(url)) is not None
                   and state.kind not in INDEX_KINDS and state.urls + state.invalid > 0]
        duplicates: set[str] = set()
        async for data in self._entry_sets(unread):
            duplicates |= await asyncio.to_thread(entryset.pages_listed, data, new)
        if duplicates:
            await asyncio.to_thread(digesting.drop_duplicates, found, duplicates, job)

    async def _entry_sets(self, urls: Iterable[str]) -> AsyncIterator[bytes]:
        """The current entry sets of these documents of the target, one at a time."""
        for url in urls:
            sets: dict[str, StoredSet] = await self._db(
                store.load_entry_sets, self._target_id(), [url])
            if url in sets:
                yield sets.pop(url).data

    async def _entries(self, got: _Got) -> None:
        """Store a document's new entry set; count or hold back its changes."""
        found = got.digest
        assert found is not None
        self.written.append(got.url)
        self.lastmods_compared += found.lastmod_compared
        self.lastmods_changed += found.lastmod_changed
        self.balances[got.url] = found.balance
        if found.same:
            return  # new bytes, same entries and verdicts (whitespace, order of attributes)
        self.stored_now.add(got.url)
        snapshot_id = await self._snapshot()
        assert got.job is not None
        set_id = await self._db(store.write_entry_set, store.EntrySetWrite(
            target_id=self._target_id(), snapshot_id=snapshot_id, document_url=got.url,
            previous_id=None if got.stored is None else got.stored.id,
            urls=found.urls, invalid=found.entries - found.urls, data=found.data,
            made=None if found.delta is None or got.job.base_id is None
            else (got.job.base_id, found.delta),
        ))
        if self.first:  # the baseline: every entry is new, and no change rows are written
            self.changes.add_counted(
                found.changes, {"added": found.urls, "invalid": found.entries - found.urls}
            )
            return
        for change in found.changes:  # the rest are in found.rows
            if change.after is None:
                assert change.before is not None
                self.pending_removed[change.loc] = change.before
            else:
                self.pending_added[change.loc] = change.after
        if found.rows or found.packs:
            self.changes.add_counted(found.row_examples, found.row_counts)
            snapshot_id = await self._snapshot()
            # The rows' changed ones are folded into packs where the new version gives them
            # back: its value, made if it is a delta alone (packs alone need none)
            data = found.data
            if data is None and found.rows:
                data = await asyncio.to_thread(digesting.whole, found, got.job)
            self.changes_written += await self._db(
                store.write_change_rows, self._target_id(), snapshot_id,
                changerows.decode(found.rows),
                (set_id, data or b"", None if got.stored is None else got.stored.id),
                found.packs)

    async def _record(self, found: list[Change]) -> None:
        if not found:
            return
        for change in found:
            self.changes.add(change)
        snapshot_id = await self._snapshot()
        self.changes_written += await self._db(store.write_changes, self._target_id(),
                                               snapshot_id, found)

    async def _gone(self, sets: list[StoredSet]) -> None:
        """Entry sets of documents that no longer list URLs: their locs are held as removed."""
        for stored in sets:
            self.closed.append(stored.id)
            decoded = await asyncio.to_thread(_decode_whole, stored)
            for loc, state in decoded.states.items():
                self.pending_removed.setdefault(loc, state)

    async def _settle(self) -> None:
        """Resolve held-back removals and additions: moves, true removals, true additions."""
        assert self.state is not None
        dropped = [u for u in self.state.documents if u not in self.read
                   and u not in self.untouched and not self._under_failed(u)]
        if dropped:
            gone: dict[str, StoredSet] = await self._db(
                store.load_entry_sets, self.state.target_id, dropped
            )
            await self._gone(list(gone.values()))
        self.dropped = dropped
        moves = targetwide.settle_moves(self.pending_added, self.pending_removed)
        self.lastmods_compared += moves.compared
        self.lastmods_changed += moves.changed
        found = moves.changes
        if self.closed:
            await self._db(store.close_entry_sets, self.closed, await self._snapshot())
        await self._record(found)

    def _churn(self) -> None:
        """``lastmod-churn``: this re-check and the one before it both churned."""
        assert self.state is not None
        found = targetwide.churn_issue(self.state.lastmods,
                                       (self.lastmods_compared, self.lastmods_changed),
                                       self.changes.kept, self.target.url)
        if found is not None:
            self._issue_obj(found)

    # -- hreflang-not-reciprocal: a verdict of the whole target ---------------------------

    async def _reciprocity(self) -> None:
        """Mark the entries whose alternates a URL of the target does not answer.

        Their documents were digested one by one, each without this verdict; it is stored with
        the entries all the same (an entry's rules), so that it lasts while nothing changes.
        When no document was read or dropped, the stored verdicts stand. Otherwise the target's
        balance (monitor.read.extensions.balance: this check's documents', the others' from the
        first bytes of their stored sets) is nearly always 0, every alternate answered, and
        only stored verdicts that no longer hold are taken back. Else each document's set is
        read once more and its alternates checked pair by pair (extensions.Alternates).
        """
        assert self.state is not None
        if not self.balances and not self.dropped:
            return
        docs = {**self.state.documents, **self.read}
        for url in self.dropped:
            docs.pop(url, None)
        sitemaps = [url for url, doc in docs.items() if doc.kind not in INDEX_KINDS]
        others = [url for url in sitemaps if url not in self.balances]
        balance = sum(self.balances.get(url, 0) for url in sitemaps)
        heads = await self._db(store.load_set_heads, self._target_id(), others) if others else {}
        for url in others:
            if url not in heads:
                continue
            head = entryset.head(heads[url])
            if head is None or head[0] != RULES_VERSION:  # stored before balances were kept
                balance += await self._balance(url)
            else:
                balance += head[1]
        stale = {url for url in others if docs[url].issue_counts.get(NOT_RECIPROCAL)}
        if not balance & extensions.MASK and not stale:
            return
        found = await self._unanswered(sitemaps) if balance & extensions.MASK else {}
        for url in sorted(stale | set(found), key=sitemaps.index):
            await self._mark(url, docs[url], found.get(url, set()))

    async def _balance(self, url: str) -> int:
        sets = await self._db(store.load_entry_sets, self._target_id(), [url])
        if url not in sets:
            return 0
        stored = await asyncio.to_thread(entryset.unpack, sets[url].data)
        return extensions.balance(stored.locs(), stored.column(4))

    async def _unanswered(self, sitemaps: list[str]) -> dict[str, set[int]]:
        held = extensions.Alternates()
        for url in sitemaps:  # one stored set in memory at a time
            sets = await self._db(store.load_entry_sets, self._target_id(), [url])
            if url in sets:
                await asyncio.to_thread(_add_alternates, held, url, sets[url].data)
        return await asyncio.to_thread(held.unanswered)

    async def _mark(self, url: str, state: DocumentState, positions: set[int]) -> None:
        """Store a document's entries with ``hreflang-not-reciprocal`` on these positions only."""
        sets = await self._db(store.load_entry_sets, self._target_id(), [url])
        stored = sets.get(url)
        if stored is None:
            return
        marked = await asyncio.to_thread(_marked, stored.data, positions)
        if marked is None:
            return
        data, locs, exts = marked
        if url in self.stored_now:  # this snapshot's own version: the same entries
            await self._db(store.replace_entry_set, stored.id, data)
        else:  # an earlier snapshot's: a new version, so that history keeps its verdicts
            await self._db(store.write_entry_set, store.EntrySetWrite(
                target_id=self._target_id(), snapshot_id=await self._snapshot(),
                document_url=url, previous_id=stored.id, urls=state.urls,
                invalid=state.invalid, data=data, delta=True))  # new verdicts only
            if url in self.untouched:
                self.untouched.remove(url)
        counts = {rule: n for rule, n in state.issue_counts.items() if rule != NOT_RECIPROCAL}
        if positions:
            counts[NOT_RECIPROCAL] = len(positions)
        self.read[url] = replace(state, issue_counts=counts)
        for i in sorted(positions)[: max(0, self.issue_limit - len(self.result.issues))]:
            self._issue_obj(validate.issue(NOT_RECIPROCAL, Entry(locs[i], extensions=exts[i]),
                                           url), count=False)

    def _under_failed(self, url: str) -> bool:
        """Whether a previous document hangs below a document that failed this check."""
        assert self.state is not None
        docs, seen = self.state.documents, set()
        while url in docs and url not in seen:
            if url in self.failed:
                return True
            seen.add(url)
            parent = docs[url].parent_url
            if parent is None:
                return False
            url = parent
        return url in self.failed

    def _target_id(self) -> int:
        assert self.state is not None
        return self.state.target_id

    async def _snapshot(self) -> int:
        """The check's snapshot id, opening the snapshot with the check's first write."""
        if self.snapshot_id is None:
            self.snapshot_id = await self._db(
                store.open_snapshot, self._target_id(), self.started
            )
        return self.snapshot_id

    # -- the end --------------------------------------------------------------------------

    async def _finish(self, clock: Callable[[], datetime], t0: float) -> None:
        if self.result.outcome == "failed":
            self.pending_added.clear()
            self.pending_removed.clear()
        else:
            await self._settle()
            await self._reciprocity()
        assert self.state is not None
        r = self.result
        if r.outcome != "failed" and not self.first:
            r.lastmod_compared, r.lastmod_changed = self.lastmods_compared, self.lastmods_changed
            self._churn()
        if self.settings.indexnow.enabled:  # the key files the delivery loop could not verify
            for issue in await self._db(submissions.key_issues, self.target):
                self._issue_obj(issue)
        counts = self.changes.counts
        r.added, r.removed, r.changed = counts["added"], counts["removed"], counts["changed"]
        r.invalid_new, r.removed_invalid = counts["invalid"], self.changes.removed_invalid
        r.changes = self.changes.kept
        r.baseline = self.first and r.outcome != "failed"
        r.changes_truncated = sum(counts.values()) > len(self.changes.kept)
        current_docs = {**self.state.documents, **self.read}
        for url in self.dropped:
            current_docs.pop(url, None)
        r.urls = sum(d.urls for d in current_docs.values())
        r.invalid = sum(d.invalid for d in current_docs.values())
        issue_counts = Counter(self.issue_counts)
        for state in current_docs.values():
            issue_counts.update(state.issue_counts)
        r.duplicates = issue_counts["loc-duplicate"]
        if r.outcome != "failed" and all(
            d.outcome in ("not_modified", "unchanged") for d in r.documents
        ) and not any(found["changed"] for found in r.robots):  # a new robots.txt is news
            r.outcome = "unchanged"
        if r.outcome != "failed" and r.failed_documents:
            r.outcome = "partial"  # a document went unread: never shown as a success
        r.dropped_documents = {url: self.state.documents[url].urls for url in self.dropped
                               if url in self.state.documents}
        r.duration_seconds = time.monotonic() - t0
        issues = _snapshot_issues(self.check_issues, current_docs.values())
        await self._db(self._end, dict(issue_counts), issues, clock())

    def _end(self, conn: Connection, issue_counts: dict[str, int], issues: list[dict[str, Any]],
             finished_at: datetime) -> None:
        """Write the snapshot, commit and close, in one trip to a database thread: SQLite's
        write lock, taken by the check's first write, is then not held across turns of an
        event loop busy with other checks (an unchanged re-check writes only here)."""
        r = self.result
        r.snapshot_id = self.snapshot_id = store.close_snapshot(conn, store.SnapshotWrite(
            snapshot_id=self.snapshot_id, target_id=self._target_id(),
            started_at=self.started, finished_at=finished_at,
            result=r, issue_counts=issue_counts,
            document_states=list(self.read.values()), dropped_documents=self.dropped,
            untouched_documents=self.untouched, issues=issues,
            changes_written=self.changes_written,
        ))
        r.issue_counts = issue_counts
        if self.changes_written and self.settings.indexnow.enabled:
            submissions.enqueue_check(conn, self.target, self._target_id(), r.snapshot_id,
                                      finished_at)
        if self.alerts is not None and self.alerts.rules:
            _raise_alerts(conn, self.alerts, r, r.snapshot_id, self.started)
        if self.in_transaction is not None:
            self.in_transaction(conn)
        conn.commit()
        conn.close()


def _robots_failed(exc: FetchError) -> robots.Answer:
    """A site target's robots.txt fetch that raised, read as the watch reads one."""
    return robotsread.failed(exc)


async def _answered(answer: robots.Answer) -> robots.Answer:
    return answer


def _decode_whole(stored: StoredSet) -> entryset.EntrySet:
    return entryset.decode(stored.whole())


def _snapshot_issues(found: list[Issue], docs: Iterable[DocumentState]) -> list[dict[str, Any]]:
    """``snapshots.issues``: those the check found, and the indexes' own (a sitemap's own go
    with its entries), with the count of those an index's parse did not keep."""
    out: list[dict[str, Any]] = [
        {"rule": i.rule, "message": i.message, "loc": i.loc, "document": i.document}
        for i in found
    ]
    for doc in docs:
        if doc.kind not in INDEX_KINDS or not doc.issue_counts:
            continue
        kept = Counter(i["rule"] for i in doc.issues)
        out.extend({**i, "document": doc.url} for i in doc.issues)
        out.extend({"rule": rule, "document": doc.url, "dropped": n - kept[rule]}
                   for rule, n in sorted(doc.issue_counts.items()) if n > kept[rule])
    return out


def _lastmods(doc: DocumentState) -> int:
    """A document's entries with a valid lastmod, as stored; for a row stored before they
    were counted, its entries less those whose lastmod is invalid (it can only lower a
    churn ratio: an entry without a lastmod counts as compared and unchanged)."""
    if doc.lastmods is not None:
        return doc.lastmods
    return max(0, doc.urls + doc.invalid - doc.issue_counts.get("lastmod-invalid", 0))


def _marked(data: bytes, positions: set[int]) -> tuple[bytes, list[str], list[Any]] | None:
    """A stored entry set with ``hreflang-not-reciprocal`` on these positions only, with its
    locs and extensions column; None when its verdicts are those already (pure: run in a
    thread, a 50,000-entry set takes a while to unpack and pack)."""
    columns = entryset.unpack(data)
    before = columns.rules()
    rules = {i: kept for i, ids in before.items()
             if (kept := " ".join(r for r in ids.split() if r != NOT_RECIPROCAL))}
    for i in positions:
        rules[i] = f"{rules[i]} {NOT_RECIPROCAL}" if i in rules else NOT_RECIPROCAL
    if rules == before:
        return None
    columns.header.pop("rules", None)
    if rules:
        columns.header["rules"] = {str(i): rules[i] for i in sorted(rules)}
    return entryset.pack(columns), columns.locs(), columns.column(4)


def _listed(data: bytes, fingerprints: set[int]) -> list[str]:
    """The locs of a stored entry set whose fingerprints are among these."""
    locs = entryset.locs(data)
    return [loc for loc, fingerprint in zip(locs, entryset.loc_hashes(locs), strict=True)
            if fingerprint in fingerprints]


def _add_alternates(held: extensions.Alternates, url: str, data: bytes) -> None:
    stored = entryset.unpack(data)
    held.add(url, stored.locs(), stored.column(4))


def _unchanged(task: asyncio.Task[_Got]) -> bool:
    """Whether a child's task is done and found the child unchanged (it holds nothing)."""
    return (task.done() and not task.cancelled() and task.exception() is None
            and task.result().unchanged)


def _raise_alerts(
    conn: Connection, alerts: Alerts, result: CheckResult, snapshot_id: int, now: datetime
) -> None:
    """Evaluate the alert rules and write the outbox rows in the snapshot's transaction."""
    # Imported here: a daemon without alert rules never loads the alerting code.
    from monitor.alerts import rules
    from monitor.store import outbox

    context = outbox.rule_context(conn, result.target, now)
    notifications = rules.evaluate(alerts, result.target, result, context, now)
    outbox.write(conn, snapshot_id, notifications, now)


def _rollback(conn: Connection) -> None:
    if conn.in_transaction():
        conn.rollback()
