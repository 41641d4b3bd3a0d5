"""What a process that digests sets up: glibc's allocator tuned, and workers that end with us.

Runtime, not logic: nothing here knows what a sitemap is. The daemon and ``check`` call
``return_big_buffers`` once at start; each worker process of ``workers.DigestPool`` runs
``worker_start``; the daemon calls ``return_freed_memory`` when a flood of connections to its
port has ended. Light imports only: the forkserver preloads the digest and forks every worker
from itself.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Returned", "return_big_buffers", "return_freed_memory", "worker_start"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt() parameters
# Over the 256 KiB asked for by each socket read of asyncio (its transports' max_size) and each
# read of a body from its file (the digest's batches): those come and go by the thousand and
# are best served from the heap (see return_big_buffers).
_MMAP_THRESHOLD = 320 * 1024
_TRIM_THRESHOLD = 1 << 20  # free memory kept at the heap's top: such a buffer, freed there, stays


def return_big_buffers() -> None:
    """Have glibc hand big freed buffers (entry sets, joined columns) back to the system, and
    keep this process's heap in one arena.

    glibc serves a request over its mmap threshold with a mapping of its own, unmapped on free,
    but each such free raises the threshold to that size (up to 32 MiB): after a few documents,
    big buffers come from the heap and stay there, fragmented (about 10 MB of peak RSS on a
    96 MB index). Setting the threshold keeps it where it is. It is set just over the buffers
    that a fetch and a digest take and free by the thousand (``_MMAP_THRESHOLD``): at the
    default of 128 KiB, each of them was a mapping of its own, mapped, faulted in page by page
    and unmapped, a tenth of a big first check's CPU. The heap keeps up to ``_TRIM_THRESHOLD``
    free at its top (128 KiB by default), or such a buffer freed there would go back to the
    system each time.

    Each thread that allocates would get an arena of its own (up to 8 a core), each holding
    its own freed memory: this process's threads (the check's, the digests', the database's)
    take turns under the GIL, and one arena serves them. With the higher threshold alone, the
    peak of a big check grew by 5-10 MB; with one arena it is where it was.
    Elsewhere than glibc (musl, macOS) this does nothing.
    """
    glibc = _glibc()
    if glibc is None:
        return
    glibc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    glibc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    glibc.mallopt(_M_ARENA_MAX, 1)


@dataclass(frozen=True, slots=True)
class Returned:
    """What ``return_freed_memory`` did: the objects it freed, this process's resident memory
    in bytes before and after (None where /proc does not tell), and the seconds it took."""

    objects: int
    resident_before: int | None
    resident_after: int | None
    seconds: float


def return_freed_memory() -> Returned:
    """Free the objects that only reference cycles keep, then hand the free pages of glibc's
    heap back to the system: once, after many objects came and went at once.

    A closed asyncio transport refers to itself (a bound method it keeps, up to Python 3.11),
    so it and its socket objects wait for a full collection, which an idle process may not
    run for a long time: after 10,500 connections, ~15 MiB. What is freed then lies in the
    heap's middle, which glibc gives back only when asked (``malloc_trim``). Python's own
    allocator keeps each 1 MiB arena that still holds a live object; those stay, and serve
    the next such burst. The collection holds the GIL (0.1-0.2 s for 175,000 objects); the
    trim does not. Elsewhere than glibc, only the collection runs.
    """
    started = time.monotonic()
    before = _resident()
    objects = gc.collect()
    glibc = _glibc()
    if glibc is not None:
        glibc.malloc_trim(0)
    return Returned(objects, before, _resident(), round(time.monotonic() - started, 3))


@functools.cache
def _glibc() -> Any | None:
    """glibc, through ctypes; None elsewhere (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        glibc = ctypes.CDLL("libc.so.6")
        glibc.mallopt, glibc.malloc_trim  # noqa: B018 - both are glibc's: look them up now
    except (OSError, AttributeError):  # not glibc
        return None
    return glibc


def _resident() -> int | None:
    """This process's resident memory in bytes, where /proc tells."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def worker_start() -> None:
    """The start of a worker process that digests documents."""
    # The process that started the pool stops its workers (DigestPool.shutdown), or they end
    # with it (_exit_with_parent). A Ctrl-C in a terminal reaches every process of the job:
    # it killed them mid-document, breaking the pool that the daemon was about to close, each
    # with a traceback on the terminal. (Forked by the forkserver, a worker ignores it from its
    # start: monitor.read.preload. SIGTERM stays: it is how the pool ends a broken one.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker only digests: automatic garbage collection would walk the ~200,000 objects of
    # each document again and again for ~12% of its time, and a digest makes no reference
    # cycles. Workers are replaced every few documents all the same.
    gc.disable()
    return_big_buffers()
    _exit_with_parent()


def _exit_with_parent() -> None:
    """End this worker when the process that started the pool dies, however it dies.

    A worker waits on its task queue, whose pipe it holds both ends of, so a parent killed by
    SIGKILL (the OOM killer, a node drain) left it waiting for ever, and with it the
    forkserver (which lives while a worker holds its "alive" pipe) and the resource tracker
    (while anyone holds its pipe): about 55 MB a set. The worker's parent sentinel is a pipe
    only that process writes to, so it reads as closed once it has died; a thread here waits
    for that and ends the worker at once, whatever it was doing. The forkserver and the
    resource tracker then see their pipes close and exit by themselves. (PR_SET_PDEATHSIG
    would not do: a worker's parent is the forkserver, not the daemon.)
    """
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch(sentinel: int) -> None:
        wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, args=(parent.sentinel,), name="parent-watch",
                     daemon=True).start()
