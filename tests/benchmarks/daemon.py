"""W2 with the daemon: 1,000 targets of 1,000 URLs, ``sitemap-monitor run`` as a subprocess.

The targets' interval is short (1 s, no jitter) so that, once every target has had its first
check, the scheduler is never idle: 1,000 further snapshots then take exactly as long as one full
round of re-checks of the 1,000 unchanged targets takes at the configured concurrency.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import harness
import measure
import workloads
from harness import Database, child_env, database, monitor_cli, serve

FIRST_ROUND_TIMEOUT = 900.0
ROUND_TIMEOUT = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _config(
    folder: Path, origin: str, db: Database, concurrency: int, listen: int, interval: str
) -> Path:
    lines = [
        f"database_url: {db.url}",
        f"listen: 127.0.0.1:{listen}",
        f"defaults: {{interval: {interval}, jitter: 0%}}",
        # Every benchmark target is on 127.0.0.1: the per-host limit would otherwise be the
        # bottleneck, which no real fleet of 1,000 sites has.
        f"scheduler: {{concurrency: {concurrency}, per_host: {concurrency}}}",
        "targets:",
    ]
    lines += [
        f"  - {{name: t{t:04d}, url: {origin}/w2/t{t:04d}/sitemap.xml}}"
        for t in range(1, workloads.W2_TARGETS + 1)
    ]
    path = folder / "w2.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _metrics_checks(listen: int) -> float | None:
    """Sum of sitemap_monitor_checks_total from /metrics, or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{listen}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sitemap_monitor_checks_total{")
    )


def _one(
    server: harness.Server, db: Database, concurrency: int, interval: str, profile: bool
) -> dict[str, Any]:
    harness.upgrade(db)
    out: dict[str, Any] = {"database": db.kind, "concurrency": concurrency, "interval": interval}
    targets = workloads.W2_TARGETS
    with tempfile.TemporaryDirectory(prefix="sm-bench-w2-") as folder:
        listen = _free_port()
        config = _config(Path(folder), server.origin, db, concurrency, listen, interval)
        log = Path(folder) / "daemon.log"
        with log.open("wb") as sink:
            started = time.perf_counter()
            proc = subprocess.Popen(
                [monitor_cli(), "run", "--config", str(config)],
                stdout=sink,
                stderr=sink,
                env=child_env(),
            )
            try:
                out.update(_watch(proc, db, server, listen, targets, started, profile))
            finally:
                out.update(_stop(proc))
        out["log_tail"] = log.read_text(errors="replace")[-1500:]
    return out


def _stop(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """SIGTERM the daemon and reap it: its exit code, peak RSS (before the signal) and CPU."""
    if proc.returncode is not None:
        # It exited on its own and _watch's poll() reaped it: its rusage is gone with it.
        return {"exit_code": proc.returncode}
    out: dict[str, Any] = {}
    # Its own high-water RSS, read while it lives: wait4's ru_maxrss starts at this harness's
    # RSS when it forked (measure.run says why).
    peak_kb = measure.hwm_kb(proc.pid)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    pid = 0
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.1)
    if not pid:
        proc.kill()
        pid, status, usage = os.wait4(proc.pid, 0)
        out["note"] = "daemon did not stop within 60 s of SIGTERM"
    proc.returncode = os.waitstatus_to_exitcode(status)
    out["exit_code"] = proc.returncode
    out["peak_rss_mb"] = peak_kb / 1024
    out["cpu_total"] = usage.ru_utime + usage.ru_stime
    return out


