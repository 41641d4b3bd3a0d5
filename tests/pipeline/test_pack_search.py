"""A search of the changes by a part of the loc finds in packs exactly the rows a row per change
would have given: every change whose loc holds the text (case aside), none other, in the same
order page after page, whatever the pages' size; on both databases, through the CLI, against
what the site served."""

from __future__ import annotations

import json
from typing import Any

import pytest
from site_fixture import Site, index, pages, urlset
from sqlalchemy import func, select

from monitor.cli.commands import main
from monitor.codec import changepacks
from monitor.store.db import make_engine
from monitor.store.schema import changes

ROTATING = 150  # URLs a generation: more than PACK_MIN, so added and removed are packs
MEMBERS = 16  # a pack's members here: a version's changes span many packs, pages cross them


def generation(n: int) -> tuple[dict[str, str], dict[str, str]]:
    """The two children at the ``n``-th check: ``a`` rotates 150 URLs (and moves the lastmods
    of 40 it keeps: ``changed`` packs with their states before), ``b`` keeps its URLs in
    place and moves every lastmod (packs of positions whose states before are the previous
    version's)."""
    day = f"2026-01-{n + 1:02d}"
    a = {f"https://e.test/Gen{n}/item-{i}": day for i in range(ROTATING)}
    a.update({f"https://e.test/keep/Item-{i}": day for i in range(40)})
    b = {f"https://e.test/b/page-{i}": day for i in range(120)}
    return a, b


def served_changes(checks: int, ids: list[int], q: str) -> list[tuple[Any, ...]]:
    """The changes each re-check found, as rows of their own would list them (loc holding
    ``q``, case aside): (snapshot id, kind, loc, before, after), sorted."""
    out = []
    for n in range(1, checks):
        was = {k: v for part in generation(n - 1) for k, v in part.items()}
        now = {k: v for part in generation(n) for k, v in part.items()}
        for loc in was.keys() | now.keys():
            if q.lower() not in loc.lower():
                continue
            before, after = was.get(loc), now.get(loc)
            if before == after:
                continue
            kind = "added" if before is None else "removed" if after is None else "changed"
            out.append((ids[n], kind, loc, None if before is None else {"lastmod": before},
                        None if after is None else {"lastmod": after}))
    return sorted(out, key=repr)


def listed(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["snapshot_id"], r["kind"], r["loc"], r["before"], r["after"]) for r in rows]


def one_page(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> list[dict[str, Any]]:
    code = main([*argv, "--database-url", db, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    page = json.loads(out.out)
    assert page["next_cursor"] is None
    rows: list[dict[str, Any]] = page["changes"]
    return rows


SEARCHES = [
    ("GEN2/ITEM-14", 4),  # case aside: item-14 and item-140..149 of one generation
    ("https://e.test/Gen1/item-149", 1),  # one whole loc: its addition and its removal
    ("/item-1", 25),  # many, in every pack of rotating locs: item-1, 10-19, 100-149
    ("/b/page-11", 3),  # packs of positions: page-11, 110-119, at each re-check
    ("keep/item-3", 5),  # changed, with their states before in the pack
    ("nothing-holds-this", 2),
]


def test_a_search_finds_in_packs_what_rows_would_list(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(changepacks, "MEMBERS", MEMBERS)
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    root = site.url("/index.xml")
    ids = []
    checks = 4
    for n in range(checks):
        a, b = generation(n)
        site.set("/a.xml", urlset(a))
        site.set("/b.xml", urlset(b))
        code = main(["check", root, "--database-url", db, "--json", "--max-changes", "0"])
        out = capsys.readouterr()
        assert code == 0, out.err
        ids.append(json.loads(out.out)["snapshot_id"])
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            packs = dict(conn.execute(
                select(changes.c.kind, func.count()).where(changes.c.members.is_not(None))
                .group_by(changes.c.kind)).all())
    finally:
        engine.dispose()
    # each re-check: 150 additions and removals, 40 + 120 changes, in packs of 16 at most
    assert packs == {"added": 30, "removed": 30, "changed": 3 * (3 + 8)}
    everything = one_page(capsys, db, "changes", root)
    assert sorted(listed(everything), key=repr) == served_changes(checks, ids, "")

    for q, size in SEARCHES:
        expected = served_changes(checks, ids, q)
        newest = one_page(capsys, db, "changes", root, "--loc", q)
        assert sorted(listed(newest), key=repr) == expected, q
        # the order of the whole listing, kept: newest first, a pack's members from its last
        assert [r for r in everything if q.lower() in r["loc"].lower()] == newest, q
        assert pages(capsys, db, "changes", root, "--loc", q, size=size) == newest, q
        oldest = pages(capsys, db, "changes", root, "--loc", q, "--sort", "at", size=size)
        assert oldest == newest[::-1], q
        removed = pages(capsys, db, "changes", root, "--loc", q, "--kind", "removed",
                        size=size)
        assert removed == [r for r in newest if r["kind"] == "removed"], q
        by_kind = pages(capsys, db, "changes", root, "--loc", q, "--sort", "kind", size=size)
        assert by_kind == sorted(newest, key=lambda r: r["kind"]), q  # each newest first
