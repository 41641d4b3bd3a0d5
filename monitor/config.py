"""Configuration: frozen models with their defaults, and ``load()``.

Unknown keys are errors, ``${ENV}`` is expanded in strings, and a key ``X_file`` reads the
value of ``X`` from a file (for Kubernetes secrets). Every error is one line naming the file
and the key.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor import __version__
from monitor.errors import ConfigError, redact_url

DEFAULT_DATABASE_URL = "sqlite:///./sitemap-monitor.db"
DEFAULT_USER_AGENT = f"sitemap-monitor/{__version__} (+https://github.com/sitemap-monitor/sitemap-monitor)"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The longest duration of any setting: past it, dates overflow and timers never fire.
MAX_DURATION = 3650 * 86400.0
# Every alias either YAML loader accepts: both take only these characters in its name.
_MAYBE_ALIAS = re.compile(r"\*[0-9A-Za-z_-]")
# An interval under this, on a site that is not on this machine, is legal but impolite.
POLITE_INTERVAL = 60.0


def parse_duration(value: object) -> float:
    """``15m``, ``30s``, ``1.5h``, ``250ms`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 1h)")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if math.isnan(seconds) or (math.isinf(seconds) and not isinstance(value, str)):
        raise ValueError(f"not a finite duration: {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"too long: at most {format_duration(MAX_DURATION)}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds written the way a configuration would: ``1h``, ``30s``, ``0.001s``."""
    for unit in ("d", "h", "m"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _duration_within(low: float, high: float = MAX_DURATION) -> AfterValidator:
    """A bound on a duration, said in the configuration's own units."""

    def check(seconds: float) -> float:
        if seconds < low:
            raise ValueError(f"must be at least {format_duration(low)} "
                             f"(got {format_duration(seconds)})")
        if seconds > high:
            raise ValueError(f"must be at most {format_duration(high)} "
                             f"(got {format_duration(seconds)})")
        return seconds

    return AfterValidator(check)


def parse_size(value: object) -> int:
    """``50MiB``, ``10MB`` or a number of bytes -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2)] if match else math.inf
    if not math.isfinite(size):
        raise ValueError(f"not a size: {value!r} (use e.g. 50MiB, 10MB)")
    return int(size)


def parse_ratio(value: object) -> float:
    """``10%`` or a fraction ``0.1`` -> a fraction."""
    if isinstance(value, bool):
        raise ValueError(f"not a ratio: {value!r}")
    text = str(value).strip()
    number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0 <= number <= 1:
        raise ValueError(f"ratio out of range 0..1: {value!r}")
    return number


Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
# At least a second between checks of a target: below it, a check loop is a flood.
Interval = Annotated[Duration, _duration_within(1.0)]
Timeout = Annotated[Duration, Field(gt=0)]
Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Ratio = Annotated[float, BeforeValidator(parse_ratio)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Frozen):
    """Per-document limits; the protocol's values are the defaults."""

    max_bytes: Size = 50 * 2**20
    max_urls: int = Field(50_000, gt=0)
    max_children: int = Field(50_000, gt=0)
    max_depth: int = Field(3, ge=1)
    max_redirects: int = Field(5, ge=0)


class UrlChecks(_Frozen):
    """The health checks of a target's listed URLs: opt-in, since they fetch the
    site's own pages, and polite: ``rate`` requests a second per host at most."""

    enabled: bool = False
    rate: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False)
    recheck: Duration = Field(7 * 86400.0, gt=0)
    # what Googlebot reads of an HTML page: a noindex past it is not read by Google either
    body_limit: Size = Field(2 * 2**20, gt=0)


class Retention(_Frozen):
    """How much of a target's history is kept: every snapshot younger than
    ``snapshots`` or among the last ``keep_last``, whichever keeps more."""

    snapshots: Duration = Field(90 * 86400.0, gt=0)
    keep_last: int = Field(100, ge=1)


INDEXNOW_ENDPOINT = "https://api.indexnow.org/indexnow"
IndexNowKind = Literal["added", "changed", "removed"]
_INDEXNOW_KEY = re.compile(r"^[A-Za-z0-9-]{8,128}$")
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class IndexNow(_Frozen):
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


class Auth(_Frozen):
    """A target's HTTP basic auth, as written in the file (``password_file`` from a Secret)."""

    username: str = Field(min_length=1, pattern=r"^[^:]*$")
    password: str = Field(repr=False)


class BasicAuth(_Frozen):
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


class Defaults(_Frozen):
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


class TargetSpec(_Frozen):
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


class Target(_Frozen):
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


ChannelType = Literal["webhook", "slack", "alertmanager", "email"]
RuleWhen = Literal[
    "added", "removed", "changed", "invalid", "issues", "check_failed", "partial", "recovered",
    "stale", "url_count_below", "url_health", "robots_changed",
]


UrlState = Literal[
    "ok", "redirect", "not-found", "gone", "forbidden", "client-error", "server-error",
    "noindex", "canonicalized", "soft-404", "disallowed", "unknown",
]
RemovalReason = Literal["moved", "gone", "live", "unknown"]


class Channel(_Frozen):
    """One alert destination."""

    name: str = Field(min_length=1)
    type: ChannelType
    # repr=False: a Channel in a log line or traceback must not show credentials (webhook
    # URLs such as Slack's carry a token in their path).
    url: str | None = Field(None, repr=False)
    secret: str | None = Field(None, repr=False)
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: Duration = 10.0
    # alertmanager: a firing alert is re-sent on every check while it fires and stays active
    # this long after each send, so it expires on its own if the daemon is gone; keep it above
    # the longest check interval.
    alert_ttl: Duration = Field(3600.0, gt=0)
    # whether the channel is told when a state (check_failed, stale, url_count_below) clears,
    # as Alertmanager's receivers set it; events have nothing to resolve
    send_resolved: bool = True
    # email
    smtp_ca_file: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_starttls: bool = True
    smtp_username: str | None = None
    smtp_password: str | None = Field(None, repr=False)
    email_from: str | None = Field(None, alias="from")
    email_to: list[str] = Field(default_factory=list, alias="to")

    @model_validator(mode="after")
    def _needs(self) -> Channel:
        if self.type == "email":
            if not self.smtp_host or not self.email_from or not self.email_to:
                raise ValueError("an email channel needs smtp_host, from and to")
        elif not self.url:
            raise ValueError(f"a {self.type} channel needs url")
        return self


class Rule(_Frozen):
    """When to notify whom."""

    name: str = Field(min_length=1)
    when: RuleWhen
    targets: list[str] = Field(default_factory=lambda: ["*"])
    severity: Literal["info", "warning", "critical"] = "warning"
    channels: list[str] = Field(min_length=1)
    threshold: int | None = Field(None, ge=1)
    ratio: Ratio | None = None
    consecutive: int = Field(1, ge=1)
    duration: Duration | None = None
    count: int | None = Field(None, ge=0)
    # when: issues: the rule ids whose current issues count, as globs ("lastmod-*")
    rule: list[str] | None = Field(None, min_length=1)
    # when: url_health: the states whose listed URLs count (default: every state with a rule)
    state: list[UrlState] | None = Field(None, min_length=1)
    # when: removed: only removals the URL checks found to be one of these
    reason: list[RemovalReason] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _needs(self) -> Rule:
        if self.when == "stale" and self.duration is None:
            raise ValueError("a stale rule needs duration")
        if self.when == "issues" and not self.rule:
            raise ValueError("an issues rule needs rule: (rule ids or globs, e.g. lastmod-*)")
        if self.rule and self.when != "issues":
            raise ValueError("rule: is for when: issues")
        if self.when == "url_count_below" and self.count is None:
            raise ValueError("a url_count_below rule needs count")
        if self.state and self.when != "url_health":
            raise ValueError("state: is for when: url_health")
        if self.reason and self.when != "removed":
            raise ValueError("reason: is for when: removed")
        return self


class Delivery(_Frozen):
    """How the outbox delivers."""

    max_age: Duration = 86400.0
    initial_backoff: Duration = 5.0
    max_backoff: Duration = 600.0
    examples: int = Field(20, ge=0, le=1000)
    api_base_url: str | None = None


class Alerts(_Frozen):
    """The ``alerts:`` section."""

    channels: list[Channel] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)
    delivery: Delivery = Delivery()

    @model_validator(mode="after")
    def _references(self) -> Alerts:
        names = [c.name for c in self.channels]
        if len(names) != len(set(names)):
            raise ValueError("channel names must be unique")
        for rule in self.rules:
            for name in rule.channels:
                if name not in names:
                    raise ValueError(f"rule {rule.name!r} names unknown channel {name!r}")
        return self


class Scheduler(_Frozen):
    """How the daemon runs checks."""

    concurrency: int = Field(8, ge=1, le=1024)
    per_host: int = Field(2, ge=1, le=256)
    shutdown_grace: Annotated[Duration, _duration_within(0.0, 3600.0)] = 20.0
    # A claim's lifetime, renewed every third of it while its check runs; a replica that dies
    # holds its targets this long.
    lease: Annotated[Duration, _duration_within(1.0, 3600.0)] = 60.0
    # How often the daemon prunes the history retention no longer keeps (hourly).
    prune_interval: Interval = 3600.0


class Http(_Frozen):
    """What the daemon's HTTP port admits; beyond it, 503 with ``Retry-After`` at once.

    ``/healthz`` is never refused; ``/readyz`` and ``/metrics`` have small bounds of their own,
    apart from the API's, so a flood of one never refuses the others.
    """

    # JSON API requests in progress at once (waiting for a database connection included).
    max_requests: int = Field(16, ge=1)
    # The API's own database connections (and threads): never taken from the checks' pool.
    database_connections: int = Field(2, ge=1)
    # Open connections beyond which API requests are refused and their connection closed.
    max_connections: int = Field(10_000, ge=1)
    # A connection that has not sent a whole request head within this (from its opening, or
    # from the first byte of a next request) is closed: idle or dripping sockets cost memory.
    head_timeout: Duration = Field(5.0, gt=0, le=300)
    # An idle kept-alive connection is closed after this.
    keep_alive: Duration = Field(5.0, gt=0, le=300)
    # A client that reads none of an answer for this long is dropped (its request held a slot).
    write_timeout: Duration = Field(30.0, gt=0, le=3600)


_BCRYPT = re.compile(r"^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$")


class Web(_Frozen):
    """Who may read the daemon's port, as Prometheus' exporter-toolkit has it: basic
    auth with bcrypt-hashed passwords and TLS. With users set, the JSON API and the pages need
    them, ``/metrics`` too when ``protect_metrics`` is true; ``/healthz`` and ``/readyz`` stay
    open (probes carry no credentials)."""

    basic_auth_users: dict[str, str] = Field(default_factory=dict, repr=False)
    protect_metrics: bool = False
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    @field_validator("basic_auth_users", mode="before")
    @classmethod
    def _from_file(cls, users: object) -> object:
        """``basic_auth_users_file`` (a Kubernetes Secret) holds ``name: hash`` lines: YAML."""
        if isinstance(users, str):
            import yaml

            loaded = yaml.safe_load(users) if users.strip() else {}
            if not isinstance(loaded, dict):
                raise ValueError("the users file holds no `name: bcrypt hash` lines")
            return {str(k): str(v) for k, v in loaded.items()}
        return users

    @field_validator("basic_auth_users")
    @classmethod
    def _hashed(cls, users: dict[str, str]) -> dict[str, str]:
        for name, hashed in users.items():
            if not name or ":" in name:
                raise ValueError(f"user {name!r}: a name without ':'")
            if not _BCRYPT.match(hashed):
                raise ValueError(
                    f"user {name!r}: not a bcrypt hash (a plain-text password?); make one with "
                    "`sitemap-monitor web hash-password`")
        return users

    @model_validator(mode="after")
    def _tls_pair(self) -> Web:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        for key, path in (("tls_cert_file", self.tls_cert_file),
                          ("tls_key_file", self.tls_key_file)):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{key}: no such file {path}")
        return self


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` -> (host, port); ``ValueError`` otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not host:port: {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 (a pod must be reachable)


class Config(_Frozen):
    """The whole configuration file."""

    database_url: str = DEFAULT_DATABASE_URL
    listen: str = "0.0.0.0:8080"
    defaults: Defaults = Defaults()
    scheduler: Scheduler = Scheduler()
    http: Http = Http()
    web: Web = Web()
    targets: list[TargetSpec] = Field(default_factory=list)
    alerts: Alerts = Alerts()

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_listen(value)
        return value

    @model_validator(mode="after")
    def _unique(self) -> Config:
        seen: set[str] = set()
        for spec in self.targets:
            if spec.name in seen:
                raise ValueError(f"duplicate target name {spec.name!r}")
            seen.add(spec.name)
            indexnow = resolve(spec, self.defaults).settings.indexnow
            if indexnow.enabled and indexnow.key is None:
                raise ValueError(f"target {spec.name!r}: indexnow is enabled without a key "
                                 "(set indexnow.key or indexnow.key_file)")
        return self

    def resolved_targets(self) -> list[Target]:
        """Every configured target with its settings resolved."""
        return [resolve(spec, self.defaults) for spec in self.targets]

    def target(self, name: str) -> Target | None:
        """The configured target of that name, or None."""
        for spec in self.targets:
            if spec.name == name:
                return resolve(spec, self.defaults)
        return None

    def retention(self, name: str) -> Retention:
        """The retention of the target of that name; the defaults' for one the configuration
        no longer names (its history then goes down to their ``keep_last``, never whole)."""
        target = self.target(name)
        return (self.defaults if target is None else target.settings).retention


# Keys that name a file the daemon opens itself (a CA bundle, a certificate): kept as paths,
# relative to the configuration's folder, not read as ``X_file`` secrets.
PATH_KEYS = frozenset({"smtp_ca_file", "tls_cert_file", "tls_key_file"})


def _expand(value: Any, where: str, env: Mapping[str, str], base: Path) -> Any:
    """Expand ``${ENV}`` in strings and ``X_file`` keys (but ``PATH_KEYS``), recursively."""
    if isinstance(value, str):
        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return env[name]
        return _ENV.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]", env, base) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            key = str(key)
            path = f"{where}.{key}" if where else key
            if key in PATH_KEYS and isinstance(item, str):  # a path the daemon opens itself
                out[key] = str((base / _expand(item, path, env, base)).expanduser())
            elif key.endswith("_file") and isinstance(item, str):
                plain = key[: -len("_file")]
                if plain in value:
                    raise ConfigError(f"{path}: set either {plain} or {key}, not both")
                file = (base / _expand(item, path, env, base)).expanduser()
                try:
                    out[plain] = file.read_text(encoding="utf-8").strip()
                except OSError as exc:
                    raise ConfigError(f"{path}: cannot read {file}: {exc.strerror}") from None
            else:
                out[key] = _expand(item, path, env, base)
        return out
    return value


