"""Basic auth on the daemon's port, as Prometheus' exporter-toolkit does it.

``BasicAuth`` sits behind the admission gate (``api.Admission``). A request to a guarded path
needs ``Authorization: Basic`` with a user of ``web.basic_auth_users`` and the password its
bcrypt hash was made from; otherwise a JSON 401 with ``WWW-Authenticate``. ``/healthz`` and
``/readyz`` stay open (probes carry no credentials); ``/metrics`` is guarded when
``protect_metrics`` is set.

bcrypt is slow on purpose (about 0.2 s of a core at cost 12), so a flood of wrong passwords
must not be able to buy it without bound:

- A good login is cached (a SHA-256 of the user, the password and the hash, as exporter-toolkit
  does): a scrape every 15 seconds, or a logged-in reader, costs one bcrypt, then nothing.
  Wrong ones are cached apart, so a flood of them never pushes a good login out.
- At most ``verifications`` bcrypts run at a time (half the cores, at least one), in threads
  of their own (never the database's); a login that finds them all busy is refused at once,
  503 with ``Retry-After``.
- A client address whose logins keep failing waits before its next one is checked: after
  ``FREE_FAILURES`` failures, 1 s, then 2, 4, ... up to ``MAX_WAIT``; meanwhile its new
  logins are answered 429 with ``Retry-After``, without bcrypt, and its connection is not
  read again before then (``HOLD``). A success from the address forgets its failures.

Every failed login is answered alike, 401, after one bcrypt: an unknown user's password is
checked against a dummy hash, and a password longer than bcrypt reads (``MAX_PASSWORD_BYTES``)
is refused, after a check of what bcrypt would read of it, whoever the user. So neither the
answer nor its time tells which users exist, and each such failure counts towards the wait.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import bcrypt
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HOLD", "MAX_PASSWORD_BYTES", "BasicAuth", "hash_password"]

CACHE_SIZE = 1024
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# The scope key in which a refusal tells the server how long not to read the connection again.
HOLD = "sitemap_monitor.hold_seconds"
FREE_FAILURES = 5  # failed logins of one address before it must wait
MAX_WAIT = 60  # seconds, the longest wait of an address that keeps failing
# bcrypt reads no further. A longer password is refused, never cut short: cut, any password
# that starts with the right 72 bytes would pass (bcrypt 4 cut it silently, bcrypt 5 raises).
MAX_PASSWORD_BYTES = 72
FAILURES_FORGOTTEN = 900.0  # seconds after its last failure, an address starts afresh
_ADDRESSES = 4096  # addresses whose failures are kept; the oldest go first
_UNAUTHORIZED = json.dumps(
    {"error": {"status": 401, "message": "authentication required"}}).encode()
_BUSY = json.dumps({"error": {"status": 503, "message": "too many logins being checked; "
                              "retry later"}}).encode()
_SLOWED = json.dumps({"error": {"status": 429, "message": "too many failed logins from this "
                                "address; retry later"}}).encode()


def hash_password(password: str, rounds: int = 12) -> str:
    """A bcrypt hash for ``web.basic_auth_users``; ``ValueError`` for a password longer than
    ``MAX_PASSWORD_BYTES`` in UTF-8 (no login could ever use it)."""
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ValueError(f"a password longer than {MAX_PASSWORD_BYTES} bytes (bcrypt reads "
                         "no further)")
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


def default_verifications() -> int:
    """bcrypts at a time by default: half the cores this process may run on, at least one."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, cores // 2)


@dataclass(slots=True)
class _Failed:
    count: int
    last: float
    until: float


class _Failures:
    """Failed logins by client address, and how long each must wait."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._by_address: OrderedDict[str, _Failed] = OrderedDict()

    def wait(self, address: str) -> float:
        """Seconds before a login from ``address`` is checked again (0: now)."""
        failed = self._by_address.get(address)
        return 0.0 if failed is None else max(0.0, failed.until - self._clock())

    def add(self, address: str) -> None:
        """One more failure of ``address``."""
        now = self._clock()
        failed = self._by_address.pop(address, None)
        if failed is None or now - failed.last > FAILURES_FORGOTTEN:
            failed = _Failed(0, now, now)
        failed.count += 1
        failed.last = now
        over = failed.count - FREE_FAILURES
        if over > 0:
            failed.until = now + min(MAX_WAIT, 2 ** (over - 1))
        self._by_address[address] = failed
        if len(self._by_address) > _ADDRESSES:
            self._by_address.popitem(last=False)

    def forget(self, address: str) -> None:
        """``address`` logged in: its failures no longer count."""
        self._by_address.pop(address, None)


class _Lru:
    """A bounded set of recent keys."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        if key not in self._keys:
            return False
        self._keys.move_to_end(key)
        return True

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)


