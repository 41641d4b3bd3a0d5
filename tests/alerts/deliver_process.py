"""A delivery process for the durability tests: runs a Deliverer until it is killed.

Usage: deliver_process.py DATABASE_URL HOOK_URL OWNER LEASE_SECONDS
Prints ``ready`` once running, then one line per delivery outcome (sent, retry, ...).
"""

from __future__ import annotations

import asyncio
import sys

import structlog

from monitor.alerts.delivery import Deliverer
from monitor.config import Channel, Delivery
from monitor.store.db import make_engine
from monitor.store.outbox import SqlOutbox


def main() -> None:
    """Deliver forever; the test ends this process with a signal."""
    url, hook_url, owner, lease = sys.argv[1:5]
    # stdout carries the outcomes the test reads; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    channel = Channel(name="hook", type="webhook", url=hook_url, secret="k",  # noqa: S106
                      timeout=60)
    deliverer = Deliverer(
        [channel], SqlOutbox(make_engine(url)), owner=owner,
        delivery=Delivery(initial_backoff=0.05, max_backoff=0.2),
        on_result=lambda _channel, outcome: print(outcome, flush=True),
        poll_interval=0.02, lease=float(lease),
    )
    print("ready", flush=True)
    asyncio.run(deliverer.run(asyncio.Event()))


if __name__ == "__main__":
    main()
