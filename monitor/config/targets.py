"""A target as the file writes it (``TargetSpec``), the defaults it inherits, and the target
with every setting resolved (``Target``), with what a configuration allows but should not do.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from monitor import __version__
from monitor.config.values import (
    Duration,
    Frozen,
    Interval,
    Ratio,
    Size,
    Timeout,
    format_duration,
)
from monitor.core.errors import ConfigError, redact_url
from monitor.core.ipranges import is_blocked_address, literal_address

__all__ = [
    "DEFAULT_USER_AGENT", "INDEXNOW_ENDPOINT", "POLITE_INTERVAL", "Auth", "BasicAuth", "Defaults",
    "IndexNow", "IndexNowKind", "Limits", "Retention", "Target", "TargetSpec", "UrlChecks",
    "adhoc_target", "origin_of", "resolve", "warnings",
]

DEFAULT_USER_AGENT = f"sitemap-monitor/{__version__} (+https://github.com/sitemap-monitor/sitemap-monitor)"
# An interval under this, on a site that is not on this machine, is legal but impolite.
POLITE_INTERVAL = 60.0


class Limits(Frozen):
    """Per-document limits; the protocol's values are the defaults."""

    max_bytes: Size = 50 * 2**20
    max_urls: int = Field(50_000, gt=0)
    max_children: int = Field(50_000, gt=0)
    max_depth: int = Field(3, ge=1)
    max_redirects: int = Field(5, ge=0)


class UrlChecks(Frozen):
    """The health checks of a target's listed URLs: opt-in, since they fetch the
    site's own pages, and polite: ``rate`` requests a second per host at most."""

    enabled: bool = False
    rate: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False)
    recheck: Duration = Field(7 * 86400.0, gt=0)
    # what Googlebot reads of an HTML page: a noindex past it is not read by Google either
    body_limit: Size = Field(2 * 2**20, gt=0)


class Retention(Frozen):
    """How much of a target's history is kept: every snapshot younger than
    ``snapshots`` or among the last ``keep_last``, whichever keeps more, then the oldest of
    those dropped until the target's history takes at most ``max_bytes`` (never the last
    two)."""

    snapshots: Duration = Field(90 * 86400.0, gt=0)
    keep_last: int = Field(100, ge=1)
    max_bytes: Size = 2**30


INDEXNOW_ENDPOINT = "https://api.indexnow.org/indexnow"
IndexNowKind = Literal["added", "changed", "removed"]
_INDEXNOW_KEY = re.compile(r"^[A-Za-z0-9-]{8,128}$")
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class IndexNow(Frozen):
    """Telling IndexNow search engines what a target's sitemap changed (opt-in).

    ``key`` is the site's IndexNow key (``key_file`` reads it from a Secret); the key file
    lives at ``key_location`` (a full URL, or a path on each host), else ``https://HOST/KEY.txt``.
    """

    enabled: bool = False
    key: str | None = Field(None, repr=False)
    key_location: str | None = None
    endpoint: str = INDEXNOW_ENDPOINT
    submit: tuple[IndexNowKind, ...] = ("added", "changed", "removed")

    @field_validator("key")
    @classmethod
    def _key(cls, key: str | None) -> str | None:
        if key is not None and not _INDEXNOW_KEY.match(key):
            # never echo the key itself: it may sit in a log
            raise ValueError("an IndexNow key is 8 to 128 characters of a-z, A-Z, 0-9 and -")
        return key

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, endpoint: str) -> str:
        parts = urlsplit(endpoint)
        literal = literal_address(parts.hostname or "")
        if literal is not None and is_blocked_address(literal):
            raise ValueError(f"the endpoint {endpoint!r} is on {literal}, a link-local or "
                             "metadata address, which is never fetched")
        # The key travels in the body: plain http only to this machine (a test receiver).
        if parts.scheme == "https" and parts.hostname:
            return endpoint
        if parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS:
            return endpoint
        raise ValueError(f"the endpoint must be an https URL (http only on loopback): "
                         f"{endpoint!r}")

    @field_validator("key_location")
    @classmethod
    def _location(cls, location: str | None) -> str | None:
        if location is not None and not location.startswith("/"):
            _check_http_url(location)
        return location


class Auth(Frozen):
    """A target's HTTP basic auth, as written in the file (``password_file`` from a Secret)."""

    username: str = Field(min_length=1, pattern=r"^[^:]*$")
    password: str = Field(repr=False)


class BasicAuth(Frozen):
    """A target's basic auth once resolved: sent only to ``origin``, the target's own scheme,
    host and port (``scheme://host:port``), never across a redirect or to another host."""

    origin: str
    username: str
    password: str = Field(repr=False)

    def sent_to(self, url: str) -> bool:
        """Whether ``url`` is on the origin these credentials are for."""
        return origin_of(url) == self.origin


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an http(s) URL, the port spelled out, the host lower case."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return ""
    port = port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"{parts.scheme.lower()}://{f'[{host}]' if ':' in host else host}:{port}"


