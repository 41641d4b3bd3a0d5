"""ONE check of one target: the only module that composes the stages.

load the target's state -> walk its documents (``walk``: fetch, digest, tally, in listed
order) -> read its hosts' robots.txt (``robots.watch``) -> settle moves against removals and the
target-wide verdicts (``targetwide``, ``reciprocity``, ``crawlable``) -> build the result ->
write everything in one short transaction (``monitor.store.checkplan``).

Every stage returns what it found as a frozen value, and the check's ``Tally`` folds them
(``Tally.take``) in the order they come: the result is built once from that fold.

Nothing is written while the check waits on the network: what it will store is recorded as it
goes (entry sets spooled to a file) and written at the end, with the alerts' outbox rows and
whatever the caller runs in that transaction (the daemon gives its lease back there). Memory
holds a few documents' entries at a time. Removals and additions are held back to the end, so a
URL that moves between two children is neither added nor removed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from monitor.check import crawlable, reciprocity, targetwide
from monitor.check import robotswatch as robots_watch
from monitor.check.context import Context, Loaded, Reads, load
from monitor.check.entries import Entries
from monitor.check.tally import INDEX_KINDS, Found, Tally, failure
from monitor.check.walk import Walk
from monitor.codec.states import DocumentState
from monitor.config import Alerts, Target
from monitor.core.model import CheckResult, DocumentResult, Issue, utcnow
from monitor.core.rules import RuleId
from monitor.indexnow import submissions
from monitor.net.addresses import is_private_target
from monitor.read.fetch import Fetcher
from monitor.read.workers import DigestPool
from monitor.robots import reader as robots_reader
from monitor.store import checkplan, targetrows
from monitor.store.checkplan import CheckWrites
from monitor.store.checkwriter import SnapshotWrite

__all__ = ["run_check", "utcnow"]


async def run_check(
    target: Target,
    *,
    engine: Engine,
    fetcher: Fetcher,
    alerts: Alerts | None = None,
    now: Callable[[], datetime] | None = None,
    max_changes: int = 1000,
    lease: targetrows.Lease | None = None,
    digests: DigestPool | None = None,
    robots_cache: robots_reader.RobotsCache | None = None,
    then: checkplan.Then | None = None,
) -> CheckResult:
    """Check one target: fetch, parse, validate, diff and store one snapshot; never raises
    for anything the target's server does (a failed check is a value).

    ``lease``: the daemon's lease on the target, given back in the snapshot's transaction
    (LeaseLost, and nothing stored, if another replica holds it now). ``then`` is the last
    step of that transaction, given what was written (a dry run reads its plan there and
    raises to roll it all back). ``digests`` is where big documents are digested: a caller
    that runs many checks passes one pool to all of them; without one, the check makes its own
    and stops its workers at the end. ``robots_cache``: the robots.txt versions this check
    reads are put in force there (the URL checks' cache).
    """
    pool = digests or DigestPool()
    clock = now or utcnow
    started = clock()
    try:
        loaded = await asyncio.to_thread(load, engine, target, started)
        check = _Check(target, engine, fetcher, alerts, started, max_changes, pool, loaded)
        check.lease, check.robots_cache = lease, robots_cache
        check.then = then
        return await check.run(clock)
    finally:
        if pool is not digests:
            await asyncio.to_thread(pool.shutdown)


class _Check:
    """One check: its stages in order, each with the check's context."""

    def __init__(self, target: Target, engine: Engine, fetcher: Fetcher,
                 alerts: Alerts | None, started: datetime, max_changes: int,
                 digests: DigestPool, loaded: Loaded) -> None:
        self.target, self.engine, self.fetcher, self.alerts = target, engine, fetcher, alerts
        self.started, self.max_changes, self.digests, self.loaded = (
            started, max_changes, digests, loaded)
        self.lease: targetrows.Lease | None = None
        self.then: checkplan.Then | None = None
        self.robots_cache: robots_reader.RobotsCache | None = None

    def _context(self, writes: CheckWrites) -> Context:
        return Context(
            target=self.target, fetcher=self.fetcher, digests=self.digests,
            started=self.started, loaded=self.loaded,
            reads=Reads(self.engine, self.loaded.state.target_id, writes), writes=writes,
            tally=Tally(self.max_changes), robots_cache=self.robots_cache,
            allow_private=self.target.settings.allow_private)

    async def run(self, clock: Callable[[], datetime]) -> CheckResult:
        """Walk the target within its ``check_timeout`` and store the snapshot; past the
        deadline, store that failure instead (the previous entries stay current)."""
        t0 = time.monotonic()
        limit = self.target.settings.check_timeout
        writes = self._writes()
        ctx = self._context(writes)
        # The deadline bounds the walk (the servers' part); the write always completes, so a
        # check is never stored twice, once whole and once as timed out.
        deadline = asyncio.timeout(limit)
        try:
            try:
                async with deadline:
                    entries, watched = await self._walk(ctx)
            except TimeoutError:
                if not deadline.expired():
                    raise
                writes.close()
                writes = self._writes()
                ctx = self._context(writes)
                _time_out(ctx, limit, (clock() - self.started).total_seconds())
                return await self._finish(ctx, clock, t0, [])
            dropped = await _settle(ctx, entries, watched)
            return await self._finish(ctx, clock, t0, dropped)
        finally:
            writes.close()

    def _writes(self) -> CheckWrites:
        return CheckWrites(self.loaded.state.target_id, self.started,
                           self.loaded.state.last_snapshot_id)

    async def _walk(self, ctx: Context) -> tuple[Entries, robots_watch.Watched]:
        ctx.allow_private = ctx.allow_private or await is_private_target(self.target.url)
        walk = Walk(ctx)
        root_robots = await walk.run()
        watched = await robots_watch.watch(ctx, root_robots)
        ctx.tally.take(watched.found)
        return walk.entries, watched

    async def _finish(self, ctx: Context, clock: Callable[[], datetime], t0: float,
                      dropped: list[str]) -> CheckResult:
        tally = ctx.tally
        if self.target.settings.indexnow.enabled:  # the key files delivery could not verify
            tally.take(Found(await ctx.reads.call(submissions.key_issues, self.target)))
        current_docs = {**ctx.state.documents, **tally.read}
        for url in dropped:
            current_docs.pop(url, None)
        issue_counts = Counter(tally.issue_counts)
        for state in current_docs.values():
            issue_counts.update(state.issue_counts)
        result = _result(ctx, current_docs, issue_counts, dropped, time.monotonic() - t0)
        end = SnapshotWrite(
            snapshot_id=None, target_id=ctx.target_id, started_at=self.started,
            finished_at=clock(), result=result, issue_counts=dict(issue_counts),
            document_states=list(tally.read.values()), dropped_documents=dropped,
            untouched_documents=tally.untouched,
            issues=_snapshot_issues(tally.check_issues, current_docs.values()))
        snapshot_id = await asyncio.to_thread(checkplan.commit, self.engine, ctx.writes, end,
                                              self._after(result, end.finished_at))
        return replace(result, snapshot_id=snapshot_id)

    def _after(self, result: CheckResult, finished_at: datetime) -> list[checkplan.Then]:
        """What runs in the snapshot's transaction once it is written."""
        steps: list[checkplan.Then] = []
        target, target_id = self.target, self.loaded.state.target_id
        if target.settings.indexnow.enabled:
            steps.append(lambda conn, written: submissions.enqueue_check(
                conn, target, target_id, written.snapshot_id, finished_at)
                if written.changes else None)
        if self.alerts is not None and self.alerts.rules:
            alerts = self.alerts
            steps.append(lambda conn, written: _raise_alerts(
                conn, alerts, replace(result, snapshot_id=written.snapshot_id), self.started))
        if self.then is not None:
            steps.append(self.then)
        if self.lease is not None:
            lease = self.lease
            steps.append(lambda conn, _written: targetrows.give_back(conn, lease))
        return steps


async def _settle(ctx: Context, entries: Entries, watched: robots_watch.Watched) -> list[str]:
    """Resolve held-back removals and additions (moves, true removals, true additions) and
    the verdicts of the whole target; return the documents no longer listed."""
    tally = ctx.tally
    if tally.outcome == "failed":
        return []
    documents = ctx.state.documents
    dropped = [u for u in documents if u not in tally.read and u not in tally.untouched
               and not _under_failed(u, documents, tally.failed)]
    if dropped:
        tally.take(await entries.gone((await ctx.reads.stored(dropped)).values()))
    moves = targetwide.settle_moves(tally.pending_added, tally.pending_removed)
    tally.take(moves)
    if tally.closed:
        ctx.writes.close_sets(tally.closed)
    if moves.changes:
        ctx.writes.changes(moves.changes)
    for marked in await reciprocity.mark_unanswered(ctx, dropped):
        tally.take(marked)
    for marked in await crawlable.mark_disallowed(ctx, dropped, watched.rules, watched.new):
        tally.take(marked)
    if not ctx.first:
        found = targetwide.churn_issue(ctx.state.lastmods,
                                       (tally.lastmods_compared, tally.lastmods_changed),
                                       tally.changes.kept, ctx.target.url)
        if found is not None:
            tally.take(Found((found,)))
    return dropped


def _time_out(ctx: Context, limit: float, elapsed: float) -> None:
    """The check's outcome when it ran past ``check_timeout``: failed at its root."""
    doc = DocumentResult(url=ctx.target.url, outcome="failed")
    ctx.tally.take(failure(doc, "check-timeout", f"the check did not finish within its "
                           f"check_timeout of {limit:g} s ({elapsed:.1f} s)", None, root=True))


def _result(ctx: Context, current_docs: dict[str, DocumentState], issue_counts: Counter[str],
            dropped: list[str], duration: float) -> CheckResult:
    """The check's result, built once from its tally."""
    tally = ctx.tally
    counts, failed = tally.changes.counts, tally.outcome == "failed"
    outcome = tally.outcome
    documents = list(tally.documents.values())
    if not failed and all(d.outcome in ("not_modified", "unchanged") for d in documents
                          ) and not any(found["changed"] for found in tally.robots):
        outcome = "unchanged"  # a new robots.txt is news
    if not failed and any(d.outcome == "failed" for d in documents):
        outcome = "partial"  # a document went unread: never shown as a success
    compared = not failed and not ctx.first
    return CheckResult(
        target=ctx.target.name, url=ctx.target.url, outcome=outcome,
        started_at=ctx.started, documents=documents, issues=tally.issues,
        robots=tally.robots, fetched_bytes=tally.fetched_bytes,
        error_kind=None if tally.failure is None else tally.failure[0],
        error_message=None if tally.failure is None else tally.failure[1],
        added=counts["added"], removed=counts["removed"], changed=counts["changed"],
        invalid_new=counts["invalid"], removed_invalid=tally.changes.removed_invalid,
        changes=tally.changes.kept, baseline=ctx.first and not failed,
        changes_truncated=sum(counts.values()) > len(tally.changes.kept),
        urls=sum(d.urls for d in current_docs.values()),
        invalid=sum(d.invalid for d in current_docs.values()),
        duplicates=issue_counts[RuleId.LOC_DUPLICATE], issue_counts=dict(issue_counts),
        dropped_documents={url: ctx.state.documents[url].urls for url in dropped
                           if url in ctx.state.documents},
        lastmod_compared=tally.lastmods_compared if compared else None,
        lastmod_changed=tally.lastmods_changed if compared else None,
        duration_seconds=duration,
    )


def _under_failed(url: str, documents: dict[str, DocumentState], failed: set[str]) -> bool:
    """Whether a previous document hangs below a document that failed this check."""
    seen = set()
    while url in documents and url not in seen:
        if url in failed:
            return True
        seen.add(url)
        parent = documents[url].parent_url
        if parent is None:
            return False
        url = parent
    return url in failed


def _snapshot_issues(found: list[Issue], docs: Iterable[DocumentState]) -> list[dict[str, Any]]:
    """``snapshots.issues``: those the check found, and the indexes' own (a sitemap's own go
    with its entries), with the count of those an index's parse did not keep."""
    out: list[dict[str, Any]] = [
        {"rule": i.rule, "message": i.message, "loc": i.loc, "document": i.document}
        for i in found
    ]
    for doc in docs:
        if doc.kind not in INDEX_KINDS or not doc.issue_counts:
            continue
        kept = Counter(i["rule"] for i in doc.issues)
        out.extend({**i, "document": doc.url} for i in doc.issues)
        out.extend({"rule": rule, "document": doc.url, "dropped": n - kept[rule]}
                   for rule, n in sorted(doc.issue_counts.items()) if n > kept[rule])
    return out


def _raise_alerts(conn: Connection, alerts: Alerts, result: CheckResult, now: datetime) -> None:
    """Evaluate the alert rules and write the outbox rows in the snapshot's transaction."""
    # Imported here: a daemon without alert rules never loads the alerting code.
    from monitor.alerts import firing
    from monitor.store import outbox

    context = outbox.rule_context(conn, result.target, now)
    notifications = firing.evaluate(alerts, result.target, result, context, now)
    assert result.snapshot_id is not None
    outbox.write(conn, result.snapshot_id, notifications, now)
