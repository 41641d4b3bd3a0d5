"""Every count, listed: `urls`, `issues`, `diff` and `changes` through the CLI, against
a real local site, on both databases."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peak import run_cli
from site_fixture import Site, index, pages, urlset
from sqlalchemy import func, select

from monitor.cli.commands import main
from monitor.store.db import make_engine
from monitor.store.listingreads import net
from monitor.store.schema import changes, targets
from monitor.store.targetrows import list_targets

U = "https://example.test/"  # entries' locs: never fetched


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def check(capsys: pytest.CaptureFixture[str], url: str, db: str, *extra: str) -> dict[str, Any]:
    code, out, _ = run(capsys, "check", url, "--database-url", db, "--json", *extra)
    assert code in (0, 1), out
    result: dict[str, Any] = json.loads(out)
    return result


def rows(fmt: str, out: str, key: str) -> list[dict[str, Any]]:
    """The rows of a listing's output in a format (a table: its lines after the header)."""
    if fmt == "json":
        found: list[dict[str, Any]] = json.loads(out)[key]
        return found
    if fmt == "ndjson":
        return [json.loads(line) for line in out.splitlines() if '"next_cursor"' not in line]
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(out)))
    lines = out.splitlines()
    header = lines[0].lower().split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]


def listing(capsys: pytest.CaptureFixture[str], db: str, *argv: str,
            fmt: str = "json") -> list[dict[str, Any]]:
    code, out, err = run(capsys, *argv, "--database-url", db, "--format", fmt)
    assert code == 0, err
    assert err == ""  # not cut
    key = "urls" if argv[0] == "urls" else "issues" if argv[0] == "issues" else "changes"
    return rows(fmt, out, key)


def many(prefix: str, n: int, lastmod: str = "2024-01-01") -> dict[str, str | None]:
    return {f"{U}{prefix}{i}": lastmod for i in range(n)}


