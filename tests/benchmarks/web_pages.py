"""The daemon's web pages on a 500,000-URL target: time of each page over HTTP.

    .venv-bench/bin/python tests/benchmarks/web_pages.py [--database sqlite|postgres]
        [--requests 20] [--warmups 2] [--analyze]

The database is prepared as listings.py prepares it (its W1 site and handler, imported): W1
(10 x 50,000 URLs) checked once as target ``w1``, then again with its index listing one child
of one URL, so the second snapshot holds 500,000 removals. ``sitemap-monitor run`` then serves
it (``listen: 127.0.0.1:0``, the address read from its ``started`` log line). Its first check
is due at once (``check`` sets no next check time) and is awaited; the interval is 24h, so no
other runs meanwhile. With one kept-alive httpx connection, each page is requested
``--warmups`` times, then ``--requests`` times timed (request sent to body read): the targets
page, the target page, the first page of removals, the page after it (its ``rel="next"``
link), the URLs page, the diff from snapshot 1, and the JSON API's page of 100 removals for
comparison. The latest snapshot lists one URL, so the URLs page is timed twice: as it opens
(1 row) and at snapshot 1 (``?at=1``, the first 100 of 500,000). Each answer must be a 200
and a listing must show its rows (counted as ``<td class="loc"><a`` cells, one a row: the
URLs page gives its document column the class too). Printed: a Markdown table of median, p90
and max ms, PASS/FAIL of the changes pages against the issue's 200 ms, and the commit.
``--analyze`` runs ANALYZE once the checks are stored, as autovacuum would in a minute or so
(without it PostgreSQL plans with the statistics of an empty table). Not a test: figures, to
quote.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import http.server
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import harness
import httpx
import workloads
from harness import child_env, database
from listings import _Handler, _site

GOAL_MS = 200.0
ROWS = 100
_NEXT = re.compile(r'<a href="([^"]+)" rel="next">')


def _prepare(cli: str, config: Path, folder: Path, kind: str, db_url: str) -> None:
    """listings.py's two checks, of the configured target ``w1``: W1, then one URL."""
    if kind == "postgres":
        subprocess.run([cli, "db", "upgrade", "--database-url", db_url], check=True,
                       capture_output=True, env=child_env())
    # A day newer than the first index, so the second check does not get a 304.
    os.utime(folder / "after.xml", (time.time() + 86400, time.time() + 86400))
    for step in ("sitemap_index.xml", "after.xml"):
        _Handler.index = step
        done = subprocess.run([cli, "check", "w1", "--config", str(config)],
                              capture_output=True, text=True, env=child_env(), check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        print(done.stdout.splitlines()[0])


def _analyze(db: harness.Database) -> None:
    """Fresh planner statistics (autovacuum's ANALYZE, which may be off or not yet run)."""
    if db.kind == "sqlite":
        import sqlite3

        with contextlib.closing(sqlite3.connect(db.url.removeprefix("sqlite:///"))) as conn:
            conn.execute("ANALYZE")
        return
    import psycopg

    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _start(cli: str, config: Path) -> tuple[subprocess.Popen[str], str, list[str]]:
    """``sitemap-monitor run``, its ``http://HOST:PORT`` and the log lines it writes, once its
    first check (due at once: ``check`` sets no next check time) is logged."""
    proc = subprocess.Popen([cli, "run", "--config", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    assert proc.stderr is not None
    logged: list[str] = []
    threading.Thread(target=lambda: logged.extend(iter(proc.stderr.readline, "")),
                     daemon=True).start()
    base = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        lines = list(logged)
        for line in lines:
            if '"started"' in line:
                base = f"http://{json.loads(line)['listen']}"
        if base and any('"event": "check"' in line for line in lines):
            return proc, base, logged
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the daemon did not start and check:\n" + "".join(logged[-20:]))


def _time(client: httpx.Client, path: str, rows: int | None, warmups: int,
          n: int) -> tuple[list[float], str]:
    """Milliseconds of ``n`` requests after ``warmups``, and the last body."""
    body = ""
    times: list[float] = []
    for i in range(warmups + n):
        started = time.perf_counter()
        response = client.get(path)
        body = response.text
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, f"{path}: {response.status_code} {body[:500]}"
        if rows is not None:
            if path.startswith("/api/"):  # {head..., "changes": [...], "next_cursor": ...}
                found = len(next(v for v in json.loads(body).values() if isinstance(v, list)))
            else:
                found = body.count('<td class="loc"><a ')
            assert found == rows, f"{path}: {found} rows, not {rows}"
        if i >= warmups:
            times.append(elapsed)
    return times, body


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered) + 0.5) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--analyze", action="store_true",
                        help="ANALYZE the database before the daemon starts")
    args = parser.parse_args()
    workloads.ensure("W1", args.data_dir)
    commit = harness.commit()
    cli = harness.monitor_cli()
    with tempfile.TemporaryDirectory(prefix="sm-web-") as tmp, database(args.database) as db:
        folder = Path(tmp)
        site = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), lambda *a: _Handler(*a, directory=tmp))
        threading.Thread(target=site.serve_forever, daemon=True).start()
        port = site.server_address[1]
        _site(args.data_dir, folder, port)
        config = folder / "monitor.yaml"
        config.write_text(
            f"database_url: '{db.url}'\nlisten: 127.0.0.1:0\n"
            "defaults: {interval: 24h, jitter: 0, allow_private: true}\n"
            f"targets:\n  - {{name: w1, url: 'http://127.0.0.1:{port}/w1/sitemap_index.xml'}}\n",
            encoding="utf-8")
        _prepare(cli, config, folder, args.database, db.url)
        if args.analyze:
            _analyze(db)
        proc, base, logged = _start(cli, config)
        mark = len(logged)
        print(f"daemon pid {proc.pid} at {base}", flush=True)
        results: list[tuple[str, list[float]]] = []
        try:
            with httpx.Client(base_url=base, timeout=120, trust_env=False) as client:
                pages: list[tuple[str, int | None]] = [
                    ("/", None),
                    ("/targets/w1", None),
                    ("/targets/w1/changes?kind=removed", ROWS),
                ]
                for path, rows in pages:
                    times, body = _time(client, path, rows, args.warmups, args.requests)
                    results.append((path, times))
                nxt = _NEXT.search(body)
                assert nxt, "the first page of changes has no rel=next link"
                following = html.unescape(nxt[1])
                times, _ = _time(client, following, ROWS, args.warmups, args.requests)
                results.append(("/targets/w1/changes?kind=removed&cursor=(page 2)", times))
                for path, rows in [("/targets/w1/urls", 1),
                                   ("/targets/w1/urls?at=1", ROWS),
                                   ("/targets/w1/diff?from=1&kind=removed", ROWS),
                                   ("/api/v1/targets/w1/changes?kind=removed&limit=100", ROWS)]:
                    times, _ = _time(client, path, rows, args.warmups, args.requests)
                    results.append((path, times))
        finally:
            proc.terminate()
            proc.wait(60)
            site.shutdown()
        checks = sum('"event": "check"' in line for line in logged[mark:])
    print(f"\n{args.database}, commit {commit}, {args.requests} requests after "
          f"{args.warmups} warm-ups each, one kept-alive connection"
          f"{', ANALYZEd' if args.analyze else ''} "
          f"({checks} checks by the daemon meanwhile)\n")
    print(f"| page | median ms | p90 ms | max ms | < {GOAL_MS:.0f} ms |")
    print("|---|---|---|---|---|")
    for path, times in results:
        median = statistics.median(times)
        verdict = ""
        if path.startswith("/targets/w1/changes"):
            verdict = "PASS" if median < GOAL_MS else "FAIL"
        print(f"| `{path}` | {median:.1f} | {_p90(times):.1f} | {max(times):.1f} | {verdict} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
