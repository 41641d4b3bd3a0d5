"""Retention: a prune deletes the snapshots it no longer keeps and what only they
needed, and every kept snapshot reads exactly as before: its URL set, its changes, the diff
between any two of them. Through the CLI, against a real local site, on both databases."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from site_fixture import Site, index, urlset
from sqlalchemy import func, select, text

from monitor.cli.commands import main
from monitor.store.db import make_engine
from monitor.store.retention import prune_target
from monitor.store.schema import change_locs, changes, entry_sets, snapshots, targets

U = "https://example.test/"
N = 400  # URLs a child: enough that a version with a few changes is stored as a delta
_examples = iter(range(10**6))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def listing(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--database-url", db, "--json")
    assert code == 0, err
    return json.loads(out)


# One step of a site's history: for each of two children, the lastmods that move (by index),
# the URLs dropped and those added; or the second child dropped from the index.
# (Every step moves some lastmods of both: their versions are deltas against the first, whose
# packs hold positions only, which a prune must not orphan.)
steps = st.lists(st.tuples(
    st.lists(st.integers(0, N - 1), min_size=1, max_size=6),
    st.lists(st.integers(0, N - 1), max_size=1), st.integers(0, 2),
    st.lists(st.integers(0, N - 1), min_size=1, max_size=3),
    st.integers(0, 5).map(lambda x: x == 0),  # the second child dropped, one step in six
), min_size=3, max_size=6)


def _versions(history: list[Any]) -> list[tuple[dict[str, str], dict[str, str] | None]]:
    a = {f"{U}a{i}": "2024-01-01" for i in range(N)}
    b: dict[str, str] | None = {f"{U}b{i}": "2024-01-01" for i in range(N)}
    out = [(dict(a), dict(b) if b else None)]
    for step, (moved, dropped, added, moved_b, drop_b) in enumerate(history, 1):
        for i in moved:
            a[f"{U}a{i}"] = f"2024-02-{step:02d}"
        for i in dropped:
            a.pop(f"{U}a{i}", None)
        for i in range(added):
            a[f"{U}new{step}-{i}"] = "2024-03-01"
        if b is not None:
            for i in moved_b:
                b[f"{U}b{i}"] = f"2024-04-{step:02d}"
            if drop_b and step > 1:
                b = None
        out.append((dict(a), dict(b) if b else None))
    return out


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=steps, keep_last=st.integers(1, 4))
def test_every_kept_snapshot_reads_as_before_a_prune(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], history: list[Any], keep_last: int,
) -> None:
    n = next(_examples)
    root = site.url(f"/r{n}/index.xml")
    ids = []
    for a, b in _versions(history):
        children = [site.url(f"/r{n}/a.xml")] + ([site.url(f"/r{n}/b.xml")] if b else [])
        site.set(f"/r{n}/index.xml", index(children))
        site.set(f"/r{n}/a.xml", urlset(a))
        if b:
            site.set(f"/r{n}/b.xml", urlset(b))
        ids.append(listing(capsys, db, "check", root)["snapshot_id"])

    def reads(kept: list[int]) -> dict[str, Any]:
        return {
            "urls": {s: listing(capsys, db, "urls", root, "--at", str(s))["urls"] for s in kept},
            "changes": [c for c in listing(capsys, db, "changes", root)["changes"]
                        if c["snapshot_id"] in kept],
            "diff": listing(capsys, db, "diff", root, "--from", str(kept[0]),
                            "--to", str(kept[-1]))["changes"],
        }

    kept = ids[-keep_last:] if keep_last < len(ids) else ids
    before = reads(kept)
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            target_id = conn.execute(select(targets.c.id).where(targets.c.url == root)).scalar()
            sets_before = conn.execute(select(func.count()).select_from(entry_sets).where(
                entry_sets.c.target_id == target_id)).scalar()
        now = datetime.now(UTC) + timedelta(days=1)  # every snapshot older than the age
        dry = prune_target(engine, target_id, max_age=3600, keep_last=keep_last, now=now,
                           dry_run=True)
        found = prune_target(engine, target_id, max_age=3600, keep_last=keep_last, now=now)
        with engine.connect() as conn:
            left = list(conn.execute(select(snapshots.c.id).where(
                snapshots.c.target_id == target_id).order_by(snapshots.c.id)).scalars())
            counts = conn.execute(select(targets.c.snapshot_count, targets.c.change_count)
                                  .where(targets.c.id == target_id)).one()
            stored_changes = conn.execute(select(func.coalesce(func.sum(
                func.coalesce(changes.c.members, 1)), 0)).where(
                changes.c.target_id == target_id)).scalar()
            sets_after = conn.execute(select(func.count()).select_from(entry_sets).where(
                entry_sets.c.target_id == target_id)).scalar()
            # the locs a search of the changes reads: those of the plain rows kept, each once
            held = conn.execute(select(change_locs.c.loc).where(
                change_locs.c.target_id == target_id)).scalars().all()
            plain = conn.execute(select(changes.c.loc).distinct().where(
                changes.c.target_id == target_id, changes.c.members.is_(None))).scalars().all()
    finally:
        engine.dispose()
    assert left == kept
    assert (found.snapshots, found.changes, found.documents, found.entry_sets) == (
        dry.snapshots, dry.changes, dry.documents, dry.entry_sets)  # the dry run said so
    assert found.snapshots == len(ids) - len(kept)
    assert sets_after == sets_before - found.entry_sets
    assert tuple(counts) == (len(kept), stored_changes)
    assert sorted(held) == sorted(plain)
    assert reads(kept) == before
    for gone in ids[: len(ids) - len(kept)]:
        code, _, err = run(capsys, "urls", root, "--at", str(gone), "--database-url", db)
        assert code != 0
        assert f"no snapshot {gone}" in err
    # The next check reads the kept versions as its own (deltas whose base stayed).
    site.set(f"/r{n}/a.xml", urlset({**_versions(history)[-1][0], f"{U}late": "2024-05-01"}))
    latest = listing(capsys, db, "check", root)
    assert latest["added"] == 1
    assert latest["removed"] == latest["changed"] == 0


def _vacuumed(engine: Any, table: str) -> bool:
    """Whether PostgreSQL's statistics say the table was vacuumed by hand (they come within a
    second or so)."""
    deadline = time.monotonic() + 30  # only a failure waits this long
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(text("SELECT last_vacuum FROM pg_stat_all_tables WHERE relname = :t"),
                            {"t": table}).scalar() is not None:
                return True
        time.sleep(0.2)
    return False


def test_db_prune_keeps_what_the_configuration_says_and_dry_run_changes_nothing(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    url, gone = site.url("/p/s.xml"), site.url("/gone/s.xml")
    for step in range(5):
        for path in ("/p/s.xml", "/gone/s.xml"):
            site.set(path, urlset({f"{U}p{i}": f"2024-01-0{step + 1}" if i < 3 else "2024-01-01"
                                   for i in range(50)}))
        for checked in (url, gone):
            code, _, err = run(capsys, "check", checked, "--database-url", db)
            assert code == 0, err
    # The second target is no longer configured: its history stays, under the defaults'
    # retention (three snapshots), until that removes it.
    config = tmp_path / "monitor.yaml"
    config.write_text(f"database_url: {db}\n"
                      "defaults: {retention: {snapshots: 1s, keep_last: 3}}\n"
                      f"targets:\n  - {{name: p, url: '{url}', retention: {{keep_last: 2}}}}\n")
    engine = make_engine(db)
    try:
        with engine.begin() as conn:  # the checks above ran under the URL's name
            conn.execute(targets.update().where(targets.c.name == url).values(name="p"))
            conn.execute(snapshots.update().values(
                started_at=datetime.now(UTC) - timedelta(hours=1)))

        def count() -> int:
            with engine.connect() as conn:
                return int(conn.execute(select(func.count()).select_from(snapshots)).scalar()
                           or 0)

        assert count() == 10
        code, out, err = run(capsys, "db", "prune", "--dry-run", "--config", str(config),
                              "--database-url", db)
        assert (code, err) == (0, "")
        assert "\np: would delete 3 snapshots before snapshot" in out
        assert f"{gone}: would delete 2 snapshots before snapshot" in out
        assert count() == 10
        code, out, err = run(capsys, "db", "prune", "--config", str(config), "--database-url",
                             db)
        assert (code, err) == (0, "")
        assert "\np: deleted 3 snapshots before snapshot" in out
        assert f"{gone}: deleted 2 snapshots before snapshot" in out
        assert count() == 5
        if db.startswith("postgresql"):  # and vacuumed what it deleted from, autovacuum or not
            assert _vacuumed(engine, "entry_sets")
        code, out, _ = run(capsys, "db", "prune", "--config", str(config), "--database-url", db)
        assert out == f"{gone}: nothing past its retention\np: nothing past its retention\n"
    finally:
        engine.dispose()
