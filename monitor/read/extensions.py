"""Search-engine rules for a URL's extension data, as Google documents them (pure).

An entry's extensions are the parser's canonical JSON (sorted keys, no spaces, ASCII only):
``{"alternates":[{"href":"...","hreflang":"..."}],"image":[...],"news":[...],"video":[...]}``.
Hundreds of thousands of entries a check carry them (an image, hreflang alternates), so the
usual ones are judged without ``json.loads``: two patterns read the alternates (the first key,
each item exactly ``{"href":"...","hreflang":"..."}``), and what follows them is looked at only
for the keys a rule is about (``"caption":`` cannot occur inside a JSON string, whose quotes
are escaped). Only news, video, a deprecated key or a list long enough to hold 1,001 images is
decoded and checked field by field.

The alternates' patterns, and the pieces of ``hreflang-not-reciprocal`` (a verdict of the whole
target), are monitor.read.alternates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from itertools import accumulate, compress, islice, repeat
from operator import eq, itemgetter, methodcaller
from typing import Any, cast

from monitor.core.model import Links
from monitor.core.rules import RuleId
from monitor.read.alternates import ALTERNATE, ALTERNATES, ENDS, pairs_of
from monitor.read.iso639 import THREE_LETTER
from monitor.read.langcodes import LANGUAGES, REGIONS, SCRIPTS

__all__ = ["ENTRY_RULES", "Checker", "batch_ok", "message", "news_count", "news_language_ok"]

ENTRY_RULES: tuple[RuleId, ...] = (
    RuleId.NEWS_TOO_OLD, RuleId.NEWS_MISSING_FIELD, RuleId.NEWS_FIELD_INVALID,
    RuleId.VIDEO_MISSING_FIELD, RuleId.VIDEO_DESCRIPTION_TOO_LONG, RuleId.VIDEO_FIELD_INVALID,
    RuleId.VIDEO_EXPIRED, RuleId.IMAGE_TOO_MANY, RuleId.IMAGE_MISSING_LOC,
    RuleId.EXTENSION_DEPRECATED, RuleId.HREFLANG_INVALID_CODE, RuleId.HREFLANG_RELATIVE,
    RuleId.HREFLANG_INCOMPLETE, RuleId.HREFLANG_NO_SELF, RuleId.HREFLANG_CONFLICT)
# The rules named once an entry or an issue, bound here: a member read off RuleId costs a
# metaclass __getattr__ on Python 3.11 (monitor.core.rules), a module global does not.
_NEWS_TOO_OLD = RuleId.NEWS_TOO_OLD
_NEWS_MISSING_FIELD = RuleId.NEWS_MISSING_FIELD
_NEWS_FIELD_INVALID = RuleId.NEWS_FIELD_INVALID
_VIDEO_MISSING_FIELD = RuleId.VIDEO_MISSING_FIELD
_VIDEO_DESCRIPTION_TOO_LONG = RuleId.VIDEO_DESCRIPTION_TOO_LONG
_VIDEO_FIELD_INVALID = RuleId.VIDEO_FIELD_INVALID
_VIDEO_EXPIRED = RuleId.VIDEO_EXPIRED
_IMAGE_TOO_MANY = RuleId.IMAGE_TOO_MANY
_IMAGE_MISSING_LOC = RuleId.IMAGE_MISSING_LOC
_EXTENSION_DEPRECATED = RuleId.EXTENSION_DEPRECATED
_HREFLANG_INVALID_CODE = RuleId.HREFLANG_INVALID_CODE
_HREFLANG_RELATIVE = RuleId.HREFLANG_RELATIVE
_HREFLANG_INCOMPLETE = RuleId.HREFLANG_INCOMPLETE
_HREFLANG_NO_SELF = RuleId.HREFLANG_NO_SELF
_HREFLANG_CONFLICT = RuleId.HREFLANG_CONFLICT
_HREFLANG_NOT_RECIPROCAL = RuleId.HREFLANG_NOT_RECIPROCAL
MAX_IMAGES = 1000  # per URL (Google's image sitemaps)
MAX_NEWS = 1000  # news:news tags per document (Google's news sitemaps)
MAX_DESCRIPTION = 2048  # characters of a video:description
# Google's video sitemap reference: duration 1 to 28,800 seconds (8 hours), rating 0.0 to 5.0,
# at most 32 tags.
VIDEO_DURATION = (1, 28_800)
VIDEO_RATING = (0.0, 5.0)
MAX_VIDEO_TAGS = 32
# Google's news sitemap reference: an ISO 639 code of two or three letters, but for Chinese,
# which it wants as zh-cn (simplified) or zh-tw (traditional).
_NEWS_CHINESE = frozenset({"zh-cn", "zh-tw"})
NEWS_AGE = timedelta(days=2)

# Tags Google retired in 2022. Image and video: "Spring cleaning: some sitemap extension tags are
# going away" (Google Search Central blog, 2022-05-06, https://developers.google.com/search/blog/
# 2022/05/spring-cleaning-sitemap-extensions): image caption, geo_location, title, license;
# video category, player_loc@allow_embed, player_loc@autoplay, gallery_loc, price, tvshow; "no
# effect on indexing and search features after August 6, 2022". News: access, genres,
# geo_locations, stock_tickers and keywords are the tags Google's news sitemap reference
# (https://developers.google.com/search/docs/crawling-indexing/sitemaps/news-sitemap) no longer
# lists since then; it keeps publication (name, language), publication_date and title.
DEPRECATED = {
    "image": ("caption", "geo_location", "title", "license"),
    "video": ("category", "gallery_loc", "price", "tvshow"),
    "news": ("access", "genres", "geo_locations", "stock_tickers", "keywords"),
}
_PLAYER_DEPRECATED = ("@allow_embed", "@autoplay")  # attributes of video:player_loc
# What follows the alternates that needs a closer look: these keys, at any depth.
_LOOK = tuple(f'"{key}":' for key in ("news", "video", *DEPRECATED["image"]))
# Any of them, or an alternate without a URL or a code: one search of a batch (each searched
# for alone took three times as long: needles that start with '"', in JSON text).
_UNUSUAL = re.compile("|".join(map(re.escape, (*_LOOK, '"href":""', '"hreflang":""'))))

_json_string = json.encoder.encode_basestring_ascii  # how the parser wrote each string
# An alternate's href must be a full URL (Google ignores any other); the spelling nearly every
# sitemap uses, for a test in C, and any case of the scheme for the rest.
_ABSOLUTE = ("https://", "http://")


def _code_ok(code: str) -> bool:
    """An ISO 639-1 language with an optional ISO 15924 script and an optional ISO 3166-1
    alpha-2 region (``zh-Hant-TW``), or x-default."""
    code = code.lower()
    if code == "x-default":
        return True
    language, *rest = code.split("-")
    if rest and len(rest[0]) == 4:
        if rest[0] not in SCRIPTS:
            return False
        rest = rest[1:]
    return language in LANGUAGES and (not rest or (len(rest) == 1 and rest[0] in REGIONS))


def _absolute(href: str) -> bool:
    """Whether an alternate's href is a full http(s) URL (a relative one is ignored)."""
    return href.startswith(_ABSOLUTE) or href[:8].lower().startswith(_ABSOLUTE)


