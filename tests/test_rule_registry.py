"""The rule registry: every id written once, typed, with its severity and its docs page."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

from monitor.check import tally, targetwide
from monitor.core import model, rules
from monitor.core.model import Change, DocumentResult, EntryState, Issue
from monitor.core.rules import RuleId
from monitor.observe import log
from monitor.read import digest, extensions, validate
from monitor.read.parse import SITEMAP_NS
from monitor.robots import agents, judge
from monitor.robots.matcher import RobotsRules
from monitor.urlhealth import verdict

DOCS = Path(__file__).resolve().parent.parent / "docs"
URL = "https://example.com/sitemap.xml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# A row of a docs table that names a rule: its id, then its severity (docs/rules.md), or its
# state, id and severity (docs/url-health.md).
_RULE_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (error|warning|info) \|", re.MULTILINE)
_STATE_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| `([a-z0-9-]+)` \| \**(error|warning|info)\** \|",
                        re.MULTILINE)


def test_the_member_is_its_id_and_carries_its_row() -> None:
    """A member is a str equal to its id: what JSON, the database, metrics and globs see."""
    rule = RuleId.LASTMOD_INVALID
    assert rule == "lastmod-invalid"
    assert isinstance(rule, str)
    assert (rule.severity, rule.page) == ("error", "rules.md")
    assert rule.summary
    assert rules.TABLE["lastmod-invalid"] is rule
    assert list(rules.TABLE) == [member.value for member in RuleId]
    assert set(rules.TABLE) == rules.IDS
    assert all(member.name == member.value.upper().replace("-", "_") for member in RuleId)


def test_every_rule_is_explained_on_its_docs_page() -> None:
    missing = [f"{rule} ({rule.page})" for rule in RuleId
               if f"`{rule}`" not in (DOCS / rule.page).read_text()]
    assert missing == []


def test_the_rules_table_of_the_docs_is_the_registry() -> None:
    """docs/rules.md lists every rule of its page once, with the registry's severity."""
    listed = _RULE_ROW.findall((DOCS / "rules.md").read_text())
    assert len(listed) == len(dict(listed))
    assert dict(listed) == {rule.value: rule.severity for rule in RuleId
                            if rule.page == "rules.md"}


def test_the_url_states_of_the_docs_are_the_registry_s() -> None:
    """docs/url-health.md's table of states names each state's rule with its severity: they
    are model.URL_STATES and the registry's (a loop is told in the redirect row's text)."""
    rows = [(state, rules.rule_id(rule), severity) for state, rule, severity
            in _STATE_ROW.findall((DOCS / "url-health.md").read_text())]
    assert [rule for _, rule, severity in rows if rule.severity != severity] == []
    assert {rule for _, rule, _ in rows} == set(model.URL_RULES) - {model.URL_REDIRECT_LOOP}
    own = {state: (rule, rule.severity) for state, rule, _ in rows
           if rule not in (model.URL_CANONICAL_BROKEN, *model.URL_NOTES)}
    assert own == {state: rule for state, rule in model.URL_STATES.items() if rule is not None}
    assert set(model.URL_RULES) == {rule for rule in RuleId if rule.startswith("url-")}


def test_the_check_rules_take_their_severity_from_the_registry() -> None:
    assert {rule: rule.severity for rule in RuleId if not rule.startswith("url-")} == model.RULES


@pytest.mark.parametrize("rule", list(RuleId))
def test_an_issue_of_every_rule_knows_its_severity(rule: RuleId) -> None:
    """A URL check's rule is an issue like any other: its severity comes from the registry,
    whether the issue holds the member or the id read back as a plain string."""
    assert model.Issue(rule, "found").severity == rule.severity
    assert model.Issue(str(rule.value), "found").severity == rule.severity  # type: ignore[arg-type]


def test_an_id_from_outside_the_code_is_checked() -> None:
    assert rules.rule_id("lastmod-invalid") is RuleId.LASTMOD_INVALID
    with pytest.raises(ValueError, match="'lastmod-invalidd' is not a rule id"):
        rules.rule_id("lastmod-invalidd")
    with pytest.raises(AttributeError):
        RuleId.LASTMOD_INVALIDD  # type: ignore[attr-defined] # noqa: B018


