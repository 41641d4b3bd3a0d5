"""``hreflang-not-reciprocal``: a verdict of the whole target, known once every document was
read.

Each document was digested without it; it is stored with the entries all the same (an entry's
rules), so that it lasts while nothing changes. When no document was read or dropped, the stored
verdicts stand. Otherwise the target's balance (``monitor.read.alternates.balance``: this
check's documents', the others' from the first bytes of their stored sets) is nearly always 0,
every alternate answered, and only stored verdicts that no longer hold are taken back. Else each
document's set is read once more and its alternates checked pair by pair
(``alternates.Alternates``).
"""

from __future__ import annotations

import asyncio

from monitor.check.context import Context
from monitor.check.marks import Finder, record
from monitor.check.tally import INDEX_KINDS, Marked
from monitor.codec import entryset
from monitor.core.model import RULES_VERSION
from monitor.core.rules import RuleId
from monitor.read import alternates
from monitor.store import checkreads

__all__ = ["NOT_RECIPROCAL", "mark_unanswered"]

NOT_RECIPROCAL: RuleId = RuleId.HREFLANG_NOT_RECIPROCAL


async def mark_unanswered(ctx: Context, dropped: list[str]) -> list[Marked]:
    """Mark the entries whose alternates a URL of the target does not answer: the documents
    whose verdicts moved, for the check's tally."""
    tally = ctx.tally
    if not tally.balances and not dropped:
        return []
    docs = {**ctx.state.documents, **tally.read}
    for url in dropped:
        docs.pop(url, None)
    sitemaps = [url for url, doc in docs.items() if doc.kind not in INDEX_KINDS]
    others = [url for url in sitemaps if url not in tally.balances]
    balance = sum(tally.balances.get(url, 0) for url in sitemaps)
    heads = (await ctx.reads.call(checkreads.load_set_heads, ctx.target_id, others)
             if others else {})
    for url in others:
        if url not in heads:
            continue
        head = entryset.head(heads[url])
        if head is None or head[0] != RULES_VERSION:  # stored before balances were kept
            balance += await _balance(ctx, url)
        else:
            balance += head[1]
    stale = {url for url in others if docs[url].issue_counts.get(NOT_RECIPROCAL)}
    if not balance & alternates.MASK and not stale:
        return []
    found = await _unanswered(ctx, sitemaps) if balance & alternates.MASK else {}
    marks: list[Marked] = []
    room = tally.room()
    for url in sorted(stale | set(found), key=sitemaps.index):
        marked = await record(ctx, url, docs[url], (NOT_RECIPROCAL,),
                              _at(found.get(url, set())), room)
        if marked is not None:
            marks.append(marked)
            room -= len(marked.issues)
    return marks


async def _balance(ctx: Context, url: str) -> int:
    stored = (await ctx.reads.stored([url])).get(url)
    if stored is None:
        return 0
    columns = await asyncio.to_thread(entryset.unpack, stored.data)
    return alternates.balance(columns.locs(), columns.column(4))


async def _unanswered(ctx: Context, sitemaps: list[str]) -> dict[str, set[int]]:
    held = alternates.Alternates()
    for url in sitemaps:  # one entry set in memory at a time
        stored = await ctx.reads.current(url)
        if stored is not None:
            await asyncio.to_thread(_add_alternates, held, url, stored.whole())
    return await asyncio.to_thread(held.unanswered)


def _at(positions: set[int]) -> Finder:
    """``hreflang-not-reciprocal`` on these positions, found by the pass over every set."""
    return lambda _locs, _exts: {NOT_RECIPROCAL: positions}


def _add_alternates(held: alternates.Alternates, url: str, data: bytes) -> None:
    stored = entryset.unpack(data)
    held.add(url, stored.locs(), stored.column(4))
