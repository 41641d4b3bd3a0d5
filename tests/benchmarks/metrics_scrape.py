"""/metrics of a daemon with many targets: series per target, scrape size, CPU.

    .venv/bin/python tests/benchmarks/metrics_scrape.py [--targets 20000]

Builds the daemon's Metrics for N targets, records one check of each as the scheduler does
(a few URLs, one document answered, two issue rules current, one change kind), then renders
the registry as a scrape does (``Metrics.exposition``) three times. Prints series per target,
the scrape's size, the CPU seconds of the best render and the RSS the registry takes. Not a
test: figures, to quote.
"""

from __future__ import annotations

import argparse
import resource
import time
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from monitor.core.model import CheckResult, DocumentResult
from monitor.observe.metrics import Metrics


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=20_000)
    args = parser.parse_args()
    names = [f"target-{i:05d}" for i in range(args.targets)]
    before = _rss_mib()
    started = time.process_time()
    registry = CollectorRegistry()
    metrics = Metrics(registry, names, ["ops"])
    metrics.set_intervals(dict.fromkeys(names, 300.0))
    now = datetime.now(UTC)
    for name in names:
        result = CheckResult(target=name, url=f"https://{name}.example/sitemap.xml",
                             outcome="ok", snapshot_id=1, started_at=now, duration_seconds=0.8,
                             urls=120, invalid=2, added=3, fetched_bytes=40_000,
                             documents=[DocumentResult(f"https://{name}.example/sitemap.xml",
                                                       "ok")])
        metrics.observe(result, name, issue_counts={"lastmod-invalid": 2, "loc-duplicate": 1},
                        finished_at=now)
    setup = time.process_time() - started
    held = _rss_mib() - before
    renders = []
    for _ in range(3):
        started = time.process_time()
        body = metrics.exposition()
        renders.append(time.process_time() - started)
    text = body.decode()
    per_target = sum(1 for line in text.splitlines()
                     if not line.startswith("#") and 'target="target-00000"' in line)
    print(f"targets {args.targets}: {per_target} series per target, scrape "
          f"{len(body) / 1e6:.1f} MB, render {min(renders):.2f} s CPU (best of 3), "
          f"set-up {setup:.2f} s CPU, registry {held:.0f} MiB RSS, "
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
