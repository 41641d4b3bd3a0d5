"""What the URL checks cost the daemon for the W1 target (500,000 URLs; issue 23): memory and
bytes on disk.

    .venv-bench/bin/python tests/benchmarks/url_state_memory.py [--database sqlite|postgres]
        [--checked N]

Serves W1 (server.py) and runs ``sitemap-monitor run`` on it twice, each into a fresh
database, each in its own process: with ``url_checks`` off, until its first check is stored
and 20 s more have passed; with them on (rate lifted to 4,000 a second, rounds of 1,000),
until the URL states of all 500,000 URLs exist and N of them (default 20,000) have been
checked (W1's pages are the sitemap server's 404s: the states are not-found, which writes a
transition each). Every 0.2 s it reads the daemon's VmRSS; VmHWM at the end. Printed: the peak
RSS of both runs and their difference (the goal: at most 60 MB more), the time the URL states
took to exist, and the bytes of ``url_states`` (table and indexes) per URL.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import workloads
from harness import child_env, monitor_cli, serve

URLS = workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD
GOAL_MB = 60.0
CONFIG = """\
database_url: {db}
listen: 127.0.0.1:0
defaults:
  interval: 1h
  jitter: 0
  allow_private: true
  url_checks: {{enabled: {enabled}, rate: 4000, recheck: 7d}}
scheduler: {{per_host: 10}}
targets:
  - {{name: w1, url: "{url}"}}
"""


def _status(pid: int) -> dict[str, int]:
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])  # kB
    return found


def run(db: harness.Database, url: str, enabled: bool, checked: int,
        folder: Path) -> dict[str, float]:
    config = folder / f"monitor-{enabled}.yaml"
    config.write_text(CONFIG.format(db=db.url, url=url, enabled=str(enabled).lower()))
    proc = subprocess.Popen([monitor_cli(), "run", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=child_env())
    started = time.monotonic()
    peak = 0
    states_at = None
    done_at = None
    try:
        while time.monotonic() - started < 900:
            time.sleep(0.2)
            peak = max(peak, _status(proc.pid).get("VmRSS", 0))
            if db.count("SELECT count(*) FROM snapshots") == 0:
                continue
            if done_at is None and not enabled:
                done_at = time.monotonic()
            if not enabled:
                if time.monotonic() - done_at >= 20:
                    break
                continue
            if states_at is None and db.count("SELECT count(*) FROM url_states") >= URLS:
                states_at = time.monotonic() - started
            if db.count("SELECT count(*) FROM url_states WHERE checked_at IS NOT NULL") >= checked:
                break
        else:
            raise RuntimeError("the daemon did not get there within 900 s")
        hwm = _status(proc.pid).get("VmHWM", 0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    result = {"peak_rss_mb": max(peak, hwm) / 1024, "seconds": time.monotonic() - started}
    if states_at is not None:
        result["states_after_s"] = states_at
    return result


def url_state_bytes(db: harness.Database) -> int:
    if db.kind == "sqlite":
        import sqlite3

        path = db.url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            row = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN ('url_states',"
                " 'sqlite_autoindex_url_states_1', 'ix_url_states_target_id_due_at_turn')"
            ).fetchone()
        return int(row[0])
    return db.count("SELECT pg_total_relation_size('url_states')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--checked", type=int, default=20_000, metavar="N")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("BENCH_DATA_DIR", "/tmp/sitemap-monitor-bench"))
    workloads.ensure("W1", data_dir)
    runs = {}
    with serve(data_dir, "w1") as server, tempfile.TemporaryDirectory() as tmp:
        url = f"{server.origin}/w1/sitemap_index.xml"
        for enabled in (False, True):
            with harness.database(args.database) as db:
                harness.upgrade(db)
                runs[enabled] = run(db, url, enabled, args.checked, Path(tmp))
                if enabled:
                    runs[enabled]["bytes"] = url_state_bytes(db)
                    runs[enabled]["urls"] = db.count("SELECT count(*) FROM url_states")
    off, on = runs[False], runs[True]
    more = on["peak_rss_mb"] - off["peak_rss_mb"]
    print(f"W1 ({URLS:,} URLs), {args.database}: the daemon's peak RSS")
    print("| url_checks | peak RSS MB | seconds | URL states after s |")
    print("|---|---|---|---|")
    print(f"| off | {off['peak_rss_mb']:.1f} | {off['seconds']:.1f} | - |")
    print(f"| on ({args.checked:,} checked) | {on['peak_rss_mb']:.1f} | {on['seconds']:.1f} |"
          f" {on.get('states_after_s', 0):.1f} |")
    verdict = "PASS" if more <= GOAL_MB else "FAIL"
    print(f"more with url_checks: {more:.1f} MB (goal <= {GOAL_MB:.0f} MB): {verdict}")
    print(f"url_states on disk: {on['bytes'] / 1e6:.1f} MB for {on['urls']:,} URLs,"
          f" {on['bytes'] / on['urls']:.0f} bytes a URL")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
