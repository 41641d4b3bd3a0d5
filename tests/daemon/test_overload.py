"""The daemon under load it does not control: a flood of API connections from
another process, and a reload to 10,000 targets. Throughout, a prober asks ``/healthz`` on a
new connection every 0.2 s, as a kubelet does, and the checks keep their schedule.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer

FLOOD = Path(__file__).resolve().parent.parent / "flood.py"

# These and the port-timeout floods run one at a time: the burst test reads the kernel's count
# of dropped connections, which every socket of the machine adds to.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_flood_at_a_time")]


class Prober:
    """GET ``/healthz`` on a fresh connection every 0.2 s in a thread; keep each latency."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.latencies: list[float] = []  # a probe without an answer counts as inf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                ok = httpx.get(self.base + "/healthz", timeout=5).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.latencies.append(time.monotonic() - started if ok else float("inf"))
            self._stop.wait(0.2)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def rss_mib(pid: int) -> float:
    """The resident memory of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def stamp(line: dict[str, object]) -> float:
    """A log line's time as a Unix timestamp."""
    return datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()




def test_a_flood_of_api_connections_leaves_probes_and_checks_on_time(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    names = ["a", "b", "c"]
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/monitor.db",
                          [(n, http_server.url("/s.xml")) for n in names], interval="1s")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    for name in names:
        daemon.event("check", target=name)
    host, port = daemon.base.removeprefix("http://").rsplit(":", 1)
    time.sleep(2)
    before = rss_mib(daemon.proc.pid)

    seconds = 12.0
    with Prober(daemon.base) as prober:
        began = time.time()
        # niced: an attacker's CPU is not the daemon's to share (this machine plays both).
        flood = subprocess.Popen(
            ["nice", "-n", "10", sys.executable, str(FLOOD), host, port, "/api/v1/targets",
             "2000", str(seconds)], stdout=subprocess.PIPE, text=True)
        during = before
        while flood.poll() is None and time.time() < began + seconds + 20:
            during = max(during, rss_mib(daemon.proc.pid))
            time.sleep(0.5)
        out, _ = flood.communicate(timeout=30)
        ended = time.time()
        time.sleep(2)
    counts = json.loads(out)
    time.sleep(3)
    after = rss_mib(daemon.proc.pid)

    # A target's job fires on its 1 s grid, and waits while its check runs: its next check is
    # due at most 1 s after the last one ended. Late: how long after that it started.
    late = 0.0
    for name in names:
        runs = [(stamp(line) - float(line["duration_seconds"]), stamp(line))
                for line in daemon.checks(name)]
        runs = [(start, end) for start, end in runs if began - 1 <= start <= ended + 1]
        assert runs, f"no check of {name} during the flood"
        edges = [(began, began), *runs, (ended, ended)]
        late = max(late, *(nxt[0] - prev[1] - 1.0 for prev, nxt in pairwise(edges)))
    worst = max(prober.latencies)
    print(f"flood {counts}; /healthz: {len(prober.latencies)} probes, slowest {worst:.2f} s; "
          f"checks late by up to {late:.2f} s; RSS {before:.0f} -> {during:.0f} -> {after:.0f} MiB")
    assert counts["most_open"] >= 1500, counts
    # The worst of both comes in the first second, while 2,000 new connections each send a
    # first request the loop must read to know it is not a probe; later, under 0.3 s. The
    # bounds leave room for this 2-core machine being shared with the flood and pytest.
    # Before admission control: probes unanswered for 5 s and more, checks 13-14 s late.
    assert worst < 2.0, [round(t, 2) for t in prober.latencies]  # the chart's timeout is 3 s
    assert late < 1.5
    # The API admitted some requests and refused the rest.
    assert counts["statuses"].get("200", 0) > 0, counts
    assert counts["statuses"].get("503", 0) > 0, counts
    assert daemon.metric("sitemap_monitor_http_requests_refused_total", lane="api")
    assert after < before + 40


