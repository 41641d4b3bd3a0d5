"""W1's first check and its re-checks in instructions (callgrind), which repeat where seconds
do not.

    .venv-bench/bin/python tests/benchmarks/instructions.py [--database sqlite|postgres]
        [--pattern one|percent|every]...

On a shared machine two runs of the same check differ in CPU seconds by 10-40%, enough to hide
any change to a re-check's ratio to its first check (issue 27's targets are such ratios). Here
each check runs once under valgrind's callgrind, in one process
(``SITEMAP_MONITOR_PARSE_WORKERS=0``: a worker process would be another program to count), and
the figure is the instructions that process executed: the same code gives the same count within
a fraction of a percent. A check under callgrind runs about 50 times slower, so its target's
timeouts are an hour (the default 30 s would end some fetches, and the comparison with them).
The patterns are ``recheck.py``'s, each after its own first check into a fresh database.

Instructions are not seconds: a cache miss or a system call counts as one. The figures say
whether the code does more or less, not how long a check takes; a first check's split over
two processes, the database server's work and the HTTP server's are not in them.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
import recheck
import workloads
from harness import child_env, database, monitor_cli, serve

_COLLECTED = re.compile(r"Collected : ([0-9]+)")
# An hour for a document and a day for the check: callgrind's pace, not a server's.
CONFIG = """\
defaults:
  timeout: 1h
  read_timeout: 1h
  connect_timeout: 1h
  check_timeout: 24h
  allow_private: true
targets:
  - name: w1
    url: {url}
"""


def callgrind(argv: list[str], out: Path | str = "/dev/null",
              env: dict[str, str] | None = None) -> tuple[int, str]:
    """``argv`` run under callgrind: the instructions it executed and its standard output;
    the benchmark ends, with the program's last words, if it fails."""
    done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                          capture_output=True, text=True, check=False, env=env)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        print(f"!! exit {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
        sys.exit(1)
    return int(found.group(1)), done.stdout


def instructions(db: harness.Database, config: Path, out: Path) -> tuple[int, dict[str, object]]:
    """One ``check w1`` under callgrind: the instructions it executed and its JSON."""
    count, stdout = callgrind(
        [monitor_cli(), "check", "w1", "--config", str(config), "--database-url", db.url,
         "--json"], out, child_env(SITEMAP_MONITOR_PARSE_WORKERS="0"))
    result: dict[str, object] = json.loads(stdout)
    if result.get("urls") != recheck.EXPECTED:
        print(f"!! {result.get('urls')} URLs, want {recheck.EXPECTED}", file=sys.stderr)
        sys.exit(1)
    return count, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pattern", choices=["one", "percent", "every"], action="append")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep callgrind's output files here (callgrind_annotate reads them)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    workloads.ensure("W1", args.data_dir)
    recheck.ensure_overlays(args.data_dir)
    print(f"sitemap-monitor {harness.commit()}, {args.database}", flush=True)
    rows = []
    with serve(args.data_dir, "w1") as server, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "monitor.yaml"
        config.write_text(CONFIG.format(url=f"{server.origin}/w1/sitemap_index.xml"))
        for pattern in args.pattern or ["every", "percent"]:
            variant, expect = recheck.PATTERNS[pattern]
            with database(args.database) as db:
                harness.upgrade(db)
                server.variant("base")
                first, _ = instructions(db, config, Path(tmp) / "first.out")
                server.variant(variant)
                try:
                    again, result = instructions(db, config, Path(tmp) / f"{pattern}.out")
                finally:
                    server.variant("base")
            if result.get("changed") != expect:
                sys.exit(f"!! {pattern}: {result.get('changed')} changed, want {expect}")
            rows.append((pattern, first, again))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                for name in ("first.out", f"{pattern}.out"):
                    shutil.copy(Path(tmp) / name, args.keep / f"{args.database}-{pattern}-{name}")
            print(f"{pattern}: first {first:,}, re-check {again:,}", flush=True)
    print("| W1 re-check | first check, M instructions | re-check | / first check's |")
    print("|---|---|---|---|")
    for pattern, first, again in rows:
        print(f"| {pattern}, {args.database} | {first / 1e6:,.0f} | {again / 1e6:,.0f} "
              f"| {again / first:.3f}x |")


if __name__ == "__main__":
    main()
