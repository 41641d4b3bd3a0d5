"""Alert rules: a pure function from (config, check result, history) to notifications.

Events and states. ``added``, ``removed``, ``changed``, ``invalid``, ``issues`` and
``recovered`` are events: a check where one holds notifies every channel once, and there is
nothing to resolve (Alertmanager, which needs an end, gets ``endsAt`` the channel's
``alert_ttl`` ahead). ``issues`` is an event when it starts to hold: the count of current
issues of its ``rule:`` globs reaches its threshold (or ratio of ``urls``) where at the previous
check it did not, so "the CMS started writing bad dates" is one alert, not one a check.
``check_failed``, ``partial`` (a document failed while others were read), ``stale`` and
``url_count_below`` are states, kept in ``alert_states`` by the store:

- a state notifies every channel once when it starts firing;
- while it keeps firing, only Alertmanager channels get the alert again (on every check, so
  Alertmanager keeps it active; other channels would only be spammed);
- when the condition clears, every channel with ``send_resolved`` gets a ``resolved``
  notification (Alertmanager ends the alert with ``endsAt``).

Conditions that depend on content (``added``, ``removed``, ``changed``, ``invalid``,
``issues``, ``stale``, ``url_count_below``) cannot be judged on a failed check (no
false removals): a state keeps its state, an event does not fire. ``recovered`` notifies once
when a check succeeds after at least ``consecutive`` failed ones. ``added`` never fires on a
target's first check, whose URLs all count as added. A ``removed`` count and ratio take only
URLs that were valid: cleaning up invalid entries is never a mass removal. ``threshold`` and
``ratio`` (of the previous successful check's URL count) must both hold when both are set;
neither set means "at least one".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from monitor.alerts import details
from monitor.alerts.payload import (
    PAYLOAD_VERSION,
    describe_duration,
    idempotency_key,
    iso,
    target_link,
)
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core import sampling
from monitor.core.model import (
    BROKEN_STATES,
    CHANGE_KINDS,
    URL_STATES,
    CheckResult,
    Notification,
    NotificationState,
    RuleContext,
)

__all__ = ["EVENTS", "UrlRound", "evaluate", "evaluate_urls", "for_url_checks", "matches"]

# Rules that notify once for what happened and have nothing to resolve.
EVENTS = frozenset({"added", "removed", "changed", "invalid", "issues", "recovered",
                    "robots_changed"})
ROBOTS_TEXT_MAX = 20_000  # characters of a robots.txt in a payload, before and after

_KIND_WORDS = {
    "added": "URLs added",
    "removed": "URLs removed",
    "changed": "URLs changed",
    "invalid": "URLs newly invalid",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a rule's condition holds (None: cannot tell on this check) and why, in words."""

    holds: bool | None
    detail: str


def matches(rule: Rule, target_name: str) -> bool:
    """Whether the rule's target globs select this target."""
    return any(fnmatchcase(target_name, pattern) for pattern in rule.targets)


def judge(rule: Rule, result: CheckResult, context: RuleContext, now: datetime) -> Verdict:
    """The rule's condition on this check, without regard to its previous state."""
    failed = result.outcome == "failed"
    when = rule.when
    if when in _KIND_WORDS:
        count = result.change_counts()[when]
        if when == "removed":
            count -= result.removed_invalid  # of valid URLs only: a cleanup is no removal
        return _counted(rule, count, result, context, failed=failed)
    if when == "issues":
        return _issues(rule, result, context, failed=failed)
    if when == "robots_changed":
        changed = [r["url"] for r in result.robots if r.get("changed")]
        return Verdict(bool(changed), f"robots.txt changed: {', '.join(changed)}" if changed
                       else "no robots.txt changed")
    if when == "partial":
        if failed:
            return Verdict(None, "the check failed")
        found = result.failed_documents
        return Verdict(bool(found), f"{len(found)} document(s) could not be read: "
                                    f"{details.documents_text(details.documents(result))}"
                       if found else "every document was read")
    if when == "check_failed":
        streak = context.consecutive_failures + 1 if failed else 0
        parts = [p for p in (result.error_kind, result.error_message) if p]
        error = ": " + ": ".join(parts) if parts else ""
        detail = (f"{streak} check(s) failed in a row{error}" if failed
                  else "the check succeeds again")
        return Verdict(failed and streak >= rule.consecutive, detail)
    if when == "recovered":
        back = not failed and context.consecutive_failures >= rule.consecutive
        return Verdict(back, f"the check succeeds again after {context.consecutive_failures} "
                             "failed check(s)")
    if failed:
        return Verdict(None, "the check failed")
    if when == "url_count_below":
        assert rule.count is not None  # the config requires it
        return Verdict(result.urls < rule.count, f"{result.urls} URLs (minimum {rule.count})")
    # stale
    assert rule.duration is not None  # the config requires it
    if result.added or result.changed:
        return Verdict(False, f"{result.added} added, {result.changed} changed in this check")
    since = context.last_content_change_at or context.first_check_at
    if since is None:
        return Verdict(False, "no earlier check")
    age = (now - since).total_seconds()
    return Verdict(age >= rule.duration,
                   f"no URL added or changed for {describe_duration(age)} "
                   f"(limit {describe_duration(rule.duration)})")


