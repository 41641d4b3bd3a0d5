"""Queries against a long history: does a page cost the rows it lists, or the history?

    .venv/bin/python tests/benchmarks/history_queries.py [--database sqlite|postgres]
        [--rows 50000 500000 2500000]

For each size, a fresh database holds 20 targets; one of them, "big", has that many change
rows over 1,000-row snapshots an hour apart, of kinds added and changed only; its newest
snapshot is 10 minutes old. Then, as the API asks them (the store's own
functions, in this process), each query is timed (best of 3, seconds to the first page of at
most 1,000 rows): the changes, the changes of a kind that has none (removed), the changes since
an hour ago, the net diff of the last two snapshots, the list of targets (its counts), one
target. Not a test: figures, to quote; a flat row across sizes is what O(rows listed) looks like.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from harness import database
from sqlalchemy import Engine, text

from monitor.listing import params as listing
from monitor.store import db
from monitor.store import listingreads as store
from monitor.store import targetrows as targets_api

PER_SNAPSHOT = 1_000
NOW = datetime.now(UTC)


def _fill(engine: Engine, rows: int) -> None:
    """20 targets; "big" with ``rows`` changes. Rows are written with the driver's own
    executemany (COPY would be faster on PostgreSQL; this is set-up, not measured)."""
    snapshots = rows // PER_SNAPSHOT
    with engine.begin() as conn:
        for i in range(20):
            conn.execute(text("INSERT INTO targets (name, url, created_at) VALUES (:n, :u, :t)"),
                         {"n": "big" if i == 0 else f"t{i}", "u": f"https://e{i}.test/s.xml",
                          "t": NOW})
        big = conn.execute(text("SELECT id FROM targets WHERE name = 'big'")).scalar()
        driver = conn.connection.driver_connection
        mark = "%s" if engine.dialect.name == "postgresql" else "?"
        after = json.dumps({"lastmod": "2024-01-01"})
        for n in range(snapshots):
            at = NOW - timedelta(hours=snapshots - n) + timedelta(minutes=50)
            sid = conn.execute(text(
                "INSERT INTO snapshots (target_id, started_at, finished_at, outcome) "
                "VALUES (:t, :a, :a, 'ok') RETURNING id"), {"t": big, "a": at}).scalar()
            kind = "added" if n % 2 else "changed"
            batch = [(sid, big, kind, f"https://e0.test/{n}/{i}", None, after)
                     for i in range(PER_SNAPSHOT)]
            driver.cursor().executemany(
                "INSERT INTO changes (snapshot_id, target_id, kind, loc, before, after) "
                f"VALUES ({', '.join([mark] * 6)})", batch)
        # The counts a check keeps (0005 on); an older schema ignores them.
        has_counts = conn.execute(text("SELECT count(*) FROM alembic_version "
                                       "WHERE version_num >= '0005'")).scalar()
        if has_counts:
            conn.execute(text("UPDATE targets SET snapshot_count = :s, change_count = :c "
                              "WHERE id = :t"), {"s": snapshots, "c": rows, "t": big})
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    else:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))


def _page(opened: listing.Listing) -> int:
    try:
        return len("".join(listing.render(opened, "json", limit=1000)))
    finally:
        listing.close(opened)


def _best(run: Any) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rows", type=int, nargs="+", default=[50_000, 500_000, 2_500_000])
    args = parser.parse_args()
    hour = NOW - timedelta(hours=1)
    queries = {
        "changes": lambda e: _page(store.open_changes(e, "big", None, (), None)),
        "changes --kind removed (none)": lambda e: _page(
            store.open_changes(e, "big", None, ("removed",), None)),
        "changes --since 1h": lambda e: _page(store.open_changes(e, "big", hour, (), None)),
        "diff of the last two": lambda e: _page(store.open_diff(
            e, "big", listing.SnapshotRef(time=NOW - timedelta(minutes=70)), None, (), None)),
        "/api/v1/targets": lambda e: len(targets_api.list_targets(e)),
        "/api/v1/targets/big": lambda e: targets_api.get_target(e, "big"),
    }
    figures: dict[str, list[float]] = {name: [] for name in queries}
    for rows in args.rows:
        with database(args.database) as where:
            engine = db.make_engine(where.url)
            db.upgrade(engine)
            started = time.perf_counter()
            _fill(engine, rows)
            print(f"{rows:,} change rows written in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
            for name, query in queries.items():
                figures[name].append(_best(lambda q=query, e=engine: q(e)))
            engine.dispose()
    print(f"{args.database}: seconds to the first page (best of 3)")
    print(f"{'query':32}" + "".join(f"{rows:>12,}" for rows in args.rows))
    for name, times in figures.items():
        print(f"{name:32}" + "".join(f"{t:>12.3f}" for t in times))


if __name__ == "__main__":
    main()