def news_language_ok(value: str) -> bool:
    """Whether a ``news:language`` is an ISO 639 code of two or three letters, or zh-cn or
    zh-tw (Google's news sitemap reference)."""
    value = value.lower()
    return value in LANGUAGES or value in THREE_LETTER or value in _NEWS_CHINESE


class Checker:
    """The per-entry extension rules at one moment (the check's), with the verdicts of
    hreflang codes remembered (a site uses a handful)."""

    __slots__ = ("_codes", "_now")

    def __init__(self, now: datetime) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self._now = now
        self._codes: dict[str, bool] = {}

    def code_ok(self, code: str) -> bool:
        """Whether an hreflang value is a valid one (remembered)."""
        ok = self._codes.get(code)
        if ok is None:
            ok = _code_ok(code)
            if len(self._codes) < 10_000:
                self._codes[code] = ok
        return ok

    def rules(self, loc: str, ext: str) -> list[RuleId] | None:
        """The rule ids an entry's extensions raise (in ``ENTRY_RULES`` order), or None."""
        found: set[RuleId] = set()
        rest = ext
        if ext.startswith('{"alternates":'):
            match = ALTERNATES.match(ext)
            if match is None:  # not the parser's shape: judge it the slow way
                return self._decoded(loc, ext)
            self._alternates(loc, match.group(1), found)
            rest = ext[match.end():]
            if rest == "}":
                return _ordered(found)
        if (len(rest) > MAX_IMAGES * 3 or any(key in rest for key in _LOOK)
                or _image_unusual(ext)):
            self._others(loc, json.loads(ext), found)
        return _ordered(found)

    def _decoded(self, loc: str, ext: str) -> list[RuleId] | None:
        data = json.loads(ext)
        found: set[RuleId] = set()
        items = data.get("alternates") or []
        text = ",".join(_json.encode({"href": str(item.get("href", "")),
                                      "hreflang": str(item.get("hreflang", ""))})
                        for item in items if isinstance(item, dict))
        self._alternates(loc, text, found)
        self._others(loc, data, found)
        return _ordered(found)

    def _alternates(self, loc: str, text: str, found: set[RuleId]) -> None:
        pairs = ALTERNATE.findall(text)
        by_code: dict[str, str] = {}
        relative = False
        for href, code in pairs:
            if not href or not code:
                found.add(_HREFLANG_INCOMPLETE)
                continue
            if not _absolute(href):
                relative = True
                continue
            if not self.code_ok(code):
                found.add(_HREFLANG_INVALID_CODE)
            key = code.lower()
            if by_code.setdefault(key, href) != href:
                found.add(_HREFLANG_CONFLICT)
        if relative:
            # Ignored, as Google ignores it: it may well have meant this URL itself, so its
            # absence among the rest is not called hreflang-no-self.
            found.add(_HREFLANG_RELATIVE)
        elif pairs and '{"href":' + _json_string(loc) + "," not in text:
            found.add(_HREFLANG_NO_SELF)

    def _others(self, loc: str, data: dict[str, Any], found: set[RuleId]) -> None:
        images = data.get("image") or []
        if len(images) > MAX_IMAGES:
            found.add(_IMAGE_TOO_MANY)
        if _images_without_loc(images):
            found.add(_IMAGE_MISSING_LOC)
        if _deprecated(data):
            found.add(_EXTENSION_DEPRECATED)
        for video in data.get("video") or []:
            if _video_missing(video):
                found.add(_VIDEO_MISSING_FIELD)
            if len(_text(video, "description")) > MAX_DESCRIPTION:
                found.add(_VIDEO_DESCRIPTION_TOO_LONG)
            if _video_invalid(loc, video):
                found.add(_VIDEO_FIELD_INVALID)
            expires = _moment(_text(video, "expiration_date"))
            if expires is not None and expires < self._now:
                found.add(_VIDEO_EXPIRED)
        items = data.get("news") or []
        if _news_invalid(items):
            found.add(_NEWS_FIELD_INVALID)
        for news in items:
            published = _moment(_text(news, "publication_date"))
            if _news_missing(news) or published is None:
                found.add(_NEWS_MISSING_FIELD)
            elif self._now - published > NEWS_AGE:
                found.add(_NEWS_TOO_OLD)


