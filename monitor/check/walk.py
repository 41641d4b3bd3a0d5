"""The walk of one check: which documents are read, in which order, and how far.

From the target's root down its indexes, each document is admitted (no cycle, in scope, not
seen), read ahead of its turn, a few children at a time (fetched conditionally and digested in
worker processes: ``monitor.check.fetching``), and then, strictly in its listed order, given its
turn (``monitor.check.turn``): its frozen ``DocumentOutcome`` is folded into the check's tally
(``Tally.take``) and, while the depth limit allows, the children of an index are walked next.
The walk holds no database transaction: it reads through ``Context.reads`` and records its
writes for the end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import urljoin

from monitor.check.context import Context
from monitor.check.entries import Entries
from monitor.check.fetching import DocumentReader, Got
from monitor.check.tally import Admitted, Found, one_issue
from monitor.check.turn import take_turn
from monitor.core.model import DocumentResult
from monitor.core.rules import RuleId
from monitor.read import validate
from monitor.robots import judge as robots

__all__ = ["Walk"]

_AHEAD_MAX = 64  # children started and not yet applied, unchanged ones included


class Walk:
    """The documents of one check, read and applied in order (see the module)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.entries = Entries(ctx)
        self.reader = DocumentReader(ctx, self.entries.seen)
        self.visited: set[str] = set()
        # Children in flight: one digested in each worker and here, and two fetched ahead
        # (one waiting for a free digester, one that finished before the child before it).
        self.window = ctx.digests.size + 3

    async def run(self) -> robots.Answer | None:
        """Read the target's root and everything below it; a site target's root, its
        robots.txt, as read."""
        url = self.ctx.target.url
        if self.ctx.target.site:
            url = urljoin(url if url.endswith("/") else url + "/", "/robots.txt")
        doc = self._admit(url, None, frozenset())
        assert doc is not None
        got = await self.reader.read(url, doc, site=self.ctx.target.site)
        await self._turn(got, 0, frozenset(), root=True)
        return got.answer

    def _admit(self, url: str, parent: str | None, ancestors: frozenset[str],
               ) -> DocumentResult | None:
        """The document's result row, or None when it is not to be read (cycle, seen, scope)."""
        if url in ancestors:
            self.ctx.tally.take(one_issue(RuleId.INDEX_CYCLE,
                                          f"{url} lists an index that reaches it again", parent))
            return None
        if url in self.visited:
            return None
        self.visited.add(url)
        outside = None if parent is None else _out_of_scope(self.ctx, url, parent)
        if outside is not None:
            self.ctx.tally.take(outside)
            return None
        doc = DocumentResult(url=url, outcome="failed", parent=parent)
        self.ctx.tally.take(Admitted(doc))
        return doc

    async def _turn(self, got: Got, depth: int, ancestors: frozenset[str], *,
                    root: bool = False) -> None:
        """Take a document's outcome into the check, in its listed order, then walk the
        children of an index unless they are past the depth limit (not read)."""
        take, limit = self.ctx.tally.take, self.ctx.target.limits.max_depth
        turn = await take_turn(self.ctx, self.entries, got, root=root)
        outcome, children = turn.outcome, turn.children
        if children is not None and depth + 1 > limit:
            deep = one_issue(RuleId.INDEX_NESTED, f"{got.url}: index depth limit {limit} reached; "
                             "children not read", got.url)
            outcome = replace(outcome, found=(*outcome.found, deep), failed=True)
            children = None
        take(outcome)
        if turn.gone is not None:
            take(turn.gone)
        if children is not None:
            await self._children(got.url, children, depth + 1, ancestors | {got.url})

    async def _children(self, index: str, children: Sequence[str], depth: int,
                        ancestors: frozenset[str]) -> None:
        """Read an index's children: a few read ahead, each given its turn in listed order."""
        ahead: deque[asyncio.Task[Got]] = deque()
        try:
            for child in children:
                doc = self._admit(child, index, ancestors)
                if doc is None:
                    continue
                await self._make_room(ahead, depth, ancestors)
                ahead.append(asyncio.create_task(self.reader.read(child, doc)))
            while ahead:
                await self._turn(await ahead.popleft(), depth, ancestors)
        finally:
            for task in ahead:
                task.cancel()
            if ahead:
                await asyncio.gather(*ahead, return_exceptions=True)

    async def _make_room(self, ahead: deque[asyncio.Task[Got]], depth: int,
                         ancestors: frozenset[str]) -> None:
        """Give the children at the head that are done their turn; return once another may
        start.

        At most ``window`` children are in flight or read and waiting for their turn. One that
        came back unchanged (304) holds nothing and does not count: while a changed child is
        digested, the unchanged ones after it are fetched (up to ``_AHEAD_MAX`` in all).
        """
        while True:
            while ahead and ahead[0].done():
                await self._turn(ahead.popleft().result(), depth, ancestors)
            held = len(ahead) - sum(map(_unchanged, ahead))
            if held < self.window and len(ahead) < _AHEAD_MAX:
                return
            # The head is not done (it would have been applied): something is pending.
            await asyncio.wait([task for task in ahead if not task.done()],
                               return_when=asyncio.FIRST_COMPLETED)


def _out_of_scope(ctx: Context, url: str, parent: str) -> Found | None:
    """Why a child its index lists is not read (relative, another host or directory), or
    None when it is in scope."""
    relative = validate.child_issue(url, parent)
    if relative is not None:
        return Found((relative,))
    where = validate.child_scope(url, parent)
    if where is None or ctx.kind(parent) == "robots":
        return None  # a robots.txt may name sitemaps on any host (a CDN, say)
    if ctx.settings.allow_cross_host_children:
        return None
    if where == "directory":
        # Out of the index's scope as another host is (sitemaps.org, Google): not read.
        return one_issue(RuleId.INDEX_CHILD_OUT_OF_SCOPE, f"{url} is outside the directory of its "
                         "index; not fetched", parent, loc=url)
    return one_issue(RuleId.INDEX_CHILD_OUT_OF_SCOPE,
                     f"{url} is on another host than its index; not fetched", parent)


def _unchanged(task: asyncio.Task[Got]) -> bool:
    """Whether a child's task is done and found the child unchanged (it holds nothing)."""
    return (task.done() and not task.cancelled() and task.exception() is None
            and task.result().unchanged)
