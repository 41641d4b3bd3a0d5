"""How many checks per second one replica sustains on 1,000 small targets served on 127.0.0.1.

Starts a sitemap server in its own process (1,000 sitemaps of 20 URLs, with ETags, so an
unchanged sitemap answers 304) and ``sitemap-monitor run`` with 1,000 targets whose interval
(1 s) is far below what one replica can keep up with, so the scheduler is never idle. After the
first round (every target checked once), it counts snapshots for ``--seconds`` and samples the
daemon's CPU time and memory from /proc. Optionally ``--changing`` makes every sitemap change
on every request (no 304, a full parse, diff and write per check).

``--replicas N`` starts N daemons on the same PostgreSQL database and targets: the
checks per second are the fleet's, the CPU is the sum over the replicas, and the row adds the
checks per daemon CPU-second and the seconds of the second round (the next ``--targets``
snapshots after the first round: one full round of re-checks of unchanged targets) and each
replica's share of the checks in the measured window (``--stagger S`` starts each replica S
seconds after the one before, so the first holds every due time when the others join).

The first round's CPU seconds are the daemons' (from their start) and, on PostgreSQL, those of
the server's backends that serve the benchmark's database (read from /proc, so the server must
run on this machine): where a first round on PostgreSQL spends what one on SQLite does not.

    .venv/bin/python tests/benchmarks/daemon_scale.py [--database sqlite|postgres]
        [--targets 1000] [--seconds 30] [--concurrency 8] [--changing] [--replicas N]
        [--interval 1] [--stagger 0]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, func, make_url, select, text

from monitor.store import db
from monitor.store.schema import snapshots

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _serve(port_queue: Any, urls: int, changing: bool) -> None:
    counter = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            name = self.path.strip("/").split(".")[0]
            counter[0] += 1
            version = counter[0] if changing else 0
            etag = f'"{name}-{version}"'
            if not changing and self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            rows = "".join(
                f"<url><loc>{host}/{name}/page-{(i + version) % (urls * 2)}</loc>"
                f"<lastmod>2024-01-01</lastmod></url>"
                for i in range(urls)
            )
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port_queue.put(server.server_address[1])
    server.serve_forever()


def start_server(urls: int, changing: bool) -> tuple[multiprocessing.Process, int]:
    """The sitemap server in a process of its own, and its port."""
    queue: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(queue, urls, changing), daemon=True)
    server.start()
    return server, queue.get(timeout=10)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _memory_mib(pid: int) -> tuple[float, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _claims(ports: list[int]) -> tuple[float, float] | None:
    """Claim statements so far over the replicas, all and empty; None if not exported."""
    total = empty = 0.0
    for port in ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        found = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("sitemap_monitor_claims_total{")}
        if not found:
            return None
        total += sum(found.values())
        empty += found.get('sitemap_monitor_claims_total{outcome="empty"}', 0.0)
    return total, empty


def _checks(port: int) -> float:
    """The checks this replica made so far (its checks_total over every target)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sitemap_monitor_checks_total{"))


def _database(kind: str, folder: Path) -> tuple[str, str | None]:
    if kind == "sqlite":
        return f"sqlite:///{folder}/bench.db", None
    server = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"sm_bench_{uuid.uuid4().hex[:10]}"
    admin_url = make_url(server).set(drivername="postgresql+psycopg")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return admin_url.set(database=name).render_as_string(hide_password=False), name


def _drop(name: str) -> None:
    server = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    admin = create_engine(make_url(server).set(drivername="postgresql+psycopg"),
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def main() -> int:
    """Run the measurement and print one Markdown table row."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--urls", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--changing", action="store_true")
    parser.add_argument("--replicas", type=int, default=1)
    # Far below what the daemon keeps up with (the default), or a fixed demand the fleet can
    # meet (targets / interval checks a second): then the CPU per check is what a check costs
    # at that load, not at saturation of a shared machine.
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--stagger", type=float, default=0.0)
    args = parser.parse_args()
    if args.replicas > 1 and args.database != "postgres":
        parser.error("--replicas needs --database postgres (SQLite runs one replica)")

    server, port = start_server(args.urls, args.changing)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url, pg_name = _database(args.database, folder)
        engine = db.make_engine(url)
        db.upgrade(engine)
        ports = [_free_port() for _ in range(args.replicas)]
        lines = [
            f"database_url: {url}",
            "listen: 127.0.0.1:{port}",
            f"defaults: {{interval: {args.interval}s, jitter: 0, allow_private: true}}",
            f"scheduler: {{concurrency: {args.concurrency}, per_host: {args.concurrency}}}",
            "targets:",
            *[f'  - {{name: t{i}, url: "http://127.0.0.1:{port}/t{i}.xml"}}'
              for i in range(args.targets)],
        ]
        config_text = "\n".join(lines) + "\n"
        configs = []
        for port_of in ports:  # the same targets, each replica on a port of its own
            configs.append(folder / f"bench-{port_of}.yaml")
            configs[-1].write_text(config_text.replace("{port}", str(port_of)), encoding="utf-8")
        script = Path(sys.executable).with_name("sitemap-monitor")
        daemons = []
        for config in configs:
            if daemons and args.stagger:
                time.sleep(args.stagger)  # the earlier replicas check alone meanwhile
            daemons.append(subprocess.Popen([str(script), "run", "--config", str(config)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def snapshot_count() -> int:
            with engine.connect() as conn:
                return int(conn.execute(select(func.count()).select_from(snapshots)).scalar_one())

        def cpu() -> float:
            return sum(_cpu_seconds(d.pid) for d in daemons)

        backends: dict[int, float] = {}  # each backend's CPU when last seen

        def sample_backends() -> None:
            if pg_name is None:
                return
            with engine.connect() as conn:
                pids = conn.execute(text(
                    "SELECT pid FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )).scalars().all()
            for pid in pids:
                # One that ended since keeps its CPU up to the last sample.
                with contextlib.suppress(OSError):
                    backends[pid] = _cpu_seconds(pid)

        def wait_for(count: int) -> float:
            began = time.monotonic()
            while snapshot_count() < count:
                sample_backends()
                for daemon in daemons:
                    if daemon.poll() is not None:
                        raise SystemExit(f"a daemon exited with {daemon.returncode}")
                time.sleep(0.2)
            return time.monotonic() - began

        try:
            first_round = wait_for(args.targets)
            first_cpu, first_backends = cpu(), sum(backends.values())
            second_round = wait_for(snapshot_count() + args.targets)
            claims0 = _claims(ports)
            checks0 = [_checks(p) for p in ports]
            n0, cpu0, t0 = snapshot_count(), cpu(), time.monotonic()
            time.sleep(args.seconds)
            n1, cpu1, t1 = snapshot_count(), cpu(), time.monotonic()
            claims1 = _claims(ports)
            made = [_checks(p) - c for p, c in zip(ports, checks0, strict=True)]
            memory = [_memory_mib(d.pid) for d in daemons]
        finally:
            for daemon in daemons:
                daemon.terminate()
            codes = [daemon.wait(60) for daemon in daemons]
            engine.dispose()
            server.terminate()
            if pg_name:
                _drop(pg_name)
    rate = (n1 - n0) / (t1 - t0)
    cores = (cpu1 - cpu0) / (t1 - t0)
    rss = max(m[0] for m in memory)
    peak = max(m[1] for m in memory)
    kind = "changing" if args.changing else "unchanged (304)"
    # Claim statements per check, those that found nothing due among them (a version of the
    # daemon without sitemap_monitor_claims_total shows "-").
    claims = "-"
    if claims0 is not None and claims1 is not None:
        done = n1 - n0
        claims = (f"{(claims1[0] - claims0[0]) / done:.2f} "
                  f"({(claims1[1] - claims0[1]) / done:.2f} empty)")
    print("| database | replicas | targets | sitemaps | concurrency | first round s "
          "| second round s | checks/s | CPU (cores) | CPU ms/check | checks/CPU-s "
          "| claims/check | shares % | RSS MiB | peak RSS MiB | first round CPU s: daemons "
          "/ PostgreSQL | exit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    server_cpu = f"{first_backends:.1f}" if pg_name else "-"
    shares = " / ".join(f"{100 * m / max(sum(made), 1):.0f}" for m in made)
    print(f"| {args.database} | {args.replicas} | {args.targets} | {args.urls} URLs, {kind} "
          f"| {args.concurrency} | {first_round:.1f} | {second_round:.1f} | {rate:.1f} "
          f"| {cores:.2f} | {1000 * cores / rate:.1f} | {rate / cores:.1f} | {claims} | {shares} "
          f"| {rss:.0f} | {peak:.0f} | {first_cpu:.1f} / {server_cpu} "
          f"| {' '.join(map(str, codes))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
