"""Rule evaluation: a table of pure cases, then sequences of checks through a real database."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from alerttools import T0, result, store_check
from sqlalchemy import Engine, select

from monitor.alerts.firing import evaluate
from monitor.alerts.payload import idempotency_key
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.model import Change, EntryState, RuleContext
from monitor.store.outbox import SqlOutbox, rule_context
from monitor.store.schema import alert_states, notifications

CHANNELS = [
    Channel(name="hook", type="webhook", url="http://127.0.0.1:9/hook"),
    Channel(name="am", type="alertmanager", url="http://127.0.0.1:9"),
]


def alerts(*rules: dict[str, Any], **delivery: Any) -> Alerts:
    """An alerts section with the two channels and the given rules."""
    return Alerts(
        channels=CHANNELS,
        rules=[Rule.model_validate({"name": "r", "channels": ["hook"], **r}) for r in rules],
        delivery=Delivery(**delivery),
    )


FIRING_R = {"r": T0 - timedelta(hours=1)}

# (id, rule, check counts, context, expected [(channel, state)])
CASES: list[tuple[str, dict[str, Any], dict[str, Any], RuleContext, list[tuple[str, str]]]] = [
    ("removed-below-threshold", {"when": "removed", "threshold": 100}, {"removed": 99},
     RuleContext(previous_urls=10_000), []),
    ("removed-at-threshold", {"when": "removed", "threshold": 100}, {"removed": 100},
     RuleContext(previous_urls=10_000), [("hook", "firing")]),
    ("removed-no-threshold-means-one", {"when": "removed"}, {"removed": 1},
     RuleContext(previous_urls=10), [("hook", "firing")]),
    ("removed-ratio-below", {"when": "removed", "ratio": "5%"}, {"removed": 49},
     RuleContext(previous_urls=1000), []),
    ("removed-ratio-at", {"when": "removed", "ratio": 0.05}, {"removed": 50},
     RuleContext(previous_urls=1000), [("hook", "firing")]),
    ("both-count-holds-ratio-not", {"when": "removed", "threshold": 100, "ratio": 0.05},
     {"removed": 200}, RuleContext(previous_urls=1_000_000), []),
    ("both-ratio-holds-count-not", {"when": "removed", "threshold": 100, "ratio": 0.05},
     {"removed": 60}, RuleContext(previous_urls=1000), []),
    ("both-hold", {"when": "removed", "threshold": 100, "ratio": 0.05},
     {"removed": 150}, RuleContext(previous_urls=1000), [("hook", "firing")]),
    ("changed-threshold", {"when": "changed", "threshold": 5}, {"changed": 5},
     RuleContext(previous_urls=10), [("hook", "firing")]),
    ("invalid-counts-newly-invalid", {"when": "invalid", "threshold": 3},
     {"invalid": 50, "invalid_new": 2}, RuleContext(previous_urls=10), []),
    ("invalid-newly-invalid-fires", {"when": "invalid", "threshold": 3},
     {"invalid": 50, "invalid_new": 3}, RuleContext(previous_urls=10), [("hook", "firing")]),
    ("added-not-on-first-check", {"when": "added"}, {"added": 500}, RuleContext(), []),
    ("added-later", {"when": "added", "threshold": 10}, {"added": 10},
     RuleContext(previous_urls=500, first_check_at=T0), [("hook", "firing")]),
    ("failed-check-keeps-content-rule-quiet", {"when": "removed"},
     {"outcome": "failed", "removed": 0}, RuleContext(previous_urls=10), []),
    ("failed-check-does-not-resolve", {"when": "removed"},
     {"outcome": "failed"}, RuleContext(previous_urls=10, firing=FIRING_R), []),
    ("check-failed-not-yet", {"when": "check_failed", "consecutive": 3}, {"outcome": "failed"},
     RuleContext(consecutive_failures=1), []),
    ("check-failed-third", {"when": "check_failed", "consecutive": 3}, {"outcome": "failed"},
     RuleContext(consecutive_failures=2), [("hook", "firing")]),
    ("check-failed-still-firing", {"when": "check_failed", "consecutive": 3},
     {"outcome": "failed"}, RuleContext(consecutive_failures=5, firing=FIRING_R), []),
    ("check-failed-resolves", {"when": "check_failed", "consecutive": 3}, {"outcome": "ok"},
     RuleContext(consecutive_failures=5, firing=FIRING_R), [("hook", "resolved")]),
    ("recovered-after-failures", {"when": "recovered", "consecutive": 2}, {"outcome": "ok"},
     RuleContext(consecutive_failures=2), [("hook", "firing")]),
    ("recovered-too-few-failures", {"when": "recovered", "consecutive": 2},
     {"outcome": "unchanged"}, RuleContext(consecutive_failures=1), []),
    ("recovered-not-while-failing", {"when": "recovered"}, {"outcome": "failed"},
     RuleContext(consecutive_failures=4), []),
    ("recovered-not-when-never-failed", {"when": "recovered"}, {"outcome": "ok"},
     RuleContext(), []),
    ("stale-after-duration", {"when": "stale", "duration": "2d"}, {"outcome": "unchanged"},
     RuleContext(last_content_change_at=T0 - timedelta(days=2)), [("hook", "firing")]),
    ("stale-not-yet", {"when": "stale", "duration": "2d"}, {"outcome": "unchanged"},
     RuleContext(last_content_change_at=T0 - timedelta(days=1, hours=23)), []),
    ("stale-uses-first-check-without-changes", {"when": "stale", "duration": "1h"},
     {"outcome": "unchanged"}, RuleContext(first_check_at=T0 - timedelta(hours=2)),
     [("hook", "firing")]),
    ("stale-cleared-by-a-change", {"when": "stale", "duration": "1h"}, {"changed": 1},
     RuleContext(last_content_change_at=T0 - timedelta(days=9), firing=FIRING_R),
     [("hook", "resolved")]),
    ("stale-first-check", {"when": "stale", "duration": "1h"}, {"outcome": "ok"},
     RuleContext(), []),
    ("url-count-below", {"when": "url_count_below", "count": 1000}, {"urls": 999},
     RuleContext(), [("hook", "firing")]),
    ("url-count-at-minimum", {"when": "url_count_below", "count": 1000}, {"urls": 1000},
     RuleContext(), []),
    ("url-count-resolves", {"when": "url_count_below", "count": 1000}, {"urls": 1000},
     RuleContext(firing=FIRING_R), [("hook", "resolved")]),
    ("target-glob-matches", {"when": "removed", "targets": ["sh*"]}, {"removed": 1},
     RuleContext(previous_urls=5), [("hook", "firing")]),
    ("target-glob-excludes", {"when": "removed", "targets": ["blog-*", "news"]},
     {"removed": 1}, RuleContext(previous_urls=5), []),
    # events: each check that holds notifies once; nothing to resolve
    ("removed-is-an-event-each-check", {"when": "removed"}, {"removed": 7},
     RuleContext(previous_urls=50, firing=FIRING_R), [("hook", "firing")]),
    ("an-event-goes-to-every-channel", {"when": "removed", "channels": ["hook", "am"]},
     {"removed": 7}, RuleContext(previous_urls=50), [("hook", "firing"), ("am", "firing")]),
    ("an-event-has-nothing-to-resolve", {"when": "removed", "channels": ["hook", "am"]},
     {"removed": 0}, RuleContext(previous_urls=50, firing=FIRING_R), []),
    # a removal ratio counts only URLs that were valid: a cleanup is never a mass removal
    ("removing-an-invalid-entry-is-no-removal", {"when": "removed"},
     {"removed": 1, "removed_invalid": 1}, RuleContext(previous_urls=2), []),
    ("removed-ratio-of-valid-urls", {"when": "removed", "ratio": 0.05},
     {"removed": 60, "removed_invalid": 20}, RuleContext(previous_urls=1000), []),
    ("removed-ratio-of-valid-urls-at", {"when": "removed", "ratio": 0.05},
     {"removed": 70, "removed_invalid": 20}, RuleContext(previous_urls=1000),
     [("hook", "firing")]),
    # issues: one alert when the count of current issues of the globs starts to hold
    ("issues-start-to-hold", {"when": "issues", "rule": ["lastmod-*"], "threshold": 10},
     {"urls": 100, "issue_counts": {"lastmod-invalid": 8, "lastmod-future": 4}},
     RuleContext(previous_urls=100, previous_issue_counts={"lastmod-invalid": 3}),
     [("hook", "firing")]),
    ("issues-that-held-before-are-no-news", {"when": "issues", "rule": ["lastmod-invalid"],
                                             "threshold": 10},
     {"urls": 100, "issue_counts": {"lastmod-invalid": 50}},
     RuleContext(previous_urls=100, previous_issue_counts={"lastmod-invalid": 10}), []),
    ("issues-of-other-rules-do-not-count", {"when": "issues", "rule": ["priority-invalid"]},
     {"urls": 100, "issue_counts": {"lastmod-invalid": 50}}, RuleContext(previous_urls=100), []),
    ("issues-ratio-of-urls", {"when": "issues", "rule": ["*-invalid"], "ratio": 0.5},
     {"urls": 100, "issue_counts": {"lastmod-invalid": 30, "priority-invalid": 20}},
     RuleContext(previous_urls=100), [("hook", "firing")]),
    ("issues-not-on-a-failed-check", {"when": "issues", "rule": ["*"]},
     {"outcome": "failed", "issue_counts": {"xml-malformed": 1}}, RuleContext(), []),
    # states: fire once, Alertmanager is re-sent, resolve to every channel
    ("state-fires-once-not-again", {"when": "check_failed"}, {"outcome": "failed"},
     RuleContext(consecutive_failures=3, firing=FIRING_R), []),
    ("alertmanager-gets-re-sends", {"when": "check_failed", "channels": ["hook", "am"]},
     {"outcome": "failed"}, RuleContext(consecutive_failures=3, firing=FIRING_R),
     [("am", "firing")]),
    ("resolve-to-every-channel", {"when": "check_failed", "channels": ["hook", "am"]},
     {"outcome": "ok"}, RuleContext(consecutive_failures=3, firing=FIRING_R),
     [("hook", "resolved"), ("am", "resolved")]),
]


@pytest.mark.parametrize(("rule", "counts", "context", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_evaluate(rule: dict[str, Any], counts: dict[str, Any], context: RuleContext,
                  expected: list[tuple[str, str]]) -> None:
    """Each rule kind fires, stays quiet or resolves exactly as the table says."""
    check = result(**counts, snapshot_id=7)
    notes = evaluate(alerts(rule), "shop", check, context, T0)
    assert [(n.channel, n.state) for n in notes] == expected
    for n in notes:
        assert n.idempotency_key == idempotency_key("shop", "r", n.channel, 7, n.state)
        assert n.payload["state"] == n.state


def test_payload_names_target_rule_counts_examples_and_link() -> None:
    """The payload carries what a person needs, capped at delivery.examples URLs per kind."""
    check = replace(result(removed=30, added=2, urls=970, duration_seconds=2.5, snapshot_id=42),
                    changes=[*(Change("removed", f"https://shop.example/p/{i}", EntryState(),
                                      None) for i in range(30)),
                             Change("added", "https://shop.example/new", None, EntryState())])
    cfg = alerts({"when": "removed", "threshold": 10, "severity": "critical"},
                 examples=5, api_base_url="https://monitor.example/")
    [note] = evaluate(cfg, "shop/eu", check, RuleContext(previous_urls=1000), T0)
    p = note.payload
    assert (p["target"], p["rule"], p["severity"], p["snapshot_id"]) == (
        "shop/eu", "r", "critical", 42)
    assert p["counts"]["removed"] == 30
    assert p["counts"]["previous_urls"] == 1000
    assert p["examples"]["removed"] == [f"https://shop.example/p/{i}" for i in range(5)]
    assert "added" not in p["examples"]  # a removal rule's examples are removals only
    assert p["examples_truncated"] is True
    assert "30 URLs removed (3.0% of 1000)" in p["summary"]
    # bounded by the check's snapshot on both sides
    assert p["link"] == ("https://monitor.example/api/v1/targets/shop%2Feu/changes"
                         "?kind=removed&since=42&until=42")
    # the web page of the same changes
    assert p["page"] == ("https://monitor.example/targets/shop%2Feu/changes"
                         "?kind=removed&since=42&until=42")


def test_snapshot_id_is_required() -> None:
    """Without a snapshot id two checks would share idempotency keys: refused."""
    with pytest.raises(ValueError, match="snapshot id"):
        evaluate(alerts({"when": "removed"}), "shop", result(removed=1), RuleContext(), T0)


def test_link_is_omitted_without_api_base_url() -> None:
    """No api_base_url, no link (never a relative or guessed one)."""
    check = result(removed=1, snapshot_id=1)
    [note] = evaluate(alerts({"when": "removed"}), "shop", check, RuleContext(previous_urls=3),
                      T0)
    assert note.payload["link"] is None
    assert note.payload["page"] is None


def test_sequence_fires_once_and_resolves(engine: Engine) -> None:
    """Through the store: fire, stay quiet while firing, resolve, fire again later."""
    cfg = alerts({"when": "url_count_below", "count": 1000, "channels": ["hook", "am"]})
    steps = [  # (urls, expected states) ; every step is one check an hour apart
        (1000, []),
        (500, [("hook", "firing"), ("am", "firing")]),
        (600, [("am", "firing")]),
        (1000, [("hook", "resolved"), ("am", "resolved")]),
        (1000, []),
        (10, [("hook", "firing"), ("am", "firing")]),
    ]
    for i, (urls, expected) in enumerate(steps):
        now = T0 + timedelta(hours=i)
        notes = store_check(engine, cfg, result(urls=urls, added=1000 * (i == 0)), now)
        assert [(n.channel, n.state) for n in notes] == expected, f"step {i}"
    with engine.connect() as conn:
        state = conn.execute(select(alert_states)).one()
        states = [r.state for r in conn.execute(select(notifications.c.state)
                                                .order_by(notifications.c.id))]
    assert state.firing is True
    assert state.since.replace(tzinfo=None) == (T0 + timedelta(hours=5)).replace(tzinfo=None)
    assert states.count("firing") == 5
    assert states.count("resolved") == 2
    assert SqlOutbox(engine).pending_count() == 7


def test_re_send_keeps_the_start_time(engine: Engine) -> None:
    """Alertmanager re-sends carry the original startsAt, so it stays one alert."""
    cfg = alerts({"when": "check_failed", "channels": ["am"]})
    first = store_check(engine, cfg, result(outcome="failed"), T0)
    again = store_check(engine, cfg, result(outcome="failed"), T0 + timedelta(minutes=15))
    assert first[0].payload["since"] == again[0].payload["since"] == "2025-01-06T12:00:00Z"
    assert first[0].idempotency_key != again[0].idempotency_key


def test_rule_context_from_history(engine: Engine) -> None:
    """Previous URL count skips failed checks; failures are counted since the last success."""
    cfg = alerts()  # no rules: only the history matters here
    store_check(engine, cfg, result(urls=100, added=100), T0)
    store_check(engine, cfg, result(outcome="unchanged", urls=100), T0 + timedelta(hours=1))
    store_check(engine, cfg, result(outcome="failed"), T0 + timedelta(hours=2))
    store_check(engine, cfg, result(outcome="failed"), T0 + timedelta(hours=3))
    store_check(engine, cfg, result(outcome="failed"), T0 + timedelta(hours=4))  # "current"
    with engine.connect() as conn:
        ctx = rule_context(conn, "shop", T0 + timedelta(hours=4))
        earlier = rule_context(conn, "shop", T0, current_snapshot_id=2)
        unknown = rule_context(conn, "nobody", T0)
    assert ctx.previous_urls == 100
    assert ctx.consecutive_failures == 2
    assert ctx.last_content_change_at == T0
    assert ctx.first_check_at == T0
    assert (earlier.previous_urls, earlier.consecutive_failures) == (100, 0)
    assert unknown == RuleContext()


def test_write_is_idempotent_on_the_key(engine: Engine) -> None:
    """Writing the same notification twice (a retried transaction) stores one row."""
    cfg = alerts({"when": "removed"})
    notes = store_check(engine, cfg, result(removed=3, urls=10), T0 + timedelta(hours=1))
    from monitor.store.outbox import write

    with engine.begin() as conn:
        write(conn, notes[0].payload["snapshot_id"], notes, T0 + timedelta(hours=1))
    assert SqlOutbox(engine).pending_count() == 1


def test_events_notify_once_each_and_never_resolve(engine: Engine) -> None:
    """Through the store: two removals are two messages; the quiet checks between and after
    send nothing, no "resolved" that would read as "the URLs came back"."""
    cfg = alerts({"when": "removed", "channels": ["hook", "am"]})
    steps = [(0, []), (5, ["hook", "am"]), (0, []), (3, ["hook", "am"]), (0, [])]
    for i, (removed, expected) in enumerate(steps):
        check = result(urls=1000 - i, removed=removed, added=1000 * (i == 0))
        notes = store_check(engine, cfg, check, T0 + timedelta(hours=i))
        assert [(n.channel, n.state) for n in notes] == [(c, "firing") for c in expected]
        assert all(n.payload["event"] for n in notes)
    with engine.connect() as conn:
        states = [r.state for r in conn.execute(select(notifications.c.state))]
        assert conn.execute(select(alert_states)).all() == []  # an event keeps no state
    assert states == ["firing"] * 4


def test_a_channel_without_send_resolved_is_not_told_but_the_state_clears(
    engine: Engine,
) -> None:
    quiet = Channel(name="quiet", type="webhook", url="http://127.0.0.1:9/q",
                    send_resolved=False)
    cfg = Alerts(channels=[*CHANNELS, quiet], rules=[
        Rule(name="r", when="url_count_below", count=100, channels=["hook", "quiet"])])
    fired = store_check(engine, cfg, result(urls=10), T0)
    assert [(n.channel, n.state) for n in fired] == [("hook", "firing"), ("quiet", "firing")]
    cleared = store_check(engine, cfg, result(urls=100), T0 + timedelta(hours=1))
    assert [(n.channel, n.state, n.send) for n in cleared] == [
        ("hook", "resolved", True), ("quiet", "resolved", False)]
    again = store_check(engine, cfg, result(urls=5), T0 + timedelta(hours=2))
    assert [n.channel for n in again] == ["hook", "quiet"]  # it fires anew: the state cleared
    with engine.connect() as conn:
        rows = [(r.channel, r.state) for r in conn.execute(
            select(notifications.c.channel, notifications.c.state).order_by(notifications.c.id))]
    assert rows == [("hook", "firing"), ("quiet", "firing"), ("hook", "resolved"),
                    ("hook", "firing"), ("quiet", "firing")]


def test_issues_fire_once_when_the_cms_starts_writing_bad_dates(engine: Engine) -> None:
    """The previous check's issues come from its stored snapshot."""
    cfg = alerts({"when": "issues", "rule": ["lastmod-invalid"], "ratio": 0.5})
    counts = [{}, {"lastmod-invalid": 900}, {"lastmod-invalid": 1000}, {}, {"lastmod-invalid": 600}]
    fired = []
    summaries = []
    for i, issue_counts in enumerate(counts):
        check = result(urls=1000, added=1000 * (i == 0), issue_counts=issue_counts)
        notes = store_check(engine, cfg, check, T0 + timedelta(hours=i))
        fired.append([(n.channel, n.state) for n in notes])
        summaries.extend(n.payload["summary"] for n in notes)
    assert fired == [[], [("hook", "firing")], [], [], [("hook", "firing")]]
    assert summaries[0] == ("shop: 900 current issues of lastmod-invalid (90.0% of 1000 URLs) "
                            "(previous check: 0)")