def _watch(
    proc: Any,
    db: Database,
    server: harness.Server,
    listen: int,
    targets: int,
    started: float,
    profile: bool,
) -> dict[str, Any]:
    """Wait for the first full round, then time 1,000 more snapshots."""
    out: dict[str, Any] = {}
    deadline = started + FIRST_ROUND_TIMEOUT
    while True:
        if proc.poll() is not None:
            out["error"] = f"daemon exited with {proc.returncode} before its first round"
            return out
        try:
            seen = db.count("SELECT count(DISTINCT target_id) FROM snapshots")
        except Exception as exc:  # noqa: BLE001 - the schema may not exist for a moment
            seen, out["last_db_error"] = 0, str(exc)[:200]
        if seen >= targets:
            break
        if time.perf_counter() > deadline:
            out["error"] = (
                f"first round incomplete after {FIRST_ROUND_TIMEOUT:.0f} s: {seen} targets"
            )
            return out
        time.sleep(0.25)
    t0 = time.perf_counter()
    out["first_round_s"] = t0 - started
    n0 = db.count("SELECT count(*) FROM snapshots")
    id0 = db.count("SELECT max(id) FROM snapshots")
    cpu0 = measure.proc_cpu_seconds(proc.pid)
    served0 = server.stats()
    server_cpu0 = measure.proc_cpu_seconds(server.proc.pid)
    pg_cpu0 = measure.postgres_cpu_seconds() if db.kind == "postgres" else None
    metrics0 = _metrics_checks(listen)
    while True:
        n = db.count("SELECT count(*) FROM snapshots")
        if n >= n0 + targets:
            break
        if proc.poll() is not None or time.perf_counter() - t0 > ROUND_TIMEOUT:
            out["error"] = f"round incomplete: {n - n0} of {targets} re-checks"
            return out
        time.sleep(0.1)
    t1 = time.perf_counter()
    served1 = server.stats()
    out["server_cpu"] = measure.proc_cpu_seconds(server.proc.pid) - server_cpu0
    if pg_cpu0 is not None:
        out["db_cpu"] = measure.postgres_cpu_seconds() - pg_cpu0
    out["round_s"] = t1 - t0
    out["round_cpu"] = measure.proc_cpu_seconds(proc.pid) - cpu0
    out["checks_per_s"] = targets / (t1 - t0)
    out["outcomes"] = {
        outcome: db.count(
            f"SELECT count(*) FROM snapshots WHERE id > {id0} AND outcome = '{outcome}'"
        )
        for outcome in ("ok", "unchanged", "failed")
    }
    out["http_200"] = served1["ok"] - served0["ok"]
    out["http_304"] = served1["not_modified"] - served0["not_modified"]
    metrics1 = _metrics_checks(listen)
    if metrics0 is not None and metrics1 is not None:
        out["metrics_checks_in_round"] = metrics1 - metrics0
    if profile:
        # A further round under py-spy, so that the profiler's pauses do not touch the timing.
        spy = _spy(proc.pid, f"/tmp/sitemap-monitor-bench-profile-w2-{db.kind}.txt")
        n1 = db.count("SELECT count(*) FROM snapshots")
        limit = time.perf_counter() + ROUND_TIMEOUT
        while db.count("SELECT count(*) FROM snapshots") < n1 + targets:
            if proc.poll() is not None or time.perf_counter() > limit:
                break
            time.sleep(0.2)
        out["profile"] = _unspy(spy)
    return out


def _spy(pid: int, output: str) -> tuple[subprocess.Popen[bytes], str]:
    """Attach py-spy to the daemon for the round, sampling the thread that holds the GIL: the
    round is bound by the event loop's Python work, and a thread sleeping in C (SQLite's busy
    handler, between tries for its write lock) would otherwise count as busy."""
    argv = [str(harness.BIN / "py-spy"), "record", "--pid", str(pid), "--format", "raw",
            "--function", "--gil", "--rate", "100", "--output", output]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), output


def _unspy(spy: tuple[subprocess.Popen[bytes], str]) -> dict[str, Any]:
    import profile_check

    proc, output = spy
    proc.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        summary = profile_check.summarise(Path(output).read_text())
    except OSError as exc:
        return {"error": str(exc)}
    summary["collapsed"] = output
    return summary


def run_w2(
    data_dir: Path,
    kinds: list[str],
    *,
    concurrency: int,
    profile: bool = False,
    interval: str = "1s",
) -> dict[str, Any]:
    """Run W2 on each database; returns the figures per database."""
    manifest = workloads.ensure("W2", data_dir)
    print(
        f"W2: {manifest['targets']} targets, {manifest['urls']:,} URLs, "
        f"{int(manifest['bytes']) / 1e6:.1f} MB in {data_dir}"
    )
    results: dict[str, Any] = {}
    with serve(data_dir, "w2") as server:
        for kind in kinds:
            with database(kind) as db:
                results[kind] = _one(server, db, concurrency, interval, profile)
            r = results[kind]
            print(
                f"   daemon [{kind}]: first round {r.get('first_round_s', 0):.1f} s, "
                f"re-check round {r.get('round_s', 0):.2f} s {r.get('error', '')}",
                flush=True,
            )
    return results


def report(results: dict[str, Any]) -> list[str]:
    """The W2 table as Markdown."""
    lines = [
        "| database | concurrency | first round s | full re-check round s | checks/s "
        "| daemon CPU s in round | HTTP server CPU s | PostgreSQL CPU s | HTTP 200/304 in round "
        "| outcomes in round | daemon peak RSS MB | target <= 10 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, r in results.items():
        if "round_s" not in r:
            lines.append(
                f"| {kind} | {r['concurrency']} | {r.get('first_round_s', '-')} | "
                f"error: {r.get('error')} | | | | | | | | FAIL |"
            )
            lines.append(f"\ndaemon log tail [{kind}]:\n{r.get('log_tail', '')}")
            continue
        db_cpu = f"{r['db_cpu']:.1f}" if "db_cpu" in r else "-"
        lines.append(
            f"| {kind} | {r['concurrency']} | {r['first_round_s']:.1f} | {r['round_s']:.2f} | "
            f"{r['checks_per_s']:.0f} | {r['round_cpu']:.1f} | {r['server_cpu']:.1f} | {db_cpu} | "
            f"{r['http_200']}/{r['http_304']} | "
            f"{r['outcomes']} | {r['peak_rss_mb']:.0f} | "
            f"{'PASS' if r['round_s'] <= 10 else 'FAIL'} |"
        )
    return lines