def test_a_misspelt_rule_id_is_a_type_error() -> None:
    """mypy refuses an issue made with a member the registry does not have, or with a bare
    string: an id in code is a member."""
    program = ("from monitor.core.model import Issue\n"
               "from monitor.core.rules import RuleId\n"
               "Issue(RuleId.LASTMOD_INVALID, 'fine')\n"
               "Issue(RuleId.LASTMOD_INVALIDD, 'a typo')\n"
               "Issue('lastmod-invalid', 'a bare string')\n")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "", "--strict", "--no-incremental",
         "--follow-imports", "silent", "-c", program],
        capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["4", "5"], done.stdout


def test_a_rule_id_reads_as_its_id_in_json_messages_and_logs() -> None:
    """Output stays byte for byte what a plain string gave: JSON, f-strings, %-formatting,
    a join, and structlog's JSON and console lines."""
    rule = RuleId.LOC_MISSING
    assert json.dumps({"rule": rule, rule: 1}) == '{"rule": "loc-missing", "loc-missing": 1}'
    assert (f"{rule}", str(rule), "%s" % rule, " ".join([rule, rule])) == (  # noqa: UP031
        "loc-missing", "loc-missing", "loc-missing", "loc-missing loc-missing")
    assert Issue(rule, "m").as_json()["rule"].__class__ is RuleId  # the member, as a str
    for as_json in (True, False):
        out = io.StringIO()
        log.configure(json=as_json, stream=out)
        try:
            log.get_logger("test").info("check", error_kind=rule)
        finally:
            structlog.reset_defaults()
        line = out.getvalue()
        assert ('"error_kind": "loc-missing"' if as_json else "error_kind=loc-missing") in line


def _document() -> bytes:
    """One urlset that breaks most of the per-entry rules."""
    ns = (f'xmlns="{SITEMAP_NS}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1" '
          'xmlns:video="http://www.google.com/schemas/sitemap-video/1.1" '
          'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9" '
          'xmlns:xhtml="http://www.w3.org/1999/xhtml"')
    urls = [
        "<url><lastmod>2024-01-01</lastmod></url>",
        "<url><loc>https://example.com/a</loc><loc>https://example.com/b</loc></url>",
        "<url><loc>https://other.test/a</loc></url>",
        "<url><loc>/relative</loc></url>",
        "<url><loc>https://example.com/a b</loc></url>",
        f"<url><loc>https://example.com/{'x' * 2100}</loc></url>",
        "<url><loc>https://example.com/a</loc></url>",
        "<url><loc>https://example.com/c</loc><lastmod>2024-13-01</lastmod>"
        "<changefreq>sometimes</changefreq><priority>2</priority></url>",
        "<url><loc>https://example.com/d</loc><lastmod>2999-01-01</lastmod></url>",
        "<url><loc>https://example.com/e</loc><video:video><video:title>t</video:title>"
        "<video:expiration_date>2020-01-01</video:expiration_date></video:video></url>",
        "<url><loc>https://example.com/f</loc><news:news><news:publication><news:name>n"
        "</news:name><news:language>en</news:language></news:publication>"
        "<news:publication_date>2020-01-01</news:publication_date><news:title>x</news:title>"
        "</news:news></url>",
        '<url><loc>https://example.com/g</loc><xhtml:link rel="alternate" hreflang="zz-99" '
        'href="https://example.com/q"/><xhtml:link rel="alternate" hreflang="en" '
        'href="https://example.com/r"/></url>',
        "<url><loc>https://example.com/h</loc><image:image><image:caption>c</image:caption>"
        "</image:image></url>",
    ]
    return f'<?xml version="1.0"?><urlset {ns}>{"".join(urls)}</urlset>'.encode()


def _job(body: bytes, previous: bytes | None = None) -> digest.Job:
    return digest.Job(url=URL, now=NOW, max_bytes=1 << 30, max_urls=10**7, max_children=10**5,
                      body=body, previous=previous, base_id=None if previous is None else 1,
                      baseline=previous is None, fingerprints=True)


