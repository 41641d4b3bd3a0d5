"""The Grafana dashboard's PromQL, evaluated by promtool against series shaped like the daemon's.

test_chart_metrics.py checks that every metric a panel reads is one the daemon exports; here
promtool parses every panel's query and evaluates the per-target tables on input series, and
the issues table's severity matchers are compared with ``monitor.core.model.RULES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from charttools import (
    dashboard,
    dashboard_panel,
    grafana_promql,
    promtool_eval,
    promtool_passed,
    require_tool,
    run,
    table_columns,
)

from monitor.core.model import BROKEN_STATES, CHANGE_KINDS, RULES

SEVERITY_OF_COLUMN = {"errors": "error", "warnings": "warning"}
_RULE_MATCHER = re.compile(r'\brule=~"([^"]*)"')


def severity_mismatch(columns: Mapping[str, str], rules: Mapping[str, str]) -> list[str]:
    """How the issues table's rule matchers differ from the rules' severities (empty: none)."""
    problems = []
    for column, severity in SEVERITY_OF_COLUMN.items():
        matchers = _RULE_MATCHER.findall(columns.get(column, ""))
        if len(matchers) != 1:
            problems.append(f"{column}: expected one rule=~ matcher, got {matchers}")
            continue
        alternatives = matchers[0].split("|")
        # Literal rule ids only: a pattern such as loc-.* would hide which rules it takes.
        problems += [f"{column}: {a!r} is not a rule id" for a in alternatives
                     if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", a)]
        wanted = {rule for rule, s in rules.items() if s == severity}
        if missing := wanted - set(alternatives):
            problems.append(f"{column}: missing {sorted(missing)}")
        if extra := set(alternatives) - wanted:
            problems.append(f"{column}: not {severity} rules: {sorted(extra)}")
    return problems


def _samples(by_target: Mapping[str, float], **labels: str) -> list[dict[str, Any]]:
    def label_set(target: str) -> str:
        pairs = {"target": target, **labels}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    return [{"labels": label_set(t), "value": v} for t, v in by_target.items()]


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses every query of every panel, Grafana's variables replaced."""
    promtool = require_tool("promtool")
    rules = [
        {"record": f"dashboard:panel_{panel['id']}_{target['refId'].lower()}",
         "expr": grafana_promql(target["expr"])}
        for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]
    assert len(rules) > 25
    file = tmp_path / "dashboard-rules.yaml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(file)])
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_grafana_variables_are_all_replaced() -> None:
    """Every variable a query uses is one the tests know; an unknown one is an error."""
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            assert "$" not in grafana_promql(target["expr"]), target["expr"]


def test_issue_columns_match_the_rules_severities() -> None:
    """The errors and warnings columns take exactly model.RULES' error and warning rules."""
    columns = table_columns(dashboard_panel("Current issues by rule"))
    assert set(columns) == set(SEVERITY_OF_COLUMN)
    assert severity_mismatch(columns, RULES) == []


def test_severity_comparison_can_fail() -> None:
    """A rule added to RULES, or one moved to the other severity, is reported."""
    columns = table_columns(dashboard_panel("Current issues by rule"))
    # The severities as the dashboard has them, whatever RULES says today.
    shown = {rule: SEVERITY_OF_COLUMN[column] for column, expr in columns.items()
             for rule in _RULE_MATCHER.findall(expr)[0].split("|")}
    assert severity_mismatch(columns, shown) == []
    added = severity_mismatch(columns, {**shown, "loc-new-rule": "warning"})
    assert added == ["warnings: missing ['loc-new-rule']"]
    moved = severity_mismatch(columns, {**shown, "lastmod-future": "error"})
    assert moved == ["errors: missing ['lastmod-future']",
                     "warnings: not warning rules: ['lastmod-future']"]
    wildcard = {**columns, "errors": columns["errors"].replace("loc-missing", "loc-.*")}
    assert "errors: 'loc-.*' is not a rule id" in severity_mismatch(wildcard, shown)


