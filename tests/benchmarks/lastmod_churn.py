"""W1's re-check after every lastmod changed, by an earlier commit and by this checkout, alternated.

    .venv/bin/python tests/benchmarks/lastmod_churn.py REV [--rounds N] [--database sqlite|postgres]

The re-check that SPEC 12's lastmod counts and ``lastmod-regressed`` run in: every one
of W1's 500,000 lastmods moves a year on (W1 with each ``<lastmod>YYYY`` as YYYY+1, all still in
the past), so every URL is a ``changed`` change and every lastmod is compared. Each round, each
side: a fresh database, W1's first check (not timed), the switch to the bumped copy, and the
re-check, timed (wall and the process tree's CPU, ``measure.run``). The sides run as in
``versus.py`` (the earlier commit's ``monitor`` and ``migrations`` from ``git archive``). The
files are served by ``python -m http.server`` from a folder whose ``w1`` link is switched: the
bumped copy is written after W1's, so its Last-Modified is later and the re-check gets a 200.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import harness
import measure
import workloads
from harness import child_env, database
from versus import _RUN, EXPECTED, _unpack

_YEAR = re.compile(rb"<lastmod>([0-9]{4})")


def _copies(data_dir: Path, root: Path, port: int) -> tuple[Path, Path]:
    """W1 as served on ``port`` (``base``), then with every lastmod a year later (``bumped``,
    written second: its Last-Modified is the later)."""
    base, bumped = root / "base", root / "bumped"
    for out in (base, bumped):
        out.mkdir()
        for path in sorted((data_dir / "w1").iterdir()):
            data = path.read_bytes().replace(workloads.PLACEHOLDER, f"127.0.0.1:{port}".encode())
            if out is bumped:
                data = _YEAR.sub(lambda m: b"<lastmod>%d" % (int(m.group(1)) + 1), data)
            (out / path.name).write_bytes(data)
        time.sleep(1.1)  # Last-Modified has whole seconds
    return base, bumped


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _point(link: Path, target: Path) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _check(side: str, tree: str, url: str, db_url: str, cwd: str) -> measure.Measurement:
    argv = [sys.executable, "-c", _RUN, tree, "check", url, "--database-url", db_url, "--json"]
    m = measure.run(side, argv, env=child_env(PYTHONPATH=tree), cwd=cwd)
    urls = json.loads(m.stdout or "{}").get("urls") if m.returncode == 0 else None
    if urls != EXPECTED:
        print(f"!! {side}: exit {m.returncode}, urls {urls}: {m.stderr[-2000:]}",
              file=sys.stderr)
        sys.exit(1)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    args = parser.parse_args()
    workloads.ensure("W1", args.data_dir)
    walls: dict[str, list[float]] = {args.rev: [], "this": []}
    cpus: dict[str, list[float]] = {args.rev: [], "this": []}
    with (tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as empty,
          tempfile.TemporaryDirectory() as root):
        _unpack(args.rev, Path(tmp))
        trees = {args.rev: tmp, "this": str(harness.ROOT)}
        port = _free_port()
        base, bumped = _copies(args.data_dir, Path(root), port)
        link = Path(root) / "w1"
        _point(link, base)
        server = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1",
             "--directory", root], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=child_env())
        try:
            assert server.stdout is not None
            server.stdout.readline()  # "Serving HTTP on ...": it listens
            url = f"http://127.0.0.1:{port}/w1/sitemap_index.xml"
            with urllib.request.urlopen(url, timeout=10):
                pass
            for round_number in range(1, args.rounds + 1):
                for side, tree in trees.items():
                    with database(args.database) as db:
                        _point(link, base)
                        _check(f"first-{side}", tree, url, db.url, empty)
                        _point(link, bumped)
                        time.sleep(0.2)
                        m = _check(f"recheck-{side}", tree, url, db.url, empty)
                    changed = json.loads(m.stdout)["changed"]
                    assert changed == EXPECTED, changed
                    walls[side].append(m.wall)
                    cpus[side].append(m.tree_cpu)
                    print(f"round {round_number} {side:>8}: re-check wall {m.wall:.2f} s, "
                          f"cpu {m.cpu:.2f} s (tree {m.tree_cpu:.2f} s), peak "
                          f"{m.tree_rss_mb:.0f} MB, {changed} changed", flush=True)
        finally:
            server.terminate()
            server.wait()
    print(f"W1, every lastmod changed, re-check [{args.database}], {args.rounds} rounds "
          "alternated:")
    for side in walls:
        print(f"  {side:>8}: wall median {statistics.median(walls[side]):.2f} s, fastest "
              f"{min(walls[side]):.2f} s; tree CPU median {statistics.median(cpus[side]):.2f} s")
    before, after = statistics.median(walls[args.rev]), statistics.median(walls["this"])
    print(f"  this / {args.rev}: {after / before:.3f} (median wall)")


if __name__ == "__main__":
    main()
