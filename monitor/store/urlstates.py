"""The URL checks' rows: each listed URL's current state, its transitions and the leases of the
replicas that check them.

``sync`` makes ``url_states`` follow the target's snapshots: the first time from the URL set of
the latest snapshot (one entry set at a time), then from the ``added`` and ``removed`` changes
recorded since, each URL placed in the check order (``turn``, ``monitor.core.sampling``). ``due``
picks what to check next (never checked first, in that order, then the oldest due), ``save``
writes a batch of verdicts: the row of each URL, a ``health`` change where its state moved, the
``reason`` of a removal once its URL was checked, the validators of its answer. ``health``
tells the counts and each state's estimate (``urlsample.counts``, read once). ``claim`` and
``release`` hold a target's URL checks for one replica at a time, so two replicas never check
the same URL in one period and a host's ``rate`` holds across them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from monitor.core import sampling
from monitor.core.model import URL_NOTES, URL_STATES
from monitor.store import changelocs, historysize, movepacks, urlsample
from monitor.store.checkreads import read_columns
from monitor.store.retry import transaction
from monitor.store.rowreads import Packs
from monitor.store.schema import (
    changes,
    entry_sets,
    removal_answers,
    snapshots,
    targets,
    url_checks,
    url_states,
)
from monitor.store.targetrows import target_id_of

__all__ = [
    "Due", "Saved", "claim", "due", "every", "examples", "first_round", "health",
    "listed", "release", "removals", "save", "sync", "target_id",
]

_BATCH = 5000
# A URL without an answer to trust (timeouts, 429, 503) this many checks in a row is unknown;
# until then it keeps its state (never counted as broken for it).
UNKNOWN_AFTER = 3
_HTTP = ("http://", "https://")


@dataclass(frozen=True, slots=True)
class Due:
    """A URL to check, with what its row says now."""

    loc: str
    listed: bool
    state: str
    attempts: int
    checked: bool  # it has a state from an answer (not only "never checked")
    removed_snapshot_id: int | None
    # the validators of its last answer, for a conditional re-check (None: none kept)
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class Saved:
    """One checked URL as ``save`` writes it."""

    due: Due
    state: str
    rule: str | None
    http_status: int | None
    final_url: str | None
    hops: int
    detail: str
    transient: bool
    retry_after: float | None = None
    reason: str | None = None  # a removed URL's, once known
    not_modified: bool = False  # a 304 to its validators: the state stands, checked now
    etag: str | None = None  # the validators of this answer, for the next re-check
    last_modified: str | None = None


def target_id(engine: Engine, name: str) -> int | None:
    """The id of the target of that name, or None."""
    return transaction(engine, lambda conn: target_id_of(conn, name))


def _insert_ignore(conn: Connection, table: Any = url_states) -> Any:
    """``INSERT`` that leaves a row already there alone (SQLite's and PostgreSQL's own)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table).on_conflict_do_nothing()


def sync(engine: Engine, name: str) -> tuple[int, int] | None:
    """Bring the target's URL states up to its latest snapshot; return (target id, that
    snapshot's id), or None when the target has no snapshot yet."""

    def latest(conn: Connection) -> tuple[int, int, int | None, str | None] | None:
        target_id = target_id_of(conn, name)
        if target_id is None:
            return None
        last = conn.execute(select(func.max(snapshots.c.id)).where(
            snapshots.c.target_id == target_id)).scalar()
        if last is None:
            return None
        k = url_checks.c
        row = conn.execute(select(k.synced_snapshot_id, k.sample_key).where(
            k.target_id == target_id)).first()
        if row is None:
            conn.execute(_insert_ignore(conn, url_checks).values(target_id=target_id))
            return target_id, last, None, None
        return target_id, last, row[0], row[1]

    found = transaction(engine, latest)
    if found is None:
        return None
    target_id, last, synced, key = found
    if key is None:
        key = urlsample.place(engine, target_id)
    if synced == last:
        return target_id, last
    if synced is None:
        _load(engine, target_id, last, key)
    else:
        _follow(engine, target_id, synced, last, key)
    return target_id, last


