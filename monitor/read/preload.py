"""Imported by the forkserver of the digest workers alone (``workers.DigestPool`` preloads it),
never by the daemon or ``check``: from here on the forkserver ignores SIGINT, and so does every
worker it forks, from its first instruction.

A Ctrl-C in a terminal reaches every process of the job. The forkserver ignores SIGINT once it
serves, but forks each worker with the handlers it had before that; a worker that set its own
only in its initializer could still be interrupted while it started, a traceback on the
terminal and a broken pool. The process that started the pool stops its workers
(``DigestPool.shutdown``), or they end with it (``process._exit_with_parent``).
"""

from __future__ import annotations

import signal

__all__: list[str] = []

signal.signal(signal.SIGINT, signal.SIG_IGN)
