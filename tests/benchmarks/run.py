"""The benchmark: sitemap-monitor against advertools, ultimate-sitemap-parser and lxml's floor.

    .venv-bench/bin/python tests/benchmarks/run.py [--workload W1|W1H|W2|W4]
        [--database sqlite|postgres]

Without options it runs W1 and W2 on SQLite and PostgreSQL; W4 (50 x 50,000 URLs) runs the first
check only. Every measured run is its own process;
the table gives wall and CPU seconds and the peak RSS of that process alone, and the issue's
targets with PASS/FAIL. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import harness
import measure
import workloads
from harness import HERE, Server, child_env, database, monitor_cli, monitor_cli_works, serve
from measure import Measurement

EXPECTED_W1 = workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD
EXPECTED_W4 = workloads.W4_CHILDREN * workloads.W1_URLS_PER_CHILD
CHANGED_W1 = workloads.W1_CHANGED_URLS
EXTRA_ENV: dict[str, str] = {}  # for sitemap-monitor's runs (--parse-workers)


def _json_out(m: Measurement) -> dict[str, Any]:
    text = m.stdout.strip()
    if not text:
        return {}
    try:
        data: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:
        data = json.loads(text.splitlines()[-1])
    return data


def _through(server: Server | None, name: str, argv: list[str], **kw: Any) -> Measurement:
    """Measure one run; with a server, also what it served and the CPU it spent doing so."""
    before = server.stats() if server else None
    cpu0 = measure.proc_cpu_seconds(server.proc.pid) if server else 0.0
    m = measure.run(name, argv, env=child_env(**EXTRA_ENV), **kw)
    if server and before is not None:
        after = server.stats()
        m.extra["server_cpu"] = measure.proc_cpu_seconds(server.proc.pid) - cpu0
        m.extra["http"] = (
            f"{after['ok'] - before['ok']}/{after['not_modified'] - before['not_modified']}"
        )
    try:
        m.extra["result"] = _json_out(m)
    except (json.JSONDecodeError, IndexError):
        m.extra["result"] = {}
    if m.returncode not in (0, 3):
        print(f"!! {name}: exit {m.returncode}\n{m.stderr[-3000:]}", file=sys.stderr)
    return m


def _verify(m: Measurement, expect: dict[str, Any]) -> None:
    """Mark the run verified only if it exited 0 and reported what the workload holds."""
    r = m.extra["result"]
    wrong = [f"{k}={r.get(k)!r}, want {v!r}" for k, v in expect.items() if r.get(k) != v]
    if m.returncode != 0:
        wrong.insert(0, f"exit {m.returncode}")
    m.extra["verified"] = "yes" if not wrong else "NO: " + "; ".join(wrong)


def _check(
    server: Server, db: harness.Database, name: str, url: str, expect: dict[str, Any]
) -> Measurement:
    argv = [monitor_cli(), "check", url, "--database-url", db.url, "--json"]
    pg0 = measure.postgres_cpu_seconds() if db.kind == "postgres" else None
    m = _through(server, name, argv)
    if pg0 is not None:
        m.extra["db_cpu"] = measure.postgres_cpu_seconds() - pg0
    _verify(m, {"urls": EXPECTED_W1, **expect})  # expect may name other urls (W4)
    r = m.extra["result"]
    m.extra["urls"] = r.get("urls")
    m.extra["in_process"] = r.get("duration_seconds")
    m.extra["summary"] = (
        f"outcome={r.get('outcome')} added={r.get('added')} removed={r.get('removed')} "
        f"changed={r.get('changed')} invalid={r.get('invalid')} "
        f"issues={len(r.get('issues') or [])} "
        f"docs={sorted((d.get('outcome') or '?') for d in r.get('documents') or [])}"
    )
    return m


def _peer(server: Server | None, tool: str, *args: str) -> Measurement:
    m = _through(server, tool, [sys.executable, str(HERE / "peers.py"), tool, *args], timeout=3600)
    _verify(m, {"urls": EXPECTED_W1})
    r = m.extra["result"]
    m.extra["urls"] = r.get("urls")
    m.extra["in_process"] = r.get("parse_seconds", r.get("in_process_seconds"))
    return m


def run_w1(
    data_dir: Path, kinds: list[str], *, peers: bool, profile: bool, repeat: int = 1,
    workload: str = "W1",
) -> dict[str, Any]:
    """W1: three sitemap-monitor checks per database, the two peers and the floor, each run
    ``repeat`` times (the checks into a fresh database each time); the fastest run counts.

    The repeats are rounds: each round runs every step once, in the same order. This machine's
    speed drifts within minutes, and running one tool's repeats back to back gave whichever
    ran first (the floor) the fast minutes; in rounds, every tool meets the same drift.
    """
    manifest = workloads.ensure(workload, data_dir)
    print(f"{workload}: {manifest['urls']:,} URLs, {int(manifest['bytes']) / 1e6:.1f} MB in "
          f"{data_dir}")
    files = [str(p) for p in workloads.w1_child_files(data_dir)]
    tools = ("advertools", "usp") if peers else ()
    runs: dict[str, list[Measurement]] = {"floor": [], **{tool: [] for tool in tools}}
    trios: dict[str, list[tuple[Measurement, Measurement, Measurement]]] = {k: [] for k in kinds}
    out: dict[str, Any] = {"checks": {}, "repeat": repeat}
    with serve(data_dir, "w1") as server:
        url = f"{server.origin}/w1/sitemap_index.xml"
        for round_number in range(1, repeat + 1):
            print(f"  round {round_number} of {repeat}", flush=True)
            runs["floor"].append(_peer(None, "floor", *files))
            for kind in kinds:
                trios[kind].append(_trio(server, kind, url))
            for tool in tools:
                runs[tool].append(_peer(server, tool, url))
        print("  fastest of each:", flush=True)
        out["floor"] = _best(runs["floor"])
        for kind in kinds:
            out["checks"][kind] = tuple(
                _best(list(steps)) for steps in zip(*trios[kind], strict=True)
            )
        for tool in tools:
            out[tool] = _best(runs[tool])
        if profile:
            out["profile"] = _profile(server, url)
    return out


def _trio(server: Server, kind: str, url: str) -> tuple[Measurement, Measurement, Measurement]:
    """A first check into an empty database, the unchanged re-check, the 1-child re-check."""
    with database(kind) as db:
        harness.upgrade(db)
        first = _check(
            server,
            db,
            f"first check [{kind}]",
            url,
            {"outcome": "ok", "added": EXPECTED_W1, "removed": 0, "changed": 0},
        )
        again = _check(
            server,
            db,
            f"re-check, unchanged [{kind}]",
            url,
            {"outcome": "unchanged", "added": 0, "removed": 0, "changed": 0},
        )
        server.variant("w1prime")
        try:
            changed = _check(
                server,
                db,
                f"re-check, 1 child changed [{kind}]",
                url,
                {"outcome": "ok", "added": 0, "removed": 0, "changed": CHANGED_W1},
            )
        finally:
            server.variant("base")
    return first, again, changed


def run_w4(data_dir: Path, kinds: list[str], *, repeat: int = 1) -> dict[str, Any]:
    """W4: the first check of the 2.5 M-URL index into an empty database, per database,
    ``repeat`` times in rounds; the fastest run counts, the highest memory is reported."""
    manifest = workloads.ensure("W4", data_dir)
    print(f"W4: {manifest['urls']:,} URLs, {int(manifest['bytes']) / 1e6:.1f} MB in {data_dir}")
    runs: dict[str, list[Measurement]] = {kind: [] for kind in kinds}
    with serve(data_dir, "w4") as server:
        url = f"{server.origin}/w4/sitemap_index.xml"
        for round_number in range(1, repeat + 1):
            print(f"  round {round_number} of {repeat}", flush=True)
            for kind in kinds:
                with database(kind) as db:
                    harness.upgrade(db)
                    runs[kind].append(_check(server, db, f"first check [{kind}]", url, {
                        "urls": EXPECTED_W4, "outcome": "ok", "added": EXPECTED_W4,
                        "removed": 0, "changed": 0}))
    print("  fastest of each:", flush=True)
    out: dict[str, Any] = {"repeat": repeat, "checks": {}}
    for kind, measured in runs.items():
        best = _best(measured)
        # memory is not the fastest run's but the most any run took
        best.extra["peak_rss_mb"] = max(m.peak_rss_mb for m in measured)
        best.extra["tree_pss_mb"] = max(m.tree_rss_mb for m in measured)
        out["checks"][kind] = best
    return out


def report_w4(out: dict[str, Any]) -> list[str]:
    """W4's table and its target (issue 27: the tree's peak PSS within W1's 150 MB)."""
    lines = [
        "| run | URLs | wall s (fastest) | wall s, every run | CPU s | PostgreSQL CPU s "
        "| peak RSS MB (most) | tree PSS MB (most) | in-process s | verified |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in out["checks"].values():
        lines.append(
            f"| {_label(m.name)} | {m.extra.get('urls')} | {m.wall:.2f} | {_walls(m)} | "
            f"{m.tree_cpu:.2f} | {_fmt(m.extra.get('db_cpu'))} | "
            f"{m.extra['peak_rss_mb']:.0f} | {m.extra['tree_pss_mb']:.0f} | "
            f"{_fmt(m.extra.get('in_process'))} | {m.extra.get('verified')} |"
        )
    lines += ["", "| target | database | measured | limit | result | |",
              "|---|---|---|---|---|---|"]
    for kind, m in out["checks"].items():
        _target(lines, kind, m.extra.get("verified") == "yes",
                "first check peak memory, whole process tree (summed PSS)",
                m.extra["tree_pss_mb"], 150, "MB")
    return lines


def _best(runs: list[Measurement]) -> Measurement:
    """The fastest of repeated runs, carrying every run's wall time; a run that did not report
    what the workload holds makes the result unverified, however fast it was."""
    best = min(runs, key=lambda m: m.wall)
    best.extra["walls"] = [round(m.wall, 2) for m in runs]
    wrong = [m.extra.get("verified") for m in runs if m.extra.get("verified") != "yes"]
    if wrong:
        best.extra["verified"] = wrong[0]
    _progress(best)
    return best


def _profile(server: Server, url: str) -> dict[str, Any]:
    """py-spy over the first check, the unchanged re-check and the 1-child re-check (SQLite)."""
    result = {}
    with database("sqlite") as db:
        harness.upgrade(db)
        for step in ("first", "unchanged", "one-child-changed"):
            server.variant("w1prime" if step == "one-child-changed" else "base")
            prefix = f"/tmp/sitemap-monitor-bench-profile-{step}"
            argv = [
                sys.executable,
                str(HERE / "profile_check.py"),
                prefix,
                "--",
                "check",
                url,
                "--database-url",
                db.url,
                "--json",
            ]
            m = measure.run(f"profile {step}", argv, env=child_env(), cwd=str(harness.ROOT))
            try:
                data = json.loads(m.stdout.strip().splitlines()[-1])
                data["wall"] = round(m.wall, 2)
            except (json.JSONDecodeError, IndexError):
                data = {"error": m.stderr[-2000:]}
            result[f"the W1 {step.replace('-', ' ')} check [sqlite]"] = data
        server.variant("base")
    return result


def _progress(m: Measurement) -> None:
    print(
        f"   {m.name:<38} {m.wall:8.2f} s wall (runs: {_walls(m)}) {m.tree_cpu:8.2f} s cpu "
        f"{m.peak_rss_mb:8.1f} MB"
        f" (tree PSS {m.tree_rss_mb:.1f} MB, {m.processes} proc)"
        f"  urls={m.extra.get('urls')} verified={m.extra.get('verified')} "
        f"{m.extra.get('summary', '')}",
        flush=True,
    )


def _walls(m: Measurement) -> str:
    return " ".join(f"{w:.2f}" for w in m.extra.get("walls", [m.wall]))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_w1(out: dict[str, Any]) -> list[str]:
    """The table of figures and the targets, as Markdown (the README pastes it)."""
    lines = [
        "| run | URLs | wall s (fastest) | wall s, every run | CPU s | peak RSS MB | tree PSS MB "
        "| in-process s | HTTP server CPU s "
        "| PostgreSQL CPU s "
        "| HTTP 200/304 | wall vs first check | verified |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    checks: dict[str, tuple[Measurement, ...]] = out["checks"]
    base = next(iter(checks.values()))[0] if checks else None
    rows: list[Measurement] = [m for trio in checks.values() for m in trio]
    rows += [out[k] for k in ("floor", "advertools", "usp") if k in out]
    for m in rows:
        # Checks compare with the first check on the same database, peers with the first one run.
        ref = checks[_kind(m)][0] if _kind(m) in checks else base
        ratio = f"{m.wall / ref.wall:.2f}x" if ref else "-"
        lines.append(
            f"| {_label(m.name)} | {m.extra.get('urls')} | {m.wall:.2f} | {_walls(m)} | "
            f"{m.tree_cpu:.2f} | "
            f"{m.peak_rss_mb:.0f} | {m.tree_rss_mb:.0f} | {_fmt(m.extra.get('in_process'))} | "
            f"{_fmt(m.extra.get('server_cpu'))} | {_fmt(m.extra.get('db_cpu'))} | "
            f"{m.extra.get('http', '-')} | {ratio} | "
            f"{m.extra.get('verified')} |"
        )
    lines += [
        "",
        "| target | database | measured | limit | result "
        "| same ratio in CPU s (+ PostgreSQL's) |",
        "|---|---|---|---|---|---|",
    ]
    for kind, (first, again, changed) in checks.items():
        ok = all(m.extra.get("verified") == "yes" for m in (first, again, changed))
        target = functools.partial(_target, lines, kind, ok)
        for peer, label, limit in (("advertools", "advertools", 0.5), ("usp", "USP", 0.25)):
            if peer in out:
                peer_m = out[peer]
                target(
                    f"first check wall / {label} wall",
                    first.wall / peer_m.wall,
                    limit,
                    cpu=_cpu(first) / peer_m.tree_cpu,
                )
        floor = out["floor"]
        target(
            "first check wall / lxml floor wall",
            first.wall / floor.wall,
            2.5,
            cpu=_cpu(first) / floor.tree_cpu,
        )
        target("first check peak RSS, main process", first.peak_rss_mb, 150, "MB")
        target(
            "first check peak memory, whole process tree (summed PSS)", first.tree_rss_mb, 150, "MB"
        )
        fi, ai, ci = (m.extra.get("in_process") for m in (first, again, changed))
        target(
            "unchanged re-check / first, in-process (duration_seconds)",
            ai / fi if ai is not None and fi else None,
            0.01,
        )
        target(
            "unchanged re-check / first, process wall",
            again.wall / first.wall,
            0.01,
            cpu=_cpu(again) / _cpu(first),
        )
        target(
            "1-child re-check / first, process wall",
            changed.wall / first.wall,
            0.15,
            cpu=_cpu(changed) / _cpu(first),
        )
        target(
            "1-child re-check / first, in-process", ci / fi if ci is not None and fi else None, 0.15
        )
    return lines


def _target(
    lines: list[str],
    kind: str,
    verified: bool,
    what: str,
    value: float | None,
    limit: float,
    unit: str = "x",
    *,
    cpu: float | None = None,
) -> None:
    # CPU ratios are the check on wall ratios: the 2 cores are shared, so wall time is noisy.
    ok = value is not None and value <= limit
    verdict = ("PASS" if ok else "FAIL") if verified else "n/a: a run was not verified"
    shown = "-" if value is None else (f"{value:.3f}x" if unit == "x" else f"{value:.0f} {unit}")
    limit_s = f"{limit}{unit}" if unit == "x" else f"{limit:.0f} {unit}"
    cpu_s = "-" if cpu is None else f"{cpu:.3f}x"
    lines.append(f"| {what} | {kind} | {shown} | {limit_s} | {verdict} | {cpu_s} |")


def _cpu(m: Measurement) -> float:
    """The run's CPU seconds plus, on PostgreSQL, the server's (a COPY moves work there)."""
    return m.tree_cpu + max(0.0, m.extra.get("db_cpu") or 0.0)


def _kind(m: Measurement) -> str:
    return m.name.rsplit("[", 1)[-1].rstrip("]") if "[" in m.name else ""


def _label(name: str) -> str:
    labels = {
        "floor": "lxml etree.fromstring floor (10 files from disk, no HTTP)",
        "advertools": "advertools sitemap_to_df",
        "usp": "ultimate-sitemap-parser all_pages()",
    }
    return labels.get(name, f"sitemap-monitor {name}")


def report_profile(profile: dict[str, Any]) -> list[str]:
    """The hotspots of the profiled checks, for the lead."""
    lines = []
    for step, data in profile.items():
        if "error" in data:
            lines += [f"profile {step}: failed", data["error"]]
            continue
        lines += [
            "",
            f"Profile of {step} (py-spy, {data['samples']} {data.get('what', 'busy-thread')} "
            f"samples at {data.get('rate', 250)} Hz, {data.get('wall', '-')} s wall under the "
            f"profiler; stacks: {data['collapsed']}):",
            "| self time: function | module | % |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['function']} | {r['module']} | {r['percent']} |" for r in data["self"][:15]
        ]
        lines += [
            "",
            "| inclusive, sitemap-monitor's own: function | module | % |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['function']} | {r['module']} | {r['percent']} |" for r in data["ours"][:15]
        ]
    return lines


def main() -> None:
    """Parse options, run the chosen workloads and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workload", choices=["W1", "W1H", "W2", "W4"], action="append",
        help="W1H: W1 with three hreflang alternates and an image on every URL; "
        "W4: an index of 50 x 50,000 URLs, its first check only",
    )
    parser.add_argument("--database", choices=["sqlite", "postgres"], action="append")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    parser.add_argument("--no-peers", action="store_true", help="skip advertools and USP")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="W1, W4: run every measured step N times and count the fastest (default 3)",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy profiles of the W1 checks")
    parser.add_argument(
        "--wait-for-cli",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="poll until 'sitemap-monitor check --help' works",
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="W2 daemon scheduler concurrency"
    )
    parser.add_argument("--results", type=Path, help="also write the figures here as JSON")
    parser.add_argument(
        "--parse-workers", type=int, help="SITEMAP_MONITOR_PARSE_WORKERS for the checks"
    )
    args = parser.parse_args()
    if args.parse_workers is not None:
        EXTRA_ENV["SITEMAP_MONITOR_PARSE_WORKERS"] = str(args.parse_workers)
    workload_names = args.workload or ["W1", "W2"]
    kinds = args.database or ["sqlite", "postgres"]
    print(
        f"sitemap-monitor at {harness.commit()}; machine: {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}"
    )
    deadline = time.monotonic() + args.wait_for_cli
    while not monitor_cli_works():
        if time.monotonic() >= deadline:
            raise SystemExit(f"'{monitor_cli()} check --help' does not work yet")
        time.sleep(30)
    lines: list[str] = []
    results: dict[str, Any] = {}
    if "W1" in workload_names:
        w1 = run_w1(
            args.data_dir,
            kinds,
            peers=not args.no_peers,
            profile=args.profile,
            repeat=max(1, args.repeat),
        )
        lines += [
            "",
            f"W1: index of 10 x 50,000 URLs, fastest of {w1['repeat']} runs each",
            *report_w1(w1),
        ]
        if "profile" in w1:
            lines += report_profile(w1["profile"])
        results["W1"] = w1
    if "W1H" in workload_names:  # W1's harness, on the variant's own folder of data
        w1h = run_w1(
            workloads.folder("W1H", args.data_dir),
            kinds,
            peers=not args.no_peers,
            profile=args.profile,
            repeat=max(1, args.repeat),
            workload="W1H",
        )
        lines += [
            "",
            "W1H: W1 with three hreflang alternates (all answered, across children) and an "
            f"image on every URL, fastest of {w1h['repeat']} runs each",
            *report_w1(w1h),
        ]
        if "profile" in w1h:
            lines += report_profile(w1h["profile"])
        results["W1H"] = w1h
    if "W4" in workload_names:
        w4 = run_w4(args.data_dir, kinds, repeat=max(1, args.repeat))
        lines += ["", f"W4: index of 50 x 50,000 URLs, first check, fastest of {w4['repeat']} "
                  "runs each (memory: the most of any run)", *report_w4(w4)]
        results["W4"] = w4
    if "W2" in workload_names:
        import daemon

        w2 = daemon.run_w2(args.data_dir, kinds, concurrency=args.concurrency, profile=args.profile)
        lines += ["", "W2: 1,000 targets x 1,000 URLs, the daemon", *daemon.report(w2)]
        for kind, r in w2.items():
            if "profile" in r:
                prof = {**r["profile"], "rate": 100, "what": "GIL-holding"}
                lines += report_profile({f"W2 daemon round [{kind}]": prof})
        results["W2"] = w2
    print("\n".join(lines))
    if args.results:
        args.results.write_text(json.dumps(results, default=_serialise, indent=1))


def _serialise(value: object) -> object:
    if isinstance(value, Measurement):
        return {k: v for k, v in vars(value).items() if k not in ("stdout", "stderr")}
    return str(value)


if __name__ == "__main__":
    main()