def test_issues_table_counts_errors_and_warnings_apart(tmp_path: Path) -> None:
    """Each rule's current count lands in its severity's column; zeros and stale replicas don't.

    Target "all" has every rule of RULES (count = its position + 1); blog's lastmod-invalid is
    also exported, lower, by a replica that did not run its latest check.
    """
    columns = table_columns(dashboard_panel("Current issues by rule"))
    series = {
        f'sitemap_monitor_issues{{pod="a", target="all", rule="{rule}"}}': f"{n}x30"
        for n, rule in enumerate(RULES, 1)
    }
    series.update({
        'sitemap_monitor_issues{pod="a", target="blog", rule="lastmod-invalid"}': "5x30",
        'sitemap_monitor_issues{pod="b", target="blog", rule="lastmod-invalid"}': "2x30",
        'sitemap_monitor_issues{pod="a", target="blog", rule="loc-duplicate"}': "3x30",
        'sitemap_monitor_issues{pod="a", target="blog", rule="lastmod-future"}': "0x30",
        'sitemap_monitor_issues{pod="a", target="blog", rule="xml-malformed"}': "0x30",
    })
    cases = []
    for column, severity in SEVERITY_OF_COLUMN.items():
        expected = [
            {"labels": f'{{rule="{rule}", target="all"}}', "value": n}
            for n, rule in enumerate(RULES, 1) if RULES[rule] == severity
        ]
        blog = {"error": ("lastmod-invalid", 5), "warning": ("loc-duplicate", 3)}[severity]
        expected.append({"labels": f'{{rule="{blog[0]}", target="blog"}}', "value": blog[1]})
        cases.append({"expr": columns[column], "eval_time": "10m", "exp_samples": expected})
    promtool_passed(promtool_eval(tmp_path, series, cases))


# Target "good" succeeded at t=300s (and a second replica exports an older success); "failing"
# was checked at t=540s and never succeeded (0); "unchecked" was never checked (0 and 0);
# "absent" has only its interval (a daemon that never set the timestamps).
SINCE_SERIES = {
    'sitemap_monitor_last_success_timestamp_seconds{pod="a", target="good"}': "300x20",
    'sitemap_monitor_last_success_timestamp_seconds{pod="b", target="good"}': "100x20",
    'sitemap_monitor_last_check_timestamp_seconds{pod="a", target="good"}': "480x20",
    'sitemap_monitor_target_interval_seconds{pod="a", target="good"}': "900x20",
    'sitemap_monitor_last_success_timestamp_seconds{pod="a", target="failing"}': "0x20",
    'sitemap_monitor_last_check_timestamp_seconds{pod="a", target="failing"}': "540x20",
    'sitemap_monitor_checks_total{pod="a", target="failing", outcome="failed"}': "0+1x20",
    'sitemap_monitor_target_interval_seconds{pod="a", target="failing"}': "900x20",
    'sitemap_monitor_last_success_timestamp_seconds{pod="a", target="unchecked"}': "0x20",
    'sitemap_monitor_last_check_timestamp_seconds{pod="a", target="unchecked"}': "0x20",
    'sitemap_monitor_target_interval_seconds{pod="a", target="unchecked"}': "3600x20",
    'sitemap_monitor_target_interval_seconds{pod="a", target="absent"}': "60x20",
}
# At 10m (time() = 600): "never" is the time since the epoch, 600.
SINCE_EXPECTED = {
    "since last success": {"good": 300, "failing": 600, "unchecked": 600, "absent": 600},
    "since last check": {"good": 120, "failing": 60, "unchecked": 600, "absent": 600},
    "interval": {"good": 900, "failing": 900, "unchecked": 3600, "absent": 60},
}


def _since_cases(columns: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"expr": columns[column], "eval_time": "10m", "exp_samples": _samples(expected)}
            for column, expected in SINCE_EXPECTED.items()]


def test_time_since_last_success_keeps_targets_that_never_succeeded(tmp_path: Path) -> None:
    """Every configured target has a row; one that never succeeded counts from the epoch."""
    columns = table_columns(dashboard_panel("Time since last success"))
    assert set(columns) == set(SINCE_EXPECTED)
    promtool_passed(promtool_eval(tmp_path, SINCE_SERIES, _since_cases(columns)))


def test_time_since_last_success_test_can_fail(tmp_path: Path) -> None:
    """The previous query, which dropped the targets at 0, fails the same case."""
    columns = dict(table_columns(dashboard_panel("Time since last success")))
    columns["since last success"] = grafana_promql(
        'time() - max by (target) '
        '(sitemap_monitor_last_success_timestamp_seconds{target=~"$target"} > 0)')
    result = promtool_eval(tmp_path, SINCE_SERIES, _since_cases(columns))
    assert result.returncode != 0
    assert 'target="failing"' in result.stdout + result.stderr


