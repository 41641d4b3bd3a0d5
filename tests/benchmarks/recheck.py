"""W1's re-checks by how much changed: memory, CPU against the first check, bytes stored.

    .venv-bench/bin/python tests/benchmarks/recheck.py [--database sqlite|postgres]
        [--pattern none|one|percent|every] [--repeat N] [--times N] [--forward]

Issue 27's patterns, each a re-check of W1 (10 x 50,000 URLs) after its first check, into a
fresh database each time:

- ``none``: nothing changed (every document answers 304);
- ``one``: 500 URLs of one child get a new lastmod (W1', ``w1prime``);
- ``percent``: 1% of every child's URLs (every 100th) get a new lastmod (``w1percent``);
- ``every``: every lastmod moves a year on (``w1every``), what a CMS that stamps "now" does.

Each re-check is measured as ``run.py`` measures a check (its own process; wall, the process
tree's CPU and peak PSS), with the first check before it, so that the CPU ratio compares two runs
of one database minutes apart. What the re-check stored is the database's growth across it: on
SQLite the pages in use (``page_count - freelist_count``), on PostgreSQL the sum of every table's
``pg_total_relation_size`` (indexes and TOAST included), both after the process has exited; and
the ``entry_sets`` bytes it added, against the bytes of the versions it replaced.

A database grows by whole pages (PostgreSQL's are 8 KB), so one re-check that changes 500
entries can show a page or five. ``--times N`` makes N re-checks of the pattern in a row, the
served documents going back and forth between the pattern's and W1's (each way changes as
many entries; with ``--forward``, ``every`` starts N years back and moves every lastmod a
year further on at each re-check instead, as a CMS that stamps "now" does, where going back
would make every lastmod ``lastmod-regressed``), and the bytes stored a change are the growth
across all N over all their changes; the CPU and memory figures stay the first re-check's,
and the CPU of the N - 1 after it, against the first check's, comes as well: from the second
re-check on, the versions it reads are stored as deltas (monitor.codec.entrydelta), the steady state
of a site that changes a little at every check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import harness
import measure
import workloads
from harness import child_env, database, monitor_cli, serve

EXPECTED = workloads.W1_CHILDREN * workloads.W1_URLS_PER_CHILD
_LASTMOD = re.compile(rb"<lastmod>([0-9]{4})")
_VERSION = b"recheck-1"  # bump when the overlays below change
PATTERNS = {
    "none": ("base", 0),
    "one": ("w1prime", workloads.W1_CHANGED_URLS),
    "percent": ("w1percent", EXPECTED // 100),
    "every": ("w1every", EXPECTED),
}


def _bump_every_100th(data: bytes) -> bytes:
    """Every 100th ``<lastmod>`` of a urlset a year on (the 1st, the 101st, ...)."""
    seen = [0]

    def bump(m: re.Match[bytes]) -> bytes:
        seen[0] += 1
        if (seen[0] - 1) % 100:
            return m.group(0)
        return b"<lastmod>%d" % (int(m.group(1)) + 1)

    return _LASTMOD.sub(bump, data)


def _bump_all(data: bytes, years: int = 1) -> bytes:
    return _LASTMOD.sub(lambda m: b"<lastmod>%d" % (int(m.group(1)) + years), data)


def years_overlay(data_dir: Path, years: int) -> str:
    """W1 with every lastmod ``years`` on (back, below zero), the index's too, made if missing;
    ``base`` for none."""
    if years == 0:
        return "base"
    name = "w1every" if years == 1 else f"w1years{years:+d}"
    folder = data_dir / name
    stamp = folder / "VERSION"
    if not (stamp.exists() and stamp.read_bytes() == _VERSION):
        folder.mkdir(parents=True, exist_ok=True)
        for path in workloads.w1_child_files(data_dir):
            (folder / path.name).write_bytes(_bump_all(path.read_bytes(), years))
        index = (data_dir / "w1" / "sitemap_index.xml").read_bytes()
        (folder / "sitemap_index.xml").write_bytes(_bump_all(index, years))
        stamp.write_bytes(_VERSION)
    return name


def ensure_overlays(data_dir: Path) -> None:
    """``w1percent`` and ``w1every`` beside W1 (the index too: its children's lastmods move)."""
    for name, change in (("w1percent", _bump_every_100th), ("w1every", _bump_all)):
        folder = data_dir / name
        stamp = folder / "VERSION"
        if stamp.exists() and stamp.read_bytes() == _VERSION:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for path in workloads.w1_child_files(data_dir):
            (folder / path.name).write_bytes(change(path.read_bytes()))
        index = (data_dir / "w1" / "sitemap_index.xml").read_bytes()
        (folder / "sitemap_index.xml").write_bytes(_bump_all(index))
        stamp.write_bytes(_VERSION)


def stored_bytes(db: harness.Database) -> int:
    """The database's bytes in use: SQLite's pages in use, PostgreSQL's tables with indexes."""
    if db.kind == "sqlite":
        return db.count(
            "SELECT (SELECT page_count FROM pragma_page_count()) * "
            "(SELECT page_size FROM pragma_page_size()) - "
            "(SELECT freelist_count FROM pragma_freelist_count()) * "
            "(SELECT page_size FROM pragma_page_size())"
        )
    return db.count(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = 'public'"
    )


def _entry_bytes(db: harness.Database, where: str) -> int:
    length = "length(data)" if db.kind == "sqlite" else "octet_length(data)"
    return db.count(f"SELECT COALESCE(SUM({length}), 0) FROM entry_sets WHERE {where}")


def _check(db: harness.Database, name: str, url: str) -> measure.Measurement:
    argv = [monitor_cli(), "check", url, "--database-url", db.url, "--json"]
    m = measure.run(name, argv, env=child_env())
    try:
        m.extra["result"] = json.loads(m.stdout)
    except json.JSONDecodeError:
        m.extra["result"] = {}
    if m.returncode != 0 or m.extra["result"].get("urls") != EXPECTED:
        print(f"!! {name}: exit {m.returncode}\n{m.stderr[-3000:]}", file=sys.stderr)
        sys.exit(1)
    return m


def measure_pattern(server: harness.Server, kind: str, pattern: str, url: str,
                    times: int = 1, forward: Path | None = None) -> dict[str, Any]:
    """A first check, then ``times`` re-checks of the pattern (back and forth), into a fresh
    database. ``forward`` (the data folder; ``every`` only): each re-check moves every lastmod
    a year further on instead, from W1 ``times`` years back to W1 (no lastmod in the future,
    which would be ``lastmod-future``)."""
    variant, expect = PATTERNS[pattern]
    if forward is not None:
        start = years_overlay(forward, -times)
        steps = [years_overlay(forward, k - times) for k in range(1, times + 1)]
    else:
        start, steps = "base", [variant if n % 2 == 0 else "base" for n in range(times)]
    with database(kind) as db:
        harness.upgrade(db)
        server.variant(start)
        first = _check(db, f"first [{kind}]", url)
        before = stored_bytes(db)
        last = db.count("SELECT MAX(id) FROM snapshots")
        try:
            server.variant(steps[0])
            again = _check(db, f"re-check {pattern} [{kind}]", url)
            _expect(pattern, again, expect)
            added = _entry_bytes(db, f"first_snapshot_id > {last}")
            replaced = _entry_bytes(db, f"removed_snapshot_id > {last}")
            later = []
            for n in range(1, times):
                server.variant(steps[n])
                m = _check(db, f"re-check {pattern} {n + 1} [{kind}]", url)
                _expect(pattern, m, expect)
                later.append(m.tree_cpu)
        finally:
            server.variant("base")
        grown = stored_bytes(db) - before
    return {
        "pattern": pattern, "database": kind, "changed": expect, "times": times,
        "first_wall": first.wall, "first_cpu": first.tree_cpu, "first_pss": first.tree_rss_mb,
        "wall": again.wall, "cpu": again.tree_cpu, "pss": again.tree_rss_mb,
        "rss": again.peak_rss_mb, "stored": grown, "entry_sets_added": added,
        "entry_sets_replaced": replaced, "later_cpu": later,
    }


def _expect(pattern: str, m: measure.Measurement, expect: int) -> None:
    changed = m.extra["result"].get("changed")
    if changed != expect:
        print(f"!! {pattern}: {changed} changed, want {expect}", file=sys.stderr)
        sys.exit(1)


def report(rows: list[dict[str, Any]]) -> list[str]:
    """The table the README pastes (the fastest run of each pattern and database)."""
    times = max(r["times"] for r in rows)
    stored = "stored bytes" if times == 1 else f"stored bytes, {times} re-checks"
    later = "" if times == 1 else f" re-checks 2-{times}, CPU / first check's: mean (most) |"
    lines = [
        f"| W1 re-check | changed | CPU s | / first check's | tree PSS MB | {stored} "
        f"| bytes / changed | entry sets added / replaced |{later}",
        "|---|---|---|---|---|---|---|---|" + ("---|" if later else ""),
    ]
    for r in rows:
        ratios = [cpu / r["first_cpu"] for cpu in r["later_cpu"]]
        steady = f" {sum(ratios) / len(ratios):.2f}x ({max(ratios):.2f}x) |" if ratios else ""
        lines.append(
            f"| {r['pattern']}, {r['database']} | {r['changed']:,} | {r['cpu']:.2f} "
            f"| {r['cpu'] / r['first_cpu']:.2f}x (first {r['first_cpu']:.2f} s) "
            f"| {r['pss']:.0f} | {r['stored']:,} "
            f"| {r['stored'] / (r['changed'] * r['times']) if r['changed'] else 0:.0f} "
            f"| {r['entry_sets_added']:,} / {r['entry_sets_replaced']:,} |"
            + (steady or (" - |" if later else ""))
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], action="append")
    parser.add_argument("--pattern", choices=list(PATTERNS), action="append")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the least CPU counts")
    parser.add_argument("--times", type=int, default=1,
                        help="re-checks of each pattern in a row; bytes a change over all")
    parser.add_argument("--forward", action="store_true",
                        help="every: each re-check moves every lastmod a year further on (a "
                        "CMS that stamps \"now\"), not back and forth")
    parser.add_argument("--data-dir", type=Path, default=workloads.default_data_dir())
    parser.add_argument("--results", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args()
    workloads.ensure("W1", args.data_dir)
    ensure_overlays(args.data_dir)
    kinds = args.database or ["sqlite", "postgres"]
    patterns = args.pattern or list(PATTERNS)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    print(f"sitemap-monitor {harness.commit()}", flush=True)
    with serve(args.data_dir, "w1") as server:
        url = f"{server.origin}/w1/sitemap_index.xml"
        for round_number in range(1, args.repeat + 1):
            for kind in kinds:
                for pattern in patterns:
                    forward = args.data_dir if args.forward and pattern == "every" else None
                    row = measure_pattern(server, kind, pattern, url, args.times, forward)
                    print(f"round {round_number}: {json.dumps(row)}", flush=True)
                    key = (pattern, kind)
                    if key not in best or row["cpu"] < best[key]["cpu"]:
                        best[key] = row
    rows = [best[(p, k)] for k in kinds for p in patterns]
    print("\n".join(report(rows)))
    if args.results:
        args.results.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