def _counted(rule: Rule, count: int, result: CheckResult, context: RuleContext, *,
             failed: bool) -> Verdict:
    if failed:
        return Verdict(None, "the check failed")
    words = _KIND_WORDS[rule.when]
    previous = context.previous_urls
    share = f" ({count / previous:.1%} of {previous})" if previous else ""
    detail = f"{count} {words}{share}"
    if rule.when == "removed":  # a child the index dropped explains a mass removal
        detail += details.dropped_text(result.dropped_documents)
    if rule.when == "added" and previous is None and context.first_check_at is None:
        return Verdict(False, f"{detail} on the first check")
    holds = count >= (rule.threshold or 1)
    if rule.ratio is not None and previous:
        holds = holds and count / previous >= rule.ratio
    return Verdict(holds, detail)


def _issues(rule: Rule, result: CheckResult, context: RuleContext, *, failed: bool) -> Verdict:
    """``when: issues``: holds when the current issues of the rule's globs reach the threshold
    (and ratio of ``urls``) and did not at the previous completed check."""
    if failed:
        return Verdict(None, "the check failed")
    patterns = rule.rule or []

    def count(counts: Mapping[str, int]) -> int:
        return sum(n for name, n in counts.items()
                   if any(fnmatchcase(name, p) for p in patterns))

    def reached(n: int, urls: int | None) -> bool:
        holds = n >= (rule.threshold or 1)
        if rule.ratio is not None and urls:
            holds = holds and n / urls >= rule.ratio
        return holds

    now = count(result.issue_counts)
    before = count(context.previous_issue_counts)
    share = f" ({now / result.urls:.1%} of {result.urls} URLs)" if result.urls else ""
    detail = f"{now} current issues of {', '.join(patterns)}{share} (previous check: {before})"
    named = details.issues(rule, result, 3)
    if named:  # the documents and errors behind the count
        detail += ": " + "; ".join(f"{i['loc'] or i['document']}: {i['message']}"
                                   for i in named)
    return Verdict(reached(now, result.urls) and not reached(before, context.previous_urls),
                   detail)


def evaluate(alerts_cfg: Alerts, target_name: str, result: CheckResult, context: RuleContext,
             now: datetime) -> list[Notification]:
    """The notifications this check raises, one per (rule, channel), in rule order.

    ``result.snapshot_id`` must be set: it makes the idempotency keys of two checks differ.
    """
    if result.snapshot_id is None and alerts_cfg.rules:
        raise ValueError("alert rules need the check's snapshot id (store the snapshot first)")
    channels = {c.name: c for c in alerts_cfg.channels}
    out: list[Notification] = []
    for rule in alerts_cfg.rules:
        if not matches(rule, target_name) or for_url_checks(rule):
            continue
        verdict = judge(rule, result, context, now)
        started = context.firing.get(rule.name)
        targets = [channels[name] for name in rule.channels if name in channels]
        state: NotificationState
        if rule.when in EVENTS:
            if not verdict.holds:
                continue
            state, since, to = "firing", now, targets
        elif verdict.holds is None or (verdict.holds and started is not None):
            if started is None:
                continue  # unknown and not firing: nothing to say
            state, since, to = "firing", started, [c for c in targets if c.type == "alertmanager"]
        elif verdict.holds:
            state, since, to = "firing", now, targets
        elif started is not None:
            state, since, to = "resolved", started, targets
        else:
            continue
        payload = _payload(alerts_cfg.delivery, rule, target_name, result, context, verdict,
                           state, since, now)
        out.extend(_for_channels(rule, target_name, result, state, payload, to))
    return out


