"""``/readyz`` proves a write and has its own timeout, on a real daemon: a locked or
full SQLite file, and a PostgreSQL server of the test's own that is frozen (SIGSTOP)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Daemon, write_config

from monitor.store import db


def _ready(daemon: Daemon) -> tuple[int, float, str]:
    """GET /readyz: its status, how long it took, and its error (if any)."""
    started = time.monotonic()
    try:
        answer = httpx.get(daemon.base + "/readyz", timeout=15)
    except httpx.TimeoutException:
        return 0, time.monotonic() - started, "no answer within 15 s"
    seconds = time.monotonic() - started
    return answer.status_code, seconds, answer.json().get("error", "")


@contextlib.contextmanager
def _daemon(config: Path) -> Iterator[Daemon]:
    daemon = Daemon(config)
    try:
        daemon.started(timeout=30)
        yield daemon
    finally:
        daemon.stop()


def _sqlite_daemon_config(folder: Path) -> Path:
    url = f"sqlite:///{folder}/m.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    return write_config(folder / "c.yaml", url, [])


def test_readyz_503_while_another_writer_holds_the_sqlite_lock(tmp_path: Path) -> None:
    config = _sqlite_daemon_config(tmp_path)
    with _daemon(config) as daemon:
        assert _ready(daemon)[0] == 200
        holder = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the write lock, held by another process's view
        try:
            status, seconds, error = _ready(daemon)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        print(f"\nreadyz with the SQLite file locked: {status} in {seconds:.2f} s ({error})")
        assert status == 503
        assert "locked" in error
        assert seconds < 3
        # /readyz is open to anyone: it says what is wrong, the log says where.
        assert str(tmp_path) not in error
        assert "m.db" not in error
        logged = daemon.event("database not ready")
        assert str(tmp_path / "m.db") in logged["error"]
        assert _ready(daemon)[0] == 200


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of its own, mounted for one test (we run as root), else skip."""
    folder = tmp_path / "fs"
    folder.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)],
                           capture_output=True, text=True, check=False)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_readyz_503_while_the_sqlite_file_system_is_full(small_tmpfs: Path) -> None:
    config = _sqlite_daemon_config(small_tmpfs)
    with _daemon(config) as daemon:
        assert _ready(daemon)[0] == 200
        filler = small_tmpfs / "filler"
        with filler.open("wb") as out, contextlib.suppress(OSError):  # until ENOSPC
            while True:
                out.write(b"\0" * 2**16)
                out.flush()
        assert shutil.disk_usage(small_tmpfs).free < 2**16
        status, seconds, error = _ready(daemon)
        print(f"\nreadyz with the SQLite file system full: {status} in {seconds:.2f} s "
              f"({error})")
        assert status == 503
        assert "full" in error
        assert str(small_tmpfs) not in error
        filler.unlink()
        assert _ready(daemon)[0] == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree(pid: int) -> list[int]:
    """A process and every descendant of it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


@pytest.fixture
def own_postgres() -> Iterator[tuple[str, int]]:
    """A PostgreSQL server of this test's own (initdb in a temp folder, its own port):
    its URL and its postmaster's pid. Never the machine's shared server."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no initdb/pg_ctl on PATH")
    # Not under tmp_path: pytest's folders are closed to the postgres user.
    home = Path(tempfile.mkdtemp(prefix="sm-readyz-pg-"))
    data = home / "data"
    data.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(home, "postgres")
        shutil.chown(data, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, initdb, "-D", str(data), "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True)
    port = _free_port()
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(home / "pg.log"), "-w",
                    "-o", f"-p {port} -k {home} -c listen_addresses=127.0.0.1", "start"],
                   check=True, capture_output=True)
    pid = int((data / "postmaster.pid").read_text().split()[0])
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", pid
    finally:
        for process in _tree(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGCONT)
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                       check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_readyz_answers_within_its_timeout_while_postgres_is_frozen(
    tmp_path: Path, own_postgres: tuple[str, int]
) -> None:
    url, postmaster = own_postgres
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    config = write_config(tmp_path / "c.yaml", url, [])
    with _daemon(config) as daemon:
        assert _ready(daemon)[0] == 200
        frozen = _tree(postmaster)
        for process in frozen:
            os.kill(process, signal.SIGSTOP)
        try:
            answers = [_ready(daemon) for _ in range(3)]
        finally:
            for process in frozen:
                os.kill(process, signal.SIGCONT)
        print(f"\nreadyz while PostgreSQL is frozen ({len(frozen)} processes stopped): "
              + ", ".join(f"{status} in {seconds:.2f} s" for status, seconds, _ in answers))
        for status, seconds, error in answers:
            assert status == 503, error
            assert seconds < 3
            assert "did not answer" in error
            assert "127.0.0.1" not in error
        deadline = time.monotonic() + 20
        while _ready(daemon)[0] != 200:  # thawed, it is ready again
            assert time.monotonic() < deadline, "not ready again after the thaw"
            time.sleep(0.2)