def test_a_removal_of_50000_urls_is_listed_in_full_in_every_format(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = many("a", 30_000), many("b", 30_000)
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    root = site.url("/index.xml")
    first = check(capsys, root, db)
    assert first["urls"] == 60_000
    # A deploy drops all of b and two thirds of a.
    kept = dict(list(a.items())[:10_000])
    site.set("/a.xml", urlset(kept))
    site.set("/b.xml", urlset({}))
    second = check(capsys, root, db)
    assert second["removed"] == 50_000
    assert second["changes_truncated"] is True
    gone = set(a) - set(kept) | set(b)
    for fmt in ("table", "json", "ndjson", "csv"):
        found = listing(capsys, db, "changes", root, "--kind", "removed", fmt=fmt)
        assert len(found) == 50_000, fmt
        assert {r["loc"] for r in found} == gone, fmt
        net_removed = listing(capsys, db, "diff", root, "--from", str(first["snapshot_id"]),
                              "--kind", "removed", fmt=fmt)
        assert {r["loc"] for r in net_removed} == gone, fmt
    # The first check's URLs, all of them, at its snapshot; now, the 10,000 left.
    at_first = listing(capsys, db, "urls", root, "--at", str(first["snapshot_id"]), fmt="csv")
    assert {r["loc"] for r in at_first} == set(a) | set(b)
    assert {r["loc"] for r in listing(capsys, db, "urls", root, fmt="ndjson")} == set(kept)

    # --limit: a page, the count left and the command that goes on, to the end.
    for argv in (["changes", root, "--kind", "removed"],
                 ["diff", root, "--from", str(first["snapshot_id"]), "--kind", "removed"],
                 ["urls", root, "--at", str(first["snapshot_id"]), "--status", "valid"]):
        seen, lefts = paged(capsys, [*argv, "--database-url", db, "--limit", "20000"])
        expected = gone if argv[0] != "urls" else set(a) | set(b)
        assert lefts == [len(expected) - 20_000, len(expected) - 40_000], argv
        assert len(seen) == len(expected), argv
        assert set(seen) == expected, argv


def paged(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[list[str], list[int]]:
    """Every loc of a listing run as its hints say, page after page (NDJSON); and the counts
    left that each cut page reported."""
    seen: list[str] = []
    lefts = []
    argv = [*argv, "--format", "ndjson"]
    while True:
        code, out, err = run(capsys, *argv)
        assert code == 0
        page = rows("ndjson", out, "")
        seen.extend(r["loc"] for r in page)
        if not err:
            assert '"next_cursor"' not in out
            return seen, lefts
        match = re.fullmatch(r"sitemap-monitor: listed (\d+), (\d+) more: continue with "
                             r"(sitemap-monitor .*)\n", err)
        assert match, err
        assert int(match[1]) == len(page)
        lefts.append(int(match[2]))
        assert json.loads(out.splitlines()[-1])["next_cursor"]
        argv = shlex.split(match[3])[1:]


def test_urls_at_three_past_snapshots(site: Site, db: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    versions = [many("x", 5), {**many("x", 3), **many("y", 4, "2024-02-02")},
                {U + "x0": "2024-03-03", "/relative": None}, many("z", 2)]
    root = site.url("/s.xml")
    ids, times = [], []
    for version in versions:
        site.set("/s.xml", urlset(version))
        result = check(capsys, root, db)
        ids.append(result["snapshot_id"])
        code, out, _ = run(capsys, "history", root, "--database-url", db, "--json", "--limit", "1")
        times.append(json.loads(out)["snapshots"][0]["started_at"])
    for snapshot_id, started, version in zip(ids[:3], times[:3], versions[:3], strict=True):
        by_id = listing(capsys, db, "urls", root, "--at", str(snapshot_id))
        assert {r["loc"]: r["lastmod"] for r in by_id} == version
        assert listing(capsys, db, "urls", root, "--at", started) == by_id
    invalid = listing(capsys, db, "urls", root, "--at", str(ids[2]), "--status", "invalid")
    assert [(r["loc"], r["status"]) for r in invalid] == [("/relative", "invalid")]
    code, _, err = run(capsys, "urls", root, "--database-url", db, "--at", "2001-01-01")
    assert code == 2
    assert "no snapshot at or before 2001-01-01T00:00:00Z" in err


def test_the_first_checks_hint_is_a_command_that_lists_its_urls(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    site.set("/s.xml", urlset(many("p", 1500)))
    root = site.url("/s.xml")
    code, out, _ = run(capsys, "check", root, "--database-url", db, "--max-changes", "10")
    assert code == 0
    hint = re.search(r"\(all 1500 URLs: (sitemap-monitor urls .*)\)", out)
    assert hint, out
    argv = shlex.split(hint[1])[1:]
    found = listing(capsys, db, *argv, fmt="csv")
    assert {r["loc"] for r in found} == set(many("p", 1500))
    # A re-check that found more changes than it shows points to them, and they are all there.
    site.set("/s.xml", urlset(many("p", 1500, "2024-09-09")))
    code, out, _ = run(capsys, "check", root, "--database-url", db, "--max-changes", "10")
    hint = re.search(r"\(all 1500 changes: (sitemap-monitor changes .*)\)", out)
    assert hint, out
    changed = listing(capsys, db, *shlex.split(hint[1])[1:], fmt="ndjson")
    assert len(changed) == 1500
    assert {r["kind"] for r in changed} == {"changed"}


def test_the_current_issues_are_listed_each_with_its_loc_without_reading_the_site_again(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    ok = site.url("/ok")
    bad_dates = {site.url(f"/d{i}"): "yesterday" for i in range(1200)}  # past the examples
    a = {**bad_dates, ok: "2024-01-01", "/relative": None}
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml"), site.url("/c.xml"),
                                  "https://elsewhere.test/x.xml"]))
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset({ok: "2024-01-01", site.url("/b"): "2024-01-01"}))
    site.status["/c.xml"] = 500
    root = site.url("/index.xml")
    result = check(capsys, root, db, "--max-changes", "5")
    assert len(result["issues"]) == 5
    found = listing(capsys, db, "issues", root)
    by_rule: dict[str, int] = {}
    for row in found:
        by_rule[row["rule"]] = by_rule.get(row["rule"], 0) + 1
    assert by_rule == {"lastmod-invalid": 1200, "loc-not-absolute": 1, "loc-duplicate": 1,
                       "child-fetch-failed": 1, "index-child-out-of-scope": 1}
    dates = [r for r in found if r["rule"] == "lastmod-invalid"]
    assert {r["loc"] for r in dates} == set(bad_dates)
    assert dates[0]["message"] == "lastmod 'yesterday' is not a W3C Datetime"
    assert dates[0]["severity"] == "error"
    assert {r["document"] for r in dates} == {site.url("/a.xml")}
    duplicate = next(r for r in found if r["rule"] == "loc-duplicate")
    assert (duplicate["loc"], duplicate["document"]) == (ok, site.url("/b.xml"))
    failed = next(r for r in found if r["rule"] == "child-fetch-failed")
    assert failed["loc"] == site.url("/c.xml")

    # Nothing changed: the documents answer 304, the same issues are listed, and a listing
    # asks the site for nothing.
    again = check(capsys, root, db)
    assert {d["outcome"] for d in again["documents"] if d["outcome"] != "failed"} == {
        "not_modified"}
    requests = len(site.server.requests)
    assert sorted(map(json.dumps, listing(capsys, db, "issues", root))) == sorted(
        map(json.dumps, found))
    assert len(site.server.requests) == requests
    # By rule glob, now that the CMS fixed its dates, and at the first snapshot.
    site.set("/a.xml", urlset({ok: "2024-01-01"}))
    check(capsys, root, db)
    assert listing(capsys, db, "issues", root, "--rule", "lastmod-*") == []
    old = listing(capsys, db, "issues", root, "--rule", "lastmod-*,loc-not-*", "--at",
                  str(result["snapshot_id"]))
    assert len(old) == 1201
    code, _, err = run(capsys, "issues", root, "--database-url", db, "--rule", "nope-*")
    assert (code, err) == (2, "sitemap-monitor: --rule: 'nope-*' matches no rule id\n")


# ---- diff: the changes between two snapshots, composed -------------------------------------

LOCS = [f"{U}h{i}" for i in range(6)]
VERSION = st.dictionaries(st.sampled_from([*LOCS, "/bad"]),
                          st.sampled_from([None, "2024-01-01", "2024-02-02"]), max_size=7)
_examples = iter(range(10**6))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(versions=st.lists(VERSION, min_size=3, max_size=5), data=st.data())
def test_a_diff_between_any_two_snapshots_is_the_composition_of_the_changes_between_them(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], versions: list[dict[str, Any]],
    data: st.DataObject,
) -> None:
    path = f"/h{next(_examples)}.xml"  # a target of its own for each example
    root = site.url(path)
    ids = []
    for version in versions:
        site.set(path, urlset(version))
        ids.append(check(capsys, root, db)["snapshot_id"])
    start = data.draw(st.integers(0, len(ids) - 2))
    end = data.draw(st.integers(start + 1, len(ids) - 1))
    diff = listing(capsys, db, "diff", root, "--from", str(ids[start]), "--to", str(ids[end]))
    # The composition of every change recorded after `from` up to `to`, loc by loc.
    composed: dict[str, list[Any]] = {}
    for change in reversed(listing(capsys, db, "changes", root)):
        if ids[start] < change["snapshot_id"] <= ids[end]:
            first = composed.setdefault(change["loc"], [change["before"], None])
            first[1] = change["after"]
    expected = {loc: (net(b, a), b, a) for loc, (b, a) in composed.items() if net(b, a)}
    assert {r["loc"]: (r["kind"], r["before"], r["after"]) for r in diff} == expected
    # And what comparing the two URL sets gives.
    before = {r["loc"]: r for r in listing(capsys, db, "urls", root, "--at", str(ids[start]))}
    after = {r["loc"]: r for r in listing(capsys, db, "urls", root, "--at", str(ids[end]))}
    moved = {loc for loc in before.keys() | after.keys()
             if loc not in before or loc not in after
             or (before[loc]["lastmod"], before[loc]["status"])
             != (after[loc]["lastmod"], after[loc]["status"])}
    assert {r["loc"] for r in diff} == moved
    assert len(diff) == len({r["loc"] for r in diff})  # each loc once
    # Several kinds are read one index range each and merged: the same rows, in the same order,
    # as the full listing filtered; pages of 3 join up to it too.
    every = listing(capsys, db, "changes", root)
    some = listing(capsys, db, "changes", root, "--kind", "added,removed")
    assert some == [c for c in every if c["kind"] in ("added", "removed")]
    assert pages(capsys, db, "changes", root, "--kind", "removed,changed") == [
        c for c in every if c["kind"] in ("removed", "changed")]
    # The counts the API shows are kept by each check, not counted: they are the rows' (a
    # pack of changed changes stands for its members).
    engine = make_engine(db)
    try:
        stored = next(t for t in list_targets(engine) if t["url"] == root)
        with engine.connect() as conn:
            target_id = conn.execute(select(targets.c.id).where(targets.c.url == root)).scalar()
            assert stored["changes"] == len(every) == conn.execute(
                select(func.coalesce(func.sum(func.coalesce(changes.c.members, 1)), 0))
                .where(changes.c.target_id == target_id)
            ).scalar()
        assert stored["snapshots"] == len(ids)
    finally:
        engine.dispose()


