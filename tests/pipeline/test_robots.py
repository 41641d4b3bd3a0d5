"""The robots.txt of a target's hosts, watched with each check: the rules on their
own (``robots.judge``, pure), then through ``check --json`` against a real local site on
both databases, with a change, a 5xx, a disallowed sitemap and the conditional GET."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply
from site_fixture import Site, urlset

from monitor.cli.commands import main
from monitor.robots import judge as robots
from monitor.robots.matcher import RobotsRules

R = "https://e.test/robots.txt"
S = "https://e.test/sitemap.xml"


def rules_of(found: robots.Finding) -> list[str]:
    return sorted(i.rule for i in found.issues)


@pytest.mark.parametrize(("previous", "answer", "expected", "changed"), [
    # the first fetch is the baseline: stored, nothing changed
    (None, robots.Answer(200, "User-agent: *\nAllow: /\n"), [], False),
    (robots.Stored("User-agent: *\nAllow: /\n"), robots.Answer(200, "User-agent: *\nAllow: /\n"),
     [], False),
    (robots.Stored("User-agent: *\nAllow: /\n"), robots.Answer(200, "User-agent: *\n"),
     ["robots-changed"], True),
    # a robots.txt that went away (404) is a change to "none", and allows everything
    (robots.Stored("User-agent: *\nAllow: /\n"), robots.Answer(404), ["robots-changed"], True),
    (robots.Stored(None), robots.Answer(404), [], False),
    (robots.Stored("x"), robots.Answer(304, not_modified=True), [], False),
    # 5xx and no answer: unreachable, the stored version stands, no change
    (robots.Stored("User-agent: *\nAllow: /\n"), robots.Answer(503), ["robots-unreachable"],
     False),
    (None, robots.Answer(None, error="read timeout"), ["robots-unreachable"], False),
    # the sitemap itself disallowed to Googlebot
    (None, robots.Answer(200, "User-agent: *\nDisallow: /sitemap\n"), ["sitemap-disallowed"],
     False),
    (None, robots.Answer(200, "User-agent: Googlebot\nDisallow: /\n\nUser-agent: *\nAllow: /\n"),
     ["sitemap-disallowed"], False),
    (None, robots.Answer(200, "User-agent: Bingbot\nDisallow: /\n"), [], False),
    # an unreachable robots.txt keeps the stored rules in force
    (robots.Stored("User-agent: *\nDisallow: /\n"), robots.Answer(500),
     ["robots-unreachable", "sitemap-disallowed"], False),
])
def test_judge(previous: robots.Stored | None, answer: robots.Answer, expected: list[str],
               changed: bool) -> None:
    found = robots.judge(R, previous, answer, sitemaps=[S])
    assert rules_of(found) == expected
    assert found.changed is changed
    assert found.store is (changed or (previous is None and answer.error is None
                                       and (answer.status or 0) < 500))


def test_a_url_targets_sitemap_should_be_named_in_its_robots_txt() -> None:
    named = robots.Answer(200, f"User-agent: *\nAllow: /\nSitemap: {S}\n")
    other = robots.Answer(200, "User-agent: *\nAllow: /\nSitemap: https://e.test/other.xml\n")
    assert rules_of(robots.judge(R, None, named, sitemaps=[S], listed=[S])) == []
    assert rules_of(robots.judge(R, None, other, sitemaps=[S], listed=[S])) == [
        "robots-sitemap-missing"]
    # a host without robots.txt is not told to add a line to a file it does not have
    assert rules_of(robots.judge(R, None, robots.Answer(404), sitemaps=[S], listed=[S])) == []


@pytest.mark.parametrize(("text", "url", "allowed"), [
    # the longest match wins, whatever the order
    ("User-agent: *\nDisallow: /shop\nAllow: /shop/sitemap", "/shop/sitemap.xml", True),
    ("User-agent: *\nAllow: /shop/sitemap\nDisallow: /shop", "/shop/sitemap.xml", True),
    ("User-agent: *\nAllow: /shop\nDisallow: /shop/sitemap", "/shop/sitemap.xml", False),
    # * matches any run of characters, $ the end of the URL
    ("User-agent: *\nDisallow: /*.xml$", "/sitemap.xml", False),
    ("User-agent: *\nDisallow: /*.xml$", "/sitemap.xml.gz", True),
    ("User-agent: *\nDisallow: /s*map", "/sitemap.xml", False),
    # Allow wins a tie of equal length
    ("User-agent: *\nDisallow: /sitemap.xml\nAllow: /sitemap.xml", "/sitemap.xml", True),
    # the most specific group applies, not the * one
    ("User-agent: *\nDisallow: /\n\nUser-agent: googlebot\nAllow: /", "/sitemap.xml", True),
])
def test_googles_matching(text: str, url: str, allowed: bool) -> None:
    assert RobotsRules(text).allows("https://e.test" + url) is allowed


# ---- through the CLI, against a real site -------------------------------------------------

def check(capsys: pytest.CaptureFixture[str], cfg: str, db: str) -> dict[str, Any]:
    code = main(["check", "t", "--config", cfg, "--database-url", db, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    found: dict[str, Any] = json.loads(out)
    return found


def issue_rules(result: dict[str, Any]) -> list[str]:
    return sorted(i["rule"] for i in result["issues"] if i["rule"].startswith(("robots",
                                                                               "sitemap-")))


def test_robots_txt_is_watched_with_each_check(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", urlset({site.url("/a"): None}))
    site.set("/robots.txt", f"User-agent: *\nAllow: /\nSitemap: {sitemap}\n".encode())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, url: '{sitemap}'}}\n", encoding="utf-8")

    first = check(capsys, str(cfg), db)
    assert first["robots"] == [{"url": site.url("/robots.txt"), "outcome": "ok",
                                "http_status": 200, "changed": False}]
    assert issue_rules(first) == []
    again = check(capsys, str(cfg), db)  # conditional: the stored ETag gets a 304
    assert again["robots"][0]["outcome"] == "not_modified"
    assert site.server.requests_to("/robots.txt")[-1].headers.get("if-none-match")

    site.set("/robots.txt", b"User-agent: *\nDisallow: /sitemap\n")
    changed = check(capsys, str(cfg), db)
    assert changed["robots"][0]["changed"] is True
    assert changed["outcome"] == "ok"  # the sitemap did not change; its robots.txt did
    assert issue_rules(changed) == ["robots-changed", "robots-sitemap-missing",
                                    "sitemap-disallowed"]
    code = main(["changes", "t", "--kind", "robots", "--database-url", db, "--json"])
    listed = json.loads(capsys.readouterr().out)["changes"]
    assert code == 0
    assert [(c["kind"], c["rule"], c["loc"]) for c in listed] == [
        ("robots", "robots-changed", site.url("/robots.txt"))]
    assert listed[0]["before"]["text"] == f"User-agent: *\nAllow: /\nSitemap: {sitemap}\n"
    assert listed[0]["after"]["text"] == "User-agent: *\nDisallow: /sitemap\n"
    assert listed[0]["diff"]["text"].splitlines()[3:] == [
        " User-agent: *", "-Allow: /", f"-Sitemap: {sitemap}", "+Disallow: /sitemap"]
    # the table shows the lines that moved under the change, not two sizes to compare
    assert main(["changes", "t", "--kind", "robots", "--database-url", db]) == 0
    table = capsys.readouterr().out.splitlines()
    row = table[1].split()
    assert row[row.index("robots"):row.index("robots") + 2] == ["robots", site.url("/robots.txt")]
    assert table[1].endswith("robots.txt: 3 lines -> 2 lines, 1 added, 2 removed")
    assert table[2:] == [f"      --- {site.url('/robots.txt')} (before)",
                         f"      +++ {site.url('/robots.txt')} (after)",
                         "      @@ -1,3 +1,2 @@", "       User-agent: *", "      -Allow: /",
                         f"      -Sitemap: {sitemap}", "      +Disallow: /sitemap"]
    code = main(["diff", "t", "--from", "1", "--database-url", db, "--json"])
    assert json.loads(capsys.readouterr().out)["changes"] == []  # a diff is of URL sets

    # still disallowed at the next check: the issue stays, no second change
    still = check(capsys, str(cfg), db)
    assert issue_rules(still) == ["robots-sitemap-missing", "sitemap-disallowed"]

    site.status["/robots.txt"] = 503
    down = check(capsys, str(cfg), db)
    assert down["robots"][0]["outcome"] == "unreachable"
    # the stored rules stay in force while it cannot be read
    assert issue_rules(down) == ["robots-unreachable", "sitemap-disallowed"]
    del site.status["/robots.txt"]
    site.set("/robots.txt", f"User-agent: *\nAllow: /\nSitemap: {sitemap}\n".encode())
    back = check(capsys, str(cfg), db)
    assert issue_rules(back) == ["robots-changed"]
    code = main(["changes", "t", "--rule", "robots-changed", "--database-url", db, "--json"])
    assert len(json.loads(capsys.readouterr().out)["changes"]) == 2


@pytest.mark.parametrize(("text", "expected"), [
    # a group for "Google" is not Googlebot's: the * group allows the sitemap
    ("User-agent: Google\nDisallow: /\n\nUser-agent: *\nAllow: /\n", []),
    # "Googlebot/2.1" is Googlebot's group, and it disallows the sitemap
    ("User-agent: Googlebot/2.1\nDisallow: /\n\nUser-agent: *\nAllow: /\n",
     ["sitemap-disallowed"]),
    # an unknown line does not end Googlebot's group
    ("User-agent: Googlebot\nCrawl-delay: 5\nUser-agent: Bingbot\nDisallow: /\n",
     ["sitemap-disallowed"]),
])
def test_the_sitemap_is_judged_for_googlebot_as_google_reads_it(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
    expected: list[str],
) -> None:
    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", urlset({site.url("/a"): None}))
    site.set("/robots.txt", (text + f"Sitemap: {sitemap}\n").encode())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, url: '{sitemap}'}}\n", encoding="utf-8")
    assert issue_rules(check(capsys, str(cfg), db)) == expected


def test_a_robots_change_raises_one_alert_with_both_texts(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``when: robots_changed`` is an event: one notification for the check that saw the
    change, with the text before and after; none for the baseline or an unchanged check."""
    from sqlalchemy import create_engine, select

    from monitor.store.schema import notifications

    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", urlset({site.url("/a"): None}))
    site.set("/robots.txt", b"User-agent: *\nAllow: /\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"targets:\n  - {{name: t, url: '{sitemap}'}}\n"
        "alerts:\n"
        f"  channels:\n    - {{name: hook, type: webhook, url: '{site.url('/hook')}'}}\n"
        "  rules:\n    - {name: robots, when: robots_changed, channels: [hook]}\n",
        encoding="utf-8")

    def sent() -> list[dict[str, Any]]:
        engine = create_engine(db)
        with engine.connect() as conn:
            rows = conn.execute(select(notifications.c.rule, notifications.c.payload)).all()
        engine.dispose()
        return [{"rule": rule, **json.loads(payload)} for rule, payload in rows]

    check(capsys, str(cfg), db)
    check(capsys, str(cfg), db)
    assert sent() == []
    site.set("/robots.txt", b"User-agent: *\nDisallow: /\n")
    check(capsys, str(cfg), db)
    check(capsys, str(cfg), db)
    [alert] = sent()
    assert (alert["rule"], alert["when"], alert["event"]) == ("robots", "robots_changed", True)
    diff = (f"--- {site.url('/robots.txt')} (before)\n+++ {site.url('/robots.txt')} (after)\n"
            "@@ -1,2 +1,2 @@\n User-agent: *\n-Allow: /\n+Disallow: /")
    assert alert["robots"] == [{"url": site.url("/robots.txt"), "http_status": 200,
                                "before": "User-agent: *\nAllow: /\n",
                                "after": "User-agent: *\nDisallow: /\n", "truncated": False,
                                "diff": diff, "added": 1, "removed": 1,
                                "diff_truncated": False}]
    assert alert["examples"] == {}  # the sitemap's URLs are another matter
    assert "robots.txt changed" in alert["summary"]


