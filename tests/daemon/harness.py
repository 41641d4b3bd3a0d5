"""``sitemap-monitor run`` as a subprocess: its JSON log lines, its HTTP port, its signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from httpserver import Reply, Request, TestServer
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

Line = dict[str, Any]
T = TypeVar("T")


def sitemap(urls: dict[str, str | None]) -> bytes:
    """A urlset of these loc -> lastmod (None: no lastmod)."""
    rows = "".join(
        f"<url><loc>{loc}</loc>{'' if lastmod is None else f'<lastmod>{lastmod}</lastmod>'}</url>"
        for loc, lastmod in urls.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>'
    ).encode()


def cli_database_url(engine: Engine) -> str:
    """The database URL of ``engine`` as a daemon's config takes it (its password kept, the
    driver left to the daemon)."""
    return engine.url.render_as_string(hide_password=False).replace(
        "postgresql+psycopg://", "postgresql://")


class Inbox:
    """A webhook receiver on a test server: every JSON message posted to its path, in order."""

    def __init__(self, server: TestServer, path: str = "/hook") -> None:
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []
        self.url = server.url(path)
        server.route(path, self._take)

    def _take(self, request: Request) -> Reply:
        with self._lock:
            self._messages.append(json.loads(request.body))
        return Reply(200, b"{}")

    def messages(self, rule: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """The messages received so far, of that alert rule and state when given."""
        with self._lock:
            return [m for m in self._messages
                    if rule in (None, m["rule"]) and state in (None, m["state"])]


def write_config(path: Path, database_url: str, targets: list[tuple[str, str]], *,
                 interval: str = "1s", extra: str = "") -> Path:
    """A daemon config listening on a free port of 127.0.0.1."""
    lines = [
        f"database_url: {database_url}",
        "listen: 127.0.0.1:0",
        f"defaults: {{interval: {interval}, jitter: 0, timeout: 20s}}",
        "targets:" if targets else "targets: []",
        *[f'  - {{name: "{name}", url: "{url}"}}' for name, url in targets],
    ]
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def command() -> list[str]:
    """The console script of this venv."""
    script = Path(sys.executable).with_name("sitemap-monitor")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "monitor.cli.commands"]


class Daemon:
    """One running daemon; every stderr line is kept (parsed when it is JSON)."""

    def __init__(self, config: Path, *, env: dict[str, str] | None = None,
                 group: bool = False) -> None:
        self.config = config
        self.lines: list[Line] = []
        self.raw: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [*command(), "run", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "SITEMAP_MONITOR_DATABASE_URL": "", **(env or {})},
            start_new_session=group,  # a process group of its own, as a shell gives a job
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for text in self.proc.stderr:
            with self._changed:
                self.raw.append(text)
                try:
                    self.lines.append(json.loads(text))
                except ValueError:
                    self.lines.append({"event": text.strip(), "raw": True})
                self._changed.notify_all()

    def _until(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        """The first non-None answer of ``probe``, asked again at each new line."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = probe()
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no {what} within {timeout}s; rc={self.proc.poll()}; "
                        f"log:\n{''.join(self.raw[-30:])}")
                self._changed.wait(min(left, 0.2))

    def until(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        """The first non-None answer of ``probe``, asked at each new log line (or 0.2 s)."""
        return self._until(probe, timeout, what)

    def wait_for(self, predicate: Callable[[Line], bool], timeout: float = 60.0,
                 after: int = 0) -> Line:
        """The first line (from index ``after``) that satisfies ``predicate``."""
        return self._until(
            lambda: next((line for line in self.lines[after:] if predicate(line)), None),
            timeout, "such line")

    def more_checks(self, target: str, count: int, timeout: float = 60.0) -> list[Line]:
        """The next ``count`` summary lines of the target from now, once they are all there."""
        seen = len(self.checks(target))

        def probe() -> list[Line] | None:
            lines = self.checks(target)[seen:seen + count]
            return lines if len(lines) == count else None

        return self._until(probe, timeout, f"{count} more checks of {target}")

    def event(self, name: str, timeout: float = 60.0, after: int = 0, **fields: Any) -> Line:
        """The first line with this event and these fields."""
        return self.wait_for(
            lambda line: line.get("event") == name
            and all(line.get(k) == v for k, v in fields.items()),
            timeout, after)

    def started(self, timeout: float = 60.0) -> Line:
        """Wait for the start line; remember the HTTP base URL."""
        line = self.event("started", timeout)
        self.base = f"http://{line['listen']}"
        return line

    def checks(self, target: str | None = None) -> list[Line]:
        """Every summary line so far (of one target)."""
        with self._changed:
            return [line for line in self.lines if line.get("event") == "check"
                    and (target is None or line.get("target") == target)]

    def get(self, path: str) -> httpx.Response:
        """GET on the daemon's HTTP port."""
        return httpx.get(self.base + path, timeout=10)

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample from /metrics."""
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def outbox_drained(self, timeout: float = 60.0) -> None:
        """Wait until every notification written so far has been delivered or given up
        (the ``alerts_pending`` gauge, counted at each scrape, is 0)."""
        deadline = time.monotonic() + timeout
        while self.metric("sitemap_monitor_alerts_pending") != 0:
            assert time.monotonic() < deadline, f"notifications still pending after {timeout}s"
            time.sleep(0.1)

    def signal(self, signum: signal.Signals) -> None:
        """Send a signal."""
        self.proc.send_signal(signum)

    def signal_group(self, signum: signal.Signals) -> None:
        """Send a signal to the daemon and every process it started (``group=True``), as a
        terminal's Ctrl-C or a service manager's stop does."""
        os.killpg(self.proc.pid, signum)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the exit; return the exit code."""
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def stop(self) -> None:
        """SIGTERM if still running (cleanup)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
