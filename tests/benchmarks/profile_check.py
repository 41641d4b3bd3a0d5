"""Profile one ``sitemap-monitor`` command in-process with pyinstrument and list the hotspots.

``python profile_check.py OUT_PREFIX -- check URL --database-url DB --json`` writes
OUT_PREFIX.html (the full call tree) and prints one JSON object: the total, the top functions by
self time, and the project's own functions by inclusive time.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import defaultdict
from typing import Any


def _walk(
    frame: Any,
    stack: frozenset[tuple[str, str]],
    self_time: dict[Any, float],
    inclusive: dict[Any, float],
) -> None:
    key = (frame.function, frame.file_path_short or "?")
    self_time[key] += frame.total_self_time
    if key not in stack:  # count a recursive function's time once
        inclusive[key] += frame.time
        stack = stack | {key}
    for child in frame.children:
        _walk(child, stack, self_time, inclusive)


def main(argv: list[str]) -> None:
    """Run the CLI under the profiler and print the summary."""
    from pyinstrument import Profiler

    from monitor import cli

    out_prefix, args = argv[0], argv[argv.index("--") + 1 :]
    profiler = Profiler(interval=0.001)
    captured = io.StringIO()
    code: object = 0
    profiler.start()
    try:
        with contextlib.redirect_stdout(captured):
            code = cli.main(args)
    except SystemExit as exc:
        code = exc.code
    finally:
        profiler.stop()
    session = profiler.last_session
    assert session is not None
    with open(f"{out_prefix}.html", "w") as fh:
        fh.write(profiler.output_html())
    with open(f"{out_prefix}.txt", "w") as fh:
        fh.write(profiler.output_text(unicode=False, color=False, show_all=False))
    root = session.root_frame()
    self_time: dict[Any, float] = defaultdict(float)
    inclusive: dict[Any, float] = defaultdict(float)
    if root is not None:
        _walk(root, frozenset(), self_time, inclusive)
    total = session.duration or 1e-9

    def top(table: dict[Any, float], n: int, only_ours: bool = False) -> list[dict[str, Any]]:
        rows = sorted(table.items(), key=lambda kv: -kv[1])
        if only_ours:
            rows = [kv for kv in rows if "monitor" in kv[0][1] and "site-packages" not in kv[0][1]]
        return [
            {
                "function": f,
                "module": m,
                "seconds": round(t, 3),
                "percent": round(100 * t / total, 1),
            }
            for (f, m), t in rows[:n]
        ]

    print(
        json.dumps(
            {
                "exit_code": code,
                "seconds": round(total, 3),
                "self": top(self_time, 20),
                "ours_inclusive": top(inclusive, 20, only_ours=True),
                "cli_stdout_head": captured.getvalue()[:300],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