def _members(found: list[object]) -> list[object]:
    """Those of ``found`` (rule ids) that are not registry members."""
    return [rule for rule in found if type(rule) is not RuleId]


def test_a_digest_names_every_rule_by_its_member() -> None:
    """Parse, validate, extensions and re-read: every id they return is a RuleId member."""
    first = digest.digest(_job(_document()))
    assert first.failure is None
    found = [i.rule for i in (*first.issues, *first.entry_issues)]
    assert {"loc-missing", "loc-multiple", "loc-out-of-scope", "loc-not-absolute",
            "loc-not-encoded", "loc-too-long", "loc-duplicate", "lastmod-invalid",
            "lastmod-future", "changefreq-invalid", "priority-invalid", "video-missing-field",
            "video-expired", "news-too-old", "hreflang-invalid-code", "hreflang-no-self",
            "image-missing-loc", "extension-deprecated"} <= set(first.counts)
    assert _members(found) == []
    assert _members(list(first.counts)) == []
    later = _document().replace(b"2999-01-01", b"2023-01-01").replace(b"2024-01-01",
                                                                       b"2025-01-01")
    again = digest.digest(_job(later, first.data))
    regressed = [i.rule for i in again.entry_issues if i.rule == "lastmod-regressed"]
    assert regressed
    assert _members([i.rule for i in again.entry_issues]) == []


def test_the_other_validators_name_every_rule_by_its_member() -> None:
    """Index children, extensions, robots.txt, the URL checks, the target-wide rules."""
    found: list[object] = []
    found += [i.rule for i in validate.index_issues([("https://example.com/c.xml", "soon")],
                                                    URL, NOW)]
    child = validate.child_issue("/relative.xml", URL)
    found += [] if child is None else [child.rule]
    checked = extensions.Checker(NOW).rules(
        "https://example.com/v", '{"video":[{"title":"t","expiration_date":"2020-01-01"}]}')
    found += checked or []
    barred = RobotsRules("User-agent: *\nDisallow: /\n")
    found += agents.disallowed("https://example.com/n", '{"news":[{}],"image":[{"loc":'
                               '"https://example.com/i.png"},{"loc":"https://example.com/j"}]}',
                               lambda _url: barred)
    robots = "https://example.com/robots.txt"
    before = judge.Stored("User-agent: *\nAllow: /\n")
    changed = judge.judge(robots, before, judge.Answer(200, "User-agent: *\nDisallow: /\n"),
                          sitemaps=[URL], listed=[URL])
    down = judge.judge(robots, before, judge.Answer(error="refused"), sitemaps=[])
    found += [i.rule for i in (*changed.issues, *down.issues)]
    found += [verdict.Verdict(state).rule for state in model.URL_STATES]
    found += [verdict.Verdict("redirect", loop=True).rule,
              verdict.Verdict("ok", note=model.URL_CANONICAL_CONFLICT).rule,
              verdict.Verdict("canonicalized", broken_canonical=True).rule]
    moved = [Change("changed", f"https://example.com/{i}", EntryState("2024-01-01"),
                    EntryState("2024-01-02")) for i in range(30)]
    churn = targetwide.churn_issue((30, 30), (30, 30), moved, URL)
    found += [] if churn is None else [churn.rule]
    failed = tally.failure(DocumentResult("https://example.com/c.xml", "failed", parent=URL),
                           "timeout", "no answer", None, root=False)
    found += [i.rule for f in failed.found for i in getattr(f, "issues", ())]
    found += [model.invalid_rule("/relative")]
    rules_found = {rule for rule in found if rule is not None}
    assert {"lastmod-invalid", "loc-not-absolute", "video-expired", "news-disallowed",
            "image-disallowed", "robots-changed", "sitemap-disallowed", "robots-sitemap-missing",
            "robots-unreachable", "url-redirect-loop", "url-canonical-conflict",
            "url-canonical-broken", "lastmod-churn", "child-fetch-failed",
            *model.URL_RULES} <= rules_found
    assert _members([rule for rule in found if rule is not None]) == []
