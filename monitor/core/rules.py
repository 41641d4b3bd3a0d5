"""Every rule id, written once: its severity, the page of docs/ that explains it, what it means.

A rule id is stable: it names an issue in JSON output, a ``sitemap_monitor_issues`` label, an
alert rule's ``rule:`` glob and a ``--fail-on`` condition. ``RuleId`` is the type of one, so
mypy refuses a misspelt id wherever an issue is made; ``TABLE`` holds one ``Rule`` per id (a
test holds the two to each other and every id to its docs page). The URL checks' rules
(``url-*``) are here too: their states are in ``model.URL_STATES``.

>>> TABLE["lastmod-invalid"].severity
'error'
"""

from __future__ import annotations

from typing import Literal, NamedTuple, cast, get_args

__all__ = ["IDS", "TABLE", "Rule", "RuleId", "Severity", "rule_id"]

# "info": a finding that explains a verdict and is never a problem (counted as no error nor
# warning, failing ``--fail-on`` only when named)
Severity = Literal["error", "warning", "info"]

RuleId = Literal[
    "xml-malformed",
    "xml-doctype",
    "root-unknown",
    "namespace-wrong",
    "encoding-not-utf8",
    "size-too-large",
    "urls-too-many",
    "index-too-many",
    "index-nested",
    "index-cycle",
    "index-child-out-of-scope",
    "child-fetch-failed",
    "loc-missing",
    "loc-not-absolute",
    "loc-too-long",
    "loc-out-of-scope",
    "loc-duplicate",
    "lastmod-invalid",
    "lastmod-future",
    "changefreq-invalid",
    "priority-invalid",
    "loc-multiple",
    "loc-not-encoded",
    "gzip-invalid",
    "robots-changed",
    "robots-unreachable",
    "sitemap-disallowed",
    "news-disallowed",
    "image-disallowed",
    "robots-sitemap-missing",
    "robots-sitemap-relative",
    "lastmod-churn",
    "lastmod-regressed",
    "news-too-old",
    "news-missing-field",
    "news-too-many",
    "video-missing-field",
    "video-description-too-long",
    "image-too-many",
    "image-missing-loc",
    "video-expired",
    "extension-deprecated",
    "hreflang-invalid-code",
    "hreflang-incomplete",
    "hreflang-no-self",
    "hreflang-conflict",
    "hreflang-not-reciprocal",
    "news-field-invalid",
    "video-field-invalid",
    "hreflang-relative",
    "indexnow-key-missing",
    "url-redirect",
    "url-not-found",
    "url-gone",
    "url-forbidden",
    "url-client-error",
    "url-server-error",
    "url-noindex",
    "url-canonicalized",
    "url-soft-404",
    "url-disallowed",
    "url-redirect-loop",
    "url-canonical-conflict",
    "url-canonical-broken",
]


class Rule(NamedTuple):
    """One rule: its id, severity, the docs/ page that explains it, and a one-line summary."""

    id: RuleId
    severity: Severity
    page: str
    summary: str


