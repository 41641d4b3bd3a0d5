"""Listings sorted by a column across the whole listing, page after page (``--sort``, the
API's ``sort=``): the CLI against a real local site, on both databases.

Each sort is read whole and in pages of a few rows that follow each other's cursor: both give
the same rows, in the order of the column (empty values last either way), and the same rows as
the listing in its stored order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply
from site_fixture import Site, urlset

from monitor.cli.commands import main
from monitor.listing.sorting import SORTS
from monitor.store import changelisting
from monitor.store import listingreads as store_listings

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 600 + b"</body></html>"
SEVERITY = {"error": 0, "warning": 1}


def run(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> dict[str, Any]:
    code = main([*argv, "--database-url", db, "--json"])
    found = capsys.readouterr()
    assert code == 0, found.err
    answer: dict[str, Any] = json.loads(found.out)
    return answer


def paged(capsys: pytest.CaptureFixture[str], db: str, key: str, *argv: str,
          size: int) -> list[dict[str, Any]]:
    """Every row of a listing, ``size`` at a time, each page after the last one's cursor."""
    found: list[dict[str, Any]] = []
    more: list[str] = []
    while True:
        page = run(capsys, db, *argv, "--limit", str(size), *more)
        found.extend(page[key])
        assert len(page[key]) <= size
        if page["next_cursor"] is None:
            return found
        more = ["--cursor", page["next_cursor"]]


def in_order(values: list[Any], descending: bool) -> bool:
    """Empty values last, the others up (or down)."""
    present = [v for v in values if v not in (None, "")]
    if values[:len(present)] != present:
        return False
    return present == sorted(present, reverse=descending)


def same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    def text(rows: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(row, sort_keys=True) for row in rows)
    return text(a) == text(b)


