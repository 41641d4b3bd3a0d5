"""``news-disallowed`` and ``image-disallowed``: a verdict of the whole target, known once its
hosts' robots.txt were read (after the walk).

Like ``hreflang-not-reciprocal``, it is stored with the entries (an entry's rules), so that it
lasts while nothing changes: the documents read by this check are judged, and every document
when a robots.txt is new (changed, or read for the first time). Each entry that is a news
article, or has images, on a host whose robots.txt is known is asked of it
(``monitor.robots.agents``); the others keep what they had.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from monitor.check.context import Context
from monitor.check.tally import INDEX_KINDS, Marked
from monitor.codec import entryset
from monitor.codec.states import DocumentState
from monitor.model import Entry
from monitor.read import validate
from monitor.robots import agents
from monitor.robots.matcher import RobotsRules

__all__ = ["mark_disallowed"]


async def mark_disallowed(ctx: Context, dropped: list[str], rules: Mapping[str, RobotsRules],
                          new: frozenset[str]) -> list[Marked]:
    """Mark the entries whose news or images robots.txt keeps from Google's crawlers: the
    documents whose verdicts moved, for the check's tally."""
    known = {url: held for url, held in rules.items() if held.may_disallow()}
    tally = ctx.tally
    docs = {**ctx.state.documents, **tally.read}
    for url in dropped:
        docs.pop(url, None)
    everything = bool(new)
    marks: list[Marked] = []
    room = tally.room()
    for url, state in docs.items():
        if state.kind in INDEX_KINDS:
            continue
        had = any(state.issue_counts.get(rule) for rule in agents.RULES)
        if not (everything or ctx.writes.recorded(url)) or not (known or had):
            continue
        marked = await _mark(ctx, url, state, known, room)
        if marked is not None:
            marks.append(marked)
            room -= len(marked.issues)
    return marks


async def _mark(ctx: Context, url: str, state: DocumentState,
                rules: Mapping[str, RobotsRules], room: int) -> Marked | None:
    """Record a document's entries with the robots rules they break now; its new state and
    the first of those issues (``room`` of each rule)."""
    writes = ctx.writes
    stored = await ctx.reads.current(url)
    if stored is None:
        return None
    marked = await asyncio.to_thread(_marked, stored.whole(), rules)
    if marked is None:
        return None
    data, locs, exts, found = marked
    if writes.recorded(url):  # this snapshot's own version: the same entries
        writes.replace_set(url, data)
    else:  # an earlier snapshot's: a new version, so that history keeps its verdicts
        writes.entry_set(url, stored.id, state.urls, state.invalid, data, delta=True)
    counts = {rule: n for rule, n in state.issue_counts.items() if rule not in agents.RULES}
    for rule in agents.RULES:
        if found[rule]:
            counts[rule] = len(found[rule])
    issues = [validate.issue(rule, Entry(locs[i], extensions=exts[i]), url)
              for rule in agents.RULES for i in found[rule][: max(0, room)]]
    return Marked(url, replace(state, issue_counts=counts), issues)


def _marked(data: bytes, rules: Mapping[str, RobotsRules],
            ) -> tuple[bytes, list[str], list[Any], dict[str, list[int]]] | None:
    """A stored entry set with the robots rules each entry breaks now, its locs, extensions
    and the positions of each rule; None when its verdicts are those already (pure: run in a
    thread)."""
    columns = entryset.unpack(data)
    locs, exts = columns.locs(), columns.column(4)
    found: dict[str, list[int]] = {rule: [] for rule in agents.RULES}
    for i, (loc, ext) in enumerate(zip(locs, exts, strict=True)):
        for rule in agents.disallowed(loc, ext, rules.get):
            found[rule].append(i)
    before = columns.rules()
    after = {i: kept for i, ids in before.items()
             if (kept := " ".join(r for r in ids.split() if r not in agents.RULES))}
    for rule in agents.RULES:
        for i in found[rule]:
            after[i] = f"{after[i]} {rule}" if i in after else rule
    if after == before:
        return None
    columns.header.pop("rules", None)
    if after:
        columns.header["rules"] = {str(i): after[i] for i in sorted(after)}
    return entryset.pack(columns), locs, exts, found
