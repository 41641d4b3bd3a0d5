"""One transaction, retried: transient database errors (a lock, a serialisation failure, a
dropped connection) are retried here, a bounded number of times, and nowhere else.

Every store module that opens a transaction, and the URL checks, call ``transaction``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from monitor.core.errors import StoreError
from monitor.store.db import redact

__all__ = ["transaction"]

T = TypeVar("T")


def transaction(engine: Engine, work: Callable[[Connection], T], *, attempts: int = 3) -> T:
    """Run ``work`` in one transaction, retrying transient errors a bounded number of times."""
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except IntegrityError:
            raise
        except OperationalError as exc:
            transient = _transient(exc)
            if not transient or attempt == attempts:
                raise StoreError(
                    f"database {redact(str(engine.url))}: {_first_line(exc)}"
                ) from exc
            time.sleep(0.2 * 2**attempt)
        except DBAPIError as exc:
            if not exc.connection_invalidated or attempt == attempts:
                raise StoreError(
                    f"database {redact(str(engine.url))}: {_first_line(exc)}"
                ) from exc
    raise AssertionError("unreachable")


def _transient(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    return exc.connection_invalidated or any(
        word in text for word in ("locked", "busy", "could not serialize", "deadlock",
                                  "connection", "terminating")
    )


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [orig.__class__.__name__])[0]
