"""What a prune gives back: robots.txt versions no kept snapshot had in force, the
SQLite file's freed pages (incremental vacuum; ``db vacuum`` once for a file made before it),
and a prune running beside checks that never holds their write lock for long."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, urlset
from sqlalchemy import Engine, event, func, select

from monitor.cli.commands import main
from monitor.core.errors import StoreError
from monitor.store import movepacks
from monitor.store.db import make_engine
from monitor.store.retention import VACUUM_WAIT, give_back, prune_target, vacuum
from monitor.store.schema import changes, robots_files, snapshots, targets

U = "https://example.test/"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def check(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> Any:
    code, out, err = run(capsys, "check", *argv, "--database-url", db, "--json")
    assert code == 0, err
    return json.loads(out)


def target_id(engine: Engine, url: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(targets.c.id).where(targets.c.url == url)).scalar_one())


def later() -> datetime:
    """A clock past every snapshot's age (the retention's age never keeps one)."""
    return datetime.now(UTC) + timedelta(days=1)


def test_a_prune_keeps_only_the_robots_txt_in_force(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    sitemap = site.url("/sitemap.xml")
    site.set("/sitemap.xml", urlset({f"{U}a": None}))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, url: '{sitemap}'}}\n", encoding="utf-8")
    for n in range(4):  # four versions of the robots.txt, each a robots-changed
        site.set("/robots.txt", f"User-agent: *\nAllow: /\n# version {n}\n".encode())
        check(capsys, db, "t", "--config", str(cfg))
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            tid = conn.execute(select(targets.c.id).where(targets.c.name == "t")).scalar_one()
            assert conn.execute(select(func.count()).select_from(robots_files)).scalar() == 4
        dry = prune_target(engine, tid, max_age=60, keep_last=2, now=later(), dry_run=True)
        found = prune_target(engine, tid, max_age=60, keep_last=2, now=later())
        with engine.connect() as conn:
            left = list(conn.execute(select(robots_files.c.text).order_by(robots_files.c.id))
                        .scalars())
            robots_changes = conn.execute(select(func.count()).select_from(changes).where(
                changes.c.kind == "robots")).scalar()
    finally:
        engine.dispose()
    # The versions the two kept checks found: none other was in force at a kept snapshot.
    assert (dry.robots_files, found.robots_files) == (2, 2)
    assert left == [f"User-agent: *\nAllow: /\n# version {n}\n" for n in (2, 3)]
    assert robots_changes == 2  # the kept checks' robots-changed
    # The next change is told against the version in force, which the prune kept.
    site.set("/robots.txt", b"User-agent: *\nDisallow: /private\n")
    after = check(capsys, db, "t", "--config", str(cfg))
    assert after["robots"][0]["changed"] is True
    code, out, err = run(capsys, "changes", "t", "--config", str(cfg), "--kind", "robots",
                         "--database-url", db, "--json")
    assert code == 0, err
    newest = json.loads(out)["changes"][0]
    assert newest["before"]["text"] == "User-agent: *\nAllow: /\n# version 3\n"


def _churning_history(site: Site, capsys: pytest.CaptureFixture[str], db: str, path: str,
                      checks: int, urls: int) -> str:
    """``checks`` checks of a sitemap whose URLs are all new at each: added and removed rows."""
    url = site.url(path)
    for n in range(checks):
        site.set(path, urlset({f"{U}{path}/{n}/{i}": "2024-01-01" for i in range(urls)}))
        check(capsys, db, url)
    return url


def _file_bytes(path: Path) -> int:
    """The SQLite file's size once its WAL is written back into it."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path)


