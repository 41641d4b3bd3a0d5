"""A search of a rotating target's changes by a part of their locs: seconds to the first page.

    .venv/bin/python tests/benchmarks/loc_search.py [--database sqlite postgres]
        [--urls 20000] [--checks 26] [--limit 100] [--keep DIR] [--reuse URL]

The history is ``history_bytes.py``'s (a urlset of ``--urls`` random locs replaced at every
check, the checks run in this process), so that its additions and removals are stored as packs
of positions. Then, as ``sitemap-monitor changes TARGET --loc TEXT --limit N`` asks them (the
store's ``open_changes``, rendered as JSON, best of 3), the first page of: no search; a part
of the locs every version holds once (``item-12345``: two rows a re-check, fewer than a page:
the whole history is read); one whole loc of the oldest re-check (two rows); a text no loc holds;
a part most locs hold (``item-1``: a page soon). ``--keep DIR`` keeps the SQLite file (and a
PostgreSQL database, which stays until it is dropped by hand) and prints its URL; ``--reuse
URL`` times a kept one instead of building.
Printed: the wall seconds of the best run, and this process's CPU seconds a run (the mean of
the three: on a loaded machine the steadier figure; PostgreSQL's own CPU is not in it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
from harness import DEFAULT_PG, database
from history_bytes import START, rotating_site
from history_queries import _best
from psycopg import sql
from sqlalchemy import Engine, make_url, select, text

from monitor import config
from monitor.check.pipeline import run_check
from monitor.listing import params as listing
from monitor.read.fetch import Fetcher
from monitor.store import db, listingreads
from monitor.store.checkreads import read_columns
from monitor.store.schema import entry_sets


async def build(url: str, site: str, checks: int, urls: int) -> None:
    """The rotating target's ``checks`` checks into the database at ``url``."""
    cfg = config.parse({"database_url": url,
                        "defaults": {"allow_private": True,
                                     "retention": {"snapshots": "3650d", "keep_last": 10000}},
                        "targets": [{"name": "rotating", "url": site}]})
    target = cfg.target("rotating")
    assert target is not None
    engine = db.make_engine(url)
    db.upgrade(engine)
    fetcher = Fetcher(user_agent=target.settings.user_agent, per_host=cfg.scheduler.per_host)
    try:
        for n in range(checks):
            result = await run_check(target, engine=engine, fetcher=fetcher,
                                     now=lambda c=START + timedelta(minutes=15 * n): c)
            if result.outcome != "ok" or result.urls != urls:
                raise SystemExit(f"check {n}: {result.outcome} {result.error_message}")
    finally:
        await fetcher.aclose()
        engine.dispose()


def oldest_loc(engine: Engine) -> str:
    """One loc the first re-check added (the oldest version after the baseline's)."""
    v = entry_sets.c
    with engine.connect() as conn:
        second = conn.execute(select(v.id).order_by(v.id).offset(1).limit(1)).scalar()
        rows = read_columns(conn, select(v.data).where(v.id == second))
    listed = rows[0][0].locs()
    return str(listed[777 % len(listed)])


def time_queries(url: str, limit: int) -> None:
    """The first page of each search, best of 3."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            changes = conn.execute(text("SELECT count(*) FROM changes")).scalar()
            packs = conn.execute(text(
                "SELECT count(*) FROM changes WHERE members IS NOT NULL")).scalar()
        queries = {"no search": None, "item-12345": "item-12345",
                   "one whole loc": oldest_loc(engine), "no loc holds it": "no-such-text",
                   "item-1 (a page soon)": "item-1"}
        print(f"{engine.dialect.name}: {changes} change rows ({packs} packs), first page of "
              f"{limit}, seconds (best of 3)")
        for name, q in queries.items():
            rows: list[int] = []

            def run(q: str | None = q, rows: list[int] = rows) -> None:
                opened = listingreads.open_changes(engine, "rotating", None, (), None, q=q)
                try:
                    rows.append(len("".join(listing.render(opened, "json", limit=limit))))
                finally:
                    listing.close(opened)

            cpu = time.process_time()
            seconds = _best(run)
            cpu = (time.process_time() - cpu) / 3
            print(f"  {name:<24}{seconds:>8.3f} s  {cpu:>8.3f} CPU s a run  "
                  f"({rows[-1]:,} bytes of JSON)")
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", nargs="+", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])
    parser.add_argument("--urls", type=int, default=20_000)
    parser.add_argument("--checks", type=int, default=26)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="a folder for the SQLite file")
    parser.add_argument("--reuse", nargs="+", help="time these databases, built before")
    args = parser.parse_args()
    if args.reuse:
        for url in args.reuse:
            time_queries(url, args.limit)
        return
    os.environ["SITEMAP_MONITOR_PARSE_WORKERS"] = "0"  # read when a check starts
    for kind in args.database:
        with rotating_site(args.urls) as site, kept_or_fresh(kind, args.keep) as url:
            asyncio.run(build(url, site, args.checks, args.urls))
            if args.keep is not None:
                print(f"kept: {url}", file=sys.stderr)
            time_queries(url, args.limit)


@contextmanager
def kept_or_fresh(kind: str, keep: Path | None) -> Iterator[str]:
    """A fresh database's URL: harness's (dropped after), or one left for ``--reuse``."""
    if keep is None:
        with database(kind) as where:
            yield where.url
        return
    if kind == "sqlite":
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "loc_search.db").unlink(missing_ok=True)
        yield f"sqlite:///{keep / 'loc_search.db'}"
        return
    server = make_url(os.environ.get("TEST_DATABASE_URL") or DEFAULT_PG)
    name = f"sm_bench_loc_{secrets.token_hex(4)}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield server.set(drivername="postgresql", database=name).render_as_string(
        hide_password=False)


if __name__ == "__main__":
    main()