_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)


def batch_ok(checker: Checker, locs: Sequence[str], exts: Sequence[str | None],
             links: Links | None = None) -> bool:
    """Whether no entry of a batch raises an extension rule, as ``Checker.rules`` would say of
    each: for the usual batch (every entry with alternates that name valid codes once each and
    the entry itself, maybe an image), a look at the parser's ``links`` if it gave them, else a
    few searches of the batch's extensions joined, in C; any other batch is judged entry by
    entry."""
    if links is not None and _links_ok(checker, locs, links):
        return True
    if None in exts:
        kept = [(loc, ext) for loc, ext in zip(locs, exts, strict=True) if ext is not None]
        locs, exts = [loc for loc, _ in kept], [ext for _, ext in kept]
    texts = cast("Sequence[str]", exts)
    joined = "\x00".join(texts)
    if _UNUSUAL.search(joined) is not None or max(map(len, texts)) > MAX_IMAGES * 3:
        return _each_ok(checker, locs, texts)
    if _image_unusual(joined, len(texts)):
        return _each_ok(checker, locs, texts)  # an image that may lack its loc
    if '"alternates":' not in joined:  # images alone, each well under a thousand, with a loc
        return True
    if (joined.count('{"alternates":[') != len(texts)  # the key is the first one
            or "\\" in joined  # a JSON escape: the splits below would misread it
            or _full_urls(joined) != joined.count('{"href":"')):  # a relative href
        return _each_ok(checker, locs, texts)
    # Split at each hreflang value: each piece starts with a value (the first excepted), and
    # holds the \x00 of each entry it ends.
    pieces = joined.split('"hreflang":"')
    codes = list(map(itemgetter(0), map(_BEFORE_QUOTE, islice(pieces, 1, None))))
    entry = accumulate(map(ENDS, pieces))
    # As many (entry, value) pairs as values: no entry has a value twice (where a conflict
    # could be), in any case.
    if (len(set(zip(entry, map(str.lower, codes), strict=False))) != len(codes)
            or not all(map(checker.code_ok, set(codes)))):
        return _each_ok(checker, locs, texts)
    selves = map(str.__add__, map(str.__add__, repeat('{"href":'), map(_json_string, locs)),
                 repeat(","))
    return all(map(str.__contains__, texts, selves)) or _each_ok(checker, locs, texts)


