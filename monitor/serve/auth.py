"""Basic auth on the daemon's port, as Prometheus' exporter-toolkit does it.

``BasicAuth`` sits behind the admission gate (``api.Admission``), so at most its bounded
number of requests are being checked at once. A request to a guarded path needs
``Authorization: Basic`` with a user of ``web.basic_auth_users`` and the password its bcrypt
hash was made from; otherwise a JSON 401 with ``WWW-Authenticate``. bcrypt is slow on purpose
(about 0.2 s at cost 12), so it runs in a thread, and a verdict is cached under a SHA-256 of
the user, the password and the hash (exporter-toolkit caches the same way): a scrape every 15
seconds costs one bcrypt, not one a scrape. An unknown user is checked against a dummy hash, so
the answer takes as long as for a known one. ``/healthz`` and ``/readyz`` stay open (probes
carry no credentials); ``/metrics`` is guarded when ``protect_metrics`` is set.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping

import bcrypt
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BasicAuth", "hash_password"]

CACHE_SIZE = 1024
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
_BODY = json.dumps({"error": {"status": 401, "message": "authentication required"}}).encode()


def hash_password(password: str, rounds: int = 12) -> str:
    """A bcrypt hash for ``web.basic_auth_users``."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


class BasicAuth:
    """Guard every path but the probes (and ``/metrics`` unless ``protect_metrics``)."""

    def __init__(self, app: ASGIApp, users: Mapping[str, str], *,
                 protect_metrics: bool = False) -> None:
        self._app = app
        self._users = {name: hashed.encode() for name, hashed in users.items()}
        # "$2b$12$...": the cost of the first user's hash, for the unknown users' dummy
        self._rounds = int(next(iter(users.values()), "$2b$12$").split("$")[2])
        self._open = OPEN_PATHS if protect_metrics else OPEN_PATHS | {"/metrics"}
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or not self._users or scope.get("path", "") in self._open
                or await self._allowed(scope)):
            await self._app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_BODY)).encode()),
            (b"www-authenticate", b'Basic realm="sitemap-monitor", charset="UTF-8"'),
        ]})
        await send({"type": "http.response.body", "body": _BODY})

    async def _allowed(self, scope: Scope) -> bool:
        header = next((value for key, value in scope.get("headers", [])
                       if key == b"authorization"), None)
        if header is None or header[:6].lower() != b"basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).partition(
                b":")
            name = user.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hashed = self._users.get(name)
        key = hashlib.sha256(b"\0".join((user, password, hashed or b""))).digest()
        known = self._verdicts.get(key)
        if known is not None:
            self._verdicts.move_to_end(key)
            return known
        verdict = await asyncio.to_thread(_check, password, hashed, self._rounds)
        self._verdicts[key] = verdict
        if len(self._verdicts) > CACHE_SIZE:
            self._verdicts.popitem(last=False)
        return verdict


@functools.cache
def _dummy(rounds: int) -> bytes:
    """A hash to check an unknown user's password against, of the configured users' cost;
    made once, when first needed (not at every start of a daemon)."""
    return bcrypt.hashpw(b"sitemap-monitor", bcrypt.gensalt(rounds=rounds))


def _check(password: bytes, hashed: bytes | None, rounds: int) -> bool:
    if hashed is None:
        bcrypt.checkpw(password, _dummy(rounds))  # as long as for a known user
        return False
    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # a hash bcrypt cannot read (the config checks their shape)
        return False
