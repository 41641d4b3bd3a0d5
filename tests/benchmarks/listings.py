"""The listings of 500,000 rows: peak memory, time to the first byte, time to the end.

    .venv/bin/python tests/benchmarks/listings.py [--database sqlite|postgres]
        [--pattern removed|changed]

W1 (10 x 50,000 URLs) is checked once, then again with its index listing one child of one URL:
500,000 removals; or (``--pattern changed``) again with every lastmod a year on (recheck.py's
``w1every``): 500,000 changed entries, which the store keeps as packs (monitor.codec.changepacks).
Each listing then runs as a user runs it, ``sitemap-monitor LISTING ... --format F`` in a child
process whose stdout this process reads and counts: ``urls`` at the first snapshot, ``changes
--kind removed`` (or ``changed``) and ``diff`` between the two, in CSV, NDJSON, JSON and a
table. Printed per run: rows, the child's peak RSS (VmHWM), seconds to its first byte and to its
end. Not a test: figures, to quote.
"""

from __future__ import annotations

import argparse
import http.server
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import harness
import workloads
from harness import child_env, database

_MAIN_WITH_PEAK = (
    "import re, sys; from monitor.cli.commands import main; code = main(); sys.stdout.flush(); "
    "status = open('/proc/self/status').read(); "
    "print('peak-kib', re.search(r'VmHWM:\\s*(\\d+)', status)[1], file=sys.stderr); "
    "sys.exit(code)"
)
URLS = workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD


def _site(data_dir: Path, folder: Path, port: int) -> None:
    """W1 with the real port in its URLs, and an ``after`` index of one child of one URL."""
    real = f"127.0.0.1:{port}".encode()
    for path in (data_dir / "w1").iterdir():
        (folder / path.name).write_bytes(path.read_bytes().replace(workloads.PLACEHOLDER, real))
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
    (folder / "one.xml").write_text(
        f'<urlset xmlns="{ns}"><url><loc>http://127.0.0.1:{port}/w1/one</loc></url></urlset>')
    (folder / "after.xml").write_text(
        f'<sitemapindex xmlns="{ns}"><sitemap><loc>http://127.0.0.1:{port}/w1/one.xml</loc>'
        "</sitemap></sitemapindex>")


class _Handler(http.server.SimpleHTTPRequestHandler):
    index = "sitemap_index.xml"

    def translate_path(self, path: str) -> str:
        name = path.rsplit("/", 1)[-1]
        return str(Path(self.directory) / (_Handler.index if name == "sitemap_index.xml"
                                           else name))

    def log_message(self, format: str, *args: object) -> None:
        pass


def _run(argv: list[str]) -> tuple[int, float, float, float, int]:
    """Rows (lines), peak MiB, seconds to the first byte and to the end of one listing."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _MAIN_WITH_PEAK, *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    assert proc.stdout is not None
    assert proc.stderr is not None
    first = proc.stdout.read(1)
    first_byte = time.perf_counter() - started
    lines = first.count(b"\n")
    size = len(first)
    while chunk := proc.stdout.read(1 << 16):
        lines += chunk.count(b"\n")
        size += len(chunk)
    err = proc.stderr.read().decode()
    proc.wait()
    total = time.perf_counter() - started
    peak = re.search(r"peak-kib (\d+)", err)
    assert proc.returncode == 0, err[-2000:]
    assert peak, err[-2000:]
    return lines, int(peak[1]) / 1024, first_byte, total, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pattern", choices=["removed", "changed"], default="removed")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    args = parser.parse_args()
    workloads.ensure("W1", args.data_dir)
    if args.pattern == "changed":
        import recheck

        recheck.ensure_overlays(args.data_dir)
    with tempfile.TemporaryDirectory(prefix="sm-listings-") as tmp, database(args.database) as db:
        folder = Path(tmp)
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), lambda *a: _Handler(*a, directory=tmp))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _site(args.data_dir, folder, server.server_address[1])
        url = f"http://127.0.0.1:{server.server_address[1]}/w1/sitemap_index.xml"
        cli = harness.monitor_cli()
        common = ["--database-url", db.url]
        if args.database == "postgres":
            subprocess.run([cli, "db", "upgrade", *common], check=True, capture_output=True)
        # A day newer than the first index, so the second check does not get a 304.
        os.utime(folder / "after.xml", (time.time() + 86400, time.time() + 86400))
        for step in ("sitemap_index.xml", "after.xml"):
            if args.pattern == "changed" and step == "after.xml":
                step = "sitemap_index.xml"  # the same names, every lastmod a year on
                real = f"127.0.0.1:{server.server_address[1]}".encode()
                for path in (args.data_dir / "w1every").glob("*.xml"):
                    (folder / path.name).write_bytes(
                        path.read_bytes().replace(workloads.PLACEHOLDER, real))
                    os.utime(folder / path.name, (time.time() + 86400, time.time() + 86400))
            _Handler.index = step
            done = subprocess.run([cli, "check", url, *common], capture_output=True, text=True,
                                  env=child_env(), check=False)
            print(done.stdout.splitlines()[0])
        print(f"{'listing':44} {'format':7} {'rows':>8} {'MiB':>7} {'first s':>8} "
              f"{'total s':>8} {'MB out':>7}")
        listings = [("urls --at 1", ["urls", url, "--at", "1"], URLS),
                    ("changes --kind removed", ["changes", url, "--kind", "removed"], URLS),
                    ("diff --from 1 --to 2", ["diff", url, "--from", "1", "--to", "2"],
                     URLS + 1)]
        if args.pattern == "changed":
            listings[1] = ("changes --kind changed", ["changes", url, "--kind", "changed"],
                           URLS)
            listings[2] = ("diff --from 1 --to 2", ["diff", url, "--from", "1", "--to", "2"],
                           URLS)
        for name, argv, expected in listings:
            for fmt in ("csv", "ndjson", "json", "table"):
                lines, peak, first, total, size = _run([*argv, *common, "--format", fmt])
                rows = {"csv": lines - 1, "ndjson": lines, "json": expected,
                        "table": lines - 1}[fmt]
                print(f"{name:44} {fmt:7} {rows:>8} {peak:>7.1f} {first:>8.2f} {total:>8.2f} "
                      f"{size / 1e6:>7.1f}")
        server.shutdown()


if __name__ == "__main__":
    main()
