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
from charttools import CHART, MONITORING_APIS, exported_family, one, queried_metrics, render
from httpserver import Reply, TestServer
from prometheus_client.parser import text_string_to_metric_families

SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://127.0.0.1/a</loc><lastmod>2024-05-01</lastmod></url>
  <url><loc>http://127.0.0.1/b</loc><lastmod>not-a-date</lastmod></url>
</urlset>
"""
# SPEC section 8: what the chart is allowed to rely on.
SPEC_METRICS = {
    "sitemap_monitor_checks_total", "sitemap_monitor_check_duration_seconds_bucket",
    "sitemap_monitor_last_check_timestamp_seconds",
    "sitemap_monitor_last_success_timestamp_seconds", "sitemap_monitor_urls",
    "sitemap_monitor_invalid_urls", "sitemap_monitor_issues", "sitemap_monitor_changes_total",
    "sitemap_monitor_documents", "sitemap_monitor_fetched_bytes_total",
    "sitemap_monitor_alerts_total", "sitemap_monitor_alerts_pending",
    "sitemap_monitor_build_info",
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
    return [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())"]


@pytest.fixture
def daemon_metrics(tmp_path: Path) -> Iterator[str]:
    """/metrics of a real `sitemap-monitor run` after its first check of a local sitemap."""
    with TestServer() as site:
        site.route("/sitemap.xml", Reply(body=SITEMAP, headers={"Content-Type": "text/xml"}))
        site.route("/hook", Reply(204))
        port = _free_port()
        config = {
            "database_url": f"sqlite:///{tmp_path}/monitor.db",
            "listen": f"127.0.0.1:{port}",
            "defaults": {"interval": "1h", "jitter": 0},
            "targets": [{"name": "local", "url": site.url("/sitemap.xml")}],
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
                # The first check has run once its counter has a sample above zero.
                if status == 200 and any(
                    s.name == "sitemap_monitor_checks_total" and s.value > 0
                    for f in text_string_to_metric_families(body) for s in f.samples
                ):
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
    dashboard = json.loads((CHART / "dashboards" / "sitemap-monitor.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.setdefault(f"panel {panel['title']}", set()).update(
                queried_metrics(target["expr"])
            )
    for variable in dashboard["templating"]["list"]:
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
