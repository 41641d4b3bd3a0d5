"""One URL's whole story as a person reads it (pure): the text the ``url`` command prints.

The story itself is read by ``monitor.store.storyreads.read_story``; the page shows the same
dictionary through its template, and ``--json`` prints it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from monitor.core import times
from monitor.core.model import URL_NOTES
from monitor.listing.params import answer_text, change_detail

__all__ = ["health_line", "lines", "told"]


def _fields(entry: Mapping[str, Any]) -> str:
    shown = [f"{key} {entry[key]}" for key in ("lastmod", "changefreq", "priority")
             if entry.get(key) not in (None, "")]
    if entry.get("extensions"):
        shown.append("extensions " + str(entry["extensions"])[:120])
    return ", ".join(shown) or "no lastmod, changefreq nor priority"


def _first(story: Mapping[str, Any], now: datetime) -> str:
    first = story.get("first_listed")
    if not first:
        return ""
    how = "the first check" if first["first_check"] else "added"
    return f"snapshot {first['snapshot_id']} ({how}), {times.when(first['at'], now)}"


def health_line(health: Mapping[str, Any], now: datetime) -> str:
    """The URL's state, its answer, since when and when checked; then what later tries met
    without an answer to trust (a 5xx before its third time in a row), in that order."""
    checked = (f", checked {times.when(health['checked_at'], now)}"
               if health.get("checked_at") else ", not checked yet")
    since = (f", in this state since {times.when(health['since'], now)}"
             if health.get("since") else "")
    # a row with tries pending holds the latest try's detail, not the state's
    pending = health.get("attempts") or 0
    shown = {**health, "detail": None} if pending else health
    line = f"{answer_text(shown)}{since}{checked}"
    if pending:
        again = (f"; next try {times.when(health['due_at'], now)}"
                 if health.get("due_at") else "")
        line += (f"; then {pending} tr{'y' if pending == 1 else 'ies'} without an answer to "
                 f"trust: {health.get('detail') or 'no answer'}{again}")
    return line


def _removal(removal: Mapping[str, Any], now: datetime) -> str:
    answer = removal.get("answer")
    said = (f": it answered {answer_text(answer)}, checked "
            f"{times.when(answer.get('checked_at'), now)}" if answer else "")
    why = (f"reason {removal['reason']}" if removal.get("reason")
           else "reason not known yet (its URL check is due)")
    return (f"in snapshot {removal['snapshot_id']}, "
            f"{times.when(removal['at'], now)}: {why}{said}")


def told(story: Mapping[str, Any], now: datetime) -> dict[str, str]:
    """The sentences the ``url`` command prints about when the URL was listed, its removal
    and its health, for the page to say the same: ``""`` where there is nothing to say."""
    health = story.get("health")
    return {"first": _first(story, now),
            "removal": "" if story.get("removal") is None else _removal(story["removal"], now),
            "health": "" if health is None else health_line(health, now)}


def lines(story: Mapping[str, Any], now: datetime) -> Iterator[str]:
    """The story as lines of text: what it is now, then every change, newest first."""
    yield f"{story['loc']}  (target {story['target']})"
    first = _first(story, now)
    if story["snapshot_id"] is None:
        yield "  the target has no snapshot yet"
    elif story["listed"]:
        entry = story["entry"] or {}
        yield (f"  listed now (snapshot {story['snapshot_id']}) in "
               f"{', '.join(story['documents'])}: {entry.get('status', 'valid')}")
        if first:
            yield f"  first listed in {first}"
        yield f"  fields: {_fields(entry)}"
    else:
        yield f"  not listed now (snapshot {story['snapshot_id']})"
        if first:
            yield f"  first listed in {first}"
    if story.get("removal") is not None:
        yield f"  removed {_removal(story['removal'], now)}"
    health = story.get("health")
    if health is None:  # as the page says it
        yield ("  health: not checked yet (or url_checks.enabled is off)" if story["listed"]
               else "  health: not checked while listed")
    else:
        label = "health" if health.get("listed", True) else "health while listed"
        yield f"  {label}: {health_line(health, now)}"
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