class Defaults(Frozen):
    """Settings every target inherits unless it sets its own."""

    interval: Interval = 900.0
    jitter: Ratio = 0.1
    timeout: Timeout = 30.0
    connect_timeout: Timeout = 10.0
    read_timeout: Timeout = 20.0
    # The deadline of a whole check, all documents of an index together.
    check_timeout: Timeout = 600.0
    retry_after_max: Duration = 30.0
    max_bytes: Size = 50 * 2**20
    max_urls: int = Field(50_000, gt=0)
    max_children: int = Field(50_000, gt=0)
    max_depth: int = Field(3, ge=1)
    max_redirects: int = Field(5, ge=0)
    user_agent: str = DEFAULT_USER_AGENT
    allow_private: bool = False
    allow_cross_host_children: bool = False
    url_checks: UrlChecks = UrlChecks()
    retention: Retention = Retention()
    indexnow: IndexNow = IndexNow()
    # Set by ``resolve`` from a target's own ``auth:`` (model_copy, which validates nothing).
    auth: BasicAuth | None = None

    @field_validator("user_agent")
    @classmethod
    def _version(cls, value: str) -> str:
        return value.replace("VERSION", __version__)

    @field_validator("auth", mode="before")
    @classmethod
    def _per_target(cls, value: object) -> object:
        # Credentials shared by every target would go to every target's host.
        if value is not None:
            raise ValueError("set auth on each target: it is sent to that target's own host "
                             "only")
        return value


_TARGET_OVERRIDES = tuple(k for k in Defaults.model_fields if k != "auth")


class TargetSpec(Frozen):
    """A target as written in the file; ``resolve`` merges it with the defaults."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    url: str | None = None
    site: str | None = None
    interval: Interval | None = None
    jitter: Ratio | None = None
    timeout: Timeout | None = None
    connect_timeout: Timeout | None = None
    read_timeout: Timeout | None = None
    check_timeout: Timeout | None = None
    retry_after_max: Duration | None = None
    max_bytes: Size | None = None
    max_urls: int | None = Field(None, gt=0)
    max_children: int | None = Field(None, gt=0)
    max_depth: int | None = Field(None, ge=1)
    max_redirects: int | None = Field(None, ge=0)
    user_agent: str | None = None
    allow_private: bool | None = None
    allow_cross_host_children: bool | None = None
    # merged key by key over the defaults' (resolve)
    url_checks: UrlChecks | None = None
    retention: Retention | None = None
    indexnow: IndexNow | None = None
    auth: Auth | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TargetSpec:
        if (self.url is None) == (self.site is None):
            raise ValueError("a target needs exactly one of url: or site:")
        _check_http_url(self.url or self.site or "")
        return self


def _check_http_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an absolute http(s) URL: {redact_url(url)!r}")
    # In the URL, credentials would be shown wherever the URL is (answers, pages, exports).
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL carries a user name or password: set auth: {username, "
                         "password_file} on the target instead")


class Target(Frozen):
    """One monitored sitemap with every setting resolved."""

    name: str
    url: str
    site: bool = False
    settings: Defaults = Defaults()

    @property
    def limits(self) -> Limits:
        """The document limits of this target."""
        s = self.settings
        return Limits(
            max_bytes=s.max_bytes,
            max_urls=s.max_urls,
            max_children=s.max_children,
            max_depth=s.max_depth,
            max_redirects=s.max_redirects,
        )


def resolve(spec: TargetSpec, defaults: Defaults) -> Target:
    """Merge a target's own settings over the defaults."""
    overrides = {
        key: getattr(spec, key) for key in _TARGET_OVERRIDES if getattr(spec, key) is not None
    }
    for key in ("url_checks", "retention", "indexnow"):
        own = getattr(spec, key)
        if own is not None:
            overrides[key] = getattr(defaults, key).model_copy(
                update=own.model_dump(exclude_unset=True))
    if spec.auth is not None:
        overrides["auth"] = BasicAuth(origin=origin_of(spec.url or spec.site or ""),
                                      username=spec.auth.username, password=spec.auth.password)
    settings = defaults.model_copy(update=overrides)
    if spec.site is not None:
        return Target(name=spec.name, url=spec.site, site=True, settings=settings)
    assert spec.url is not None
    return Target(name=spec.name, url=spec.url, settings=settings)


def adhoc_target(url: str, defaults: Defaults | None = None) -> Target:
    """A target named by its URL, for ``check URL`` without a configured target."""
    try:
        _check_http_url(url)
    except ValueError as exc:
        raise ConfigError(f"target: {exc}") from None
    return Target(name=url, url=url, settings=defaults or Defaults())


def warnings(targets: Iterable[Target]) -> list[str]:
    """What a configuration allows but should not do, one line each (``config check`` prints
    them, ``run`` logs them at start and on reload): checks of a remote site more often than
    once a minute."""
    found: list[str] = []
    for target in targets:
        interval = target.settings.interval
        if interval >= POLITE_INTERVAL:
            continue
        host = urlsplit(target.url).hostname or ""
        if not _is_loopback(host):
            found.append(f"targets: {target.name}: an interval of {format_duration(interval)} "
                         f"checks {host} more than once a minute")
    return found


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
