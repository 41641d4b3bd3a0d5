"""A real IndexNow endpoint and key files on the test HTTP server.

``Receiver`` speaks the protocol of indexnow.org at ``/indexnow``: a JSON POST of ``host``,
``key``, ``keyLocation`` and ``urlList``. It checks what a search engine checks (every URL on
``host``, at most 10,000, the key is the one it was given) and answers 200, 202, 400, 403,
422, 429 with ``Retry-After``, or stalls, as the test sets ``answer``. Every request it
accepted (200 or 202) is kept in ``accepted``. Key files are served at ``/KEY.txt`` for the
hosts (``Host`` header) in ``key_hosts``, with ``key_body`` as their content.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from httpserver import Reply, Request, TestServer

KEY = "0123456789abcdef-test"


@dataclass
class Receiver:
    """The endpoint and the key files; ``answer`` is a status, or "stall"."""

    server: TestServer
    key: str = KEY
    answer: int | str = 200
    retry_after: str = "120"
    stall: float = 5.0
    key_hosts: set[str] = field(default_factory=lambda: {"127.0.0.1"})
    key_body: bytes | None = None
    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    key_fetches: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.server.route("/indexnow", self._submit)
        self.server.route(f"/{self.key}.txt", self._key_file)

    @property
    def endpoint(self) -> str:
        """The endpoint URL to configure."""
        return self.server.url("/indexnow")

    def urls(self) -> list[str]:
        """Every URL accepted, in the order received."""
        return [url for body in self.accepted for url in body["urlList"]]

    def _key_file(self, request: Request) -> Reply:
        host = request.headers.get("host", "").rsplit(":", 1)[0]
        with self._lock:
            self.key_fetches.append(host)
        if host not in self.key_hosts:
            return Reply(404, b"not found\n")
        return Reply(200, self.key.encode() if self.key_body is None else self.key_body,
                     headers={"Content-Type": "text/plain"})

    def _submit(self, request: Request) -> Reply:
        if request.method != "POST":
            return Reply(405)
        try:
            body = json.loads(request.body)
            urls = body["urlList"]
            host = body["host"]
            assert isinstance(urls, list)
            assert isinstance(host, str)
        except (ValueError, KeyError, AssertionError):
            return self._refuse(400, {}, b"bad request")
        if body.get("key") != self.key:
            return self._refuse(403, body, b"key not valid")
        if len(urls) > 10_000 or any(urlsplit(u).hostname != host for u in urls):
            return self._refuse(422, body, b"URLs do not belong to the host")
        if not str(body.get("keyLocation", "")).endswith(f"/{self.key}.txt"):
            return self._refuse(422, body, b"keyLocation does not match the key")
        answer = self.answer
        if answer == "stall":
            return Reply(200, b"", delay=self.stall)
        assert isinstance(answer, int)
        if answer in (200, 202):
            with self._lock:
                self.accepted.append(body)
            return Reply(answer, b"")
        headers = {"Retry-After": self.retry_after} if answer == 429 else {}
        return self._refuse(answer, body, b"refused by the test", headers)

    def _refuse(self, status: int, body: dict[str, Any], text: bytes,
                headers: dict[str, str] | None = None) -> Reply:
        with self._lock:
            self.refused.append((status, body))
        return Reply(status, text, headers=headers or {})
