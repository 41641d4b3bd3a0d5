"""Validation as Google documents it, through the CLI: hreflang codes and hrefs, one URL one
page, escapes, bare dates, scope of an index's children and of a site's robots.txt, news and
video fields. Each case on a real file (``validate FILE``) or a real HTTP server on 127.0.0.1
(``check --json``, each backend storing the snapshot)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, index, urlset

from monitor.cli.commands import main

HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:xhtml="http://www.w3.org/1999/xhtml"'
        ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
        ' xmlns:video="http://www.google.com/schemas/sitemap-video/1.1">\n')
PAGE = "https://example.com/page"


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], urls: str) -> dict[str, Any]:
    """``validate FILE --json`` of a urlset holding these <url> elements."""
    path = tmp_path / "sitemap.xml"
    path.write_text(f"{HEAD}{urls}</urlset>\n")
    code = main(["validate", str(path), "--json"])
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code in (0, 3), result
    return result


def rules(result: dict[str, Any], loc: str | None = PAGE) -> list[str]:
    """The rule ids of the issues about ``loc`` (any loc: None), sorted."""
    return sorted(i["rule"] for i in result["issues"] if loc is None or i["loc"] == loc)


def alternate(code: str, href: str) -> str:
    return f'<xhtml:link rel="alternate" hreflang="{code}" href="{href}"/>'


@pytest.mark.parametrize(("code", "expected"), [
    ("zh-Hans", []), ("zh-Hant", []), ("zh-Hant-TW", []), ("zh-Hans-US", []),
    ("x-default", []), ("en-GB", []),
    ("en-UK", ["hreflang-invalid-code"]), ("es-419", ["hreflang-invalid-code"]),
    ("en_GB", ["hreflang-invalid-code"]), ("zh-TW-Hant", ["hreflang-invalid-code"]),
])
def test_hreflang_codes_with_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     code: str, expected: list[str]) -> None:
    r = validate(tmp_path, capsys, f"<url><loc>{PAGE}</loc>{alternate('en', PAGE)}"
                 f"{alternate(code, 'https://example.com/other')}</url>")
    assert rules(r) == expected


def test_a_relative_href_is_hreflang_relative_not_no_self(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = validate(tmp_path, capsys, f"<url><loc>{PAGE}</loc>{alternate('en', '/page')}"
                 f"{alternate('de', 'https://example.com/de')}</url>")
    assert rules(r) == ["hreflang-relative"]
    assert [i["severity"] for i in r["issues"]] == ["warning"]
    assert "'/page' is not a full URL" in r["issues"][0]["message"]


def test_one_page_listed_twice_is_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A #fragment, or an escape in lower case: the same page as the loc before it."""
    locs = ["https://example.com/a", "https://example.com/a#top",
            "https://example.com/caf%C3%A9", "https://example.com/caf%c3%a9",
            "https://example.com/b"]
    r = validate(tmp_path, capsys, "".join(f"<url><loc>{loc}</loc></url>" for loc in locs))
    assert (r["urls"], r["duplicates"]) == (3, 2)
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [
        ("loc-duplicate", locs[1]), ("loc-duplicate", locs[3])]


def test_an_alternate_to_a_page_with_a_fragment_names_that_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hreflang-not-reciprocal reads pages as loc-duplicate does: B#x is B, which does not
    name A back."""
    other = "https://example.com/other"
    r = validate(tmp_path, capsys, f"<url><loc>{PAGE}</loc>{alternate('en', PAGE)}"
                 f"{alternate('de', other + '#x')}</url><url><loc>{other}</loc></url>")
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [("hreflang-not-reciprocal", PAGE)]


@pytest.mark.parametrize(("path", "expected"), [
    ("/100%", ["loc-not-encoded"]), ("/a%zz", ["loc-not-encoded"]), ("/a%2", ["loc-not-encoded"]),
    ("/a%20b", []), ("/caf%c3%a9", []),
])
def test_a_percent_that_starts_no_escape_is_not_encoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, expected: list[str]
) -> None:
    loc = "https://example.com" + path
    assert rules(validate(tmp_path, capsys, f"<url><loc>{loc}</loc></url>"), loc) == expected


def test_a_bare_date_is_future_only_past_today_at_utc_plus_14(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Today at UTC+14 is never in the future; the day after it always is."""
    today_east = (datetime.now(UTC) + timedelta(hours=14)).date()
    urls = "".join(f"<url><loc>{PAGE}/{i}</loc><lastmod>{day.isoformat()}</lastmod></url>"
                   for i, day in enumerate([today_east, today_east + timedelta(days=1)]))
    r = validate(tmp_path, capsys, urls)
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [("lastmod-future", f"{PAGE}/1")]


