"""A urlset's <url> elements into entries: the hot path of a parse, one pass over each <url>'s
children, with what it does not know handed to ``extjson``.

The usual urlset is read off the tree libxml2 builds (``TreeUrls``), the rest as lxml's item
events give its <url> elements (``EventUrls``); both end in ``Urls.take``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from lxml import etree

from monitor.core.model import Entry
from monitor.read.extjson import FIELD_INDEX, other_children, usual_extensions
from monitor.read.found import Found, drop_through, events

__all__ = ["EventUrls", "TreeUrls", "Urls"]

# Entry is a named tuple; tuple.__new__ builds one without its Python-level __new__.
_tuple = tuple.__new__


class Urls:
    """Reads <url> elements into the entries of a ``Found``."""

    __slots__ = ("_fields", "_found")

    def __init__(self, found: Found) -> None:
        self._found = found
        self._fields: tuple[str, ...] | None = None  # qualified child names, from the first <url>

    def take(self, urls: Iterator[etree._Element]) -> etree._Element | None:
        """One pass over each <url>'s children; the last <url> read."""
        if self._fields is None:
            first = next(urls, None)
            if first is None:
                return None
            urls = itertools.chain((first,), urls)
            # Children share the namespace of the first <url>, whatever it is (namespace-wrong);
            # a <url> that differs is read by other_children.
            tag = first.tag
            prefix = tag[: tag.find("}") + 1] if tag[:1] == "{" else ""
            self._fields = tuple(prefix + name for name in FIELD_INDEX)
        loc_tag, lastmod_tag, changefreq_tag, priority_tag = self._fields
        found = self._found
        entries = found.entries
        links = found.links
        append = entries.append
        new = _tuple
        items = 0
        url = None
        for url in urls:
            items += 1
            loc = lastmod = changefreq = priority = extra = None
            other: list[etree._Element] | None = None
            for child in url:
                tag = child.tag
                # An empty optional element is an absent one: "" or None is None.
                if tag == loc_tag:
                    if loc is None:
                        loc = child.text or ""
                    else:
                        extra = [child.text] if extra is None else [*extra, child.text]
                elif tag == lastmod_tag:
                    if lastmod is None:
                        lastmod = (child.text or "").strip() or None
                elif tag == changefreq_tag:
                    if changefreq is None:
                        changefreq = (child.text or "").strip() or None
                elif tag == priority_tag:
                    if priority is None:
                        priority = (child.text or "").strip() or None
                elif other is None:
                    other = [child]
                else:
                    other.append(child)
            extensions = None
            if other is not None:
                extensions = usual_extensions(other, links, len(entries))
                if extensions is None:
                    links = found.links = None  # maybe partly filled, and not all: of no use now
                    values = [loc, lastmod, changefreq, priority]
                    extra = extra or []
                    extensions = other_children(other, values, extra)
                    loc, lastmod, changefreq, priority = values
            if loc is None or not (loc := loc.strip()):
                found.missing_loc("url")
                if other is not None:
                    links = found.links = None  # it may have given links to an entry never made
                continue
            if extra:
                found.more_locs("url", loc, extra)
            append(new(Entry, (loc, lastmod, changefreq, priority, extensions)))
        found.items += items
        return url


class TreeUrls:
    """The usual urlset: the root's finished children, read off the tree and dropped.

    The parser put a comment after the root's start tag; its event hands over the root. A
    comment inside a <url> marks it, to be taken out before the <url> is read."""

    __slots__ = ("_commented", "_urls", "root")

    def __init__(self, found: Found) -> None:
        self._urls = Urls(found)
        self.root: etree._Element | None = None  # once the mark's event gave it
        self._commented: set[etree._Element] = set()  # children of the root with comments inside

    def read(self, xml: etree.XMLPullParser, finishing: bool) -> None:
        """Read what is finished: all the root's children but the last (which may be
        half-built) until ``finishing``, when the parse is over."""
        root = self.root
        for _, comment in events(xml):
            if root is None:  # the parser's mark (a comment before the root has no parent)
                root = self.root = comment.getparent()
            elif (child := _child_holding(comment, root)) is not None:
                self._commented.add(child)
        if root is None:
            return
        children = list(root)
        if not finishing:
            del children[-1:]
        if not children:
            return
        if self._commented:
            for child in children:
                if child in self._commented:
                    self._commented.discard(child)
                    _drop_comments(child)
        self._urls.take(_urls(children))
        del root[: len(children)]


class EventUrls:
    """<url> elements as item events give them (a urlset whose root tag is unusual)."""

    __slots__ = ("_urls",)

    def __init__(self, found: Found) -> None:
        self._urls = Urls(found)

    def read(self, xml: etree.XMLPullParser, finishing: bool) -> None:
        """Read the <url> elements finished since the last call, and drop them."""
        last = self._urls.take(url for _, url in events(xml) if _outermost(url))
        if last is not None:
            drop_through(last)


def _urls(children: list[etree._Element]) -> Iterator[etree._Element]:
    """The <url> elements among a urlset's children (in any namespace, as item events
    would find them): a <url> wrapped in another element too, not comments, not a <url>
    inside a <url>."""
    for child in children:
        tag = child.tag
        if tag == "url" or _is_url(tag):  # the usual tag first: no call on the hot path
            yield child
        elif type(tag) is str:  # not a comment
            yield from (url for url in child.iter("{*}url") if _outermost(url))


def _outermost(url: etree._Element) -> bool:
    """Whether no ancestor of a <url> is one: a <url> inside a <url> is extension data."""
    parent = url.getparent()
    while parent is not None:
        if _is_url(parent.tag):
            return False
        parent = parent.getparent()
    return True


def _is_url(tag: object) -> bool:
    """Whether an element's tag is <url>, in any namespace (a comment's tag is a function)."""
    return tag == "url" or (type(tag) is str and tag.endswith("}url"))


def _child_holding(comment: etree._Element, root: etree._Element) -> etree._Element | None:
    """The child of ``root`` that holds a comment, None for a comment that is one."""
    node, parent = comment, comment.getparent()
    while parent is not None and parent is not root:
        node, parent = parent, parent.getparent()
    return None if node is comment or parent is None else node


def _drop_comments(element: etree._Element) -> None:
    """Remove the comments under an element as ``remove_comments`` would have: the text
    after each joins the text before it (``<loc>a<!-- -->b</loc>`` reads "ab"). Only an
    element's own text is ever read, not the text after a child: that is all it keeps."""
    for comment in list(element.iter(etree.Comment)):
        parent, tail = comment.getparent(), comment.tail
        assert parent is not None
        if tail and comment.getprevious() is None:
            parent.text = (parent.text or "") + tail
        parent.remove(comment)