def _for_channels(rule: Rule, target_name: str, result: CheckResult, state: NotificationState,
                  payload: dict[str, Any], to: Iterable[Channel]) -> list[Notification]:
    return [
        Notification(
            target_name=target_name,
            rule=rule.name,
            channel=channel.name,
            state=state,
            severity=rule.severity,
            idempotency_key=idempotency_key(target_name, rule.name, channel.name,
                                            result.snapshot_id, state),
            payload=payload,
            send=state != "resolved" or channel.send_resolved,
        )
        for channel in to
    ]


def _payload(delivery: Delivery, rule: Rule, target_name: str, result: CheckResult,
             context: RuleContext, verdict: Verdict, state: NotificationState,
             since: datetime, now: datetime) -> dict[str, Any]:
    summary = f"{target_name}: {verdict.detail}"
    if state == "resolved":
        summary = f"{target_name}: {rule.name} resolved: {verdict.detail}"
    started = now - timedelta(seconds=result.duration_seconds)
    link, page = details.check_links(delivery.api_base_url, target_name, rule,
                                     result.snapshot_id, started)
    examples, truncated = ({}, False) if state == "resolved" else _examples(
        result, delivery.examples, rule.when if rule.when in CHANGE_KINDS else None)
    extra: dict[str, Any] = {}
    if rule.when == "robots_changed":  # the diff says it all; URL changes are another matter
        examples, truncated = {}, False
        extra["robots"] = [{**_robots_change(r), **d} for r, d in zip(
            [r for r in result.robots if r.get("changed")], details.robots(result),
            strict=True)]
    elif rule.when == "issues" and state != "resolved":
        extra["issues"] = details.issues(rule, result, delivery.examples)
        located: dict[str, list[str]] = {}
        for item in extra["issues"]:
            if item["loc"]:
                located.setdefault(item["rule"], []).append(item["loc"])
        # Issues about URLs are their own examples; a target-wide one (lastmod-churn) keeps the
        # check's changed URLs, which show what it is about.
        if located:
            examples, truncated = located, False
    elif rule.when in ("partial", "check_failed"):
        extra["documents"] = details.documents(result)
    if rule.when == "removed" and result.dropped_documents:
        extra["dropped_documents"] = [{"url": url, "urls": n}
                                      for url, n in result.dropped_documents.items()]
    return {
        "version": PAYLOAD_VERSION,
        "target": target_name,
        "url": result.url,
        "rule": rule.name,
        "when": rule.when,
        "severity": rule.severity,
        "state": state,
        "event": rule.when in EVENTS,
        "snapshot_id": result.snapshot_id,
        "checked_at": iso(now),
        "since": iso(since),
        "summary": summary,
        "counts": {
            "urls": result.urls,
            "invalid": result.invalid,
            "added": result.added,
            "removed": result.removed,
            "changed": result.changed,
            "invalid_new": result.invalid_new,
            "previous_urls": context.previous_urls,
        },
        "examples": examples,
        "examples_truncated": truncated,
        "error": (None if result.error_kind is None
                  else {"kind": result.error_kind, "message": result.error_message}),
        "link": link,
        "page": page,
        **extra,
    }


def _robots_change(found: dict[str, Any]) -> dict[str, Any]:
    """A changed robots.txt in a payload: its text before and after, each cut at
    ``ROBOTS_TEXT_MAX`` characters (``truncated`` says so)."""
    before, after = found.get("before"), found.get("after")
    cut = any(t is not None and len(t) > ROBOTS_TEXT_MAX for t in (before, after))
    return {"url": found["url"], "http_status": found.get("http_status"),
            "before": None if before is None else before[:ROBOTS_TEXT_MAX],
            "after": None if after is None else after[:ROBOTS_TEXT_MAX], "truncated": cut}


