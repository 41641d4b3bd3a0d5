"""Fixtures of the alert tests: a recording webhook receiver and outbox databases.

The webhook receiver is a real threaded HTTP server on 127.0.0.1 (tests/httpserver.py) whose
answers a test scripts; it counts accepted deliveries per idempotency key, the way a receiver
that deduplicates would.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, Request, TestServer, closed_port
from sqlalchemy import Engine

from monitor.store.db import make_engine


@dataclass
class Receiver:
    """A webhook endpoint: scripted failures first, then 200; records what it accepted."""

    server: TestServer
    path: str = "/hook"
    script: list[Reply] = field(default_factory=list)
    accepted: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.server.route(self.path, self._answer)

    @property
    def url(self) -> str:
        """Where to post."""
        return self.server.url(self.path)

    def _answer(self, request: Request) -> Reply:
        with self.lock:
            if self.script:
                return self.script.pop(0)
            self.accepted.append(request)
        return Reply(200, b'{"ok":true}', {"Content-Type": "application/json"})

    def keys(self) -> Counter[str]:
        """Accepted deliveries per idempotency key."""
        with self.lock:
            return Counter(r.headers.get("idempotency-key", "") for r in self.accepted)

    def attempts(self) -> list[Request]:
        """Every request that reached the endpoint, accepted or not."""
        return self.server.requests_to(self.path)


class PortHook:
    """A webhook receiver on a fixed port that can be down (nothing listening), then up."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/hook"
        self.accepted: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def up(self) -> None:
        """Start listening on the port."""
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reads hook.accepted, not stderr

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hook.accepted.append({"key": self.headers.get("Idempotency-Key"),
                                      "body": json.loads(body)})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop listening: connections are refused again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
            self._server = None


@pytest.fixture
def port_hook() -> Iterator[PortHook]:
    """A webhook receiver on a free port, down until the test calls ``up()``."""
    hook = PortHook(closed_port())
    yield hook
    hook.down()


@pytest.fixture
def receiver(http_server: TestServer) -> Receiver:
    """A webhook receiver on 127.0.0.1 answering 200 unless a test scripts otherwise."""
    return Receiver(http_server)


@pytest.fixture
def sqlite_engine(tmp_path: Path, sqlite_template: Path) -> Iterator[Engine]:
    """A migrated SQLite file under tmp_path."""
    shutil.copyfile(sqlite_template, tmp_path / "outbox.db")
    engine = make_engine(f"sqlite:///{tmp_path}/outbox.db")
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_engine(migrated_postgres_url: str) -> Iterator[Engine]:
    """A migrated, uniquely named PostgreSQL database, dropped afterwards."""
    engine = make_engine(migrated_postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each outbox test once on SQLite and once on PostgreSQL."""
    name = "sqlite_engine" if request.param == "sqlite" else "postgres_engine"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]
