"""History within a size budget: a sitemap that replaces every URL at every check, checked
through the CLI against a real local site on both databases, stays within its target's
``retention.max_bytes``; the last two snapshots always stay, and the URL set of every snapshot
kept reads back exactly as it was served."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, urlset
from sqlalchemy import Engine, select, text

from monitor.cli.commands import main
from monitor.store import checkreads as sql
from monitor.store.db import make_engine
from monitor.store.schema import snapshots, targets

URLS = 20_000
ROTATIONS = 25
BUDGET = 30_000_000  # 30 MB


def generation(n: int, urls: int) -> dict[str, str | None]:
    """The site's URLs at its ``n``-th generation: none of another generation's."""
    return {f"https://shop.example.test/c{n}/{(i * 7919 + n) % 100_003:05x}-item-{i}.html":
            f"2026-01-{1 + n % 28:02d}" for i in range(urls)}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    found = capsys.readouterr()
    assert code == 0, found.err
    return found.out


def config(tmp_path: Path, db: str, url: str, max_bytes: str) -> str:
    path = tmp_path / "monitor.yaml"
    path.write_text(f"database_url: {db}\n"
                    f"defaults: {{retention: {{max_bytes: {max_bytes}}}}}\n"
                    f"targets:\n  - {{name: rot, url: '{url}'}}\n")
    return str(path)


def on_disk(engine: Engine) -> int:
    """The bytes the database takes: SQLite's file (free pages given back by the prune),
    PostgreSQL's history tables with their indexes and TOAST."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            path = engine.url.database
            assert path is not None
            return os.path.getsize(path)
        return int(conn.execute(text(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'")).scalar() or 0)


def kept(engine: Engine) -> list[tuple[int, int]]:
    """(id, history_bytes) of the target's snapshots, oldest first."""
    with engine.connect() as conn:
        target = conn.execute(select(targets.c.id).where(targets.c.name == "rot")).scalar_one()
        return [(int(i), int(b)) for i, b in conn.execute(
            select(snapshots.c.id, snapshots.c.history_bytes)
            .where(snapshots.c.target_id == target).order_by(snapshots.c.id))]


def url_sets(engine: Engine, ids: list[int]) -> dict[int, set[str]]:
    with engine.connect() as conn:
        target = conn.execute(select(targets.c.id).where(targets.c.name == "rot")).scalar_one()
        return {i: sql.url_set_at(conn, target, i) for i in ids}


def test_a_sitemap_rotated_at_every_check_stays_within_its_budget(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    url = site.url("/rot/sitemap.xml")
    cfg = config(tmp_path, db, url, "30MB")
    served: dict[int, set[str]] = {}
    for n in range(ROTATIONS + 1):  # the baseline, then 25 rotations
        site.set("/rot/sitemap.xml", urlset(generation(n, URLS)))
        result = json.loads(cli(capsys, "check", "rot", "--config", cfg, "--json",
                                "--max-changes", "0"))
        assert result["urls"] == URLS
        if n:
            assert (result["added"], result["removed"]) == (URLS, URLS)
        served[result["snapshot_id"]] = set(generation(n, URLS))
        if n % 5 == 4:  # as the daemon prunes on its interval, not after each check
            cli(capsys, "db", "prune", "--config", cfg)
    cli(capsys, "db", "prune", "--config", cfg)
    engine = make_engine(db)
    try:
        assert on_disk(engine) <= BUDGET
        left = kept(engine)
        ids = [i for i, _b in left]
        assert ids[-2:] == sorted(served)[-2:]
        assert sum(b for _i, b in left) <= BUDGET
        assert url_sets(engine, ids) == {i: served[i] for i in ids}
    finally:
        engine.dispose()


def test_a_budget_drops_the_oldest_snapshots_but_never_the_last_two(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    url = site.url("/small/sitemap.xml")
    served: dict[int, set[str]] = {}
    latest: dict[str, Any] = {}

    def check(n: int, max_bytes: str) -> None:
        site.set("/small/sitemap.xml", urlset(generation(n, 2_000)))
        cfg = config(tmp_path, db, url, max_bytes)
        latest.update(json.loads(cli(capsys, "check", "rot", "--config", cfg, "--json",
                                     "--max-changes", "0")))
        served[latest["snapshot_id"]] = set(generation(n, 2_000))

    for n in range(8):
        check(n, "1GiB")
    engine = make_engine(db)
    try:
        everything = kept(engine)
        per_check = max(b for _i, b in everything[1:])
        # A budget of about three re-checks' history keeps fewer than all of them.
        cfg = config(tmp_path, db, url, str(4 * per_check))
        dry = cli(capsys, "db", "prune", "--dry-run", "--config", cfg)
        assert "rot: would delete" in dry
        assert [i for i, _b in kept(engine)] == [i for i, _b in everything]
        cli(capsys, "db", "prune", "--config", cfg)
        left = [i for i, _b in kept(engine)]
        assert 2 <= len(left) < len(everything)
        assert left == [i for i, _b in everything][-len(left):]
        assert url_sets(engine, left) == {i: served[i] for i in left}
        # A budget smaller than one snapshot's history still keeps the last two.
        cli(capsys, "db", "prune", "--config", config(tmp_path, db, url, "1"))
        assert [i for i, _b in kept(engine)] == sorted(served)[-2:]
        assert url_sets(engine, sorted(served)[-2:]) == {i: served[i]
                                                        for i in sorted(served)[-2:]}
        # The changes of the snapshots kept still list every URL added and removed.
        changes = json.loads(cli(capsys, "changes", "rot", "--config", cfg,
                                 "--json"))["changes"]
        last = sorted(served)[-1]
        listed = {(c["kind"], c["loc"]) for c in changes if c["snapshot_id"] == last}
        previous = served[sorted(served)[-2]]
        assert listed == ({("added", loc) for loc in served[last]}
                          | {("removed", loc) for loc in previous})
        # And the next check diffs against the kept state.
        check(8, "1GiB")
        assert (latest["added"], latest["removed"]) == (2_000, 2_000)
    finally:
        engine.dispose()


def test_packed_additions_and_removals_list_like_rows(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """A check's many additions and removals are packs, which every listing reads as the rows
    they stand for: the changes (newest first, by kind, by a part of the loc), the diff
    between two snapshots, and a URL's story."""
    url = site.url("/moves/sitemap.xml")
    cfg = config(tmp_path, db, url, "1GiB")
    steps = [{f"https://e.test/p{i}": "2026-01-01" for i in range(300)}]
    steps.append({**dict(list(steps[0].items())[100:]),
                  **{f"https://e.test/n{i}": "2026-02-01" for i in range(100)}})
    steps.append({**{k: v for k, v in steps[1].items() if "/p" in k},  # the n's go
                  **{f"https://e.test/m{i}": "2026-03-01" for i in range(100)}})
    ids = []
    for step in steps:
        site.set("/moves/sitemap.xml", urlset(step))
        ids.append(json.loads(cli(capsys, "check", "rot", "--config", cfg, "--json",
                                  "--max-changes", "0"))["snapshot_id"])
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            packs = conn.execute(text("SELECT kind, members FROM changes WHERE members IS NOT "
                                      "NULL ORDER BY id")).all()
    finally:
        engine.dispose()
    assert [tuple(p) for p in packs] == [("added", 100), ("removed", 100)] * 2

    def expected(before: dict[str, str], after: dict[str, str]) -> set[tuple[Any, ...]]:
        return ({("added", loc, None, after[loc]) for loc in after.keys() - before.keys()}
                | {("removed", loc, before[loc], None) for loc in before.keys() - after.keys()})

    def rows(found: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        return {(c["kind"], c["loc"], (c["before"] or {}).get("lastmod"),
                 (c["after"] or {}).get("lastmod")) for c in found}

    changes = json.loads(cli(capsys, "changes", "rot", "--config", cfg, "--json"))["changes"]
    assert [c["snapshot_id"] for c in changes] == sorted(
        (c["snapshot_id"] for c in changes), reverse=True)
    for n in (1, 2):
        assert rows([c for c in changes if c["snapshot_id"] == ids[n]]) == expected(
            steps[n - 1], steps[n])
    removed = json.loads(cli(capsys, "changes", "rot", "--config", cfg, "--json",
                             "--kind", "removed"))["changes"]
    assert rows(removed) == {r for n in (1, 2) for r in expected(steps[n - 1], steps[n])
                             if r[0] == "removed"}
    searched = json.loads(cli(capsys, "changes", "rot", "--config", cfg, "--json",
                              "--loc", "/N4"))["changes"]  # case aside: n4, n40-n49
    assert sorted(c["loc"] for c in searched) == sorted(
        [f"https://e.test/n{i}" for i in (4, *range(40, 50))] * 2)
    diff = json.loads(cli(capsys, "diff", "rot", "--config", cfg, "--json", "--from",
                          str(ids[0]), "--to", str(ids[2])))["changes"]
    assert rows(diff) == expected(steps[0], steps[2])
    story = json.loads(cli(capsys, "url", "rot", "https://e.test/n7", "--config", cfg,
                           "--format", "json"))
    assert [(e["kind"], e["snapshot_id"]) for e in story["changes"]] == [
        ("removed", ids[2]), ("added", ids[1])]


def test_a_pack_of_removals_at_the_boundary_keeps_its_version_and_that_ones_base(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """The removals of the oldest snapshot kept point into the version it replaced, which
    may be a delta: a prune keeps that version and its base, and they list as before."""
    url = site.url("/delta/sitemap.xml")
    first = {f"https://e.test/d{i}": "2026-01-01" for i in range(400)}
    second = {**first, **{f"https://e.test/d{i}": "2026-01-02" for i in range(5)}}  # a delta
    third = dict(list(second.items())[100:])  # 100 removals, packed
    cfg = config(tmp_path, db, url, "1GiB")
    for step in (first, second, third):
        site.set("/delta/sitemap.xml", urlset(step))
        last = json.loads(cli(capsys, "check", "rot", "--config", cfg, "--json"))
    assert last["removed"] == 100
    path = tmp_path / "keep-one.yaml"
    path.write_text(f"database_url: {db}\n"
                    "defaults: {retention: {snapshots: 1s, keep_last: 1}}\n"
                    f"targets:\n  - {{name: rot, url: '{url}'}}\n")
    engine = make_engine(db)
    try:
        with engine.begin() as conn:  # every snapshot older than the age
            conn.execute(text("UPDATE snapshots SET started_at = '2020-01-01 00:00:00+00'"))
    finally:
        engine.dispose()
    before = json.loads(cli(capsys, "changes", "rot", "--config", cfg, "--json",
                            "--kind", "removed"))["changes"]
    assert "rot: deleted 2 snapshots" in cli(capsys, "db", "prune", "--config", str(path))
    after = json.loads(cli(capsys, "changes", "rot", "--config", cfg, "--json",
                           "--kind", "removed"))["changes"]
    assert after == before
    assert {(c["loc"], c["before"]["lastmod"]) for c in after} == {
        (loc, lastmod) for loc, lastmod in list(second.items())[:100]}
