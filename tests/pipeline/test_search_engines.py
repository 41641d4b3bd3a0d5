"""Sitemaps read as search engines read them: each case through
the CLI, against a real HTTP server on 127.0.0.1 or a real file, with the database of each
backend where the check stores a snapshot."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, gzip_bytes
from peak import run_cli
from site_fixture import NS, Site, index, urlset

from monitor.cli.commands import main


def check(capsys: pytest.CaptureFixture[str], url: str, db: str, *extra: str) -> tuple[int, Any]:
    code = main(["check", url, "--database-url", db, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, Any]:
    code = main(["validate", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def issues(result: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(i["rule"], i["severity"], i["loc"]) for i in result["issues"]]


def document(*urls: str) -> bytes:
    rows = "".join(f"<url>{u}</url>\n" for u in urls)
    return f'<?xml version="1.0"?>\n<urlset xmlns="{NS}">\n{rows}</urlset>\n'.encode()


def test_a_cms_that_writes_empty_fields_loses_no_url(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,000 URLs, each with an empty <lastmod/>, <changefreq></changefreq> and <priority/>:
    all are URLs, none has an issue, and a first check adds them all."""
    base = site.url("/")  # the site's own URLs: in scope
    body = document(*(f"<loc>{base}p/{i}</loc><lastmod/><changefreq></changefreq><priority> "
                      "</priority>" for i in range(1000)))
    site.set("/sitemap.xml", body)
    code, r = check(capsys, site.url("/sitemap.xml"), db)
    assert code == 0
    assert (r["urls"], r["invalid"], r["duplicates"], r["added"]) == (1000, 0, 0, 1000)
    assert r["issues"] == []
    assert {c["kind"] for c in r["changes"]} == {"added"}
    assert r["changes"][0]["after"]["lastmod"] is None

    # The CMS starts writing dates: a change of each URL's lastmod, never an invalid one.
    site.set("/sitemap.xml", body.replace(b"<lastmod/>", b"<lastmod>2024-05-01</lastmod>"))
    code, r = check(capsys, site.url("/sitemap.xml"), db)
    assert (r["urls"], r["invalid"], r["added"], r["changed"]) == (1000, 0, 0, 1000)


def test_a_bad_field_is_reported_and_leaves_the_url_crawlable(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = site.url("/")  # the site's own URLs: in scope
    site.set("/sitemap.xml", document(
        f"<loc>{base}clean</loc><lastmod>2024-01-01</lastmod>",
        f"<loc>{base}priority</loc><priority>1.1</priority>",
        f"<loc>{base}changefreq</loc><changefreq>when we feel like it</changefreq>",
        f"<loc>{base}lastmod</loc><lastmod>last tuesday</lastmod>",
        "<loc>/relative</loc>",
        f"<loc>{base}clean</loc>",
    ))
    code, r = check(capsys, site.url("/sitemap.xml"), db)
    assert code == 0
    assert (r["urls"], r["invalid"], r["duplicates"], r["added"]) == (4, 1, 1, 4)
    assert issues(r) == [
        ("priority-invalid", "error", base + "priority"),
        ("changefreq-invalid", "error", base + "changefreq"),
        ("lastmod-invalid", "error", base + "lastmod"),
        ("loc-not-absolute", "error", "/relative"),
        ("loc-duplicate", "warning", base + "clean"),
    ]
    assert main(["history", site.url("/sitemap.xml"), "--database-url", db, "--json"]) == 0
    [snapshot] = json.loads(capsys.readouterr().out)["snapshots"]
    assert (snapshot["urls"], snapshot["invalid"], snapshot["duplicates"]) == (4, 1, 1)
    assert sorted((c["kind"], c["loc"]) for c in r["changes"])[-1] == ("invalid", "/relative")
    assert sum(c["kind"] == "added" for c in r["changes"]) == 4


@pytest.mark.parametrize("locs", [2, 3])
def test_every_loc_past_the_first_is_named(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], locs: int
) -> None:
    base = site.url("/")  # the site's own URLs: in scope
    extra = [f"{base}extra{j}" for j in range(1, locs)]
    locs_of_one = f"<loc>{base}first</loc>" + "".join(f"<loc>{e}</loc>" for e in extra)
    site.set("/a.xml", document(locs_of_one, f"<loc>{base}other</loc>"))
    children = [site.url("/a.xml")] + [site.url(f"/not-read{j}.xml") for j in range(1, locs)]
    rows = "".join(f"<loc>{child}</loc>" for child in children)
    site.set("/index.xml", f'<?xml version="1.0"?><sitemapindex xmlns="{NS}"><sitemap>{rows}'
                           "</sitemap></sitemapindex>".encode())
    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    assert (r["urls"], r["invalid"]) == (2, 0)
    found = [i for i in r["issues"] if i["rule"] == "loc-multiple"]
    assert [(i["loc"], i["document"]) for i in found] == [
        (site.url("/a.xml"), site.url("/index.xml")), (base + "first", site.url("/a.xml"))]
    for issue, names in zip(found, (children[1:], extra), strict=True):
        assert issue["severity"] == "error"
        assert f"{locs} <loc> elements" in issue["message"]
        assert all(name in issue["message"] for name in names), issue["message"]
    assert not any(site.server.requests_to(f"/not-read{j}.xml") for j in range(1, locs))


