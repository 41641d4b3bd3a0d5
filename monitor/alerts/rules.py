"""Alert rules: a pure function from (config, check result, history) to notifications.

Every rule is a condition with a state, firing or not, kept in ``alert_states`` by the store:

- it notifies every channel once when it starts firing;
- while it keeps firing, only Alertmanager channels get the alert again (on every check, so
  Alertmanager keeps it active; other channels would only be spammed);
- when the condition clears, every channel gets a ``resolved`` notification (Alertmanager
  ends the alert with ``endsAt``).

Conditions that depend on content (``added``, ``removed``, ``changed``, ``invalid``, ``stale``,
``url_count_below``) cannot be judged on a failed check (SPEC 3.1: no false removals): the
rule keeps its state. ``recovered`` is an event, not a state: it notifies once when a check
succeeds after at least ``consecutive`` failed ones. ``added`` never fires on a target's first
check, whose URLs all count as added. ``threshold`` and ``ratio`` (of the previous successful
check's URL count) must both hold when both are set; neither set means "at least one".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from monitor.alerts.payload import (
    PAYLOAD_VERSION,
    changes_link,
    describe_duration,
    idempotency_key,
    iso,
)
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.model import (
    CHANGE_KINDS,
    CheckResult,
    Notification,
    NotificationState,
    RuleContext,
)

__all__ = ["evaluate", "matches"]

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
        return _counted(rule, count, context, failed=failed)
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


def _counted(rule: Rule, count: int, context: RuleContext, *, failed: bool) -> Verdict:
    if failed:
        return Verdict(None, "the check failed")
    words = _KIND_WORDS[rule.when]
    previous = context.previous_urls
    share = f" ({count / previous:.1%} of {previous})" if previous else ""
    detail = f"{count} {words}{share}"
    if rule.when == "added" and previous is None and context.first_check_at is None:
        return Verdict(False, f"{detail} on the first check")
    holds = count >= (rule.threshold or 1)
    if rule.ratio is not None and previous:
        holds = holds and count / previous >= rule.ratio
    return Verdict(holds, detail)


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
        if not matches(rule, target_name):
            continue
        verdict = judge(rule, result, context, now)
        started = context.firing.get(rule.name)
        targets = [channels[name] for name in rule.channels if name in channels]
        state: NotificationState
        if rule.when == "recovered":
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
    kind = rule.when if rule.when in _KIND_WORDS else None
    examples, truncated = ({}, False) if state == "resolved" else _examples(result,
                                                                           delivery.examples)
    return {
        "version": PAYLOAD_VERSION,
        "target": target_name,
        "url": result.url,
        "rule": rule.name,
        "when": rule.when,
        "severity": rule.severity,
        "state": state,
        "event": rule.when == "recovered",
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
        "link": changes_link(delivery.api_base_url, target_name, started, kind),
    }


def _examples(result: CheckResult, limit: int) -> tuple[dict[str, list[str]], bool]:
    """Up to ``limit`` example URLs of each change kind, and whether any kind has more."""
    examples: dict[str, list[str]] = {}
    for change in result.changes:
        urls = examples.setdefault(change.kind, [])
        if len(urls) < limit:
            urls.append(change.loc)
    totals = result.change_counts()
    truncated = any(totals[k] > len(examples.get(k, [])) for k in CHANGE_KINDS)
    return {k: examples[k] for k in CHANGE_KINDS if examples.get(k)}, truncated
