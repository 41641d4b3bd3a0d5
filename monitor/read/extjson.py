"""What a <url> holds past the four fields the parser's hot loop reads: extension data
(hreflang links, images, videos, news) as the canonical JSON of ``Entry.extensions``, which
``extensions.py`` judges, and fields in a namespace other than the first <url>'s."""

from __future__ import annotations

import json
from typing import Any

from lxml import etree

from monitor.core.model import Links

__all__ = ["FIELD_INDEX", "any_extensions", "local", "other_children", "usual_extensions"]

FIELD_INDEX = {"loc": 0, "lastmod": 1, "changefreq": 2, "priority": 3}  # of a <url>

_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False).encode
_json_string = json.encoder.encode_basestring_ascii  # what _json does with a string


def local(tag: str) -> str:
    """A tag's local name, without its namespace."""
    return tag.rpartition("}")[2]


def other_children(elements: list[etree._Element], values: list[str | None],
                    extra_locs: list[str | None]) -> str | None:
    """Children the fast path did not know, and not of the usual shape (``usual_extensions``):
    fields in another namespace, or extensions.

    A <url> may redeclare the namespace (``<url xmlns="...">``) unlike the first one did, so
    its fields are matched by local name here; ``values`` is filled where still missing, and a
    further loc goes to ``extra_locs``.
    """
    rest = []
    for element in elements:
        index = FIELD_INDEX.get(local(element.tag))
        if index is None:
            rest.append(element)
        elif values[index] is None:
            text = element.text or ""
            values[index] = text if index == 0 else text.strip() or None
        elif index == 0:
            extra_locs.append(element.text)
    return _extensions(rest) if rest else None


def _extensions(elements: list[etree._Element]) -> str | None:
    """Image, video, news and hreflang data of one <url>, as canonical JSON."""
    if len(elements) == 1 and (lone := _lone_image(elements[0])) is not None:
        return lone
    return any_extensions(elements)


def any_extensions(elements: list[etree._Element]) -> str | None:
    """Every known extension element of one <url> as canonical JSON, None when there is none:
    the general way, which the two shortcuts above must agree with."""
    data: dict[str, list[Any]] = {}
    for element in elements:
        name = local(element.tag)
        if name == "link":
            if (element.get("rel") or "").strip() == "alternate":
                data.setdefault("alternates", []).append(
                    {
                        "hreflang": (element.get("hreflang") or "").strip(),
                        "href": (element.get("href") or "").strip(),
                    }
                )
        elif name in ("image", "video", "news"):
            data.setdefault(name, []).append(_as_json(element))
    if not data:
        return None
    return _json(data)


_LINK = "{http://www.w3.org/1999/xhtml}link"
_IMAGE = "{http://www.google.com/schemas/sitemap-image/1.1}image"
_IMAGE_LOC = "{http://www.google.com/schemas/sitemap-image/1.1}loc"


def usual_extensions(elements: list[etree._Element], links: Links | None, owner: int,
                      ) -> str | None:
    """What ``_extensions`` makes of the usual localized page, hreflang links (xhtml:link)
    and at most one lone image after them, written straight as its JSON (no field among
    them: their tags are qualified); None for any other shape. Each link also goes to
    ``links``, as entry ``owner``'s (some may have gone there before a None)."""
    last = elements[-1]
    image = None
    if last.tag == _IMAGE:
        image = _lone_image(last)
        if image is None:
            return None
        elements = elements[:-1]
        if not elements:
            return image
    parts = []
    for link in elements:
        if link.tag != _LINK or len(link) or link.get("rel") != "alternate":
            return None
        href = (link.get("href") or "").strip()
        code = (link.get("hreflang") or "").strip()
        parts.append('{"href":' + _json_string(href) + ',"hreflang":' + _json_string(code) + "}")
        if links is not None:
            links.owners.append(owner)
            links.hrefs.append(href)
            links.codes.append(code)
    alternates = '{"alternates":[' + ",".join(parts) + "]"
    return alternates + "}" if image is None else alternates + "," + image[1:]


def _lone_image(element: etree._Element) -> str | None:
    """What ``any_extensions`` makes of the usual image entry, one
    ``<image:image><image:loc>URL</image:loc></image:image>``, without its dicts and encoder
    (a tenth of a document's time when every tenth URL has one); None for any other shape."""
    if len(element) != 1 or element.keys() or _not_named(element.tag, _IMAGE, "image") or (
        element.text is not None and element.text.strip()
    ):
        return None
    loc = element[0]
    text = (loc.text or "").strip()
    if len(loc) or loc.keys() or _not_named(loc.tag, _IMAGE_LOC, "loc") or not text:
        return None  # an empty loc goes the general way, to image-missing-loc
    return '{"image":[{"loc":' + _json_string(text) + "}]}"


def _not_named(tag: str, usual: str, name: str) -> bool:
    """Whether a tag is not ``name`` in any namespace (``usual``, the usual one, looked at
    first: no split)."""
    return tag != usual and local(tag) != name


def _as_json(element: etree._Element) -> Any:
    """An element as JSON: its text, or attributes (``@name``), children and ``#text``."""
    text = (element.text or "").strip()
    if not len(element) and not element.keys():
        return text
    children = list(element)
    value: dict[str, Any] = {"@" + local(str(k)): str(v) for k, v in element.attrib.items()}
    for child in children:
        key, item = local(child.tag), _as_json(child)
        if key not in value:
            value[key] = item
        elif isinstance(value[key], list):
            value[key].append(item)
        else:
            value[key] = [value[key], item]
    if text:
        value["#text"] = text
    return value