def test_a_listing_takes_the_same_memory_for_150000_rows_as_for_50000(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """Constant memory: one document's entries at a time (``urls``), rows as the database sends
    them (``changes``, ``diff``). Peaks of the CLI in a child process, as a user runs it."""
    peaks: dict[tuple[str, int], float] = {}
    for children in (1, 3):
        name = f"/t{children}"
        paths = [f"{name}/{c}.xml" for c in range(children)]
        site.set(f"{name}/index.xml", index([site.url(p) for p in paths]))
        for c, path in enumerate(paths):
            site.set(path, urlset(many(f"{children}-{c}-", 50_000)))
        root = site.url(f"{name}/index.xml")
        first = check(capsys, root, db)["snapshot_id"]
        for c, path in enumerate(paths):
            site.set(path, urlset(many(f"{children}-{c}-", 50_000, "2024-05-05")))
        assert check(capsys, root, db)["changed"] == 50_000 * children
        for argv in (["urls", root], ["changes", root], ["diff", root, "--from", str(first)]):
            proc, peak = run_cli(*argv, "--database-url", db, "--format", "csv")
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.count("\n") == 50_000 * children + 1
            peaks[argv[0], children] = peak
    for listing_name in ("urls", "changes", "diff"):
        small, big = peaks[listing_name, 1], peaks[listing_name, 3]
        assert big < small + 12, (listing_name, small, big)
    print(peaks)


def test_a_reader_that_stops_early_ends_the_listing_quietly(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    site.set("/s.xml", urlset(many("q", 50_000)))
    root = site.url("/s.xml")
    check(capsys, root, db)
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli.commands", "urls", root,
                             "--database-url", db, "--format", "csv"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    header = b"loc,document,status,lastmod,changefreq,priority,extensions\r\n"
    assert proc.stdout.readline() == header
    proc.stdout.close()  # `| head -1`
    assert proc.wait(timeout=60) == 0
    with proc.stderr:
        assert proc.stderr.read() == b""  # no traceback, no "more" line
