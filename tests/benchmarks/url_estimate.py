"""A large site's URL health before every URL was checked, and what a second round costs.

    .venv/bin/python tests/benchmarks/url_estimate.py [--urls 250000] [--recheck 20000]
        [--rate 400] [--database sqlite|postgres] [--keys 30] [--part estimate|recheck|both]

The site (``estimate_site.py``, its own process on 127.0.0.1) lists ``--urls`` pages in
children of 10,000; every broken page is in the last fifth of the listing (2% of the listing
answers 404, 1% is noindex). A checker in listing order finds none of them before it has
checked 80% of the site.

1. The estimate over time: ``check`` reads the sitemap, then rounds of URL checks (the daemon's
   ``run_round``) at a fixed ``--rate`` requests a second run until 36,000 URLs were checked. A
   number of URLs checked is a time at the default rate: 60 checks are a minute at 1 request a
   second, 3,600 an hour; at 10 a second, 36,000 are an hour. At each of those points it prints
   each state's estimate, its 95% interval, whether the interval holds the truth, and the error
   of the estimate; then the same for ``--keys`` other keys (the check order of each, computed
   from the listing: the same prefix the rounds would check), the mean error and how often the
   interval held.
2. A second round: a listing of ``--recheck`` unchanged pages checked once, then again two days
   8 days later (every URL due), once with the validators of each page's last answer (the default)
   and once without (the validators removed from the database first, as before): the bytes the
   site sent, its CPU seconds, its 200 and 304 answers, per re-check and for the round, and
   what a round of ``--urls`` would send at that rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from estimate_site import truth  # noqa: E402

from monitor import config as config_module  # noqa: E402
from monitor.cli.commands import main  # noqa: E402
from monitor.core import sampling  # noqa: E402
from monitor.core.model import BROKEN_STATES, utcnow  # noqa: E402
from monitor.read.fetch import Fetcher  # noqa: E402
from monitor.store import urlstates  # noqa: E402
from monitor.store.db import make_engine  # noqa: E402
from monitor.store.schema import url_states  # noqa: E402
from monitor.urlhealth import checker as urlcheck  # noqa: E402

# URLs checked, and what that is at 1 and at 10 requests a second
POINTS = [(60, "1 min at 1/s"), (300, "5 min at 1/s"), (600, "1 min at 10/s"),
          (900, "15 min at 1/s"), (3000, "5 min at 10/s"), (3600, "60 min at 1/s"),
          (9000, "15 min at 10/s"), (36000, "60 min at 10/s")]
SHOWN = ("not-found", "noindex")


def stats(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/__bench/stats") as answer:
        found: dict[str, float] = json.loads(answer.read())
        return found


def database(kind: str, folder: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{folder}/bench.db"
    import os

    import sqlalchemy as sa

    server = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"bench_estimate_{int(time.time())}"
    engine = sa.create_engine(server.replace("postgresql://", "postgresql+psycopg://"),
                              isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    url = server.rsplit("/", 1)[0] + "/" + name
    assert main(["db", "upgrade", "--database-url", url]) == 0
    return url


async def rounds(target: Any, engine: Any, sizes: list[int], later: timedelta,
                 ) -> list[urlcheck.Round]:
    fetcher = Fetcher(user_agent=target.settings.user_agent)
    budget, found = urlcheck.Budget(), []
    start = utcnow()
    try:
        for size in sizes:
            done = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                            budget=budget, now=lambda: start + later,
                                            limit=size)
            assert done is not None
            found.append(done)
    finally:
        await fetcher.aclose()
    return found


def row(n: int, when: str, strata: sampling.Strata, real: dict[str, float]) -> str:
    cells = [f"{n:,}", when]
    for states in ((s,) for s in SHOWN):
        e = sampling.combined(strata, states)
        t = sum(real.get(s, 0.0) for s in states)
        held = "yes" if e.low <= t <= e.high else "**no**"
        cells.append(f"{e.share:.2%} +/- {e.margin:.2%} ({held}, error {e.share - t:+.2%})")
    return "| " + " | ".join(cells) + " |"


def estimate_part(args: argparse.Namespace, target: Any, engine: Any) -> None:
    real = truth(args.urls)
    print(f"\n## The estimate over time: {args.urls:,} URLs, true shares "
          + ", ".join(f"{s} {real.get(s, 0):.2%}" for s in SHOWN)
          + f"; checked at {args.rate:g}/s (every broken page in the last fifth)\n")
    print("| URLs checked | at | " + " | ".join(SHOWN) + " |")
    print("|---|---|" + "---|" * len(SHOWN))
    done, started = 0, time.monotonic()
    for n, when in [p for p in POINTS if p[0] < args.urls]:
        sizes = []
        while done + sum(sizes) < n:
            sizes.append(min(1000, n - done - sum(sizes)))
        found = asyncio.run(rounds(target, engine, sizes, timedelta(0)))
        done = n
        strata = found[-1].strata
        assert strata is not None
        assert strata.checked == n, (strata, n)
        print(row(n, when, strata, real), flush=True)
    print(f"\n(the rounds took {time.monotonic() - started:.0f} s; in listing order each of "
          f"these shares is 0.00% until {int(0.8 * args.urls):,} URLs were checked)")
    # Other keys: the prefix of each order, from the listing (what the rounds would check).
    from estimate_site import kind

    locs = [(f"/p/{i}", kind(i, args.urls)) for i in range(args.urls)]
    points = [n for n, _ in POINTS if n < args.urls]
    errors: dict[int, list[float]] = {n: [] for n in points}
    held: dict[int, int] = dict.fromkeys(points, 0)
    t = real.get("not-found", 0.0)
    for k in range(args.keys):
        key = f"{k:032x}"
        order = sorted(locs, key=lambda p: sampling.turn(key, p[0]))
        for n in points:
            bad = sum(1 for _, s in order[:n] if s == "not-found")
            e = sampling.combined(sampling.Strata(args.urls, {"not-found": bad, "ok": n - bad},
                                                  args.urls, {}, args.urls - n), ["not-found"])
            errors[n].append(abs(e.share - t))
            held[n] += e.low <= t <= e.high
    print(f"\n### not-found over {args.keys} keys\n")
    print("| URLs checked | mean abs. error | largest error | interval held the truth |")
    print("|---|---|---|---|")
    for n in points:
        print(f"| {n:,} | {sum(errors[n]) / len(errors[n]):.2%} | {max(errors[n]):.2%} | "
              f"{held[n]}/{args.keys} |")


def recheck_part(args: argparse.Namespace, target: Any, engine: Any, base: str) -> None:
    n = args.recheck
    sizes = [1000] * (-(-n // 1000))
    asyncio.run(rounds(target, engine, sizes, timedelta(0)))
    print(f"\n## A second round of {n:,} unchanged pages (~20 KB each)\n")
    print("| re-check | round s | site bytes | bytes a re-check | site CPU s | CPU us a re-check "
          f"| 200 | 304 | a round of {args.urls:,} |")
    print("|---|---|---|---|---|---|---|---|---|")
    target_id = urlstates.target_id(engine, target.name)
    for days, label in ((8, "conditional"), (16, "unconditional")):  # past recheck: 7d
        if label == "unconditional":
            with engine.begin() as conn:
                conn.execute(url_states.update().where(url_states.c.target_id == target_id)
                             .values(etag=None, last_modified=None))
        before, clock = stats(base), time.monotonic()
        found = asyncio.run(rounds(target, engine, sizes, timedelta(days=days)))
        seconds, after = time.monotonic() - clock, stats(base)
        checked = sum(r.checked for r in found)
        assert checked == n, checked
        sent = after.get("bytes", 0) - before.get("bytes", 0)
        cpu = after["cpu"] - before["cpu"]
        print(f"| {label} | {seconds:.1f} | {sent / 1e6:,.1f} MB | {sent / n:,.0f} | {cpu:.2f} | "
              f"{cpu / n * 1e6:,.0f} | {after.get('200', 0) - before.get('200', 0):,.0f} | "
              f"{after.get('304', 0) - before.get('304', 0):,.0f} | "
              f"{sent / n * args.urls / 1e9:,.2f} GB |", flush=True)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=250_000)
    parser.add_argument("--recheck", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--keys", type=int, default=30)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--part", choices=("estimate", "recheck", "both"), default="both")
    args = parser.parse_args()
    site = subprocess.Popen([sys.executable, str(HERE / "estimate_site.py"), str(args.urls),
                             str(args.recheck)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert site.stdout is not None
    base = f"http://127.0.0.1:{site.stdout.readline().strip()}"
    try:
        with tempfile.TemporaryDirectory() as folder:
            url = database(args.database, Path(folder))
            path = Path(folder) / "monitor.yaml"
            path.write_text(
                f"defaults:\n  url_checks: {{enabled: true, rate: {args.rate}}}\n"
                f"targets:\n  - {{name: big, url: '{base}/sitemap.xml'}}\n"
                f"  - {{name: again, url: '{base}/r/sitemap.xml',"
                " url_checks: {rate: 1000}}\n")
            cfg = config_module.load(path)
            targets = {t.name: t for t in cfg.resolved_targets()}
            wanted = {"estimate": ["big"], "recheck": ["again"]}.get(args.part, list(targets))
            for name in wanted:
                clock = time.monotonic()
                with contextlib.redirect_stdout(io.StringIO()):
                    assert main(["check", name, "--config", str(path), "--database-url",
                                 url]) in (0, 1)
                print(f"check {name}: {time.monotonic() - clock:.1f} s", flush=True)
            engine = make_engine(url)
            try:
                if "big" in wanted:
                    estimate_part(args, targets["big"], engine)
                if "again" in wanted:
                    recheck_part(args, targets["again"], engine, base)
            finally:
                engine.dispose()
        print(f"\n(broken states: {', '.join(BROKEN_STATES)}; database {args.database})")
    finally:
        assert site.stdin is not None
        site.stdin.close()
        site.wait(10)


if __name__ == "__main__":
    main_bench()
