"""A sitemap's entries, taken into the check: scope lifted for cross-submission, duplicates of
earlier documents dropped, the new entry set recorded and its changes counted or held back.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace

from monitor.check import robotswatch as robots_watch
from monitor.check.context import Context
from monitor.check.tally import INDEX_KINDS, Gone, Recorded
from monitor.codec import entryset, fingerprints
from monitor.codec.states import StoredSet
from monitor.core.model import EntryState
from monitor.core.rules import RuleId
from monitor.read import digest as digesting
from monitor.read.digest import Digest, Job
from monitor.robots.matcher import robots_url
from monitor.robots.sitemaps import parse_robots

__all__ = ["Entries"]

_OUT_OF_SCOPE = RuleId.LOC_OUT_OF_SCOPE


class Entries:
    """The entries of the check's sitemaps, one document at a time in listed order."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.seen = fingerprints.Fingerprints()  # of every loc read this check
        # the Sitemap: lines of the robots.txt of hosts a sitemap lists URLs on (read once)
        self.cross_robots: dict[str, frozenset[str]] = {}

    async def take(self, url: str, parent: str | None, found: Digest, job: Job) -> int:
        """Everything a digested sitemap's entries do to the check (the digest is changed in
        place); the bytes read for it on the wire."""
        wire = await self._cross_submitted(url, parent, found, job)
        await self._dedupe(found, job)
        return wire

    async def _cross_submitted(self, url: str, parent: str | None, found: Digest,
                               job: Job) -> int:
        """Take ``loc-out-of-scope`` back from the locs on hosts whose robots.txt names this
        sitemap (or its index, or the target's URL) in a ``Sitemap:`` line: cross-submission,
        which Google and Bing document. The hosts are those of the document's first issues
        (its examples), each host's robots.txt read once a check; only when one of them names
        the sitemap is the entry set decoded, and every loc on such a host lifted."""
        if not found.counts.get(_OUT_OF_SCOPE):
            return 0
        hosts = list(dict.fromkeys(robots_url(i.loc) for i in found.entry_issues
                                   if i.rule == _OUT_OF_SCOPE and i.loc is not None))
        names = {url, self.ctx.target.url} | ({parent} if parent else set())
        listing = set()
        wire = 0
        for robots_of in hosts[:robots_watch.ROBOTS_HOSTS]:
            named = self.cross_robots.get(robots_of)
            if named is None:
                answer, read = await robots_watch.answer(self.ctx, robots_of, None)
                wire += read
                ok = answer.status is not None and 200 <= answer.status < 300
                named = frozenset(parse_robots(answer.text or "", robots_of) if ok else ())
                self.cross_robots[robots_of] = named
            if not named.isdisjoint(names):
                listing.add(robots_of)
        if not listing:
            return wire
        locs = await asyncio.to_thread(digesting.rule_locs, found, job, _OUT_OF_SCOPE)
        lifted = [loc for loc in locs if robots_url(loc) in listing]
        await asyncio.to_thread(digesting.lift_rule, found, job, _OUT_OF_SCOPE, lifted)
        return wire

    async def _dedupe(self, found: Digest, job: Job) -> None:
        """Drop locs that an earlier document of this check listed (``loc-duplicate``)."""
        await self._dedupe_unchanged(found, job)
        if found.hashes is None:  # digested without its fingerprints (see check.fetching)
            # Its locs: a version stored as a delta alone lists its base's
            listed = found.data if found.data is not None else digesting.base_value(job)
            if not self.seen:
                self.seen.add_later(listed)
                return
            found.hashes = (await asyncio.to_thread(fingerprints.fingerprints, listed)).tobytes()
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
            async for data in self._current(self.ctx.tally.written):
                duplicates.update(_listed(data, hits))
            if duplicates:
                await asyncio.to_thread(digesting.drop_duplicates, found, duplicates, job)
                assert found.hashes is not None
                hashes = array("Q")
                hashes.frombytes(found.hashes)
        self.seen.add(hashes)

    async def _dedupe_unchanged(self, found: Digest, job: Job) -> None:
        """Drop the locs new to a re-read document that a document of this check lists which
        was not read again (304 or the same body, ``untouched``): ``seen`` holds only the
        documents read, and such a loc was a URL added and counted twice. A document read
        again is never among them, so a URL that moves between two changed documents stays a
        move. One whose answer comes later than this document is not looked at (the
        duplicate then stays, as before). The usual re-read document has no new loc and
        costs nothing here."""
        new = {c.loc for c in found.changes if c.before is None}
        if self.ctx.first or not new:
            return
        documents = self.ctx.state.documents
        unread = [url for url in self.ctx.tally.untouched
                  if (state := documents.get(url)) is not None
                  and state.kind not in INDEX_KINDS and state.urls + state.invalid > 0]
        duplicates: set[str] = set()
        async for data in self._current(unread):
            duplicates |= await asyncio.to_thread(fingerprints.pages_listed, data, new)
        if duplicates:
            await asyncio.to_thread(digesting.drop_duplicates, found, duplicates, job)

    async def _current(self, urls: Iterable[str]) -> AsyncIterator[bytes]:
        """The entry sets of these documents as this check leaves them, one at a time."""
        for url in list(urls):
            stored = await self.ctx.reads.current(url)
            if stored is not None:
                yield stored.whole()

    def recorded(self, url: str, found: Digest) -> Recorded:
        """What a sitemap's new entry set adds to the check's counts and changes."""
        counts = Recorded(url, found.lastmod_compared, found.lastmod_changed, found.balance)
        if found.same:
            return counts  # new bytes, same entries and verdicts (whitespace, attributes' order)
        if self.ctx.first:  # the baseline: every entry is new, and no change rows are written
            return replace(counts, counted=(
                found.changes, {"added": found.urls, "invalid": found.entries - found.urls}))
        # the rest are in found.rows
        return replace(counts, held=found.changes, more=(found.row_examples, found.row_counts)
                       if found.rows or found.packs else None)

    async def record(self, url: str, found: Digest, job: Job, stored: StoredSet | None,
                     ) -> None:
        """Record a document's new entry set for the check's transaction."""
        writes = self.ctx.writes
        if found.same:
            return  # new bytes, same entries and verdicts (whitespace, order of attributes)
        previous_id = None if stored is None else stored.id
        writes.entry_set(
            url, previous_id, found.urls, found.entries - found.urls, found.data,
            made=None if found.delta is None or job.base_id is None
            else (job.base_id, found.delta))
        if self.ctx.first:
            return
        if found.rows or found.packs:
            # The rows' changed ones are folded into packs where the new version gives them
            # back: its value, made if it is a delta alone (packs alone need none)
            data = found.data
            if data is None and found.rows:
                data = await asyncio.to_thread(digesting.whole, found, job)
            writes.change_rows(url, found.rows or b"", previous_id, found.packs, data)

    async def gone(self, sets: Iterable[StoredSet]) -> Gone:
        """Entry sets of documents that no longer list URLs: their locs are held as removed."""
        closed: list[int] = []
        removed: dict[str, EntryState] = {}
        for stored in sets:
            closed.append(stored.id)
            decoded = await asyncio.to_thread(_decode_whole, stored)
            for loc, state in decoded.states.items():
                removed.setdefault(loc, state)
        return Gone(closed, removed)


def _decode_whole(stored: StoredSet) -> entryset.EntrySet:
    return entryset.decode(stored.whole())


def _listed(data: bytes, hits: set[int]) -> list[str]:
    """The locs of a stored entry set whose fingerprints are among these."""
    locs = entryset.locs(data)
    return [loc for loc, fingerprint in zip(locs, fingerprints.loc_hashes(locs), strict=True)
            if fingerprint in hits]