def test_a_reload_to_10000_targets_leaves_probes_answering(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    path = tmp_path / "c.yaml"
    url = f"sqlite:///{tmp_path}/monitor.db"
    write_config(path, url, [(f"t{i}", http_server.url("/s.xml")) for i in range(3)])
    daemon = Daemon(path)
    daemons.append(daemon)
    daemon.started()
    daemon.event("check", target="t0")
    before = rss_mib(daemon.proc.pid)
    # Checked an hour from now at the earliest: the reload itself is what is measured.
    many = [(f"t{i}", http_server.url(f"/s.xml?{i}")) for i in range(10_000)]
    write_config(path, url, many, interval="2h",
                 extra="scheduler: {lease: 60s}\n").write_text(
        path.read_text().replace("jitter: 0", "jitter: 50%"))

    mark = len(daemon.lines)
    with Prober(daemon.base) as prober:
        time.sleep(0.5)
        began = time.monotonic()
        daemon.signal(signal.SIGHUP)
        daemon.event("configuration reloaded", after=mark, timeout=240)
        took = time.monotonic() - began
        # A scrape of 10,000 targets' series (400,000 samples) while the probes go on.
        scraped = httpx.get(daemon.base + "/metrics", timeout=120).text
    during = rss_mib(daemon.proc.pid)
    worst = max(prober.latencies)
    print(f"reload of 10,000 targets: {took:.1f} s; /healthz: {len(prober.latencies)} probes, "
          f"slowest {worst:.2f} s; RSS {before:.0f} -> {during:.0f} MiB")
    assert "sitemap_monitor_config_last_reload_successful 1.0" in scraped
    assert 'sitemap_monitor_urls{target="t9999"} 0.0' in scraped
    assert worst < 1.0, [round(t, 2) for t in prober.latencies]
    assert len(daemon.get("/api/v1/targets").json()["targets"]) == 10_000


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (all sockets
    of this network namespace): each one is a client waiting 1 s, then 3 s, to try again."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    names, values = next((a.split(), b.split()) for a, b in pairwise(lines)
                         if a.startswith("TcpExt:") and b.startswith("TcpExt:"))
    return int(values[names.index("ListenOverflows")])


def test_a_burst_of_2000_connections_is_queued_not_dropped(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """2,000 clients connecting at once (a flood's first second) must wait in the kernel's
    queue, not be dropped: a dropped SYN is a kubelet probe answered after 1 s or 3 s, past the
    chart's 3 s timeout (the flood test above failed so, now and then)."""
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/monitor.db",
                          [("a", http_server.url("/s.xml"))], interval="1h")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    host, port = daemon.base.removeprefix("http://").rsplit(":", 1)
    script = (
        "import asyncio, sys\n"
        "async def one():\n"
        "    _, w = await asyncio.open_connection(sys.argv[1], int(sys.argv[2]))\n"
        "    return w\n"
        "async def main():\n"
        "    writers = await asyncio.gather(*(one() for _ in range(2000)))\n"
        "    await asyncio.sleep(1)\n"
        "    for w in writers: w.close()\n"
        "asyncio.run(main())\n")
    before = listen_overflows()
    burst = subprocess.run([sys.executable, "-c", script, host, port], capture_output=True,
                           text=True, timeout=60, check=False)
    dropped = listen_overflows() - before
    assert burst.returncode == 0, burst.stderr[-2000:]
    assert dropped == 0
    assert daemon.get("/healthz").status_code == 200


def test_healthz_answers_while_10000_targets_are_being_scheduled(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """A start with many targets makes their series in slices after the port answers:
    /healthz is up within seconds of the spawn, before the 'started' line (which comes once every
    target is scheduled), is answered promptly all along, and never says 'stopping' meanwhile.
    Before, the port opened only after all of it (12.5 s for 20,000 targets,
    tests/benchmarks/daemon_startup.py)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    targets = "".join(f"  - {{name: t{i}, url: '{http_server.url(f'/s{i}.xml')}'}}\n"
                      for i in range(10_000))
    config = tmp_path / "c.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path}/monitor.db\n"
                      f"listen: 127.0.0.1:{port}\n"
                      "defaults: {interval: 2h, jitter: 0}\ntargets:\n" + targets)
    daemon = Daemon(config)
    daemons.append(daemon)
    answers: list[tuple[int, float]] = []
    while not any(line.get("event") == "started" for line in list(daemon.lines)):
        assert daemon.proc.poll() is None, "".join(daemon.raw[-20:])
        began = time.monotonic()
        with contextlib.suppress(httpx.TransportError):
            status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code
            answers.append((status, time.monotonic() - began))
        time.sleep(0.05)
    slowest = max((seconds for _, seconds in answers), default=0.0)
    print(f"{len(answers)} answers to /healthz before the 'started' line, slowest {slowest:.2f} s")
    # Probes every 0.05 s while the start goes on: before, the one probe sent waited for its
    # end; now they are answered all along, at once, and every one says alive. (How many
    # depends on how long the start takes: with one job per target, 10,000 jobs took seconds;
    # with the due times in the database there are none to make.)
    assert answers
    assert {status for status, _ in answers} == {200}
    assert slowest < 1.0, answers