def _location(error: Mapping[str, Any]) -> str:
    parts = [str(p) for p in error["loc"] if not str(p).startswith("function-")]
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or "(top level)"


def parse(data: object, *, source: str = "<config>", env: Mapping[str, str] | None = None,
          base: Path | None = None) -> Config:
    """Build a Config from parsed YAML; errors name ``source`` and the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping")
    try:
        expanded = _expand(data, "", os.environ if env is None else env, base or Path("."))
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        return Config.model_validate(expanded)
    except ValidationError as exc:
        first: Mapping[str, Any] = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        raise ConfigError(redact_url(f"{source}: {_location(first)}: {message}")) from None


def load(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
         without: Collection[str] = ()) -> Config:
    """Read and validate a YAML configuration file; the top-level sections ``without`` names
    are left out unread (a listing needs no alert channel, nor its secret's variable)."""
    import yaml  # here: `check URL` without a file never needs it

    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read configuration: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    # libyaml's loader where PyYAML has it: 20,000 targets parsed in 0.4 s of CPU, not 2.3.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if _MAYBE_ALIAS.search(text):  # most files, globs like "*" or lastmod-* too, skip it
            _refuse_aliases(yaml, text, loader, file)
        data = yaml.load(text, Loader=loader)  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{file}:{where}: {problem}") from None
    if without and isinstance(data, dict):
        data = {key: value for key, value in data.items() if key not in without}
    return parse(data, source=str(file), env=env, base=file.parent)


def _refuse_aliases(yaml: Any, text: str, loader: Any, file: Path) -> None:
    """Raise ``ConfigError`` at the first alias: a few lines of nested aliases expand to
    billions of nodes (a "billion laughs"), and a configuration needs none."""
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            raise ConfigError(f"{file}: line {line}: YAML aliases (*{event.anchor}) are not "
                              "allowed: write the value out")


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
