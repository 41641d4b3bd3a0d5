"""The extension rules, each hit and missed, through the parser and the validator (both
of its paths: entry by entry, and CleanDocument's batches)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.codec import entryset, fingerprints
from monitor.core.model import RULES, UNUSABLE_LOC, Entry, Links
from monitor.read import alternates, extensions, parse, validate

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
SITEMAP = "https://example.com/sitemap.xml"
LOC = "https://example.com/page"
HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"'
        ' xmlns:video="http://www.google.com/schemas/sitemap-video/1.1"'
        ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
        ' xmlns:xhtml="http://www.w3.org/1999/xhtml">\n')


def news(*, name: str = "<news:name>The Daily</news:name>",
         language: str = "<news:language>en</news:language>",
         date: str = (NOW - timedelta(hours=30)).isoformat(),
         title: str = "<news:title>Headline</news:title>", extra: str = "") -> str:
    return (f"<news:news><news:publication>{name}{language}</news:publication>"
            f"<news:publication_date>{date}</news:publication_date>{title}{extra}</news:news>")


def video(*, thumbnail: str = "<video:thumbnail_loc>https://example.com/t.jpg</video:thumbnail_loc>",
          title: str = "<video:title>A video</video:title>",
          description: str = "<video:description>What it shows</video:description>",
          where: str = "<video:content_loc>https://example.com/v.mp4</video:content_loc>",
          extra: str = "") -> str:
    return f"<video:video>{thumbnail}{title}{description}{where}{extra}</video:video>"


def images(n: int, extra: str = "") -> str:
    return "".join(f"<image:image><image:loc>https://example.com/{i}.jpg</image:loc>{extra}"
                   "</image:image>" for i in range(n))


def link(code: str | None, href: str | None) -> str:
    attributes = "".join(f' {k}="{v}"' for k, v in (("hreflang", code), ("href", href)) if v
                         is not None)
    return f'<xhtml:link rel="alternate"{attributes}/>'


SELF = link("en", LOC)
# rule -> (the <url>'s extension elements that hit it, those that just miss it)
CASES: dict[str, tuple[str, str]] = {
    "news-too-old": (news(date=(NOW - timedelta(days=2, minutes=1)).isoformat()),
                     news(date=(NOW - timedelta(days=1, hours=23)).isoformat())),
    "news-too-old (a bare date)": (news(date=(NOW - timedelta(days=4)).date().isoformat()),
                                   news(date=(NOW - timedelta(days=2)).date().isoformat())),
    "news-missing-field": (news(language=""), news()),
    "news-missing-field (title)": (news(title="<news:title> </news:title>"), news()),
    "news-missing-field (a date that is none)": (news(date="yesterday"), news()),
    "video-missing-field": (video(where=""), video(
        where="<video:player_loc>https://example.com/player</video:player_loc>")),
    "video-missing-field (thumbnail)": (video(thumbnail=""), video()),
    "video-description-too-long": (
        video(description=f"<video:description>{'d' * 2049}</video:description>"),
        video(description=f"<video:description>{'d' * 2048}</video:description>")),
    "image-too-many": (images(1001), images(1000)),
    "image-missing-loc": ("<image:image></image:image>", images(1)),
    "image-missing-loc (an empty loc)": ("<image:image><image:loc> </image:loc></image:image>",
                                         images(1)),
    "image-missing-loc (another field)": (
        images(1) + "<image:image><image:other>x</image:other></image:image>", images(2)),
    "image-missing-loc (beside alternates)": (SELF + "<image:image/>", SELF + images(1)),
    "video-expired": (video(extra="<video:expiration_date>"
                                  f"{(NOW - timedelta(minutes=1)).isoformat()}"
                                  "</video:expiration_date>"),
                      video(extra="<video:expiration_date>"
                                  f"{(NOW + timedelta(minutes=1)).isoformat()}"
                                  "</video:expiration_date>")),
    "video-expired (a bare date)": (
        video(extra="<video:expiration_date>"
                    f"{(NOW - timedelta(days=3)).date().isoformat()}</video:expiration_date>"),
        video(extra="<video:expiration_date>"
                    f"{NOW.date().isoformat()}</video:expiration_date>")),
    "extension-deprecated": (images(1, "<image:caption>A cat</image:caption>"), images(1)),
    "extension-deprecated (image title)": (images(1, "<image:title>Cat</image:title>"),
                                           images(1)),
    "extension-deprecated (video)": (
        video(extra="<video:category>Cats</video:category>"), video()),
    "extension-deprecated (player_loc)": (
        video(where='<video:player_loc allow_embed="yes">https://example.com/p</video:player_loc>'),
        video(where="<video:player_loc>https://example.com/p</video:player_loc>")),
    "extension-deprecated (news)": (news(extra="<news:keywords>cats</news:keywords>"), news()),
    "hreflang-invalid-code": (SELF + link("en-UK", "https://example.com/uk"),
                              SELF + link("en-GB", "https://example.com/uk")),
    "hreflang-invalid-code (underscore)": (SELF + link("de_DE", "https://example.com/de"),
                                           SELF + link("de-de", "https://example.com/de")),
    "hreflang-invalid-code (x-default)": (SELF + link("x-defaults", "https://example.com/"),
                                          SELF + link("X-Default", "https://example.com/")),
    "hreflang-incomplete": (SELF + link("de", None), SELF + link("de", "https://example.com/de")),
    "hreflang-incomplete (no hreflang)": (SELF + link(None, "https://example.com/de"),
                                          SELF + link("de", "https://example.com/de")),
    "hreflang-no-self": (link("de", "https://example.com/de"),
                         link("de", "https://example.com/de") + SELF),
    "hreflang-conflict": (SELF + link("EN", "https://example.com/other"),
                          SELF + link("en-us", "https://example.com/other")),
    # ISO 15924 scripts, as Google's hreflang documentation allows them
    "hreflang-invalid-code (a script that is none)": (
        SELF + link("zh-Hanx", "https://example.com/zh"),
        SELF + link("zh-Hans", "https://example.com/zh")),
    "hreflang-invalid-code (script and region)": (
        SELF + link("zh-TW-Hant", "https://example.com/zh"),
        SELF + link("zh-Hant-TW", "https://example.com/zh")),
    "hreflang-invalid-code (a UN M.49 region)": (
        SELF + link("es-419", "https://example.com/es"),
        SELF + link("es-MX", "https://example.com/es")),
    "hreflang-relative": (link("en", "/page") + link("de", "https://example.com/de"),
                          SELF + link("de", "HTTPS://example.com/de")),
    "hreflang-relative (protocol-relative)": (SELF + link("de", "//example.com/de"),
                                              SELF + link("de", "http://example.com/de")),
    "news-field-invalid": (news() + news(), news()),
    "news-field-invalid (language)": (news(language="<news:language>english</news:language>"),
                                      news(language="<news:language>eng</news:language>")),
    "news-field-invalid (a region)": (news(language="<news:language>en-US</news:language>"),
                                      news(language="<news:language>zh-TW</news:language>")),
    "video-field-invalid": (video(where=f"<video:content_loc>{LOC}</video:content_loc>"),
                            video(where=f"<video:content_loc>{LOC}.mp4</video:content_loc>")),
    "video-field-invalid (player_loc)": (
        video(where=f"<video:player_loc>{LOC}</video:player_loc>"),
        video(where=f"<video:player_loc>{LOC}/player</video:player_loc>")),
    "video-field-invalid (duration)": (video(extra="<video:duration>28801</video:duration>"),
                                       video(extra="<video:duration>28800</video:duration>")),
    "video-field-invalid (no duration)": (video(extra="<video:duration>0</video:duration>"),
                                          video(extra="<video:duration>1</video:duration>")),
    "video-field-invalid (rating)": (video(extra="<video:rating>5.1</video:rating>"),
                                     video(extra="<video:rating>5.0</video:rating>")),
    "video-field-invalid (tags)": (video(extra="<video:tag>t</video:tag>" * 33),
                                   video(extra="<video:tag>t</video:tag>" * 32)),
}


def rules_of(elements: str, loc: str = LOC) -> set[str]:
    """The rule ids of one <url> with these extension elements, both ways through the
    validator (which must agree)."""
    body = f"{HEAD}<url><loc>{loc}</loc>{elements}</url>\n</urlset>\n".encode()
    parsed = parse.parse_document(body, SITEMAP)
    assert parsed.failure is None
    checked = validate.validate_document(parsed.entries, SITEMAP, now=NOW)
    found = set(checked.rules.get(loc, "").split())
    clean = validate.CleanDocument(SITEMAP, now=NOW)
    assert clean.add(parsed.entries) == (not found)
    entries, links = batch_of(body)  # and from the parser's links, where it gives them
    assert entries == parsed.entries
    clean = validate.CleanDocument(SITEMAP, now=NOW)
    assert clean.add(entries, links) == (not found)
    assert all(state.valid for state in checked.entries.values())  # none makes it invalid
    return found


def batch_of(body: bytes) -> tuple[list[Entry], Links | None]:
    """A document's entries and links as one batch (``DocumentParser.take_batch``)."""
    parser = parse.DocumentParser(SITEMAP)
    parser.feed(body)
    assert parser.close().failure is None
    return parser.take_batch()


