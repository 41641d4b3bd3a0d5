"""Profile one ``sitemap-monitor`` command with py-spy (every thread) and list the hotspots.

``python profile_check.py OUT_PREFIX -- check URL --database-url DB --json`` writes
OUT_PREFIX.txt (collapsed stacks: load it into speedscope.app or flamegraph.pl) and prints one
JSON object: the top functions by self time and the project's functions by inclusive time, each
as a share of the samples in which a thread was busy. py-spy rather than pyinstrument because
the pipeline parses and writes in worker threads, which pyinstrument does not see.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# A collapsed frame: "function (path/to/module.py:LINE)".
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


# Leaves where a thread waits in C without py-spy noticing: an idle pool worker in queue.get, the
# event loop in epoll, a lock or condition wait. Counting them would drown the real hotspots.
_IDLE_LEAVES = {
    ("_worker", "concurrent/futures/thread.py"),
    ("EpollSelector.select", "selectors.py"),
    ("_PollLikeSelector.select", "selectors.py"),  # EpollSelector's select on Python 3.11
    ("Condition.wait", "threading.py"),
    ("Event.wait", "threading.py"),
    ("Thread._wait_for_tstate_lock", "threading.py"),
}


_CHECKOUT = Path(__file__).resolve().parents[2]  # this checkout, wherever it is


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", f"{_CHECKOUT}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def summarise(collapsed: str) -> dict[str, Any]:
    """Self and inclusive sample shares per (function, module) from py-spy's raw output."""
    self_counts: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    total = idle = 0
    for line in collapsed.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = []
        for raw in stack.split(";"):
            match = _FRAME.match(raw.strip())
            if match:
                frames.append((match["function"], _short(match["file"])))
            else:
                frames.append((raw.strip(), "?"))
        if not frames or frames[-1] in _IDLE_LEAVES:
            idle += count
            continue
        total += count
        self_counts[frames[-1]] += count
        for key in set(frames):
            inclusive[key] += count
    total = total or 1

    def rows(counter: Counter[tuple[str, str]], ours: bool) -> list[dict[str, Any]]:
        items = [
            (k, v)
            for k, v in counter.most_common()
            if not ours or (k[1].startswith("monitor/") and "process " not in k[0])
        ]
        return [
            {"function": f, "module": m, "percent": round(100 * v / total, 1)}
            for (f, m), v in items[:25]
        ]

    return {
        "samples": total,
        "idle_samples": idle,
        "self": rows(self_counts, False),
        "ours": rows(inclusive, True),
    }


def main(argv: list[str]) -> None:
    """Run the CLI under py-spy and print the summary as JSON."""
    out_prefix, args = argv[0], argv[argv.index("--") + 1 :]
    bin_dir = Path(sys.executable).parent
    raw = Path(f"{out_prefix}.txt")
    done = subprocess.run(
        [str(bin_dir / "py-spy"), "record", "--format", "raw", "--function", "--rate", "250",
         "--output", str(raw), "--", str(bin_dir / "sitemap-monitor"), *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if not raw.exists():
        print(json.dumps({"error": done.stderr[-2000:]}))
        return
    summary = summarise(raw.read_text())
    summary["exit_code"] = done.returncode
    summary["collapsed"] = str(raw)
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
