"""Every answer the daemon receives is read to a bound: a webhook and an IndexNow endpoint
that answer 500 with a 1 GiB body (generated as it is sent, never held by the test) cost the
running daemon a few KiB, a closed connection and one line in its log, and the delivery is
recorded as one to retry.

The daemon's resident memory is read from /proc while it runs; a daemon that reads the whole
answer is stopped as soon as it passes the ceiling, so the test fails without taking the
machine's memory with it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import Daemon, Line, sitemap, write_config
from httpserver import Reply, TestServer, repeat
from indexnow_receiver import KEY

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads the daemon's memory from /proc")

GIB_OF_X = repeat(b"x" * 65536, 16384)  # 1 GiB, one 64 KiB piece at a time
CEILING_MIB = 20.0


def _vm(pid: int, field: str) -> float:
    """A memory figure of a running process (VmRSS, VmHWM) in MiB."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    found = re.search(rf"^{field}:\s*(\d+) kB", status, re.MULTILINE)
    assert found is not None, status
    return int(found[1]) / 1024


def _within_ceiling(daemon: Daemon, line: dict[str, str], base: float) -> Line:
    """The first log line with ``line``'s fields, while the daemon's peak stays within
    ``CEILING_MIB`` of ``base`` (past it, the daemon is killed and the test fails)."""
    pid = daemon.proc.pid

    def probe() -> Line | None:
        peak = _vm(pid, "VmHWM")
        if peak - base > 10 * CEILING_MIB:
            daemon.proc.kill()
            raise AssertionError(f"the daemon's peak grew by {peak - base:.0f} MiB reading "
                                 "one answer; killed")
        return next((found for found in daemon.lines
                     if all(found.get(k) == v for k, v in line.items())), None)

    return daemon.until(probe, 60, f"a line {line}")


def _settled(daemon: Daemon, target: str) -> float:
    """The daemon's peak in MiB once it has run two checks of ``target`` (its working set)."""
    daemon.started()
    daemon.more_checks(target, 2, timeout=60)
    return _vm(daemon.proc.pid, "VmHWM")


def test_a_webhook_answering_1_gib_costs_a_few_kib_and_is_retried(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    http_server.route("/hook", Reply(500, body=GIB_OF_X, headers={"Content-Type": "text/plain"}))
    config = write_config(
        tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db", [("shop", http_server.url("/s.xml"))],
        extra="alerts:\n  channels:\n"
              f'    - {{name: hook, type: webhook, url: "{http_server.url("/hook")}"}}\n'
              "  delivery: {initial_backoff: 30s}\n"
              "  rules:\n    - {name: down, when: check_failed, channels: [hook]}\n")
    daemon = Daemon(config)
    daemons.append(daemon)
    base = _settled(daemon, "shop")
    http_server.route("/s.xml", Reply(500))  # the check fails: the rule fires
    retried = _within_ceiling(daemon, {"event": "notification delivery failed; will retry"},
                              base)
    peak = _vm(daemon.proc.pid, "VmHWM")
    print(f"\n[webhook answering 1 GiB] daemon peak {base:.1f} -> {peak:.1f} MiB")
    assert peak - base <= CEILING_MIB, f"peak grew by {peak - base:.1f} MiB"
    error = retried["error"]
    assert "\n" not in error
    assert error.startswith("channel hook (http://127.0.0.1:")
    assert "HTTP 500: xxxx" in error
    assert error.endswith("(answer cut at 4 KiB)")
    assert len(error) < 400
    cut = [line for line in daemon.lines if line.get("event", "").startswith("answer cut")]
    assert len(cut) == 1
    assert cut[0]["status"] == 500
    assert cut[0]["kept_bytes"] == 4096
    assert daemon.metric("sitemap_monitor_alerts_total", channel="hook", outcome="retry") == 1


def test_an_indexnow_endpoint_answering_1_gib_costs_a_few_kib_and_is_retried(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    page = http_server.url("/p")
    http_server.route("/s.xml", Reply(body=sitemap({f"{page}1": None})))
    http_server.route(f"/{KEY}.txt", Reply(body=KEY.encode()))
    http_server.route("/indexnow", Reply(500, body=GIB_OF_X))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\n"
        "listen: 127.0.0.1:0\n"
        "defaults:\n  interval: 1s\n  jitter: 0\n  timeout: 20s\n"
        f"  indexnow: {{enabled: true, key: {KEY}, "
        f"endpoint: '{http_server.url('/indexnow')}'}}\n"
        f"targets:\n  - {{name: shop, url: '{http_server.url('/s.xml')}'}}\n",
        encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    base = _settled(daemon, "shop")
    http_server.route("/s.xml", Reply(body=sitemap({f"{page}1": None, f"{page}2": None})))
    retried = _within_ceiling(
        daemon, {"event": "indexnow submission not delivered; will retry"}, base)
    peak = _vm(daemon.proc.pid, "VmHWM")
    print(f"\n[IndexNow endpoint answering 1 GiB] daemon peak {base:.1f} -> {peak:.1f} MiB")
    assert peak - base <= CEILING_MIB, f"peak grew by {peak - base:.1f} MiB"
    error = retried["error"]
    assert "\n" not in error
    assert error.startswith("HTTP 500: xxxx")
    assert error.endswith("(the answer was cut at its bound)")
    assert len(error) < 400
    cut = [line for line in daemon.lines if line.get("event", "").startswith("answer cut")]
    assert [(c["url"], c["status"]) for c in cut] == [(http_server.url("/indexnow"), 500)]
    assert daemon.metric("sitemap_monitor_indexnow_urls_total", target="shop",
                         outcome="retry") == 1
