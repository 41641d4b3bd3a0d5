"""Bytes of history a changed URL costs: a sitemap whose every URL is replaced at every
check, on SQLite and PostgreSQL, table by table and index by index.

    .venv/bin/python tests/benchmarks/history_bytes.py [--database sqlite postgres]
        [--urls 20000] [--checks 6]

A local HTTP server (a thread of this process) serves one urlset of ``--urls`` URLs, each
with a lastmod; every request after the first gets a new generation, none of whose URLs the
one before listed (random paths: the worst case for compression). The checks run in this
process (the pipeline's ``run_check``, ``SITEMAP_MONITOR_PARSE_WORKERS=0``), without
retention. After the baseline (the first check) each re-check adds ``--urls`` URLs and
removes as many: 2 x ``--urls`` changed URLs a check.

Reported per database: the time to a first page of the changes, and of a search of them by
a part of the loc (best of 3); the bytes each table and index grew by over the re-checks (SQLite:
``dbstat``'s pages; PostgreSQL: ``pg_relation_size`` of each table, its TOAST and each index,
after a VACUUM), per re-check and per changed URL, and the snapshots' own ``history_bytes``
where the schema has it (what retention's ``max_bytes`` counts).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness import database
from history_queries import _best, _page
from sqlalchemy import Engine, text

from monitor import config
from monitor.check.pipeline import run_check
from monitor.read.fetch import Fetcher
from monitor.store import db
from monitor.store import listingreads as store

START = datetime(2026, 1, 1, tzinfo=UTC)
LOC_LENGTH = len("https://shop.example.com/catalogue/01234567-1/0123456789-item-12345.html")


def sitemap(generation: int, urls: int) -> bytes:
    """One generation of the rotating urlset: ``urls`` URLs none of the others list."""
    token = secrets.token_hex(4)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    for i in range(urls):
        lines.append(f"<url><loc>https://shop.example.com/catalogue/{token}-{generation}/"
                     f"{secrets.token_hex(5)}-item-{i}.html</loc>"
                     f"<lastmod>2026-01-{1 + generation % 28:02d}</lastmod></url>")
    lines.append("</urlset>")
    return "\n".join(lines).encode()


@contextmanager
def rotating_site(urls: int) -> Iterator[str]:
    """A server whose ``/sitemap.xml`` is a new generation at every request; its URL."""
    state = {"generation": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/sitemap.xml":  # robots.txt: none
                self.send_error(404)
                return
            body = sitemap(state["generation"], urls)
            state["generation"] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sitemap.xml"
    finally:
        server.shutdown()
        server.server_close()


def relation_bytes(engine: Engine) -> dict[str, int]:
    """Bytes on disk of each table and index (a table's TOAST counted with it)."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            return {name: int(size) for name, size in conn.execute(text(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))}
        rows = conn.execute(text(
            "SELECT c.relname, CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid) "
            "ELSE pg_table_size(c.oid) END FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"))
        return {name: int(size) for name, size in rows}


def vacuum(engine: Engine) -> None:
    """PostgreSQL: VACUUM, so that the sizes hold no dead rows' room the next rows reuse."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")


def history_bytes(engine: Engine) -> int | None:
    """What retention's ``max_bytes`` counts of the history (monitor.store.historysize): the
    snapshots' own counts and the entry-set versions' lengths; None on a schema before them."""
    with engine.connect() as conn:
        try:
            own = conn.execute(text(
                "SELECT COALESCE(SUM(history_bytes), 0) FROM snapshots")).scalar() or 0
        except Exception:  # noqa: BLE001 - a schema from before the count
            return None
        sets = conn.execute(text(
            "SELECT COALESCE(SUM(48 + LENGTH(data) + LENGTH(document_url)), 0) "
            "FROM entry_sets")).scalar() or 0
        return int(own) + int(sets)


async def measure(url: str, site: str, checks: int, urls: int) -> dict[str, Any]:
    """Run the checks; the growth of each relation over the re-checks."""
    cfg = config.parse({"database_url": url,
                        "defaults": {"allow_private": True,
                                     "retention": {"snapshots": "3650d", "keep_last": 10000}},
                        "targets": [{"name": "rotating", "url": site}]})
    target = cfg.target("rotating")
    assert target is not None
    engine = db.make_engine(url)
    db.upgrade(engine)
    fetcher = Fetcher(user_agent=target.settings.user_agent, per_host=cfg.scheduler.per_host)
    changed = 0
    try:
        for n in range(checks):
            clock = START + timedelta(minutes=15 * n)
            result = await run_check(target, engine=engine, fetcher=fetcher,
                                     now=lambda c=clock: c)
            if result.outcome != "ok" or result.urls != urls:
                raise SystemExit(f"check {n}: {result.outcome} {result.urls} URLs "
                                 f"{result.error_message}")
            if n == 0:
                vacuum(engine)
                before, counted = relation_bytes(engine), history_bytes(engine)
            else:
                changed += result.added + result.removed
        vacuum(engine)
        after, counted_after = relation_bytes(engine), history_bytes(engine)
        timings = {
            "changes, first page": _best(lambda: _page(store.open_changes(
                engine, "rotating", None, (), None))),
            "changes --loc item-12345": _best(lambda: _page(store.open_changes(
                engine, "rotating", None, (), None, q="item-12345"))),
        }
    finally:
        await fetcher.aclose()
        engine.dispose()
    growth = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    return {"growth": growth, "changed": changed, "rechecks": checks - 1,
            "counted": None if counted is None or counted_after is None
            else counted_after - counted, "timings": timings}


def report(kind: str, found: dict[str, Any]) -> None:
    """The growth table of one database."""
    growth, changed, rechecks = found["growth"], found["changed"], found["rechecks"]
    total = sum(growth.values())
    print(f"\n{kind}: {rechecks} re-checks, {changed:,} changed URLs "
          f"({changed // max(rechecks, 1):,} a re-check), locs of {LOC_LENGTH} characters")
    print(f"{'relation':<44}{'bytes':>14}{'a re-check':>14}{'a changed URL':>15}")
    for name, size in sorted(growth.items(), key=lambda item: -item[1]):
        if size:
            print(f"{name:<44}{size:>14,}{size // rechecks:>14,}{size / changed:>15.1f}")
    print(f"{'total':<44}{total:>14,}{total // rechecks:>14,}{total / changed:>15.1f}")
    for name, seconds in found["timings"].items():
        print(f"{name:<44}{seconds:>14.3f} s (best of 3)")
    if found["counted"] is not None:
        print(f"{'counted for max_bytes':<44}{found['counted']:>14,}"
              f"{found['counted'] // rechecks:>14,}{found['counted'] / changed:>15.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", nargs="+", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])
    parser.add_argument("--urls", type=int, default=20_000)
    parser.add_argument("--checks", type=int, default=6)
    args = parser.parse_args()
    os.environ["SITEMAP_MONITOR_PARSE_WORKERS"] = "0"  # read when a check starts
    for kind in args.database:
        with rotating_site(args.urls) as site, database(kind) as where:
            report(kind, asyncio.run(measure(where.url, site, args.checks, args.urls)))


if __name__ == "__main__":
    main()
