"""How a time is shown to a person (pure): absolute UTC to the second, and how long ago.

Every page shows a stored time one way, ``2026-11-28 00:44:40 UTC``, with the distance from
now beside it (``3 min ago``); a terminal table writes the same instant as one word,
``2026-11-28T00:44:40Z``, so that its columns still split on spaces (``awk``); JSON keeps the
stored ISO 8601.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["ago", "compact", "parse", "when"]


def parse(value: str | datetime | None) -> datetime | None:
    """A stored time (ISO 8601 text or a datetime) as an aware UTC datetime; None if none."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def ago(moment: datetime, now: datetime) -> str:
    """``just now``, ``42 s ago``, ``3 min ago``, ``5 h ago``, ``12 days ago``, or ``in 2 min``."""
    seconds = (now - moment).total_seconds()
    later = seconds < 0
    seconds = abs(seconds)
    if seconds < 5:
        return "just now"
    for size, unit in ((86400, "days"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            count = int(seconds // size)
            text = f"{count} {'day' if unit == 'days' and count == 1 else unit}"
            return f"in {text}" if later else f"{text} ago"
    return "just now"  # pragma: no cover - every positive span has a unit above


def when(value: str | datetime | None, now: datetime | None = None, *,
         relative: bool = True) -> str:
    """``2026-11-28 00:44:40 UTC (3 min ago)``: no microseconds, always UTC; "" for none."""
    moment = parse(value)
    if moment is None:
        return "" if value is None else str(value)
    text = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    if not relative:
        return text
    return f"{text} ({ago(moment, now or datetime.now(UTC))})"


def compact(value: str | datetime | None) -> str:
    """``2026-11-28T00:44:40Z``: a table's time, one word, to the second; "" for none."""
    moment = parse(value)
    if moment is None:
        return "" if value is None else str(value)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
