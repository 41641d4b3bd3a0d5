"""The ``alerts:`` section: the channels that notify, the rules that say when, the delivery."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from monitor.config.values import Duration, Frozen, Ratio
from monitor.core.ipranges import is_blocked_address, literal_address

__all__ = [
    "Alerts", "Channel", "ChannelType", "Delivery", "RemovalReason", "Rule", "RuleWhen", "UrlState",
]

ChannelType = Literal["webhook", "slack", "alertmanager", "email"]
RuleWhen = Literal[
    "added", "removed", "changed", "invalid", "issues", "check_failed", "partial", "recovered",
    "stale", "url_count_below", "url_health", "robots_changed",
]


UrlState = Literal[
    "ok", "redirect", "not-found", "gone", "forbidden", "client-error", "server-error",
    "noindex", "canonicalized", "soft-404", "disallowed", "unknown",
]
RemovalReason = Literal["moved", "gone", "live", "unknown"]


class Channel(Frozen):
    """One alert destination."""

    name: str = Field(min_length=1)
    type: ChannelType
    # repr=False: a Channel in a log line or traceback must not show credentials (webhook
    # URLs such as Slack's carry a token in their path).
    url: str | None = Field(None, repr=False)
    secret: str | None = Field(None, repr=False)
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: Duration = 10.0
    # alertmanager: a firing alert is re-sent on every check while it fires and stays active
    # this long after each send, so it expires on its own if the daemon is gone; keep it above
    # the longest check interval.
    alert_ttl: Duration = Field(3600.0, gt=0)
    # whether the channel is told when a state (check_failed, stale, url_count_below) clears,
    # as Alertmanager's receivers set it; events have nothing to resolve
    send_resolved: bool = True
    # email
    smtp_ca_file: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_starttls: bool = True
    smtp_username: str | None = None
    smtp_password: str | None = Field(None, repr=False)
    email_from: str | None = Field(None, alias="from")
    email_to: list[str] = Field(default_factory=list, alias="to")

    @model_validator(mode="after")
    def _needs(self) -> Channel:
        if self.type == "email":
            if not self.smtp_host or not self.email_from or not self.email_to:
                raise ValueError("an email channel needs smtp_host, from and to")
        elif not self.url:
            raise ValueError(f"a {self.type} channel needs url")
        host = self.smtp_host if self.type == "email" else urlsplit(self.url or "").hostname
        literal = literal_address(host or "")
        if literal is not None and is_blocked_address(literal):
            # the URL itself is not echoed: a webhook's path carries its token
            raise ValueError(f"the {self.type} channel is on {literal}, a link-local or "
                             "metadata address, which is never fetched")
        return self


class Rule(Frozen):
    """When to notify whom."""

    name: str = Field(min_length=1)
    when: RuleWhen
    targets: list[str] = Field(default_factory=lambda: ["*"])
    severity: Literal["info", "warning", "critical"] = "warning"
    channels: list[str] = Field(min_length=1)
    threshold: int | None = Field(None, ge=1)
    ratio: Ratio | None = None
    consecutive: int = Field(1, ge=1)
    duration: Duration | None = None
    count: int | None = Field(None, ge=0)
    # when: issues: the rule ids whose current issues count, as globs ("lastmod-*")
    rule: list[str] | None = Field(None, min_length=1)
    # when: url_health: the states whose listed URLs count (default: every state with a rule)
    state: list[UrlState] | None = Field(None, min_length=1)
    # when: removed: only removals the URL checks found to be one of these
    reason: list[RemovalReason] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _needs(self) -> Rule:
        if self.when == "stale" and self.duration is None:
            raise ValueError("a stale rule needs duration")
        if self.when == "issues" and not self.rule:
            raise ValueError("an issues rule needs rule: (rule ids or globs, e.g. lastmod-*)")
        if self.rule and self.when != "issues":
            raise ValueError("rule: is for when: issues")
        if self.when == "url_count_below" and self.count is None:
            raise ValueError("a url_count_below rule needs count")
        if self.state and self.when != "url_health":
            raise ValueError("state: is for when: url_health")
        if self.reason and self.when != "removed":
            raise ValueError("reason: is for when: removed")
        return self


class Delivery(Frozen):
    """How the outbox delivers."""

    max_age: Duration = 86400.0
    initial_backoff: Duration = 5.0
    max_backoff: Duration = 600.0
    examples: int = Field(20, ge=0, le=1000)
    api_base_url: str | None = None


class Alerts(Frozen):
    """The ``alerts:`` section."""

    channels: list[Channel] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)
    delivery: Delivery = Delivery()

    @model_validator(mode="after")
    def _references(self) -> Alerts:
        names = [c.name for c in self.channels]
        if len(names) != len(set(names)):
            raise ValueError("channel names must be unique")
        for rule in self.rules:
            for name in rule.channels:
                if name not in names:
                    raise ValueError(f"rule {rule.name!r} names unknown channel {name!r}")
        return self
