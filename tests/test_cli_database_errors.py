"""A database URL or file that cannot be used ends every command with one line and exit 2
, never a traceback: a port that is not a number, a folder this user cannot write, a
file that is not (or no longer) a SQLite database.

Each case runs the console script in a child process, as a user runs it: ``check``, ``db
upgrade`` and ``run`` (whose one line is its JSON log line).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpserver import closed_port

SCRIPT = Path(sys.executable).with_name("sitemap-monitor")
NOBODY = 65534


def sitemap_monitor(*args: str, cwd: Path, user: int | None = None
                    ) -> subprocess.CompletedProcess[str]:
    """The console script with these arguments (as ``user``, when given), its output kept."""
    env = {**os.environ, "SITEMAP_MONITOR_DATABASE_URL": "", "SITEMAP_MONITOR_CONFIG": ""}
    as_user = [] if user is None else [
        "setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return subprocess.run([*as_user, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60, check=False)


def assert_one_line(command: str, result: subprocess.CompletedProcess[str], *words: str
                    ) -> str:
    """Exit 2 and a single line on stderr, holding each of ``words``; return the line."""
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr, (command, result.stderr)
    assert result.returncode == 2, (command, result.stderr)
    assert len(lines) == 1, (command, result.stderr)
    for word in words:
        assert word in lines[0], (command, lines[0])
    return lines[0]


def daemon_config(folder: Path, database_url: str) -> Path:
    """A config for ``run`` with one target that never answers."""
    path = folder / "monitor.yaml"
    path.write_text(
        f'database_url: "{database_url}"\nlisten: 127.0.0.1:0\n'
        f'targets:\n  - {{name: t, url: "http://127.0.0.1:{closed_port()}/s.xml"}}\n',
        encoding="utf-8")
    path.chmod(0o644)
    return path


def every_command(folder: Path, database_url: str, user: int | None = None
                  ) -> dict[str, subprocess.CompletedProcess[str]]:
    """``check``, ``db upgrade`` and ``run`` on this database."""
    target = f"http://127.0.0.1:{closed_port()}/sitemap.xml"
    config = daemon_config(folder, database_url)
    return {
        "check": sitemap_monitor("check", target, "--database-url", database_url,
                                 cwd=folder, user=user),
        "db upgrade": sitemap_monitor("db", "upgrade", "--database-url", database_url,
                                      cwd=folder, user=user),
        "run": sitemap_monitor("run", "--config", str(config), cwd=folder, user=user),
    }


@pytest.mark.parametrize("url", [
    "postgresql://monitor:s3cret@db.example:fivefourthreetwo/monitor",
    "sqlite://localhost:abc/monitor.db",
    "postgresql://monitor:s3cret@db.example:99999/monitor",
])
def test_a_database_url_with_a_bad_port_is_one_line(tmp_path: Path, url: str) -> None:
    for command, result in every_command(tmp_path, url).items():
        line = assert_one_line(command, result, "database_url", "port")
        assert "s3cret" not in result.stderr + result.stdout, command
        assert "db.example" in line or "localhost" in line, command


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to this one)."""
    folder = Path(tempfile.mkdtemp(prefix="sitemap-monitor-test-"))
    folder.chmod(0o755)
    yield folder
    for sub in folder.rglob("*"):
        if sub.is_dir():
            sub.chmod(0o755)
    shutil.rmtree(folder)


def test_a_database_in_a_folder_this_user_cannot_write_is_one_line(shared_folder: Path) -> None:
    # root writes anywhere: the commands run as nobody then, as a pod's non-root user would.
    user = NOBODY if os.geteuid() == 0 else None
    if user is not None and shutil.which("setpriv") is None:
        pytest.skip("running as root, and setpriv (util-linux) is missing to run as nobody")
    folder = shared_folder / "read-only"
    folder.mkdir(mode=0o555)
    folder.chmod(0o555)
    url = f"sqlite:///{folder}/monitor.db"
    for command, result in every_command(shared_folder, url, user).items():
        assert_one_line(command, result, str(folder), "writable")
    assert list(folder.iterdir()) == []


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 64)


def _damaged_targets_table(path: Path) -> None:
    """A database at head whose first page reads but whose targets table is damaged: opening
    it finds nothing wrong, the check's first query does."""
    done = subprocess.run([str(SCRIPT), "db", "upgrade", "--database-url", f"sqlite:///{path}"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'targets'"
                            ).fetchone()[0]
    conn.close()
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xa5" * page_size)


@pytest.mark.parametrize("damage", [_garbage, _damaged_targets_table],
                         ids=["not-a-database", "damaged-table"])
def test_a_corrupted_sqlite_file_is_one_line(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "monitor.db"
    damage(path)  # type: ignore[operator]
    url = f"sqlite:///{path}"
    results = every_command(tmp_path, url)
    if damage is _damaged_targets_table:  # the schema reads: only what reads targets fails
        results = {"check": results["check"]}
    for command, result in results.items():
        assert_one_line(command, result, str(path), "SQLite database")


def test_an_unreachable_database_says_why_in_one_line(tmp_path: Path, postgres_url: str) -> None:
    """A refused port, a database that does not exist and a host that does not resolve each
    keep the driver's reason, not only the name of its exception."""
    server = postgres_url.replace("postgresql+psycopg://", "postgresql://").rsplit("/", 1)[0]
    cases = {
        f"postgresql://postgres@127.0.0.1:{closed_port()}/monitor": "refused",
        f"{server}/no_such_database_for_this_test": "does not exist",
        "postgresql://postgres@no-such-host.invalid:5432/monitor": "no-such-host.invalid",
    }
    reasons = set()
    for url, reason in cases.items():
        result = sitemap_monitor("urls", "t", "--database-url", url, cwd=tmp_path)
        lines = result.stderr.splitlines()
        assert "Traceback" not in result.stderr
        assert len(lines) == 1, result.stderr
        assert "unreachable" in lines[0]
        assert reason in lines[0].lower(), lines[0]
        assert "OperationalError" not in lines[0]
        reasons.add(lines[0].split("unreachable: ", 1)[1])
    assert len(reasons) == 3
