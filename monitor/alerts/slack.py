"""The Slack channel: an incoming-webhook message a person can read at a glance."""

from __future__ import annotations

import json
from typing import Any

import httpx

from monitor.alerts.notifier import post
from monitor.alerts.payload import title
from monitor.config import Channel
from monitor.core.model import Notification

__all__ = ["SlackNotifier", "message"]

_ICONS = {"resolved": ":white_check_mark:", "test": ":wave:", "critical": ":rotating_light:",
          "warning": ":warning:", "info": ":information_source:"}
_BLOCK_TEXT = 2900  # Slack refuses section text over 3,000 characters


def _icon(payload: dict[str, Any]) -> str:
    state = str(payload.get("state"))
    if state in ("resolved", "test") or payload.get("when") == "recovered":
        return _ICONS["resolved" if state != "test" else "test"]
    return _ICONS.get(str(payload.get("severity")), _ICONS["warning"])


def message(payload: dict[str, Any]) -> dict[str, Any]:
    """The Slack message: a headline, the counts as fields, examples, and the API link."""
    headline = f"{_icon(payload)} {title(payload)}"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": f"*{headline}*\n{payload.get('summary', '')}"}},
    ]
    counts = payload.get("counts") or {}
    fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in counts.items()
              if v is not None][:10]  # Slack allows ten fields per section
    if fields:
        blocks.append({"type": "section", "fields": fields})
    error = payload.get("error")
    if error:
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": f"*Error* `{error.get('kind')}`: {error.get('message')}"
        }})
    for doc in (payload.get("documents") or [])[:5]:
        blocks.append(_section(f"*Failed* {doc.get('url')}: "
                               f"{doc.get('error') or doc.get('http_status')}"))
    for doc in (payload.get("dropped_documents") or [])[:5]:
        blocks.append(_section(f"*No longer in the index* {doc.get('url')} "
                               f"({doc.get('urls')} URLs)"))
    for robots in (payload.get("robots") or [])[:5]:
        blocks.append(_section(f"*{robots.get('url')}*\n```{robots.get('diff') or ''}```"))
    pages = payload.get("pages") or {}
    for kind, urls in (payload.get("examples") or {}).items():
        more = f"\n<{pages[kind]}|every {kind} URL>" if pages.get(kind) else ""
        text = f"*{kind}* (examples){more}\n" + "\n".join(f"• {u}" for u in urls)
        if len(text) > _BLOCK_TEXT:
            text = text[:_BLOCK_TEXT].rsplit("\n", 1)[0] + "\n…"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    context = [f"target `{payload.get('target')}`", f"rule `{payload.get('rule')}`"]
    if payload.get("page"):
        context.append(f"<{payload['page']}|open the page>")
    if payload.get("link"):
        context.append(f"<{payload['link']}|full list>")
    blocks.append({"type": "context",
                   "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]})
    return {"text": f"{headline}: {payload.get('summary', '')}", "blocks": blocks}


def _section(text: str) -> dict[str, Any]:
    """A text block, cut to what Slack takes (a long diff ends with an ellipsis)."""
    if len(text) > _BLOCK_TEXT:
        text = text[:_BLOCK_TEXT].rsplit("\n", 1)[0] + ("\n…```" if "```" in text else "\n…")
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


class SlackNotifier:
    """POSTs a message to a Slack incoming webhook."""

    def __init__(self, channel: Channel, client: httpx.AsyncClient) -> None:
        self.channel = channel
        self.client = client

    async def send(self, notification: Notification) -> None:
        """Deliver or raise ``DeliveryError``."""
        raw = json.dumps(message({**notification.payload, "state": notification.state}))
        assert self.channel.url is not None  # the config requires it
        await post(self.client, self.channel, self.channel.url, raw.encode("utf-8"),
                   {"Content-Type": "application/json"})
