"""Every metric the dashboard and the alert rules query is one a running daemon exports."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from charttools import (
    MONITORING_APIS,
    dashboard,
    dashboard_panel,
    exported_family,
    one,
    promtool_eval,
    promtool_passed,
    queried_metrics,
    render,
    table_columns,
)
from httpserver import Reply, TestServer
from prometheus_client.parser import text_string_to_metric_families

SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://127.0.0.1/a</loc><lastmod>2024-05-01</lastmod></url>
  <url><loc>http://127.0.0.1/b</loc><lastmod>not-a-date</lastmod></url>
</urlset>
"""
# what the chart is allowed to rely on.
SPEC_METRICS = {
    "sitemap_monitor_checks_total", "sitemap_monitor_check_duration_seconds_bucket",
    "sitemap_monitor_last_check_timestamp_seconds",
    "sitemap_monitor_last_success_timestamp_seconds", "sitemap_monitor_urls",
    "sitemap_monitor_invalid_urls", "sitemap_monitor_issues", "sitemap_monitor_changes_total",
    "sitemap_monitor_documents", "sitemap_monitor_fetched_bytes_total",
    "sitemap_monitor_alerts_total", "sitemap_monitor_alerts_pending",
    "sitemap_monitor_build_info", "sitemap_monitor_lastmod_churn_ratio",
    "sitemap_monitor_url_health", "sitemap_monitor_url_checks_total",
    "sitemap_monitor_url_check_coverage_ratio", "sitemap_monitor_indexnow_urls_total",
    "sitemap_monitor_url_health_estimate", "sitemap_monitor_url_health_estimate_margin",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _daemon_command() -> list[str]:
    script = Path(sys.executable).parent / "sitemap-monitor"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c",
            "import sys; from monitor.cli.commands import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def daemon_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of a real `sitemap-monitor run` after the first check of each target: "local"
    succeeds (its pages checked, IndexNow on), "broken" (a 404) fails, so it never succeeded.
    Scraped once for the module."""
    tmp_path = tmp_path_factory.mktemp("daemon-metrics")
    with TestServer() as site:
        site.route("/sitemap.xml", Reply(body=SITEMAP, headers={"Content-Type": "text/xml"}))
        site.route("/missing.xml", Reply(404))
        site.route("/hook", Reply(204))
        port = _free_port()
        config = {
            "database_url": f"sqlite:///{tmp_path}/monitor.db",
            "listen": f"127.0.0.1:{port}",
            "defaults": {"interval": "1h", "jitter": 0},
            # "local" checks its pages and submits to IndexNow, so that their series exist
            "targets": [{"name": "local", "url": site.url("/sitemap.xml"),
                         "url_checks": {"enabled": True},
                         "indexnow": {"enabled": True, "key": "0123456789abcdef-metrics",
                                      "endpoint": site.url("/indexnow")}},
                        {"name": "broken", "url": site.url("/missing.xml")}],
            "alerts": {
                "channels": [{"name": "hook", "type": "webhook", "url": site.url("/hook")}],
                "rules": [{"name": "any", "when": "added", "channels": ["hook"]}],
            },
        }
        config_file = tmp_path / "config.yaml"
        config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
        log = (tmp_path / "daemon.log").open("w")
        process = subprocess.Popen(
            [*_daemon_command(), "run", "--config", str(config_file)],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            body = ""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert process.poll() is None, (tmp_path / "daemon.log").read_text()
                try:
                    status, body = _get(base + "/metrics")
                except OSError:
                    status = 0
                # A target's first check has run once its counter has a sample above zero.
                if status == 200 and {
                    s.labels["target"] for f in text_string_to_metric_families(body)
                    for s in f.samples if s.name == "sitemap_monitor_checks_total" and s.value > 0
                } == {"local", "broken"}:
                    break
                time.sleep(0.3)
            else:
                pytest.fail("no check ran within 30 s:\n" + (tmp_path / "daemon.log").read_text())
            yield body
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            log.close()
        assert code == 0, (tmp_path / "daemon.log").read_text()


def _exported(body: str) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(body):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def _queried() -> dict[str, set[str]]:
    """Metric names per place that queries them: dashboard panels, variables and rules."""
    found: dict[str, set[str]] = {}
    shipped = dashboard()
    for panel in shipped["panels"]:
        for target in panel.get("targets", []):
            found.setdefault(f"panel {panel['title']}", set()).update(
                queried_metrics(target["expr"])
            )
    for variable in shipped["templating"]["list"]:
        found.setdefault(f"variable {variable['name']}", set()).update(
            queried_metrics(json.dumps(variable.get("query", "")))
        )
    docs = render(None, "--set", "prometheusRule.enabled=true", apis=MONITORING_APIS)
    for group in one(docs, "PrometheusRule")["spec"]["groups"]:
        for rule in group["rules"]:
            found[f"rule {rule['alert']}"] = queried_metrics(rule["expr"])
    return found


def test_dashboard_and_rules_query_only_exported_metrics(daemon_metrics: str) -> None:
    """Each metric name in the dashboard's and the rules' PromQL is scraped from the daemon."""
    exported = _exported(daemon_metrics)
    queried = _queried()
    assert sum(len(names) for names in queried.values()) > 20
    missing = {
        where: sorted(n for n in names if not exported_family(n, exported))
        for where, names in queried.items()
    }
    missing = {where: names for where, names in missing.items() if names}
    assert not missing, f"queried but not exported: {missing}"
    assert exported >= SPEC_METRICS, sorted(SPEC_METRICS - exported)
    # Every panel and rule queries at least one of the daemon's metrics.
    assert all(names for where, names in queried.items() if not where.startswith("variable"))


def test_metric_name_matching_is_strict() -> None:
    """The comparison can fail: a misspelt name or a histogram suffix on a gauge is caught."""
    exported = {"sitemap_monitor_urls", "sitemap_monitor_check_duration_seconds",
                "sitemap_monitor_check_duration_seconds_bucket"}
    assert exported_family("sitemap_monitor_check_duration_seconds_sum", exported)
    assert not exported_family("sitemap_monitor_url", exported)
    assert not exported_family("sitemap_monitor_urls_bucket", exported)
    assert queried_metrics('sum(rate(sitemap_monitor_x_total{a="b"}[5m])) / sitemap_monitor_y') == {
        "sitemap_monitor_x_total", "sitemap_monitor_y"}


def test_time_since_last_success_lists_a_target_that_never_succeeded(
    daemon_metrics: str, tmp_path: Path
) -> None:
    """On the daemon's own gauges, promtool gives the table a row for the failing target.

    The daemon exports 0 as its last success: the table must count it from the epoch (60 s
    at promtool's evaluation time of 1m), not drop it as it did before.
    """
    read = ("sitemap_monitor_last_success_timestamp_seconds",
            "sitemap_monitor_last_check_timestamp_seconds",
            "sitemap_monitor_target_interval_seconds")
    gauges = {
        (s.name, s.labels["target"]): s.value
        for f in text_string_to_metric_families(daemon_metrics) for s in f.samples
        if s.name in read
    }
    assert set(gauges) == {(name, t) for name in read for t in ("local", "broken")}
    assert gauges[(read[0], "broken")] == 0
    assert gauges[(read[1], "broken")] > 0
    series = {f'{name}{{target="{target}"}}': f"{value!r}x5"
              for (name, target), value in gauges.items()}
    at = 60.0
    expected = {
        "since last success": {t: at - gauges[(read[0], t)] for t in ("local", "broken")},
        "since last check": {t: at - gauges[(read[1], t)] for t in ("local", "broken")},
        "interval": {t: gauges[(read[2], t)] for t in ("local", "broken")},
    }
    assert expected["since last success"]["broken"] == at
    columns = table_columns(dashboard_panel("Time since last success"))
    cases = [
        {"expr": columns[column], "eval_time": "1m",
         "exp_samples": [{"labels": f'{{target="{t}"}}', "value": v} for t, v in values.items()]}
        for column, values in expected.items()
    ]
    promtool_passed(promtool_eval(tmp_path, series, cases))
