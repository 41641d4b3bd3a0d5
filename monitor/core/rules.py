"""Every rule id, written once: its severity, the page of docs/ that explains it, what it means.

A rule id is stable: it names an issue in JSON output, a ``sitemap_monitor_issues`` label, an
alert rule's ``rule:`` glob and a ``--fail-on`` condition. ``RuleId`` is the registry: each
member is the id itself (a ``str``: it prints, compares, hashes and serialises as the id) and
carries its ``severity``, its docs ``page`` and a ``summary``, the way ``http.HTTPStatus``
members carry their phrase. Code names a rule by its member (``RuleId.LOC_MISSING``), so a
misspelt one fails at import and under mypy; an id that comes from outside (the database, a
configuration, a command line) becomes a member through ``rule_id``. The URL checks' rules
(``url-*``) are here too: their states are in ``model.URL_STATES``.

>>> RuleId.LASTMOD_INVALID.severity
'error'
>>> f"{RuleId.LASTMOD_INVALID}", TABLE["lastmod-invalid"] is RuleId.LASTMOD_INVALID
('lastmod-invalid', True)

On Python 3.11 reading a member off the class costs about four times a global's load (the
enum's metaclass has a ``__getattr__``): code that names a rule once an entry binds it to a
module constant (``_LOC_MISSING = RuleId.LOC_MISSING``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Literal, Self

__all__ = ["IDS", "TABLE", "RuleId", "Severity", "rule_id"]

# "info": a finding that explains a verdict and is never a problem (counted as no error nor
# warning, failing ``--fail-on`` only when named)
Severity = Literal["error", "warning", "info"]


class RuleId(StrEnum):
    """A rule: the member is its id (``"loc-missing"``); ``severity``, ``page`` (the docs/ page
    that explains it) and ``summary`` (one line) describe it."""

    severity: Severity
    page: str
    summary: str

    def __new__(cls, value: str, severity: Severity, page: str, summary: str) -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        member.page = page
        member.summary = summary
        return member

    XML_MALFORMED = ("xml-malformed", "error", "rules.md",
                     "not well-formed XML, or truncated (the whole document fails)")
    XML_DOCTYPE = ("xml-doctype", "error", "rules.md",
                   "a DOCTYPE or entity declaration (refused, never expanded)")
    ROOT_UNKNOWN = ("root-unknown", "error", "rules.md",
                    "root is neither urlset, sitemapindex, RSS nor Atom; an HTML page")
    NAMESPACE_WRONG = ("namespace-wrong", "error", "rules.md",
                       "missing or wrong sitemaps.org namespace (entries still read)")
    ENCODING_NOT_UTF8 = "encoding-not-utf8", "error", "rules.md", "the document is not UTF-8"
    SIZE_TOO_LARGE = ("size-too-large", "error", "rules.md",
                      "more than 50 MiB decompressed (max_bytes), in check and in validate FILE.gz"
                      " alike")
    URLS_TOO_MANY = "urls-too-many", "error", "rules.md", "more than 50,000 URLs in one document"
    INDEX_TOO_MANY = ("index-too-many", "error", "rules.md",
                      "more than 50,000 sitemaps in one index, or Sitemap: lines in robots.txt")
    INDEX_NESTED = ("index-nested", "error", "rules.md",
                    "a sitemap index inside a sitemap index, or the depth limit reached")
    INDEX_CYCLE = "index-cycle", "error", "rules.md", "an index that reaches itself"
    INDEX_CHILD_OUT_OF_SCOPE = ("index-child-out-of-scope", "warning", "rules.md",
                                "a child on another host than its index, or outside its directory "
                                "(not fetched)")
    CHILD_FETCH_FAILED = ("child-fetch-failed", "error", "rules.md",
                          "a child sitemap could not be fetched or parsed")
    LOC_MISSING = "loc-missing", "error", "rules.md", "an entry without loc (invalid)"
    LOC_NOT_ABSOLUTE = ("loc-not-absolute", "error", "rules.md",
                        "loc is not an absolute http(s) URL (invalid); a relative child of an "
                        "index is not read")
    LOC_TOO_LONG = "loc-too-long", "error", "rules.md", "loc of 2,048 characters or more (invalid)"
    LOC_OUT_OF_SCOPE = ("loc-out-of-scope", "warning", "rules.md",
                        "loc on another host, scheme or port, or above the sitemap's directory")
    LOC_DUPLICATE = ("loc-duplicate", "warning", "rules.md",
                     "the same page twice in one target (a #fragment or the case of an escape "
                     "aside; the later one is dropped, counted in duplicates)")
    LASTMOD_INVALID = ("lastmod-invalid", "error", "rules.md",
                       "not a W3C Datetime (the field's error: the URL stays valid)")
    LASTMOD_FUTURE = ("lastmod-future", "warning", "rules.md",
                      "lastmod later than the time of the check")
    CHANGEFREQ_INVALID = ("changefreq-invalid", "error", "rules.md",
                          "not always, hourly, daily, weekly, monthly, yearly or never (the URL "
                          "stays valid)")
    PRIORITY_INVALID = ("priority-invalid", "error", "rules.md",
                        "not a number from 0.0 to 1.0 (the URL stays valid)")
    LOC_MULTIPLE = ("loc-multiple", "error", "rules.md",
                    "more than one <loc> in one <url> or <sitemap>: the first is read, the others "
                    "are named")
    LOC_NOT_ENCODED = ("loc-not-encoded", "warning", "rules.md",
                       "loc holds characters a URL must escape (a space, a quote, raw non-ASCII)")
    GZIP_INVALID = ("gzip-invalid", "error", "rules.md",
                    "a body that announces gzip (magic bytes, Content-Encoding) and cannot be "
                    "decompressed")
    ROBOTS_CHANGED = ("robots-changed", "warning", "rules.md",
                      "the robots.txt of one of the target's hosts changed")
    ROBOTS_UNREACHABLE = ("robots-unreachable", "error", "rules.md",
                          "a robots.txt answered 5xx or not at all: Google stops crawling the site")
    SITEMAP_DISALLOWED = ("sitemap-disallowed", "error", "rules.md",
                          "a sitemap of the target is disallowed to Googlebot by its host's "
                          "robots.txt")
    NEWS_DISALLOWED = ("news-disallowed", "error", "rules.md",
                       "a news URL that robots.txt disallows to Googlebot-News (to Googlebot when "
                       "it has no group for Googlebot-News)")
    IMAGE_DISALLOWED = ("image-disallowed", "error", "rules.md",
                        "an image (image:loc) that robots.txt disallows to Googlebot-Image (to "
                        "Googlebot when it has no group for Googlebot-Image)")
    ROBOTS_SITEMAP_MISSING = ("robots-sitemap-missing", "warning", "rules.md",
                              "a url: target's sitemap is not named by a Sitemap: line of its "
                              "host's robots.txt")
    ROBOTS_SITEMAP_RELATIVE = ("robots-sitemap-relative", "warning", "rules.md",
                               "a Sitemap: line of robots.txt that is not a full URL (ignored, as "
                               "Google ignores it)")
    LASTMOD_CHURN = ("lastmod-churn", "warning", "rules.md",
                     "one per target: on two re-checks in a row, 80% or more of at least 20 URLs "
                     "changed their lastmod")
    LASTMOD_REGRESSED = ("lastmod-regressed", "warning", "rules.md",
                         "a URL's lastmod moved backwards; listed while the URL keeps that lastmod")
    NEWS_TOO_OLD = ("news-too-old", "warning", "rules.md",
                    "a news:publication_date more than 2 days before the check")
    NEWS_MISSING_FIELD = ("news-missing-field", "error", "rules.md",
                          "a news:news without publication name, publication language, a W3C "
                          "publication_date or title")
    NEWS_TOO_MANY = ("news-too-many", "error", "rules.md",
                     "more than 1,000 news:news tags in one document")
    VIDEO_MISSING_FIELD = ("video-missing-field", "error", "rules.md",
                           "a video:video without thumbnail_loc, title, description, or both "
                           "content_loc and player_loc")
    VIDEO_DESCRIPTION_TOO_LONG = ("video-description-too-long", "error", "rules.md",
                                  "a video:description over 2,048 characters")
    IMAGE_TOO_MANY = "image-too-many", "error", "rules.md", "more than 1,000 image:image on one URL"
    IMAGE_MISSING_LOC = ("image-missing-loc", "error", "rules.md",
                         "an image:image without an image:loc, which Google requires")
    VIDEO_EXPIRED = ("video-expired", "warning", "rules.md",
                     "a video:expiration_date that has passed: Google no longer shows the video")
    EXTENSION_DEPRECATED = ("extension-deprecated", "warning", "rules.md",
                            "a tag Google retired in 2022 (image:caption, video:price, "
                            "news:keywords and others)")
    HREFLANG_INVALID_CODE = ("hreflang-invalid-code", "warning", "rules.md",
                             "an hreflang that is neither an ISO 639-1 language with an optional "
                             "ISO 3166-1 alpha-2 region")
    HREFLANG_INCOMPLETE = ("hreflang-incomplete", "warning", "rules.md",
                           "an alternate without href or hreflang (search engines drop it)")
    HREFLANG_NO_SELF = ("hreflang-no-self", "warning", "rules.md",
                        "the alternates of a URL do not include the URL itself")
    HREFLANG_CONFLICT = ("hreflang-conflict", "warning", "rules.md",
                         "one hreflang value (in any case) for two different URLs in one entry")
    HREFLANG_NOT_RECIPROCAL = ("hreflang-not-reciprocal", "warning", "rules.md",
                               "A names B as an alternate, B is listed in the same target")
    NEWS_FIELD_INVALID = ("news-field-invalid", "error", "rules.md",
                          "more than one news:news in a <url>, or a news language that is not an "
                          "ISO 639 code")
    VIDEO_FIELD_INVALID = ("video-field-invalid", "error", "rules.md",
                           "a video field out of Google's bounds: duration, rating, tags, or a "
                           "content or player URL equal to the page")
    HREFLANG_RELATIVE = ("hreflang-relative", "warning", "rules.md",
                         "an alternate whose href is not a full URL (ignored by search engines)")
    INDEXNOW_KEY_MISSING = ("indexnow-key-missing", "error", "indexnow.md",
                            "a host's IndexNow key file did not answer 200 with the key: nothing "
                            "is submitted for that host")
    URL_REDIRECT = ("url-redirect", "warning", "url-health.md",
                    "the URL redirects to a page that is ok; the hops and the final URL are kept")
    URL_NOT_FOUND = "url-not-found", "error", "url-health.md", "the URL answers 404"
    URL_GONE = "url-gone", "error", "url-health.md", "the URL answers 410"
    URL_FORBIDDEN = "url-forbidden", "error", "url-health.md", "the URL answers 401 or 403"
    URL_CLIENT_ERROR = ("url-client-error", "error", "url-health.md",
                        "the URL answers another 4xx (not 408 or 429)")
    URL_SERVER_ERROR = ("url-server-error", "error", "url-health.md",
                        "the URL answered 5xx on 3 checks in a row")
    URL_NOINDEX = ("url-noindex", "error", "url-health.md",
                   "X-Robots-Tag or a robots meta tag says noindex (or none, or an "
                   "unavailable_after date that passed)")
    URL_CANONICALIZED = ("url-canonicalized", "warning", "url-health.md",
                         "the page names another URL as its canonical")
    URL_SOFT_404 = ("url-soft-404", "error", "url-health.md",
                    "a 204, or a 2xx page that is empty or whose title or heading says it is not "
                    "found")
    URL_DISALLOWED = ("url-disallowed", "error", "url-health.md",
                      "the host's robots.txt disallows the URL to Googlebot")
    URL_REDIRECT_LOOP = ("url-redirect-loop", "error", "url-health.md",
                         "a redirect chain that repeats a URL or runs past 10 hops")
    URL_CANONICAL_CONFLICT = ("url-canonical-conflict", "info", "url-health.md",
                              "several rel=canonical that disagree: all ignored, as Google ignores"
                              " them")
    URL_CANONICAL_BROKEN = ("url-canonical-broken", "warning", "url-health.md",
                            "the canonical a page names is not ok itself (404, redirect, noindex, "
                            "disallowed)")


# The registry by id, in declaration order: what code that holds an id as data looks up.
TABLE: Mapping[str, RuleId] = MappingProxyType({rule.value: rule for rule in RuleId})
IDS: frozenset[str] = frozenset(TABLE)


def rule_id(text: str) -> RuleId:
    """``text`` as a rule id, or ValueError: for ids that come from outside the code (the
    database, a configuration, a command line)."""
    rule = TABLE.get(text)
    if rule is None:
        raise ValueError(f"{text!r} is not a rule id")
    return rule
