"""The CLI run as a user runs it, in a child process, with that child's own peak memory.

VmHWM of the child's address space, printed by the child as it exits. Not ``ru_maxrss`` of
RUSAGE_CHILDREN: that is the largest of every child this pytest process has waited for, and a
child's ru_maxrss starts at the size of the process it was forked from (pytest's, after earlier
tests grew it). The test process never holds what the child reads.
"""

from __future__ import annotations

import subprocess
import sys

_MAIN_WITH_PEAK = (
    "import re, sys; from monitor.cli.commands import main; code = main(); "
    "status = open('/proc/self/status').read(); "
    "print('peak-kib', re.search(r'VmHWM:\\s*(\\d+)', status)[1], file=sys.stderr); "
    "sys.exit(code)"
)


def run_cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """``sitemap-monitor ARGS`` in a child process: the finished process and its peak in MiB."""
    proc = subprocess.run([sys.executable, "-c", _MAIN_WITH_PEAK, *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert last.startswith("peak-kib "), proc.stderr[-2000:]
    return proc, int(last.removeprefix("peak-kib ")) / 1024
