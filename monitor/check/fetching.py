"""One document read ahead of its turn: fetched conditionally, then digested.

The walk (``monitor.check.walk``) starts a few of an index's children at once; each goes
through ``DocumentReader.read``, which fetches it with the validators of its stored state and,
when its bytes changed, digests it (parse, validate, diff, encode: ``monitor.read.digest``) here
or in a worker process. It gives back a frozen ``Got`` that the document's turn
(``monitor.check.turn``) takes in listed order. It touches nothing the listed order matters
to: only the bytes read on the wire and a document whose previous state stands go to the tally
at once (a later document's dedupe asks for the latter).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from monitor.check.context import Context
from monitor.check.tally import Wire, touched
from monitor.codec.fingerprints import Fingerprints
from monitor.codec.states import DocumentState, StoredSet
from monitor.core.errors import FetchError, WorkerDied
from monitor.core.model import DocumentResult
from monitor.read import digest as digesting
from monitor.read.workers import Spool
from monitor.robots import judge as robots
from monitor.robots import reader as robots_reader

__all__ = ["DIGEST_HERE_MAX", "DocumentReader", "Got"]

# Past this many loc fingerprints held (8 MB), this process leaves big documents to the worker
# processes: the fingerprints grow with the index, and a digest of its own on top of them was
# the check's peak. An index of up to 20 children of 50,000 URLs is digested on every core.
DIGEST_HERE_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class Got:
    """One document as fetched (and digested) ahead of its turn (``doc`` is its result row as
    the fetch left it)."""

    url: str
    doc: DocumentResult
    previous: DocumentState | None
    error: FetchError | None = None
    unchanged: bool = False  # 304 or the same bytes: its previous state stands
    robots_txt: str | None = None  # the text of a site's robots.txt
    answer: robots.Answer | None = None  # a site target's root, as read
    job: digesting.Job | None = None
    digest: digesting.Digest | None = None
    stored: StoredSet | None = None  # the document's entry set before this check


class DocumentReader:
    """Fetches and digests the documents of one check, several at a time (see the module)."""

    def __init__(self, ctx: Context, seen: Fingerprints) -> None:
        self.ctx = ctx
        self.seen = seen  # the fingerprints of every loc the check has taken so far
        self.digesting = 0  # documents being digested

    async def read(self, url: str, doc: DocumentResult, *, site: bool = False) -> Got:
        """Fetch a document and digest it; ``site``: a site target's root, its robots.txt."""
        previous = self.ctx.state.documents.get(url)
        doc, body, error = await self._fetch(url, doc, previous)
        got = Got(url, doc, previous, error=error, unchanged=body is None and error is None)
        if body is None:
            if not site:
                return got
            answer = (robots_reader.failed(error) if error is not None
                      else robots.Answer(doc.http_status, not_modified=True))
            return replace(got, answer=answer)
        try:
            if site:
                text = body.read()[:robots.MAX_BYTES].decode("utf-8", errors="replace")
                return replace(got, robots_txt=text, answer=robots.Answer(
                    doc.http_status, text.lstrip("\ufeff"), etag=doc.etag,
                    last_modified=doc.last_modified))
            return await self._digest(got, body)
        except WorkerDied as exc:
            return replace(got, error=FetchError("worker-died", str(exc)))
        finally:
            body.close()

    async def _fetch(self, url: str, doc: DocumentResult, previous: DocumentState | None,
                     ) -> tuple[DocumentResult, Spool | None, FetchError | None]:
        """The document's row as the fetch leaves it, and its body, or no body when it could
        not be read (the error) or did not change since last time (its previous state stands:
        the tally takes that now, as a later document's dedupe asks it)."""
        ctx = self.ctx
        etag = previous.etag if previous else None
        last_modified = previous.last_modified if previous else None
        try:
            async with ctx.fetcher.fetch(
                url, ctx.settings, etag=etag, last_modified=last_modified,
                allow_private=ctx.allow_private,
            ) as response:
                doc = replace(doc, http_status=response.status, etag=response.etag or etag,
                              last_modified=response.last_modified or last_modified)
                if response.not_modified:
                    ctx.tally.take(Wire(response.wire_bytes))
                    if previous is None:
                        raise FetchError("protocol",
                                         f"{url}: 304 Not Modified without a stored copy")
                    doc = replace(doc, outcome="not_modified", sha256=previous.sha256)
                    ctx.tally.take(touched(previous, doc))
                    return doc, None, None
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
                    doc = replace(doc, bytes=size)
                    ctx.tally.take(Wire(response.wire_bytes))
        except FetchError as exc:
            return doc, None, exc
        doc = replace(doc, sha256=digest.hexdigest())
        if previous is not None and previous.sha256 == doc.sha256:
            body.close()
            doc = replace(doc, outcome="unchanged")
            ctx.tally.take(touched(previous, doc))
            return doc, None, None
        return doc, body, None

    async def _digest(self, got: Got, body: Spool) -> Got:
        """The document digested, with the entry set it is diffed against."""
        ctx = self.ctx
        stored = None
        if not ctx.first:
            stored = (await ctx.reads.stored([got.url], whole=False)).get(got.url)
        limits = ctx.target.limits
        job = digesting.Job(
            url=got.url, now=ctx.started, max_bytes=limits.max_bytes,
            max_urls=limits.max_urls, max_children=limits.max_children,
            body=None if body.data is None else bytes(body.data), path=body.path,
            previous=None if stored is None else stored.data,
            previous_base=None if stored is None else stored.base_data,
            base_id=None if stored is None else stored.base_id,
            baseline=ctx.first, examples=ctx.tally.limit,
            # The fingerprints of a document's locs find their duplicates in the documents read
            # after it. A first check reads every document; a re-check reads those that changed,
            # and the first of them digested while nothing else is may well be the only one
            # (one sitemap, or one changed child of an index): the dedupe works its fingerprints
            # out of its entry set only if another document comes.
            fingerprints=ctx.first or self.digesting > 0 or bool(self.seen),
        )
        self.digesting += 1
        try:
            digest = await ctx.digests.run(job, here=self.seen.held < DIGEST_HERE_MAX)
        finally:
            self.digesting -= 1
        return replace(got, job=job, digest=digest, stored=stored)
