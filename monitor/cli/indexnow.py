"""The IndexNow commands: ``indexnow status TARGET`` and ``check TARGET --indexnow-dry-run``.

``status`` reads what the daemon submitted (each submission: when, how many URLs, the answer)
and each host's key file as last fetched. A dry run checks the target as ``check`` does, then
rolls the whole check back: it prints the requests its changes would make and stores nothing,
so the daemon's next check still finds (and submits) them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

from monitor.config import Config, Target
from monitor.core.errors import ConfigError
from monitor.indexnow import protocol as indexnow
from monitor.indexnow import submissions
from monitor.store import indexnowrows
from monitor.store.checkplan import Written
from monitor.store.schema import snapshots

__all__ = ["dry_run", "status"]

Out = Callable[[str], None]


class _RolledBack(Exception):
    """Raised in the check's transaction to end a dry run: nothing it wrote is kept."""

    def __init__(self, batches: list[indexnow.Batch]) -> None:
        super().__init__("dry run")
        self.batches = batches


def dry_run(target: Target, engine: Engine, cfg: Config, *, as_json: bool, out: Out) -> int:
    """Check the target, print the IndexNow requests its changes would make, keep nothing."""
    from monitor.check.pipeline import run_check
    from monitor.read.fetch import Fetcher

    settings = target.settings.indexnow
    # Nothing is written by the check itself; the plan is read in its transaction instead.
    quiet = target.model_copy(update={"settings": target.settings.model_copy(
        update={"indexnow": settings.model_copy(update={"enabled": False})})})

    def plan(conn: Connection, written: Written) -> None:
        target_id = conn.execute(select(snapshots.c.target_id).where(
            snapshots.c.id == written.snapshot_id)).scalar_one()
        raise _RolledBack(submissions.in_scope(conn, target, submissions.planned(
            conn, target_id, written.snapshot_id, settings.submit)))

    async def check() -> list[indexnow.Batch]:
        fetcher = Fetcher(user_agent=target.settings.user_agent,
                          per_host=cfg.scheduler.per_host)
        try:
            result = await run_check(quiet, engine=engine, fetcher=fetcher,
                                     then=plan)
        except _RolledBack as done:
            return done.batches
        finally:
            await fetcher.aclose()
        if result.outcome == "failed":
            raise ConfigError(f"{target.name}: the check failed ({result.error_kind}: "
                              f"{result.error_message}); nothing would be submitted")
        return []

    batches = asyncio.run(check())
    key = settings.key or "KEY"
    requests = [indexnow.payload(b, key, indexnow.key_location(b.origin, key,
                                                                settings.key_location))
                for b in batches]
    if as_json:
        out(json.dumps({"target": target.name, "enabled": settings.enabled,
                        "endpoint": settings.endpoint, "submit": list(settings.submit),
                        "requests": requests}, ensure_ascii=False))
        return 0
    note = "" if settings.enabled else " (indexnow is not enabled for this target)"
    if not batches:
        out(f"{target.name}: nothing would be submitted to {settings.endpoint}{note}; a "
            "target's first check is its baseline, and removals are submitted once the URL "
            "checks find them gone")
        return 0
    urls = sum(len(b.urls) for b in batches)
    out(f"{target.name}: would POST {len(batches)} request(s), {urls} URLs, to "
        f"{settings.endpoint}{note} (a dry run: nothing was stored)")
    for batch, request in zip(batches, requests, strict=True):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(batch.kinds.items()))
        out(f"  host {request['host']}: {len(batch.urls)} URLs ({kinds}), keyLocation "
            f"{request['keyLocation']}")
        for url in batch.urls:
            out(f"    {url}")
    return 0


def status(target_name: str, engine: Engine, *, fmt: str, limit: int, out: Out) -> int:
    """Print a target's submissions, newest first, and its hosts' key files."""
    repo = indexnowrows.SqlSubmissions(engine)
    rows = repo.history(target_name, limit)
    keys = repo.keys(target_name)
    if fmt == "json":
        out(json.dumps({
            "target": target_name,
            "keys": [{"host": k.origin, "location": k.location, "ok": k.ok,
                      "checked_at": _time(k.checked_at), "problem": k.detail,
                      "rule": None if k.ok else indexnow.KEY_RULE} for k in keys],
            "submissions": [{**r, **{f: _time(r[f]) for f in _TIMES}} for r in rows],
        }, ensure_ascii=False))
        return 0
    if not rows and not keys:
        out(f"{target_name}: no IndexNow submissions in this database")
        return 0
    for k in keys:
        state = "verified" if k.ok else f"{indexnow.KEY_RULE}: {k.detail}"
        out(f"key file {k.location}: {state} (fetched {_time(k.checked_at)})")
    header = ["CREATED", "HOST", "URLS", "STATUS", "ATTEMPTS", "HTTP", "ANSWER"]
    cells = [header, *[[_time(r["created_at"]) or "", r["host"], str(r["urls"]), r["status"],
                        str(r["attempts"]), str(r["http_status"] or ""),
                        (r["answer"] or "")[:100]] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


_TIMES = ("created_at", "next_attempt_at", "attempted_at", "delivered_at")


def _time(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    return value.isoformat().replace("+00:00", "Z")
