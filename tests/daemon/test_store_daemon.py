"""The daemon's queries on SQLite and PostgreSQL alike: claims, leases, gauges, API pages."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import T0, add_snapshot, add_target
from sqlalchemy import Engine, select

from monitor.listing import params as listing
from monitor.store import listingreads as store_listing
from monitor.store import targetrows as store
from monitor.store.schema import targets


def test_upsert_creates_once_and_follows_url_changes(engine: Engine) -> None:
    later = T0 + timedelta(seconds=5)
    store.upsert_targets(engine, [("a", "http://127.0.0.1/a.xml", later),
                                  ("b", "http://127.0.0.1/b", T0)], T0)
    store.upsert_targets(engine, [("a", "http://127.0.0.1/new.xml", T0),
                                  ("b", "http://127.0.0.1/b", T0)], T0)
    with engine.connect() as conn:
        rows = {r.name: r for r in conn.execute(select(targets))}
    assert {n: r.url for n, r in rows.items()} == {
        "a": "http://127.0.0.1/new.xml", "b": "http://127.0.0.1/b"}
    # A new target is first due when its row is made; a known one keeps its due time.
    assert _utc(rows["a"].next_due_at) == later


def test_a_removed_target_is_parked_until_it_is_configured_again(engine: Engine) -> None:
    store.upsert_targets(engine, [("a", "http://127.0.0.1/a", T0), ("b", "http://127.0.0.1/b",
                                                                    T0)], T0)
    store.upsert_targets(engine, [("a", "http://127.0.0.1/a", T0)], T0)
    assert due_of(engine, "b") == store.PARKED
    assert claim(engine, "r1", T0 + timedelta(days=365)) == ["a"]  # never due, never read
    parked = store.get_target(engine, "b")
    assert parked is not None
    assert parked["next_due_at"] is None  # the API: due at no time
    back = T0 + timedelta(seconds=7)
    store.upsert_targets(engine, [("a", "http://127.0.0.1/a", T0), ("b", "http://127.0.0.1/b",
                                                                    back)], T0)
    assert due_of(engine, "b") == back
    assert claim(engine, "r1", back) == ["b"]


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(tzinfo=UTC)


def claim(engine: Engine, owner: str, now: datetime, *names: str, lease: float = 60,
          limit: int = 10) -> list[str]:
    """The names ``owner`` claims at ``now`` among ``names`` (any target if none given)."""
    listed = store.configured(names) if names else None
    return [n for n, _ in store.claim_due(engine, listed, owner, now, lease=lease, limit=limit)]


def due_of(engine: Engine, name: str) -> datetime | None:
    """A target's stored due time."""
    with engine.connect() as conn:
        return _utc(conn.execute(
            select(targets.c.next_due_at).where(targets.c.name == name)).scalar_one())


def test_only_one_owner_claims_a_due_target(engine: Engine) -> None:
    add_target(engine, "a")  # never checked: due since its row was made
    assert claim(engine, "r1", T0, "a") == ["a"]
    # Leased: nobody else, not even the holder, gets it again while the lease lasts.
    assert claim(engine, "r2", T0, "a") == []
    assert claim(engine, "r1", T0 + timedelta(seconds=59), "a") == []


def test_a_released_target_is_claimable_when_its_next_due_time_comes(engine: Engine) -> None:
    add_target(engine, "a")
    assert claim(engine, "r1", T0, "a") == ["a"]
    assert store.release(engine, "a", "r1", next_due_at=T0 + timedelta(seconds=10))
    assert due_of(engine, "a") == T0 + timedelta(seconds=10)
    assert claim(engine, "r2", T0 + timedelta(seconds=9.9), "a") == []
    assert claim(engine, "r2", T0 + timedelta(seconds=10), "a") == ["a"]


def test_an_expired_lease_is_taken_over(engine: Engine) -> None:
    add_target(engine, "a")
    assert claim(engine, "dead", T0, "a", lease=5) == ["a"]
    # The claim leaves the due time as it was: the holder's release sets the next one. The
    # dead replica still holds it at 4 s, and loses it when its lease runs out.
    assert claim(engine, "r2", T0 + timedelta(seconds=4), "a", lease=5) == []
    assert claim(engine, "r2", T0 + timedelta(seconds=5.1), "a", lease=5) == ["a"]
    # The dead replica's late release must not free the new holder's lease nor move its due.
    assert not store.release(engine, "a", "dead", next_due_at=T0 + timedelta(hours=1))
    assert due_of(engine, "a") == T0
    with engine.connect() as conn:
        assert conn.execute(select(targets.c.lease_owner)).scalar_one() == "r2"


