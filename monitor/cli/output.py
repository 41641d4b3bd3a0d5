"""What the ``check`` and ``validate`` commands print: a result as JSON or as a summary with
its tables, and the commands that list in full what the output cut."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from datetime import UTC
from typing import Any

from monitor.core.model import CheckResult
from monitor.listing.params import answer_text

__all__ = ["Out", "hints", "print_result", "table"]

Out = Callable[[str], None]


def print_result(write: Out, result: CheckResult, urls: Any = None, *, as_json: bool,
                 stored: bool = True) -> None:
    """A check's result as the command prints it: JSON, or a summary and its tables."""
    if as_json:
        found = result.as_json()
        if urls is not None:
            for change in found["changes"]:
                if change["kind"] == "removed" and change["loc"] in urls.removals:
                    change["reason"], change["answer"] = urls.removals[change["loc"]]
            found["url_health"] = urls.states
            found["url_checks"] = urls.as_json()
            found["url_problems"] = urls.broken
            found["url_notes"] = urls.notes
        write(json.dumps(found, ensure_ascii=False))
        return
    if not stored:  # ``validate``: nothing was compared nor kept; its head says what it found
        write(f"{result.target}: {_verdict(result)}  urls={result.urls} "
              f"invalid={result.invalid}  ({result.duration_seconds:.2f}s)")
    elif result.baseline:
        write(f"{result.target}: {result.outcome}  first check: urls={result.urls} "
             f"invalid={result.invalid}  ({result.duration_seconds:.2f}s, snapshot "
             f"{result.snapshot_id})")
    else:
        write(f"{result.target}: {result.outcome}  urls={result.urls} invalid={result.invalid} "
             f"added={result.added} removed={result.removed} changed={result.changed} "
             f"newly-invalid={result.invalid_new}  ({result.duration_seconds:.2f}s, "
             f"snapshot {result.snapshot_id})")
    if result.error_kind:
        write(f"  error: {result.error_kind}: {result.error_message}")
    if result.outcome == "partial":
        failed = result.failed_documents
        write(f"  partial: {len(failed)} document(s) could not be read; their URLs stay as the "
             "last check read them:")
        for d in failed:
            status = f"HTTP {d.http_status}: " if d.http_status else ""
            write(f"    {d.url} ({status}{d.error or 'failed'})")
    table(write, ["DOCUMENT", "OUTCOME", "HTTP", "URLS", "ERROR"],
           [[d.url, d.outcome, d.http_status or "", d.urls, d.error or ""]
            for d in result.documents])
    if result.issues:
        table(write, ["SEVERITY", "RULE", "LOC", "MESSAGE"],
               [[i.severity, i.rule, i.loc or i.document or "", i.message]
                for i in result.issues])
    # A first check's changes are its whole URL set: a summary and the command that lists it.
    if result.changes and stored and not result.baseline and urls is not None:
        triaged = urls.removals  # their reasons, as the daemon gives them
        rows = [[c.kind, c.loc, *_triage(triaged.get(c.loc) if c.kind == "removed" else None)]
                for c in result.changes]
        table(write, ["CHANGE", "LOC", "REASON", "DETAIL"], rows)
    elif result.changes and stored and not result.baseline:
        table(write, ["CHANGE", "LOC"], [[c.kind, c.loc] for c in result.changes])
    for hint in hints(result) if stored else []:
        write(f"  ({hint})")
    if urls is not None:
        states = ", ".join(f"{state} {n}" for state, n in sorted(urls.states.items()))
        write(f"url health: {urls.listed} listed, {urls.checked} checked in "
             f"{urls.seconds:.1f}s: {states or 'none'}")
        if urls.broken:
            table(write, ["STATE", "HTTP", "LOC", "DETAIL"],
                   [[b["state"], b["http_status"] or "", b["loc"], b["detail"]]
                    for b in urls.broken])
            write(f"  (every URL of a state: sitemap-monitor urls "
                 f"{shlex.quote(result.target)} --status STATE)")
        if urls.notes:
            table(write, ["SEVERITY", "RULE", "LOC", "DETAIL"],
                   [[n["severity"], n["rule"], n["loc"], n["detail"]] for n in urls.notes])


def _verdict(result: CheckResult) -> str:
    """What ``validate`` found, in the words its exit code means: ``valid``, ``valid, 1
    warning``, ``not valid: 3 errors, 1 warning`` (exit code 3), or ``failed``."""
    if result.outcome == "failed":
        return "failed"
    errors = sum(i.severity == "error" for i in result.issues)
    warnings = sum(i.severity == "warning" for i in result.issues)
    told = ", ".join(f"{n} {word}{'' if n == 1 else 's'}"
                     for n, word in ((errors, "error"), (warnings, "warning")) if n)
    if errors:
        return f"not valid: {told}"
    return f"valid, {told}" if told else "valid"


def _triage(found: tuple[str, dict[str, Any]] | None) -> list[str]:
    """A removal's REASON and DETAIL cells: what its URL answered."""
    if found is None:
        return ["", ""]
    return [found[0], f"answered {answer_text(found[1])}"]


def hints(result: CheckResult) -> list[str]:
    """Where to see in full what the output cut: the commands that list it."""
    name = shlex.quote(result.target)
    hints = []
    if result.baseline:
        hints.append(f"all {result.urls + result.invalid} URLs: sitemap-monitor urls {name}")
    elif result.changes_truncated:
        total = sum(result.change_counts().values())
        since = "" if result.started_at is None else " --since " + result.started_at.astimezone(
            UTC).isoformat().replace("+00:00", "Z")
        hints.append(f"all {total} changes: sitemap-monitor changes {name}{since}")
    counted = sum(result.issue_counts.values())
    if counted > len(result.issues):
        hints.append(f"all {counted} issues: sitemap-monitor issues {name}")
    return hints


def table(out: Out, header: list[str], rows: list[list[Any]]) -> None:
    """Rows under a header, each column as wide as its widest cell (80 at most)."""
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [min(max(len(r[i]) for r in cells), 80) for i in range(len(header))]
    for row in cells:
        out("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
