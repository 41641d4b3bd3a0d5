"""The PrometheusRule: promtool accepts it, and unit tests cover each default alert."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from charttools import MONITORING_APIS, one, render, require_tool, run

from monitor.core.model import BROKEN_STATES

RULES_TEST = Path(__file__).parent / "rules-test.yaml"


def _rules(*args: str, scenario: str | None = None) -> dict[str, Any]:
    """The rendered PrometheusRule's spec: a Prometheus rules file."""
    docs = render(scenario, "--set", "prometheusRule.enabled=true", *args, apis=MONITORING_APIS)
    spec: dict[str, Any] = one(docs, "PrometheusRule")["spec"]
    return spec


def _write(spec: dict[str, Any], directory: Path) -> Path:
    file = directory / "rules.yaml"
    file.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000), encoding="utf-8")
    return file


def test_promtool_check_rules_defaults(tmp_path: Path) -> None:
    """promtool check rules accepts the default rules."""
    promtool = require_tool("promtool")
    result = run([promtool, "check", "rules", str(_write(_rules(), tmp_path))])
    assert "SUCCESS: 10 rules found" in result.stdout


def test_promtool_check_rules_full_scenario(tmp_path: Path) -> None:
    """... and the full scenario's, with runbook URLs, extra labels and additionalRules."""
    promtool = require_tool("promtool")
    spec = _rules(scenario="full-values.yaml")
    result = run([promtool, "check", "rules", str(_write(spec, tmp_path))])
    assert "SUCCESS: 9 rules found" in result.stdout


def test_promtool_check_rules_rejects_bad_promql(tmp_path: Path) -> None:
    """The check can fail: a broken additional rule is reported by promtool."""
    promtool = require_tool("promtool")
    spec = _rules("--set-json", 'prometheusRule.additionalRules=[{"alert":"X","expr":"sum(("}]')
    result = run([promtool, "check", "rules", str(_write(spec, tmp_path))], check=False)
    assert result.returncode != 0


