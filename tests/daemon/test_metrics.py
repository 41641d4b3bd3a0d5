"""The metrics on a fresh registry: label sets, observe, restore, promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor import __version__
from monitor.core.model import RULES, CheckResult, DocumentResult, Issue
from monitor.observe.metrics import Metrics

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
P = "sitemap_monitor"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """One sample's value."""
    return registry.get_sample_value(f"{P}_{name}", labels)


def promtool_problems(exposition: bytes) -> str:
    """What ``promtool check metrics`` says about an exposition (empty when clean)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have promtool (Debian package 'prometheus')")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, timeout=30,
        check=False)
    return (done.stdout + done.stderr).decode().strip()


def test_label_sets_exist_before_any_check() -> None:
    registry = CollectorRegistry()
    Metrics(registry, ["shop", "blog"], ["ops"])
    for target in ("shop", "blog"):
        assert value(registry, "checks_total", target=target, outcome="failed") == 0
        assert value(registry, "checks_total", target=target, outcome="partial") == 0
        assert value(registry, "checks_total", target=target, outcome="error") == 0
        assert value(registry, "changes_total", target=target, kind="removed") == 0
        # An issue rule has a series once the target has had an issue of it.
        assert value(registry, "issues", target=target, rule="lastmod-invalid") is None
        # So does a document outcome, once a check of the target has had one.
        assert value(registry, "documents", target=target, outcome="ok") is None
        assert value(registry, "urls", target=target) == 0
        assert value(registry, "check_duration_seconds_count", target=target) == 0
    assert value(registry, "alerts_total", channel="ops", outcome="sent") == 0
    assert value(registry, "alerts_pending") == 0
    assert value(registry, "build_info", version=__version__) == 1


def test_a_partial_check_is_counted_as_partial() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], [])
    partial = CheckResult(target="shop", url="u", outcome="partial", snapshot_id=1, urls=3,
                          documents=[DocumentResult("u", "ok"), DocumentResult("c", "failed")])
    m.observe(partial, "shop", issue_counts={"child-fetch-failed": 1}, finished_at=WHEN)
    assert value(registry, "checks_total", target="shop", outcome="partial") == 1
    assert value(registry, "checks_total", target="shop", outcome="ok") == 0
    assert value(registry, "documents", target="shop", outcome="failed") == 1


def test_observe_sets_gauges_and_counts() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], [])
    result = CheckResult(
        target="shop", url="http://127.0.0.1/s.xml", outcome="ok", snapshot_id=3, urls=10,
        invalid=2, added=10, removed=1, changed=4, invalid_new=2, fetched_bytes=1234,
        duration_seconds=0.7,
        documents=[DocumentResult("http://127.0.0.1/a", "ok"),
                   DocumentResult("http://127.0.0.1/b", "unchanged"),
                   DocumentResult("http://127.0.0.1/c", "unchanged")],
        issues=[Issue("lastmod-invalid", "bad"), Issue("lastmod-invalid", "bad"),
                Issue("loc-duplicate", "twice")],
    )
    m.observe(result, "shop", finished_at=WHEN)
    assert value(registry, "checks_total", target="shop", outcome="ok") == 1
    assert value(registry, "urls", target="shop") == 10
    assert value(registry, "invalid_urls", target="shop") == 2
    assert value(registry, "changes_total", target="shop", kind="added") == 10
    assert value(registry, "changes_total", target="shop", kind="invalid") == 2
    assert value(registry, "issues", target="shop", rule="lastmod-invalid") == 2
    assert value(registry, "issues", target="shop", rule="loc-duplicate") == 1
    assert value(registry, "documents", target="shop", outcome="unchanged") == 2
    assert value(registry, "fetched_bytes_total", target="shop") == 1234
    assert value(registry, "last_success_timestamp_seconds", target="shop") == WHEN.timestamp()
    assert value(registry, "check_duration_seconds_sum", target="shop") == pytest.approx(0.7)
    # The stored issue counts win over the issues one check happened to report; a rule that
    # cleared stays at 0, a rule never had has no series.
    m.observe(result, "shop", issue_counts={"priority-invalid": 5}, finished_at=WHEN)
    assert value(registry, "issues", target="shop", rule="priority-invalid") == 5
    assert value(registry, "issues", target="shop", rule="lastmod-invalid") == 0
    assert value(registry, "issues", target="shop", rule="changefreq-invalid") is None


def test_a_target_has_22_series_plus_one_per_document_outcome_and_issue_rule_it_has_had(
) -> None:
    """68 series a target made a 20,000-target scrape 104 MB and 9 s of CPU; at
    most 26 in the steady state of a target whose documents answer and that has had a few
    issue rules (23: checks_total{outcome} has partial and error beside ok, unchanged and
    failed)."""
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop", "blog"], [])
    m.set_intervals({"shop": 60.0, "blog": 60.0})

    def series(target: str) -> int:
        text = generate_latest(registry).decode()
        return sum(1 for line in text.splitlines()
                   if not line.startswith("#") and f'target="{target}"' in line)

    assert series("shop") == 23
    checked = CheckResult(target="shop", url="u", outcome="ok", snapshot_id=1, urls=3,
                          duration_seconds=0.2, documents=[DocumentResult("u", "ok")])
    m.observe(checked, "shop", issue_counts={"lastmod-invalid": 2, "loc-duplicate": 1},
              finished_at=WHEN)
    assert series("shop") == 26
    answered = CheckResult(target="shop", url="u", outcome="unchanged", snapshot_id=2, urls=3,
                           duration_seconds=0.1, documents=[DocumentResult("u", "not_modified")])
    m.observe(answered, "shop", issue_counts={}, finished_at=WHEN)
    assert series("shop") == 27  # cleared: at 0, still there for the dashboards
    assert value(registry, "issues", target="shop", rule="loc-duplicate") == 0
    assert value(registry, "documents", target="shop", outcome="ok") == 0
    assert value(registry, "documents", target="shop", outcome="not_modified") == 1
    assert value(registry, "documents", target="shop", outcome="failed") is None
    m.observe(answered, "shop", issue_counts={}, finished_at=WHEN)
    assert series("shop") == 27  # the steady state: nothing new
    assert series("blog") == 23
    assert "_created" not in generate_latest(registry).decode()
    m.set_targets(["blog"])
    assert series("shop") == 0


def test_the_lastmod_churn_ratio_is_the_last_re_checks() -> None:
    """the share of the compared lastmods that changed; a baseline or a failed check
    compares none and leaves the gauge as it was."""
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], [])
    assert value(registry, "lastmod_churn_ratio", target="shop") == 0
    recheck = CheckResult(target="shop", url="u", outcome="ok", snapshot_id=2,
                          lastmod_compared=40, lastmod_changed=30)
    m.observe(recheck, "shop", issue_counts={}, finished_at=WHEN)
    assert value(registry, "lastmod_churn_ratio", target="shop") == 0.75
    failed = CheckResult(target="shop", url="u", outcome="failed", snapshot_id=3)
    m.observe(failed, "shop", issue_counts={}, finished_at=WHEN)
    assert value(registry, "lastmod_churn_ratio", target="shop") == 0.75
    none = CheckResult(target="shop", url="u", outcome="ok", snapshot_id=4,
                       lastmod_compared=0, lastmod_changed=0)
    m.observe(none, "shop", issue_counts={}, finished_at=WHEN)
    assert value(registry, "lastmod_churn_ratio", target="shop") == 0


def test_a_failed_check_keeps_the_last_success_and_unstored_counts() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], [])
    m.restore("shop", last_check=WHEN, last_success=WHEN, urls=7, invalid=1,
              issue_counts={}, documents={"ok": 1})
    later = datetime(2024, 5, 1, 13, 0, tzinfo=UTC)
    crashed = CheckResult(target="shop", url="u", outcome="failed", error_kind="internal")
    m.observe(crashed, "shop", finished_at=later)
    assert value(registry, "checks_total", target="shop", outcome="failed") == 1
    assert value(registry, "last_check_timestamp_seconds", target="shop") == later.timestamp()
    assert value(registry, "last_success_timestamp_seconds", target="shop") == WHEN.timestamp()
    assert value(registry, "urls", target="shop") == 7


def test_restore_and_dropping_a_target() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop", "old"], [])
    m.restore("shop", last_check=WHEN, last_success=None, urls=50, invalid=3,
              issue_counts={"loc-too-long": 3}, documents={"failed": 1, "ok": 2})
    assert value(registry, "urls", target="shop") == 50
    assert value(registry, "issues", target="shop", rule="loc-too-long") == 3
    assert value(registry, "documents", target="shop", outcome="ok") == 2
    assert value(registry, "last_check_timestamp_seconds", target="shop") == WHEN.timestamp()
    m.set_intervals({"shop": 60.0, "old": 3600.0})
    m.set_targets(["shop", "new"])
    assert value(registry, "urls", target="old") is None
    assert value(registry, "urls", target="new") == 0
    assert value(registry, "urls", target="shop") == 50
    assert value(registry, "target_interval_seconds", target="old") is None
    assert value(registry, "target_interval_seconds", target="new") is None  # not known yet
    assert value(registry, "target_interval_seconds", target="shop") == 60.0


def test_a_target_dropped_and_configured_again_starts_from_zero_and_is_counted() -> None:
    """The series a target's checks update are looked up once; a target that is dropped and
    comes back must get live series, not the removed ones."""
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], [])
    ok = CheckResult(target="shop", url="u", outcome="ok", snapshot_id=1, urls=5)
    m.observe(ok, "shop", finished_at=WHEN)
    m.set_targets([])
    assert value(registry, "checks_total", target="shop", outcome="ok") is None
    m.set_targets(["shop"])
    assert value(registry, "checks_total", target="shop", outcome="ok") == 0
    assert value(registry, "urls", target="shop") == 0
    m.observe(ok, "shop", finished_at=WHEN)
    assert value(registry, "checks_total", target="shop", outcome="ok") == 1
    assert value(registry, "urls", target="shop") == 5
    assert value(registry, "documents", target="shop", outcome="ok") is None  # none had


def test_alerts_and_reload_metrics() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, [], ["ops"])
    m.alert_result("ops", "retry")
    m.alert_result("ops", "sent")
    m.set_database_bytes(123_456)
    assert value(registry, "database_bytes") == 123_456
    m.set_alerts_pending(4)
    m.config_reloaded(True, WHEN)
    m.config_reloaded(False)
    assert value(registry, "alerts_total", channel="ops", outcome="retry") == 1
    assert value(registry, "alerts_pending") == 4
    assert value(registry, "config_last_reload_successful") == 0
    assert value(registry, "config_last_reload_success_timestamp_seconds") == WHEN.timestamp()


def test_promtool_finds_nothing_to_say() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop"], ["ops"])
    m.observe(CheckResult(target="shop", url="u", outcome="ok", snapshot_id=1, urls=3),
              "shop", issue_counts=dict.fromkeys(RULES, 1), finished_at=WHEN)
    exposition = generate_latest(registry)
    assert exposition.count(b'rule="') == len(RULES)
    assert promtool_problems(exposition) == ""


def test_promtool_would_notice_a_bad_metric() -> None:
    # The check above can fail: promtool does speak up on a badly named metric.
    bad = b"# HELP sitemap_monitor_latency_ms x\n# TYPE sitemap_monitor_latency_ms counter\n" \
          b"sitemap_monitor_latency_ms 1\n"
    assert promtool_problems(bad) != ""


def test_the_scrape_text_is_what_prometheus_client_would_write() -> None:
    """``exposition`` writes the targets' series from their numbers; it must say what
    ``generate_latest`` makes of the same samples, line for line, and pass promtool."""
    registry = CollectorRegistry()
    m = Metrics(registry, ["shop", 'we"ird\\name'], ["ops"])
    m.set_intervals({"shop": 60.0})
    for seconds, outcome in ((0.2, "ok"), (7.0, "unchanged"), (900.0, "failed")):
        m.observe(CheckResult(target="shop", url="u", outcome=outcome, snapshot_id=1, urls=3,
                              invalid=1, added=2, duration_seconds=seconds,
                              fetched_bytes=10),
                  "shop", issue_counts={"lastmod-invalid": 2}, finished_at=WHEN)
    m.lease_lost()
    fast = m.exposition()
    assert sorted(fast.splitlines()) == sorted(generate_latest(registry).splitlines())
    assert b'sitemap_monitor_check_duration_seconds_bucket{le="300.0",target="shop"} 2.0' in fast
    assert b'sitemap_monitor_urls{target="we\\"ird\\\\name"} 0.0' in fast
    assert promtool_problems(fast) == ""
