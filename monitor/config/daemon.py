"""The daemon's own settings: how it schedules checks (``scheduler:``), what its HTTP port
admits (``http:``), who may read it (``web:``) and where it listens."""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from monitor.config.values import Duration, Frozen, Interval, duration_within

__all__ = ["Http", "Scheduler", "Web", "split_listen"]

class Scheduler(Frozen):
    """How the daemon runs checks."""

    concurrency: int = Field(8, ge=1, le=1024)
    per_host: int = Field(2, ge=1, le=256)
    shutdown_grace: Annotated[Duration, duration_within(0.0, 3600.0)] = 20.0
    # A claim's lifetime, renewed every third of it while its check runs; a replica that dies
    # holds its targets this long.
    lease: Annotated[Duration, duration_within(1.0, 3600.0)] = 60.0
    # How often the daemon prunes the history retention no longer keeps (hourly).
    prune_interval: Interval = 3600.0


class Http(Frozen):
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


class Web(Frozen):
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