def news_and_images(site: Site) -> bytes:
    """A sitemap of a news article, a page with an image in /img/ and one in /pics/."""
    today = datetime.now(UTC).date().isoformat()
    news = ("<news:news><news:publication><news:name>N</news:name>"
            "<news:language>en</news:language></news:publication>"
            f"<news:publication_date>{today}</news:publication_date>"
            "<news:title>t</news:title></news:news>")
    rows = [f"<url><loc>{site.url('/drafts/a')}</loc>{news}</url>",
            f"<url><loc>{site.url('/b')}</loc><image:image><image:loc>{site.url('/img/b.png')}"
            "</image:loc></image:image></url>",
            f"<url><loc>{site.url('/c')}</loc><image:image><image:loc>{site.url('/pics/c.png')}"
            "</image:loc></image:image></url>"]
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset '
            'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9" '
            'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
            + "".join(rows) + "</urlset>\n").encode()


def crawl_issues(result: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((i["rule"], i["loc"]) for i in result["issues"]
                  if i["rule"] in ("news-disallowed", "image-disallowed"))


def test_news_and_images_are_judged_for_googles_own_crawlers(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", news_and_images(site))
    # Googlebot-News and Googlebot-Image have groups: theirs decide, not Googlebot's.
    site.set("/robots.txt", b"User-agent: Googlebot\nDisallow: /img/\n\n"
                            b"User-agent: Googlebot-News\nDisallow: /drafts/\n\n"
                            b"User-agent: Googlebot-Image\nDisallow: /pics/\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, url: '{sitemap}'}}\n", encoding="utf-8")
    first = check(capsys, str(cfg), db)
    assert crawl_issues(first) == [("image-disallowed", site.url("/c")),
                                   ("news-disallowed", site.url("/drafts/a"))]

    # Without their groups, Googlebot's decides; the sitemap did not change (a 304), the
    # entries are judged again all the same, and the stored verdicts follow.
    site.set("/robots.txt", b"User-agent: Googlebot\nDisallow: /img/\nDisallow: /drafts/\n")
    second = check(capsys, str(cfg), db)
    assert second["documents"][0]["outcome"] == "not_modified"
    assert crawl_issues(second) == [("image-disallowed", site.url("/b")),
                                    ("news-disallowed", site.url("/drafts/a"))]
    code = main(["issues", "t", "--rule", "image-disallowed,news-disallowed", "--database-url",
                 db, "--format", "json"])
    listed = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sorted((i["rule"], i["loc"]) for i in listed["issues"]) == crawl_issues(second)

    # Allowed again: the issues resolve, and stay resolved.
    site.set("/robots.txt", b"User-agent: *\nAllow: /\n")
    assert crawl_issues(check(capsys, str(cfg), db)) == []
    assert crawl_issues(check(capsys, str(cfg), db)) == []


def test_the_url_checks_judge_pages_for_googlebots_own_group(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # "User-agent: Google" is not Googlebot's group; "Googlebot/2.1" is, and its Disallow holds.
    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", urlset({site.url("/a"): None, site.url("/private/b"): None}))
    for path in ("/a", "/private/b"):
        site.server.route(path, Reply(200, b"<!doctype html><html><head><title>p</title>"
                                           b"</head><body>" + b"x" * 2000 + b"</body></html>",
                                      headers={"Content-Type": "text/html"}))
    site.set("/robots.txt", b"User-agent: Google\nDisallow: /\n\nUser-agent: Googlebot/2.1\n"
                            b"Disallow: /private/\n\nUser-agent: *\nAllow: /\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("defaults:\n  url_checks: {enabled: true, rate: 1000}\n"
                   f"targets:\n  - {{name: t, url: '{sitemap}'}}\n", encoding="utf-8")
    code = main(["check", "t", "--config", str(cfg), "--database-url", db, "--urls", "--json"])
    found = json.loads(capsys.readouterr().out)
    assert code == 0
    assert "sitemap-disallowed" not in issue_rules(found)
    code = main(["urls", "t", "--status", "disallowed", "--database-url", db, "--format",
                 "json"])
    listed = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [u["loc"] for u in listed["urls"]] == [site.url("/private/b")]
    assert site.server.requests_to("/a")  # checked, not disallowed
    assert not site.server.requests_to("/private/b")