def _unit_test(spec: dict[str, Any], tmp_path: Path) -> Any:
    promtool = require_tool("promtool")
    _write(spec, tmp_path)
    shutil.copy(RULES_TEST, tmp_path / "rules-test.yaml")
    return run([promtool, "test", "rules", str(tmp_path / "rules-test.yaml")], check=False,
               cwd=tmp_path)


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    """promtool test rules: every default alert fires when it should and only then."""
    result = _unit_test(_rules(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_notice_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: a mass-removal ratio of 50 % no longer fires at 20 %."""
    spec = _rules("--set-json", "prometheusRule.rules.massRemoval.ratio=0.5")
    result = _unit_test(spec, tmp_path)
    assert result.returncode != 0
    assert "SitemapMonitorMassRemoval" in result.stdout + result.stderr


def test_every_default_alert_has_a_firing_unit_test() -> None:
    """Each default alert has a case in rules-test.yaml where it fires, and a quiet one."""
    alerts = [rule["alert"] for group in _rules()["groups"] for rule in group["rules"]]
    assert len(alerts) == 10
    cases = yaml.safe_load(RULES_TEST.read_text())["tests"]
    checks = [c for case in cases for c in case["alert_rule_test"]]
    for alert in alerts:
        mine = [c for c in checks if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), f"{alert} never fires in rules-test.yaml"
        assert any(not c["exp_alerts"] for c in mine), f"{alert} has no quiet case"


def test_default_rules_are_runbook_style() -> None:
    """Every default alert has a severity, a summary and a description that says what to do."""
    for group in _rules()["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert rule["annotations"]["summary"]
            description = rule["annotations"]["description"]
            assert len(description) > 150, rule["alert"]
            assert any(word in description for word in ("Check", "check", "Look", "List", "fix"))


def test_each_rule_can_be_switched_off() -> None:
    """prometheusRule.rules.<name>.enabled=false drops just that alert."""
    spec = _rules("--set", "prometheusRule.rules.massRemoval.enabled=false")
    alerts = [rule["alert"] for group in spec["groups"] for rule in group["rules"]]
    assert "SitemapMonitorMassRemoval" not in alerts
    assert len(alerts) == 9


def _database_rules(*args: str, scenario: str | None = None) -> dict[str, str]:
    """The database alerts' expressions, by alert name."""
    rules = [rule for group in _rules(*args, scenario=scenario)["groups"]
             for rule in group["rules"]]
    return {r["alert"]: r["expr"] for r in rules if r["alert"].startswith("SitemapMonitorDatabase")}


def test_database_limit_follows_the_volume() -> None:
    """The database alerts' limit is persistence.size in bytes, or databaseBytesLimit."""
    default = _database_rules()
    assert default["SitemapMonitorDatabaseGrowing"].endswith("> 1073741824")
    assert "/ 1073741824" in default["SitemapMonitorDatabaseNearlyFull"]
    for size, limit in [("500Mi", "524288000"), ("10G", "10000000000"),
                        ("1.5Gi", "1610612736")]:
        growing = _database_rules("--set", f"persistence.size={size}")
        assert growing["SitemapMonitorDatabaseGrowing"].endswith(f"> {limit}"), size
    given = _database_rules("--set", "prometheusRule.databaseBytesLimit=2Ti")
    assert given["SitemapMonitorDatabaseGrowing"].endswith("> 2199023255552")
    given = _database_rules("--set-json", "prometheusRule.databaseBytesLimit=5000000000")
    assert given["SitemapMonitorDatabaseGrowing"].endswith("> 5000000000")


def test_database_rules_need_a_limit_without_the_chart_volume() -> None:
    """PostgreSQL (or an existing claim) has no size the chart knows: no database alerts,
    until prometheusRule.databaseBytesLimit gives one."""
    assert _database_rules(scenario="postgresql-values.yaml") == {}
    assert _database_rules("--set", "persistence.existingClaim=mine") == {}
    given = _database_rules("--set", "prometheusRule.databaseBytesLimit=50Gi",
                            scenario="postgresql-values.yaml")
    assert given["SitemapMonitorDatabaseGrowing"].endswith("> 53687091200")
    assert len(given) == 2


def _exprs() -> dict[str, str]:
    return {rule["alert"]: rule["expr"] for group in _rules()["groups"]
            for rule in group["rules"]}


def test_broken_urls_are_the_daemons_broken_states() -> None:
    """The URL-health alerts take exactly the states the daemon counts as broken (its pages'
    "N broken", urls --status broken): its error states, no redirect, canonical or unknown."""
    exprs = _exprs()
    for alert in ("SitemapMonitorUrlsBroken", "SitemapMonitorUrlsBrokenEstimate"):
        matchers = set(re.findall(r'state=~"([^"]*)"', exprs[alert]))
        assert [sorted(m.split("|")) for m in matchers] == [sorted(BROKEN_STATES)], alert
    assert 'state!="unknown"' in exprs["SitemapMonitorUrlsBroken"]


def test_new_alerts_can_be_tuned_and_switched_off() -> None:
    """Their thresholds, ratios and windows come from the values."""
    tuned = {rule["alert"]: rule for group in _rules(
        "--set", "prometheusRule.rules.urlsBroken.threshold=25",
        "--set-json", "prometheusRule.rules.urlsBroken.ratio=0.1",
        "--set-json", "prometheusRule.rules.urlsBrokenEstimate.ratio=0.05",
        "--set", "prometheusRule.rules.indexNowRejected.window=6h",
        "--set", "prometheusRule.rules.indexNowRejected.enabled=false")["groups"]
        for rule in group["rules"]}
    assert ">= 25\nand" in tuned["SitemapMonitorUrlsBroken"]["expr"]
    assert tuned["SitemapMonitorUrlsBroken"]["expr"].endswith(">= 0.1")
    assert ") >= 0.05\n" in tuned["SitemapMonitorUrlsBrokenEstimate"]["expr"]
    assert "SitemapMonitorIndexNowRejected" not in tuned
    window = _exprs()["SitemapMonitorIndexNowRejected"]
    assert "[1h]" in window
