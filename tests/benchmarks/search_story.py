"""A search of the locs, the sorted listings and one URL's story on a big target: seconds to
the first page.

    .venv/bin/python tests/benchmarks/search_story.py [--database sqlite|postgres]
        [--urls 500000] [--changes 2500000] [--repeat 3] [--url DATABASE_URL]

Builds, straight through the schema (no site, no check), a target of ``--urls`` URLs in
documents of 50,000 (entry sets as a check stores them), a URL state for each (1 in 1,000 not
found) and ``--changes`` change rows spread over 100 snapshots (added, removed, changed and
health rows of every loc in turn; every 7th removal given a reason), then times what a person
waits for:

- ``urls --loc TEXT``: the first page (100 rows) of a search that matches 1 URL in 10,000, and
  of one that matches none (every document read to the end);
- ``changes --loc TEXT``: the first page of the same searches in the change rows, and of one
  that matches every loc;
- ``url TARGET LOC``: one URL's whole story (listed where, fields, health, every change);
- the first page of each listing sorted by a column it offers, and a page far into one.

Each is the best of ``--repeat`` runs, in this process, through the same functions the CLI and
the API call. ``--url`` keeps the database (built when it has no target ``big``), to measure
again without building. Not a test: figures, to quote (tests/benchmarks/HISTORY.md).
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

from monitor.codec import entryset
from monitor.core.model import entry_state
from monitor.listing import params as listing
from monitor.listing import sorting
from monitor.read import validate
from monitor.store import db
from monitor.store import listingreads as store_listing
from monitor.store.schema import changes, entry_sets, snapshots, targets, url_states
from monitor.store.storyreads import read_story

PER_DOCUMENT = 50_000
SNAPSHOTS = 100
BATCH = 20_000
REASONS = ("gone", "moved", "live", "unknown")


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
    for first_url in range(0, urls, BATCH):
        with engine.begin() as conn:
            conn.execute(insert(url_states), [
                {"target_id": target_id, "loc": _loc(i), "listed": True,
                 "state": "not-found" if i % 1000 == 0 else "ok",
                 "http_status": 404 if i % 1000 == 0 else 200,
                 "since": start + timedelta(seconds=i * 7919 % 86_400),
                 "checked_at": start + timedelta(seconds=i % 3600)}
                for i in range(first_url, min(urls, first_url + BATCH))])
    kinds = ("changed", "health", "removed", "added")
    rows: list[dict[str, Any]] = []
    for n in range(change_rows):
        i = n % urls
        kind = kinds[n // urls % len(kinds)]
        rows.append({"snapshot_id": first + n * SNAPSHOTS // change_rows,
                     "target_id": target_id, "kind": kind, "loc": _loc(i),
                     "before": '{"lastmod":"2025-12-01"}' if kind == "changed" else None,
                     "after": '{"lastmod":"2026-01-01"}' if kind == "changed" else None,
                     "reason": REASONS[i % 4] if kind == "removed" and i % 7 == 0 else None})
        if len(rows) == BATCH:
            with engine.begin() as conn:
                conn.execute(insert(changes), rows)
            rows.clear()
    if rows:
        with engine.begin() as conn:
            conn.execute(insert(changes), rows)
    with engine.begin() as conn:  # as the writers keep it (store.changelocs)
        conn.execute(text("INSERT INTO change_locs (target_id, loc) "
                          "SELECT DISTINCT target_id, loc FROM changes WHERE members IS NULL"))
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


def page_at(open_page: Callable[[str | None], listing.Listing], pages: int,
            ) -> list[dict[str, Any]]:
    """The ``pages``-th page of 100, each opened from the previous one's cursor."""
    after: str | None = None
    rows: list[dict[str, Any]] = []
    for _ in range(pages):
        opened = open_page(after)
        rows = first_page(opened)
        after = opened.next_cursor
    return rows


def cases(engine: Engine) -> list[tuple[str, Callable[[], Any]]]:
    """The questions timed, each a first page (or a story)."""
    rare = "/item-4242"  # about 1 loc in 10,000 holds it (item numbers mod 100,003)
    none = "no-loc-holds-this"
    every = "/product/"
    urls, changes_of = store_listing.open_urls, store_listing.open_changes

    def sorted_by(column: str) -> sorting.Sort:
        return sorting.Sort(column.removeprefix("-"), column.startswith("-"))

    found: list[tuple[str, Callable[[], Any]]] = [
        (f"urls --loc {rare}", lambda: first_page(urls(engine, "big", None, None, None, rare))),
        (f"urls --loc {none}", lambda: first_page(urls(engine, "big", None, None, None, none))),
        (f"changes --loc {rare}", lambda: first_page(changes_of(
            engine, "big", None, (), None, q=rare))),
        (f"changes --loc {none}", lambda: first_page(changes_of(
            engine, "big", None, (), None, q=none))),
        (f"changes --loc {every}", lambda: first_page(changes_of(
            engine, "big", None, (), None, q=every))),
        ("url big LOC", lambda: read_story(engine, "big", _loc(4242), validate.describe)),
    ]
    for column in ("loc", "-lastmod", "document", "status"):
        found.append((f"urls --sort {column}", lambda column=column: first_page(urls(
            engine, "big", None, None, None, sort=sorted_by(column)))))
    for column in ("since", "-checked_at", "-http_status", "-loc"):
        found.append((f"urls --status ok --sort {column}", lambda column=column: first_page(
            urls(engine, "big", None, "ok", None, sort=sorted_by(column)))))
    for column in ("at", "kind", "-kind", "reason", "rule"):
        found.append((f"changes --sort {column}", lambda column=column: first_page(changes_of(
            engine, "big", None, (), None, sort=sorted_by(column)))))
    found.append(("changes --sort reason, 20 pages", lambda: page_at(
        lambda after: changes_of(engine, "big", None, (), after, sort=sorted_by("reason")),
        20)))
    found.append(("urls --sort loc, 5 pages", lambda: page_at(
        lambda after: urls(engine, "big", None, None, after, sort=sorted_by("loc")), 5)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--urls", type=int, default=500_000)
    parser.add_argument("--changes", type=int, default=2_500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", help="a database to keep (built when it has no target big)")
    parser.add_argument("--only", help="the questions that hold this text")
    args = parser.parse_args()
    if args.url:
        engine = db.make_engine(args.url)
        try:
            measure(engine, args, keep=True)
        finally:
            engine.dispose()
        return 0
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
            measure(engine, args, keep=False)
        finally:
            engine.dispose()
            if args.database == "postgres":
                admin = db.make_engine(url.rsplit("/", 1)[0] + "/postgres")
                with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text(f"DROP DATABASE IF EXISTS {scratch}"))
                admin.dispose()
    return 0


def measure(engine: Engine, args: argparse.Namespace, *, keep: bool) -> None:
    """Build the target (unless a kept database has it), then time each question."""
    db.create_schema(engine)
    with engine.connect() as conn:
        built = conn.execute(text("SELECT count(*) FROM targets WHERE name = 'big'")).scalar()
    if not (keep and built):
        started = time.perf_counter()
        build(engine, args.urls, args.changes)
        print(f"built {args.urls:,} URLs and {args.changes:,} change rows on "
              f"{engine.dialect.name} in {time.perf_counter() - started:.0f} s", flush=True)
    for question, work in cases(engine):
        if args.only and args.only not in question:
            continue
        seconds, found = best(args.repeat, work)
        size = len(found["changes"]) if isinstance(found, dict) else len(found)
        print(f"{question:40} {seconds:7.3f} s  ({size} rows)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
