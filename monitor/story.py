"""One URL's whole story as a person reads it (pure): the text the ``url`` command prints.

The story itself is read by ``monitor.store.story.read_story``; the page shows the same
dictionary through its template, and ``--json`` prints it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from monitor import times
from monitor.listings import change_detail
from monitor.model import URL_NOTES

__all__ = ["lines"]


def _fields(entry: Mapping[str, Any]) -> str:
    shown = [f"{key} {entry[key]}" for key in ("lastmod", "changefreq", "priority")
             if entry.get(key) not in (None, "")]
    if entry.get("extensions"):
        shown.append("extensions " + str(entry["extensions"])[:120])
    return ", ".join(shown) or "no lastmod, changefreq nor priority"


def lines(story: Mapping[str, Any], now: datetime) -> Iterator[str]:
    """The story as lines of text: what it is now, then every change, newest first."""
    yield f"{story['loc']}  (target {story['target']})"
    if story["snapshot_id"] is None:
        yield "  the target has no snapshot yet"
    elif story["listed"]:
        entry = story["entry"] or {}
        yield (f"  listed now (snapshot {story['snapshot_id']}) in "
               f"{', '.join(story['documents'])}: {entry.get('status', 'valid')}")
        yield f"  fields: {_fields(entry)}"
    else:
        yield f"  not listed now (snapshot {story['snapshot_id']})"
    health = story.get("health")
    if health is None:
        yield "  health: not checked"
    else:
        status = f" (HTTP {health['http_status']})" if health.get("http_status") else ""
        final = f" -> {health['final_url']}" if health.get("final_url") else ""
        checked = (f", checked {times.when(health['checked_at'], now)}"
                   if health.get("checked_at") else ", not checked yet")
        since = f", since {times.when(health['since'], now)}" if health.get("since") else ""
        detail = (f": {health['detail']}" if health.get("detail")
                  and health["detail"] != f"HTTP {health.get('http_status')}" else "")
        yield f"  health: {health['state']}{status}{final}{since}{checked}{detail}"
        if health.get("rule") in URL_NOTES:
            yield f"  issue: info {health['rule']}: {health.get('detail') or ''}"
    for issue in story.get("issues") or []:
        yield f"  issue: {issue['severity']} {issue['rule']}: {issue['message']}"
    events = story.get("changes") or []
    if not events:
        yield "  no change recorded"
        return
    yield f"  {len(events)} changes, newest first:"
    width = max(len(e["kind"]) for e in events)
    for event in events:
        extra = [part for part in (change_detail(event), event.get("reason") and
                                   f"reason {event['reason']}", event.get("rule")) if part]
        yield (f"  {times.compact(event['at'])}  {event['kind'].ljust(width)}  "
               f"snapshot {event['snapshot_id']}  {'; '.join(extra)}").rstrip()
    if story.get("changes_left"):
        yield f"  ... and {story['changes_left']} older changes"
