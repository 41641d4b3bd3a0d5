"""One W1 child's parse alone, in instructions (callgrind): the streaming parser without the
validation and the digest around it.

    .venv/bin/python tests/benchmarks/parse_instructions.py [--workload W1|W1H] [--child N]

``monitor.read.parse.DocumentParser`` is fed the child in the chunks a digest feeds it, its
batches taken after each chunk as a digest takes them, with the cycle collector off as in a
digest worker. Two runs under callgrind (the imports alone; the imports and the parse) give the
parse's instructions by subtraction. W1H's children carry hreflang links on every URL, which
W1's do not (a tenth of its URLs have an image). About a minute for W1 here, four for W1H.
To count an earlier commit, run it with ``PYTHONPATH`` set to an export of that commit's tree.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
from pathlib import Path

_CHUNK = 256 * 1024  # monitor.read.digest's


def _parse(path: Path, upto: str) -> None:
    """The measured program: import, then parse unless ``upto`` says only the imports."""
    from monitor.read.parse import DocumentParser

    gc.disable()  # as a digest worker runs
    if upto == "imports":
        return
    body = path.read_bytes()
    parser = DocumentParser(str(path), max_bytes=1 << 30, max_urls=10**7, max_children=10**5)
    count = 0
    for start in range(0, len(body), _CHUNK):
        parser.feed(body[start : start + _CHUNK])
        count += len(parser.take_batch()[0])
    document = parser.close()
    count += len(parser.take_batch()[0])
    if document.failure is not None or count == 0:
        sys.exit(f"!! {path}: {document.failure or 'no entries'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["W1", "W1H"], default="W1")
    parser.add_argument("--child", type=int, default=1, choices=range(1, 11))
    parser.add_argument("--measured", choices=["imports", "parse"],
                        help=argparse.SUPPRESS)  # the program under callgrind
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import workloads
    from instructions import callgrind

    data = workloads.folder(args.workload, workloads.default_data_dir())
    path = workloads.w1_child_files(data)[args.child - 1]
    if args.measured:
        _parse(path, args.measured)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    workloads.ensure(args.workload, data)
    common = ["--workload", args.workload, "--child", str(args.child), "--measured"]
    imports, parse = (callgrind([sys.executable, __file__, *common, upto])[0]
                      for upto in ("imports", "parse"))
    print(f"{args.workload} child {args.child}: parse {(parse - imports) / 1e6:,.1f} M "
          "instructions")


if __name__ == "__main__":
    main()