def test_the_sqlite_file_shrinks_after_a_prune_and_an_older_file_after_db_vacuum(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A row per addition and removal, as a release before their packs stored them: most of
    # the file (packed, the latest version is).
    monkeypatch.setattr(movepacks, "PACK_MIN", 10**9)
    path = tmp_path / "monitor.db"
    db = f"sqlite:///{path}"
    config = tmp_path / "monitor.yaml"
    config.write_text(f"database_url: {db}\ndefaults: {{retention: {{snapshots: 1s, "
                      "keep_last: 1}}\n")
    url = _churning_history(site, capsys, db, "/s.xml", checks=4, urls=4000)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # INCREMENTAL
    full = _file_bytes(path)
    age_every_snapshot(db)
    code, out, err = run(capsys, "db", "prune", "--config", str(config), "--database-url", db)
    assert (code, err) == (0, ""), err
    assert f"{url}: deleted 3 snapshots before snapshot" in out
    given = int(out.split("gave ")[1].split(" bytes")[0])
    pruned = _file_bytes(path)
    assert given > full // 2  # three of the four checks' rows were most of the file
    assert pruned <= full - given

    # A file made before incremental vacuum: a prune says what to do, db vacuum does it.
    with sqlite3.connect(path) as conn:
        conn.executescript("PRAGMA auto_vacuum = NONE; VACUUM;")
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (0,)
    _churning_history(site, capsys, db, "/s.xml", checks=3, urls=4000)
    age_every_snapshot(db)
    grown = _file_bytes(path)
    code, out, err = run(capsys, "db", "prune", "--config", str(config), "--database-url", db)
    assert (code, err) == (0, ""), err
    assert "run 'sitemap-monitor db vacuum' once, with the daemon stopped" in out
    assert _file_bytes(path) == grown  # pages freed, kept for reuse
    code, out, err = run(capsys, "db", "vacuum", "--database-url", db)
    assert (code, err) == (0, ""), err
    assert out.startswith("database vacuumed: ")
    assert _file_bytes(path) < grown // 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)
    code, out, _ = run(capsys, "db", "prune", "--config", str(config), "--database-url", db)
    assert out == f"{url}: nothing past its retention\n"


def age_every_snapshot(db: str) -> None:
    """Every snapshot an hour old: past a retention of a second."""
    engine = make_engine(db)
    try:
        with engine.begin() as conn:
            conn.execute(snapshots.update().values(
                started_at=datetime.now(UTC) - timedelta(hours=1)))
    finally:
        engine.dispose()


def test_a_vacuum_that_cannot_get_the_file_says_so(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "monitor.db"
    db = f"sqlite:///{path}"
    assert run(capsys, "db", "upgrade", "--database-url", db)[0] == 0
    engine = make_engine(db)
    holder = sqlite3.connect(path, timeout=0)
    holder.execute("BEGIN IMMEDIATE")  # a daemon's write in progress
    started = time.perf_counter()
    try:
        with pytest.raises(StoreError) as raised:
            vacuum(engine)
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()
    assert VACUUM_WAIT <= time.perf_counter() - started < VACUUM_WAIT + 5
    assert str(raised.value) == f"vacuum failed on {path}: database is locked"


def test_a_prune_beside_checks_never_holds_them_up_for_a_second(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rows, as a release before the packs of additions and removals stored them: many to
    # delete.
    monkeypatch.setattr(movepacks, "PACK_MIN", 10**9)
    db = f"sqlite:///{tmp_path}/monitor.db"
    # A long history: 12 checks, each 8,000 URLs added and 8,000 removed (~180,000 rows).
    big = _churning_history(site, capsys, db, "/big.xml", checks=12, urls=8000)
    small = site.url("/small.xml")
    step = iter(range(10**6))

    def small_check() -> float:
        n = next(step)
        site.set("/small.xml", urlset({f"{U}s{i}": f"2024-01-{(n + i) % 28 + 1:02d}"
                                       for i in range(50)}))
        started = time.perf_counter()
        check(capsys, db, small)
        return time.perf_counter() - started

    alone = [small_check() for _ in range(5)]
    engine = make_engine(db)
    held: list[float] = []
    began: dict[int, float] = {}

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        began[id(conn)] = time.perf_counter()

    @event.listens_for(engine, "commit")
    def _commit(conn: Any) -> None:
        held.append(time.perf_counter() - began.pop(id(conn)))

    done = threading.Event()
    result: dict[str, Any] = {}

    def prune() -> None:
        try:
            started = time.perf_counter()
            result["pruned"] = prune_target(engine, target_id(engine, big), max_age=60,
                                            keep_last=1, now=later())
            result["given"] = give_back(engine)
            result["seconds"] = time.perf_counter() - started
        finally:
            done.set()

    pruner = threading.Thread(target=prune)
    try:
        pruner.start()
        beside = []
        while not done.is_set():
            beside.append(small_check())
        pruner.join()
    finally:
        engine.dispose()
    assert result["pruned"].snapshots == 11
    assert result["pruned"].changes == 10 * 8000 * 2  # a first check records no change
    assert result["given"] > 0
    print(f"prune {result['seconds']:.2f} s in {len(held)} transactions, the longest "
          f"{max(held):.3f} s; checks alone {alone}, beside it {beside}")
    assert len(held) > 30  # many short transactions, not one long one
    assert max(held) < 1.0, sorted(held)[-5:]
    assert len(beside) >= 2, (result["seconds"], beside)
    assert max(beside) < max(alone) + 1.0, (alone, beside)
    assert statistics.median(beside) < statistics.median(alone) + 1.0
