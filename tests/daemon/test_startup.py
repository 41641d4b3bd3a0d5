"""A start-up that a SIGKILL can interrupt anywhere: the next start opens the database.

In Kubernetes an OOM kill or a node drain can end a pod's first start while it builds or
migrates its embedded SQLite database. Each test kills ``sitemap-monitor run`` at moments spread
over a whole start, then starts it again on the same file: it must come up and answer /healthz.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from harness import Daemon, write_config
from httpserver import Reply, TestServer, closed_port

from monitor.store import db

KILLS = 12


def _start_seconds(config: Path) -> float:
    """How long a start takes, up to its 'started' line (measured on a database of its own)."""
    began = time.monotonic()
    daemon = Daemon(config)
    try:
        daemon.started(timeout=30)
        return time.monotonic() - began
    finally:
        daemon.stop()


def _kill_then_restart(config: Path, delay: float) -> str:
    """SIGKILL a start after ``delay`` seconds; start again; '' if it comes up, else its log."""
    first = Daemon(config)
    time.sleep(delay)
    first.proc.send_signal(signal.SIGKILL)
    first.wait(10)
    first.stop()
    again = Daemon(config)
    try:
        try:
            again.started(timeout=30)
        except AssertionError:
            return "".join(again.raw[-5:])
        response = again.get("/healthz")
        return "" if response.status_code == 200 else f"/healthz {response.status_code}"
    finally:
        again.stop()


@pytest.mark.parametrize("revision", [None, "0001"], ids=["empty", "from-0001"])
def test_a_sigkill_anywhere_in_a_start_leaves_a_database_the_next_start_opens(
    http_server: TestServer, tmp_path: Path, revision: str | None
) -> None:
    http_server.route("/s.xml", Reply(body=b"<urlset/>"))
    target = [("t", f"http://127.0.0.1:{closed_port()}/s.xml")]  # nothing to fetch: a start
    probe = write_config(tmp_path / "probe.yaml", f"sqlite:///{tmp_path}/probe.db", target)
    whole = _start_seconds(probe)
    failures = []
    for i in range(KILLS):
        delay = whole * i / (KILLS - 1)
        path = tmp_path / f"m{i}.db"
        if revision is not None:  # a database an older release made
            engine = db.make_engine(f"sqlite:///{path}")
            _upgrade_to(engine, revision)
            engine.dispose()
        config = write_config(tmp_path / f"c{i}.yaml", f"sqlite:///{path}", target)
        problem = _kill_then_restart(config, delay)
        if problem:
            failures.append(f"killed at {delay:.2f}s of {whole:.2f}s: {problem.strip()}")
    assert failures == []


def _upgrade_to(engine: object, revision: str) -> None:
    from alembic import command

    command.upgrade(db._alembic_config(engine), revision)  # type: ignore[arg-type]


def test_a_short_interval_on_a_remote_site_is_logged_as_a_warning(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    """The same warning as ``config check``'s, at start: the daemon runs it all the same."""
    path = write_config(
        tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
        [("remote", "http://10.255.255.1/sitemap.xml"),  # refused by the address policy
         ("local", "http://127.0.0.1:9/sitemap.xml")], interval="30s")
    daemon = Daemon(path)
    daemons.append(daemon)
    daemon.started()
    warned = [line for line in daemon.lines if line.get("event") == "configuration warning"]
    assert [line["warning"] for line in warned] == [
        "targets: remote: an interval of 30s checks 10.255.255.1 more than once a minute"]
    assert warned[0]["level"] == "warning"
