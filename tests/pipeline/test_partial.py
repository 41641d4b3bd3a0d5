"""A check in which a child sitemap fails while the others are read is ``partial``, never a
green ``ok``: through the command line against a real site, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from site_fixture import Site, index, urlset

from monitor.cli.commands import main

U = "https://shop.example/p/"


def check(capsys: pytest.CaptureFixture[str], root: str, db: str, *args: str,
          ) -> tuple[int, dict[str, Any]]:
    code = main(["check", root, "--database-url", db, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_a_failing_child_makes_a_partial_check(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    children = ["/a.xml", "/b.xml", "/c.xml"]
    for n, path in enumerate(children):
        site.set(path, urlset({f"{U}{n}": None}))
    site.set("/index.xml", index([site.url(p) for p in children]))
    root = site.url("/index.xml")
    code, first = check(capsys, root, db)
    assert (code, first["outcome"]) == (0, "ok")

    site.status["/b.xml"] = 500
    code, r = check(capsys, root, db)
    # completed (exit 0), but not ok: b.xml went unread and its URL stays current
    assert (code, r["outcome"], r["urls"]) == (0, "partial", 3)
    assert [d["url"] for d in r["documents"] if d["outcome"] == "failed"] == [
        site.url("/b.xml")]

    # a CI pipeline can stop on it, by the outcome or by the rule id
    for kind in ("partial", "child-fetch-failed"):
        code, _ = check(capsys, root, db, "--fail-on", kind)
        assert code == 3, kind
    code, _ = check(capsys, root, db, "--fail-on", "removed,lastmod-invalid,robots,health")
    assert code == 0

    # the text output names the document and its error
    assert main(["check", root, "--database-url", db]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{root}: partial ")
    assert f"{site.url('/b.xml')} (HTTP 500: HTTP 500" in out

    # the snapshot history names it too, in text and JSON
    assert main(["history", root, "--database-url", db, "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert " partial " in lines[1]
    assert f"{site.url('/b.xml')} (HTTP 500)" in lines[1]

    del site.status["/b.xml"]
    code, back = check(capsys, root, db)
    assert (code, back["outcome"]) == (0, "unchanged")  # b.xml read again, as it was


def test_fail_on_names_what_it_takes(site: Site, db: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    site.set("/s.xml", urlset({f"{U}1": None}))
    root = site.url("/s.xml")
    assert main(["check", root, "--database-url", db, "--fail-on", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "--fail-on: unknown kind 'nonsense'" in err
    assert main(["check", root, "--database-url", db, "--fail-on", "url-not-found"]) == 2
    assert "add --urls" in capsys.readouterr().err
