"""Where documents are digested: small ones in a thread, big ones in a pool of processes.

``DigestPool`` is made once by whoever runs checks (the daemon's wiring, the ``check``
command) and handed to each check; it holds the worker processes and the counts that decide
where the next big document goes. ``Spool`` holds a document's bytes as they arrive.

The pool starts when a second big document arrives: a lone one (a re-check where one child
changed) is digested here, as small ones are, since starting workers or a round trip to one
would cost more than it saves. Each worker and this process digest one big document at a
time; the next waits for whichever frees first, so that a sitemap index's children are parsed
on every core while the check fetches the next ones.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import BrokenExecutor
from typing import IO, TYPE_CHECKING

from monitor.core.errors import WorkerDied
from monitor.read import process
from monitor.read.digest import IN_PROCESS_MAX, Digest, Job, digest

# asyncio is imported where the calling side uses it: the forkserver preloads the digest and
# forks every worker from itself, and asyncio (with ssl, subprocess and the rest it loads) is
# 6.5 MB of each of those processes.
if TYPE_CHECKING:  # the pool's modules load only when a big document comes (start-up time)
    from asyncio import AbstractEventLoop, Semaphore
    from concurrent.futures import Future, ProcessPoolExecutor

__all__ = ["DigestPool", "Spool", "workers"]

_ENV = "SITEMAP_MONITOR_PARSE_WORKERS"
_TASKS_PER_WORKER = 20


def workers() -> int:
    """Worker processes for big documents: $SITEMAP_MONITOR_PARSE_WORKERS, else one fewer than
    the CPUs this process may use, at most 3 (this process digests too when they are busy)."""
    configured = os.environ.get(_ENV, "").strip()
    if configured:
        try:
            return max(0, int(configured))
        except ValueError:
            raise ValueError(f"{_ENV}={configured!r}: not a whole number") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return min(3, cpus - 1)


class DigestPool:
    """The worker processes that digest big documents, and where the next one goes.

    >>> pool = DigestPool(size=0)      # no workers: every document in a thread here
    >>> pool.started()
    False

    ``run`` digests a job; ``shutdown`` stops the workers (also registered at exit once they
    start).
    """

    def __init__(self, size: int | None = None) -> None:
        self.size = workers() if size is None else size
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._ready: Future[int] | None = None  # done once a worker answered: the pool is warm
        self.busy = 0  # digests submitted to the pool and not back yet
        self.inline = 0  # big documents being digested in a thread of this process
        self._big = 0  # big documents this process has received
        self._gate: tuple[AbstractEventLoop, Semaphore] | None = None  # see _slot
        self._starting: threading.Thread | None = None  # see warm

    def big_document(self) -> None:
        """A big document is arriving. The first is digested here; from the second on, this
        process has more than one to digest (an index's children, many targets) and the pool
        pays for its start-up: start it now, so that it is ready when the body has arrived."""
        self._big += 1
        if self._big >= 2:
            self.warm()

    def warm(self) -> None:
        """Start the pool in the background (starting worker processes blocks for a while)."""
        if self.size > 0 and self._pool is None:
            starting = threading.Thread(target=self._get_pool, name="digest-pool-start",
                                        daemon=True)
            self._starting = starting
            starting.start()

    def started(self) -> bool:
        """Whether the worker processes were started."""
        return self._pool is not None

    def shutdown(self) -> None:
        """Stop the worker processes (at exit: before the interpreter tears its modules down).
        A pool still starting in the background is waited for and stopped too: started just
        after, it would outlive the stop, and the process would exit without closing it (the
        resource tracker's "leaked semaphore objects")."""
        starting, self._starting = self._starting, None
        if starting is not None and starting is not threading.current_thread():
            starting.join()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    async def run(self, job: Job, *, here: bool = True) -> Digest:
        """Digest a document: small ones in a thread here, big ones in a worker process, or in a
        thread here while the pool is still starting or every worker is busy (this process is
        one more worker). ``here`` False: a big one goes to a worker all the same, however long
        it waits for one (the caller holds what grows with its index, and a digest of this
        process's own on top of it would be the peak)."""
        import asyncio  # here, not at the top: see the imports

        if job.path is None or self.size == 0:
            return await asyncio.to_thread(digest, job)
        async with self._slot():  # now a worker or this process is free (or the pool starting)
            warm_pool = self._ready is not None and self._ready.done()
            if here and self.inline == 0 and (self.busy >= self.size or not warm_pool):
                return await self._here(job)
            return await self._in_pool(job)

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                methods = multiprocessing.get_all_start_methods()
                context = multiprocessing.get_context(
                    "forkserver" if "forkserver" in methods else "spawn"
                )
                if "forkserver" in methods:
                    context.set_forkserver_preload(
                        ["monitor.read.preload", "monitor.read.digest", "monitor.read.process"])
                # The forkserver (or a spawned worker) is a `python -c`, which puts the working
                # directory first on its path: a `monitor` folder there would be what the
                # workers import. PYTHONSAFEPATH leaves it out; the workers inherit it.
                os.environ.setdefault("PYTHONSAFEPATH", "1")
                self._pool = ProcessPoolExecutor(
                    max_workers=self.size, mp_context=context, initializer=process.worker_start,
                    max_tasks_per_child=_TASKS_PER_WORKER,
                )
                self._ready = self._pool.submit(os.getpid)
                atexit.register(self.shutdown)
            return self._pool

    def _reset_pool(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    def _slot(self) -> Semaphore:
        """One slot per worker process and one for this process: a big document waits here for
        whichever frees first. Handed to the pool at once, it would wait in the pool's queue
        behind another while this process had nothing to digest."""
        import asyncio  # here, not at the top: see the imports

        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Semaphore(self.size + 1))
        return self._gate[1]

    async def _here(self, job: Job) -> Digest:
        import asyncio  # here, not at the top: see the imports

        self.inline += 1
        try:
            return await asyncio.to_thread(digest, job)
        finally:
            self.inline -= 1

    async def _in_pool(self, job: Job) -> Digest:
        import asyncio  # here, not at the top: see the imports

        self.busy += 1
        pool = None
        try:
            pool = await asyncio.to_thread(self._get_pool)  # may start it: not on the loop
            return await asyncio.get_running_loop().run_in_executor(pool, digest, job)
        except BrokenExecutor as exc:  # BrokenProcessPool
            if pool is not None:
                self._reset_pool(pool)
            raise WorkerDied(f"{job.url}: the worker process parsing it died") from exc
        finally:
            self.busy -= 1


class Spool:
    """A document's bytes as they arrive: in memory while small, then in a file of its own
    (which a worker process reads). ``on_big`` is called when it moves to a file."""

    def __init__(self, on_big: Callable[[], None] | None = None) -> None:
        self.data: bytearray | None = bytearray()
        self.path: str | None = None
        self._file: IO[bytes] | None = None
        self._on_big = on_big

    def write(self, chunk: bytes) -> None:
        if self.data is not None and len(self.data) + len(chunk) <= IN_PROCESS_MAX:
            self.data += chunk
            return
        if self._file is None:
            if self._on_big is not None:
                self._on_big()
            import tempfile  # here, not at the top: see the imports

            self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in finish/close)
                prefix="sitemap-monitor-", suffix=".body", delete=False
            )
            self.path = self._file.name
            assert self.data is not None
            self._file.write(self.data)
            self.data = None
        self._file.write(chunk)

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()

    def read(self) -> bytes:
        if self.path is None:
            return bytes(self.data or b"")
        with open(self.path, "rb") as file:
            return file.read()

    def close(self) -> None:
        self.finish()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None
