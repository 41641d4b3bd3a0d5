"""The value types the frozen codecs use, as they were when the copies were made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["added", "removed", "changed", "invalid"]
MAX_LOC_LENGTH = 2048
RULES_VERSION = 4


@dataclass(frozen=True, slots=True)
class EntryState:
    """An entry as the diff compares it: its attributes and whether it is valid."""

    lastmod: str | None = None
    changefreq: str | None = None
    priority: str | None = None
    extensions: str | None = None
    valid: bool = True

    def as_json(self) -> dict[str, Any]:
        """The ``before``/``after`` shape of a change in JSON."""
        return {
            "lastmod": self.lastmod,
            "changefreq": self.changefreq,
            "priority": self.priority,
            "extensions": self.extensions,
            "valid": self.valid,
        }


# EntryState is a frozen dataclass; setting its slots directly is ~3x cheaper than its __init__,
# and hundreds of thousands are built per check (validation, stored entry sets).
_SLOTS = vars(EntryState)
_SETTERS = tuple(_SLOTS[name].__set__ for name in (
    "lastmod", "changefreq", "priority", "extensions", "valid"))


def entry_state(
    lastmod: str | None, changefreq: str | None, priority: str | None, extensions: str | None,
    valid: bool,
) -> EntryState:
    """``EntryState(...)`` the fast way: equal to it, and hashing equal."""
    state: EntryState = object.__new__(EntryState)
    set_lastmod, set_changefreq, set_priority, set_extensions, set_valid = _SETTERS
    set_lastmod(state, lastmod)
    set_changefreq(state, changefreq)
    set_priority(state, priority)
    set_extensions(state, extensions)
    set_valid(state, valid)
    return state


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two snapshots of a target."""

    kind: ChangeKind
    loc: str
    before: EntryState | None
    after: EntryState | None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of the command line's output (docs/cli.md)."""
        return {
            "kind": self.kind,
            "loc": self.loc,
            "before": None if self.before is None else self.before.as_json(),
            "after": None if self.after is None else self.after.as_json(),
        }


def invalid_rule(loc: str) -> str:
    """The rule that made an entry with this loc invalid (an ``invalid`` change is about it):
    a loc too long is that first, as validation lists it."""
    return "loc-too-long" if len(loc) >= MAX_LOC_LENGTH else "loc-not-absolute"
