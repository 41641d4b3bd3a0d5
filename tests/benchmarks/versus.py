"""W1's first check by an earlier commit and by this checkout, alternated in rounds.

    .venv/bin/python tests/benchmarks/versus.py REV [--rounds N] [--database sqlite|postgres]
        [--workload W1|W1H]

The earlier commit's ``monitor`` and ``migrations`` are taken out of git (``git archive``) into a
temporary directory; both sides run the same way (``python -c``, the package put first on
``sys.path`` and on ``PYTHONPATH`` for the parse workers), each into a fresh database, one after
the other in every round, so both meet the machine's drift alike. Prints every run and the
median and fastest of each side, and their ratio: "before and after, from one run".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
import measure
import workloads
from harness import child_env, database, serve

# The side's tree first on the path; its CLI's ``main``: ``monitor.cli.commands`` once the CLI
# is a package, ``monitor.cli`` (a module) before that.
_RUN = """
import importlib, importlib.util, sys
sys.path.insert(0, sys.argv.pop(1))
cli = importlib.import_module("monitor.cli")
if hasattr(cli, "__path__") and importlib.util.find_spec("monitor.cli.commands"):
    cli = importlib.import_module("monitor.cli.commands")
assert cli.__file__.startswith(sys.path[0]), cli.__file__
sys.exit(cli.main())
"""
EXPECTED = workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD


def _unpack(rev: str, folder: Path) -> None:
    archive = subprocess.run(["git", "-C", str(harness.ROOT), "archive", rev, "monitor",
                              "migrations"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder / "monitor")], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    parser.add_argument("--workload", choices=["W1", "W1H"], default="W1",
                        help="W1H: W1 with hreflang alternates and images (run.py's W1H)")
    args = parser.parse_args()
    args.data_dir = workloads.folder(args.workload, args.data_dir)
    workloads.ensure(args.workload, args.data_dir)
    walls: dict[str, list[float]] = {args.rev: [], "this": []}
    cpus: dict[str, list[float]] = {args.rev: [], "this": []}
    trees_cpu: dict[str, list[float]] = {args.rev: [], "this": []}
    with (tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as empty,
          serve(args.data_dir, "w1") as server):
        _unpack(args.rev, Path(tmp))
        trees = {args.rev: tmp, "this": str(harness.ROOT)}
        url = f"{server.origin}/w1/sitemap_index.xml"
        for round_number in range(1, args.rounds + 1):
            for side, tree in trees.items():
                with database(args.database) as db:
                    argv = [sys.executable, "-c", _RUN, tree, "check", url, "--database-url",
                            db.url, "--json"]
                    # PYTHONPATH as well, and an empty working directory: the parse workers'
                    # forkserver puts the working directory first on its path, then PYTHONPATH.
                    m = measure.run(f"first check {side}", argv, env=child_env(PYTHONPATH=tree),
                                    cwd=empty)
                urls = json.loads(m.stdout or "{}").get("urls") if m.returncode == 0 else None
                if urls != EXPECTED:
                    docs = json.loads(m.stdout or "{}").get("documents", [])
                    print(f"!! {side}: exit {m.returncode}, urls {urls}, documents "
                          f"{[(d['outcome'], d['error']) for d in docs]}: {m.stderr[-2000:]}",
                          file=sys.stderr)
                    sys.exit(1)
                walls[side].append(m.wall)
                cpus[side].append(m.cpu)
                trees_cpu[side].append(m.tree_cpu)
                print(f"round {round_number} {side:>8}: wall {m.wall:.2f} s, cpu {m.cpu:.2f} s "
                      f"(tree {m.tree_cpu:.2f} s), peak {m.tree_rss_mb:.0f} MB", flush=True)
    print(f"{args.workload} first check [{args.database}], {args.rounds} rounds alternated:")
    for side, values in walls.items():
        print(f"  {side:>8}: median {statistics.median(values):.2f} s, fastest {min(values):.2f} s"
              f"; CPU median {statistics.median(cpus[side]):.2f} s (tree "
              f"{statistics.median(trees_cpu[side]):.2f} s)")
    for name, figures in (("wall", walls), ("CPU", cpus), ("tree CPU", trees_cpu)):
        before, after = statistics.median(figures[args.rev]), statistics.median(figures["this"])
        print(f"  this / {args.rev}, {name}: {after / before:.3f} (median)")


if __name__ == "__main__":
    main()