@pytest.mark.parametrize("case", CASES)
def test_each_rule_hits_and_misses(case: str) -> None:
    rule = case.split(" (")[0]
    hit, miss = CASES[case]
    assert rules_of(hit) == {rule}
    assert rules_of(miss) == set()


def test_severities_and_validity() -> None:
    errors = {"news-missing-field", "news-too-many", "video-missing-field",
              "video-description-too-long", "image-too-many", "news-field-invalid",
              "video-field-invalid", "image-missing-loc"}
    for rule in [*extensions.ENTRY_RULES, "news-too-many", "hreflang-not-reciprocal"]:
        assert RULES[rule] == ("error" if rule in errors else "warning")
        assert rule not in UNUSABLE_LOC


def test_messages_name_what_is_wrong() -> None:
    body = (f"{HEAD}<url><loc>{LOC}</loc>{video(thumbnail='', where='')}"
            f"{images(1, '<image:license>x</image:license>')}{link('en-UK', LOC)}</url></urlset>")
    parsed = parse.parse_document(body.encode(), SITEMAP)
    messages = {i.rule: i.message for i in
                validate.validate_document(parsed.entries, SITEMAP, now=NOW).issues}
    assert messages["video-missing-field"] == (
        "video lacks content_loc or player_loc, thumbnail_loc")
    assert messages["extension-deprecated"].endswith("image:license")
    assert "'en-UK'" in messages["hreflang-invalid-code"]