def _image_unusual(text: str, entries: int = 1) -> bool:
    """Whether the extensions of ``entries`` entries (joined) may hold an image without a
    loc: an empty item or loc, or a dict that is neither an entry, an alternate
    (``{"href":``) nor an image that starts with its loc (``{"loc":``; the keys are sorted,
    and the retired ones that sort first are looked at anyway). A ``{"`` or ``,""`` cannot be
    inside a JSON string, whose quotes are escaped."""
    if '"image":' not in text:
        return False
    return ('"loc":""' in text or '[""' in text or ',""' in text
            or text.count('{"') != entries + text.count('{"loc":') + text.count('{"href":'))


def _full_urls(joined: str) -> int:
    """How many alternates of extensions joined have an href spelled ``https://`` or
    ``http://`` (any other spelling is judged entry by entry)."""
    return joined.count('{"href":"https://') + joined.count('{"href":"http://')


_BEFORE_QUOTE = methodcaller("partition", '"')


def _links_ok(checker: Checker, locs: Sequence[str], links: Links) -> bool:
    """``batch_ok``'s usual batch, from the parser's alternates: its entries have the usual
    shape (``Links``), in which only the hreflang rules can apply (a lone image has no field a
    rule is about), and these apply to none when every alternate has a full URL and a valid code,
    no entry names a code twice (where a conflict could be) and each names itself. False:
    not known to be so."""
    owners, hrefs, codes = links.owners, links.hrefs, links.codes
    if not owners:
        return True
    if ("" in hrefs or "" in codes
            or not all(map(str.startswith, hrefs, repeat(_ABSOLUTE)))
            or len(set(zip(owners, map(str.lower, codes), strict=True))) != len(codes)
            or not all(map(checker.code_ok, set(codes)))):
        return False
    selves = set(compress(owners, map(eq, hrefs, map(locs.__getitem__, owners))))
    return len(selves) == len(set(owners))  # each entry that names any names itself


