"""What a round of URL checks costs the database when nothing is due: its bookkeeping.

    .venv/bin/python tests/benchmarks/url_bookkeeping.py [--urls 50000] [--rounds 20]
        [--database-url sqlite|postgresql://postgres@127.0.0.1:5432/postgres]

A target with ``--urls`` listed URL states (a seeded mix of states and rules, a few listed
since the first round, most checked within ``recheck``, some never) in a fresh database
(a temporary SQLite file, or a database made on the PostgreSQL server and dropped after),
then ``--rounds`` rounds of the daemon's ``run_round`` with nothing due (``limit=0``) and a
``url_health`` alert rule: what is left is what every round does besides its checks (the
sync, the robots.txt versions, the due read, the counts and the estimate's strata, the first
round's test, the examples, the alert rules' outbox). Printed: the SQL statements of a round,
those that count over the listed ``url_states`` rows, and the wall
seconds of a round (median and fastest).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, make_url, text

from monitor import config as config_module
from monitor.core.model import URL_STATES, utcnow
from monitor.read.fetch import Fetcher
from monitor.store.db import bring_to_head, make_engine
from monitor.store.schema import snapshots, targets, url_checks, url_states
from monitor.urlhealth import checker as urlcheck

RULES = {"not-found": "url-not-found", "redirect": "url-redirect", "noindex": "url-noindex",
         "soft-404": "url-soft-404", "server-error": "url-server-error"}
MIX = [("ok", 0.88), ("not-found", 0.03), ("redirect", 0.03), ("noindex", 0.02),
       ("soft-404", 0.01), ("server-error", 0.01), ("unknown", 0.02)]


def rows(n: int, target_id: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    now = utcnow()
    states, weights = zip(*MIX, strict=True)
    found = []
    for i in range(n):
        state = rng.choices(states, weights)[0]
        roll = rng.random()
        checked = (None if roll < 0.15 else now - timedelta(days=rng.uniform(0, 6)) if roll < 0.9
                   else now - timedelta(days=rng.uniform(8, 30)))
        found.append({
            "target_id": target_id, "loc": f"https://site.test/p/{i}", "listed": i % 500 != 7,
            "state": "unknown" if checked is None else state,
            "rule": None if checked is None else RULES.get(state),
            "attempts": 1 if checked is None and roll < 0.01 else 0,
            "checked_at": checked, "due_at": None if checked is None else now + timedelta(days=1),
            "turn": -rng.getrandbits(40) - 1 if rng.random() < 0.02 else rng.getrandbits(62)})
    return found


def setup(engine: Any, n: int) -> config_module.Config:
    bring_to_head(engine)
    now = utcnow()
    with engine.begin() as conn:
        target_id = conn.execute(insert(targets).values(
            name="site", url="http://127.0.0.1:9/sitemap.xml", created_at=now)
        ).inserted_primary_key[0]
        snapshot_id = conn.execute(insert(snapshots).values(
            target_id=target_id, started_at=now, finished_at=now, outcome="ok")
        ).inserted_primary_key[0]
        conn.execute(insert(url_checks).values(target_id=target_id,
                                               synced_snapshot_id=snapshot_id,
                                               sample_key="00" * 16))
        made = rows(n, target_id, 3)
        for start in range(0, n, 5000):
            conn.execute(insert(url_states), made[start:start + 5000])
    return config_module.parse({
        "targets": [{"name": "site", "url": "http://127.0.0.1:9/sitemap.xml",
                     "url_checks": {"enabled": True}}],
        "alerts": {"channels": [{"name": "hook", "type": "webhook",
                                 "url": "http://127.0.0.1:9/hook"}],
                   "rules": [{"name": "broken", "channels": ["hook"], "when": "url_health",
                              "state": ["not-found"], "ratio": 0.5}]}})


async def rounds(engine: Any, cfg: config_module.Config, count: int,
                 ) -> list[tuple[int, int, float]]:
    [target] = cfg.resolved_targets()
    fetcher = Fetcher()
    budget = urlcheck.Budget()
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    found = []
    try:
        for _ in range(count):
            statements.clear()
            started = time.perf_counter()
            result = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                              budget=budget, now=utcnow, limit=0,
                                              alerts=cfg.alerts)
            seconds = time.perf_counter() - started
            assert result is not None
            assert result.checked == 0
            assert set(result.states) <= set(URL_STATES)
            whole = sum(1 for s in statements if "FROM url_states" in s and "count(" in s)
            found.append((len(statements), whole, seconds))
    finally:
        event.remove(engine, "before_cursor_execute", seen)
        await fetcher.aclose()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--database-url", default="sqlite")
    args = parser.parse_args()
    server, made = None, ""
    with tempfile.TemporaryDirectory() as folder:
        if args.database_url == "sqlite":
            url = f"sqlite:///{Path(folder) / 'bench.db'}"
        else:
            server = make_engine(args.database_url, isolation_level="AUTOCOMMIT")
            made = f"bookkeeping_{os.getpid()}"
            with server.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{made}"'))
            url = make_url(args.database_url).set(database=made).render_as_string(
                hide_password=False)
        engine = make_engine(url)
        try:
            found = asyncio.run(rounds(engine, setup(engine, args.urls), args.rounds))
        finally:
            engine.dispose()
            if server is not None:
                with server.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{made}"'))
                server.dispose()
    statements = {s for s, _w, _t in found}
    whole = {w for _s, w, _t in found}
    times = [t for _s, _w, t in found]
    kind = "SQLite" if args.database_url == "sqlite" else "PostgreSQL"
    print(f"{kind}, {args.urls:,} listed URLs, {args.rounds} rounds with nothing due: "
          f"statements a round {sorted(statements)}, counts over url_states {sorted(whole)}, "
          f"wall median {statistics.median(times) * 1000:.1f} ms, "
          f"fastest {min(times) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
