"""How long a check holds a database transaction, and whether one slow site stalls the others.

    .venv/bin/python tests/benchmarks/write_lock.py first [--database sqlite|postgres]
    .venv/bin/python tests/benchmarks/write_lock.py drip [--seconds 120] [--drip 25]

``first``: W1's first check (an index of 10 x 50,000 URLs), in this process, with every
transaction of the engine timed from its BEGIN to its COMMIT: the longest is what a check holds
the database (on SQLite, its single write lock) for; the check's wall time beside it.

``drip``: the daemon on SQLite with five targets: ``slow``, an index whose second child drips its
body for ``--drip`` seconds at every check, and four others checked every 10 s. For ``--seconds``
it probes ``/readyz`` twice a second and reads the daemon's check lines; it prints, for each other
target, the longest gap between two of its checks (in intervals), and the ``/readyz`` answers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import workloads
from harness import database, serve

HERE = Path(__file__).resolve().parent

FAST = ("f1", "f2", "f3", "f4")


def first(kind: str) -> None:
    import asyncio

    from sqlalchemy import event

    from monitor.check.pipeline import run_check
    from monitor.config import Target
    from monitor.read.fetch import Fetcher
    from monitor.store import db as store_db

    data = workloads.default_data_dir()
    workloads.ensure("W1", data)
    held: list[float] = []
    with serve(data, "w1") as server, database(kind) as target_db:
        engine = store_db.make_engine(target_db.url)
        store_db.upgrade(engine)
        began: dict[int, float] = {}

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            began[id(conn)] = time.perf_counter()

        @event.listens_for(engine, "commit")
        def _commit(conn: Any) -> None:
            if id(conn) in began:
                held.append(time.perf_counter() - began.pop(id(conn)))

        async def check() -> float:
            fetcher = Fetcher(user_agent="write-lock-bench")
            target = Target.model_validate({"name": "w1",
                                            "url": f"{server.origin}/w1/sitemap_index.xml"})
            started = time.perf_counter()
            try:
                result = await run_check(target, engine=engine, fetcher=fetcher)
            finally:
                await fetcher.aclose()
            assert result.urls == workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD, result
            return time.perf_counter() - started

        wall = asyncio.run(check())
        engine.dispose()
    print(f"W1 first check on {kind}: wall {wall:.2f} s, {len(held)} transactions, "
          f"longest {max(held) * 1000:.0f} ms, the others at most "
          f"{sorted(held)[-2] * 1000 if len(held) > 1 else 0:.0f} ms")


def _index(*children: str) -> bytes:
    rows = "".join(f"<sitemap><loc>{child}</loc></sitemap>" for child in children)
    return ('<?xml version="1.0" encoding="UTF-8"?><sitemapindex '
            f'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</sitemapindex>'
            ).encode()


def _dripping(body: bytes, seconds: float) -> Iterator[bytes]:
    cut = body.index(b"<url>")
    yield body[:cut]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.5)
        yield b" "
    yield body[cut:]


def drip(seconds: float, dripping: float) -> None:
    import importlib.util

    sys.path.append(str(HERE.parent))  # the tests' HTTP server
    from httpserver import Reply, TestServer

    spec = importlib.util.spec_from_file_location("daemon_harness",
                                                  HERE.parent / "daemon" / "harness.py")
    assert spec is not None
    assert spec.loader is not None
    daemons = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(daemons)
    Daemon, urlset = daemons.Daemon, daemons.sitemap

    from monitor.store import db as store_db

    with TestServer() as server, tempfile.TemporaryDirectory() as folder:
        u = server.url
        server.route("/slow/index.xml", Reply(body=_index(u("/slow/a.xml"), u("/slow/b.xml"))))
        server.route("/slow/a.xml", Reply(body=urlset({u("/a/1"): None})))
        slow = urlset({u("/b/1"): None})
        server.route("/slow/b.xml", lambda _r: Reply(body=_dripping(slow, dripping)))
        for name in FAST:
            server.route(f"/{name}.xml", Reply(body=urlset({u(f"/{name}/1"): None})))
        url = f"sqlite:///{folder}/m.db"
        engine = store_db.make_engine(url)
        store_db.upgrade(engine)
        engine.dispose()
        config = Path(folder) / "c.yaml"
        targets = [("slow", u("/slow/index.xml")), *[(n, u(f"/{n}.xml")) for n in FAST]]
        config.write_text("\n".join([
            f"database_url: {url}", "listen: 127.0.0.1:0",
            "defaults: {interval: 10s, jitter: 0, timeout: 300s}", "targets:",
            *[f'  - {{name: "{n}", url: "{t}"}}' for n, t in targets]]) + "\n")
        daemon = Daemon(config)
        ready: list[int] = []
        try:
            daemon.started(timeout=60)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    ready.append(httpx.get(daemon.base + "/readyz", timeout=5).status_code)
                except httpx.HTTPError:
                    ready.append(0)
                time.sleep(0.5)
        finally:
            daemon.stop()
    slow_checks = daemon.checks("slow")
    print(f"drip {dripping:g} s, {seconds:g} s on SQLite: {len(slow_checks)} slow checks "
          f"({statistics.mean(c['duration_seconds'] for c in slow_checks):.1f} s each)"
          if slow_checks else "no slow check ended")
    for name in FAST:
        times = [datetime.fromisoformat(c["timestamp"]) for c in daemon.checks(name)]
        gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
        bad = [c for c in daemon.checks(name) if c["outcome"] not in ("ok", "unchanged")]
        print(f"  {name}: {len(times)} checks, longest gap {max(gaps, default=0):.1f} s "
              f"({max(gaps, default=0) / 10:.2f} intervals), {len(bad)} not ok")
    print(f"  /readyz: {len(ready)} probes, {sum(s == 200 for s in ready)} answered 200, "
          f"others {sorted(set(ready) - {200})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["first", "drip"])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--drip", type=float, default=25)
    args = parser.parse_args()
    if args.part == "first":
        first(args.database)
    else:
        drip(args.seconds, args.drip)


if __name__ == "__main__":
    threading.current_thread().name = "write-lock-bench"
    main()
