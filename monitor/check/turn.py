"""One document's turn: what a document read ahead gives the check, in its listed order.

``take_turn`` makes of a ``Got`` (``monitor.check.fetching``) the document's frozen
``DocumentOutcome``, and, for an index, the children it lists; the walk
(``monitor.check.walk``) folds the outcome into the tally (``Tally.take``) and decides which
of the children are read. A sitemap's entries go through ``Entries`` first (cross-submission,
the dedupe against the documents before it), and its new entry set is recorded for the
check's transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from monitor.check.context import Context
from monitor.check.entries import Entries
from monitor.check.fetching import Got
from monitor.check.tally import (
    INDEX_KINDS,
    DocumentOutcome,
    Found,
    Gone,
    document_state,
    failure,
    one_issue,
)
from monitor.codec.states import DocumentState
from monitor.core.model import RULES, Issue
from monitor.core.rules import RuleId, rule_id
from monitor.robots.sitemaps import parse_robots

__all__ = ["Turn", "take_turn"]


@dataclass(frozen=True, slots=True)
class Turn:
    """What one document gives the check: its outcome, then the entry sets it no longer
    lists (``gone``), and the children it lists when it is an index (else None)."""

    outcome: DocumentOutcome
    children: Sequence[str] | None = None
    gone: Gone | None = None


async def take_turn(ctx: Context, entries: Entries, got: Got, *, root: bool = False) -> Turn:
    """A document's outcome, in its listed turn (the documents before it taken)."""
    if got.error is not None:
        found: tuple[Found, ...] = ()
        if got.error.kind in RULES:  # a reason with a rule id (size-too-large, gzip-invalid)
            found = (one_issue(rule_id(got.error.kind), got.error.message, got.url),)
        return Turn(failure(got.doc, got.error.kind, got.error.message, got.error.status,
                            root=root, found=found))
    if got.unchanged:
        return _unchanged(ctx, got)
    if got.robots_txt is not None:
        return _robots(ctx, got, got.robots_txt)
    return await _sitemap(ctx, entries, got, root=root)


def _unchanged(ctx: Context, got: Got) -> Turn:
    """A document whose previous state stands (304, or the same bytes). Its own issues stand
    with its stored state; where it sits in the walk is judged again (an index may now be
    listed by another index)."""
    previous = got.previous
    assert previous is not None
    doc = replace(got.doc, kind=previous.kind, urls=previous.urls,  # type: ignore[arg-type]
                  invalid=previous.invalid,
                  duplicates=previous.issue_counts.get(RuleId.LOC_DUPLICATE, 0))
    notes = _nested(ctx, got.url, doc.parent) if previous.kind == "sitemapindex" else []
    return Turn(DocumentOutcome(doc, notes, lastmods_compared=_lastmods(previous)),
                previous.children if previous.kind in INDEX_KINDS else None)


def _nested(ctx: Context, url: str, parent: str | None) -> list[Found]:
    """``index-nested`` on the parent, when an index is listed by an index."""
    if parent is None or ctx.kind(parent) != "sitemapindex":
        return []
    return [one_issue(RuleId.INDEX_NESTED, f"{url} is a sitemap index inside an index", parent)]


def _robots(ctx: Context, got: Got, text: str) -> Turn:
    """A site target's root: its robots.txt, whose ``Sitemap:`` lines are its children. Its
    warnings are its own, stored with its state: they stand while the file is unchanged."""
    url = got.url
    limit = ctx.target.limits.max_children
    relative: list[str] = []
    children = parse_robots(text, url, limit=limit + 1, relative=relative)
    doc = replace(got.doc, outcome="ok", kind="robots")
    issues = [Issue(RuleId.ROBOTS_SITEMAP_RELATIVE, f"{url} has a relative Sitemap: line "
                    f"{value!r}: search engines require a full URL, it is ignored", document=url)
              for value in relative]
    if len(children) > limit:
        issues.append(Issue(RuleId.INDEX_TOO_MANY, f"{url} lists more than {limit} sitemaps; "
                            f"the first {limit} are read", document=url))
        del children[limit:]
    if not children:
        return Turn(failure(doc, "no-sitemaps", f"{url} lists no Sitemap: lines", None,
                            root=True, found=[Found(tuple(issues))]))
    state = document_state(url, doc, "robots", children=children,
                           issues=_stored(issues), counts=Counter(i.rule for i in issues))
    return Turn(DocumentOutcome(doc, [Found(tuple(issues), counted=False)], state=state),
                children)


async def _sitemap(ctx: Context, entries: Entries, got: Got, *, root: bool) -> Turn:
    """A sitemap or a sitemap index, digested."""
    url, found = got.url, got.digest
    assert found is not None
    doc = replace(got.doc, kind=found.kind)
    if found.failure is not None:
        return Turn(failure(doc, found.failure.rule, found.failure.message, doc.http_status,
                            root=root, found=(Found((found.failure,)),)))
    doc = replace(doc, outcome="ok")
    own = Found(tuple(found.issues), counted=False)
    stored_issues = _stored(found.issues)
    if found.kind == "sitemapindex":
        notes = [own, *_nested(ctx, url, doc.parent)]
        outcome = DocumentOutcome(doc, notes, state=document_state(
            url, doc, "sitemapindex", children=found.children, issues=stored_issues,
            counts=found.counts))
        # it listed URLs before: they are gone from it
        gone = None if got.stored is None else await entries.gone([got.stored])
        return Turn(outcome, found.children, gone)
    assert got.job is not None
    wire = await entries.take(url, doc.parent, found, got.job)
    doc = replace(doc, urls=found.urls, invalid=found.invalid, duplicates=found.duplicates)
    outcome = DocumentOutcome(
        doc, (own, Found(found.entry_issues, counted=False)),
        state=document_state(url, doc, found.kind or "urlset", issues=stored_issues,
                             counts=found.counts, lastmods=found.lastmods),
        recorded=entries.recorded(url, found), fetched_bytes=wire)
    await entries.record(url, found, got.job, got.stored)
    return Turn(outcome)


def _stored(issues: Sequence[Issue]) -> list[dict[str, Any]]:
    """A document's own issues as its stored state keeps them."""
    return [{"rule": i.rule, "message": i.message, "loc": i.loc} for i in issues]


def _lastmods(doc: DocumentState) -> int:
    """A document's entries with a valid lastmod, as stored; for a row stored before they
    were counted, its entries less those whose lastmod is invalid (it can only lower a
    churn ratio: an entry without a lastmod counts as compared and unchanged)."""
    if doc.lastmods is not None:
        return doc.lastmods
    return max(0, doc.urls + doc.invalid - doc.issue_counts.get(RuleId.LASTMOD_INVALID, 0))
