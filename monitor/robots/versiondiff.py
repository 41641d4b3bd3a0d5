"""What changed in a robots.txt, as a unified diff that people read (pure).

A ``robots`` change keeps both texts; a person wants the lines that moved, as ``diff -u``
shows them. ``unified`` makes that diff, capped at ``MAX_LINES`` lines with a note that says
how many were left out, so a rewritten 500 KiB file cannot flood a Slack message or a page.
The same diff is shown on the pages, in ``changes --kind robots``, the API and the alerts.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LINES", "RobotsDiff", "of_change", "unified"]

MAX_LINES = 200  # of a diff, before it is cut with a note


@dataclass(frozen=True, slots=True)
class RobotsDiff:
    """A unified diff of two versions of a robots.txt; ``omitted`` lines were cut from its
    end (``text`` then ends with a note that says so)."""

    text: str
    added: int  # lines added
    removed: int  # lines removed
    omitted: int = 0

    def as_json(self) -> dict[str, Any]:
        """The diff in a JSON payload or listing row."""
        return {"text": self.text, "added": self.added, "removed": self.removed,
                "truncated": self.omitted > 0}


def unified(before: str | None, after: str | None, url: str = "robots.txt", *,
            max_lines: int = MAX_LINES) -> RobotsDiff:
    """The diff from ``before`` to ``after`` (None: the host had no robots.txt, read as an
    empty file), with three lines of context, cut after ``max_lines`` lines."""
    old, new = (before or "").splitlines(), (after or "").splitlines()
    lines = list(difflib.unified_diff(
        old, new, fromfile=f"{url} (before)" if before is not None else f"{url} (none)",
        tofile=f"{url} (after)" if after is not None else f"{url} (none)", lineterm="", n=3))
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    if not lines and (before or "") != (after or ""):  # only line endings differ
        lines = ["(only the line endings or the final newline changed)"]
    omitted = max(0, len(lines) - max_lines)
    shown = lines[:max_lines]
    if omitted:
        shown.append(f"... {omitted} more diff lines not shown ({added} added and {removed} "
                     "removed in all): the full texts are in the change's before and after")
    return RobotsDiff("\n".join(shown), added, removed, omitted)


def of_change(before: dict[str, Any] | None, after: dict[str, Any] | None, url: str,
              ) -> RobotsDiff:
    """The diff of a stored ``robots`` change (its ``before`` and ``after`` JSON objects)."""
    return unified((before or {}).get("text"), (after or {}).get("text"), url)