NEWS = ("<news:news><news:publication><news:name>The Daily</news:name>"
        "<news:language>{language}</news:language></news:publication>"
        "<news:publication_date>{date}</news:publication_date>"
        "<news:title>Headline</news:title></news:news>")


@pytest.mark.parametrize(("language", "times", "expected"), [
    ("en", 1, []), ("eng", 1, []), ("zh-cn", 1, []), ("zh-TW", 1, []),
    ("en", 2, ["news-field-invalid"]), ("english", 1, ["news-field-invalid"]),
    ("en-US", 1, ["news-field-invalid"]),
])
def test_news_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str], language: str,
                     times: int, expected: list[str]) -> None:
    date = datetime.now(UTC).isoformat(timespec="seconds")
    news = NEWS.format(language=language, date=date) * times
    r = validate(tmp_path, capsys, f"<url><loc>{PAGE}</loc>{news}</url>")
    assert rules(r) == expected
    assert {i["severity"] for i in r["issues"]} <= {"error"}


def video(where: str = "<video:content_loc>https://example.com/v.mp4</video:content_loc>",
          extra: str = "") -> str:
    return ("<video:video><video:thumbnail_loc>https://example.com/t.jpg</video:thumbnail_loc>"
            "<video:title>A video</video:title><video:description>What it shows"
            f"</video:description>{where}{extra}</video:video>")


@pytest.mark.parametrize(("elements", "expected"), [
    (video(), []),
    (video(f"<video:content_loc>{PAGE}</video:content_loc>"), ["video-field-invalid"]),
    (video(f"<video:player_loc>{PAGE}</video:player_loc>"), ["video-field-invalid"]),
    (video(extra="<video:duration>0</video:duration>"), ["video-field-invalid"]),
    (video(extra="<video:duration>28801</video:duration>"), ["video-field-invalid"]),
    (video(extra="<video:duration>28800</video:duration>"), []),
    (video(extra="<video:rating>5.1</video:rating>"), ["video-field-invalid"]),
    (video(extra="<video:rating>0.0</video:rating>"), []),
    (video(extra="<video:tag>t</video:tag>" * 33), ["video-field-invalid"]),
    (video(extra="<video:tag>t</video:tag>" * 32), []),
], ids=["clean", "content-is-page", "player-is-page", "duration-0", "duration-28801",
        "duration-28800", "rating-5.1", "rating-0", "tags-33", "tags-32"])
def test_video_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str], elements: str,
                      expected: list[str]) -> None:
    assert rules(validate(tmp_path, capsys, f"<url><loc>{PAGE}</loc>{elements}</url>")) == expected


def check(capsys: pytest.CaptureFixture[str], url: str, db: str) -> dict[str, Any]:
    code = main(["check", url, "--database-url", db, "--json"])
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code in (0, 3), result
    return result


