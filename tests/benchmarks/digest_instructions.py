"""One W1 child's first digest and its re-read, in instructions (callgrind), without the rest
of a check.

    .venv-bench/bin/python tests/benchmarks/digest_instructions.py [--pattern every|percent]
        [--child N]

``instructions.py`` counts a whole check, whose count moves by up to 2% with the machine's
load (the sockets' reads come in other sizes, the event loop turns another number of times).
Here ``monitor.read.digest.digest`` runs in one process, as a worker runs it (the cycle collector
off), on the bytes of one child: three runs under callgrind (the imports alone; they and the
first digest; they, the first digest and the re-read of the pattern's version of the child
against the stored set the first made) give each digest's instructions by subtraction. The
same code gives the same counts within a few million. About 4 minutes here.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

_URL = "http://127.0.0.1:00000/w1/sitemap-01.xml"  # never fetched: it names the document
_NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _digests(base: Path, again: Path, upto: str) -> None:
    """The measured program: import, then digest as far as ``upto`` says."""
    from monitor.read import digest

    gc.disable()  # as a digest worker runs (monitor.read.digest._worker_start)

    def job(body: bytes, previous: bytes | None = None) -> digest.Job:
        return digest.Job(url=_URL, now=_NOW, max_bytes=1 << 30, max_urls=10**7,
                          max_children=10**5, body=body, previous=previous,
                          base_id=None if previous is None else 1,
                          baseline=previous is None, fingerprints=True)

    if upto == "imports":
        return
    first = digest.digest(job(base.read_bytes()))
    if upto == "again":
        found = digest.digest(job(again.read_bytes(), first.data))
        if not found.row_counts:
            sys.exit("!! the re-read found no change")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", choices=["every", "percent"], default="every")
    parser.add_argument("--child", type=int, default=1, choices=range(1, 11))
    parser.add_argument("--measured", choices=["imports", "first", "again"],
                        help=argparse.SUPPRESS)  # the program under callgrind
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import recheck
    import workloads
    from instructions import callgrind

    data = workloads.default_data_dir()
    name = f"sitemap-{args.child:02d}.xml"
    base, again = data / "w1" / name, data / recheck.PATTERNS[args.pattern][0] / name
    if args.measured:
        _digests(base, again, args.measured)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    workloads.ensure("W1", data)
    recheck.ensure_overlays(data)
    common = ["--pattern", args.pattern, "--child", str(args.child), "--measured"]
    imports, first, both = (callgrind([sys.executable, __file__, *common, upto])[0]
                            for upto in ("imports", "first", "again"))
    digest_first, reread = first - imports, both - first
    print(f"W1 child {args.child}, {args.pattern}: first digest {digest_first / 1e6:,.0f} M, "
          f"re-read {reread / 1e6:,.0f} M instructions, {reread / digest_first:.3f}x")


if __name__ == "__main__":
    main()