def test_renew_extends_only_the_holders_lease(engine: Engine) -> None:
    add_target(engine, "a")
    assert claim(engine, "r1", T0, "a", lease=5) == ["a"]
    assert store.renew(engine, "a", "r1", T0 + timedelta(seconds=4), lease=5)
    assert not store.renew(engine, "a", "r2", T0 + timedelta(seconds=4), lease=5)
    assert claim(engine, "r2", T0 + timedelta(seconds=6), "a", lease=5) == []
    assert claim(engine, "r2", T0 + timedelta(seconds=9.5), "a", lease=5) == ["a"]


def test_a_release_without_a_due_time_keeps_the_one_stored(engine: Engine) -> None:
    add_target(engine, "a")
    assert claim(engine, "r1", T0, "a") == ["a"]
    store.release(engine, "a", "r1", next_due_at=T0 + timedelta(seconds=100))
    assert claim(engine, "r1", T0 + timedelta(seconds=100), "a") == ["a"]
    store.release(engine, "a", "r1")
    assert due_of(engine, "a") == T0 + timedelta(seconds=100)


def test_last_gauges_come_from_the_last_snapshot(engine: Engine) -> None:
    a = add_target(engine, "a")
    add_target(engine, "never")
    add_snapshot(engine, a, at=T0, urls=5, invalid=1, issue_counts={"lastmod-invalid": 1})
    add_snapshot(engine, a, at=T0 + timedelta(minutes=1), outcome="failed", urls=5, invalid=1,
                 issue_counts={"lastmod-invalid": 1, "child-fetch-failed": 1},
                 docs=("failed", "unchanged", "unchanged"))
    found = {g.name: g for g in store.last_gauges(engine, ["a", "never"])}
    assert set(found) == {"a"}
    g = found["a"]
    assert g.last_check == T0 + timedelta(minutes=1, seconds=1)
    assert g.last_success == T0 + timedelta(seconds=1)
    assert (g.urls, g.invalid) == (5, 1)
    assert g.issue_counts == {"lastmod-invalid": 1, "child-fetch-failed": 1}
    assert g.documents == {"failed": 1, "unchanged": 2}


def test_last_gauges_count_documents_that_have_no_row(engine: Engine) -> None:
    """From 0006 on a 304 or unchanged document gets no row; its snapshot counts it."""
    a = add_target(engine, "a")
    add_snapshot(engine, a, docs=("failed", "not_modified", "unchanged", "unchanged"),
                 counted=True)
    (g,) = store.last_gauges(engine, ["a"])
    assert g.documents == {"failed": 1, "not_modified": 1, "unchanged": 2}


def test_targets_carry_their_last_snapshot_and_counts(engine: Engine) -> None:
    a = add_target(engine, "a")
    add_target(engine, "b")
    add_snapshot(engine, a, urls=2, change_list=(("added", "x"), ("added", "y")))
    last = add_snapshot(engine, a, at=T0 + timedelta(minutes=1), urls=1,
                        change_list=(("removed", "y"),))
    listed = {t["name"]: t for t in store.list_targets(engine)}
    assert listed["a"]["snapshots"] == 2
    assert listed["a"]["changes"] == 3
    assert listed["a"]["last_snapshot"]["id"] == last
    assert listed["a"]["last_snapshot"]["urls"] == 1
    assert listed["a"]["last_snapshot"]["started_at"] == "2024-05-01T12:01:00Z"
    assert listed["b"]["last_snapshot"] is None
    assert listed["b"]["snapshots"] == 0
    one = store.get_target(engine, "a")
    assert one is not None
    assert one["last_snapshot"] == listed["a"]["last_snapshot"]
    assert store.get_target(engine, "zzz") is None


def test_snapshot_pages_go_backwards_by_id(engine: Engine) -> None:
    a = add_target(engine, "a")
    ids = [add_snapshot(engine, a, at=T0 + timedelta(minutes=i)) for i in range(5)]
    first = store.list_snapshots(engine, "a", limit=2)
    assert first is not None
    assert [s["id"] for s in first] == ids[::-1][:2]
    rest = store.list_snapshots(engine, "a", limit=10, before=first[-1]["id"])
    assert rest is not None
    assert [s["id"] for s in rest] == ids[::-1][2:]
    assert store.list_snapshots(engine, "nope", limit=1) is None