def _examples(result: CheckResult, limit: int, kind: str | None = None,
              ) -> tuple[dict[str, list[str]], bool]:
    """Up to ``limit`` example URLs of each change kind (of ``kind`` only, for a rule of a
    change kind: a removal's message lists no added URL), and whether any kind has more."""
    kinds = CHANGE_KINDS if kind is None else (kind,)
    examples: dict[str, list[str]] = {}
    for change in result.changes:
        if change.kind not in kinds:
            continue
        urls = examples.setdefault(change.kind, [])
        if len(urls) < limit:
            urls.append(change.loc)
    totals = result.change_counts()
    truncated = any(totals[k] > len(examples.get(k, [])) for k in kinds)
    return {k: examples[k] for k in kinds if examples.get(k)}, truncated


# ---- the URL checks' rules ---------------------------------------------------------



def _state_rule(state: str) -> str | None:
    """The rule id of a URL health state (None for ``ok`` and ``unknown``)."""
    found = URL_STATES.get(state)
    return None if found is None else found[0]


def for_url_checks(rule: Rule) -> bool:
    """Whether the URL checks judge this rule (``url_health``, or ``removed`` by ``reason``),
    not a check of the sitemap."""
    return rule.when == "url_health" or bool(rule.reason)


@dataclass(frozen=True, slots=True)
class UrlRound:
    """What a round of URL checks leaves for the alert rules."""

    url: str
    snapshot_id: int
    listed: int
    states: Mapping[str, int]  # listed URLs per state, after the round
    reasons: Mapping[str, int]  # removals given each reason in this round
    # URLs that turned to each state in this round, and "removed:<reason>": the first few
    examples: Mapping[str, list[str]]
    at: datetime
    new: Mapping[str, int] = field(default_factory=dict)  # listed URLs that turned to a state
    # whether every URL the target listed has been checked once (before, no count is told)
    complete: bool = True
    unchecked: int = 0  # listed URLs not checked yet
    current: Mapping[str, list[str]] = field(default_factory=dict)  # URLs in each state now
    # the first and the last snapshot whose removals this round gave their reasons
    removed_snapshots: tuple[int, int] | None = None
    # what the estimate of each state's share is made of (a ``ratio`` is judged on its low end)
    strata: sampling.Strata | None = None