def test_an_index_child_outside_the_index_directory_is_out_of_scope(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like a child on another host: reported and not fetched, unless the target allows
    children beyond its index (allow_cross_host_children), which then reads it silently."""
    inside, outside = site.url("/sec/in.xml"), site.url("/other/out.xml")
    site.set("/sec/index.xml", index([inside, outside]))
    site.set("/sec/in.xml", urlset({site.url("/sec/1"): None}))
    site.set("/other/out.xml", urlset({site.url("/other/1"): None}))
    r = check(capsys, site.url("/sec/index.xml"), db)
    assert [(i["rule"], i["severity"], i["loc"]) for i in r["issues"]] == [
        ("index-child-out-of-scope", "warning", outside)]
    assert r["issues"][0]["message"] == (
        f"{outside} is outside the directory of its index; not fetched")
    assert r["urls"] == 1
    assert [d["url"] for d in r["documents"]] == [site.url("/sec/index.xml"), inside]
    assert not site.server.requests_to("/other/out.xml")
    config = tmp_path / "c.yaml"
    config.write_text(f"targets:\n  - name: t\n    url: {site.url('/sec/index.xml')}\n"
                      "    allow_cross_host_children: true\n")
    code = main(["check", "t", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert code == 0, r
    assert r["issues"] == []
    assert r["urls"] == 2
    assert site.server.requests_to("/other/out.xml")


def test_a_site_robots_txt_may_name_a_sitemap_on_another_host(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A site: target follows its Sitemap: lines to another host (a CDN)."""
    cdn = site.url("/cdn/sitemap.xml").replace("127.0.0.1", "localhost")
    site.set("/robots.txt", f"User-agent: *\nAllow: /\nSitemap: {cdn}\n".encode())
    site.set("/cdn/sitemap.xml", urlset({site.url("/p"): None}))
    config = tmp_path / "c.yaml"
    config.write_text(f"targets:\n  - name: shop\n    site: {site.url('/')}\n")
    code = main(["check", "shop", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert code in (0, 3), r
    assert [i for i in r["issues"] if i["rule"] == "index-child-out-of-scope"] == []
    assert r["urls"] == 1
    assert site.server.requests_to("/cdn/sitemap.xml")


def test_a_host_whose_robots_txt_lists_the_sitemap_is_in_scope(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cross-submission: a loc on another host is in scope when that host's robots.txt names
    this sitemap (or its index) in a Sitemap: line; a host that does not name it, or has no
    robots.txt, still gives loc-out-of-scope. A re-read of the changed sitemap says the
    same."""
    with TestServer() as listing, TestServer() as silent:
        sitemap = site.url("/sitemap.xml")
        listing.route("/robots.txt", Reply(200, f"User-agent: *\nSitemap: {sitemap}\n".encode()))
        silent.route("/robots.txt", Reply(200, b"User-agent: *\nDisallow:\n"))
        mine, cross, other = site.url("/p"), listing.url("/x"), silent.url("/y")
        dead = "http://127.0.0.1:9/z"  # nothing listens: its robots.txt cannot be read
        site.set("/sitemap.xml", urlset({mine: None, cross: None, other: None, dead: None}))
        r = check(capsys, sitemap, db)
        assert [(i["rule"], i["loc"]) for i in r["issues"]] == [
            ("loc-out-of-scope", other), ("loc-out-of-scope", dead)]
        assert r["urls"] == 4
        site.set("/sitemap.xml", urlset({mine: "2024-01-01", cross: "2024-01-01", other: None}))
        r = check(capsys, sitemap, db)
        assert [(i["rule"], i["loc"]) for i in r["issues"]] == [("loc-out-of-scope", other)]
        assert listing.requests_to("/robots.txt")


def test_one_page_in_two_children_of_an_index_is_a_duplicate(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A #fragment, or an escape in lower case, in a later child: the page an earlier child
    listed. The later child's loc is the duplicate, as within one document; a re-check that
    reads only the changed child (the other answers 304) says the same of a loc it adds."""
    first, second = site.url("/1.xml"), site.url("/2.xml")
    page, escaped = site.url("/a"), site.url("/caf%C3%A9")
    site.set("/index.xml", index([first, second]))
    site.set("/1.xml", urlset({page: None, escaped: None, site.url("/b"): None}))
    site.set("/2.xml", urlset({page + "#x": None, site.url("/caf%c3%a9"): None,
                               site.url("/c"): None}))
    r = check(capsys, site.url("/index.xml"), db)
    assert (r["urls"], r["duplicates"]) == (4, 2)
    assert [(i["rule"], i["severity"], i["loc"]) for i in r["issues"]] == [
        ("loc-duplicate", "warning", page + "#x"),
        ("loc-duplicate", "warning", site.url("/caf%c3%a9"))]
    site.set("/2.xml", urlset({page + "#x": None, site.url("/caf%c3%a9"): None,
                               site.url("/c"): None, site.url("/b#y"): None}))
    r = check(capsys, site.url("/index.xml"), db)
    assert (r["urls"], r["duplicates"]) == (4, 3)
    assert ("loc-duplicate", site.url("/b#y")) in [(i["rule"], i["loc"]) for i in r["issues"]]