_RULES: tuple[Rule, ...] = (
    Rule("xml-malformed", "error", "rules.md",
         'not well-formed XML, or truncated (the whole document fails)'),
    Rule("xml-doctype", "error", "rules.md",
         'a DOCTYPE or entity declaration (refused, never expanded)'),
    Rule("root-unknown", "error", "rules.md",
         'root is neither urlset, sitemapindex, RSS nor Atom; an HTML page'),
    Rule("namespace-wrong", "error", "rules.md",
         'missing or wrong sitemaps.org namespace (entries still read)'),
    Rule("encoding-not-utf8", "error", "rules.md",
         'the document is not UTF-8'),
    Rule("size-too-large", "error", "rules.md",
         'more than 50 MiB decompressed (max_bytes), in check and in validate FILE.gz alike'),
    Rule("urls-too-many", "error", "rules.md",
         'more than 50,000 URLs in one document'),
    Rule("index-too-many", "error", "rules.md",
         'more than 50,000 sitemaps in one index, or Sitemap: lines in robots.txt'),
    Rule("index-nested", "error", "rules.md",
         'a sitemap index inside a sitemap index, or the depth limit reached'),
    Rule("index-cycle", "error", "rules.md",
         'an index that reaches itself'),
    Rule("index-child-out-of-scope", "warning", "rules.md",
         "a child on another host than its index, or outside its directory (not fetched)"),
    Rule("child-fetch-failed", "error", "rules.md",
         'a child sitemap could not be fetched or parsed'),
    Rule("loc-missing", "error", "rules.md",
         'an entry without loc (invalid)'),
    Rule("loc-not-absolute", "error", "rules.md",
         'loc is not an absolute http(s) URL (invalid); a relative child of an index is not read'),
    Rule("loc-too-long", "error", "rules.md",
         'loc of 2,048 characters or more (invalid)'),
    Rule("loc-out-of-scope", "warning", "rules.md",
         "loc on another host, scheme or port, or above the sitemap's directory"),
    Rule("loc-duplicate", "warning", "rules.md",
         'the same page twice in one target (a #fragment or the case of an escape aside; the '
         'later one is dropped, counted in duplicates)'),
    Rule("lastmod-invalid", "error", "rules.md",
         "not a W3C Datetime (the field's error: the URL stays valid)"),
    Rule("lastmod-future", "warning", "rules.md",
         'lastmod later than the time of the check'),
    Rule("changefreq-invalid", "error", "rules.md",
         'not always, hourly, daily, weekly, monthly, yearly or never (the URL stays valid)'),
    Rule("priority-invalid", "error", "rules.md",
         'not a number from 0.0 to 1.0 (the URL stays valid)'),
    Rule("loc-multiple", "error", "rules.md",
         'more than one <loc> in one <url> or <sitemap>: the first is read, the others are named'),
    Rule("loc-not-encoded", "warning", "rules.md",
         'loc holds characters a URL must escape (a space, a quote, raw non-ASCII)'),
    Rule("gzip-invalid", "error", "rules.md",
         'a body that announces gzip (magic bytes, Content-Encoding) and cannot be decompressed'),
    Rule("robots-changed", "warning", "rules.md",
         "the robots.txt of one of the target's hosts changed"),
    Rule("robots-unreachable", "error", "rules.md",
         'a robots.txt answered 5xx or not at all: Google stops crawling the site'),
    Rule("sitemap-disallowed", "error", "rules.md",
         "a sitemap of the target is disallowed to Googlebot by its host's robots.txt"),
    Rule("news-disallowed", "error", "rules.md",
         "a news URL that robots.txt disallows to Googlebot-News (to Googlebot when it has no "
         "group for Googlebot-News)"),
    Rule("image-disallowed", "error", "rules.md",
         "an image (image:loc) that robots.txt disallows to Googlebot-Image (to Googlebot when "
         "it has no group for Googlebot-Image)"),
    Rule("robots-sitemap-missing", "warning", "rules.md",
         "a url: target's sitemap is not named by a Sitemap: line of its host's robots.txt"),
    Rule("robots-sitemap-relative", "warning", "rules.md",
         'a Sitemap: line of robots.txt that is not a full URL (ignored, as Google ignores it)'),
    Rule("lastmod-churn", "warning", "rules.md",
         'one per target: on two re-checks in a row, 80% or more of at least 20 URLs changed '
         'their lastmod'),
    Rule("lastmod-regressed", "warning", "rules.md",
         "a URL's lastmod moved backwards; listed while the URL keeps that lastmod"),
    Rule("news-too-old", "warning", "rules.md",
         'a news:publication_date more than 2 days before the check'),
    Rule("news-missing-field", "error", "rules.md",
         'a news:news without publication name, publication language, a W3C publication_date or '
         'title'),
    Rule("news-too-many", "error", "rules.md",
         'more than 1,000 news:news tags in one document'),
    Rule("video-missing-field", "error", "rules.md",
         'a video:video without thumbnail_loc, title, description, or both content_loc and '
         'player_loc'),
    Rule("video-description-too-long", "error", "rules.md",
         'a video:description over 2,048 characters'),
    Rule("image-too-many", "error", "rules.md",
         'more than 1,000 image:image on one URL'),
    Rule("image-missing-loc", "error", "rules.md",
         'an image:image without an image:loc, which Google requires'),
    Rule("video-expired", "warning", "rules.md",
         'a video:expiration_date that has passed: Google no longer shows the video'),
    Rule("extension-deprecated", "warning", "rules.md",
         'a tag Google retired in 2022: image: caption, geo_location, title, license; video: '
         'category, gallery_loc, pric'),
    Rule("hreflang-invalid-code", "warning", "rules.md",
         'an hreflang that is neither an ISO 639-1 language with an optional ISO 3166-1 alpha-2 '
         'region'),
    Rule("hreflang-incomplete", "warning", "rules.md",
         'an alternate without href or hreflang (search engines drop it)'),
    Rule("hreflang-no-self", "warning", "rules.md",
         'the alternates of a URL do not include the URL itself'),
    Rule("hreflang-conflict", "warning", "rules.md",
         'one hreflang value (in any case) for two different URLs in one entry'),
    Rule("hreflang-not-reciprocal", "warning", "rules.md",
         'A names B as an alternate, B is listed in the same target'),
    Rule("news-field-invalid", "error", "rules.md",
         'more than one news:news in a <url>, or a news language that is not an ISO 639 code'),
    Rule("video-field-invalid", "error", "rules.md",
         "a video field out of Google's bounds: duration, rating, tags, or a content or player "
         "URL equal to the page"),
    Rule("hreflang-relative", "warning", "rules.md",
         'an alternate whose href is not a full URL (ignored by search engines)'),
    Rule("indexnow-key-missing", "error", "indexnow.md",
         "a host's IndexNow key file did not answer 200 with the key: nothing is submitted for "
         "that host"),
    Rule("url-redirect", "warning", "url-health.md",
         'the URL redirects to a page that is ok; the hops and the final URL are kept'),
    Rule("url-not-found", "error", "url-health.md",
         'the URL answers 404'),
    Rule("url-gone", "error", "url-health.md",
         'the URL answers 410'),
    Rule("url-forbidden", "error", "url-health.md",
         'the URL answers 401 or 403'),
    Rule("url-client-error", "error", "url-health.md",
         'the URL answers another 4xx (not 408 or 429)'),
    Rule("url-server-error", "error", "url-health.md",
         'the URL answered 5xx on 3 checks in a row'),
    Rule("url-noindex", "error", "url-health.md",
         'X-Robots-Tag or a robots meta tag says noindex (or none, or an unavailable_after date '
         'that passed)'),
    Rule("url-canonicalized", "warning", "url-health.md",
         'the page names another URL as its canonical'),
    Rule("url-soft-404", "error", "url-health.md",
         'a 204, or a 2xx page that is empty or whose title or heading says it is not found'),
    Rule("url-disallowed", "error", "url-health.md",
         "the host's robots.txt disallows the URL to Googlebot"),
    Rule("url-redirect-loop", "error", "url-health.md",
         'a redirect chain that repeats a URL or runs past 10 hops'),
    Rule("url-canonical-conflict", "info", "url-health.md",
         'several rel=canonical that disagree: all ignored, as Google ignores them'),
    Rule("url-canonical-broken", "warning", "url-health.md",
         'the canonical a page names is not ok itself (404, redirect, noindex, disallowed)'),
)

TABLE: dict[str, Rule] = {rule.id: rule for rule in _RULES}
IDS: frozenset[str] = frozenset(get_args(RuleId))


def rule_id(text: str) -> RuleId:
    """``text`` as a rule id, or ValueError: for ids that come from outside the code (the
    database, a configuration, a command line)."""
    if text not in IDS:
        raise ValueError(f"{text!r} is not a rule id")
    return cast(RuleId, text)
