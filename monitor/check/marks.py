"""Verdicts of the whole target, stored with the entries: a stage that judges every entry of a
target (hreflang reciprocity, the news and image crawlers' robots.txt) puts the rule ids it found
on the positions of a document's entry set, and takes them off every other position, in a new
version of the set or in this check's own; the document's counts of those rules and their first
issues follow.

    marked = await record(ctx, url, state, ("hreflang-not-reciprocal",),
                          lambda locs, exts: {"hreflang-not-reciprocal": {3, 7}}, room)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any

from monitor.check.context import Context
from monitor.check.tally import Marked
from monitor.codec import entryset
from monitor.codec.states import DocumentState
from monitor.core.model import Entry
from monitor.core.rules import RuleId
from monitor.read import validate

__all__ = ["Finder", "record"]

# The positions of the entries that break each rule, given the set's locs and extensions
# (called in a worker thread, beside the unpacking).
Finder = Callable[[list[str], list[Any]], Mapping[RuleId, Collection[int]]]


async def record(ctx: Context, url: str, state: DocumentState, rules: tuple[RuleId, ...],
                 find: Finder, room: int) -> Marked | None:
    """Store the document's entries with ``rules`` on the positions ``find`` gives, and on no
    other; its new state and the first ``room`` issues of each rule. None when the stored
    verdicts are those already, or the document has no stored set."""
    stored = await ctx.reads.current(url)
    if stored is None:
        return None
    relabelled = await asyncio.to_thread(_relabel, stored.whole(), rules, find)
    if relabelled is None:
        return None
    data, locs, exts, found = relabelled
    writes = ctx.writes
    if writes.recorded(url):  # this snapshot's own version: the same entries
        writes.replace_set(url, data)
    else:  # an earlier snapshot's: a new version, so that history keeps its verdicts
        writes.entry_set(url, stored.id, state.urls, state.invalid, data, delta=True)
    counts = {rule: n for rule, n in state.issue_counts.items() if rule not in rules}
    counts.update((rule, len(found[rule])) for rule in rules if found.get(rule))
    issues = [validate.issue(rule, Entry(locs[i], extensions=exts[i]), url)
              for rule in rules for i in sorted(found.get(rule, ()))[: max(0, room)]]
    return Marked(url, replace(state, issue_counts=counts), issues)


def _relabel(data: bytes, rules: tuple[RuleId, ...], find: Finder,
             ) -> tuple[bytes, list[str], list[Any], Mapping[RuleId, Collection[int]]] | None:
    """A stored entry set with ``rules`` where ``find`` puts them, its locs, extensions and
    what ``find`` found; None when its verdicts are those already (pure: run in a thread, a
    50,000-entry set takes a while to unpack and pack)."""
    columns = entryset.unpack(data)
    locs, exts = columns.locs(), columns.column(4)
    found = find(locs, exts)
    before = columns.rules()
    after = {i: kept for i, ids in before.items()
             if (kept := " ".join(r for r in ids.split() if r not in rules))}
    for rule in rules:
        for i in sorted(found.get(rule, ())):
            after[i] = f"{after[i]} {rule}" if i in after else rule
    if after == before:
        return None
    columns.header.pop("rules", None)
    if after:
        columns.header["rules"] = {str(i): after[i] for i in sorted(after)}
    return entryset.pack(columns), locs, exts, found
