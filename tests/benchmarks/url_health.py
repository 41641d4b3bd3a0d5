"""W3, the health of listed URLs: sitemap-monitor's ``check --urls`` against LinkChecker.

    .venv-bench/bin/python tests/benchmarks/url_health.py [--urls 50000] [--repeat N]
        [--only sitemap-monitor|linkchecker] [--seed 3]

``url_site.py`` serves, in its own process on 127.0.0.1, a site of N listed URLs (an index of
/sitemap-K.xml, 10,000 URLs each), each answering a ~20 KB HTML page, in a seeded mix: 90% ok,
the rest 301 -> 301 -> 200 chains, 404, 410, 500, 503 with Retry-After, noindex by meta or by
X-Robots-Tag, a canonical to another URL, and paths under /private/ that robots.txt disallows.
First, untimed, the site is checked against the mix (every listed URL in the sitemaps, one page
of each kind answering as it should). Then, one after the other and each in its own process,
measured by measure.py (wall; CPU user+sys of the process tree; peak RSS of the process and
the tree's summed PSS):

1. ``sitemap-monitor check --config CFG --database-url sqlite:///TMP/bench.db site --urls
   --json --rate 10000`` (URL checks on, their rate limit lifted past what the site can
   answer, 10 per host), into a fresh database
   (schema made untimed); its ``url_health`` counts must equal the mix's, and the site must
   not have seen one request under /private/;
2. ``linkchecker --stdin -r 0 --threads 10`` fed the same N URLs, no recursion, robots.txt
   honoured, with its per-host rate floor lifted (see README.md), CSV to stdout; its results
   must add up to the mix as far as it tells them apart (it knows no noindex nor canonical).

``--repeat N`` runs both sides N times in rounds; the fastest of each counts. Printed: a
Markdown table per side (URL checks per second over the whole process's wall, CPU seconds per
1,000 URLs, peak memory), the states each side found beside the mix's, and the targets
(throughput at least 3x LinkChecker's, peak at most 150 MB) as PASS/FAIL, with the site
server's CPU for each run. Exits 1 when a side did not report what the site holds.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import http.client
import json
import os
import sys
import tempfile
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import harness
import measure
import url_site
from harness import BIN, Server, child_env, monitor_cli
from measure import Measurement

SIDES = ("sitemap-monitor", "linkchecker")
THREADS = 10  # per host, both sides
GOAL_RATIO = 3.0  # sitemap-monitor's URL checks/s over LinkChecker's, at least
GOAL_PEAK_MB = 150.0
LINKCHECKER = BIN / "linkchecker"
TIMEOUT = [3600.0]  # seconds a side may run before it is killed (--timeout)
CONFIG = """\
defaults:
  allow_private: true
  url_checks:
    enabled: true
    rate: 1000
scheduler:
  per_host: {threads}
targets:
  - name: site
    url: {origin}/sitemap.xml
