"""What IndexNow is told, and what its answers mean (pure: no I/O).

A check's changes become submissions: the URLs of the kinds a target submits (``changed`` only
when the lastmod moved), grouped by origin, since one request names one host and its key file
lives on that host, and cut at ``MAX_URLS`` a request. The protocol is indexnow.org's: a JSON
``POST`` of ``host``, ``key``, ``keyLocation`` and ``urlList``; the key file at
``https://HOST/KEY.txt`` holds the key and nothing else.

    >>> batcher = Batcher()
    >>> batcher.add("added", "https://shop.example/a")
    []
    >>> [(b.origin, b.urls) for b in batcher.finish()]
    [('https://shop.example', ('https://shop.example/a',))]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from monitor.core.rules import RuleId

__all__ = [
    "KEEP",
    "KEY_RETRY",
    "KEY_RULE",
    "KEY_TTL",
    "MAX_AGE",
    "MAX_URLS",
    "OUTCOMES",
    "Batch",
    "Batcher",
    "Scope",
    "Verdict",
    "answer",
    "batches",
    "folder",
    "key_file_problem",
    "key_location",
    "key_message",
    "origin_of",
    "payload",
    "redact",
    "submitted",
]

MAX_URLS = 10_000  # the protocol's limit per request
KEY_TTL = 86400.0  # a key file that answered is fetched again daily
KEY_RETRY = 900.0  # one that did not, at most every 15 minutes, so a fix is seen soon
KEY_RULE: RuleId = RuleId.INDEXNOW_KEY_MISSING
MAX_AGE = 3 * 86400.0  # a submission not delivered by then is dropped (and counted)
KEEP = 30 * 86400.0  # delivered and failed submissions are kept this long
# The outcomes of ``sitemap_monitor_indexnow_urls_total``, counted in URLs.
OUTCOMES = ("submitted", "rejected", "retry", "key_missing", "expired", "out_of_scope")

# What the endpoints answer, as indexnow.org documents it.
_PERMANENT = {
    400: "bad request (the request is malformed)",
    403: "forbidden (the key is not valid: the key file was not found or does not hold it)",
    422: "unprocessable (URLs that do not belong to the host, or a key that does not match "
         "the protocol)",
}
_KEY_FILE_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Batch:
    """One request's worth of URLs: one origin, at most ``MAX_URLS``, with the count of
    each change kind among them."""

    origin: str
    urls: tuple[str, ...]
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """The ``host`` field of the request: the origin's host name."""
        return urlsplit(self.origin).hostname or ""

    def digest(self) -> str:
        """A short fingerprint of the URL list, for idempotency keys."""
        return hashlib.sha256("\n".join(self.urls).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an endpoint's answer means for the submission: ``delivered``, ``retry`` (after
    ``retry_after`` when it said so) or ``failed`` (permanent), and why."""

    outcome: str
    message: str
    retry_after: float | None = None


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) URL, host in lower case; None otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def submitted(kind: str, before: str | None, after: str | None,
              kinds: Sequence[str]) -> bool:
    """Whether a recorded change of this kind (states as JSON) is submitted: an addition, a
    lastmod that moved. A removal waits for its triage (``gone``) and is not judged here."""
    if kind not in kinds:
        return False
    if kind == "added":
        return True
    if kind == "changed":
        was = json.loads(before) if before else {}
        now = json.loads(after) if after else {}
        return bool(was.get("lastmod") != now.get("lastmod"))
    return False


class Batcher:
    """URLs a change at a time, cut into ``Batch``es: one origin each, ``MAX_URLS`` at most.
    Memory holds one unfinished batch per origin."""

    def __init__(self, limit: int = MAX_URLS) -> None:
        self._limit = limit
        self._open: dict[str, tuple[list[str], dict[str, int]]] = {}

    def add(self, kind: str, loc: str) -> list[Batch]:
        """Add one URL; the batch it fills, if it fills one. A URL that is not http(s) is
        left out (search engines would refuse the whole request for it)."""
        origin = origin_of(loc)
        if origin is None:
            return []
        urls, kinds = self._open.setdefault(origin, ([], {}))
        urls.append(loc)
        kinds[kind] = kinds.get(kind, 0) + 1
        if len(urls) < self._limit:
            return []
        del self._open[origin]
        return [Batch(origin, tuple(urls), kinds)]

    def finish(self) -> list[Batch]:
        """The batches not yet full, by origin."""
        done = [Batch(origin, tuple(urls), kinds)
                for origin, (urls, kinds) in sorted(self._open.items())]
        self._open.clear()
        return done


def batches(changes: Iterable[tuple[str, str]], limit: int = MAX_URLS) -> list[Batch]:
    """``Batcher`` over (kind, loc) pairs, every batch at once (for small sets and tests)."""
    batcher = Batcher(limit)
    out = [batch for kind, loc in changes for batch in batcher.add(kind, loc)]
    return out + batcher.finish()


def key_location(origin: str, key: str, configured: str | None) -> str:
    """Where an origin's key file is: the configured URL when it is on that origin, the
    configured path on the origin, else ``ORIGIN/KEY.txt``."""
    if configured is None:
        return f"{origin}/{key}.txt"
    if configured.startswith("/"):
        return origin + configured
    if origin_of(configured) == origin:
        return configured
    return f"{origin}/{key}.txt"


def folder(location: str) -> str:
    """The folder a key file vouches for: the path of its URL up to its last ``/``."""
    path = urlsplit(location).path or "/"
    return path[:path.rfind("/") + 1] or "/"


@dataclass(frozen=True, slots=True)
class Scope:
    """What a target may submit: URLs on the origins of its own sitemaps (its URL's and its
    documents'), and on each origin only those under its key file's folder.

        >>> scope = Scope(frozenset({"https://shop.example"}))
        >>> scope.split("https://shop.example", ("https://shop.example/seo/a",
        ...             "https://shop.example/b"), "https://shop.example/seo/key.txt")
        (('https://shop.example/seo/a',), ('https://shop.example/b',))
        >>> scope.covers("https://elsewhere.example")
        False
    """

    origins: frozenset[str]

    @classmethod
    def of(cls, target_url: str, document_origins: Iterable[str]) -> Scope:
        """The scope of a target at ``target_url`` whose sitemaps live on these origins."""
        own = origin_of(target_url)
        return cls(frozenset(document_origins) | ({own} if own else frozenset()))

    def covers(self, origin: str) -> bool:
        """Whether ``origin`` is the origin of one of the target's own sitemaps."""
        return origin in self.origins

    def split(self, origin: str, urls: Sequence[str], location: str,
              ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The URLs of one origin's submission that may be sent with the key file at
        ``location``, and those that may not (another origin, or outside its folder)."""
        if not self.covers(origin):
            return (), tuple(urls)
        under = folder(location)
        inside = tuple(u for u in urls if origin_of(u) == origin
                       and (urlsplit(u).path or "/").startswith(under))
        if len(inside) == len(urls):
            return inside, ()
        kept = set(inside)
        return inside, tuple(u for u in urls if u not in kept)


def redact(text: str, key: str) -> str:
    """``text`` with the key replaced by ``[key]``: a key file's URL names the key, and no
    log line, stored answer or issue may."""
    return text.replace(key, "[key]")


def payload(batch: Batch, key: str, location: str) -> dict[str, object]:
    """The JSON body of one submission."""
    return {"host": batch.host, "key": key, "keyLocation": location,
            "urlList": list(batch.urls)}


def answer(status: int, body: str, retry_after: float | None) -> Verdict:
    """What an endpoint's HTTP answer means: 200 and 202 took the URLs, 400, 403 and 422 will
    never take them, 429 asks to slow down (for its ``Retry-After``), the rest may pass."""
    said = " ".join(body.split())[:300]
    detail = f"HTTP {status}" + (f": {said}" if said else "")
    if status in (200, 202):
        return Verdict("delivered", detail)
    if status in _PERMANENT:
        return Verdict("failed", f"HTTP {status} {_PERMANENT[status]}"
                       + (f": {said}" if said else ""))
    if status == 429:
        return Verdict("retry", "HTTP 429 too many requests" + (f": {said}" if said else ""),
                       retry_after)
    return Verdict("retry", detail, retry_after if status == 503 else None)


def key_file_problem(status: int | None, body: bytes, key: str) -> str | None:
    """Why a fetched key file does not prove the key (None: it does): it must answer 200 with
    the key as its whole content (surrounding white space aside)."""
    if status is None:
        return "no answer"
    if status != 200:
        return f"HTTP {status}"
    text = body[:_KEY_FILE_BYTES].decode("utf-8", errors="replace").strip()
    if text != key:
        return "it does not hold exactly the key" if text else "it is empty"
    return None


def key_message(host: str, location: str, problem: str, key: str) -> str:
    """The one line of ``indexnow-key-missing``: what, where (the key itself redacted), and
    the fix."""
    return redact(f"IndexNow key file of {host} not verified at {location} ({problem}): "
                  f"nothing is submitted for {host} until that URL answers 200 with the key "
                  "as its only content", key)