def test_never_is_shown_as_never() -> None:
    """The value of a target that never succeeded (since the epoch) is mapped to "never"."""
    panel = dashboard_panel("Time since last success")
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    assert mapping["type"] == "range"
    assert mapping["options"]["result"]["text"] == "never"
    # From 1e9 s (31 years, longer than any real gap since a success) to past any date to come.
    assert mapping["options"]["from"] <= 1e9 < 2e9 < mapping["options"]["to"]


def test_changes_table_has_a_column_per_kind(tmp_path: Path) -> None:
    """Changes by kind per target: a column per change kind, summed over replicas, and a row
    for a quiet target too."""
    columns = table_columns(dashboard_panel("Changes by kind per target"))
    assert list(columns) == list(CHANGE_KINDS)
    for kind, expr in columns.items():
        assert f'kind="{kind}"' in expr
    series = {
        'sitemap_monitor_changes_total{pod="a", target="blog", kind="added"}': "0x30 10x30",
        'sitemap_monitor_changes_total{pod="b", target="blog", kind="added"}': "0x40 5x20",
        'sitemap_monitor_changes_total{pod="a", target="blog", kind="removed"}': "0x60",
        'sitemap_monitor_changes_total{pod="a", target="blog", kind="changed"}': "0x10 4x50",
        'sitemap_monitor_changes_total{pod="a", target="blog", kind="invalid"}': "0x50 2x10",
    }
    series.update({
        f'sitemap_monitor_changes_total{{pod="a", target="quiet", kind="{kind}"}}': "0x60"
        for kind in CHANGE_KINDS
    })
    expected = {"added": 15, "removed": 0, "changed": 4, "invalid": 2}
    cases = [{"expr": columns[kind], "eval_time": "60m",
              "exp_samples": _samples({"blog": expected[kind], "quiet": 0})}
             for kind in CHANGE_KINDS]
    promtool_passed(promtool_eval(tmp_path, series, cases))


def _links(node: Any) -> list[dict[str, Any]]:
    """Every data link and dashboard link under a node of the dashboard."""
    if isinstance(node, list):
        return [link for item in node for link in _links(item)]
    if not isinstance(node, dict):
        return []
    found = [link for link in node.get("links", []) if isinstance(link, dict)]
    for key, value in node.items():
        if key == "properties":
            found += [link for p in value if p["id"] == "links" for link in p["value"]]
        elif key != "links":
            found += _links(value)
    return found


def test_links_open_the_api_listings() -> None:
    """The panels link to the daemon's changes, issues and urls listings (and their CSV) under
    the api_url variable, with the target's name percent-encoded."""
    shipped = dashboard()
    variables = {v["name"]: v for v in shipped["templating"]["list"]}
    assert variables["api_url"]["type"] == "textbox"
    assert variables["api_url"]["query"].startswith("http")
    links = [link["url"] for link in _links(shipped)]
    assert links
    listings = re.compile(r"^\$\{api_url\}(/api/v1)?/targets(/\$\{__(data\.fields|field\."
                          r"labels)\.target:percentencode\}(/(changes|issues|urls|snapshots))?)?"
                          r"(\?[^ ]*)?$")
    assert [url for url in links if not listings.match(url) and url != "${api_url}/"] == []
    # each listing also opens as a web page, with the same query
    pages = {url.replace("/targets/", "/api/v1/targets/", 1) for url in links
             if url.startswith("${api_url}/targets/")}
    api = {url for url in links if url.startswith("${api_url}/api/v1/targets/")
           and "format=" not in url}
    assert pages == api
    assert "${api_url}/" in [link["url"] for link in shipped["links"]]
    for listing in ("changes", "issues", "urls"):
        assert any(f"/{listing}" in url for url in links), listing
        assert any(f"/{listing}" in url and "format=csv" in url for url in links), listing
    issues_table = dashboard_panel("Current issues by rule")
    assert any("issues?rule=${__data.fields.rule}" in link["url"]
               for link in _links(issues_table))
    changes_table = dashboard_panel("Changes by kind per target")
    for kind in CHANGE_KINDS:
        assert any(f"changes?kind={kind}&" in link["url"] for link in _links(changes_table))