"""
# LinkChecker's own rate limit, per host: its default is 10 requests a second, and below the
# site's "LinkChecker" response header a floor of 0.1-0.6 s between two requests still holds.
LINKCHECKERRC = """\
[checking]
maxrequestspersecond=100000
"""
# What LinkChecker can tell apart, by the kinds of the mix: the page answered 200 (ok, noindex,
# canonical all look alike to it), a redirect, an HTTP error by status, robots.txt's denial.
LINKCHECKER_CLASS = {
    "ok": "200",
    "noindex-meta": "200",
    "noindex-header": "200",
    "canonicalized": "200",
    "redirect": "redirected",
    "not-found": "404",
    "gone": "410",
    "server-error": "500",
    "unavailable": "503",
    "disallowed": "robots.txt",
}


def serve_site(n: int, seed: int) -> contextlib.AbstractContextManager[Server]:
    """Start url_site.py for N URLs on 127.0.0.1; stop it on exit."""
    return harness.serve_script("url_site.py", str(n), str(seed))


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, dict[str, str], bytes]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def check_site(server: Server, pages: list[url_site.Page]) -> None:
    """Untimed: the sitemaps list every page in order and one page of each kind answers as the
    mix says. Raises AssertionError on the first difference."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    origin = server.origin
    status, _, body = _get(conn, "/robots.txt")
    assert status == 200, status
    assert b"Disallow: /private/" in body, body
    status, _, body = _get(conn, "/sitemap.xml")
    children = [loc.split("</loc>")[0] for loc in body.decode().split("<loc>")[1:]]
    assert len(children) == max(1, -(-len(pages) // url_site.PER_CHILD)), children
    listed = []
    for child in children:
        status, _, body = _get(conn, urllib.parse.urlsplit(child).path)
        assert status == 200, child
        listed += [loc.split("</loc>")[0] for loc in body.decode().split("<loc>")[1:]]
    assert listed == [origin + p.path for p in pages], "the sitemaps do not list the mix"
    seen: set[str] = set()
    for page in pages:
        if page.kind in seen:
            continue
        seen.add(page.kind)
        status, headers, body = _get(conn, page.path)
        head = body.split(b"</head>", 1)[0].decode()
        self_canonical = f'<link rel="canonical" href="{origin}{page.path}">' in head
        want = {"not-found": 404, "gone": 410, "server-error": 500, "unavailable": 503}
        if page.kind == "redirect":
            hops = []
            while status == 301:
                hops.append(headers["Location"])
                status, headers, body = _get(conn, urllib.parse.urlsplit(hops[-1]).path)
            assert len(hops) == 2, (page, hops)
            assert status == 200, (page, hops, status)
            assert hops[-1] not in set(listed), hops
        elif page.kind in want:
            assert status == want[page.kind], (page, status)
            if page.kind == "unavailable":
                assert headers.get("Retry-After") == "3600", headers
        else:
            assert status == 200, (page, status)
            assert "<title>" in head, (page, head)
            assert 19_000 <= len(body) <= 21_000, (page, len(body))
            noindex_meta = '<meta name="robots" content="noindex">' in head
            assert noindex_meta == (page.kind == "noindex-meta"), page
            assert (headers.get("X-Robots-Tag") == "noindex") == (page.kind == "noindex-header")
            assert self_canonical == (page.kind != "canonicalized"), page
            if page.kind == "canonicalized":
                assert f'<link rel="canonical" href="{origin}/' in head, head
    conn.close()
    assert seen == set(url_site.STATE), seen


def _through(server: Server, name: str, argv: list[str], **kw: Any) -> Measurement:
    """Measure one side's run, with what the site served it and the site's CPU meanwhile."""
    before = server.stats()
    cpu0 = measure.proc_cpu_seconds(server.proc.pid)
    m = measure.run(name, argv, timeout=TIMEOUT[0], **kw)
    after = server.stats()
    m.extra["server_cpu"] = measure.proc_cpu_seconds(server.proc.pid) - cpu0
    m.extra["served"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return m


def run_monitor(server: Server, n: int, folder: Path) -> Measurement:
    """sitemap-monitor's ``check --urls`` of the site into a fresh SQLite database."""
    config = folder / "monitor.yaml"
    config.write_text(CONFIG.format(threads=THREADS, origin=server.origin))
    with harness.database("sqlite") as db:
        harness.upgrade(db)
        argv = [monitor_cli(), "check", "--config", str(config), "--database-url", db.url,
                "site", "--urls", "--json", "--rate", "10000"]  # fmt: skip
        m = _through(server, "sitemap-monitor", argv, env=child_env())
    want = url_site.expected_states(n)
    wrong = []
    if m.returncode not in (0, 3):
        wrong.append(f"exit {m.returncode}")
        print(
            f"!! sitemap-monitor: exit {m.returncode}: {' '.join(argv)}\n{m.stderr[-3000:]}",
            file=sys.stderr,
        )
    result = _json(m.stdout)
    health = result.get("url_health")
    checks = result.get("url_checks") or {}
    if not isinstance(health, dict):
        wrong.append("no url_health in the JSON output")
        if m.returncode in (0, 3):
            print(f"!! sitemap-monitor printed no url_health; stderr:\n{m.stderr[-3000:]}",
                  file=sys.stderr)  # fmt: skip
        health = {}
    states = {k: v for k, v in health.items() if isinstance(v, int)}
    for state in sorted(set(want) | set(states)) if health else ():
        if states.get(state, 0) != want.get(state, 0):
            wrong.append(f"{state}={states.get(state, 0)}, want {want.get(state, 0)}")
    if result and result.get("urls") != n:
        wrong.append(f"urls={result.get('urls')!r}, want {n}")
    if m.extra["served"].get("private"):
        wrong.append(f"{m.extra['served']['private']} requests under /private/")
    m.extra.update(
        states=states,
        checked=checks.get("checked"),
        in_process=checks.get("seconds"),
        verified="yes" if not wrong else "NO: " + "; ".join(wrong),
    )
    return m


def run_linkchecker(server: Server, pages: list[url_site.Page], folder: Path) -> Measurement:
    """LinkChecker over the same URLs from stdin, no recursion; its CSV counted by class."""
    urls = folder / "urls.txt"
    urls.write_text("".join(f"{server.origin}{p.path}\n" for p in pages))
    rc = folder / "linkcheckerrc"
    rc.write_text(LINKCHECKERRC)
    # Run as root, LinkChecker drops to nobody once it has read its config (stdin is an open
    # file): it could not write a CSV file into our temp dir, so the CSV goes to stdout.
    argv = [str(LINKCHECKER), "--config", str(rc), "--stdin", "--recursion-level", "0",
            "--threads", str(THREADS), "--no-status", "--verbose",
            "--output", "csv/utf-8"]  # fmt: skip
    env = child_env(XDG_CONFIG_HOME=str(folder), XDG_DATA_HOME=str(folder))
    m = _through(server, "linkchecker", argv, env=env, stdin=urls)
    classes: Counter[str] = Counter()
    rows = 0
    lines = [line for line in m.stdout.splitlines(keepends=True) if not line.startswith("#")]
    for row in csv.DictReader(lines, delimiter=";"):
        rows += 1
        classes[_linkchecker_class(row)] += 1
    want: Counter[str] = Counter()
    for kind, count in url_site.counts(len(pages)).items():
        want[LINKCHECKER_CLASS[kind]] += count
    wrong = []
    if m.returncode not in (0, 1):  # 1: it found invalid links, as it should
        wrong.append(f"exit {m.returncode}")
        print(f"!! linkchecker: exit {m.returncode}\n{m.stderr[-3000:]}", file=sys.stderr)
    if rows != len(pages):
        wrong.append(f"{rows} rows, want {len(pages)}")
    for name in sorted(set(want) | set(classes)):
        if classes[name] != want[name]:
            wrong.append(f"{name}={classes[name]}, want {want[name]}")
    m.extra.update(
        classes=dict(classes), verified="yes" if not wrong else "NO: " + "; ".join(wrong)
    )
    return m


def _linkchecker_class(row: dict[str, str]) -> str:
    if "robots.txt" in (row.get("infostring") or ""):
        return "robots.txt"
    if "Redirected to" in (row.get("warningstring") or "") + (row.get("infostring") or ""):
        return "redirected"
    result = (row.get("result") or "").split(" ", 1)[0]
    return result if result.isdigit() else f"other: {row.get('result')}"


def _json(text: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = json.loads(text.splitlines()[-1])
        except json.JSONDecodeError:
            return {}
    return data if isinstance(data, dict) else {}


def _best(runs: list[Measurement]) -> Measurement:
    """The fastest run; any run that was not verified makes it unverified."""
    best = min(runs, key=lambda m: m.wall)
    best.extra["walls"] = [round(m.wall, 2) for m in runs]
    wrong = [m.extra["verified"] for m in runs if m.extra["verified"] != "yes"]
    if wrong:
        best.extra["verified"] = wrong[0]
    return best


def _progress(m: Measurement, n: int) -> None:
    served = m.extra["served"]
    print(
        f"   {m.name:<16} {m.wall:8.2f} s wall {n / m.wall:8.0f} URL/s {m.tree_cpu:8.2f} s cpu "
        f"{m.peak_rss_mb:7.1f} MB (tree PSS {m.tree_rss_mb:.1f} MB, {m.processes} proc); "
        f"site: {served.get('requests', 0)} requests, {served.get('connections', 0)} "
        f"connections, {served.get('bytes', 0) / 1e6:.0f} MB written, "
        f"{served.get('private', 0)} under /private/, "
        f"{m.extra['server_cpu']:.2f} s CPU; verified={m.extra['verified']}",
        flush=True,
    )


def report(n: int, runs: dict[str, Measurement]) -> list[str]:
    """The Markdown tables: each side's figures, the states, the targets."""
    lines = [
        "| side | URLs | wall s (fastest) | wall s, every run | URL checks/s | CPU s "
        "| CPU s / 1,000 URLs | peak RSS MB | tree PSS MB | requests to the site "
        "| site server CPU s | verified |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for side, m in runs.items():
        served = m.extra["served"]
        lines.append(
            f"| {side} | {n} | {m.wall:.2f} | {' '.join(map(str, m.extra['walls']))} | "
            f"{n / m.wall:.0f} | {m.tree_cpu:.2f} | {1000 * m.tree_cpu / n:.3f} | "
            f"{m.peak_rss_mb:.0f} | {m.tree_rss_mb:.0f} | {served.get('requests', 0)} | "
            f"{m.extra['server_cpu']:.2f} | {m.extra['verified']} |"
        )
    monitor = runs.get("sitemap-monitor")
    if monitor is not None and monitor.extra.get("in_process"):
        seconds = monitor.extra["in_process"]
        lines += ["", f"sitemap-monitor's own url_checks: {monitor.extra.get('checked')} "
                  f"checked in {seconds:.2f} s ({n / seconds:.0f} URL/s in-process)."]  # fmt: skip
    if monitor is not None:
        want = url_site.expected_states(n)
        lines += ["", "| url_health state | the mix | sitemap-monitor |", "|---|---|---|"]
        got = monitor.extra.get("states", {})
        for state in sorted(set(want) | set(got), key=lambda s: (-want.get(s, 0), s)):
            lines.append(f"| {state} | {want.get(state, 0)} | {got.get(state, '-')} |")
    if "linkchecker" in runs:
        classes = runs["linkchecker"].extra.get("classes", {})
        expected: Counter[str] = Counter()
        for kind, count in url_site.counts(n).items():
            expected[LINKCHECKER_CLASS[kind]] += count
        lines += ["", "| LinkChecker's result | the mix | LinkChecker |", "|---|---|---|"]
        for name in sorted(set(expected) | set(classes), key=lambda s: (-expected[s], s)):
            lines.append(f"| {name} | {expected[name]} | {classes.get(name, 0)} |")
    if monitor is not None and "linkchecker" in runs:
        lc = runs["linkchecker"]
        ok = all(m.extra["verified"] == "yes" for m in runs.values())
        lines += ["", "| target | measured | goal | result |", "|---|---|---|---|"]

        def target(what: str, value: float, goal: str, passed: bool, unit: str = "") -> None:
            verdict = ("PASS" if passed else "FAIL") if ok else "n/a: a run was not verified"
            lines.append(f"| {what} | {value:.2f}{unit} | {goal} | {verdict} |")

        ratio = lc.wall / monitor.wall
        target("URL checks/s, sitemap-monitor / LinkChecker", ratio, f">= {GOAL_RATIO}x",
               ratio >= GOAL_RATIO, "x")  # fmt: skip
        cpu = lc.tree_cpu / monitor.tree_cpu if monitor.tree_cpu else 0.0
        lines.append(f"| CPU s per URL, LinkChecker / sitemap-monitor | {cpu:.2f}x | - | - |")
        target("sitemap-monitor peak RSS, main process", monitor.peak_rss_mb,
               f"<= {GOAL_PEAK_MB:.0f} MB", monitor.peak_rss_mb <= GOAL_PEAK_MB, " MB")  # fmt: skip
        target("sitemap-monitor peak memory, process tree (summed PSS)", monitor.tree_rss_mb,
               f"<= {GOAL_PEAK_MB:.0f} MB", monitor.tree_rss_mb <= GOAL_PEAK_MB, " MB")  # fmt: skip
    return lines


def main() -> int:
    """Serve the site, check it, run the sides in rounds and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=50_000, metavar="N")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run both sides N times, in rounds; the fastest of each counts",
    )
    parser.add_argument("--only", choices=SIDES, help="run this side alone")
    parser.add_argument("--seed", type=int, default=3, help="the mix's seed")
    parser.add_argument("--timeout", type=float, default=TIMEOUT[0], metavar="SECONDS",
                        help="kill a side's run after this long (default 3600)")  # fmt: skip
    args = parser.parse_args()
    TIMEOUT[0] = args.timeout
    sides = [args.only] if args.only else list(SIDES)
    if "linkchecker" in sides and not LINKCHECKER.exists():
        raise SystemExit(f"{LINKCHECKER} is missing: run `bash tests/benchmarks/setup.sh`")
    n = args.urls
    pages = url_site.mix(n, args.seed)
    mix = url_site.counts(n)
    print(
        f"sitemap-monitor at {harness.commit()}; machine: {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}\n"
        f"W3: {n:,} URLs of ~20 KB, seed {args.seed}: "
        + ", ".join(f"{kind} {count}" for kind, count in mix.items())
    )
    runs: dict[str, list[Measurement]] = {side: [] for side in sides}
    with serve_site(n, args.seed) as server, tempfile.TemporaryDirectory(prefix="sm-w3-") as tmp:
        check_site(server, pages)
        print(f"   the site at {server.origin} answers as the mix says", flush=True)
        for round_number in range(1, max(1, args.repeat) + 1):
            print(f"  round {round_number} of {max(1, args.repeat)}", flush=True)
            for side in sides:
                folder = Path(tmp) / f"{side}-{round_number}"
                folder.mkdir()
                if side == "sitemap-monitor":
                    m = run_monitor(server, n, folder)
                else:
                    m = run_linkchecker(server, pages, folder)
                _progress(m, n)
                runs[side].append(m)
    best = {side: _best(ms) for side, ms in runs.items()}
    print("\n".join(["", f"W3: {n:,} listed URLs, fastest of {max(1, args.repeat)} run(s)",
                     *report(n, best)]))  # fmt: skip
    return 0 if all(m.extra["verified"] == "yes" for m in best.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
