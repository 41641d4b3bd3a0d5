"""The extension rules through `check --json` against a real HTTP server on 127.0.0.1,
each backend storing the snapshot: every rule fires on its fixture (tests/data/extensions), none
on the near misses, and hreflang-not-reciprocal is a verdict of the whole target (an index's
children), which lasts while nothing changes and goes when the alternate answers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, index

from monitor.cli.commands import main
from monitor.read import extensions

DATA = Path(__file__).parent.parent / "data" / "extensions"
IMAGE = "<image:image><image:loc>http://HOST/i.jpg</image:loc></image:image>"
NEW_RULES = {*extensions.ENTRY_RULES, "news-too-many", "hreflang-not-reciprocal"}
XHTML = 'xmlns:xhtml="http://www.w3.org/1999/xhtml"'


def fixture(name: str, host: str) -> bytes:
    """A fixture file with its placeholders filled in for this server and this moment."""
    text = (DATA / name).read_text()
    for placeholder, value in (
        ("MANY_IMAGES", IMAGE * 1001), ("THOUSAND_IMAGES", IMAGE * 1000),
        ("LONG_DESCRIPTION", "d" * 2049), ("SHORT_DESCRIPTION", "d" * 2048),
        ("NOW", (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")),
        ("HOST", host),
    ):
        text = text.replace(placeholder, value)
    return text.encode()


def news_sitemap(host: str, n: int) -> bytes:
    date = datetime.now(UTC).isoformat(timespec="seconds")
    rows = "".join(
        f"<url><loc>http://{host}/news/{i}</loc><news:news><news:publication><news:name>D"
        f"</news:name><news:language>en</news:language></news:publication>"
        f"<news:publication_date>{date}</news:publication_date><news:title>T{i}</news:title>"
        "</news:news></url>" for i in range(n))
    return ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            f'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">{rows}</urlset>'
            ).encode()


def alternates(host: str, *entries: tuple[str, list[str]]) -> bytes:
    """A urlset: (path, [paths it names as alternates]), each alternate in its own language."""
    rows = "".join(
        f"<url><loc>http://{host}/{path}</loc>" + "".join(
            f'<xhtml:link rel="alternate" hreflang="{lang}" href="http://{host}/{other}"/>'
            for lang, other in zip(("en", "de", "fr"), names, strict=False)) + "</url>"
        for path, names in entries)
    return ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            f"{XHTML}>{rows}</urlset>").encode()


def check(capsys: pytest.CaptureFixture[str], url: str, db: str) -> dict[str, Any]:
    code = main(["check", url, "--database-url", db, "--json"])
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code in (0, 3), result
    return result


def listed(capsys: pytest.CaptureFixture[str], db: str, root: str) -> list[dict[str, Any]]:
    """The target's current issues as the `issues` listing gives them."""
    assert main(["issues", root, "--database-url", db, "--format", "json"]) == 0
    found: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["issues"]
    return found


def new_rules(issues: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(rule, the path of its loc) of the rules, sorted."""
    return sorted((i["rule"], i["loc"] and i["loc"].split("/", 3)[3])
                  for i in issues if i["rule"] in NEW_RULES)


def test_check_json_shows_each_extension_rule(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host = site.url("/").split("/")[2]
    site.set("/index.xml", index([site.url("/rules.xml"), site.url("/news.xml")]))
    site.set("/rules.xml", fixture("rules.xml", host))
    site.set("/news.xml", news_sitemap(host, 1001))
    root = site.url("/index.xml")
    r = check(capsys, root, db)
    # Each <url> of rules.xml is named after the rule it hits; news.xml has one news too many.
    per_entry = [(rule, rule) for rule in [*extensions.ENTRY_RULES, "hreflang-not-reciprocal"]]
    assert new_rules(r["issues"]) == sorted([*per_entry, ("news-too-many", None)])
    severity = {i["rule"]: i["severity"] for i in r["issues"]}
    assert severity["news-too-many"] == severity["image-too-many"] == "error"
    assert severity["hreflang-not-reciprocal"] == severity["news-too-old"] == "warning"
    assert (r["urls"], r["invalid"]) == (17 + 1001, 0)  # none makes an entry invalid
    assert new_rules(listed(capsys, db, root)) == new_rules(r["issues"])

    # The near misses: no extension rule fires, the URLs stay.
    site.set("/rules.xml", fixture("clean.xml", host))
    site.set("/news.xml", news_sitemap(host, 1000))
    r = check(capsys, root, db)
    assert new_rules(r["issues"]) == []
    assert new_rules(listed(capsys, db, root)) == []


def test_validate_file_judges_the_file_as_a_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rules.xml"
    path.write_bytes(fixture("rules.xml", "example.com"))
    assert main(["validate", str(path), "--json"]) == 3  # errors among them
    r = json.loads(capsys.readouterr().out)
    assert {rule for rule, _ in new_rules(r["issues"])} == NEW_RULES - {"news-too-many"}
    path.write_bytes(news_sitemap("example.com", 1001))
    assert main(["validate", str(path), "--json"]) == 3
    assert new_rules(json.loads(capsys.readouterr().out)["issues"]) == [("news-too-many", None)]


def test_reciprocity_across_the_children_of_an_index(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A in child 1 names B in child 2: one issue on A while B does not name A, none once it
    does; a child that did not change keeps its verdict, or loses it, as the other changes."""
    host = site.url("/").split("/")[2]
    site.set("/index.xml", index([site.url("/one.xml"), site.url("/two.xml")]))
    site.set("/one.xml", alternates(host, ("a", ["a", "b"]), ("c", ["c", "elsewhere"])))
    silent = alternates(host, ("b", ["b"]))
    answers = alternates(host, ("b", ["b", "a"]))
    site.set("/two.xml", silent)
    root = site.url("/index.xml")
    unanswered = [("hreflang-not-reciprocal", "a")]

    assert new_rules(check(capsys, root, db)["issues"]) == unanswered
    assert new_rules(listed(capsys, db, root)) == unanswered
    r = check(capsys, root, db)  # nothing changed (304s): the verdict stands
    assert r["outcome"] == "unchanged"
    assert new_rules(listed(capsys, db, root)) == unanswered

    site.set("/two.xml", answers)  # B answers; one.xml is not read again (304)
    r = check(capsys, root, db)
    assert [d["outcome"] for d in r["documents"]] == ["not_modified", "not_modified", "ok"]
    assert new_rules(r["issues"]) == []
    assert new_rules(listed(capsys, db, root)) == []
    assert r["changed"] == 1  # B's alternates; A's verdict, a warning, is no change

    site.set("/two.xml", silent)  # and stops answering
    r = check(capsys, root, db)
    assert new_rules(r["issues"]) == unanswered
    assert new_rules(listed(capsys, db, root)) == unanswered
    assert r["changed"] == 1
    # The first snapshot's issues are still its own, the third's too.
    assert main(["issues", root, "--database-url", db, "--format", "json", "--at", "3"]) == 0
    assert new_rules(json.loads(capsys.readouterr().out)["issues"]) == []