@pytest.fixture
def watched(site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Four checks of a 120-URL target in two documents, URL checks on: lastmods of three
    kinds (and none), invalid entries, pages that answer 404 and 410; then removals (some
    pages still answer, some are gone), additions and lastmod changes."""
    locs = [site.url(f"/{'shoes' if i % 3 else 'hats'}-{i:03d}") for i in range(120)]
    for i, loc in enumerate(locs):
        status = 404 if i % 17 == 0 else 410 if i % 29 == 0 and i > 60 else 200
        site.server.route("/" + loc.split("/", 3)[3],
                          Reply(status, PAGE, {"Content-Type": "text/html"}))
    lastmods = ["2024-01-0" + str(1 + i % 9) if i % 4 else None for i in range(120)]
    for i in range(3, 120, 10):  # issues of their entries: errors and warnings
        lastmods[i] = "2099-01-01"
        lastmods[i + 3] = "soon"
    lastmods[8] = "yesterday"
    lastmods[68] = "2024-13-45"

    def publish(keep: Callable[[int], bool], moved: Callable[[int], bool]) -> None:
        entries = {loc: ("2025-06-06" if moved(i) else lastmods[i])
                   for i, loc in enumerate(locs) if keep(i)}
        first = dict(list(entries.items())[:70])
        # a relative loc, and one listed twice: issues of other rules
        second = {**dict(list(entries.items())[70:]), "/relative": None, locs[8]: None}
        site.set("/a.xml", urlset(first))
        site.set("/b.xml", urlset(second))

    site.set("/s.xml", (
        '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex '
        'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{site.url('/a.xml')}</loc></sitemap>"
        f"<sitemap><loc>{site.url('/b.xml')}</loc></sitemap></sitemapindex>").encode())
    config = tmp_path / "monitor.yaml"
    config.write_text("defaults:\n  url_checks: {enabled: true, rate: 1000}\n"
                      f"targets:\n  - {{name: t, url: '{site.url('/s.xml')}'}}\n",
                      encoding="utf-8")
    check = ["check", "t", "--config", str(config), "--database-url", db, "--urls"]
    publish(lambda i: i < 100, lambda i: False)
    assert main(check) in (0, 1), capsys.readouterr().err
    publish(lambda i: i % 5 != 0, lambda i: i % 7 == 0)  # removals, additions, changes
    assert main(check) in (0, 1), capsys.readouterr().err
    publish(lambda i: i % 5 != 0 and i % 11 != 0, lambda i: i % 7 == 0 or i % 13 == 0)
    assert main(check) in (0, 1), capsys.readouterr().err
    capsys.readouterr()
    return db


CASES = [
    ("urls", "urls", (), "urls"),
    ("urls", "urls", ("--at", "1"), "urls"),
    ("urls", "urls", ("--loc", "SHOES-0"), "urls"),
    ("urls", "urls", ("--status", "ok"), "health"),
    ("issues", "issues", (), "issues"),
    ("changes", "changes", (), "changes"),
    ("changes", "changes", ("--kind", "removed,added"), "changes"),
    ("changes", "changes", ("--loc", "shoes-0"), "changes"),
    ("diff", "changes", ("--from", "1"), "diff"),
    ("diff", "changes", ("--from", "2"), "diff"),
]


def test_every_sort_of_every_listing_orders_it_whole_page_after_page(
        watched: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = watched
    # The documents' listings keep a few rows a read of them all: many reads, one listing.
    monkeypatch.setattr(store_listings, "FIRST_PASS", 3)
    monkeypatch.setattr(store_listings, "PASS", 5)
    for command, key, options, sorts in CASES:
        stored = run(capsys, db, command, "t", *options)[key]
        assert len(stored) > 7, (command, options)
        for column in SORTS[sorts]:
            for sort in (column, f"-{column}"):
                asked = (command, *options, f"--sort={sort}")
                whole = run(capsys, db, command, "t", *options, f"--sort={sort}")[key]
                assert same_rows(whole, stored), asked
                values = [row.get(column) for row in whole] if column != "at" else [
                    row["snapshot_id"] for row in whole]
                if column == "severity":
                    values = [SEVERITY[v] for v in values]
                assert in_order(values, sort.startswith("-")), (asked, values)
                assert paged(capsys, db, key, command, "t", *options, f"--sort={sort}",
                             size=7) == whole, asked


def test_the_snapshots_sort_by_their_counts(watched: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = watched
    stored = run(capsys, db, "history", "t")["snapshots"]
    assert len(stored) == 3
    for sort in ("urls", "-urls", "removed", "-id", "finished_at", "outcome"):
        column = sort.removeprefix("-")
        whole = run(capsys, db, "history", "t", f"--sort={sort}", "--limit", "10")["snapshots"]
        assert same_rows(whole, stored), sort
        assert in_order([s[column] for s in whole], sort.startswith("-")), sort
        found, more = [], []
        while True:
            code = main(["history", "t", "--database-url", db, "--json", f"--sort={sort}",
                         "--limit", "1", *more])
            page = json.loads(capsys.readouterr().out)
            assert code == 0
            found += page["snapshots"]
            if page["next_cursor"] is None:
                break
            more = ["--cursor", page["next_cursor"]]
        assert found == whole, sort


def test_a_column_a_listing_cannot_sort_by_is_refused(
        watched: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = watched
    code = main(["changes", "t", "--database-url", db, "--sort", "document"])
    assert code == 2
    assert "--sort: 'document' is not one of at, kind, reason, rule" in capsys.readouterr().err
    code = main(["urls", "t", "--database-url", db, "--sort", "since"])
    assert code == 2
    assert "is not one of loc, status, lastmod, document" in capsys.readouterr().err
    # a cursor of one order does not go on in another
    page = run(capsys, db, "urls", "t", "--sort", "loc", "--limit", "3")
    code = main(["urls", "t", "--database-url", db, "--sort=-loc", "--cursor",
                 page["next_cursor"]])
    assert code == 2
    assert "another query" in capsys.readouterr().err


@pytest.mark.parametrize("found_locs", [changelisting.SEARCH_LOCS, 2])
def test_a_search_of_the_changes_finds_what_reading_them_all_finds(
        watched: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        found_locs: int) -> None:
    """Whether the search reads the rows of the few locs it found, or (more found than
    ``SEARCH_LOCS``) every row in order, packed lastmod changes among them."""
    db = watched
    monkeypatch.setattr(changelisting, "SEARCH_LOCS", found_locs)
    every = run(capsys, db, "changes", "t")["changes"]
    assert any(row["kind"] == "changed" for row in every)
    for q in ("SHOES-07", "hats-0", "/shoes-1", "127.0.0.1", "no-loc-holds-this"):
        wanted = [row for row in every if q.lower() in row["loc"].lower()]
        assert run(capsys, db, "changes", "t", "--loc", q)["changes"] == wanted, q
        assert paged(capsys, db, "changes", "changes", "t", "--loc", q, size=4) == wanted, q
        kinds = [row for row in every if row["kind"] in ("changed", "removed")
                 and q.lower() in row["loc"].lower()]
        assert run(capsys, db, "changes", "t", "--loc", q, "--kind", "changed,removed",
                   )["changes"] == kinds, q