def test_changes_filter_by_time_and_kind_and_page(engine: Engine) -> None:
    a = add_target(engine, "a")
    add_snapshot(engine, a, at=T0, change_list=(("added", "u1"), ("added", "u2")))
    add_snapshot(engine, a, at=T0 + timedelta(hours=2),
                 change_list=(("removed", "u1"), ("invalid", "u2"), ("added", "u3")))

    def changes(since: datetime | None = None, kinds: tuple[str, ...] = (),
                after: str | None = None, limit: int | None = None,
                ) -> tuple[list[dict[str, Any]], str | None]:
        opened = store_listing.open_changes(engine, "a", since, kinds, after)
        body = json.loads("".join(listing.render(opened, "json", limit=limit)))
        return body["changes"], body["next_cursor"]

    everything, _ = changes()
    assert [c["loc"] for c in everything] == ["u3", "u2", "u1", "u2", "u1"]
    recent, _ = changes(since=T0 + timedelta(hours=1))
    assert [(c["kind"], c["loc"]) for c in recent] == [
        ("added", "u3"), ("invalid", "u2"), ("removed", "u1")]
    assert recent[0]["at"] == "2024-05-01T14:00:00Z"
    assert recent[0]["after"] == {"lastmod": None}
    assert changes(since=T0 + timedelta(hours=3)) == ([], None)
    added, cursor = changes(kinds=("added",), limit=2)
    assert [c["loc"] for c in added] == ["u3", "u2"]
    older, end = changes(kinds=("added",), after=cursor, limit=2)
    assert [c["loc"] for c in older] == ["u1"]
    assert end is None
    with pytest.raises(listing.BadParameter, match="another query"):
        changes(after=cursor)
    with pytest.raises(listing.NotFound):
        store_listing.open_changes(engine, "nope", None, (), None)

def test_a_claim_takes_the_longest_due_free_targets_up_to_its_limit(engine: Engine) -> None:
    dues = {"new": T0, "old": T0 - timedelta(seconds=1), "older": T0 - timedelta(seconds=5),
            "leased": T0 - timedelta(seconds=60), "later": T0 + timedelta(seconds=100),
            "other": T0 - timedelta(seconds=9)}
    for name, due in dues.items():
        add_target(engine, name, due=due)
    assert claim(engine, "r1", T0, "leased") == ["leased"]
    mine = ("new", "old", "older", "leased", "later", "missing")  # not "other"
    # The longest-due first (in no order: RETURNING keeps none); "other" is not in the list.
    assert sorted(claim(engine, "r2", T0, *mine, limit=2)) == ["old", "older"]
    assert claim(engine, "r2", T0, *mine, limit=5) == ["new"]
    assert claim(engine, "r3", T0, *mine) == []
    with engine.connect() as conn:
        owners = dict(conn.execute(select(targets.c.name, targets.c.lease_owner)).all())
    assert owners == {"new": "r2", "old": "r2", "older": "r2", "leased": "r1", "later": None,
                      "other": None}
    # Without a list, any due free target: here the one no list named.
    assert claim(engine, "r3", T0) == ["other"]
    got = store.claim_due(engine, store.configured(["later"]), "r3",
                          T0 + timedelta(seconds=100), lease=60, limit=1)
    assert got == [("later", T0 + timedelta(seconds=100))]  # with its due time
    assert store.claim_due(engine, store.configured([]), "r3", T0, lease=60, limit=5) == []


def test_racing_claims_split_the_targets_between_replicas(engine: Engine) -> None:
    names = [f"t{i}" for i in range(40)]
    for name in names:
        add_target(engine, name)
    listed = store.configured(names)
    start = threading.Barrier(4)

    def replica(owner: str) -> list[str]:
        start.wait()
        got: list[str] = []
        for _ in range(6):
            got += [n for n, _ in store.claim_due(engine, listed, owner, T0, lease=60, limit=3)]
        return got

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(replica, ["r0", "r1", "r2", "r3"]))
    claimed = [name for got in results for name in got]
    assert sorted(claimed) == sorted(set(claimed))  # nobody claimed what another got
    assert set(claimed) == set(names)  # 72 asked for: every one of the 40 went to someone
    with engine.connect() as conn:
        owners = dict(conn.execute(select(targets.c.name, targets.c.lease_owner)).all())
    for owner, got in zip(["r0", "r1", "r2", "r3"], results, strict=True):
        assert all(owners[name] == owner for name in got)
