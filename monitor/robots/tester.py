"""The robots.txt tester's answers, in words and as JSON, for the command line and the pages
alike (pure): whether an agent may crawl a URL, the line that decided and its group."""

from __future__ import annotations

from typing import Any

from monitor.robots.matcher import Decision, Line

__all__ = ["answer", "describe"]


def answer(url: str, agent: str, decision: Decision) -> dict[str, Any]:
    """One decision as JSON: the URL, whether it is allowed, the line and group behind it."""
    return {"url": url, "agent": agent, "allowed": decision.allowed,
            "line": None if decision.line is None else _line(decision.line),
            "group": [_line(line) for line in decision.group]}


def describe(decision: Decision) -> str:
    """Why, in words: the line that decided and its group, or that no rule matched."""
    group = ", ".join(f"line {line.number}: {line.text}" for line in decision.group)
    if decision.line is not None:
        return f"line {decision.line.number}: {decision.line.text} (group {group})"
    if group:
        return f"no rule matched (group {group})"
    return "no group applies to this agent: everything is allowed"


def _line(line: Line) -> dict[str, Any]:
    return {"number": line.number, "text": line.text}