# ---- the URL checks' rules ----------------------------------------------------------

def url_round(states: dict[str, int], reasons: dict[str, int] | None = None) -> Any:
    from monitor.alerts.firing import UrlRound

    listed = sum(states.values())
    return UrlRound("http://127.0.0.1/s.xml", 7, listed, states, reasons or {},
                    {"not-found": ["http://127.0.0.1/a"], "removed:live": ["http://127.0.0.1/b"]},
                    T0)


@pytest.mark.parametrize(("rule", "states", "firing", "expected"), [
    ({"when": "url_health"}, {"ok": 99, "not-found": 1}, {}, [("hook", "firing")]),
    ({"when": "url_health"}, {"ok": 99, "unknown": 1}, {}, []),  # unknown is never broken
    ({"when": "url_health", "state": ["noindex"]}, {"ok": 9, "not-found": 1}, {}, []),
    ({"when": "url_health", "ratio": "5%"}, {"ok": 96, "gone": 4}, {}, []),
    ({"when": "url_health", "ratio": "5%"}, {"ok": 95, "gone": 5}, {}, [("hook", "firing")]),
    ({"when": "url_health", "threshold": 2}, {"ok": 9, "gone": 1}, FIRING_R,
     [("hook", "resolved")]),
    # still firing: only Alertmanager hears it again
    ({"when": "url_health", "channels": ["hook", "am"]}, {"gone": 1}, FIRING_R,
     [("am", "firing")]),
])
def test_url_health_is_a_state(rule: dict[str, Any], states: dict[str, int],
                               firing: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    from monitor.alerts.firing import evaluate_urls

    found = evaluate_urls(alerts(rule), "shop", url_round(states), firing, T0)
    assert [(n.channel, n.state) for n in found] == expected


def test_removals_by_reason_fire_from_the_url_checks_only() -> None:
    from monitor.alerts.firing import evaluate_urls

    cfg = alerts({"when": "removed", "reason": ["live"]})
    found = evaluate_urls(cfg, "shop", url_round({"ok": 5}, {"live": 1, "gone": 3}), {}, T0)
    assert [(n.channel, n.state, n.payload["event"]) for n in found] == [
        ("hook", "firing", True)]
    assert found[0].payload["examples"] == {"removed:live": ["http://127.0.0.1/b"]}
    assert evaluate_urls(cfg, "shop", url_round({"ok": 5}, {"gone": 3}), {}, T0) == []
    # the check itself does not judge it: its removals have no reason yet
    assert evaluate(cfg, "shop", result(removed=5, snapshot_id=3), RuleContext(
        previous_urls=10), T0) == []
