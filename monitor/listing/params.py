"""Listings : their parameters, cursors and output formats (pure).

Every count the monitor reports can be listed row by row: ``urls``, ``issues``, ``diff`` and
``changes``. The rows come from ``monitor.store.listingreads`` as an iterator of (row, cursor)
pairs, where the cursor continues the listing after that row; this module parses what a user
gives (times, snapshots, rule globs, kinds), makes and reads the opaque cursors, and writes the
rows as JSON, NDJSON, CSV or a table, a row at a time, so that a listing of any length runs in
constant memory. The command line and the HTTP API share all of it.
"""

from __future__ import annotations

import base64
import binascii
import csv
import fnmatch
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.config import parse_duration
from monitor.core import times
from monitor.core.errors import BadParameter, NotFound
from monitor.core.model import (
    BROKEN_STATES,
    CHANGE_KINDS,
    OTHER_CHANGE_KINDS,
    REMOVAL_REASONS,
    URL_STATES,
)

__all__ = [
    "BROKEN",
    "DIFF_KINDS",
    "FORMATS",
    "HEALTH",
    "HEALTH_FILTERS",
    "KINDS",
    "MAX_ID",
    "MAX_SEARCH",
    "STATUSES",
    "VALIDITY",
    "BadParameter",
    "Listing",
    "NotFound",
    "SnapshotRef",
    "answer_text",
    "change_detail",
    "close",
    "csv_cell",
    "cursor",
    "matches",
    "parse_kinds",
    "parse_reasons",
    "parse_rules",
    "parse_search",
    "parse_snapshot",
    "parse_time",
    "read_cursor",
    "render",
    "rule_ids",
    "states_of",
    "take",
]

FORMATS = ("table", "json", "ndjson", "csv")
# An entry's validity, or a URL's health, which is current only.
VALIDITY = ("valid", "invalid")
HEALTH = tuple(URL_STATES)
# Every URL in an error state at once: the pages' "N broken" (a redirect or a canonical
# elsewhere is a warning, and not in it).
BROKEN = "broken"
HEALTH_FILTERS = (*HEALTH, BROKEN)
STATUSES = VALIDITY + HEALTH_FILTERS
# The kinds a check records, and the URL checks' transitions (``changes`` lists them; a diff
# compares URL sets, which they are not part of).
DIFF_KINDS = CHANGE_KINDS
KINDS = (*CHANGE_KINDS, *OTHER_CHANGE_KINDS)
MAX_ID = 2**62  # ids and positions past this are no one's: a 400, not a database error
# Characters of a search of the locs (``q=``, ``--loc``): the longest loc the sitemap protocol
# allows, so any valid loc can be searched whole. The databases are asked with LIKE, and
# SQLite refuses a pattern over 50,000 bytes: that was an error of the database, not a 400.
MAX_SEARCH = 2_048


def states_of(status: str) -> tuple[str, ...]:
    """The health states a ``status`` of the URL listing stands for: ``broken`` every error
    state, a state itself."""
    return BROKEN_STATES if status == BROKEN else (status,)


@dataclass(frozen=True, slots=True)
class SnapshotRef:
    """A snapshot as a user names it: its id, or a time (the last snapshot started by then)."""

    id: int | None = None
    time: datetime | None = None
    text: str = ""  # as given: a cursor holds this, and the snapshot it named then


Rows = Iterator[tuple[dict[str, Any], tuple[Any, ...]]]


@dataclass(slots=True)
class Listing:
    """An open listing: what it is of (``head``), the name of its rows, their columns for CSV
    and tables, and the rows, each with the position after it; ``where`` is the kind and the
    query that a cursor from such a position carries (``cursor``)."""

    head: dict[str, Any]
    key: str
    columns: tuple[str, ...]
    rows: Rows
    where: tuple[str, list[Any]]
    table: tuple[str, ...] = ()  # the columns a table shows (default: all)
    # a row key whose ``text`` a table prints under its row, indented (a robots.txt diff)
    below: str | None = None
    # Set by ``render``: the rows written, and where a limit stopped it, the cursor that
    # continues and the rows left.
    count: int = 0
    next_cursor: str | None = None
    rest: Rows | None = field(default=None, repr=False)


def close(listing: Listing) -> None:
    """Let go of what a listing cut short still holds (its database cursor)."""
    for rows in (listing.rest, listing.rows):
        if rows is not None and hasattr(rows, "close"):
            rows.close()