def _query(title: str, ref: str = "A") -> str:
    """A panel's query (by its refId) as Grafana sends it."""
    [target] = [t for t in dashboard_panel(title)["targets"] if t["refId"] == ref]
    return grafana_promql(target["expr"])


_STATE_MATCHER = re.compile(r'\bstate=~"([^"]*)"')


def test_broken_urls_are_the_daemons_broken_states() -> None:
    """Every panel that counts broken URLs takes exactly the daemon's error states (its pages'
    "N broken"): a redirect or a canonical elsewhere is a warning, unknown is not checked."""
    found = {panel["title"]: _STATE_MATCHER.findall(target["expr"])
             for panel in dashboard()["panels"] for target in panel.get("targets", [])
             if "sitemap_monitor_url_health{" in target["expr"]}
    broken = {title: m for title, m in found.items() if m}
    assert set(broken) == {"Broken listed URLs per target", "Broken listed URLs"}
    for title, matchers in broken.items():
        assert [sorted(m.split("|")) for m in matchers] == [sorted(BROKEN_STATES)], title


# Two targets with URL checks; on "shop" a second replica still exports its older gauges
# (the panels take the newest, the max, per target and state), "blog" is checked through.
URL_HEALTH_SERIES = {
    'sitemap_monitor_url_health{pod="a", target="shop", state="ok"}': "900x30",
    'sitemap_monitor_url_health{pod="a", target="shop", state="not-found"}': "15x30",
    'sitemap_monitor_url_health{pod="a", target="shop", state="noindex"}': "5x30",
    'sitemap_monitor_url_health{pod="a", target="shop", state="redirect"}': "40x30",
    'sitemap_monitor_url_health{pod="a", target="shop", state="unknown"}': "40x30",
    'sitemap_monitor_url_health{pod="b", target="shop", state="not-found"}': "3x30",
    'sitemap_monitor_url_health{pod="a", target="blog", state="ok"}': "98x30",
    'sitemap_monitor_url_health{pod="a", target="blog", state="gone"}': "2x30",
    'sitemap_monitor_url_health{pod="a", target="blog", state="canonicalized"}': "7x30",
    'sitemap_monitor_url_check_coverage_ratio{pod="a", target="shop"}': "0.4x30",
    'sitemap_monitor_url_check_coverage_ratio{pod="b", target="shop"}': "0.1x30",
    'sitemap_monitor_url_check_coverage_ratio{pod="a", target="blog"}': "1x30",
    # 6 checks a minute on each replica: 2 ok, 1 not-found
    'sitemap_monitor_url_checks_total{pod="a", target="shop", outcome="ok"}': "0+4x30",
    'sitemap_monitor_url_checks_total{pod="b", target="shop", outcome="ok"}': "0+2x30",
    'sitemap_monitor_url_checks_total{pod="a", target="shop", outcome="not-found"}': "0+1x30",
    'sitemap_monitor_url_checks_total{pod="a", target="blog", outcome="ok"}': "0x30",
}


def _by(label: str, values: Mapping[str, float]) -> list[dict[str, Any]]:
    return [{"labels": f'{{{label}="{k}"}}', "value": v} for k, v in values.items()]


def test_url_health_panels_on_the_daemons_series(tmp_path: Path) -> None:
    """The URL-health row: states summed over targets, broken URLs per target (and in all,
    the overview's stat), coverage per target, checks by outcome."""
    cases = [
        {"expr": _query("Listed URLs by health state"), "eval_time": "10m",
         "exp_samples": _by("state", {"ok": 998, "not-found": 15, "noindex": 5, "redirect": 40,
                                      "unknown": 40, "gone": 2, "canonicalized": 7})},
        {"expr": _query("Broken listed URLs per target"), "eval_time": "10m",
         "exp_samples": _samples({"shop": 20, "blog": 2})},
        {"expr": _query("Broken listed URLs"), "eval_time": "10m",
         "exp_samples": [{"labels": "{}", "value": 22}]},
        {"expr": _query("URL-check coverage"), "eval_time": "10m",
         "exp_samples": _samples({"shop": 0.4, "blog": 1})},
        # over the 5 minutes of $__rate_interval
        {"expr": _query("URL checks by outcome"), "eval_time": "20m",
         "exp_samples": _by("outcome", {"ok": 30, "not-found": 5})},
    ]
    promtool_passed(promtool_eval(tmp_path, URL_HEALTH_SERIES, cases))


