"""A daemon with many small targets: start-up, memory per target, logs, a scrape.

Starts the sitemap server of daemon_scale.py (20-URL sitemaps with ETags) in its own process
and ``sitemap-monitor run`` with ``--targets`` targets at ``--interval``, far more than one
replica checks in an interval, so the schedule falls behind on purpose. Prints: seconds from the
spawn to the first ``/healthz`` 200 and the daemon's CPU by then; RSS then and after
``--seconds`` (and per target); the log lines written meanwhile and how many were warnings; one
``/metrics`` scrape's size and seconds; the checks done.

    .venv/bin/python tests/benchmarks/daemon_startup.py [--database sqlite|postgres]
        [--targets 20000] [--interval 60s] [--seconds 60]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from daemon_scale import _cpu_seconds, _database, _drop, _memory_mib, start_server

from monitor.store import db


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--targets", type=int, default=20_000)
    parser.add_argument("--interval", default="60s")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()

    server, port = start_server(20, changing=False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url, pg_name = _database(args.database, folder)
        engine = db.make_engine(url)
        db.upgrade(engine)
        engine.dispose()
        with socket.socket() as probe:  # a free port, known before the daemon says it
            probe.bind(("127.0.0.1", 0))
            listen = probe.getsockname()[1]
        base = f"http://127.0.0.1:{listen}"
        lines = [f"database_url: {url}", f"listen: 127.0.0.1:{listen}",
                 f"defaults: {{interval: {args.interval}, allow_private: true}}", "targets:"]
        lines += [f"  - {{name: t{i}, url: 'http://127.0.0.1:{port}/t{i}.xml'}}"
                  for i in range(args.targets)]
        config = folder / "monitor.yaml"
        config.write_text("\n".join(lines) + "\n")
        script = Path(sys.executable).with_name("sitemap-monitor")
        spawned = time.monotonic()
        proc = subprocess.Popen([str(script), "run", "--config", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        logged: list[str] = []
        reader = threading.Thread(target=lambda: logged.extend(iter(proc.stderr.readline, "")),
                                  daemon=True)
        reader.start()
        try:
            while True:
                assert proc.poll() is None, "".join(logged[-20:])
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            ready = time.monotonic() - spawned
            cpu_ready = _cpu_seconds(proc.pid)
            while not any('"started"' in line for line in list(logged)):
                assert proc.poll() is None, "".join(logged[-20:])
                time.sleep(0.05)
            scheduled = time.monotonic() - spawned
            rss_ready, _ = _memory_mib(proc.pid)
            mark = len(logged)
            time.sleep(args.seconds)
            rss_later, peak = _memory_mib(proc.pid)
            started = time.monotonic()
            scrape = httpx.get(f"{base}/metrics", timeout=120)
            scrape_s = time.monotonic() - started
            window = logged[mark:]
            warnings = sum('"level": "warning"' in line for line in window)
            checks = sum('"event": "check"' in line for line in window)
        finally:
            proc.terminate()
            proc.wait(60)
            server.terminate()
            if pg_name:
                _drop(pg_name)
    n = args.targets
    print(f"{args.database}, {n} targets at {args.interval}: /healthz after {ready:.1f} s "
          f"({cpu_ready:.1f} s CPU), every target scheduled after {scheduled:.1f} s; "
          f"RSS {rss_ready:.0f} MiB then, {rss_later:.0f} MiB after {args.seconds:.0f} s "
          f"(peak {peak:.0f}; {rss_later * 1024 / n:.1f} KiB a target); "
          f"{len(window)} log lines in {args.seconds:.0f} s, {warnings} warnings, {checks} checks; "
          f"/metrics {len(scrape.content) / 1e6:.1f} MB in {scrape_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