class BasicAuth:
    """Guard every path but the probes (and ``/metrics`` unless ``protect_metrics``)."""

    def __init__(self, app: ASGIApp, users: Mapping[str, str], *,
                 protect_metrics: bool = False, verifications: int | None = None,
                 on_refused: Callable[[str], None] = lambda _lane: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._app = app
        self._users = {name: hashed.encode() for name, hashed in users.items()}
        # "$2b$12$...": the cost of the first user's hash, for the unknown users' dummy
        self._rounds = int(next(iter(users.values()), "$2b$12$").split("$")[2])
        self._open = OPEN_PATHS if protect_metrics else OPEN_PATHS | {"/metrics"}
        self._good = _Lru(CACHE_SIZE)
        self._bad = _Lru(CACHE_SIZE)
        self._slots = verifications or default_verifications()
        self._busy = 0
        self._threads: ThreadPoolExecutor | None = None
        self._failures = _Failures(clock)
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._users or scope.get("path", "") in self._open:
            await self._app(scope, receive, send)
            return
        status, wait = await self._verdict(scope)
        if status == 200:
            await self._app(scope, receive, send)
            return
        headers = [(b"content-type", b"application/json")]
        if status == 401:
            body = _UNAUTHORIZED
            headers.append(
                (b"www-authenticate", b'Basic realm="sitemap-monitor", charset="UTF-8"'))
        else:
            self._on_refused("login")
            body = _BUSY if status == 503 else _SLOWED
            headers.append((b"retry-after", b"%d" % wait))
            scope[HOLD] = wait
        headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _verdict(self, scope: Scope) -> tuple[int, int]:
        """200 (pass), 401, 429 or 503, and the seconds a refused client must wait."""
        credentials = _credentials(scope)
        if credentials is None:
            return 401, 0
        user, password = credentials
        hashed = self._users.get(user.decode("utf-8"))
        key = hashlib.sha256(b"\0".join((user, password, hashed or b""))).digest()
        if key in self._good:
            return 200, 0
        address = str((scope.get("client") or ("",))[0])
        if key in self._bad:
            self._failures.add(address)
            return 401, 0
        wait = self._failures.wait(address)
        if wait > 0:
            return 429, math.ceil(wait)
        if self._busy >= self._slots:
            return 503, 1
        self._busy += 1
        try:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self._slots, thread_name_prefix="bcrypt")
            good = await asyncio.get_running_loop().run_in_executor(
                self._threads, _check, password, hashed, self._rounds)
        finally:
            self._busy -= 1
        if good:
            self._good.add(key)
            self._failures.forget(address)
            return 200, 0
        self._bad.add(key)
        self._failures.add(address)
        return 401, 0


def _credentials(scope: Scope) -> tuple[bytes, bytes] | None:
    """The user (UTF-8) and password of a request's ``Authorization: Basic``, or None."""
    header = next((value for key, value in scope.get("headers", [])
                   if key == b"authorization"), None)
    if header is None or header[:6].lower() != b"basic ":
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).partition(b":")
        user.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


@functools.cache
def _dummy(rounds: int) -> bytes:
    """A hash to check an unknown user's password against, of the configured users' cost;
    made once, when first needed (not at every start of a daemon)."""
    return bcrypt.hashpw(b"sitemap-monitor", bcrypt.gensalt(rounds=rounds))


def _check(password: bytes, hashed: bytes | None, rounds: int) -> bool:
    """Whether ``password`` is the one of ``hashed``; one bcrypt whatever the answer (an
    unknown user: a dummy hash; a password bcrypt cannot take: what it would read of it)."""
    fits = len(password) <= MAX_PASSWORD_BYTES
    try:
        good = bcrypt.checkpw(password[:MAX_PASSWORD_BYTES],
                              _dummy(rounds) if hashed is None else hashed)
    except ValueError:  # a hash bcrypt cannot read (the config checks their shape)
        return False
    return good and fits and hashed is not None