def parse_time(raw: str, param: str, now: datetime) -> datetime:
    """An ISO 8601 date or time (UTC unless it says otherwise), or a duration back from now
    (``24h``, ``7d``)."""
    text = raw.strip()
    if "\x00" in text or not text:
        raise BadParameter(f"{param}: not an ISO 8601 time or a duration: {raw!r}")
    # A bare number would be ambiguous (a year, or seconds?): a duration needs its unit.
    if text[-1:] in ("s", "m", "h", "d"):
        try:
            seconds = parse_duration(text)
        except ValueError:
            pass
        else:
            if not math.isfinite(seconds) or seconds > (now - datetime(1, 1, 2, tzinfo=UTC)
                                                         ).total_seconds():
                raise BadParameter(f"{param}: {raw!r} reaches back before the year 1")
            return now - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadParameter(f"{param}: not an ISO 8601 time or a duration: {raw!r} "
                           "(e.g. 2026-05-01T12:00:00Z or 24h)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise BadParameter(f"{param}: out of range: {raw!r}") from None


def parse_snapshot(raw: str | None, param: str, now: datetime) -> SnapshotRef | None:
    """A snapshot id, or a time or duration (``parse_time``); None when not given."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.isascii() and text.isdigit():
        number = int(text)
        if not 0 < number < MAX_ID:
            raise BadParameter(f"{param}: no snapshot has the id {text}")
        return SnapshotRef(id=number, text=text)
    return SnapshotRef(time=parse_time(text, param, now), text=text)


def _choices(values: Iterable[str], param: str, known: Sequence[str]) -> tuple[str, ...]:
    """Values of ``known``, given as one or more comma-separated lists, in ``known``'s order."""
    chosen = {v.strip() for value in values for v in value.split(",") if v.strip()}
    unknown = chosen - set(known)
    if unknown:
        raise BadParameter(f"{param}: unknown {', '.join(sorted(unknown))} "
                           f"(one of {', '.join(known)})")
    return tuple(v for v in known if v in chosen)


def parse_search(raw: str | None, param: str = "q") -> str | None:
    """A text to search the locs for (None: no search); ``BadParameter`` when it holds a NUL,
    which no loc holds, or is longer than ``MAX_SEARCH`` characters."""
    if raw is None:
        return None
    if "\x00" in raw:
        raise BadParameter(f"{param}: holds a NUL character")
    if len(raw) > MAX_SEARCH:
        raise BadParameter(f"{param}: {len(raw):,} characters; a search is at most "
                           f"{MAX_SEARCH:,} (a loc, or a part of one)")
    return raw or None


def parse_kinds(values: Iterable[str], param: str = "kind",
                known: Sequence[str] = KINDS) -> tuple[str, ...]:
    """Change kinds, given as one or more comma-separated lists (of ``known``)."""
    return _choices(values, param, known)


def parse_reasons(values: Iterable[str], param: str = "reason") -> tuple[str, ...]:
    """Removal reasons, given as one or more comma-separated lists."""
    return _choices(values, param, REMOVAL_REASONS)


def parse_rules(values: Iterable[str], known: Iterable[str], param: str = "rule",
                ) -> tuple[str, ...]:
    """Rule id globs (``lastmod-*``), given as one or more comma-separated lists; a glob that
    matches no rule id is a mistake worth saying."""
    globs = tuple(sorted({g.strip() for value in values for g in value.split(",") if g.strip()}))
    ids = list(known)
    for glob in globs:
        if not fnmatch.filter(ids, glob):
            raise BadParameter(f"{param}: {glob!r} matches no rule id")
    return globs


def rule_ids(values: Iterable[str], known: Sequence[str], param: str = "rule",
             ) -> tuple[str, ...]:
    """The rule ids of ``known`` that globs given as ``parse_rules`` takes select."""
    globs = parse_rules(values, known, param)
    return tuple(rule for rule in known if globs and matches(rule, globs))


def matches(rule: str, globs: Sequence[str]) -> bool:
    """Whether a rule id is selected by the globs (all are when none are given)."""
    return not globs or any(fnmatch.fnmatchcase(rule, glob) for glob in globs)


def cursor(kind: str, query: Sequence[Any], position: Sequence[Any]) -> str:
    """An opaque cursor: the listing's kind, the query it belongs to, the position after the
    row it follows (JSON in URL-safe base64, without padding)."""
    text = json.dumps([kind, list(query), list(position)], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_cursor(raw: str, kind: str, query: Sequence[Any], shape: Sequence[type]) -> list[Any]:
    """The position in a cursor that ``cursor(kind, query, ...)`` made, checked against
    ``shape`` (the type of each part; ints within the ids' range)."""
    bad = BadParameter(f"cursor: not a cursor of this listing: {raw[:40]!r}")
    if len(raw) > 4096 or not raw.isascii():
        raise bad
    try:
        found = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if (not isinstance(found, list) or len(found) != 3 or found[0] != kind
            or not isinstance(found[2], list) or len(found[2]) != len(shape)):
        raise bad
    if found[1] != list(query):
        raise BadParameter("cursor: it continues another query (its filters differ)")
    position: list[Any] = found[2]
    for value, expected in zip(position, shape, strict=True):
        if type(value) is not expected or (isinstance(value, int) and not 0 <= value < MAX_ID):
            raise bad
    return position


def _lines(text: str | None) -> str:
    return "none" if text is None else f"{len(text.splitlines())} lines"


def answer_text(answer: Mapping[str, Any]) -> str:
    """A URL check's answer in one phrase, its state first: ``not-found (HTTP 404)``,
    ``server-error (HTTP 500 on 3 checks in a row)``, ``redirect: redirects (1 hop) to ...``."""
    state, status = answer.get("state") or "unknown", answer.get("http_status")
    detail = answer.get("detail") or ""
    if answer.get("final_url"):
        return f"{state}: {detail or 'ends at ' + str(answer['final_url'])}"
    if status and detail.startswith(f"HTTP {status}"):
        return f"{state} ({detail})"
    head = f"{state} (HTTP {status})" if status else state
    return head + (f": {detail}" if detail else "")


def change_detail(row: Mapping[str, Any]) -> str:
    """One line that says what a change moved: ``ok -> not-found (404)``, ``lastmod: a -> b``;
    a removal, what its URL answered once the URL checks looked."""
    before, after = row.get("before") or {}, row.get("after") or {}
    if row.get("kind") == "removed" and row.get("answer"):
        return f"answered {answer_text(row['answer'])}"
    if row.get("kind") == "robots":
        diff = row.get("diff")
        counts = (f", {diff.get('added', 0)} added, {diff.get('removed', 0)} removed"
                 if isinstance(diff, Mapping) else "")
        return f"robots.txt: {_lines(before.get('text'))} -> {_lines(after.get('text'))}{counts}"
    if row.get("kind") == "health":
        return f"{before.get('state')} -> {after.get('state')}" + (
            f" ({after.get('http_status')})" if after.get("http_status") else "")
    if not (before and after):
        return ""
    moved = [f"{key}: {before.get(key)} -> {after.get(key)}"
             for key in sorted(set(before) | set(after))
             if before.get(key) != after.get(key) and key not in ("document",)]
    return "; ".join(moved)[:200]


# ---- output ------------------------------------------------------------------------------

_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def render(listing: Listing, fmt: str, *, limit: int | None = None,
           link: Callable[[str], str] | None = None) -> Iterator[str]:
    """The listing's rows (at most ``limit``) in a format, as text chunks of some 64 KB.

    When the limit stops it, ``listing.next_cursor`` is set once the last chunk is out, and
    ``listing.rest`` holds the rows left (to count them, or drop). ``link`` makes the URL that
    continues from a cursor, for the JSON form's ``next``."""
    pending: list[str] = []
    writer = _WRITERS[fmt](listing, pending.append)
    size = 0
    for row in _limited(listing, limit):
        writer.row(row)
        size += len(pending[-1]) if pending else 0
        if size > 65536:
            yield "".join(pending)
            pending.clear()
            size = 0
    writer.end(listing.next_cursor, None if listing.next_cursor is None or link is None
               else link(listing.next_cursor))
    yield "".join(pending)


def take(listing: Listing, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows as they are (a web page's), with ``listing.next_cursor`` set
    when more follow, as ``render`` sets it."""
    return list(_limited(listing, limit))


def _limited(listing: Listing, limit: int | None) -> Iterator[dict[str, Any]]:
    """The rows, up to ``limit``; where it stops them, ``next_cursor`` (made once, not for
    every row) and ``rest`` are set; ``count`` once they are out."""
    count = 0
    rows = listing.rows
    last: tuple[Any, ...] = ()
    for row, after in rows:
        if limit is not None and count >= limit:
            listing.next_cursor = cursor(*listing.where, last)
            listing.rest = _chain_one((row, after), rows)
            break
        yield row
        last = after
        count += 1
    listing.count = count


def _chain_one(first: tuple[dict[str, Any], tuple[Any, ...]], rest: Rows) -> Rows:
    yield first
    yield from rest


class _Json:
    """One JSON object: the head, the rows as an array, ``next_cursor`` last (known at the
    end), written as the rows come."""

    def __init__(self, listing: Listing, out: Callable[[str], None]) -> None:
        self._out = out
        head = _json(listing.head)
        out(f"{head[:-1]}{',' if listing.head else ''}\"{listing.key}\":[")
        self._first = True

    def row(self, row: Mapping[str, Any]) -> None:
        self._out(("" if self._first else ",") + _json(row))
        self._first = False

    def end(self, next_cursor: str | None, next_link: str | None) -> None:
        tail = f",\"next\":{_json(next_link)}" if next_cursor is None or next_link else ""
        self._out(f"],\"next_cursor\":{_json(next_cursor)}{tail}}}\n")


class _Ndjson:
    """A row a line; a listing cut by a limit ends with ``{"next_cursor": ...}``."""

    def __init__(self, _listing: Listing, out: Callable[[str], None]) -> None:
        self._out = out

    def row(self, row: Mapping[str, Any]) -> None:
        self._out(_json(row) + "\n")

    def end(self, next_cursor: str | None, _link: str | None) -> None:
        if next_cursor is not None:
            self._out(_json({"next_cursor": next_cursor}) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return _json(value)
    return str(value)


# A spreadsheet reads a cell that starts with one of these as a formula (or, tab and carriage
# return, skips them and reads what follows): a loc a watched site chose could run one.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A value as a CSV cell that no spreadsheet runs: text that would start a formula gets a
    leading ``'`` (OWASP's advice), which spreadsheets show as text and do not display.

    Numbers stay numbers (``-1``); nested values are JSON (they start with ``{`` or ``[``).
    """
    cell = _cell(value)
    if isinstance(value, str) and cell.startswith(_FORMULA_STARTS):
        return "'" + cell
    return cell


class _Csv:
    """RFC 4180 with a header line; nested values (a change's before/after) as JSON text;
    text that a spreadsheet would run as a formula quoted (``csv_cell``)."""

    def __init__(self, listing: Listing, out: Callable[[str], None]) -> None:
        self._out = out
        self._columns = listing.columns
        self._buffer = io.StringIO()
        self._csv = csv.writer(self._buffer, lineterminator="\r\n")
        self._emit(listing.columns)

    def _emit(self, cells: Iterable[str]) -> None:
        self._csv.writerow(cells)
        self._out(self._buffer.getvalue())
        self._buffer.seek(0)
        self._buffer.truncate()

    def row(self, row: Mapping[str, Any]) -> None:
        self._emit([csv_cell(row.get(c)) for c in self._columns])

    def end(self, next_cursor: str | None, _link: str | None) -> None:
        pass


TIME_COLUMNS = frozenset({"at", "since", "checked_at", "started_at", "finished_at"})


def _table_cell(row: Mapping[str, Any], column: str) -> str:
    """A table's cell: times as a person reads them, a change's ``detail`` made from it."""
    if column == "detail" and "detail" not in row:
        return change_detail(row)
    value = row.get(column)
    if column in TIME_COLUMNS and isinstance(value, str):
        return times.compact(value)
    return _cell(value)


class _Table:
    """Aligned columns for a terminal: widths from the first rows (at most 80 a column)."""

    _SAMPLE = 200

    def __init__(self, listing: Listing, out: Callable[[str], None]) -> None:
        self._out = out
        self._columns = listing.table or listing.columns
        self._below = listing.below
        self._held: list[tuple[list[str], str]] = [([c.upper() for c in self._columns], "")]
        self._widths: list[int] | None = None

    def row(self, row: Mapping[str, Any]) -> None:
        cells = [_table_cell(row, c) for c in self._columns]
        below = row.get(self._below) if self._below else None
        text = str(below.get("text") or "") if isinstance(below, Mapping) else ""
        if self._widths is None:
            self._held.append((cells, text))
            if len(self._held) > self._SAMPLE:
                self._flush()
        else:
            self._line(cells, text)

    def _flush(self) -> None:
        self._widths = [min(max(len(r[0][i]) for r in self._held), 80)
                        for i in range(len(self._columns))]
        for cells, text in self._held:
            self._line(cells, text)
        self._held = []

    def _line(self, cells: list[str], below: str = "") -> None:
        assert self._widths is not None
        padded = "  ".join(c.ljust(w) for c, w in zip(cells, self._widths, strict=True))
        self._out("  " + padded.rstrip() + "\n")
        if below:
            self._out("".join(f"      {line}\n" for line in below.splitlines()))

    def end(self, next_cursor: str | None, _link: str | None) -> None:
        if self._widths is None:
            self._flush()


_WRITERS: dict[str, Callable[[Listing, Callable[[str], None]], Any]] = {
    "json": _Json, "ndjson": _Ndjson, "csv": _Csv, "table": _Table,
}