def test_messages_of_the_field_bounds_say_which_field() -> None:
    elements = (video(where=f"<video:content_loc>{LOC}</video:content_loc>",
                      extra="<video:rating>9</video:rating>")
                + news(language="<news:language>english</news:language>") + news()
                + link("en", "/page"))
    body = f"{HEAD}<url><loc>{LOC}</loc>{elements}</url></urlset>"
    parsed = parse.parse_document(body.encode(), SITEMAP)
    messages = {i.rule: i.message for i in
                validate.validate_document(parsed.entries, SITEMAP, now=NOW).issues}
    assert messages["video-field-invalid"] == (
        "video content_loc is the page itself; rating '9' is not 0.0 to 5.0")
    assert messages["news-field-invalid"] == (
        "2 news:news elements; a URL has one; news:language 'english' is not an ISO 639 code"
        " (nor zh-cn, zh-tw)")
    assert messages["hreflang-relative"] == (
        "alternate href '/page' is not a full URL (search engines ignore it)")


def test_alternates_with_escapes_are_read_as_urls() -> None:
    """A quote or a non-ASCII character in an href (JSON escapes them): the entry still names
    itself, and its alternates are read back as the URLs they are."""
    loc = 'https://example.com/caf\u00e9?q="x"'
    xml_loc = loc.replace('"', "&quot;")
    links = link("fr", xml_loc) + link("de", "https://example.com/de")
    body = f"{HEAD}<url><loc>{xml_loc}</loc>{links}</url></urlset>"
    entry = parse.parse_document(body.encode(), SITEMAP).entries[0]
    assert entry.loc == loc
    checked = validate.validate_document([entry], SITEMAP, now=NOW)
    assert checked.rules == {loc: "loc-not-encoded"}  # and not hreflang-no-self
    assert entry.extensions is not None
    assert alternates.hrefs(entry.extensions) == [loc, "https://example.com/de"]


def test_entries_without_extensions_keep_the_clean_path() -> None:
    body = HEAD + "".join(f"<url><loc>https://example.com/{i}</loc></url>" for i in range(50))
    parsed = parse.parse_document((body + "</urlset>").encode(), SITEMAP)
    clean = validate.CleanDocument(SITEMAP, now=NOW)
    assert clean.add(parsed.entries)


def alternates_of(*entries: tuple[str, list[str]]) -> tuple[list[str], list[str | None]]:
    """(loc, [hrefs it names]) -> the locs and extensions columns of a document."""
    body = HEAD + "".join(
        f"<url><loc>{loc}</loc>" + "".join(link("en", h) for h in hrefs) + "</url>"
        for loc, hrefs in entries) + "</urlset>"
    parsed = parse.parse_document(body.encode(), SITEMAP)
    return [e.loc for e in parsed.entries], [e.extensions for e in parsed.entries]


