"""``news-disallowed`` and ``image-disallowed``: a verdict of the whole target, known once its
hosts' robots.txt were read (after the walk).

Like ``hreflang-not-reciprocal``, it is stored with the entries (an entry's rules), so that it
lasts while nothing changes: the documents read by this check are judged, and every document
when a robots.txt is new (changed, or read for the first time). Each entry that is a news
article, or has images, on a host whose robots.txt is known is asked of it
(``monitor.robots.agents``); the others keep what they had.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.check.context import Context
from monitor.check.marks import Finder, record
from monitor.check.tally import INDEX_KINDS, Marked
from monitor.core.rules import RuleId
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
        marked = await record(ctx, url, state, agents.RULES, _finder(known), room)
        if marked is not None:
            marks.append(marked)
            room -= len(marked.issues)
    return marks


def _finder(rules: Mapping[str, RobotsRules]) -> Finder:
    """The positions of the entries whose news or images these robots.txt disallow."""
    def find(locs: list[str], exts: list[Any]) -> dict[RuleId, list[int]]:
        found: dict[RuleId, list[int]] = {rule: [] for rule in agents.RULES}
        for i, (loc, ext) in enumerate(zip(locs, exts, strict=True)):
            for rule in agents.disallowed(loc, ext, rules.get):
                found[rule].append(i)
        return found
    return find