def test_an_html_page_is_named_an_html_page(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (b"<!DOCTYPE html>\n<html lang=\"en\"><head><title>Page not found</title></head>"
            b"<body><h1>404</h1></body></html>\n")
    site.server.route("/sitemap.xml", Reply(200, page, {"Content-Type": "text/html"}))
    code, r = check(capsys, site.url("/sitemap.xml"), db)
    assert code == 1
    assert r["error"]["kind"] == "root-unknown"
    assert "HTML page" in r["error"]["message"]
    assert [(i["rule"], i["document"]) for i in r["issues"]] == [
        ("root-unknown", site.url("/sitemap.xml"))]


def _gzip_of_zeros(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join(compressor.compress(block) for _ in range(size >> 20)) + compressor.flush()


@pytest.mark.parametrize(("body", "rule"), [
    pytest.param(lambda: gzip_bytes(urlset({"https://example.test/a": None}))[:-30], "gzip-invalid",
                 id="truncated-gzip"),
    pytest.param(lambda: _gzip_of_zeros(64 << 20), "size-too-large", id="bomb"),
])
def test_a_document_that_cannot_be_read_is_an_issue_of_its_rule(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], body: Any, rule: str
) -> None:
    """As the target's own sitemap and as a child of an index: an issue row with the rule id,
    which the snapshot's counts (and so sitemap_monitor_issues{rule}) see."""
    base = site.url("/")  # the site's own URLs: in scope
    site.server.route("/broken.xml.gz", Reply(200, body()))
    site.set("/good.xml", urlset({base + "g": None}))
    site.set("/index.xml", index([site.url("/good.xml"), site.url("/broken.xml.gz")]))
    code, r = check(capsys, site.url("/broken.xml.gz"), db)
    assert code == 1
    assert r["error"]["kind"] == rule
    assert [i["rule"] for i in r["issues"]] == [rule]

    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    assert r["urls"] == 1
    assert sorted(i["rule"] for i in r["issues"]) == sorted([rule, "child-fetch-failed"])
    assert main(["history", site.url("/index.xml"), "--database-url", db, "--json"]) == 0
    [snapshot] = json.loads(capsys.readouterr().out)["snapshots"]
    assert snapshot["issues"] == {rule: 1, "child-fetch-failed": 1}


def test_a_relative_index_child_is_loc_not_absolute(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = site.url("/")  # the site's own URLs: in scope
    body = index(["/a.xml", site.url("/b.xml")])
    site.set("/index.xml", body)
    site.set("/a.xml", urlset({base + "a": None}))
    site.set("/b.xml", urlset({base + "b": None}))
    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [("loc-not-absolute", "/a.xml")]
    assert not site.server.requests_to("/a.xml"), "a relative child is never resolved"

    path = tmp_path / "index.xml"
    path.write_bytes(body)
    code, r = validate(capsys, path)
    assert code == 3  # an error-level issue
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [("loc-not-absolute", "/a.xml")]


def test_validate_of_a_gzip_bomb_file_stays_bounded(tmp_path: Path) -> None:
    """A 1 GiB bomb (about 1 MB on disk): cut at max_bytes as it inflates, under 200 MB."""
    path = tmp_path / "bomb.xml.gz"
    with path.open("wb") as file:
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = bytes(1 << 20)
        for _ in range(1024):
            file.write(compressor.compress(block))
        file.write(compressor.flush())
    assert path.stat().st_size < 2 << 20
    started = time.monotonic()
    proc, peak_mib = run_cli("validate", str(path), "--json")
    elapsed = time.monotonic() - started
    r = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert r["error"]["kind"] == "size-too-large"
    assert [i["rule"] for i in r["issues"]] == ["size-too-large"]
    assert peak_mib < 200, f"peak RSS {peak_mib:.0f} MiB"
    assert elapsed < 30


def test_validate_of_a_truncated_gzip_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.xml.gz"
    body = urlset({f"https://example.test/{i}": None for i in range(100)})
    path.write_bytes(gzip.compress(body)[:-40])
    code, r = validate(capsys, path)
    assert code == 1
    assert r["error"]["kind"] == "gzip-invalid"
    assert [i["rule"] for i in r["issues"]] == ["gzip-invalid"]


def test_robots_site_map_typo_case_and_spaces(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = site.url("/")  # the site's own URLs: in scope
    site.set("/a.xml", urlset({base + "a": None}))
    site.set("/b.xml", urlset({base + "b": None}))
    site.set("/c.xml", urlset({base + "c": None}))
    site.server.route("/robots.txt", Reply(200, (
        "User-agent: *\nDisallow: /private\n"
        f"Site-map: {site.url('/a.xml')}\n"
        f"   SITEMAP :   {site.url('/b.xml')}   # the second\n"
        f"sitemap {site.url('/c.xml')}\n"
    ).encode()))
    config = tmp_path / "monitor.yaml"
    config.write_text(f"targets:\n  - name: shop\n    site: {base}\n")
    code = main(["check", "shop", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert code == 0
    assert r["urls"] == 3
    assert [d["url"].rsplit("/", 1)[1] for d in r["documents"]] == [
        "robots.txt", "a.xml", "b.xml", "c.xml"]


def test_robots_of_100000_sitemap_lines_is_capped(
    site: Site, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = site.url("/")  # the site's own URLs: in scope
    for i in range(20):
        site.set(f"/s{i}.xml", urlset({f"{base}{i}": None}))
    lines = "".join(f"Sitemap: {site.url(f'/s{i}.xml')}\n" for i in range(100_000))
    site.server.route("/robots.txt", Reply(200, lines.encode()))
    config = tmp_path / "monitor.yaml"
    config.write_text(f"targets:\n  - name: many\n    site: {base}\n    max_children: 20\n")
    # CPU time, not wall time: the bound is about the work (no sitemap past the cap is
    # fetched or resolved), which a busy machine's scheduling must not decide.
    started = time.process_time()
    code = main(["check", "many", "--config", str(config), "--database-url",
                 f"sqlite:///{tmp_path}/m.db", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert time.process_time() - started < 10
    assert code == 0
    assert r["urls"] == 20
    assert len(r["documents"]) == 21
    [cap] = [i for i in r["issues"] if i["rule"] == "index-too-many"]
    assert "more than 20 sitemaps" in cap["message"]
    assert len(site.server.requests) == 21


def test_an_attribute_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """One element of a million attributes (12 MB): lxml held it whole, 418 MB at peak; the
    parser gives up past 1 MiB without the end of an item."""
    attributes = b"".join(b' a%d="xy"' % i for i in range(1_000_000))
    path = tmp_path / "attributes.xml"
    path.write_bytes(document("<loc>https://example.test/a</loc>").replace(
        b"</urlset>", b"<url><loc" + attributes + b">https://example.test/b</loc></url></urlset>"))
    proc, peak_mib = run_cli("validate", str(path), "--json")
    r = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert r["error"]["kind"] == "size-too-large"
    assert peak_mib < 120, f"peak RSS {peak_mib:.0f} MiB"
