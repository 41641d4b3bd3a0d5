"""`sitemap-monitor validate`: lint a file or URL, store nothing, exit by severity."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, index, urlset

from monitor.cli.commands import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main(["validate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_valid_gzipped_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.xml.gz"
    path.write_bytes(gzip.compress(urlset({"https://e.test/a": "2024-01-01"})))
    code, r = run(capsys, str(path))
    assert code == 0
    assert (r["outcome"], r["urls"], r["invalid"]) == ("ok", 1, 0)
    assert "changes" not in r


def test_file_with_errors_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.xml"
    path.write_bytes(urlset({"https://e.test/a": "not a date", "/relative": None}))
    code, r = run(capsys, str(path))
    assert code == 3
    assert {i["rule"] for i in r["issues"]} == {"lastmod-invalid", "loc-not-absolute"}
    assert (r["urls"], r["invalid"]) == (1, 1)  # a bad date is an error of the field, not the URL


def test_broken_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.xml"
    path.write_bytes(b'<!DOCTYPE x [<!ENTITY a "b">]><urlset/>')
    code, r = run(capsys, str(path))
    assert code == 1
    assert r["error"]["kind"] == "xml-doctype"


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.xml")]) == 2
    assert "nope.xml" in capsys.readouterr().err


def test_url_with_index_stores_nothing(site: Site, tmp_path: Path, monkeypatch: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    site.set("/i.xml", index([site.url("/a.xml")]))
    site.set("/a.xml", urlset({site.url("/p1"): "2024-01-01", site.url("/p2"): None}))
    code, r = run(capsys, site.url("/i.xml"))
    assert code == 0
    assert r["urls"] == 2
    assert [d["outcome"] for d in r["documents"]] == ["ok", "ok"]
    assert list(tmp_path.iterdir()) == [], "validate must not create a database"


def _news_with_an_error(host: str) -> bytes:
    """A urlset of 1,001 news:news tags (news-too-many) and one relative loc (an entry's issue)."""
    date = datetime.now(UTC).isoformat(timespec="seconds")
    rows = "".join(
        f"<url><loc>http://{host}/news/{i}</loc><news:news><news:publication><news:name>D"
        f"</news:name><news:language>en</news:language></news:publication>"
        f"<news:publication_date>{date}</news:publication_date><news:title>T{i}</news:title>"
        "</news:news></url>" for i in range(1001))
    return ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">'
            f"{rows}<url><loc>/relative</loc></url></urlset>").encode()


# Documents on which ``validate FILE`` once said something else than ``check``: it composed the
# parse, the validation and the extension rules itself, where the check reads the digest.
DISAGREED = {
    # An index's <sitemap> without a <loc>: counted as an invalid URL by validate alone.
    "index-child-without-loc": lambda host: index(["", "/relative.xml"]),
    # news-too-many is the document's own issue: listed before its entries' issues.
    "news-too-many-and-an-entry-issue": _news_with_an_error,
    # A body that cannot be inflated is no document of any kind.
    "truncated-gzip": lambda host: gzip.compress(urlset(
        {f"http://{host}/{i}": None for i in range(100)}))[:-40],
}


def _said(result: dict[str, Any], host: str) -> tuple[Any, ...]:
    """What a check or a validate says of its one document, wherever the document was."""
    documents = [(d["outcome"], d["kind"], d["urls"], d["invalid"], d["duplicates"])
                 for d in result["documents"]][:1]
    issues = [(i["rule"], i["severity"], i["loc"] and i["loc"].replace(host, "HOST"))
              for i in result["issues"]]
    return (result["outcome"], result["urls"], result["invalid"], result["duplicates"],
            documents, issues, result["error"] and result["error"]["kind"])


@pytest.mark.parametrize("name", sorted(DISAGREED))
def test_validate_file_says_what_check_says(name: str, site: Site, db: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    host = site.url("/").split("/")[2]
    body = DISAGREED[name](host)
    site.set("/s.xml.gz", body)
    main(["check", site.url("/s.xml.gz"), "--database-url", db, "--json"])
    checked = json.loads(capsys.readouterr().out)
    path = tmp_path / "s.xml.gz"
    path.write_bytes(body)
    _, validated = run(capsys, str(path))
    assert _said(validated, host) == _said(checked, host)


def test_an_index_entrys_lastmod_is_validated(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "index.xml"
    path.write_bytes(index(["https://e.test/a.xml"]).replace(
        b"</loc></sitemap>", b"</loc><lastmod>yesterday</lastmod></sitemap>"))
    code, r = run(capsys, str(path))
    assert code == 3
    assert [(i["rule"], i["loc"]) for i in r["issues"]] == [
        ("lastmod-invalid", "https://e.test/a.xml")]
