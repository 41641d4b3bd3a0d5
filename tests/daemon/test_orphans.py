"""Helper processes die with the daemon: after a SIGKILL of ``sitemap-monitor run``,
its forkserver, parse workers and resource tracker do not live on (about 55 MB a set,
one worker blocked for ever on its own pipe).

The daemon checks an index of big children, so that its pool of parse workers starts; the
test notes every process descended from it (from /proc), kills the daemon alone, and expects
each of them gone within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, command, sitemap, write_config
from httpserver import Reply, TestServer
from waiting import until

from monitor.read import digest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

CHILDREN = 3
URLS = 12_000  # a child: about 1.2 MB, over digest.IN_PROCESS_MAX, so digested by workers


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state, start time) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), fields[0], fields[19]


def _pool_up(pid: int) -> dict[int, str]:
    """The helper processes of ``pid`` once its pool is up (the forkserver, the resource tracker
    and two workers forked by the forkserver: four at least), else an empty dict."""
    helpers = _descendants(pid)
    return helpers if len(helpers) >= 4 else {}


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` ignores SIGINT (its ``SigIgn`` mask in /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def _descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``: pid -> its start time (to tell a reused pid)."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[1] != "Z":
            parents[int(entry)] = (stat[0], stat[2])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, started) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = started
                frontier.append(pid)
    return found


def _alive(pid: int, started: str) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] == started and stat[1] != "Z"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def test_no_helper_process_outlives_a_sigkilled_daemon(
    http_server: TestServer, tmp_path: Path
) -> None:
    children = []
    for c in range(CHILDREN):
        body = sitemap({f"http://127.0.0.1/{c}/{i:06d}/{'x' * 60}": None for i in range(URLS)})
        assert len(body) > digest.IN_PROCESS_MAX
        http_server.route(f"/c{c}.xml", Reply(body=body))
        children.append(http_server.url(f"/c{c}.xml"))
    http_server.route("/index.xml", Reply(body=(
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in children)
        + "</sitemapindex>").encode()))
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                          [("big", http_server.url("/index.xml"))], interval="2s")
    daemon = Daemon(config, env={"SITEMAP_MONITOR_PARSE_WORKERS": "2"})
    try:
        daemon.started(timeout=30)
        helpers = until(lambda: _pool_up(daemon.proc.pid), every=0.2, what="the parse workers")
        daemon.wait_for(lambda line: line.get("event") == "check", timeout=60)
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(10)
        left = helpers
        deadline = time.monotonic() + 30  # only a failure waits that long
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = {pid: started for pid, started in left.items() if _alive(pid, started)}
        leftover = {pid: f"{_command(pid)} ({_rss_mb(pid):.0f} MB)" for pid in left}
        total = sum(_rss_mb(pid) for pid in left)
        for pid in left:  # never leave them to the next test
            os.kill(pid, signal.SIGKILL)
        assert leftover == {}, f"{len(left)} of {len(helpers)} left, {total:.0f} MB"
    finally:
        daemon.stop()



def _index_of_big_children(http_server: TestServer, held: threading.Event | None = None) -> str:
    """A sitemap index whose children are digested by the worker processes; with ``held``, a
    last child whose answer waits for it, so that the check is still running until it is set."""
    children = []
    for c in range(CHILDREN):
        body = sitemap({f"http://127.0.0.1/{c}/{i:06d}/{'x' * 60}": None for i in range(URLS)})
        http_server.route(f"/c{c}.xml", Reply(body=body))
        children.append(http_server.url(f"/c{c}.xml"))
    if held is not None:
        last = sitemap({"http://127.0.0.1/held": None})

        def answer() -> Iterator[bytes]:
            yield last[:20]
            held.wait(60)
            yield last[20:]

        http_server.route("/held.xml", Reply(body=answer))
        children.append(http_server.url("/held.xml"))
    http_server.route("/index.xml", Reply(body=(
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in children)
        + "</sitemapindex>").encode()))
    return http_server.url("/index.xml")


@pytest.mark.parametrize(("signum", "group"), [
    (signal.SIGTERM, False),  # kill, Kubernetes, docker stop
    (signal.SIGTERM, True),  # a service manager that signals every process of the service
    (signal.SIGINT, True),  # Ctrl-C in a terminal: the whole foreground job
])
def test_a_stopped_daemon_stops_its_workers_cleanly(
    http_server: TestServer, tmp_path: Path, signum: signal.Signals, group: bool,
) -> None:
    """The daemon stops its parse workers itself (a SIGTERM to every process ends them at
    once, as the pool itself ends a broken one): it exits 0, leaves no helper process, and
    nothing in its stderr says that a worker was interrupted or that the pool's semaphores
    were left behind (multiprocessing's resource tracker: "leaked semaphore")."""
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                          [("big", _index_of_big_children(http_server))], interval="1s")
    daemon = Daemon(config, env={"SITEMAP_MONITOR_PARSE_WORKERS": "2"}, group=True)
    try:
        daemon.started(timeout=30)
        helpers = until(lambda: _pool_up(daemon.proc.pid), what="the parse workers")
        daemon.more_checks("big", 1)
        (daemon.signal_group if group else daemon.signal)(signum)
        assert daemon.wait(60) == 0
        daemon.event("stopped", timeout=1)
    finally:
        daemon.stop()
    # the resource tracker ends once it reads our end
    until(lambda: not {pid for pid, started in helpers.items() if _alive(pid, started)},
          within=10, what=f"the end of the helpers {helpers}")
    # What the helper processes write (not the daemon's JSON lines).
    told = [line["event"] for line in daemon.lines if line.get("raw") and any(
        word in line["event"] for word in ("leaked", "Traceback", "KeyboardInterrupt"))]
    assert told == []


def test_a_check_interrupted_by_ctrl_c_stops_its_workers_cleanly(
    http_server: TestServer, tmp_path: Path,
) -> None:
    """``sitemap-monitor check`` stopped by a Ctrl-C (SIGINT to its whole process group) while
    its parse workers are up and a child is still being read: exit 130, its workers stopped by
    it, nothing in stderr about an interrupted worker or the pool's semaphores left behind."""
    # The last child answers only once the Ctrl-C is sent: the check cannot have ended by then
    # (a check that had printed its result and was on its way out would exit 0).
    held = threading.Event()
    url = _index_of_big_children(http_server, held)
    # As a terminal starts a job: SIGINT at its default. An ignored SIGINT is inherited through
    # exec, and a process that starts with it ignored keeps ignoring it (Python too), so the
    # test does not take the disposition of whichever process runs it.
    check = subprocess.Popen(
        [*command(), "check", url, "--database-url", f"sqlite:///{tmp_path}/m.db"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "SITEMAP_MONITOR_PARSE_WORKERS": "2"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert not _ignores_sigint(check.pid)
        until(lambda: check.poll() is not None or _pool_up(check.pid), every=0.02,
              what="the parse workers")
        assert len(_descendants(check.pid)) >= 4, "the check ended before its workers were up"
        until(lambda: http_server.requests_to("/held.xml") or check.poll() is not None,
              what="the held child asked for")
        os.killpg(check.pid, signal.SIGINT)
        _, err = check.communicate(timeout=60)  # to its end: the resource tracker's too
    finally:
        held.set()
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
    assert check.returncode == 130
    told = [line for line in err.splitlines()
            if any(word in line for word in ("leaked", "Traceback", "KeyboardInterrupt"))]
    assert told == []
