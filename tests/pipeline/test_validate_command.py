"""`sitemap-monitor validate`: lint a file or URL, store nothing, exit by severity."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, index, urlset

from monitor.cli import main


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