def test_the_estimate_table(tmp_path: Path) -> None:
    """Per target and state (not ok, not 0): the estimated share and its margin, one row."""
    columns = table_columns(dashboard_panel("Estimated share of listed URLs by state"))
    assert set(columns) == {"estimated share", "margin (95%)"}
    series = {
        'sitemap_monitor_url_health_estimate{pod="a", target="huge", state="ok"}': "0.9x10",
        'sitemap_monitor_url_health_estimate_margin{pod="a", target="huge", state="ok"}':
            "0.01x10",
        'sitemap_monitor_url_health_estimate{pod="a", target="huge", state="not-found"}':
            "0.021x10",
        'sitemap_monitor_url_health_estimate_margin{pod="a", target="huge", state="not-found"}':
            "0.004x10",
        'sitemap_monitor_url_health_estimate{pod="b", target="huge", state="not-found"}':
            "0.015x10",
        'sitemap_monitor_url_health_estimate_margin{pod="b", target="huge", state="not-found"}':
            "0.009x10",
        'sitemap_monitor_url_health_estimate{pod="a", target="huge", state="gone"}': "0x10",
        'sitemap_monitor_url_health_estimate_margin{pod="a", target="huge", state="gone"}':
            "0.001x10",
    }
    row = '{state="not-found", target="huge"}'
    cases = [{"expr": columns["estimated share"], "eval_time": "5m",
              "exp_samples": [{"labels": row, "value": 0.021}]},
             {"expr": columns["margin (95%)"], "eval_time": "5m",
              "exp_samples": [{"labels": row, "value": 0.009}]}]
    promtool_passed(promtool_eval(tmp_path, series, cases))


def test_indexnow_robots_and_churn_panels(tmp_path: Path) -> None:
    """IndexNow's outcomes (summed over replicas), the URLs it did not take per target and
    outcome, robots.txt changes and failures per target and rule, and lastmod churn."""
    series = {
        'sitemap_monitor_indexnow_urls_total{pod="a", target="shop", outcome="submitted"}':
            "0+10x60",
        'sitemap_monitor_indexnow_urls_total{pod="b", target="shop", outcome="submitted"}':
            "0+2x60",
        'sitemap_monitor_indexnow_urls_total{pod="a", target="shop", outcome="rejected"}':
            "0x20 50x40",
        'sitemap_monitor_indexnow_urls_total{pod="a", target="blog", outcome="key_missing"}':
            "0+1x60",
        'sitemap_monitor_indexnow_urls_total{pod="a", target="blog", outcome="retry"}':
            "0+3x60",
        'sitemap_monitor_issues{pod="a", target="shop", rule="robots-changed"}': "0x20 1 0x39",
        'sitemap_monitor_issues{pod="a", target="blog", rule="robots-unreachable"}': "1x60",
        'sitemap_monitor_issues{pod="a", target="blog", rule="lastmod-invalid"}': "9x60",
        'sitemap_monitor_lastmod_churn_ratio{pod="a", target="shop"}': "0.05x60",
        'sitemap_monitor_lastmod_churn_ratio{pod="b", target="shop"}': "0.01x60",
        'sitemap_monitor_lastmod_churn_ratio{pod="a", target="blog"}': "0.95x60",
    }
    cases = [
        {"expr": _query("IndexNow URLs by outcome"), "eval_time": "30m",
         "exp_samples": _by("outcome", {"submitted": 60, "rejected": 0, "key_missing": 5,
                                        "retry": 15})},
        {"expr": _query("IndexNow URLs not accepted per target"), "eval_time": "23m",
         "exp_samples": [
             {"labels": '{outcome="rejected", target="shop"}', "value": 50},
             {"labels": '{outcome="key_missing", target="blog"}', "value": 5}]},
        {"expr": _query("IndexNow URLs not accepted (24h)"), "eval_time": "60m",
         "exp_samples": [{"labels": "{}", "value": 110}]},
        {"expr": _query("robots.txt changes and failures"), "eval_time": "22m",
         "exp_samples": [
             {"labels": '{rule="robots-changed", target="shop"}', "value": 1},
             {"labels": '{rule="robots-unreachable", target="blog"}', "value": 1}]},
        {"expr": _query("Lastmod churn"), "eval_time": "10m",
         "exp_samples": _samples({"shop": 0.05, "blog": 0.95})},
    ]
    promtool_passed(promtool_eval(tmp_path, series, cases))