def _load(engine: Engine, target_id: int, last: int, key: str) -> None:
    """The first sync: every URL of the latest snapshot, one entry set a transaction."""
    v = entry_sets.c
    live = ((v.target_id == target_id) & (v.first_snapshot_id <= last)
            & (v.removed_snapshot_id.is_(None) | (v.removed_snapshot_id > last)))
    ids = transaction(engine, lambda conn: [
        row[0] for row in conn.execute(select(v.id).where(live).order_by(v.id))])
    for set_id in ids:
        def load(conn: Connection, set_id: int = set_id) -> None:
            rows = read_columns(conn, select(v.data).where(v.id == set_id))
            locs = [loc for loc in rows[0][0].locs() if loc.startswith(_HTTP)]
            statement = _insert_ignore(conn)
            for start in range(0, len(locs), _BATCH):
                conn.execute(statement, [
                    {"target_id": target_id, "loc": loc, "turn": sampling.turn(key, loc)}
                    for loc in locs[start:start + _BATCH]])
        transaction(engine, load)
    transaction(engine, lambda conn: conn.execute(
        update(url_checks).where(url_checks.c.target_id == target_id)
        .values(synced_snapshot_id=last)))


def _follow(engine: Engine, target_id: int, synced: int, last: int, key: str) -> None:
    """Apply the ``added`` and ``removed`` changes of the snapshots after ``synced``, ``_BATCH``
    at a time, each batch in a transaction of its own (applying one twice changes nothing, so
    a sync cut short is taken up again), then mark the URL states as of ``last``. A URL added
    or dropped is checked ahead of the random order (a ``turn`` below 0), outside the
    sample."""
    c, u = changes.c, url_states.c
    relist = (update(url_states)
              .where(u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"),
                     u.listed.is_(False))
              .values(listed=True, removed_snapshot_id=None))
    drop = (update(url_states)
            .where(u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"))
            .values(listed=False, removed_snapshot_id=bindparam("b_s"), due_at=None,
                    turn=case((u.turn >= 0, -u.turn - 1), else_=u.turn)))
    after = 0

    def apply(conn: Connection) -> int:
        rows = conn.execute(
            select(c.id, c.snapshot_id, c.kind, c.loc, c.entry_set_id, c.members)
            .where(c.target_id == target_id, c.snapshot_id > synced, c.snapshot_id <= last,
                   c.kind.in_(("added", "removed")), c.id > after)
            .order_by(c.id).limit(_BATCH)
        ).all()
        packs = Packs(conn)
        final: dict[str, tuple[str, int]] = {}  # a loc's last change wins
        for r in rows:
            locs = ([r.loc] if r.members is None else
                    [loc for loc, _b, _a in packs.members(r.id, r.entry_set_id, None)])
            final.update((loc, (r.kind, r.snapshot_id)) for loc in locs)
        added = [{"target_id": target_id, "loc": loc,
                  "turn": sampling.turn(key, loc, first=True)}
                 for loc, (kind, _s) in final.items()
                 if kind == "added" and loc.startswith(_HTTP)]
        removed = [{"b_t": target_id, "b_l": loc, "b_s": snapshot}
                   for loc, (kind, snapshot) in final.items()
                   if kind == "removed" and loc.startswith(_HTTP)]
        if added:
            conn.execute(_insert_ignore(conn), added)
            conn.execute(relist, [{"b_t": target_id, "b_l": a["loc"]} for a in added])
        if removed:
            # a URL listed again and dropped since the last sync may have no row left (its
            # last removal's was deleted once it had a reason): its removal is looked at too
            conn.execute(_insert_ignore(conn), [{"target_id": target_id, "loc": r["b_l"]}
                                                for r in removed])
            conn.execute(drop, removed)
        return int(rows[-1].id) if len(rows) == _BATCH else 0

    while after := transaction(engine, apply):
        pass
    transaction(engine, lambda conn: conn.execute(
        update(url_checks).where(url_checks.c.target_id == target_id)
        .values(synced_snapshot_id=last)))


def _due_row(row: Any) -> Due:
    return Due(row.loc, bool(row.listed), row.state, row.attempts, row.checked_at is not None,
               row.removed_snapshot_id, row.etag, row.last_modified)


_DUE_COLUMNS = (url_states.c.loc, url_states.c.listed, url_states.c.state,
                url_states.c.attempts, url_states.c.checked_at, url_states.c.removed_snapshot_id,
                url_states.c.etag, url_states.c.last_modified)


def _due_rows(conn: Connection, *, query: Any) -> list[Due]:
    return [_due_row(r) for r in conn.execute(query)]


def due(engine: Engine, target_id: int, now: datetime, limit: int) -> list[Due]:
    """The next URLs to check: never checked (or dropped, for their reason) first, in the
    check order (those listed since the first round ahead, then the random order, whose
    prefix is a uniform sample of the listing), then those whose time came, oldest first.
    Two reads, each in the order of the ``(target_id, due_at, turn)`` index."""
    u = url_states.c
    fresh = (select(*_DUE_COLUMNS).where(u.target_id == target_id, u.due_at.is_(None))
             .order_by(u.turn).limit(limit))
    later = (select(*_DUE_COLUMNS).where(u.target_id == target_id, u.due_at <= now)
             .order_by(u.due_at, u.turn))

    def read(conn: Connection) -> list[Due]:
        found = _due_rows(conn, query=fresh)
        if len(found) < limit:
            found += _due_rows(conn, query=later.limit(limit - len(found)))
        return found

    return transaction(engine, read)


def every(engine: Engine, target_id: int) -> Iterator[list[Due]]:
    """Every URL of the target, listed or awaiting its reason, a batch at a time."""
    u = url_states.c
    after = ""
    while True:
        query = (select(*_DUE_COLUMNS).where(u.target_id == target_id, u.loc > after)
                 .order_by(u.loc).limit(_BATCH))
        batch = transaction(engine, partial(_due_rows, query=query))
        if not batch:
            return
        yield batch
        after = batch[-1].loc


def listed(engine: Engine, target_id: int, locs: Iterable[str]) -> set[str]:
    """Which of ``locs`` the target lists now."""
    wanted = sorted(set(locs))
    if not wanted:
        return set()
    u = url_states.c
    return transaction(engine, lambda conn: {
        row[0] for start in range(0, len(wanted), 500)
        for row in conn.execute(select(u.loc).where(
            u.target_id == target_id, u.listed.is_(True),
            u.loc.in_(wanted[start:start + 500])))})


def _state_json(state: str, status: int | None, final_url: str | None, hops: int,
                detail: str | None, found: datetime | None = None) -> str:
    value: dict[str, Any] = {"state": state, "http_status": status}
    if found is not None:  # when the check found it: the snapshot's time may be hours before
        value["checked_at"] = found.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if final_url:
        value["final_url"] = final_url
    if hops:
        value["hops"] = hops
    if detail:
        value["detail"] = detail
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_ANSWERED = ("state", "rule", "http_status", "final_url", "hops", "detail", "attempts",
             "checked_at", "due_at", "etag", "last_modified")


def _by_loc(*columns: str) -> Any:
    """``UPDATE url_states SET column = :b_column, ... WHERE target_id = :b_t AND loc = :b_l``,
    run once for a batch of parameter sets (executemany: no statement built per URL)."""
    u = url_states.c
    return (update(url_states)
            .where(u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"))
            .values({name: bindparam(f"b_{name}") for name in columns}))


_STATEMENTS = {
    "retry": _by_loc("attempts", "due_at", "detail"),
    "answered": _by_loc(*_ANSWERED),
    "moved": _by_loc(*_ANSWERED, "since"),
    # the validators go with an answer's state: a 304 must not stand for "unknown"
    "unknown": _by_loc("state", "rule", "attempts", "due_at", "detail", "etag",
                       "last_modified"),
    "to-unknown": _by_loc("state", "rule", "attempts", "due_at", "detail", "since", "etag",
                          "last_modified"),
    "kept": _by_loc("attempts", "checked_at", "due_at"),
}


def save(engine: Engine, target_id: int, snapshot_id: int, saved: Sequence[Saved],
         now: datetime, recheck: float,
         also: Callable[[Connection], object] | None = None) -> int:
    """Write a batch of verdicts in one transaction, each kind of row write as one
    executemany; return how many ``health`` changes (transitions) it wrote. ``also`` writes
    in the same transaction (what the removals' reasons set off)."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in _STATEMENTS}
    gone: list[dict[str, Any]] = []
    transitions: list[dict[str, Any]] = []
    reasons: list[dict[str, Any]] = []
    due_next = now + timedelta(seconds=recheck)
    for s in saved:
        key = {"b_t": target_id, "b_l": s.due.loc}
        if not s.due.listed:
            if s.reason is None:  # no answer yet: try again later
                rows["retry"].append({**key, "b_attempts": s.due.attempts + 1,
                                      "b_due_at": _retry_at(now, s, recheck),
                                      "b_detail": s.detail or None})
                continue
            if s.due.removed_snapshot_id is not None:
                reasons.append({"b_t": target_id, "b_s": s.due.removed_snapshot_id,
                                "b_l": s.due.loc, "b_reason": s.reason,
                                "b_answer": _state_json(s.state, s.http_status,
                                                        s.final_url, s.hops,
                                                        s.detail or None, now)})
            gone.append(key)
            continue
        if s.not_modified:  # unchanged since the answer its state came from
            rows["kept"].append({**key, "b_attempts": 0, "b_checked_at": now,
                                 "b_due_at": due_next})
            continue
        if s.transient and s.due.attempts + 1 < UNKNOWN_AFTER:
            rows["retry"].append({**key, "b_attempts": s.due.attempts + 1,
                                  "b_due_at": _retry_at(now, s, recheck),
                                  "b_detail": s.detail or None})
            continue
        if s.transient:  # no answer to trust, UNKNOWN_AFTER times in a row: unknown
            state = "unknown"
            moved = s.due.state != state
            values = {**key, "b_state": state, "b_rule": None,
                      "b_attempts": s.due.attempts + 1, "b_due_at": _retry_at(now, s, recheck),
                      "b_detail": s.detail or None, "b_etag": None, "b_last_modified": None}
            if moved:
                values["b_since"] = now
            rows["to-unknown" if moved else "unknown"].append(values)
        else:
            state = s.state
            moved = s.due.state != state
            values = {**key, "b_state": state, "b_rule": s.rule, "b_http_status": s.http_status,
                      "b_final_url": s.final_url, "b_hops": s.hops, "b_detail": s.detail or None,
                      "b_attempts": 0, "b_checked_at": now, "b_due_at": due_next,
                      "b_etag": s.etag, "b_last_modified": s.last_modified}
            if moved:
                values["b_since"] = now
            rows["moved" if moved else "answered"].append(values)
        # A transition: from a state an answer gave, or a first answer that is a problem.
        if moved and (s.due.checked or state != "ok"):
            transitions.append({
                "snapshot_id": snapshot_id, "target_id": target_id, "kind": "health",
                "loc": s.due.loc, "before": _state_json(s.due.state, None, None, 0, None),
                "after": _state_json(state, s.http_status, s.final_url, s.hops, s.detail,
                                     now),
                # the rule of the state moved to: an info finding is not one
                "rule": None if s.rule in URL_NOTES else s.rule,
            })

    def write(conn: Connection) -> int:
        u, c = url_states.c, changes.c
        for name, params in rows.items():
            if params:
                conn.execute(_STATEMENTS[name], params)
        if reasons:  # the removed URL's row goes: its story keeps what it last said
            last = _last_states(conn, target_id, [r["b_l"] for r in reasons])
            kept = set(conn.execute(select(snapshots.c.id).where(  # not pruned meanwhile
                snapshots.c.id.in_({r["b_s"] for r in reasons}))).scalars())
            answers = [{"target_id": target_id, "snapshot_id": r["b_s"], "loc": r["b_l"],
                        "reason": r["b_reason"], "answer": r["b_answer"],
                        "last": _last_json(last.get(r["b_l"]))}
                       for r in reasons if r["b_s"] in kept]
            if answers:
                conn.execute(_insert_ignore(conn, removal_answers), answers)
            # a packed removal is taken out of its pack first, to hold its reason
            movepacks.take_out(conn, target_id, [(r["b_s"], r["b_l"]) for r in reasons])
            conn.execute(update(changes).where(
                c.target_id == bindparam("b_t"), c.kind == "removed",
                c.snapshot_id == bindparam("b_s"), c.loc == bindparam("b_l"),
            ).values(reason=bindparam("b_reason")), reasons)
        if gone:
            conn.execute(delete(url_states).where(
                u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"),
                u.listed.is_(False)), gone)
        if transitions:
            conn.execute(insert(changes), transitions)
            historysize.add(conn, snapshot_id, sum(historysize.change_row_bytes(
                t["loc"], t["before"], t["after"]) for t in transitions))
            changelocs.note_locs(conn, target_id, [t["loc"] for t in transitions])
            conn.execute(update(targets).where(targets.c.id == target_id).values(
                change_count=targets.c.change_count + len(transitions)))
        if also is not None:
            also(conn)
        return len(transitions)

    return transaction(engine, write)


def _last_states(conn: Connection, target_id: int, locs: list[str]) -> dict[str, Any]:
    """The rows of these dropped URLs: the last state their checks found while listed."""
    u = url_states.c
    return {row.loc: row for row in conn.execute(
        select(u.loc, u.state, u.http_status, u.final_url, u.hops, u.detail, u.since,
               u.checked_at)
        .where(u.target_id == target_id, u.listed.is_(False), u.loc.in_(locs)))}


def _last_json(row: Any) -> str | None:
    """The state a dropped URL's checks found while it was listed, with since when (None
    when it was never answered)."""
    if row is None or row.checked_at is None:
        return None
    last = json.loads(_state_json(row.state, row.http_status, row.final_url, row.hops or 0,
                                  row.detail, row.checked_at))
    if row.since is not None:
        last["since"] = row.since.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps(last, separators=(",", ":"), ensure_ascii=False)


def _retry_at(now: datetime, s: Saved, recheck: float) -> datetime:
    """When a URL without a trustworthy answer is tried again: after its ``Retry-After``, or
    5 minutes doubling with each attempt, never later than ``recheck``."""
    backoff = min(recheck, 300.0 * 2 ** s.due.attempts)
    if s.retry_after is not None:
        backoff = max(backoff, min(s.retry_after, recheck))
    return now + timedelta(seconds=backoff)


def removals(engine: Engine, target_id: int, snapshot_id: int, locs: Sequence[str],
             ) -> dict[str, tuple[str, dict[str, Any]]]:
    """The reason of each of these removals of a snapshot, and what its URL answered, for
    those the URL checks looked at (``check --urls``: the check's own removals)."""
    a = removal_answers.c
    wanted = sorted(set(locs))

    def read(conn: Connection) -> dict[str, tuple[str, dict[str, Any]]]:
        return {row.loc: (row.reason, json.loads(row.answer))
                for start in range(0, len(wanted), 500)
                for row in conn.execute(select(a.loc, a.reason, a.answer).where(
                    a.target_id == target_id, a.snapshot_id == snapshot_id,
                    a.loc.in_(wanted[start:start + 500])))}

    return transaction(engine, read) if wanted else {}


def health(engine: Engine, name: str) -> dict[str, Any] | None:
    """The target's URL health as the API tells it: the listed URLs per state now, how many
    were checked, and each state's estimated share of the listing with its 95% interval
    (exact once every listed URL was checked); None when no target has that name."""
    found = target_id(engine, name)
    if found is None:
        return None
    counted = urlsample.counts(engine, found, datetime.now(UTC), 1.0)
    parts = counted.strata
    return {
        "target": name, "listed": counted.listed, "checked": parts.checked,
        "unchecked": parts.listed - parts.checked if parts.unchecked is None else parts.unchecked,
        "complete": parts.complete, "url_health": counted.states,
        "estimate": {state: e.as_json()
                     for state, e in sampling.estimate(parts, URL_STATES).items()},
    }


def first_round(engine: Engine, target_id: int, now: datetime, unchecked: int) -> bool:
    """Whether every URL the target listed has been checked once (its first complete round,
    kept as ``url_checks.first_round_at`` the first time it holds), given how many listed URLs
    were never tried (``urlsample.Counts.unchecked``, as the round counted them)."""
    k = url_checks.c

    def read(conn: Connection) -> bool:
        done = conn.execute(select(k.first_round_at).where(k.target_id == target_id)
                            ).scalar() is not None
        if not done and unchecked == 0:
            conn.execute(update(url_checks).where(k.target_id == target_id)
                         .values(first_round_at=now))
            done = True
        return done

    return transaction(engine, read)


def examples(engine: Engine, target_id: int, states: Sequence[str], limit: int,
             ) -> dict[str, list[str]]:
    """Up to ``limit`` listed URLs in each of these states, by loc (an alert's examples)."""
    u = url_states.c

    def read(conn: Connection) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for state in states:
            locs = conn.execute(select(u.loc).where(
                u.target_id == target_id, u.listed.is_(True), u.state == state)
                .order_by(u.loc).limit(limit)).scalars().all()
            if locs:
                found[state] = list(locs)
        return found

    return transaction(engine, read)


def claim(engine: Engine, target_id: int, owner: str, now: datetime, lease: float) -> bool:
    """Take the target's URL checks for ``lease`` seconds, unless another replica holds them."""
    k = url_checks.c
    statement = update(url_checks).where(
        k.target_id == target_id,
        k.lease_until.is_(None) | (k.lease_until < now) | (k.lease_owner == owner),
    ).values(lease_owner=owner, lease_until=now + timedelta(seconds=lease))

    def take(conn: Connection) -> bool:
        conn.execute(_insert_ignore(conn, url_checks).values(target_id=target_id))
        return bool(conn.execute(statement).rowcount == 1)

    return transaction(engine, take)


def release(engine: Engine, target_id: int, owner: str) -> None:
    k = url_checks.c
    transaction(engine, lambda conn: conn.execute(
        update(url_checks).where(k.target_id == target_id, k.lease_owner == owner)
        .values(lease_owner=None, lease_until=None)))


def states_by_target(engine: Engine, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """The listed URLs per health state of each of these targets (the pages)."""
    if not names:
        return {}
    u, t = url_states.c, targets.c
    query = (select(t.name, u.state, func.count())
             .join(targets, targets.c.id == u.target_id)
             .where(t.name.in_(list(names)), u.listed.is_(True))
             .group_by(t.name, u.state))

    def read(conn: Connection) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for name, state, n in conn.execute(query):
            found.setdefault(name, {})[state] = int(n)
        return found

    return transaction(engine, read)
