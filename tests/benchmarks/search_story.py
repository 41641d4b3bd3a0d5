"""A search of the locs and one URL's story on a big target: seconds to the first page.

    .venv/bin/python tests/benchmarks/search_story.py [--database sqlite|postgres]
        [--urls 500000] [--changes 2500000] [--repeat 3]

Builds, straight through the schema (no site, no check), a target of ``--urls`` URLs in
documents of 50,000 (entry sets as a check stores them) and ``--changes`` change rows spread
over 100 snapshots (added, removed, changed and health rows of every loc in turn), then times
what a person waits for:

- ``urls --loc TEXT``: the first page (100 rows) of a search that matches 1 URL in 10,000, and
  of one that matches none (every document read to the end);
- ``changes --loc TEXT``: the first page of the same search in the change rows;
- ``url TARGET LOC``: one URL's whole story (listed where, fields, health, every change).

Each is the best of ``--repeat`` runs, in this process, through the same functions the CLI and
the API call. Not a test: figures, to quote (tests/benchmarks/HISTORY.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, text

from monitor import listings as listing
from monitor.codec import entryset
from monitor.model import entry_state
from monitor.read import validate
from monitor.store import db
from monitor.store import listings as store_listing
from monitor.store.schema import changes, entry_sets, snapshots, targets, url_states
from monitor.store.story import read_story

PER_DOCUMENT = 50_000
SNAPSHOTS = 100
BATCH = 20_000


def _loc(i: int) -> str:
    return f"https://shop.example/product/{i:07d}/item-{i * 7919 % 100_003}"


def build(engine: Engine, urls: int, change_rows: int) -> None:
    """The target ``big``: its snapshots, entry sets, URL states and change rows."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        key = conn.execute(insert(targets).values(
            name="big", url="https://shop.example/sitemap.xml", created_at=start)
        ).inserted_primary_key
        assert key is not None
        target_id = int(key[0])
        conn.execute(insert(snapshots), [
            {"target_id": target_id, "started_at": start + timedelta(hours=i),
             "finished_at": start + timedelta(hours=i, minutes=1), "outcome": "ok",
             "urls": urls} for i in range(SNAPSHOTS)])
        first = int(conn.execute(text("SELECT min(id) FROM snapshots")).scalar_one())
    for doc in range(0, urls, PER_DOCUMENT):
        states = {_loc(i): entry_state("2026-01-01", None, None, None, True)
                  for i in range(doc, min(urls, doc + PER_DOCUMENT))}
        with engine.begin() as conn:
            conn.execute(insert(entry_sets).values(
                target_id=target_id, document_url=f"https://shop.example/s{doc}.xml",
                first_snapshot_id=first, urls=len(states), data=entryset.encode(states, {})))
    with engine.begin() as conn:
        conn.execute(insert(url_states), [
            {"target_id": target_id, "loc": _loc(i), "listed": True,
             "state": "not-found" if i % 1000 == 0 else "ok",
             "http_status": 404 if i % 1000 == 0 else 200, "checked_at": start}
            for i in range(0, urls, 50)])
    kinds = ("changed", "health", "removed", "added")
    rows: list[dict[str, Any]] = []
    for n in range(change_rows):
        i = n % urls
        kind = kinds[n // urls % len(kinds)]
        rows.append({"snapshot_id": first + n * SNAPSHOTS // change_rows,
                     "target_id": target_id, "kind": kind, "loc": _loc(i),
                     "before": '{"lastmod":"2025-12-01"}' if kind == "changed" else None,
                     "after": '{"lastmod":"2026-01-01"}' if kind == "changed" else None})
        if len(rows) == BATCH:
            with engine.begin() as conn:
                conn.execute(insert(changes), rows)
            rows.clear()
    if rows:
        with engine.begin() as conn:
            conn.execute(insert(changes), rows)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
    else:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))


def best(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeat`` runs (seconds) and what the last returned."""
    times, found = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        found = work()
        times.append(time.perf_counter() - started)
    return min(times), found


def first_page(opened: listing.Listing) -> list[dict[str, Any]]:
    try:
        return listing.take(opened, 100)
    finally:
        listing.close(opened)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--urls", type=int, default=500_000)
    parser.add_argument("--changes", type=int, default=2_500_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.database == "sqlite":
            url = f"sqlite:///{Path(folder) / 'bench.db'}"
        else:
            url = os.environ.get("TEST_DATABASE_URL",
                                 "postgresql://postgres@127.0.0.1:5432/postgres")
            scratch = f"bench_story_{os.getpid()}"
            admin = db.make_engine(url)
            with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text(f"CREATE DATABASE {scratch}"))
            admin.dispose()
            url = url.rsplit("/", 1)[0] + "/" + scratch
        engine = db.make_engine(url)
        try:
            db.create_schema(engine)
            started = time.perf_counter()
            build(engine, args.urls, args.changes)
            print(f"built {args.urls:,} URLs and {args.changes:,} change rows on "
                  f"{args.database} in {time.perf_counter() - started:.0f} s", flush=True)
            rare = "/item-4242"  # about 1 loc in 10,000 holds it (item numbers mod 100,003)
            none = "no-loc-holds-this"
            cases: list[tuple[str, Callable[[], Any]]] = [
                (f"urls --loc {rare}", lambda: first_page(store_listing.open_urls(
                    engine, "big", None, None, None, rare))),
                (f"urls --loc {none}", lambda: first_page(store_listing.open_urls(
                    engine, "big", None, None, None, none))),
                (f"changes --loc {rare}", lambda: first_page(store_listing.open_changes(
                    engine, "big", None, (), None, q=rare))),
                ("url big LOC", lambda: read_story(engine, "big", _loc(4242), validate.describe)),
            ]
            for question, work in cases:
                seconds, found = best(args.repeat, work)
                size = len(found["changes"]) if isinstance(found, dict) else len(found)
                print(f"{question:40} {seconds:7.3f} s  ({size} rows)", flush=True)
        finally:
            engine.dispose()
            if args.database == "postgres":
                admin = db.make_engine(url.rsplit("/", 1)[0] + "/postgres")
                with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text(f"DROP DATABASE IF EXISTS {scratch}"))
                admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
