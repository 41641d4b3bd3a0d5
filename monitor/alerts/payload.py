"""What a notification says, independent of the channel: payload, summary, links, redaction.

The payload is a plain JSON object (stored in the outbox, posted as-is by the webhook channel)::

    {"version": 1, "target": "shop", "url": "...", "rule": "mass-removal", "when": "removed",
     "severity": "critical", "state": "firing", "event": false, "snapshot_id": 42,
     "checked_at": "...Z", "since": "...Z", "summary": "shop: 250 URLs removed (5.0% of 5000)",
     "counts": {"urls": ..., "invalid": ..., "added": ..., "removed": ..., "changed": ...,
                "invalid_new": ..., "previous_urls": ...},
     "examples": {"removed": ["https://..."]}, "examples_truncated": false,
     "error": null | {"kind": ..., "message": ...}, "link": "https://.../changes?since=...",
     "page": "https://.../targets/shop/changes?since=..."}

Rules add what explains them (``monitor.alerts.details``): ``documents`` (a failed or partial
check's unread documents), ``issues`` (an issues rule's), ``dropped_documents`` (the children
an index stopped listing), ``robots`` (each changed robots.txt with its diff), ``pages`` (a
``url_health`` rule's listing of each state). docs/alerts.md describes them for users.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

__all__ = [
    "changes_link",
    "describe_duration",
    "idempotency_key",
    "iso",
    "page_link",
    "redact_url",
    "target_link",
    "text_lines",
]

PAYLOAD_VERSION = 1


def idempotency_key(target: str, rule: str, channel: str, snapshot_id: int | None,
                    state: str) -> str:
    """A stable key for one notification: the same inputs always give the same key."""
    raw = "\x1f".join([target, rule, channel, str(snapshot_id), state])
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def iso(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z``, as Alertmanager and most receivers expect."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def redact_url(url: str | None) -> str:
    """``scheme://host[:port]/…``: webhook URLs carry tokens in their path and query."""
    if not url:
        return "<no url>"
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    tail = "/…" if (parts.path not in ("", "/") or parts.query) else ""
    return f"{parts.scheme}://{host}{port}{tail}"


def target_link(api_base_url: str | None, target: str, listing: str,
                query: dict[str, str], *, page: bool = False) -> str | None:
    """A listing of a target (``changes``, ``urls``, ...) under ``api_base_url``: the JSON
    API's, or with ``page`` its web page; None without a base."""
    if not api_base_url:
        return None
    root = "" if page else "/api/v1"
    tail = f"?{urlencode(query)}" if query else ""
    return f"{api_base_url.rstrip('/')}{root}/targets/{quote(target, safe='')}/{listing}{tail}"


def _since(since: datetime, kind: str | None) -> dict[str, str]:
    query = {"since": iso(since.replace(microsecond=0))}
    if kind is not None:
        query["kind"] = kind
    return query


def changes_link(api_base_url: str | None, target: str, since: datetime,
                 kind: str | None = None) -> str | None:
    """The JSON API URL listing the changes of a target since a time (None without a base)."""
    return target_link(api_base_url, target, "changes", _since(since, kind))


def page_link(api_base_url: str | None, target: str, since: datetime,
              kind: str | None = None) -> str | None:
    """The web page of a target's changes since a time (None without a base)."""
    return target_link(api_base_url, target, "changes", _since(since, kind), page=True)


def describe_duration(seconds: float) -> str:
    """``3d 4h``, ``2h 5m``, ``45s``: for people reading a message."""
    seconds = int(max(seconds, 0))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


def title(payload: dict[str, Any]) -> str:
    """One line: state, severity, target and rule."""
    state = str(payload.get("state", "firing")).upper()
    severity = str(payload.get("severity", "warning")).upper()
    return f"[{state}] [{severity}] {payload.get('target')}: {payload.get('rule')}"


def text_lines(payload: dict[str, Any]) -> list[str]:
    """The notification as plain text lines (email body, Slack fallback, test output)."""
    lines = [str(payload.get("summary", "")), ""]
    lines.append(f"Target:   {payload.get('target')} ({payload.get('url')})")
    lines.append(f"Rule:     {payload.get('rule')} (when: {payload.get('when')}, "
                 f"severity: {payload.get('severity')}, state: {payload.get('state')})")
    if payload.get("checked_at"):
        lines.append(f"Checked:  {payload['checked_at']}  (snapshot {payload.get('snapshot_id')})")
    counts = payload.get("counts") or {}
    if counts:
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if v is not None)
        lines.append(f"Counts:   {shown}")
    error = payload.get("error")
    if error:
        lines.append(f"Error:    {error.get('kind')}: {error.get('message')}")
    for doc in payload.get("documents") or []:
        lines.append(f"Failed:   {doc.get('url')}: {doc.get('error') or doc.get('http_status')}")
    for doc in payload.get("dropped_documents") or []:
        lines.append(f"Dropped:  {doc.get('url')} ({doc.get('urls')} URLs): no longer in the "
                     "index")
    for issue in payload.get("issues") or []:
        lines.append(f"Issue:    {issue.get('rule')}: {issue.get('loc') or issue.get('document')}"
                     f": {issue.get('message')}")
    for robots in payload.get("robots") or []:
        lines.extend(["", f"{robots.get('url')} (HTTP {robots.get('http_status')}):"])
        lines.extend(f"  {line}" for line in str(robots.get("diff") or "").splitlines())
    pages = payload.get("pages") or {}
    for kind, urls in (payload.get("examples") or {}).items():
        lines.append("")
        lines.append(f"{kind} (examples):")
        lines.extend(f"  {u}" for u in urls)
        if pages.get(kind):
            lines.append(f"  every {kind} URL: {pages[kind]}")
    if payload.get("examples_truncated"):
        lines.append("  (more not shown)")
    if payload.get("link"):
        lines.extend(["", f"Full list: {payload['link']}"])
    if payload.get("page"):
        lines.append(f"Page:      {payload['page']}")
    return lines
