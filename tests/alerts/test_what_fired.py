"""A notification says exactly what fired: the documents and errors behind it, the listing that
shows it (filters set), a robots.txt change as a diff, and for ``url_health`` one message for
each round that finds newly broken URLs (pure cases of the rules)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from alerttools import T0, result

from monitor.alerts.firing import UrlRound, evaluate, evaluate_urls
from monitor.alerts.payload import text_lines
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.model import Change, DocumentResult, EntryState, Issue, RuleContext

BASE = "https://monitor.example"
CHANNELS = [Channel(name="hook", type="webhook", url="http://127.0.0.1:9/hook"),
            Channel(name="am", type="alertmanager", url="http://127.0.0.1:9")]
FIRING = {"r": T0 - timedelta(hours=1)}
CHILD = "https://shop.example/child-2.xml"


def alerts(**rule: Any) -> Alerts:
    return Alerts(channels=CHANNELS, delivery=Delivery(api_base_url=BASE, examples=2),
                  rules=[Rule.model_validate({"name": "r", "channels": ["hook", "am"], **rule})])


def partial_check(**counts: Any) -> Any:
    return replace(
        result(outcome="partial", urls=282, snapshot_id=9, **counts),
        documents=[
            DocumentResult("https://shop.example/index.xml", "ok", http_status=200),
            DocumentResult(CHILD, "failed", http_status=500,
                           error=f"HTTP 500 Internal Server Error from {CHILD}")],
        issues=[Issue("child-fetch-failed", f"HTTP 500 Internal Server Error from {CHILD}",
                      loc=CHILD, document="https://shop.example/index.xml")],
        issue_counts={"child-fetch-failed": 1})


def test_a_partial_check_is_a_state_that_names_its_documents() -> None:
    cfg = alerts(when="partial")
    [hook, _am] = evaluate(cfg, "shop", partial_check(), RuleContext(previous_urls=282), T0)
    p = hook.payload
    assert (hook.state, p["event"]) == ("firing", False)
    assert p["summary"] == (f"shop: 1 document(s) could not be read: {CHILD} "
                            f"(HTTP 500 Internal Server Error from {CHILD})")
    assert p["documents"] == [{"url": CHILD, "http_status": 500,
                               "error": f"HTTP 500 Internal Server Error from {CHILD}"}]
    assert p["page"] == f"{BASE}/targets/shop/issues?rule=child-fetch-failed&at=9"
    # still partial: only Alertmanager hears it again; a failed check cannot tell; ok resolves
    again = evaluate(cfg, "shop", partial_check(), RuleContext(firing=FIRING), T0)
    assert [n.channel for n in again] == ["am"]
    failed = result(outcome="failed", snapshot_id=10)
    assert [n.channel for n in evaluate(cfg, "shop", failed, RuleContext(firing=FIRING),
                                        T0)] == ["am"]
    ok = result(outcome="ok", snapshot_id=11)
    assert [(n.channel, n.state) for n in evaluate(cfg, "shop", ok, RuleContext(firing=FIRING),
                                                   T0)] == [("hook", "resolved"),
                                                            ("am", "resolved")]


def test_an_issues_alert_names_the_document_and_its_error() -> None:
    cfg = alerts(when="issues", rule=["child-fetch-failed"])
    [note, _] = evaluate(cfg, "shop", partial_check(), RuleContext(previous_urls=282), T0)
    p = note.payload
    assert p["summary"].endswith(f": {CHILD}: HTTP 500 Internal Server Error from {CHILD}")
    assert p["examples"] == {"child-fetch-failed": [CHILD]}
    assert p["issues"][0]["message"].startswith("HTTP 500")
    assert p["link"] == f"{BASE}/api/v1/targets/shop/issues?rule=child-fetch-failed&at=9"
    assert p["page"] == f"{BASE}/targets/shop/issues?rule=child-fetch-failed&at=9"


def test_a_robots_alert_carries_the_diff_and_no_url_examples() -> None:
    check = replace(result(snapshot_id=4, added=1, urls=3),
                    changes=[Change("added", "https://shop.example/new", None, EntryState())],
                    robots=[{"url": "https://shop.example/robots.txt", "http_status": 200,
                             "changed": True, "before": "User-agent: *\nAllow: /\n",
                             "after": "User-agent: *\nDisallow: /\n"}])
    [note, _] = evaluate(alerts(when="robots_changed"), "shop", check,
                         RuleContext(previous_urls=2, first_check_at=T0), T0)
    p = note.payload
    assert p["examples"] == {}
    [robots] = p["robots"]
    assert robots["diff"].splitlines()[2:] == ["@@ -1,2 +1,2 @@", " User-agent: *",
                                               "-Allow: /", "+Disallow: /"]
    assert (robots["added"], robots["removed"], robots["diff_truncated"]) == (1, 1, False)
    # bounded by the check's snapshot: the same rows a month later
    assert p["page"] == f"{BASE}/targets/shop/changes?kind=robots&since=4&until=4"
    assert "  +Disallow: /" in text_lines(p)


def test_a_mass_removal_says_a_child_left_the_index() -> None:
    check = replace(result(snapshot_id=5, removed=2, urls=1),
                    dropped_documents={"https://shop.example/c.xml": 2})
    [note, _] = evaluate(alerts(when="removed", ratio=0.5), "shop", check,
                         RuleContext(previous_urls=3), T0)
    assert note.payload["summary"] == ("shop: 2 URLs removed (66.7% of 3); the index no "
                                       "longer lists https://shop.example/c.xml (2 URLs)")
    assert note.payload["dropped_documents"] == [{"url": "https://shop.example/c.xml",
                                                  "urls": 2}]


def test_live_removals_link_to_the_live_removals() -> None:
    found = UrlRound("https://shop.example/s.xml", 7, 5, {"ok": 5}, {"live": 1, "gone": 2},
                     {"removed:live": ["https://shop.example/b"]}, T0, removed_snapshots=(5, 6))
    [note, _] = evaluate_urls(alerts(when="removed", reason=["live"]), "shop", found, {}, T0)
    # bounded by the snapshots whose removals the round triaged: later ones are not listed
    assert note.payload["link"] == (f"{BASE}/api/v1/targets/shop/changes?kind=removed"
                                    "&reason=live&since=5&until=6")
    assert note.payload["page"] == (f"{BASE}/targets/shop/changes?kind=removed&reason=live"
                                    "&since=5&until=6")


def url_round(states: dict[str, int], *, new: dict[str, list[str]] | None = None,
              complete: bool = True, unchecked: int = 0) -> UrlRound:
    current = {s: [f"https://shop.example/{s}/{i}" for i in range(n)]
               for s, n in states.items() if s != "ok"}
    new = new or {}
    return UrlRound("https://shop.example/s.xml", 7, sum(states.values()), states, {}, new, T0,
                    new={s: len(v) for s, v in new.items()}, complete=complete,
                    unchecked=unchecked, current=current)


def test_no_url_health_count_before_the_first_complete_round() -> None:
    cfg = alerts(when="url_health")
    early = url_round({"ok": 3, "not-found": 2, "unknown": 9}, complete=False, unchecked=9)
    assert evaluate_urls(cfg, "shop", early, {}, T0) == []
    done = url_round({"ok": 7, "not-found": 7})
    [hook, _am] = evaluate_urls(cfg, "shop", done, {}, T0)
    assert hook.payload["summary"] == "shop: 7 listed URLs " + "/".join(
        ["not-found", "gone", "forbidden", "client-error", "server-error", "noindex", "soft-404",
         "disallowed"]) + (
        " (50.0% of 14): not-found 7")
    assert hook.payload["examples"] == {"not-found": ["https://shop.example/not-found/0",
                                                      "https://shop.example/not-found/1"]}
    assert hook.payload["examples_truncated"] is True
    assert hook.payload["page"] == f"{BASE}/targets/shop/urls?status=not-found"
    assert hook.payload["link"] == f"{BASE}/api/v1/targets/shop/urls?status=not-found"


def test_every_newly_broken_page_is_news() -> None:
    cfg = alerts(when="url_health", state=["not-found", "gone", "noindex"])
    news = url_round({"ok": 10, "not-found": 1, "gone": 1, "noindex": 1},
                     new={"gone": ["https://shop.example/g"],
                          "noindex": ["https://shop.example/n"]}, unchecked=4)
    notes = evaluate_urls(cfg, "shop", news, FIRING, T0)
    assert [(n.channel, n.state) for n in notes] == [("hook", "firing"), ("am", "firing")]
    p = notes[0].payload
    assert p["summary"] == ("shop: 2 more listed URLs broke (gone 1, noindex 1); 3 listed URLs "
                            "not-found/gone/noindex (23.1% of 13): not-found 1, gone 1, "
                            "noindex 1; 4 not checked yet")
    assert p["examples"] == {"gone": ["https://shop.example/g"],
                             "noindex": ["https://shop.example/n"]}
    assert p["since"] == "2025-01-06T11:00:00Z"  # the same alert, worse
    assert p["counts"]["new"] == 2
    # each group of examples links to its own state's listing
    assert p["pages"] == {"gone": f"{BASE}/targets/shop/urls?status=gone",
                          "noindex": f"{BASE}/targets/shop/urls?status=noindex"}
    assert f"  every gone URL: {BASE}/targets/shop/urls?status=gone" in text_lines(p)
    # the message links to its news: this round's transitions into the states that broke
    assert p["link"] == (f"{BASE}/api/v1/targets/shop/changes?kind=health"
                         "&rule=url-gone%2Curl-noindex&since=7&until=7")
    assert p["page"] == (f"{BASE}/targets/shop/changes?kind=health"
                         "&rule=url-gone%2Curl-noindex&since=7&until=7")
    # a round that finds nothing new: Alertmanager only (it needs the re-send)
    quiet = url_round({"ok": 10, "not-found": 1, "gone": 1, "noindex": 1})
    assert [n.channel for n in evaluate_urls(cfg, "shop", quiet, FIRING, T0)] == ["am"]
    # two rounds are two messages (their keys differ)
    later = evaluate_urls(cfg, "shop", UrlRound(**{**{f: getattr(news, f) for f in (
        "url", "snapshot_id", "listed", "states", "reasons", "examples", "new", "complete",
        "unchecked", "current")}, "at": T0 + timedelta(minutes=1)}), FIRING, T0)
    assert later[0].idempotency_key != notes[0].idempotency_key


def test_broken_counts_errors_only() -> None:
    from monitor.core.model import BROKEN_STATES

    # the pages' "N broken" and the alerts' default states are the error states
    assert BROKEN_STATES == ("not-found", "gone", "forbidden", "client-error", "server-error",
                             "noindex", "soft-404", "disallowed")
    cfg = alerts(when="url_health")
    warnings = url_round({"ok": 5, "redirect": 4, "canonicalized": 3})
    assert evaluate_urls(cfg, "shop", warnings, {}, T0) == []


def test_slack_shows_the_diff_the_failed_documents_and_each_states_listing() -> None:
    from monitor.alerts.slack import message

    payload = {"state": "firing", "severity": "warning", "target": "shop", "rule": "r",
               "summary": "s", "documents": [{"url": CHILD, "http_status": 500,
                                              "error": "HTTP 500 Internal Server Error"}],
               "robots": [{"url": "https://shop.example/robots.txt",
                           "diff": "-Allow: /\n+Disallow: /"}],
               "examples": {"gone": ["https://shop.example/g"]},
               "pages": {"gone": f"{BASE}/targets/shop/urls?status=gone"}}
    texts = [b["text"]["text"] for b in message(payload)["blocks"] if "text" in b]
    assert f"*Failed* {CHILD}: HTTP 500 Internal Server Error" in texts
    assert "*https://shop.example/robots.txt*\n```-Allow: /\n+Disallow: /```" in texts
    assert (f"*gone* (examples)\n<{BASE}/targets/shop/urls?status=gone|every gone URL>\n"
            "• https://shop.example/g") in texts
