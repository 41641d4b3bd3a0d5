"""What every benchmark part shares: the sitemap server process and throwaway databases."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def child_env(**extra: str) -> dict[str, str]:
    """The environment of measured processes: no proxies, no stray monitor settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and not k.startswith("SITEMAP_MONITOR_")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


@dataclass
class Server:
    """The sitemap server, running in its own process."""

    proc: subprocess.Popen[bytes]
    port: int

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def variant(self, name: str) -> None:
        """Switch what /w1/ serves: ``base`` (W1) or ``w1prime`` (W1')."""
        request = urllib.request.Request(f"{self.origin}/__bench/variant/{name}", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    def stats(self) -> dict[str, int]:
        """Requests served so far, by outcome, and bytes sent."""
        import json

        with urllib.request.urlopen(f"{self.origin}/__bench/stats", timeout=10) as response:
            data: dict[str, int] = json.loads(response.read())
        return data


@contextlib.contextmanager
def serve(data_dir: Path, *prefixes: str) -> Iterator[Server]:
    """Start server.py on 127.0.0.1 for the given workload folders; stop it on exit."""
    with serve_script("server.py", str(data_dir), *prefixes) as server:
        yield server


@contextlib.contextmanager
def serve_script(script: str, *args: str) -> Iterator[Server]:
    """Start a server script of this folder, which prints its port and serves until its
    stdin closes; stop it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env(),
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        raise RuntimeError(f"{script} did not start")
    try:
        yield Server(proc, int(line))
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def commit() -> str:
    """``git describe`` of the checkout measured (``-dirty`` with uncommitted changes)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True, text=True, check=False,
    ).stdout.strip() or "?"  # fmt: skip


@dataclass
class Database:
    """A throwaway database: its URL and what kind it is."""

    kind: str
    url: str

    def count(self, sql: str) -> int:
        """Run one scalar query (snapshot counts while the daemon runs)."""
        if self.kind == "sqlite":
            import sqlite3

            path = self.url.removeprefix("sqlite:///")
            with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
                return int(conn.execute(sql).fetchone()[0])
        import psycopg

        with psycopg.connect(_libpq(self.url), autocommit=True) as conn:
            row: Any = conn.execute(sql).fetchone()
            return int(row[0])


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@contextlib.contextmanager
def database(kind: str) -> Iterator[Database]:
    """A fresh, empty database: a SQLite file in a temp dir, or a new PostgreSQL database."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="sm-bench-") as folder:
            yield Database("sqlite", f"sqlite:///{folder}/bench.db")
        return
    import psycopg
    from psycopg import sql
    from sqlalchemy import make_url

    server = make_url(os.environ.get("TEST_DATABASE_URL") or DEFAULT_PG)
    name = f"sm_bench_{secrets.token_hex(4)}"
    admin = _libpq(server.set(drivername="postgresql").render_as_string(hide_password=False))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = server.set(drivername="postgresql", database=name)
    try:
        yield Database("postgres", url.render_as_string(hide_password=False))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def monitor_cli() -> str:
    """The sitemap-monitor console script of the benchmark venv (the project, editable)."""
    script = BIN / "sitemap-monitor"
    return str(script if script.exists() else ROOT / ".venv" / "bin" / "sitemap-monitor")


def monitor_cli_works() -> bool:
    """Whether ``sitemap-monitor check --help`` runs yet (the CLI is written in parallel)."""
    done = subprocess.run(
        [monitor_cli(), "check", "--help"], capture_output=True, env=child_env(), check=False
    )
    return done.returncode == 0


def upgrade(db: Database) -> None:
    """Bring the empty database to the newest schema, untimed (the CLI may also do it itself)."""
    done = subprocess.run(
        [monitor_cli(), "db", "upgrade"],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(SITEMAP_MONITOR_DATABASE_URL=db.url),
    )
    if done.returncode != 0:
        print(f"   (db upgrade exit {done.returncode}: {done.stderr.strip()[-300:]})")