def _each_ok(checker: Checker, locs: Sequence[str], exts: Sequence[str]) -> bool:
    return not any(map(checker.rules, locs, exts))


def _ordered(found: set[RuleId]) -> list[RuleId] | None:
    return [rule for rule in ENTRY_RULES if rule in found] or None


def _text(item: Any, *path: str) -> str:
    """The text at ``path`` in an element as JSON (the first of repeated ones), or ""."""
    for key in path:
        if not isinstance(item, dict):
            return ""
        item = item.get(key)
        if isinstance(item, list):
            item = item[0] if item else None
    if isinstance(item, dict):
        item = item.get("#text")
    return item.strip() if isinstance(item, str) else ""


def _video_missing(video: Any) -> list[str]:
    missing = [name for name in ("thumbnail_loc", "title", "description")
               if not _text(video, name)]
    if not _text(video, "content_loc") and not _text(video, "player_loc"):
        missing.append("content_loc or player_loc")
    return missing


def _video_invalid(loc: str, video: Any) -> list[str]:
    """What is wrong with a video's fields, as Google's video sitemap reference bounds them
    (an absent field is fine here: ``video-missing-field`` is about those)."""
    wrong = [f"{name} is the page itself" for name in ("content_loc", "player_loc")
             if _text(video, name) == loc]
    duration = _text(video, "duration")
    low, high = VIDEO_DURATION
    if duration and not (duration.isdigit() and low <= int(duration) <= high):
        wrong.append(f"duration {duration!r} is not {low} to {high:,} seconds")
    expiration = _text(video, "expiration_date")
    if expiration and _moment(expiration) is None:
        wrong.append(f"expiration_date {expiration!r} is not a W3C Datetime")
    rating = _text(video, "rating")
    if rating and not _number_within(rating, *VIDEO_RATING):
        wrong.append(f"rating {rating!r} is not {VIDEO_RATING[0]} to {VIDEO_RATING[1]}")
    tags = video.get("tag") if isinstance(video, dict) else None
    if isinstance(tags, list) and len(tags) > MAX_VIDEO_TAGS:
        wrong.append(f"{len(tags)} tags; the limit is {MAX_VIDEO_TAGS}")
    return wrong


def _number_within(text: str, low: float, high: float) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return low <= value <= high  # NaN is never within


def _images_without_loc(images: list[Any]) -> int:
    """How many image:image elements have no image:loc (or an empty one)."""
    return sum(1 for image in images if not _text(image, "loc"))


def _news_invalid(items: list[Any]) -> list[str]:
    """What is wrong with a URL's news:news elements beyond a missing field: more than one
    (Google reads one a URL), a language that is no ISO 639 code."""
    wrong = [f"{len(items)} news:news elements; a URL has one"] if len(items) > 1 else []
    for news in items:
        language = _text(news, "publication", "language")
        if language and not news_language_ok(language):
            wrong.append(f"news:language {language!r} is not an ISO 639 code (nor zh-cn, zh-tw)")
    return wrong


def _news_missing(news: Any) -> list[str]:
    missing = [f"publication {name}" for name in ("name", "language")
               if not _text(news, "publication", name)]
    return missing + [name for name in ("publication_date", "title") if not _text(news, name)]


def _moment(value: str) -> datetime | None:
    """A W3C Datetime as the latest moment it can mean (a bare date: its end in the
    westernmost timezone, so that an article is never called old too early); None if invalid."""
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC) + \
                timedelta(days=1, hours=12)
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None and "T" in value else None