def evaluate_urls(alerts_cfg: Alerts, target_name: str, found: UrlRound,
                  firing: Mapping[str, datetime], now: datetime) -> list[Notification]:
    """The notifications a round of URL checks raises.

    ``url_health`` is a state that gets worse: it fires to every channel once the target's
    first complete round finds its states, then tells every channel again for each round
    that finds newly broken URLs (those URLs as examples, the total beside), re-sends to
    Alertmanager while firing, and resolves once the count is below the rule's. A rule with
    ``ratio`` is judged before that too, on the lower end of the estimate's 95% interval (a
    sample of a large site says "at least this share", never a share that is only noise); until
    the round is complete, the broken URLs a round finds are not news (they were found, not
    newly broken). A ``removed``
    rule with ``reason`` is an event of the removals the round gave those reasons.
    """
    channels = {c.name: c for c in alerts_cfg.channels}
    limit = alerts_cfg.delivery.examples
    base = alerts_cfg.delivery.api_base_url
    out: list[Notification] = []
    for rule in alerts_cfg.rules:
        if not matches(rule, target_name) or not for_url_checks(rule):
            continue
        targets = [channels[name] for name in rule.channels if name in channels]
        started = firing.get(rule.name)
        state: NotificationState
        counts: dict[str, Any] = {"urls": found.listed, "url_health": dict(found.states),
                                  "reasons": dict(found.reasons)}
        if rule.when == "url_health":
            states: list[str] = list(rule.state or BROKEN_STATES)
            sampled = (None if found.strata is None or found.strata.complete
                       else sampling.combined(found.strata, states))
            if not found.complete and started is None and (rule.ratio is None or sampled is None):
                continue  # a count before every URL was checked once would be wrong
            count = sum(found.states.get(s, 0) for s in states)
            new = sum(found.new.get(s, 0) for s in states)
            holds = count >= (rule.threshold or 1)
            if rule.ratio is not None:
                low = (sampled.low if sampled is not None
                       else count / found.listed if found.listed else 0.0)
                holds = holds and found.listed > 0 and low >= rule.ratio
            share = f" ({count / found.listed:.1%} of {found.listed})" if found.listed else ""
            if sampled is not None:
                assert found.strata is not None
                share = (f" (about {sampled.share:.1%} +/- {sampled.margin:.1%} of "
                         f"{found.listed}, from {found.strata.checked} checked)")
                counts.update(estimate=sampled.as_json())
            by_state = ", ".join(f"{s} {found.states[s]}" for s in states if found.states.get(s))
            total = f"{count} listed URLs {'/'.join(states)}{share}"
            detail = f"{total}: {by_state}" if by_state else total
            news = holds and started is not None and new > 0 and found.complete
            if news:
                new_by_state = ", ".join(f"{s} {found.new[s]}" for s in states
                                         if found.new.get(s))
                detail = f"{new} more listed URLs broke ({new_by_state}); {detail}"
            if found.unchecked:
                detail += f"; {found.unchecked} not checked yet"
            pool = found.examples if news else found.current
            examples: dict[str, list[str]] = {
                s: list(pool.get(s, []))[:limit] for s in states if pool.get(s)}
            counts.update(broken=count, new=new, unchecked=found.unchecked)
            totals = found.new if news else found.states
            truncated = any(len(v) < totals.get(k, 0) for k, v in examples.items())
            if holds:
                state, since = "firing", started or now
                to = targets if started is None or news else [
                    c for c in targets if c.type == "alertmanager"]
            elif started is not None:
                state, since, to, examples = "resolved", started, targets, {}
            else:
                continue
            shown = [s for s in states if examples.get(s)] or [
                s for s in states if found.states.get(s)] or states[:1]
            pages = details.state_links(base, target_name, shown)
            if news:  # the transitions of this round into the states that are news
                told = [s for s in states if found.new.get(s)]
                link, page = details.news_links(base, target_name, [
                    rule_id for s in told if (rule_id := _state_rule(s))], found.snapshot_id)
            else:  # the URLs of the state that holds most of them
                most = max(shown, key=lambda s: found.states.get(s, 0))
                link = target_link(base, target_name, "urls", {"status": most})
                page = pages[most]
        else:
            reasons = rule.reason or []
            count = sum(found.reasons.get(r, 0) for r in reasons)
            if count < (rule.threshold or 1):
                continue
            detail = f"{count} removed URLs found {'/'.join(reasons)}"
            examples = {f"removed:{r}": list(found.examples.get(f"removed:{r}", []))[:limit]
                        for r in reasons if found.examples.get(f"removed:{r}")}
            state, since, to = "firing", now, targets
            link, page = details.removal_links(base, target_name, reasons,
                                               found.removed_snapshots)
            pages, truncated = {}, False
        payload = {
            "version": PAYLOAD_VERSION, "target": target_name, "url": found.url,
            "rule": rule.name, "when": rule.when, "severity": rule.severity, "state": state,
            "event": rule.when != "url_health", "snapshot_id": found.snapshot_id,
            "checked_at": iso(now), "since": iso(since),
            "summary": (f"{target_name}: {detail}" if state == "firing"
                        else f"{target_name}: {rule.name} resolved: {detail}"),
            "counts": counts,
            "examples": examples,
            "examples_truncated": truncated,
            "error": None, "link": link, "page": page,
            **({"pages": pages} if pages else {}),
        }
        round_key = f"{found.snapshot_id}@{iso(found.at)}"
        out.extend(Notification(
            target_name=target_name, rule=rule.name, channel=channel.name, state=state,
            severity=rule.severity,
            idempotency_key=idempotency_key(target_name, rule.name, channel.name, None,
                                            f"{state}@{round_key}"),
            payload=payload, send=state != "resolved" or channel.send_resolved,
        ) for channel in to)
    return out
