"""What exactly fired, for a notification (pure): the listing that shows it, the documents
and errors behind it, the robots.txt diff.

A notification links to the listing that shows exactly what fired, its filters set: a removal
rule's removals (of the reasons it selects), a ``url_health`` rule's URLs of each state it
counts, an ``issues`` rule's issues of its rule ids, a failed or partial check's snapshots and
failed documents. ``links`` gives each as the JSON API's URL and the web page's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from monitor.alerts.payload import iso, target_link
from monitor.config import Rule
from monitor.core.model import CheckResult
from monitor.core.rules import RuleId
from monitor.robots import versiondiff

__all__ = ["check_links", "documents", "dropped_text", "issues", "news_links", "removal_links",
           "robots", "state_links"]

_CHANGE_KINDS = ("added", "removed", "changed", "invalid")


def _both(base: str | None, target: str, listing: str, query: dict[str, str],
          ) -> tuple[str | None, str | None]:
    return (target_link(base, target, listing, query),
            target_link(base, target, listing, query, page=True))


def _bounded(first: int, last: int, query: dict[str, str]) -> dict[str, str]:
    """A changes query bounded on both sides by snapshots: it lists the same rows later."""
    return {**query, "since": str(first), "until": str(last)}


def check_links(base: str | None, target: str, rule: Rule, snapshot_id: int | None,
                since: datetime) -> tuple[str | None, str | None]:
    """(API link, page link) of the listing that shows what a check's rule fired on: the
    check's own snapshot's changes, issues or URLs (``since``, the check's start, only when it
    wrote no snapshot)."""
    if snapshot_id is None:
        return _both(base, target, "changes", {"since": iso(since.replace(microsecond=0))})
    at = str(snapshot_id)
    if rule.when in _CHANGE_KINDS:
        return _both(base, target, "changes", _bounded(snapshot_id, snapshot_id,
                                                       {"kind": rule.when}))
    if rule.when == "robots_changed":
        return _both(base, target, "changes", _bounded(snapshot_id, snapshot_id,
                                                       {"kind": "robots"}))
    if rule.when == "issues":
        return _both(base, target, "issues", {"rule": ",".join(rule.rule or []), "at": at})
    if rule.when == "partial":
        return _both(base, target, "issues", {"rule": RuleId.CHILD_FETCH_FAILED, "at": at})
    if rule.when in ("check_failed", "recovered"):
        return _both(base, target, "snapshots", {})
    if rule.when == "url_count_below":
        return _both(base, target, "urls", {"at": at})
    return _both(base, target, "changes", _bounded(snapshot_id, snapshot_id, {}))


def state_links(base: str | None, target: str, states: Sequence[str],
                ) -> dict[str, str | None]:
    """The page of the listed URLs in each state (a ``url_health`` rule's states)."""
    return {state: target_link(base, target, "urls", {"status": state}, page=True)
            for state in states}


def news_links(base: str | None, target: str, rules: Sequence[str], snapshot_id: int,
               ) -> tuple[str | None, str | None]:
    """(API link, page link) of the health transitions a round of URL checks wrote into
    these rules' states (its news), bounded by the snapshot the round checked."""
    return _both(base, target, "changes", _bounded(snapshot_id, snapshot_id, {
        "kind": "health", "rule": ",".join(rules)}))


def removal_links(base: str | None, target: str, reasons: Sequence[str],
                  snapshots: tuple[int, int] | None = None) -> tuple[str | None, str | None]:
    """(API link, page link) of the removals the URL checks gave these reasons, bounded by
    the snapshots that removed them (``snapshots``: the first and the last)."""
    query = {"kind": "removed", "reason": ",".join(reasons)}
    if snapshots is not None:
        query = _bounded(*snapshots, query)
    return _both(base, target, "changes", query)


def issues(rule: Rule, result: CheckResult, limit: int) -> list[dict[str, Any]]:
    """The issues this check found of an ``issues`` rule's globs (or of ``partial``'s
    ``child-fetch-failed``): rule, the URL or document it is about and its message."""
    globs = rule.rule or [RuleId.CHILD_FETCH_FAILED]
    found = [i for i in result.issues if any(fnmatchcase(i.rule, g) for g in globs)]
    return [{"rule": i.rule, "loc": i.loc, "document": i.document, "message": i.message}
            for i in found[:limit]]


def documents(result: CheckResult) -> list[dict[str, Any]]:
    """The documents a check could not read: url, HTTP status and error."""
    return [{"url": d.url, "http_status": d.http_status, "error": d.error}
            for d in result.failed_documents]


def documents_text(found: Sequence[Mapping[str, Any]]) -> str:
    """``URL (HTTP 500 ...), URL (timeout ...)``: failed documents in a summary."""
    return ", ".join(f"{d['url']} ({d.get('error') or 'HTTP ' + str(d.get('http_status'))})"
                     for d in found)


def dropped_text(dropped: Mapping[str, int]) -> str:
    """Why URLs went: the documents an index stopped listing, with their URL counts."""
    if not dropped:
        return ""
    named = ", ".join(f"{url} ({n} URLs)" for url, n in dropped.items())
    return f"; the index no longer lists {named}"


def robots(result: CheckResult) -> list[dict[str, Any]]:
    """Each robots.txt that changed in this check: its URL, HTTP status and the diff of its
    two versions (capped, with a note), never whole files."""
    out = []
    for found in result.robots:
        if not found.get("changed"):
            continue
        diff = versiondiff.unified(found.get("before"), found.get("after"), found["url"])
        out.append({"url": found["url"], "http_status": found.get("http_status"),
                    "diff": diff.text, "added": diff.added, "removed": diff.removed,
                    "diff_truncated": diff.omitted > 0})
    return out