A, B, C = (f"https://example.com/{name}" for name in "abc")


@pytest.mark.parametrize(("entries", "unanswered"), [
    ([(A, [A, B]), (B, [B, A])], set()),  # reciprocal
    ([(A, [A, B]), (B, [B])], {A}),  # B is listed and does not name A
    ([(A, [A, B]), (B, [])], {A}),  # B names nothing at all
    ([(A, [A, C])], set()),  # C is not in the target: nothing to say
    ([(A, [B]), (B, [C]), (C, [A])], {A, B, C}),  # a cycle answers nobody
    ([(A, [A, B, C]), (B, [A, B, C]), (C, [A, B, C])], set()),
])
def test_reciprocity(entries: list[tuple[str, list[str]]], unanswered: set[str]) -> None:
    locs, exts = alternates_of(*entries)
    if unanswered:  # a balance of 0 says every alternate is answered (the converse need not hold)
        assert alternates.balance(locs, exts) != 0
    text = "\x00".join(ext or "" for ext in exts)
    assert alternates.balance_of(locs, text, chunk=1) == alternates.balance(locs, exts)
    held = alternates.Alternates()
    held.add(SITEMAP, locs, exts)
    assert {locs[i] for i in held.unanswered().get(SITEMAP, set())} == unanswered


def test_reciprocity_across_documents() -> None:
    """A in one document names B in another; the balance of both sums to 0 only when B
    answers, and the pairs find A when it does not."""
    first = alternates_of((A, [A, B]))
    for answer, unanswered in (([B, A], set()), ([B], {A})):
        second = alternates_of((B, answer))
        total = (alternates.balance(*first) + alternates.balance(*second)) % 2**64
        assert (total == 0) == (not unanswered)
        held = alternates.Alternates()
        held.add("one", *first)
        held.add("two", *second)
        found = held.unanswered()
        assert {first[0][i] for i in found.get("one", set())} == unanswered
        assert "two" not in found


def test_balance_is_kept_where_its_head_finds_it() -> None:
    columns = entryset.columns({}, {})
    entryset.annotate(columns, issues=[{"rule": "x", "message": "m", "loc": None}],
                      dropped={}, duplicates=["d"], balance=2**63 + 5)
    data = entryset.pack(columns)
    assert entryset.head(data[:512]) == (columns.header["verdicts"], 2**63 + 5)
    assert entryset.unpack(data).balance() == 2**63 + 5


@pytest.mark.parametrize("elements", [
    SELF + link("de", "https://example.com/de") + images(1),
    SELF + link("x-default", "https://example.com/?a=1&amp;b=\u00e9"),
    images(1),
    link(None, "https://example.com/de") + link("de", None) + images(1),
    SELF + images(2),  # two images: not the usual shape
    images(1) + SELF,  # the image first: neither
    '<xhtml:link rel="alternate" hreflang=" en " href=" https://example.com/page "/>',
    '<xhtml:link rel="canonical" href="https://example.com/"/>' + SELF,
])
def test_the_usual_shapes_are_written_as_any_shape_is(elements: str) -> None:
    """parse's shortcut for links and a lone image gives the very JSON of its general path."""
    from lxml import etree

    body = f"{HEAD}<url><loc>{LOC}</loc>{elements}</url></urlset>"
    entry = parse.parse_document(body.encode(), SITEMAP).entries[0]
    url = etree.fromstring(body.encode())[0]
    assert entry.extensions == parse._any_extensions(list(url)[1:])


def test_a_reread_document_judges_its_news_at_the_new_check() -> None:
    """The same news sitemap read again three days later: the stored verdicts (fresh) are not
    reused for news, which only grows old."""
    from monitor.read import reread

    body = f"{HEAD}<url><loc>{LOC}</loc>{news()}</url><url><loc>{LOC}/2</loc></url></urlset>"
    entries = parse.parse_document(body.encode(), SITEMAP).entries
    first = validate.validate_document(entries, SITEMAP, now=NOW)
    assert first.rules == {}
    stored = entryset.unpack(entryset.encode(first.entries, first.rules))
    later = reread.reread(entries, stored, SITEMAP, now=NOW + timedelta(days=3), examples=10)
    assert later is not None
    assert later.counts == {"news-too-old": 1}
    assert later.rows == b""  # a warning: no change


