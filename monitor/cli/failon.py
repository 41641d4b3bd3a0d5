"""``check --fail-on``: which conditions a CI pipeline can stop on, and whether one held (pure).

A condition is a change kind (``added``, ``removed``, ``changed``, ``invalid``, ``health``,
``robots``: at least one such change in this check), ``partial`` (a document could not be read
while others were), or any rule id (at least one current issue of that rule after the check;
the URL checks' rule ids, ``url-not-found``..., need ``--urls``, which finds them).
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.core.errors import ConfigError
from monitor.core.model import CHANGE_KINDS, OTHER_CHANGE_KINDS, RULES, URL_RULES, CheckResult

__all__ = ["KINDS", "held", "parse"]

KINDS: tuple[str, ...] = (*CHANGE_KINDS, *OTHER_CHANGE_KINDS, "partial")


def parse(raw: str, *, urls: bool) -> tuple[str, ...]:
    """The conditions of a ``--fail-on`` value (comma-separated), in the order given; an unknown
    one is a usage error that names it and what is known."""
    wanted = tuple(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    for kind in wanted:
        if kind in KINDS or kind in RULES or (urls and kind in URL_RULES):
            continue
        if kind in URL_RULES:
            raise ConfigError(f"--fail-on: {kind!r} is found by the URL checks: add --urls")
        raise ConfigError(f"--fail-on: unknown kind {kind!r} (use {', '.join(KINDS)}, or a "
                          "rule id such as child-fetch-failed or lastmod-invalid)")
    return wanted


def held(kinds: tuple[str, ...], result: CheckResult, url_rules: Mapping[str, int] | None,
         health_changes: int | None) -> list[str]:
    """The conditions of ``kinds`` that hold for this check, each with its count in words
    (``removed (3)``, ``partial (1 document failed)``)."""
    counts: dict[str, int] = {
        **result.change_counts(),
        "health": health_changes or 0,
        "robots": sum(1 for r in result.robots if r.get("changed")),
    }
    out = []
    for kind in kinds:
        if kind == "partial":
            if result.outcome == "partial":
                out.append(f"partial ({len(result.failed_documents)} document(s) failed)")
            continue
        n = counts.get(kind) if kind in counts else (
            (url_rules or {}).get(kind, 0) if kind in URL_RULES
            else result.issue_counts.get(kind, 0))
        if n:
            out.append(f"{kind} ({n})")
    return out
