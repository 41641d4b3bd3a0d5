"""The Grafana dashboard's PromQL, evaluated by promtool against series shaped like the daemon's.

test_chart_metrics.py checks that every metric a panel reads is one the daemon exports; here
promtool parses every panel's query and evaluates the per-target tables on input series.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from charttools import CHART, require_tool, run

DASHBOARD = CHART / "dashboards" / "sitemap-monitor.json"
# What Grafana puts in for its variables: every target, a 1h dashboard range.
GRAFANA_VARIABLES = {"target": ".*", "__range": "1h", "__rate_interval": "5m",
                     "__interval": "1m"}
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _panel(title: str) -> dict[str, Any]:
    found = [p for p in _dashboard()["panels"] if p["title"] == title]
    assert len(found) == 1, f"expected one panel {title!r}, got {len(found)}"
    return found[0]


def promql(expr: str) -> str:
    """A panel's query as Grafana sends it, its variables replaced."""
    return _VARIABLE.sub(lambda m: GRAFANA_VARIABLES[m.group(1)], expr)


def _columns(panel: dict[str, Any]) -> dict[str, str]:
    """A merged table's queries by the column they become: {column: PromQL}."""
    renamed: dict[str, str] = {}
    for step in panel["transformations"]:
        if step["id"] == "organize":
            renamed = step["options"]["renameByName"]
    columns = {renamed[f"Value #{t['refId']}"]: promql(t["expr"]) for t in panel["targets"]}
    assert len(columns) == len(panel["targets"]), "two queries fill the same column"
    return columns


def _evaluate(tmp_path: Path, series: Mapping[str, str],
              cases: list[dict[str, Any]]) -> Any:
    """``promtool test rules`` of PromQL cases (``promql_expr_test``) on input series."""
    promtool = require_tool("promtool")
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "promql_expr_test": cases,
        }],
    }
    file = tmp_path / "dashboard-test.yaml"
    file.write_text(yaml.safe_dump(test, sort_keys=False, width=1000), encoding="utf-8")
    return run([promtool, "test", "rules", str(file)], check=False, cwd=tmp_path)


def _samples(by_target: Mapping[str, float], **labels: str) -> list[dict[str, Any]]:
    def label_set(target: str) -> str:
        pairs = {"target": target, **labels}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    return [{"labels": label_set(t), "value": v} for t, v in by_target.items()]


def _passed(result: Any) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses every query of every panel, Grafana's variables replaced."""
    promtool = require_tool("promtool")
    rules = [
        {"record": f"dashboard:panel_{panel['id']}_{target['refId'].lower()}",
         "expr": promql(target["expr"])}
        for panel in _dashboard()["panels"] for target in panel.get("targets", [])
    ]
    assert len(rules) > 20
    file = tmp_path / "dashboard-rules.yaml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(file)])
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_grafana_variables_are_all_replaced() -> None:
    """Every variable a query uses is one the tests know; an unknown one is an error."""
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            assert "$" not in promql(target["expr"]), target["expr"]


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
    columns = _columns(_panel("Time since last success"))
    assert set(columns) == set(SINCE_EXPECTED)
    _passed(_evaluate(tmp_path, SINCE_SERIES, _since_cases(columns)))


def test_time_since_last_success_test_can_fail(tmp_path: Path) -> None:
    """The previous query, which dropped the targets at 0, fails the same case."""
    columns = dict(_columns(_panel("Time since last success")))
    columns["since last success"] = promql(
        'time() - max by (target) '
        '(sitemap_monitor_last_success_timestamp_seconds{target=~"$target"} > 0)')
    result = _evaluate(tmp_path, SINCE_SERIES, _since_cases(columns))
    assert result.returncode != 0
    assert 'target="failing"' in result.stdout + result.stderr


def test_never_is_shown_as_never() -> None:
    """The value of a target that never succeeded (since the epoch) is mapped to "never"."""
    panel = _panel("Time since last success")
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    assert mapping["type"] == "range"
    assert mapping["options"]["result"]["text"] == "never"
    # From 1e9 s (31 years, longer than any real gap since a success) to past any date to come.
    assert mapping["options"]["from"] <= 1e9 < 2e9 < mapping["options"]["to"]
