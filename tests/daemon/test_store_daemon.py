"""The daemon's queries on SQLite and PostgreSQL alike: claims, leases, gauges, API pages."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from conftest import T0, add_snapshot, add_target
from sqlalchemy import Engine, select

from monitor import listing
from monitor.store import daemon as store
from monitor.store import listing as store_listing
from monitor.store.schema import targets


def test_upsert_creates_once_and_follows_url_changes(engine: Engine) -> None:
    store.upsert_targets(engine, [("a", "http://127.0.0.1/a.xml"), ("b", "http://127.0.0.1/b")], T0)
    store.upsert_targets(engine, [("a", "http://127.0.0.1/new.xml")], T0)
    with engine.connect() as conn:
        rows = dict(conn.execute(select(targets.c.name, targets.c.url)).all())
    assert rows == {"a": "http://127.0.0.1/new.xml", "b": "http://127.0.0.1/b"}


def test_only_one_owner_claims_a_due_target(engine: Engine) -> None:
    add_target(engine, "a")
    assert store.claim(engine, "a", "r1", T0, lease=60, interval=10)
    # Leased and no longer due: nobody else, not even the holder, gets it again.
    assert not store.claim(engine, "a", "r2", T0, lease=60, interval=10)
    assert not store.claim(engine, "a", "r1", T0, lease=60, interval=10)


def test_a_released_target_is_claimable_when_due_again(engine: Engine) -> None:
    add_target(engine, "a")
    assert store.claim(engine, "a", "r1", T0, lease=60, interval=10)
    store.release(engine, "a", "r1")
    assert not store.claim(engine, "a", "r2", T0 + timedelta(seconds=9.9), lease=60, interval=10)
    assert store.claim(engine, "a", "r2", T0 + timedelta(seconds=10), lease=60, interval=10)


def test_an_expired_lease_is_taken_over(engine: Engine) -> None:
    add_target(engine, "a")
    assert store.claim(engine, "a", "dead", T0, lease=5, interval=1)
    # Due after 1 s but leased until 5 s: the dead replica still holds it at 4 s.
    assert not store.claim(engine, "a", "r2", T0 + timedelta(seconds=4), lease=5, interval=1)
    assert store.claim(engine, "a", "r2", T0 + timedelta(seconds=5.1), lease=5, interval=1)
    # The dead replica's late release must not free the new holder's lease.
    store.release(engine, "a", "dead", next_due_at=T0)
    times = store.schedule_times(engine, ["a"])
    assert times["a"] == T0 + timedelta(seconds=10.1)


def test_renew_extends_only_the_holders_lease(engine: Engine) -> None:
    add_target(engine, "a")
    assert store.claim(engine, "a", "r1", T0, lease=5, interval=1)
    assert store.renew(engine, "a", "r1", T0 + timedelta(seconds=4), lease=5)
    assert not store.renew(engine, "a", "r2", T0 + timedelta(seconds=4), lease=5)
    assert not store.claim(engine, "a", "r2", T0 + timedelta(seconds=6), lease=5, interval=1)
    assert store.claim(engine, "a", "r2", T0 + timedelta(seconds=9.5), lease=5, interval=1)


def test_release_can_push_the_due_time(engine: Engine) -> None:
    add_target(engine, "a")
    assert store.claim(engine, "a", "r1", T0, lease=60, interval=10)
    store.release(engine, "a", "r1", next_due_at=T0 + timedelta(seconds=100))
    assert store.schedule_times(engine, ["a", "missing"]) == {"a": T0 + timedelta(seconds=100)}
    assert not store.claim(engine, "a", "r1", T0 + timedelta(seconds=99), lease=60, interval=10)


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

def test_a_batch_claims_the_due_free_targets_each_on_its_interval(engine: Engine) -> None:
    for name in ("a", "b", "leased", "later"):
        add_target(engine, name)
    assert store.claim(engine, "leased", "r1", T0, lease=60, interval=1)
    assert store.claim(engine, "later", "r1", T0, lease=60, interval=1)
    store.release(engine, "later", "r1", next_due_at=T0 + timedelta(seconds=100))
    now = T0 + timedelta(seconds=2)
    wanted = [("a", 10), ("b", 20), ("leased", 10), ("later", 10), ("missing", 10)]
    assert store.claim_many(engine, wanted, "r2", now, lease=60) == {"a", "b"}
    with engine.connect() as conn:
        rows = {r.name: r for r in conn.execute(select(targets))}
    assert rows["a"].next_due_at.replace(tzinfo=None) == (now + timedelta(seconds=10)).replace(
        tzinfo=None)
    assert rows["b"].next_due_at.replace(tzinfo=None) == (now + timedelta(seconds=20)).replace(
        tzinfo=None)
    assert (rows["a"].lease_owner, rows["leased"].lease_owner, rows["later"].lease_owner) == (
        "r2", "r1", None)
    assert store.claim_many(engine, wanted, "r3", now, lease=60) == set()


def test_racing_batches_split_the_targets_between_replicas(engine: Engine) -> None:
    names = [f"t{i}" for i in range(40)]
    for name in names:
        add_target(engine, name)
    start = threading.Barrier(4)

    def replica(owner: str) -> set[str]:
        start.wait()
        got: set[str] = set()
        for offset in range(0, 40, 8):  # overlapping batches, in a different order per owner
            batch = names[offset:] + names[:offset] if owner != "r0" else names[::-1]
            got |= store.claim_many(engine, [(n, 10) for n in batch[:20]], owner, T0,
                                    lease=60)
        return got

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(replica, ["r0", "r1", "r2", "r3"]))
    claimed = [name for got in results for name in got]
    assert sorted(claimed) == sorted(set(claimed))  # nobody claimed what another got
    assert set(claimed) == set(names)
    with engine.connect() as conn:
        owners = dict(conn.execute(select(targets.c.name, targets.c.lease_owner)).all())
    for owner, got in zip(["r0", "r1", "r2", "r3"], results, strict=True):
        assert all(owners[name] == owner for name in got)
