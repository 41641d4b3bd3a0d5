"""History's growth: a target checked hourly for 30 simulated days, with and without
retention, on SQLite and PostgreSQL.

    .venv/bin/python tests/benchmarks/growth.py [--database sqlite|postgres]
        [--pattern daily one every] [--children 10] [--urls 50000] [--days 30]
        [--retention 7d] [--modes none retention] [--out FILE.json]

The site (``growth_site.py``, its own process) is W1's shape by default: an index of 10
urlsets of 50,000 URLs; its lastmods move by pattern: ``daily`` (1% of every child's URLs a
day), ``one`` (every lastmod of one child at every check), ``every`` (every lastmod at every
check, a CMS that stamps "now"). Each pattern runs twice into a fresh database: without
retention, then with ``retention: {snapshots: RETENTION}`` (keep_last 100), pruned after
every check as the daemon's hourly pruning does. The checks run in this process (the pipeline's
``run_check``, ``SITEMAP_MONITOR_PARSE_WORKERS=0`` so that every check's CPU is this process's)
on a simulated clock: hour N of the site is hour N of the clock.

Reported: the database's bytes (``sitemap_monitor_database_bytes``: SQLite's pages, PostgreSQL's
``pg_database_size``) after each simulated week; each week's mean CPU and wall per check (flat
is the target); the prune's time per hour; at each week's end the time (best of 3) to the
first page of the queries that read history: ``urls --at`` the oldest snapshot kept,
``changes``, ``history`` and the API's ``/api/v1/targets/site``; and the bytes a year per
100,000 URLs: without retention the growth of the last 29 days, scaled; with it, the size it
levels off at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from harness import database, serve_script
from history_queries import _best, _page

from monitor import config
from monitor.check.pipeline import run_check
from monitor.listing import params as listing
from monitor.read.fetch import Fetcher
from monitor.store import db
from monitor.store import listingreads as store
from monitor.store import targetrows as api
from monitor.store.retention import (
    database_bytes,
    give_back,
    prune_target,
    target_ids,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
WEEK = 7 * 24


def _step(origin: str, hour: int) -> None:
    """The site at this hour."""
    request = urllib.request.Request(f"{origin}/__step/{hour}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def _queries(engine: Any) -> dict[str, float]:
    oldest = api.list_snapshots(engine, "site", limit=10**6)
    assert oldest
    first = oldest[-1]["id"]
    return {
        "urls --at oldest": _best(lambda: _page(store.open_urls(
            engine, "site", listing.SnapshotRef(id=first), None, None))),
        "changes": _best(lambda: _page(store.open_changes(engine, "site", None, (), None))),
        "history": _best(lambda: api.list_snapshots(engine, "site", limit=20)),
        "/api/v1/targets/site": _best(lambda: api.get_target(engine, "site")),
    }


async def _run(url: str, origin: str, args: argparse.Namespace, retention: str | None,
               ) -> dict[str, Any]:
    keep = {"snapshots": retention, "keep_last": 100} if retention else {
        "snapshots": f"{args.days + 1}d", "keep_last": 100}
    cfg = config.parse({"database_url": url,
                        "defaults": {"retention": keep, "allow_private": True},
                        "targets": [{"name": "site", "url": f"{origin}/idx.xml"}]})
    target = cfg.target("site")
    assert target is not None
    engine = db.make_engine(url)
    db.upgrade(engine)
    fetcher = Fetcher(user_agent=target.settings.user_agent, per_host=cfg.scheduler.per_host)
    hours = args.days * 24
    total_urls = args.children * args.urls
    weeks: list[dict[str, Any]] = []
    checks: list[tuple[float, float, int]] = []  # wall, CPU, entries changed
    prunes: list[float] = []
    empty = database_bytes(engine)
    after_day = 0
    try:
        for hour in range(hours):
            await asyncio.to_thread(_step, origin, hour)
            clock = START + timedelta(hours=hour, minutes=1)
            wall, cpu = time.perf_counter(), time.process_time()
            result = await run_check(target, engine=engine, fetcher=fetcher, now=lambda c=clock: c)
            checks.append((time.perf_counter() - wall, time.process_time() - cpu,
                           result.changed))
            if result.outcome not in ("ok", "unchanged") or result.urls != total_urls:
                raise SystemExit(f"hour {hour}: {result.outcome} {result.urls} URLs "
                                 f"{result.error_message}")
            if retention:
                started = time.perf_counter()
                keep_for = cfg.retention("site")
                for _name, target_id in target_ids(engine):
                    prune_target(engine, target_id, max_age=keep_for.snapshots,
                                 keep_last=keep_for.keep_last, now=clock)
                give_back(engine)
                prunes.append(time.perf_counter() - started)
            if hour == 23:
                after_day = database_bytes(engine)
            if (hour + 1) % WEEK == 0 or hour + 1 == hours:
                week = checks[max(1, hour + 1 - WEEK):]  # the first check is not a re-check
                weeks.append({
                    "hours": hour + 1, "bytes": database_bytes(engine),
                    "check_wall": statistics.mean(w for w, _, _ in week),
                    "check_cpu": statistics.mean(c for _, c, _ in week),
                    "queries": _queries(engine),
                })
                print(f"  {args.pattern_now} {'retention ' + retention if retention else 'all'}"
                      f" hour {hour + 1}: {weeks[-1]['bytes']:,} bytes, "
                      f"check {weeks[-1]['check_cpu']:.3f} s CPU", file=sys.stderr, flush=True)
    finally:
        await fetcher.aclose()
        engine.dispose()
    end = weeks[-1]["bytes"]
    scale = 100_000 / total_urls
    # With retention the size levels off at the history it keeps; without, it grows.
    per_year = end * scale if retention else (end - after_day) / (args.days - 1) * 365 * scale
    return {
        "retention": retention, "empty": empty, "weeks": weeks, "checks": checks,
        "prune_mean": statistics.mean(prunes) if prunes else None,
        "prune_max": max(prunes) if prunes else None, "bytes_per_year_per_100k": per_year,
    }


def _report(kind: str, args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    print(f"\n{kind}: {args.children} x {args.urls:,} URLs, checked hourly for {args.days} "
          f"simulated days; retention {args.retention} (keep_last 100) or none")
    for pattern, pair in runs.items():
        for run in pair:
            label = f"{pattern}, " + (f"retention {run['retention']}" if run["retention"]
                                      else "no retention")
            print(f"\n{label}: empty database {run['empty']:,} bytes")
            print(f"{'hours':>6}{'bytes':>16}{'check CPU s':>13}{'check wall s':>13}"
                  + "".join(f"{q:>22}" for q in run["weeks"][0]["queries"]))
            for week in run["weeks"]:
                print(f"{week['hours']:>6}{week['bytes']:>16,}{week['check_cpu']:>13.3f}"
                      f"{week['check_wall']:>13.3f}"
                      + "".join(f"{t:>22.4f}" for t in week["queries"].values()))
            flat = run["weeks"][-1]["check_cpu"] / run["weeks"][0]["check_cpu"]
            print(f"last week / first week CPU per check: {flat:.2f}x")
            if run["prune_mean"] is not None:
                print(f"prune + give back after each check: mean {run['prune_mean']:.3f} s, "
                      f"max {run['prune_max']:.3f} s")
            print(f"bytes a year per 100,000 URLs: {run['bytes_per_year_per_100k']:,.0f}"
                  + (" (levels off)" if run["retention"] else " (grows)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pattern", nargs="+", choices=["daily", "one", "every"],
                        default=["daily", "one", "every"])
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--retention", default="7d")
    parser.add_argument("--modes", nargs="+", choices=["none", "retention"],
                        default=["none", "retention"], help="without retention, with it")
    parser.add_argument("--out")
    args = parser.parse_args()
    os.environ["SITEMAP_MONITOR_PARSE_WORKERS"] = "0"  # read when a check starts
    runs: dict[str, list[dict[str, Any]]] = {}
    for pattern in args.pattern:
        args.pattern_now = pattern
        runs[pattern] = []
        for retention in [None if mode == "none" else args.retention for mode in args.modes]:
            with serve_script("growth_site.py", pattern, str(args.children),
                              str(args.urls)) as site, database(args.database) as where:
                runs[pattern].append(asyncio.run(_run(where.url, site.origin, args, retention)))
    _report(args.database, args, runs)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump({"database": args.database, "children": args.children, "urls": args.urls,
                       "days": args.days, "runs": runs}, out, indent=1)


if __name__ == "__main__":
    main()
