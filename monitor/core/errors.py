"""The exception tree of sitemap-monitor.

Callers catch ``MonitorError``; a failed check is a value (``model.CheckResult``),
so these are raised only where the caller cannot go on::

    MonitorError
    ├── ConfigError          bad configuration or usage: exit code 2, names the key and the file
    ├── BadParameter         a listing's parameter that cannot be used: a 400, exit code 2
    ├── NotFound             no such target or snapshot: a 404, exit code 2
    ├── FetchError           one document could not be fetched; ``kind`` is stable,
    │                        ``permanent`` says whether a retry can help
    ├── WorkerDied           the process digesting a document died (killed for memory, most likely)
    ├── LeaseLost            the replica lost the target's lease before its check committed
    ├── StoreError           the database refused or is unreachable
    │   └── SchemaError      the schema is not at the newest migration
    └── DeliveryError        an alert channel refused a notification; ``permanent`` and
                             ``retry_after`` steer the outbox
"""

from __future__ import annotations

import re

__all__ = [
    "BadParameter",
    "ConfigError",
    "DeliveryError",
    "FetchError",
    "LeaseLost",
    "MonitorError",
    "NotFound",
    "SchemaError",
    "StoreError",
    "WorkerDied",
    "redact_url",
]

# The password of every URL in a text: "scheme://user:PASSWORD@".
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:'\"]*:)[^\s/@'\"]*@")


def redact_url(text: str) -> str:
    """``text`` with the password of each URL in it replaced by ``***`` (for messages)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


class MonitorError(Exception):
    """The base of every error this package raises on purpose."""


class ConfigError(MonitorError):
    """Configuration or usage that cannot be used; the message is one line naming where."""


class BadParameter(MonitorError, ValueError):
    """A parameter that cannot be used: ``str()`` names it and says why (a 400, exit 2)."""


class NotFound(MonitorError, LookupError):
    """No such target, or no such snapshot of it (a 404, exit 2)."""


class LeaseLost(MonitorError):
    """This replica no longer holds the target's lease at the moment its check would commit.

    It was paused past the lease and another replica took the target over: the check's
    transaction is rolled back and writes nothing, so a due check never has two snapshots.
    """


class WorkerDied(MonitorError):
    """The worker process digesting a document died (killed for memory, most likely)."""


class FetchError(MonitorError):
    """A document could not be fetched completely.

    ``kind`` is one of: ``timeout``, ``connect``, ``http-status``, ``redirects``,
    ``address-blocked``, ``invalid-url``, ``decode``, ``protocol``, or the rule id
    where one names the reason: ``size-too-large``, ``gzip-invalid``.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        permanent: bool = False,
    ) -> None:
        # The URLs in it are a watched site's (a child, a redirect): never show their passwords.
        message = redact_url(message)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.permanent = permanent


class StoreError(MonitorError):
    """The database could not do what was asked.

    ``public`` says what is wrong without naming the database's file, host or user, for an
    answer to a client that need not know them (``/readyz`` is open to anyone); None when
    not known.
    """

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public


class SchemaError(StoreError):
    """The database schema is missing or behind the newest migration."""


class DeliveryError(MonitorError):
    """A channel did not accept a notification."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after
