"""ONE check of one target: the only module that composes the stages.

fetch -> parse -> validate -> diff -> store, document by document, in one transaction
(SPEC 3.2). Memory holds one document's entries at a time (SPEC 3.4): the first check of a
target writes each document's entries as it reads them; later checks diff each document
against its own previous entries and keep only the changes. Removals and additions are held
back to the end, so a URL that moves between two children is neither added nor removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

from sqlalchemy import Connection, Engine

from monitor import diff as diffing
from monitor import parse, validate
from monitor.addresses import is_private_address, literal_address, system_resolver
from monitor.config import Alerts, Target
from monitor.errors import FetchError
from monitor.fetch import Fetcher
from monitor.model import (
    Change,
    CheckResult,
    DocumentResult,
    EntryState,
    Issue,
    ParsedDocument,
)
from monitor.store import sql as store
from monitor.store.sql import DocumentState, PreviousEntry

__all__ = ["run_check", "utcnow"]

INDEX_KINDS = ("sitemapindex", "robots")
_CHUNK = 64 * 1024
_SPOOL_IN_MEMORY = 1 << 20


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


async def run_check(
    target: Target,
    *,
    engine: Engine,
    fetcher: Fetcher,
    alerts: Alerts | None = None,
    now: Callable[[], datetime] | None = None,
    max_changes: int = 1000,
    in_transaction: Callable[[Connection], None] | None = None,
) -> CheckResult:
    """Check one target: fetch, parse, validate, diff and store one snapshot; never raises
    for anything the target's server does (a failed check is a value).

    ``in_transaction`` runs in the snapshot's transaction just before it commits (the daemon
    gives its lease back there, saving a transaction per check).
    """
    clock = now or utcnow
    check = _Check(target, engine, fetcher, alerts, clock(), max_changes)
    check.in_transaction = in_transaction
    return await check.run(clock)


@dataclass(slots=True)
class _Examples:
    """Counts of each change kind and the first changes, for output and alerts."""

    limit: int
    counts: Counter[str] = field(default_factory=Counter)
    kept: list[Change] = field(default_factory=list)

    def add(self, change: Change) -> None:
        self.counts[change.kind] += 1
        if len(self.kept) < self.limit:
            self.kept.append(change)


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
    ) -> None:
        self.target = target
        self.settings = target.settings
        self.engine = engine
        self.fetcher = fetcher
        self.alerts = alerts
        self.started = started
        self.result = CheckResult(target=target.name, url=target.url, outcome="ok")
        self.changes = _Examples(max_changes)
        self.issue_limit = max_changes
        self.issue_counts: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.visited: set[str] = set()
        self.read: dict[str, DocumentState] = {}  # documents read completely this check
        self.untouched: list[str] = []  # 304 or same hash: previous state stands
        self.failed: set[str] = set()  # previous state stands, with its subtree
        self.allow_private = target.settings.allow_private
        self.conn: Connection | None = None
        self.snapshot_id: int | None = None
        self.first = True  # no previous documents: nothing to diff against
        self.state: store.TargetState | None = None
        # Held back to the end of the walk (re-checks only): see the module docstring.
        self.pending_removed: dict[str, PreviousEntry] = {}
        self.pending_added: dict[str, tuple[str, EntryState, str | None]] = {}
        self.dropped: list[str] = []
        self.in_transaction: Callable[[Connection], None] | None = None

    # -- the walk -------------------------------------------------------------------------

    async def run(self, clock: Callable[[], datetime]) -> CheckResult:
        t0 = time.monotonic()
        conn = await asyncio.to_thread(self.engine.connect)
        self.conn = conn
        try:
            await asyncio.to_thread(conn.begin)
            self.state = await self._db(
                store.load_state, self.target.name, self.target.url, self.started
            )
            self.first = not self.state.documents
            self.allow_private = self.allow_private or await _is_private_target(self.target.url)
            await self._walk_roots()
            await self._finish(clock, t0)
            await asyncio.to_thread(conn.commit)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_rollback, conn))
            raise
        finally:
            await asyncio.shield(asyncio.to_thread(conn.close))
        return self.result

    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self.conn is not None
        return await asyncio.to_thread(fn, self.conn, *args)

    async def _walk_roots(self) -> None:
        url = self.target.url
        if self.target.site:
            url = urljoin(url if url.endswith("/") else url + "/", "/robots.txt")
        await self._document(url, None, 0, frozenset(), root=True)

    async def _document(
        self, url: str, parent: str | None, depth: int, ancestors: frozenset[str], *,
        root: bool = False,
    ) -> None:
        if url in ancestors:
            self._issue("index-cycle", f"{url} lists an index that reaches it again", parent)
            return
        if url in self.visited:
            return
        self.visited.add(url)
        if parent is not None and not self._in_scope(url, parent):
            return
        assert self.state is not None
        previous = self.state.documents.get(url)
        doc = DocumentResult(url=url, outcome="failed", parent=parent)
        self.result.documents.append(doc)
        try:
            body = await self._fetch(url, previous, doc)
        except FetchError as exc:
            self._fail(doc, exc.kind, exc.message, exc.status, root=root)
            return
        if body is None:  # 304 or the same bytes as last time
            assert previous is not None
            doc.kind = previous.kind  # type: ignore[assignment]
            doc.urls, doc.invalid = previous.urls, previous.invalid
            await self._children(url, previous.children, depth, ancestors, previous.kind)
            return
        try:
            if root and self.target.site:
                await self._robots(url, body, doc, depth, ancestors)
            else:
                await self._sitemap(url, body, doc, depth, ancestors, root=root, parent=parent)
        finally:
            body.close()

    async def _fetch(
        self, url: str, previous: DocumentState | None, doc: DocumentResult
    ) -> IO[bytes] | None:
        """The document's body in a spool, or None when it did not change since last time."""
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
            # Not a with-block: the caller reads and closes the spool (closed here on error).
            spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
                max_size=_SPOOL_IN_MEMORY
            )
            digest = hashlib.sha256()
            try:
                async for chunk in response.chunks():
                    digest.update(chunk)
                    spool.write(chunk)
                    doc.bytes += len(chunk)
            except BaseException:
                spool.close()
                raise
            finally:
                self.result.fetched_bytes += response.wire_bytes
        doc.sha256 = digest.hexdigest()
        if previous is not None and previous.sha256 == doc.sha256:
            spool.close()
            doc.outcome = "unchanged"
            self._touch(previous, doc)
            return None
        spool.seek(0)
        return spool

    def _touch(self, previous: DocumentState, doc: DocumentResult) -> None:
        """Keep a document's previous state; store new validators if the server sent some."""
        if (doc.etag, doc.last_modified) == (previous.etag, previous.last_modified):
            self.untouched.append(previous.url)
        else:
            self.read[previous.url] = replace(
                previous, etag=doc.etag, last_modified=doc.last_modified
            )

    async def _robots(
        self, url: str, body: IO[bytes], doc: DocumentResult, depth: int,
        ancestors: frozenset[str],
    ) -> None:
        text = body.read().decode("utf-8", errors="replace")
        children = parse.parse_robots(text, url)
        doc.outcome, doc.kind = "ok", "robots"
        if not children:
            self._fail(doc, "no-sitemaps", f"{url} lists no Sitemap: lines", None, root=True)
            return
        self.read[url] = self._state(url, doc, "robots", children=children)
        await self._children(url, children, depth, ancestors, "robots")

    async def _sitemap(
        self, url: str, body: IO[bytes], doc: DocumentResult, depth: int,
        ancestors: frozenset[str], *, root: bool, parent: str | None,
    ) -> None:
        limits = self.target.limits
        parsed: ParsedDocument = await asyncio.to_thread(
            _parse_spool, body, url, limits.max_bytes, limits.max_urls, limits.max_children
        )
        doc.kind = parsed.kind
        if parsed.failure is not None:
            self._issue_obj(parsed.failure)
            self._fail(doc, parsed.failure.rule, parsed.failure.message, doc.http_status,
                       root=root)
            return
        doc.outcome = "ok"
        for issue in parsed.issues:
            self._issue_obj(issue, count=False)
        own_counts = Counter(i.rule for i in parsed.issues)
        stored_issues = [
            {"rule": i.rule, "message": i.message, "loc": i.loc} for i in parsed.issues
        ]
        if parsed.kind == "sitemapindex":
            if parent is not None and self._kind(parent) == "sitemapindex":
                self._issue("index-nested", f"{url} is a sitemap index inside an index", parent)
            self.read[url] = self._state(url, doc, "sitemapindex", children=parsed.children,
                                         issues=stored_issues, counts=own_counts)
            await self._children(url, parsed.children, depth, ancestors, "sitemapindex")
            return
        checked = await asyncio.to_thread(
            validate.validate_document, parsed.entries, url, now=self.started, seen=self.seen
        )
        del parsed.entries
        for issue in checked.issues:
            own_counts[issue.rule] += 1
            self._issue_obj(issue, count=False)
        doc.urls = sum(1 for s in checked.entries.values() if s.valid)
        doc.invalid = checked.invalid + parsed.unkeyed_invalid
        self.read[url] = self._state(url, doc, parsed.kind or "urlset", issues=stored_issues,
                                     counts=own_counts)
        await self._entries(url, checked)

    async def _children(
        self, url: str, children: list[str], depth: int, ancestors: frozenset[str],
        kind: str | None,
    ) -> None:
        if kind not in INDEX_KINDS:
            return
        if depth + 1 > self.target.limits.max_depth:
            self._issue("index-nested", f"{url}: index depth limit "
                        f"{self.target.limits.max_depth} reached; children not read", url)
            self.failed.add(url)
            return
        inner = ancestors | {url}
        for child in children:
            await self._document(child, url, depth + 1, inner)

    def _kind(self, url: str) -> str | None:
        """The kind of a document read this check, else of its stored state."""
        assert self.state is not None
        state = self.read.get(url) or self.state.documents.get(url)
        return None if state is None else state.kind

    def _in_scope(self, url: str, parent: str) -> bool:
        child, index = urlsplit(url), urlsplit(parent)
        if child.scheme not in ("http", "https") or not child.hostname:
            self._issue("child-fetch-failed", f"{url}: not an absolute http(s) URL", parent)
            return False
        if child.hostname == index.hostname or self.settings.allow_cross_host_children:
            return True
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

    def _issue(self, rule: str, message: str, document: str | None, loc: str | None = None,
               ) -> None:
        self._issue_obj(Issue(rule, message, loc=loc, document=document))

    def _issue_obj(self, issue: Issue, *, count: bool = True) -> None:
        if count:
            self.issue_counts[issue.rule] += 1
        if len(self.result.issues) < self.issue_limit:
            self.result.issues.append(issue)

    def _state(
        self, url: str, doc: DocumentResult, kind: str, *, children: list[str] | None = None,
        issues: list[dict[str, Any]] | None = None, counts: Counter[str] | None = None,
    ) -> DocumentState:
        return DocumentState(
            url=url, parent_url=doc.parent, kind=kind, etag=doc.etag,
            last_modified=doc.last_modified, sha256=doc.sha256, urls=doc.urls,
            invalid=doc.invalid, children=children or [], issues=issues or [],
            issue_counts=dict(counts or {}),
        )

    # -- entries and changes --------------------------------------------------------------

    async def _entries(self, url: str, checked: validate.ValidatedDocument) -> None:
        """Diff one document against its own previous entries and write what changed."""
        current = {loc: (url, state, checked.rules.get(loc))
                   for loc, state in checked.entries.items()}
        if self.first:
            found = diffing.diff({}, checked.entries)
            await self._write(found, {}, current)
            return
        assert self.state is not None
        previous: dict[str, PreviousEntry] = await self._db(
            store.load_entries, self.state.target_id, [url]
        )
        found = diffing.diff({loc: p.state for loc, p in previous.items()}, checked.entries)
        now: list[Change] = []
        for change in found:
            if change.kind == "removed":
                self.pending_removed[change.loc] = previous[change.loc]
            elif change.before is None:
                self.pending_added[change.loc] = current[change.loc]
            else:
                now.append(change)
        await self._write(now, previous, {c.loc: current[c.loc] for c in now})

    async def _write(
        self, found: list[Change], previous: dict[str, PreviousEntry],
        current: dict[str, tuple[str, EntryState, str | None]],
    ) -> None:
        if not found and not current:
            return
        for change in found:
            self.changes.add(change)
        snapshot_id = await self._snapshot()
        await self._db(store.write_entries, store.EntryWrite(
            target_id=self._target_id(), snapshot_id=snapshot_id, previous=previous,
            current=current, changes=found,
        ))

    async def _settle(self) -> None:
        """Resolve held-back removals and additions: moves, true removals, true additions."""
        assert self.state is not None
        dropped = [u for u in self.state.documents if u not in self.read
                   and u not in self.untouched and not self._under_failed(u)]
        if dropped:
            gone: dict[str, PreviousEntry] = await self._db(
                store.load_entries, self.state.target_id, dropped
            )
            for loc, entry in gone.items():
                self.pending_removed.setdefault(loc, entry)
        self.dropped = dropped
        previous: dict[str, PreviousEntry] = {}
        current: dict[str, tuple[str, EntryState, str | None]] = {}
        found: list[Change] = []
        for loc, added in self.pending_added.items():
            before = self.pending_removed.pop(loc, None)
            if before is None:
                found.append(Change("added" if added[1].valid else "invalid", loc, None,
                                    added[1]))
                current[loc] = added
                continue
            previous[loc] = before
            current[loc] = added
            if before.state != added[1]:
                kind = "invalid" if before.state.valid and not added[1].valid else "changed"
                found.append(Change(kind, loc, before.state, added[1]))  # type: ignore[arg-type]
        for loc, before in self.pending_removed.items():
            previous[loc] = before
            found.append(Change("removed", loc, before.state, None))
        await self._write(found, previous, current)

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
        assert self.state is not None
        r = self.result
        counts = self.changes.counts
        r.added, r.removed, r.changed = counts["added"], counts["removed"], counts["changed"]
        r.invalid_new = counts["invalid"]
        r.changes = self.changes.kept
        r.changes_truncated = sum(counts.values()) > len(self.changes.kept)
        current_docs = {**self.state.documents, **self.read}
        for url in self.dropped:
            current_docs.pop(url, None)
        r.urls = sum(d.urls for d in current_docs.values())
        r.invalid = sum(d.invalid for d in current_docs.values())
        issue_counts = Counter(self.issue_counts)
        for state in current_docs.values():
            issue_counts.update(state.issue_counts)
        if r.outcome != "failed" and all(
            d.outcome in ("not_modified", "unchanged") for d in r.documents
        ):
            r.outcome = "unchanged"
        r.duration_seconds = time.monotonic() - t0
        snapshot_id = await self._snapshot()
        r.snapshot_id = snapshot_id
        await self._db(store.close_snapshot, store.SnapshotWrite(
            snapshot_id=snapshot_id, target_id=self._target_id(), finished_at=clock(),
            result=r, issue_counts=dict(issue_counts),
            document_states=list(self.read.values()), dropped_documents=self.dropped,
            untouched_documents=self.untouched,
        ))
        r.issue_counts = dict(issue_counts)
        if self.alerts is not None and self.alerts.rules:
            await self._db(_raise_alerts, self.alerts, r, snapshot_id, self.started)
        if self.in_transaction is not None:
            await self._db(self.in_transaction)


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


def _parse_spool(
    body: IO[bytes], url: str, max_bytes: int, max_urls: int, max_children: int
) -> ParsedDocument:
    parser = parse.DocumentParser(
        url, max_bytes=max_bytes, max_urls=max_urls, max_children=max_children
    )
    while chunk := body.read(_CHUNK):
        parser.feed(chunk)
    return parser.close()


def _rollback(conn: Connection) -> None:
    if conn.in_transaction():
        conn.rollback()


async def _is_private_target(url: str) -> bool:
    """Whether the target's own URL is on a private or loopback address (SPEC 3.6)."""
    host = urlsplit(url).hostname or ""
    literal = literal_address(host)
    if literal is not None:
        return is_private_address(literal)
    try:
        addresses = await system_resolver(host, 0)
    except (OSError, ValueError):  # unresolvable here: the fetch will report it
        return False
    return any(is_private_address(ip) for ip in addresses)
