"""Entry sets stored in format 1, as every release before format 2 stored them: a re-check
reads them as it reads format 2 (the same changes, the same listings) and stores format 2 from
then on. Through the CLI, against a sitemap served by a real HTTP server on 127.0.0.1, with
each backend's database."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

import pytest
from site_fixture import Site, urlset
from sqlalchemy import text

from monitor.cli.commands import main
from monitor.codec import entryset
from monitor.store.db import make_engine

N = 3_000  # ~100 KB of locs: more than one digest group (monitor.codec.packedlocs)


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["check", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out  # type: ignore[no-any-return]


def versions(db: str) -> list[int]:
    """The format of each stored set (a delta's header says its version's), in row order."""
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT data FROM entry_sets ORDER BY id")).all()
    finally:
        engine.dispose()
    found = []
    for (data,) in rows:
        value = bytes(data)
        head = zlib.decompressobj().decompress(value[1:] if value[:1] == b"D" else value, 64)
        match = re.match(rb'\{"v":([0-9]+),', head)
        assert match is not None, head
        found.append(int(match.group(1)))
    return found


def to_format_1(db: str) -> None:
    """Every stored set written back in format 1 (as migration 0014's downgrade writes it)."""
    engine = make_engine(db)
    try:
        with engine.begin() as conn:
            for set_id, data in conn.execute(text("SELECT id, data FROM entry_sets")).all():
                conn.execute(text("UPDATE entry_sets SET data = :d WHERE id = :i"),
                             {"d": entryset.in_version_1(bytes(data)), "i": set_id})
    finally:
        engine.dispose()


@pytest.mark.parametrize("stored", [1, 2])
def test_a_recheck_reads_sets_of_format_1_as_it_reads_format_2(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], stored: int,
) -> None:
    url = site.url("/sitemap.xml")
    locs = [site.url(f"/products/{i:05d}") for i in range(N)]
    site.set("/sitemap.xml", urlset(dict.fromkeys(locs, "2024-05-01")))
    check(capsys, url, "--database-url", db)
    if stored == 1:
        to_format_1(db)
    assert versions(db) == [stored]
    # Every 10th lastmod moves (a re-read against the stored set), then a URL is added too
    # (the whole document validated and diffed against it).
    moved = {loc: "2024-06-01" if i % 10 == 0 else "2024-05-01" for i, loc in enumerate(locs)}
    site.set("/sitemap.xml", urlset(moved))
    again = check(capsys, url, "--database-url", db)
    assert (again["added"], again["removed"], again["changed"]) == (0, 0, N // 10)
    site.set("/sitemap.xml", urlset({**moved, site.url("/new"): "2024-06-02"}))
    last = check(capsys, url, "--database-url", db)
    assert (last["added"], last["removed"], last["changed"]) == (1, 0, 0)
    assert versions(db)[0] == stored
    assert versions(db)[1:] == [2, 2]  # what a re-check stores is format 2
    capsys.readouterr()
    assert main(["urls", url, "--database-url", db, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["urls"]
    assert [row["loc"] for row in listed] == [*locs, site.url("/new")]
    assert main(["changes", url, "--database-url", db, "--kind", "changed", "--format",
                 "json"]) == 0
    changed = json.loads(capsys.readouterr().out)["changes"]
    assert sorted(row["loc"] for row in changed) == locs[::10]
