"""The walk of one check: which documents are read, in which order, and what each one gives.

From the target's root down its indexes, each document is admitted (no cycle, in scope, not
seen), fetched conditionally and digested (parse, validate, diff, encode:
``monitor.read.digest``), a few children at a time in worker processes, and then, strictly in
its listed order, turned into its frozen ``DocumentOutcome`` that the check's tally folds
(``Tally.take``). The walk holds no database transaction: it reads through ``Context.reads``
and records its writes for the end.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from dataclasses import dataclass, replace
from urllib.parse import urljoin

from monitor.check.context import Context
from monitor.check.entries import Entries
from monitor.check.tally import (
    INDEX_KINDS,
    Admitted,
    DocumentOutcome,
    Found,
    Wire,
    document_state,
    failure,
    touched,
)
from monitor.codec.states import DocumentState, StoredSet
from monitor.core.errors import FetchError, WorkerDied
from monitor.core.model import RULES, DocumentResult, Issue
from monitor.core.rules import RuleId, rule_id
from monitor.read import digest as digesting
from monitor.read import validate
from monitor.read.workers import Spool
from monitor.robots import judge as robots
from monitor.robots import reader as robots_reader
from monitor.robots.sitemaps import parse_robots

__all__ = ["Walk"]

_AHEAD_MAX = 64  # children started and not yet applied, unchanged ones included
# Past this many loc fingerprints held (8 MB), this process leaves big documents to the worker
# processes: the fingerprints grow with the index, and a digest of its own on top of them was
# the check's peak. An index of up to 20 children of 50,000 URLs is digested on every core.
DIGEST_HERE_MAX = 1_000_000


@dataclass(slots=True)
class _Got:
    """One document as fetched (and digested) ahead of its turn: the walk's own record of it
    between its fetch and its turn (``doc`` is its result row as the fetch left it)."""

    url: str
    doc: DocumentResult
    previous: DocumentState | None
    error: FetchError | None = None
    unchanged: bool = False
    robots: str | None = None  # the text of a site's robots.txt
    job: digesting.Job | None = None
    digest: digesting.Digest | None = None
    stored: StoredSet | None = None  # the document's entry set before this check


class Walk:
    """The documents of one check, read and applied in order (see the module)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.entries = Entries(ctx)
        self.visited: set[str] = set()
        self.digesting = 0  # documents being digested
        self.root_robots: robots.Answer | None = None  # a site target's root, as read
        # Children in flight: one digested in each worker and here, and two fetched ahead
        # (one waiting for a free digester, one that finished before the child before it).
        self.window = ctx.digests.size + 3

    async def run(self) -> None:
        """Read the target's root and everything below it."""
        url = self.ctx.target.url
        if self.ctx.target.site:
            url = urljoin(url if url.endswith("/") else url + "/", "/robots.txt")
        doc = self._admit(url, None, frozenset())
        assert doc is not None
        got = await self._obtain(url, doc, root=True)
        await self._apply(got, 0, frozenset(), root=True)

    def _admit(self, url: str, parent: str | None, ancestors: frozenset[str],
               ) -> DocumentResult | None:
        """The document's result row, or None when it is not to be read (cycle, seen, scope)."""
        if url in ancestors:
            self.ctx.tally.take(_issue(RuleId.INDEX_CYCLE,
                                       f"{url} lists an index that reaches it again", parent))
            return None
        if url in self.visited:
            return None
        self.visited.add(url)
        if parent is not None and not self._in_scope(url, parent):
            return None
        doc = DocumentResult(url=url, outcome="failed", parent=parent)
        self.ctx.tally.take(Admitted(doc))
        return doc

    def _in_scope(self, url: str, parent: str) -> bool:
        take = self.ctx.tally.take
        relative = validate.child_issue(url, parent)
        if relative is not None:
            take(Found((relative,)))
            return False
        where = validate.child_scope(url, parent)
        if where is None or self.ctx.kind(parent) == "robots":
            return True  # a robots.txt may name sitemaps on any host (a CDN, say)
        if self.ctx.settings.allow_cross_host_children:
            return True
        if where == "directory":
            # Out of the index's scope as another host is (sitemaps.org, Google): not read.
            take(_issue(RuleId.INDEX_CHILD_OUT_OF_SCOPE, f"{url} is outside the directory of its "
                        "index; not fetched", parent, loc=url))
            return False
        take(_issue(RuleId.INDEX_CHILD_OUT_OF_SCOPE,
                    f"{url} is on another host than its index; not fetched", parent))
        return False

    # -- fetch and digest, ahead of the document's turn -----------------------------------

    async def _obtain(self, url: str, doc: DocumentResult, *, root: bool = False) -> _Got:
        """Fetch a document and digest it; touches nothing the listed order matters to."""
        got = _Got(url, doc, self.ctx.state.documents.get(url))
        site = root and self.ctx.target.site
        try:
            body = await self._fetch(got)
        except FetchError as exc:
            got.error = exc
            if site:
                self.root_robots = robots_reader.failed(exc)
            return got
        if body is None:  # 304 or the same bytes as last time
            got.unchanged = True
            if site:
                self.root_robots = robots.Answer(got.doc.http_status, not_modified=True)
            return got
        try:
            if site:
                doc = got.doc
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

    async def _fetch(self, got: _Got) -> Spool | None:
        """The document's body, or None when it did not change since last time (its previous
        state stands: the tally takes that now, as a later document's dedupe asks it)."""
        ctx, url, previous = self.ctx, got.url, got.previous
        etag = previous.etag if previous else None
        last_modified = previous.last_modified if previous else None
        async with ctx.fetcher.fetch(
            url, ctx.settings, etag=etag, last_modified=last_modified,
            allow_private=ctx.allow_private,
        ) as response:
            doc = got.doc = replace(got.doc, http_status=response.status,
                                    etag=response.etag or etag,
                                    last_modified=response.last_modified or last_modified)
            if response.not_modified:
                ctx.tally.take(Wire(response.wire_bytes))
                if previous is None:
                    raise FetchError("protocol", f"{url}: 304 Not Modified without a stored copy")
                got.doc = replace(doc, outcome="not_modified", sha256=previous.sha256)
                ctx.tally.take(touched(previous, got.doc))
                return None
            body = Spool(on_big=ctx.digests.big_document)
            digest = hashlib.sha256()
            size = 0
            try:
                async for chunk in response.chunks():
                    digest.update(chunk)
                    body.write(chunk)
                    size += len(chunk)
                body.finish()
            except BaseException:
                body.close()
                raise
            finally:
                got.doc = replace(doc, bytes=size)
                ctx.tally.take(Wire(response.wire_bytes))
        got.doc = replace(got.doc, sha256=digest.hexdigest())
        if previous is not None and previous.sha256 == got.doc.sha256:
            body.close()
            got.doc = replace(got.doc, outcome="unchanged")
            ctx.tally.take(touched(previous, got.doc))
            return None
        return body

    async def _digest(self, got: _Got, body: Spool) -> None:
        ctx = self.ctx
        if not ctx.first:
            got.stored = (await ctx.reads.stored([got.url], whole=False)).get(got.url)
        limits = ctx.target.limits
        seen = self.entries.seen
        got.job = digesting.Job(
            url=got.url, now=ctx.started, max_bytes=limits.max_bytes,
            max_urls=limits.max_urls, max_children=limits.max_children,
            body=None if body.data is None else bytes(body.data), path=body.path,
            previous=None if got.stored is None else got.stored.data,
            previous_base=None if got.stored is None else got.stored.base_data,
            base_id=None if got.stored is None else got.stored.base_id,
            baseline=ctx.first, examples=ctx.tally.limit,
            # The fingerprints of a document's locs find their duplicates in the documents read
            # after it. A first check reads every document; a re-check reads those that changed,
            # and the first of them digested while nothing else is may well be the only one
            # (one sitemap, or one changed child of an index): the dedupe works its fingerprints
            # out of its entry set only if another document comes.
            fingerprints=ctx.first or self.digesting > 0 or bool(seen),
        )
        self.digesting += 1
        try:
            got.digest = await ctx.digests.run(got.job, here=seen.held < DIGEST_HERE_MAX)
        finally:
            self.digesting -= 1

    # -- apply, in listed order -----------------------------------------------------------

    async def _apply(self, got: _Got, depth: int, ancestors: frozenset[str], *,
                     root: bool = False) -> None:
        """Take a document's outcome into the check, in its listed order."""
        take, doc, previous = self.ctx.tally.take, got.doc, got.previous
        if got.error is not None:
            found: tuple[Found, ...] = ()
            if got.error.kind in RULES:  # a reason with a rule id (size-too-large, gzip-invalid)
                found = (_issue(rule_id(got.error.kind), got.error.message, got.url),)
            take(failure(doc, got.error.kind, got.error.message, got.error.status, root=root,
                         found=found))
            return
        if got.unchanged:
            assert previous is not None
            doc = replace(doc, kind=previous.kind, urls=previous.urls,  # type: ignore[arg-type]
                          invalid=previous.invalid,
                          duplicates=previous.issue_counts.get(RuleId.LOC_DUPLICATE, 0))
            deep = self._too_deep(got.url, previous.kind, depth)
            take(DocumentOutcome(doc, () if deep is None else (deep,), failed=deep is not None,
                                 lastmods_compared=_lastmods(previous)))
            await self._children(got.url, previous.children, depth, ancestors, previous.kind)
            return
        if got.robots is not None:
            await self._robots(got.url, got.robots, doc, depth, ancestors)
            return
        await self._sitemap(got, depth, ancestors, root=root)

    async def _robots(self, url: str, text: str, doc: DocumentResult, depth: int,
                      ancestors: frozenset[str]) -> None:
        """A site target's root: its robots.txt, whose ``Sitemap:`` lines are its children."""
        limit = self.ctx.target.limits.max_children
        relative: list[str] = []
        children = parse_robots(text, url, limit=limit + 1, relative=relative)
        doc = replace(doc, outcome="ok", kind="robots")
        found = [_issue(RuleId.ROBOTS_SITEMAP_RELATIVE, f"{url} has a relative Sitemap: line "
                        f"{value!r}: search engines require a full URL, it is ignored", url)
                 for value in relative]
        if len(children) > limit:
            found.append(_issue(RuleId.INDEX_TOO_MANY, f"{url} lists more than {limit} sitemaps; "
                                f"the first {limit} are read", url))
            del children[limit:]
        if not children:
            self.ctx.tally.take(failure(doc, "no-sitemaps", f"{url} lists no Sitemap: lines",
                                        None, root=True, found=found))
            return
        deep = self._too_deep(url, "robots", depth)
        self.ctx.tally.take(DocumentOutcome(
            doc, found if deep is None else [*found, deep], failed=deep is not None,
            state=document_state(url, doc, "robots", children=children)))
        await self._children(url, children, depth, ancestors, "robots")

    async def _sitemap(self, got: _Got, depth: int, ancestors: frozenset[str], *,
                       root: bool) -> None:
        take, url, found = self.ctx.tally.take, got.url, got.digest
        assert found is not None
        doc = replace(got.doc, kind=found.kind)
        if found.failure is not None:
            take(failure(doc, found.failure.rule, found.failure.message, doc.http_status,
                         root=root, found=(Found((found.failure,)),)))
            return
        doc = replace(doc, outcome="ok")
        own = Found(tuple(found.issues), counted=False)
        stored_issues = [
            {"rule": i.rule, "message": i.message, "loc": i.loc} for i in found.issues
        ]
        if found.kind == "sitemapindex":
            notes = [own]
            if doc.parent is not None and self.ctx.kind(doc.parent) == "sitemapindex":
                notes.append(_issue(RuleId.INDEX_NESTED,
                                    f"{url} is a sitemap index inside an index", doc.parent))
            deep = self._too_deep(url, "sitemapindex", depth)
            if deep is not None:
                notes.append(deep)
            take(DocumentOutcome(doc, notes, failed=deep is not None, state=document_state(
                url, doc, "sitemapindex", children=found.children, issues=stored_issues,
                counts=found.counts)))
            if got.stored is not None:  # it listed URLs before: they are gone from it
                take(await self.entries.gone([got.stored]))
            await self._children(url, found.children, depth, ancestors, "sitemapindex")
            return
        assert got.job is not None
        wire = await self.entries.take(url, doc.parent, found, got.job)
        doc = replace(doc, urls=found.urls, invalid=found.invalid, duplicates=found.duplicates)
        take(DocumentOutcome(
            doc, (own, Found(found.entry_issues, counted=False)),
            state=document_state(url, doc, found.kind or "urlset", issues=stored_issues,
                                 counts=found.counts, lastmods=found.lastmods),
            recorded=self.entries.recorded(url, found), fetched_bytes=wire))
        await self.entries.record(url, found, got.job, got.stored)

    def _too_deep(self, url: str, kind: str | None, depth: int) -> Found | None:
        """``index-nested`` when an index's children are past the depth limit (not read)."""
        limit = self.ctx.target.limits.max_depth
        if kind not in INDEX_KINDS or depth + 1 <= limit:
            return None
        return _issue(RuleId.INDEX_NESTED, f"{url}: index depth limit {limit} reached; children "
                      "not read", url)

    async def _children(self, url: str, children: list[str], depth: int,
                        ancestors: frozenset[str], kind: str | None) -> None:
        """Read an index's children: a few fetched ahead, each applied in its turn."""
        if kind not in INDEX_KINDS or depth + 1 > self.ctx.target.limits.max_depth:
            return  # past the depth limit: its outcome said so (``_too_deep``)
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


def _issue(rule: RuleId, message: str, document: str | None, loc: str | None = None) -> Found:
    """One issue of the check, counted."""
    return Found((Issue(rule, message, loc=loc, document=document),))


def _lastmods(doc: DocumentState) -> int:
    """A document's entries with a valid lastmod, as stored; for a row stored before they
    were counted, its entries less those whose lastmod is invalid (it can only lower a
    churn ratio: an entry without a lastmod counts as compared and unchanged)."""
    if doc.lastmods is not None:
        return doc.lastmods
    return max(0, doc.urls + doc.invalid - doc.issue_counts.get(RuleId.LASTMOD_INVALID, 0))


def _unchanged(task: asyncio.Task[_Got]) -> bool:
    """Whether a child's task is done and found the child unchanged (it holds nothing)."""
    return (task.done() and not task.cancelled() and task.exception() is None
            and task.result().unchanged)
