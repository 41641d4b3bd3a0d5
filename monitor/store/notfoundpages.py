"""Each host's own not-found page, as the URL checks last asked for it.

``load`` reads what the last probe of an origin found (when, and the fingerprint of a 2xx
answer's main content); ``save`` writes a new probe's result over it. One row per origin,
shared by every target on it, so that a host is asked once a day whatever lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, delete, insert, select

from monitor.store.schema import host_not_found

__all__ = ["Probe", "load", "save"]


@dataclass(frozen=True, slots=True)
class Probe:
    """One request for a path that cannot exist on ``origin``: when, where, its final
    status, and the fingerprint of its main content when it answered 2xx (else empty)."""

    origin: str
    probed_at: datetime
    probe_url: str
    final_url: str | None
    http_status: int | None
    fingerprint: bytes


def load(engine: Engine, origin: str) -> Probe | None:
    """The last probe of ``origin``, or None when it was never asked."""
    h = host_not_found.c
    with engine.connect() as conn:
        row = conn.execute(select(h.probed_at, h.probe_url, h.final_url, h.http_status,
                                  h.fingerprint).where(h.origin == origin)).one_or_none()
    if row is None:
        return None
    probed_at = row.probed_at
    if probed_at.tzinfo is None:  # a database that keeps UTC times without their zone
        probed_at = probed_at.replace(tzinfo=UTC)
    return Probe(origin, probed_at, row.probe_url, row.final_url, row.http_status,
                 bytes(row.fingerprint or b""))


def save(engine: Engine, probe: Probe) -> None:
    """Keep ``probe`` as the origin's last (two replicas that probe at once: the later wins)."""
    h = host_not_found.c
    with engine.begin() as conn:
        conn.execute(delete(host_not_found).where(h.origin == probe.origin))
        conn.execute(insert(host_not_found).values(
            origin=probe.origin, probed_at=probe.probed_at, probe_url=probe.probe_url,
            final_url=probe.final_url,
            http_status=probe.http_status, fingerprint=probe.fingerprint or None))
