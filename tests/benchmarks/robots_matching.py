"""How long Google's robots.txt decision takes, per URL and over a sitemap's images.

    .venv/bin/python tests/benchmarks/robots_matching.py [--urls N]

Prints the time of ``RobotsRules.allows`` over N URLs (what the URL checks and the re-judge
after a robots.txt change ask per listed URL), of ``decide`` (the tester's answer, with its
line and group), and of judging a 50,000-entry sitemap whose every entry has an image
(``check.crawlable``: unpack, judge, pack).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from monitor.check.crawlable import _marked
from monitor.codec import entryset
from monitor.core.model import EntryState
from monitor.robots.matcher import RobotsRules

ROBOTS = ("User-agent: *\nDisallow: /cart\nDisallow: /*?session=\nAllow: /cart/help\n"
          "Disallow: /img/9\n\nUser-agent: Googlebot-News\nDisallow: /drafts/\n")


def timed(label: str, count: int, work: Callable[[], object]) -> None:
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    print(f"{label}: {seconds:.3f} s, {seconds / count * 1e6:.1f} µs each")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--urls", type=int, default=100_000)
    count = parser.parse_args().urls
    rules = RobotsRules(ROBOTS)
    urls = [f"https://shop.example/p/{i}?a={i % 7}" for i in range(count)]
    timed(f"allows, {count:,} URLs", count, lambda: [rules.allows(u) for u in urls])
    timed(f"decide, {count:,} URLs", count, lambda: [rules.decide(u) for u in urls])
    states = {f"https://shop.example/p/{i}": EntryState(
        extensions='{"image":[{"loc":"https://shop.example/img/' + f'{i}.png"}}]}}')
        for i in range(50_000)}
    data = entryset.pack(entryset.columns(states, {}))
    held = {"https://shop.example/robots.txt": rules}
    timed("images of a 50,000-entry sitemap judged", 50_000, lambda: _marked(data, held))


if __name__ == "__main__":
    main()