# The parser's links of a batch (monitor.core.model.Links) against the JSON text they stand for.
_HREFS = [LOC, A, B, "", None, "https://example.com/?a=1&amp;b=\u00e9", "/de", "HTTP://example.com/",
          "https://example.com/&quot;q&quot;\\", " https://example.com/b "]
_CODES = ["en", "de", "EN", "en-GB", "en-UK", "x-default", "", None, " fr ", "zh-Hant-TW",
          "zh-hans", "es-419"]
_alternates = st.lists(st.tuples(st.sampled_from(_CODES), st.sampled_from(_HREFS)), max_size=4)
_url = st.tuples(st.sampled_from([LOC, A, B, C, "https://example.com/\u00e9"]), _alternates,
                 st.booleans(), st.sampled_from(["usual", "usual", "usual", "news", "late link"]))


def _url_xml(loc: str, alternates: list[tuple[str | None, str | None]], image: bool,
             shape: str) -> str:
    elements = "".join(link(code, href) for code, href in alternates)
    if image:
        elements += images(1)
    if shape == "news":
        elements += news()
    elif shape == "late link" and alternates:  # a link after the image: not the usual shape
        elements = images(1) + elements
    return f"<url><loc>{loc}</loc>{elements}</url>"


@settings(deadline=None)
@given(st.lists(_url, max_size=12), st.lists(st.integers(min_value=1, max_value=400),
                                             max_size=6))
def test_the_parsers_links_say_what_the_json_says(
        urls: list[tuple[str, list[tuple[str | None, str | None]], bool, str]],
        cuts: list[int]) -> None:
    """A batch's links are exactly its entries' alternates (or None when one entry has another
    shape), and the rules and the balance read from them agree with those read from the text."""
    body = (HEAD + "".join(_url_xml(*url) for url in urls) + "</urlset>").encode()
    parser = parse.DocumentParser(SITEMAP)
    start, batches = 0, []
    for end in [*sorted(cuts), len(body)]:
        parser.feed(body[start:end])
        batches.append(parser.take_batch())
        start = max(start, end)
    assert parser.close().failure is None
    batches.append(parser.take_batch())
    usual = all(shape == "usual" or (shape == "late link" and not alternates)
                for _, alternates, _, shape in urls)
    checker = extensions.Checker(NOW)
    for entries, links in batches:
        assert (links is not None) or not usual
        if any('"news":' in (entry.extensions or "") for entry in entries):
            assert links is None  # another shape: the links are not all of them
        if links is None:
            continue
        written = [(i, item["href"], item["hreflang"]) for i, entry in enumerate(entries)
                   for item in json.loads(entry.extensions or "{}").get("alternates", [])]
        assert list(zip(links.owners, links.hrefs, links.codes, strict=True)) == written
        locs = [entry.loc for entry in entries]
        exts = [entry.extensions for entry in entries]
        text = "\x00".join(ext or "" for ext in exts)
        hashes = fingerprints.loc_hashes(locs)
        assert (alternates.links_balance(locs, links, hashes)
                == alternates.links_balance(locs, links)
                == alternates.balance_of(locs, text))
        if any(ext is not None for ext in exts):
            judged = not any(checker.rules(loc, ext) for loc, ext in zip(locs, exts, strict=True)
                             if ext is not None)
            assert extensions.batch_ok(checker, locs, exts, links) == judged
            assert extensions.batch_ok(checker, locs, exts) == judged


def test_a_usual_batch_is_judged_from_its_links() -> None:
    """The usual batch passes on its links alone: a batch_ok that never reads the text."""
    body = (HEAD + "".join(f"<url><loc>https://example.com/{i}</loc>"
                           + link("en", f"https://example.com/{i}")
                           + link("de", f"https://example.com/de/{i}") + images(1) + "</url>"
                           for i in range(20)) + "</urlset>").encode()
    entries, links = batch_of(body)
    assert links is not None
    assert len(links.owners) == 40
    locs = [entry.loc for entry in entries]
    unreadable = [None] * len(entries)  # were the text read, every entry would be a None
    assert extensions.batch_ok(extensions.Checker(NOW), locs, unreadable, links)
    bad = body.replace(b'hreflang="de" href="https://example.com/de/3"',
                       b'hreflang="en-UK" href="https://example.com/de/3"')
    entries, links = batch_of(bad)
    assert links is not None
    assert links.codes[7] == "en-UK"
    assert not extensions.batch_ok(extensions.Checker(NOW), locs,
                                   [entry.extensions for entry in entries], links)
