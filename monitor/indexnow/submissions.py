"""IndexNow submissions written where their changes are: a check's additions and moved
lastmods in its snapshot's transaction, a removal in the transaction that finds it ``gone``.

This module composes the pure stage (``monitor.indexnow.protocol``: what is submitted, batched per
host) with its SQL (``monitor.store.indexnowrows``); it takes the caller's Connection, so a
submission is committed with its change set or not at all. Delivery is
``monitor.indexnow.submitter``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection

from monitor.config import Target
from monitor.core.model import Issue
from monitor.indexnow import protocol as indexnow
from monitor.store import indexnowrows

__all__ = ["enqueue_check", "enqueue_gone", "in_scope", "key_issues", "planned"]


def planned(conn: Connection, target_id: int, snapshot_id: int,
            kinds: Iterable[str]) -> Iterator[indexnow.Batch]:
    """The batches a snapshot's recorded changes make, one at a time as each fills."""
    wanted = tuple(kinds)
    batcher = indexnow.Batcher()
    for kind, loc, before, after in indexnowrows.recorded(conn, target_id, snapshot_id):
        if indexnow.submitted(kind, before, after, wanted):
            yield from batcher.add(kind, loc)
    yield from batcher.finish()


def in_scope(conn: Connection, target: Target,
             batches: Iterable[indexnow.Batch]) -> list[indexnow.Batch]:
    """The batches cut to what the target may submit (``monitor.indexnow.keys``: the origins
    of its sitemaps, the key file's folder), as the delivery loop will cut them."""
    scope = indexnow.Scope.of(
        target.url, indexnowrows.document_origins(conn, target.name, indexnow.origin_of))
    settings = target.settings.indexnow
    key = settings.key or "KEY"
    kept = []
    for batch in batches:
        location = indexnow.key_location(batch.origin, key, settings.key_location)
        inside, outside = scope.split(batch.origin, batch.urls, location)
        if not outside:
            kept.append(batch)
        elif inside:  # the kinds of the URLs left are not known: counted no more
            kept.append(indexnow.Batch(batch.origin, inside))
    return kept


def _new(batches: Iterable[indexnow.Batch]) -> Iterator[indexnowrows.NewSubmission]:
    for batch in batches:
        yield indexnowrows.NewSubmission(batch.origin, batch.urls, batch.kinds, batch.digest())


def enqueue_check(conn: Connection, target: Target, target_id: int, snapshot_id: int,
                  now: datetime) -> int:
    """Write the submissions of a check's changes (none when the target does not submit);
    return how many URLs they hold. A baseline records no changes, so it submits nothing."""
    settings = target.settings.indexnow
    if not settings.enabled:
        return 0
    return indexnowrows.enqueue(conn, target.name, snapshot_id, f"snapshot {snapshot_id}",
                         _new(planned(conn, target_id, snapshot_id, settings.submit)), now)


def enqueue_gone(conn: Connection, target: Target, gone: Iterable[tuple[int, str]],
                 now: datetime) -> int:
    """Write the submissions of removals just found ``gone`` ((snapshot id, loc) pairs);
    return how many URLs they hold."""
    settings = target.settings.indexnow
    if not settings.enabled or "removed" not in settings.submit:
        return 0
    by_snapshot: dict[int, list[str]] = {}
    for snapshot_id, loc in gone:
        by_snapshot.setdefault(snapshot_id, []).append(loc)
    urls = 0
    for snapshot_id, locs in sorted(by_snapshot.items()):
        batches = indexnow.batches(("removed", loc) for loc in locs)
        # Each loc's triage is written once; the digest in the key makes a retried
        # transaction of the same batch one submission.
        urls += indexnowrows.enqueue(conn, target.name, snapshot_id, f"gone {snapshot_id}",
                              _new(batches), now)
    return urls


def key_issues(conn: Connection, target: Target) -> list[Issue]:
    """``indexnow-key-missing`` for each host whose key file did not verify at its last
    fetch (the delivery loop fetches them); none when the target does not submit."""
    settings = target.settings.indexnow
    if not settings.enabled or settings.key is None:
        return []
    digest = indexnowrows.key_digest(settings.key)
    # A host is fetched again while submissions wait for it, and they wait at most MAX_AGE.
    since = datetime.now(UTC) - timedelta(seconds=indexnow.MAX_AGE)
    return [Issue(indexnow.KEY_RULE,
                  indexnow.key_message(state.origin, state.location, state.detail or "failed",
                                       settings.key),
                  loc=indexnow.redact(state.location, settings.key), document=target.url)
            for state in indexnowrows.failing_keys(conn, target.name, since)
            if state.key_digest == digest]
