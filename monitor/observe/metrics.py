"""Every metric (docs/metrics.md), on an injected CollectorRegistry.

Labels are configured names only (never a URL), and every label set of a configured target
or channel exists from the start (at zero), so a dashboard or an ``increase()`` has a series
before the first event; the exceptions are ``issues{rule}`` and ``documents{outcome}``, which
have a series for each rule or outcome the target has had (at 0 once it clears), not for each
one there is. Gauges are restored from the database at start-up (``restore``), so a restart
does not blank a dashboard; counters start at zero, which Prometheus reads as a reset.

Series per target are what a scrape costs (68 a target made a 20,000-target scrape
104 MB and 9 s of CPU): one per check outcome and per change kind, the histogram's, one for
each plain gauge and counter, plus one per document outcome and per issue rule the target has
had (docs/metrics.md counts them). The counters' ``_created`` series are not exported
(Prometheus reads a reset from the counter itself).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

from monitor import __version__
from monitor.core import sampling
from monitor.core.model import URL_STATES, CheckResult
from monitor.observe.targetseries import Targets, TargetSeries

# What a URL check may find: a state, or (a conditional re-check answered 304) that the page
# did not change, its state standing.
URL_CHECK_OUTCOMES: tuple[str, ...] = (*URL_STATES, "not_modified")

__all__ = ["ALERT_OUTCOMES", "HTTP_LANES", "INDEXNOW_OUTCOMES", "PREFIX", "Metrics"]

PREFIX = "sitemap_monitor"
# What the outbox's Deliverer reports per attempt (alerts.outbox.Outcome).
ALERT_OUTCOMES = ("sent", "retry", "failed", "expired")
# What the IndexNow submitter reports, in URLs (monitor.indexnow.protocol.OUTCOMES).
INDEXNOW_OUTCOMES = ("submitted", "rejected", "retry", "key_missing", "expired",
                     "out_of_scope")
# The bounds of the HTTP port's admission (api.Admission); /healthz has none.
HTTP_LANES = ("api", "metrics", "readyz", "login")
# Checks take from milliseconds (a 304) to minutes (a 50,000-child index): a 304 or a small
# sitemap, a few documents, 500,000 URLs (2-10 s), a large index, beyond. Four bounds, as
# each is one more series per target.
DURATION_BUCKETS = (0.5, 5.0, 30.0, 300.0)

# Each counter's ``_created`` series doubles it for nothing a rule or dashboard here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]


class _Collectors:
    """Some metrics, as ``generate_latest`` takes a registry."""

    def __init__(self, metrics: Sequence[Counter | Gauge]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield from metric.collect()


class Metrics:
    """The daemon's metrics; one instance per registry.

    The per-target series are kept by ``Targets`` (monitor.observe.targetseries) as plain numbers;
    the few others are prometheus_client metrics. ``exposition`` is what a scrape sends."""

    def __init__(
        self, registry: CollectorRegistry, targets: Iterable[str], channels: Iterable[str]
    ) -> None:
        r = registry
        p = PREFIX
        self.targets = Targets(p, DURATION_BUCKETS)
        # Per replica, not per target: a rare event, its target is in the log line.
        self.leases_lost = Counter(
            f"{p}_leases_lost", "Checks rolled back, writing nothing, because another replica "
            "had taken the target's lease meanwhile (this one was paused past it).", registry=r)
        # Per replica: what scale-out costs. A replica that finds nothing due asks
        # once a second (scheduler.POLL); many empty claims beside few checks is waste.
        self.claims = Counter(
            f"{p}_claims", "Statements that claimed due targets, by whether they got some "
            "(claimed) or found none due and free (empty).", ["outcome"], registry=r)
        self.alerts = Counter(
            f"{p}_alerts", "Notification delivery attempts, by channel and outcome.",
            ["channel", "outcome"], registry=r)
        self.alerts_pending = Gauge(
            f"{p}_alerts_pending", "Notifications in the outbox not yet delivered.", registry=r)
        self.database_bytes = Gauge(
            f"{p}_database_bytes", "Size of the database: SQLite's file (pages a prune freed "
            "included, they are reused), PostgreSQL's pg_database_size.", registry=r)
        self.build_info = Gauge(
            f"{p}_build_info", "Always 1; the version label says which build runs.", ["version"],
            registry=r)
        self.reload_ok = Gauge(
            f"{p}_config_last_reload_successful",
            "Whether the last configuration reload succeeded (1) or was refused (0).", registry=r)
        self.reload_time = Gauge(
            f"{p}_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully (Unix time).", registry=r)
        self.http_refused = Counter(
            f"{p}_http_requests_refused", "HTTP requests refused, by lane: 503 beyond "
            "their bound; login: a password check refused (all busy, or 429 to an address "
            "whose logins keep failing).",
            ["lane"], registry=r)
        # The URL checks, for the targets that enable them only (opt-in).
        self.url_health = Gauge(
            f"{p}_url_health", "Listed URLs in each health state.",
            ["target", "state"], registry=r)
        self.url_checks = Counter(
            f"{p}_url_checks", "URL checks, by the state each found (unknown: no answer to "
            "trust, such as a timeout, 429 or 503).", ["target", "outcome"], registry=r)
        self.url_coverage = Gauge(
            f"{p}_url_check_coverage_ratio",
            "Share of the listed URLs checked within url_checks.recheck.", ["target"],
            registry=r)
        self.url_estimate = Gauge(
            f"{p}_url_health_estimate",
            "Estimated share of the listed URLs in each health state, from a random sample "
            "until every URL was checked, then the count's share.", ["target", "state"],
            registry=r)
        self.url_estimate_margin = Gauge(
            f"{p}_url_health_estimate_margin",
            "Margin of url_health_estimate: its 95% interval lies within estimate +/- margin "
            "(0 once every listed URL was checked).", ["target", "state"], registry=r)
        # IndexNow (opt-in): URLs by what became of their submission, for the targets that
        # submit only.
        self.indexnow_urls = Counter(
            f"{p}_indexnow_urls", "URLs of IndexNow submissions, by outcome: submitted (200 "
            "or 202), rejected (400, 403, 422), retry (an attempt to try again), key_missing "
            "(held: the host's key file did not verify), expired, out_of_scope (left out: not on "
            "the origin of one of the target's sitemaps, or outside the key file's folder).",
            ["target", "outcome"], registry=r)
        self._url_targets: set[str] = set()
        self._indexnow_targets: set[str] = set()
        self._plain = (self.leases_lost, self.claims, self.alerts, self.alerts_pending,
                       self.database_bytes,
                       self.build_info, self.reload_ok, self.reload_time, self.http_refused,
                       self.url_health, self.url_checks, self.url_coverage, self.indexnow_urls,
                       self.url_estimate, self.url_estimate_margin)
        registry.register(self.targets)
        self.build_info.labels(__version__).set(1)
        for lane in HTTP_LANES:
            self.http_refused.labels(lane)
        for outcome in ("claimed", "empty"):
            self.claims.labels(outcome)
        self.set_targets(targets)
        for channel in channels:
            self.add_channel(channel)

    def exposition(self) -> bytes:
        """The text a scrape gets: the few metrics through prometheus_client, the targets' from
        their numbers (a 20,000-target scrape: 3.6 s of CPU through prometheus_client, 0.4 s so)."""
        plain = generate_latest(_Collectors(self._plain))
        return plain + self.targets.render().encode()

    def set_targets(self, names: Iterable[str]) -> None:
        """Create the label sets of these targets and drop those of targets no longer configured."""
        for _ in self.set_targets_in_steps(names):
            pass

    def set_targets_in_steps(self, names: Iterable[str], step: int = 500) -> Iterator[None]:
        """``set_targets``, pausing (yielding) after every ``step`` targets added or dropped,
        so that a caller on an event loop answers between steps."""
        wanted = set(names)
        for count, name in enumerate(set(self.targets.series) - wanted, 1):
            del self.targets.series[name]
            if count % step == 0:
                yield
        for count, name in enumerate(wanted - set(self.targets.series), 1):
            self.targets.add(name)
            if count % step == 0:
                yield

    def _of(self, name: str) -> TargetSeries:
        """A target's series, created (at zero) on first sight."""
        return self.targets.add(name)

    def set_intervals(self, intervals: Mapping[str, float]) -> None:
        """Each configured target's check interval, in seconds (a target's series goes with
        its others in ``set_targets``)."""
        for name, seconds in intervals.items():
            series = self.targets.series.get(name)
            if series is not None:
                series.interval = float(seconds)

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
        series.checks[result.outcome] += 1
        self.targets.observe_duration(series, result.duration_seconds)
        series.last_check = when
        series.fetched_bytes += result.fetched_bytes
        for kind, count in result.change_counts().items():
            if count:
                series.changes[kind] += count
        if result.outcome in ("failed", "error") and result.snapshot_id is None:
            # Nothing was stored: the counts say nothing about the target, keep the last ones.
            return
        if result.outcome != "failed":
            series.last_success = when
        series.urls = float(result.urls)
        series.invalid = float(result.invalid)
        if result.lastmod_churn is not None:  # a re-check (a baseline compares nothing)
            series.lastmod_churn = result.lastmod_churn
        counts = issue_counts if issue_counts is not None else Tally[str](
            i.rule for i in result.issues)
        _set_seen(series.issues, counts)
        _set_seen(series.documents, Tally(d.outcome for d in result.documents))

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
        lastmod_churn: float = 0.0,
    ) -> None:
        """Set a target's gauges from its last stored snapshot (at start-up)."""
        series = self._of(target_name)
        if last_check is not None:
            series.last_check = last_check.timestamp()
        if last_success is not None:
            series.last_success = last_success.timestamp()
        series.urls = float(urls)
        series.invalid = float(invalid)
        series.lastmod_churn = lastmod_churn
        _set_seen(series.issues, issue_counts)
        _set_seen(series.documents, documents)

    def set_url_targets(self, names: Iterable[str]) -> None:
        """The targets whose URLs are checked: their label sets at zero; others' dropped."""
        wanted = set(names)
        for name in self._url_targets - wanted:
            for state in URL_STATES:
                self.url_health.remove(name, state)
                self.url_estimate.remove(name, state)
                self.url_estimate_margin.remove(name, state)
            for outcome in URL_CHECK_OUTCOMES:
                self.url_checks.remove(name, outcome)
            self.url_coverage.remove(name)
        for name in wanted - self._url_targets:
            for state in URL_STATES:
                self.url_health.labels(name, state)
                self.url_estimate.labels(name, state)
                self.url_estimate_margin.labels(name, state)
            for outcome in URL_CHECK_OUTCOMES:
                self.url_checks.labels(name, outcome)
            self.url_coverage.labels(name)
        self._url_targets = wanted

    def observe_urls(self, name: str, outcomes: Mapping[str, int], states: Mapping[str, int],
                     listed: int, covered: int, strata: sampling.Strata | None = None) -> None:
        """Record a round of URL checks: the states each check found, and the target's
        listed URLs per state, coverage and estimate (from ``strata``) after it."""
        if name not in self._url_targets:
            return
        for state, count in outcomes.items():
            self.url_checks.labels(name, state).inc(count)
        for state in URL_STATES:
            self.url_health.labels(name, state).set(states.get(state, 0))
        self.url_coverage.labels(name).set(covered / listed if listed else 0.0)
        if strata is not None:
            for state, found in sampling.estimate(strata, URL_STATES).items():
                self.url_estimate.labels(name, state).set(found.share)
                self.url_estimate_margin.labels(name, state).set(found.margin)

    def set_indexnow_targets(self, names: Iterable[str]) -> None:
        """The targets that submit to IndexNow: their label sets at zero; others' dropped."""
        wanted = set(names)
        for name in self._indexnow_targets - wanted:
            for outcome in INDEXNOW_OUTCOMES:
                self.indexnow_urls.remove(name, outcome)
        for name in wanted - self._indexnow_targets:
            for outcome in INDEXNOW_OUTCOMES:
                self.indexnow_urls.labels(name, outcome)
        self._indexnow_targets = wanted

    def indexnow_result(self, target: str, outcome: str, urls: int) -> None:
        """Count the URLs of one IndexNow delivery attempt (the submitter's ``on_result``)."""
        if target in self._indexnow_targets:
            self.indexnow_urls.labels(target, outcome).inc(urls)

    def alert_result(self, channel: str, outcome: str) -> None:
        """Count one delivery attempt of a notification (the outbox's ``on_result``)."""
        self.alerts.labels(channel, outcome).inc()

    def claimed(self, count: int) -> None:
        """Count one claim statement that got ``count`` targets."""
        self.claims.labels("claimed" if count else "empty").inc()

    def lease_lost(self) -> None:
        """Count a check rolled back because its replica no longer held the lease."""
        self.leases_lost.inc()

    def set_alerts_pending(self, count: int) -> None:
        """Set how many notifications wait in the outbox."""
        self.alerts_pending.set(count)

    def set_database_bytes(self, size: int) -> None:
        """Set the database's size in bytes."""
        self.database_bytes.set(size)

    def http_request_refused(self, lane: str) -> None:
        """Count one HTTP request refused by the admission gate."""
        self.http_refused.labels(lane).inc()

    def config_reloaded(self, ok: bool, when: datetime | None = None) -> None:
        """Record a configuration (re)load: refused (False) or applied (True)."""
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_time.set((when or datetime.now().astimezone()).timestamp())


def _set_seen(values: dict[str, float], counts: Mapping[str, int]) -> None:
    """Set a target's labelled gauge to these counts: a series for each label that has ever
    had one (a new one when it first has), at 0 while it has none."""
    for label, count in counts.items():
        if count:
            values.setdefault(label, 0.0)
    for label in values:
        values[label] = float(counts.get(label, 0))
