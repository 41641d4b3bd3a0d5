"""Every metric of SPEC section 8, on an injected CollectorRegistry.

Labels are configured names only (never a URL), and every label set of a configured target
or channel exists from the start (at zero), so a dashboard or an ``increase()`` has a series
before the first event; the one exception is ``issues{rule}``, which has a series for each rule
the target has had (at 0 once it clears), not for each of the 24 rules. Gauges are restored from
the database at start-up (``restore``), so a restart does not blank a dashboard; counters start
at zero, which Prometheus reads as a reset.

Series per target are what a scrape costs (issue 27: 68 a target made a 20,000-target scrape
104 MB and 9 s of CPU): 24 in all, plus one per issue rule the target has had. The counters'
``_created`` series are not exported (Prometheus reads a reset from the counter itself).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from monitor import __version__
from monitor.model import CHANGE_KINDS, CHECK_OUTCOMES, DOCUMENT_OUTCOMES, CheckResult

__all__ = ["ALERT_OUTCOMES", "HTTP_LANES", "PREFIX", "Metrics"]

PREFIX = "sitemap_monitor"
# What the outbox's Deliverer reports per attempt (alerts.outbox.Outcome).
ALERT_OUTCOMES = ("sent", "retry", "failed", "expired")
# The bounds of the HTTP port's admission (api.Admission); /healthz has none.
HTTP_LANES = ("api", "metrics", "readyz")
# Checks take from milliseconds (a 304) to minutes (a 50,000-child index): a 304 or a small
# sitemap, a few documents, W1's 500,000 URLs (2-10 s), a large index, beyond. Four bounds, as
# each is one more series per target.
DURATION_BUCKETS = (0.5, 5.0, 30.0, 300.0)

# Each counter's ``_created`` series doubles it for nothing a rule or dashboard here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(slots=True)
class _Series:
    """One target's series, looked up once: ``labels()`` validates and locks on every call,
    which cost a daemon about 5% of its CPU when it ran for every check (issue 5, W2)."""

    name: str
    checks: dict[str, Any]
    changes: dict[str, Any]
    documents: dict[str, Any]
    issues: dict[str, Any]
    duration: Any
    last_check: Any
    last_success: Any
    urls: Any
    invalid: Any
    fetched_bytes: Any


class Metrics:
    """The daemon's metrics; one instance per registry."""

    def __init__(
        self, registry: CollectorRegistry, targets: Iterable[str], channels: Iterable[str]
    ) -> None:
        r = registry
        p = PREFIX
        self.checks = Counter(
            f"{p}_checks", "Checks run, by outcome.", ["target", "outcome"], registry=r)
        self.check_duration = Histogram(
            f"{p}_check_duration_seconds", "Duration of a check.", ["target"],
            buckets=DURATION_BUCKETS, registry=r)
        self.last_check = Gauge(
            f"{p}_last_check_timestamp_seconds", "When the last check finished (Unix time).",
            ["target"], registry=r)
        self.last_success = Gauge(
            f"{p}_last_success_timestamp_seconds",
            "When the last check that did not fail finished (Unix time).", ["target"], registry=r)
        self.urls = Gauge(
            f"{p}_urls", "Valid URLs of the target after its last check.", ["target"], registry=r)
        self.invalid = Gauge(
            f"{p}_invalid_urls", "Invalid entries of the target after its last check.",
            ["target"], registry=r)
        self.issues = Gauge(
            f"{p}_issues", "Current validation issues of the target, by rule.",
            ["target", "rule"], registry=r)
        self.changes = Counter(
            f"{p}_changes", "Changes found, by kind.", ["target", "kind"], registry=r)
        self.documents = Gauge(
            f"{p}_documents", "Documents of the target in its last check, by outcome.",
            ["target", "outcome"], registry=r)
        self.fetched_bytes = Counter(
            f"{p}_fetched_bytes", "Bytes received from the target's servers.", ["target"],
            registry=r)
        # Per replica, not per target: a rare event, its target is in the log line.
        self.leases_lost = Counter(
            f"{p}_leases_lost", "Checks rolled back, writing nothing, because another replica "
            "had taken the target's lease meanwhile (this one was paused past it).", registry=r)
        self.alerts = Counter(
            f"{p}_alerts", "Notification delivery attempts, by channel and outcome.",
            ["channel", "outcome"], registry=r)
        self.alerts_pending = Gauge(
            f"{p}_alerts_pending", "Notifications in the outbox not yet delivered.", registry=r)
        self.build_info = Gauge(
            f"{p}_build_info", "Always 1; the version label says which build runs.", ["version"],
            registry=r)
        self.reload_ok = Gauge(
            f"{p}_config_last_reload_successful",
            "Whether the last configuration reload succeeded (1) or was refused (0).", registry=r)
        self.reload_time = Gauge(
            f"{p}_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully (Unix time).", registry=r)
        self.target_interval = Gauge(
            f"{p}_target_interval_seconds",
            "The target's configured check interval (alert rules compare the time since its "
            "last success with it).", ["target"], registry=r)
        self.http_refused = Counter(
            f"{p}_http_requests_refused", "HTTP requests answered 503 beyond their bound, by lane.",
            ["lane"], registry=r)
        self.build_info.labels(__version__).set(1)
        for lane in HTTP_LANES:
            self.http_refused.labels(lane)
        self._series: dict[str, _Series] = {}
        self.set_targets(targets)
        for channel in channels:
            self.add_channel(channel)

    def set_targets(self, names: Iterable[str]) -> None:
        """Create the label sets of these targets and drop those of targets no longer configured."""
        for _ in self.set_targets_in_steps(names):
            pass

    def set_targets_in_steps(self, names: Iterable[str], step: int = 50) -> Iterator[None]:
        """``set_targets``, pausing (yielding) after every ``step`` targets added or dropped.

        A target's label sets cost about 2 ms (41 series): a caller on an event loop awaits
        between steps, so 10,000 targets never hold the loop for long.
        """
        wanted = set(names)
        for count, name in enumerate(set(self._series) - wanted, 1):
            self._remove_target(name)
            if count % step == 0:
                yield
        for count, name in enumerate(wanted - set(self._series), 1):
            self._of(name)
            if count % step == 0:
                yield

    def _of(self, name: str) -> _Series:
        """A target's series, created (at zero) on first sight."""
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = _Series(
                name=name,
                checks={o: self.checks.labels(name, o) for o in CHECK_OUTCOMES},
                changes={k: self.changes.labels(name, k) for k in CHANGE_KINDS},
                documents={o: self.documents.labels(name, o) for o in DOCUMENT_OUTCOMES},
                issues={},  # a rule's series from the target's first issue of it on
                duration=self.check_duration.labels(name),
                last_check=self.last_check.labels(name),
                last_success=self.last_success.labels(name),
                urls=self.urls.labels(name),
                invalid=self.invalid.labels(name),
                fetched_bytes=self.fetched_bytes.labels(name),
            )
        return series

    def set_intervals(self, intervals: Mapping[str, float]) -> None:
        """Each configured target's check interval, in seconds (a target's series goes with
        its others in ``set_targets``)."""
        for name, seconds in intervals.items():
            self.target_interval.labels(name).set(seconds)

    def _remove_target(self, name: str) -> None:
        series = self._series.pop(name)
        for outcome in CHECK_OUTCOMES:
            self.checks.remove(name, outcome)
        for kind in CHANGE_KINDS:
            self.changes.remove(name, kind)
        for doc_outcome in DOCUMENT_OUTCOMES:
            self.documents.remove(name, doc_outcome)
        for rule in series.issues:
            self.issues.remove(name, rule)
        for metric in (self.check_duration, self.last_check, self.last_success, self.urls,
                       self.invalid, self.fetched_bytes):
            metric.remove(name)
        # Set only once its interval is known (set_intervals); prometheus-client before 0.22
        # raises KeyError for a label set it does not have.
        with suppress(KeyError):
            self.target_interval.remove(name)

    def add_channel(self, channel: str) -> None:
        """Create the label sets of an alert channel."""
        for outcome in ALERT_OUTCOMES:
            self.alerts.labels(channel, outcome)

    def observe(
        self,
        result: CheckResult,
        target_name: str,
        *,
        issue_counts: Mapping[str, int] | None = None,
        finished_at: datetime | None = None,
    ) -> None:
        """Record one check; ``issue_counts`` are the target's current issues by rule.

        Without ``issue_counts`` the issues this check reported are counted instead.
        """
        series = self._of(target_name)
        when = (finished_at or datetime.now().astimezone()).timestamp()
        series.checks[result.outcome].inc()
        series.duration.observe(result.duration_seconds)
        series.last_check.set(when)
        series.fetched_bytes.inc(result.fetched_bytes)
        for kind, count in result.change_counts().items():
            if count:
                series.changes[kind].inc(count)
        if result.outcome == "failed" and result.snapshot_id is None:
            # Nothing was stored: the counts say nothing about the target, keep the last ones.
            return
        if result.outcome != "failed":
            series.last_success.set(when)
        series.urls.set(result.urls)
        series.invalid.set(result.invalid)
        counts = issue_counts if issue_counts is not None else Tally(
            i.rule for i in result.issues)
        self._set_issues(series, counts)
        self._set_documents(series, Tally(d.outcome for d in result.documents))

    def restore(
        self,
        target_name: str,
        *,
        last_check: datetime | None,
        last_success: datetime | None,
        urls: int,
        invalid: int,
        issue_counts: Mapping[str, int],
        documents: Mapping[str, int],
    ) -> None:
        """Set a target's gauges from its last stored snapshot (at start-up)."""
        series = self._of(target_name)
        if last_check is not None:
            series.last_check.set(last_check.timestamp())
        if last_success is not None:
            series.last_success.set(last_success.timestamp())
        series.urls.set(urls)
        series.invalid.set(invalid)
        self._set_issues(series, issue_counts)
        self._set_documents(series, documents)

    def _set_issues(self, series: _Series, counts: Mapping[str, int]) -> None:
        for rule, count in counts.items():
            if count and rule not in series.issues:
                series.issues[rule] = self.issues.labels(series.name, rule)
        for rule, gauge in series.issues.items():
            gauge.set(counts.get(rule, 0))

    def _set_documents(self, series: _Series, counts: Mapping[str, int]) -> None:
        for outcome, gauge in series.documents.items():
            gauge.set(counts.get(outcome, 0))

    def alert_result(self, channel: str, outcome: str) -> None:
        """Count one delivery attempt of a notification (the outbox's ``on_result``)."""
        self.alerts.labels(channel, outcome).inc()

    def lease_lost(self) -> None:
        """Count a check rolled back because its replica no longer held the lease."""
        self.leases_lost.inc()

    def set_alerts_pending(self, count: int) -> None:
        """Set how many notifications wait in the outbox."""
        self.alerts_pending.set(count)

    def http_request_refused(self, lane: str) -> None:
        """Count one HTTP request refused by the admission gate."""
        self.http_refused.labels(lane).inc()

    def config_reloaded(self, ok: bool, when: datetime | None = None) -> None:
        """Record a configuration (re)load: refused (False) or applied (True)."""
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_time.set((when or datetime.now().astimezone()).timestamp())
