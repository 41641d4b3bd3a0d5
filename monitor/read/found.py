"""What a parse has found so far: the sink every format's reader writes its entries, children
and issues to, and from which the parser takes batches and builds the ``ParsedDocument``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from lxml import etree

from monitor.core.model import DocumentKind, Entry, Issue, Links, ParsedDocument
from monitor.core.rules import RuleId

__all__ = ["Found", "drop_through", "events"]

_KEPT_MAX = 1000  # issues of one rule kept in full per document; the rest are counted


class Found:
    """The entries (taken in batches), children and issues of one document as it is read."""

    __slots__ = ("_dropped", "_kept", "child_lastmods", "children", "entries", "issues", "items",
                 "links", "unkeyed", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.entries: list[Entry] = []
        self.links: Links | None = Links()  # of the entries; None: not all are (take_batch)
        self.children: list[str] = []
        self.child_lastmods: list[tuple[str, str]] = []
        self.issues: list[Issue] = []
        self.items = 0  # occurrences, with or without loc
        self.unkeyed = 0
        self._kept: dict[str, int] = {}  # issues of a per-entry rule kept so far, by rule
        self._dropped: dict[str, int] = {}  # and counted past _KEPT_MAX

    def progress(self) -> int:
        """How many items were read, so that a reader that reads none can be told apart."""
        return self.items + len(self.children) + self.unkeyed

    def issue(self, rule: RuleId, message: str, loc: str | None = None) -> None:
        """An issue of the document, kept."""
        self.issues.append(Issue(rule, message, loc=loc, document=self.url))

    def entry_issue(self, rule: RuleId, message: str, loc: str | None = None) -> None:
        """An issue that may come once an entry: the first ``_KEPT_MAX`` kept, all counted."""
        kept = self._kept.get(rule, 0)
        if kept < _KEPT_MAX:
            self._kept[rule] = kept + 1
            self.issue(rule, message, loc)
        else:
            self._dropped[rule] = self._dropped.get(rule, 0) + 1

    def missing_loc(self, element: str, loc: str = "loc") -> None:
        """``loc-missing``: an item read without its key."""
        self.unkeyed += 1
        self.entry_issue(RuleId.LOC_MISSING,
                         f"a <{element}> without a <{loc}> (or with an empty one)")

    def more_locs(self, element: str, first: str, others: list[str | None]) -> None:
        """``loc-multiple``: the first loc is read; every other one is named."""
        named = ", ".join(repr((text or "").strip()) for text in others)
        self.entry_issue(
            RuleId.LOC_MULTIPLE, f"a <{element}> with {len(others) + 1} <loc> elements: "
            f"{first!r} is read, not {named}", first)

    def document(self, kind: DocumentKind | None, max_urls: int, max_children: int,
                 ) -> ParsedDocument:
        """The whole document read: its entries not yet taken, with the issues of its size."""
        if self.items > max_urls and kind != "sitemapindex":
            self.issue(RuleId.URLS_TOO_MANY, f"{self.items} URLs; the limit is {max_urls}")
        if len(self.children) > max_children:
            self.issue(
                RuleId.INDEX_TOO_MANY, f"{len(self.children)} sitemaps; the limit is {max_children}"
            )
        return ParsedDocument(
            kind=kind,
            entries=self.entries,
            children=self.children,
            child_lastmods=self.child_lastmods,
            issues=self.issues,
            unkeyed_invalid=self.unkeyed,
            dropped_issues=self._dropped,
        )


def events(xml: etree.XMLPullParser) -> Iterator[tuple[str, etree._Element]]:
    """lxml's events since the last call (the stubs type them loosely; with ``events=("end",)``
    and a tag, or comments, each one is an element)."""
    return cast("Iterator[tuple[str, etree._Element]]", xml.read_events())


def drop_through(last: etree._Element) -> None:
    """Free every finished element up to ``last``; the one being built comes after it."""
    parent = last.getparent()
    if parent is not None:
        del parent[: parent.index(last) + 1]