def _deprecated(data: dict[str, Any]) -> list[str]:
    """The retired tags an entry uses, as ``extension:tag``."""
    tags = []
    for kind, names in DEPRECATED.items():
        for item in data.get(kind) or []:
            if not isinstance(item, dict):
                continue
            tags += [f"{kind}:{name}" for name in names if name in item]
            player = item.get("player_loc") if kind == "video" else None
            for one in player if isinstance(player, list) else [player]:
                if isinstance(one, dict):
                    tags += [f"video:player_loc {name}" for name in _PLAYER_DEPRECATED
                             if name in one]
    return sorted(set(tags))


def message(rule: str, loc: str, ext: str | None) -> str:
    """The message of an entry's extension rule, made from the entry's own data."""
    data: dict[str, Any] = json.loads(ext) if ext else {}
    if rule == _NEWS_TOO_OLD:
        return f"news published more than {NEWS_AGE.days} days before the check"
    if rule == _NEWS_MISSING_FIELD:
        missing = sorted({name for news in data.get("news") or [] for name in (
            _news_missing(news) or (["publication_date (not a W3C Datetime)"]
                                    if _moment(_text(news, "publication_date")) is None
                                    else []))})
        return "news lacks " + ", ".join(missing or ["a required field"])
    if rule == _VIDEO_MISSING_FIELD:
        missing = sorted({n for video in data.get("video") or [] for n in _video_missing(video)})
        return "video lacks " + ", ".join(missing or ["a required field"])
    if rule == _VIDEO_DESCRIPTION_TOO_LONG:
        return f"video:description over {MAX_DESCRIPTION} characters"
    if rule == _VIDEO_FIELD_INVALID:
        wrong = [w for video in data.get("video") or [] for w in _video_invalid(loc, video)]
        return "video " + "; ".join(dict.fromkeys(wrong or ["has a field out of bounds"]))
    if rule == _NEWS_FIELD_INVALID:
        wrong = _news_invalid(data.get("news") or [])
        return "; ".join(wrong or ["news is not as Google reads it"])
    if rule == _IMAGE_MISSING_LOC:
        count = _images_without_loc(data.get("image") or [])
        return f"{count} image:image without an image:loc (Google requires it)"
    if rule == _VIDEO_EXPIRED:
        dates = sorted({_text(v, "expiration_date") for v in data.get("video") or []
                        if _text(v, "expiration_date")})
        return (f"video:expiration_date {', '.join(dates)} has passed: Google no longer shows "
                "the video")
    if rule == _IMAGE_TOO_MANY:
        return f"{len(data.get('image') or [])} images; the limit is {MAX_IMAGES} a URL"
    if rule == _EXTENSION_DEPRECATED:
        return ("tags Google retired in 2022 (ignored since): "
                + ", ".join(_deprecated(data) or ["?"]))
    if rule == _HREFLANG_INVALID_CODE:
        bad = sorted({code for href, code in pairs_of(data)
                      if code and href and _absolute(href) and not _code_ok(code)})
        return ("hreflang " + ", ".join(map(repr, bad)) + " is not an ISO 639-1 language with"
                " an optional ISO 15924 script and ISO 3166-1 alpha-2 region, nor x-default")
    if rule == _HREFLANG_RELATIVE:
        bad = sorted({href for href, code in pairs_of(data) if href and code
                      and not _absolute(href)})
        return ("alternate href " + ", ".join(map(repr, bad)) + " is not a full URL"
                " (search engines ignore it)")
    if rule == _HREFLANG_INCOMPLETE:
        return "an alternate without href or hreflang (search engines drop it)"
    if rule == _HREFLANG_NO_SELF:
        return "the alternates do not include this URL itself"
    if rule == _HREFLANG_CONFLICT:
        return "one hreflang value names two different URLs"
    if rule == _HREFLANG_NOT_RECIPROCAL:
        return "an alternate listed in this target does not name this URL back"
    raise KeyError(rule)


def news_count(exts: Iterable[str | None]) -> int:
    """The news:news tags of a document's entries (``news-too-many``)."""
    return sum(len(json.loads(ext).get("news") or []) for ext in exts
               if ext is not None and '"news":' in ext)


