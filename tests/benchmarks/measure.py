"""Run one command in its own process and measure it: wall, CPU (user+sys) and peak RSS.

``os.wait4`` returns the rusage of exactly that child (and of the descendants it waited for), so
``ru_maxrss`` is that run's peak and not the cumulative maximum of every child so far.

A run that starts worker processes of its own (sitemap-monitor parses big documents in a
pool) is measured as a process tree too: while it runs, its descendants are sampled from /proc
every 20 ms, and their memory every third sample. ``tree_cpu`` adds each descendant's CPU as
last sampled (it can miss a last few ms and over-counts a descendant the root reaped itself);
``tree_rss_mb`` is the highest sum of the proportional set sizes (PSS: a page shared by N
processes counts 1/N in each) of the whole tree at one sample: what a pod's memory limit sees,
shared pages counted once.

The sampling itself must stay cheap: it runs beside the measured run on the same two cores.
Reading every process's stat to find the descendants, and every descendant's PSS (the kernel
walks its pages), took 5.7 ms of CPU per sample during W1's first check, 28% of a core taken
from a run that uses both; the descendants now come from each task's ``children`` file, and
PSS every 60 ms: about 0.9 ms per sample.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Measurement:
    """What one run cost and what it printed."""

    name: str
    argv: list[str]
    returncode: int
    wall: float
    cpu: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    extra: dict[str, Any] = field(default_factory=dict)
    tree_cpu: float = 0.0
    tree_rss_mb: float = 0.0
    processes: int = 1


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root``: from its tasks' ``children`` files, down the tree,
    or, on a kernel without them, from each process's parent in /proc/*/stat."""
    if not Path(f"/proc/{root}/task/{root}/children").exists():
        return _descendants_by_parent(root)
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                out.append(child)
                todo.append(child)
    return out


def _descendants_by_parent(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parents.get(pid, [])
    return out


def _kib(path: str, key: str) -> int:
    """The kB figure of the line ``key`` of a /proc file (0 once the process is gone)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """Proportional set size: pages shared between the processes count once in the sum."""
    return _kib(f"/proc/{pid}/smaps_rollup", "Pss:")


def hwm_kb(pid: int) -> int:
    """A process's peak RSS so far (VmHWM: its own, since its exec)."""
    return _kib(f"/proc/{pid}/status", "VmHWM:")


class _Tree:
    """Samples of a running process tree: descendants' CPU and the peak of the summed PSS."""

    MEMORY_EVERY = 3  # samples: PSS is the costly read

    def __init__(self, root: int) -> None:
        self.root = root
        self.cpu: dict[int, float] = {}
        self.peak_kb = 0
        self.samples = 0
        self.hwm_kb = 0  # the root's own high-water RSS (VmHWM), read while it runs

    def sample(self) -> None:
        self.hwm_kb = max(self.hwm_kb, hwm_kb(self.root))
        pids = _descendants(self.root)
        for pid in pids:
            cpu = proc_cpu_seconds(pid)
            if cpu:
                self.cpu[pid] = max(cpu, self.cpu.get(pid, 0.0))
        if self.samples % self.MEMORY_EVERY == 0:
            total = _pss_kb(self.root) + sum(map(_pss_kb, pids))
            self.peak_kb = max(self.peak_kb, total)
        self.samples += 1


def proc_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a running process, from /proc (for the server's share)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    # Fields after the comm: state is [0], utime [11], stime [12].
    return (int(fields[11]) + int(fields[12])) / ticks


def postgres_cpu_seconds() -> float:
    """CPU seconds spent by the local PostgreSQL server so far: the database's share of a check.

    The server is not our child, so its work never shows in our rusage. Live processes count
    their own time; backends that have exited count through the postmaster's reaped-children
    time. Machine-wide, so other clients of the same server count too.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = set()
    stats = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "postgres":
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pids.add(proc.name)
        stats[proc.name] = fields
    for fields in stats.values():
        total += (int(fields[11]) + int(fields[12])) / ticks
        if fields[1] not in pids:  # the postmaster: add its reaped backends' time
            total += (int(fields[13]) + int(fields[14])) / ticks
    return total


def run(
    name: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800.0,
    cwd: str | None = None,
    stdin: Path | None = None,
) -> Measurement:
    """Run ``argv`` to completion and measure it; stdout/stderr are captured to temp files,
    and stdin comes from the file ``stdin`` if given (else it is inherited)."""
    out_path = Path(f"/tmp/bench-{os.getpid()}-{name.replace(' ', '_')}.out")
    err_path = out_path.with_suffix(".err")
    with (
        out_path.open("wb") as out,
        err_path.open("wb") as err,
        stdin.open("rb") if stdin else contextlib.nullcontext() as source,
    ):
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=source, stdout=out, stderr=err, env=env, cwd=cwd)
        deadline = started + timeout
        tree = _Tree(proc.pid)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            tree.sample()
            time.sleep(0.02)
        wall = time.perf_counter() - started
    # Popen must not wait for a pid we have already reaped.
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    cpu = usage.ru_utime + usage.ru_stime
    # wait4's ru_maxrss is at least the RSS this process had when it forked the child (Linux
    # carries the high-water mark across fork and exec): a harness that had just generated a
    # workload made its check "peak" at the harness's 527 MB. The child's own VmHWM, sampled
    # while it ran, does not inherit it; ru_maxrss serves a child too quick to be sampled.
    peak = (tree.hwm_kb or usage.ru_maxrss) / 1024  # Linux reports kilobytes
    return Measurement(
        name=name,
        argv=argv,
        returncode=proc.returncode,
        wall=wall,
        cpu=cpu,
        peak_rss_mb=peak,
        stdout=stdout,
        stderr=stderr,
        tree_cpu=cpu + sum(tree.cpu.values()),
        tree_rss_mb=max(peak, tree.peak_kb / 1024),
        processes=1 + len(tree.cpu),
    )
