"""A re-check's ``changed`` changes are stored as packs (monitor.codec.changepacks) and listed as
the rows they replace: `changes`, `diff` and their pages, on both databases, through the CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from site_fixture import Site, index, pages, urlset
from sqlalchemy import func, select

from monitor.cli.commands import main
from monitor.codec import entryset
from monitor.store.db import make_engine
from monitor.store.schema import changes, entry_sets

U = "https://example.test/"  # entries' locs: never fetched
N = 12_000  # more than two packs' worth


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def check(capsys: pytest.CaptureFixture[str], url: str, db: str) -> int:
    code, out, err = run(capsys, "check", url, "--database-url", db, "--json")
    assert code == 0, err
    snapshot_id: int = json.loads(out)["snapshot_id"]
    return snapshot_id


def state(lastmod: str) -> dict[str, Any]:
    return {"lastmod": lastmod}


def test_every_lastmod_changed_is_a_few_packs_listed_change_by_change(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    first = {f"{U}p{i}": "2024-01-01" for i in range(N)}
    second = dict.fromkeys(list(first)[10:], "2024-02-02")  # 10 removed, the rest changed
    second.update({f"{U}new{i}": "2024-02-02" for i in range(10)})  # and 10 added
    second[f"{U}p20"] = "not a date"  # changed to an invalid lastmod: still a change
    third = {**second, **{f"{U}p{i}": "2024-03-03" for i in range(100, 200)}}
    # two children: the packs of one point into its own entry-set version, not the other's
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    site.set("/b.xml", urlset({f"{U}b{i}": "2024-01-01" for i in range(100)}))
    root = site.url("/index.xml")
    ids = []
    for version, b_lastmod in ((first, "2024-01-01"), (second, "2024-02-02"),
                               (third, "2024-02-02")):
        site.set("/a.xml", urlset(version))
        site.set("/b.xml", urlset({f"{U}b{i}": b_lastmod for i in range(100)}))
        ids.append(check(capsys, root, db))

    expected_changed = {
        **{loc: (state("2024-01-01"), state("2024-02-02")) for loc in list(first)[10:]},
        **{f"{U}b{i}": (state("2024-01-01"), state("2024-02-02")) for i in range(100)},
    }
    expected_changed[f"{U}p20"] = (state("2024-01-01"), state("not a date"))
    listed = pages(capsys, db, "changes", root, size=2_500)  # pages that stop inside a pack
    at_second = [c for c in listed if c["snapshot_id"] == ids[1]]
    assert {c["loc"]: (c["before"], c["after"]) for c in at_second
            if c["kind"] == "changed"} == expected_changed
    assert sum(c["kind"] == "changed" for c in at_second) == len(expected_changed)
    assert sorted(c["loc"] for c in at_second if c["kind"] == "removed") == sorted(
        list(first)[:10])
    assert sum(c["kind"] == "added" for c in at_second) == 10
    assert [c["loc"] for c in listed if c["snapshot_id"] == ids[2]] == [
        f"{U}p{i}" for i in reversed(range(100, 200))]  # newest first, as rows would be
    # One page reads the same rows as pages of any size, in the same order.
    code, out, err = run(capsys, "changes", root, "--database-url", db, "--json")
    assert code == 0, err
    assert json.loads(out)["changes"] == listed
    # One kind.
    assert pages(capsys, db, "changes", root, "--kind", "changed", size=4_999) == [
        c for c in listed if c["kind"] == "changed"]

    # The diff of one check: its changes in the order it recorded them, pages joined up.
    diff = pages(capsys, db, "diff", root, "--from", str(ids[0]), "--to", str(ids[1]),
                 size=3_000)
    assert {c["loc"]: (c["before"], c["after"]) for c in diff
            if c["kind"] == "changed"} == expected_changed
    assert len(diff) == len(at_second)
    # Across checks, composed loc by loc: the first's before, the last's after.
    across = pages(capsys, db, "diff", root, "--from", str(ids[0]), "--to", str(ids[2]),
                   size=2_000)
    assert [c["loc"] for c in across] == sorted(c["loc"] for c in across)
    composed = {c["loc"]: (c["kind"], c["before"], c["after"]) for c in across}
    assert len(composed) == len(across) == len(at_second)
    assert composed[f"{U}p150"] == ("changed", state("2024-01-01"), state("2024-03-03"))
    assert composed[f"{U}p50"] == ("changed", state("2024-01-01"), state("2024-02-02"))
    assert composed[f"{U}p5"][0] == "removed"
    assert composed[f"{U}new5"][0] == "added"

    # What is stored: a few packs, not a row per change, counted as their changes.
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            c = changes.c
            rows, packs, members, pack_bytes, positional = conn.execute(
                select(func.count(), func.count(c.pack), func.sum(c.members),
                       func.sum(func.length(c.pack)), func.count(c.before_set_id))
                .where(c.snapshot_id == ids[1])).one()
            # the third check re-read a.xml (its locs stayed): positions only
            third = conn.execute(select(c.members, c.before_set_id)
                                 .where(c.snapshot_id == ids[2])).all()
    finally:
        engine.dispose()
    assert packs == 4  # a: 11,990 changed in 3 packs of at most 5,000; b: 100 in one
    assert members == len(expected_changed)
    assert rows == packs + 20  # the added and removed ones are rows of their own
    assert pack_bytes / members < 12  # a position and a lastmod before, compressed
    # b.xml was re-read (its locs stayed): its pack holds positions, and the version before
    # the states before; a.xml's locs moved, so its packs hold their states before.
    assert positional == 1
    assert len(third) == 1
    assert third[0].members == 100
    assert third[0].before_set_id is not None


def urls_at(capsys: pytest.CaptureFixture[str], db: str, root: str, snapshot: int,
            ) -> dict[str, str | None]:
    code, out, err = run(capsys, "urls", root, "--database-url", db, "--json", "--at",
                         str(snapshot))
    assert code == 0, err
    return {u["loc"]: u["lastmod"] for u in json.loads(out)["urls"]}


def test_a_version_that_changed_a_little_is_a_delta_and_reads_back_whole(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """1% of a document's lastmods move at each check: each version after the first is stored
    as a delta against the first (monitor.codec.entrydelta), and the URL set at every snapshot, the
    changes and the next re-check read it as if it were whole."""
    versions = [{f"{U}d{i}": "2024-01-01" for i in range(5_000)}]
    for step in range(1, 4):
        versions.append({**versions[-1], **{f"{U}d{i}": f"2024-0{step + 1}-01"
                                            for i in range(step, 5_000, 100)}})
    root = site.url("/d.xml")
    ids = []
    for version in versions:
        site.set("/d.xml", urlset(version))
        ids.append(check(capsys, root, db))
    for snapshot, version in zip(ids, versions, strict=True):
        assert urls_at(capsys, db, root, snapshot) == version
    listed = pages(capsys, db, "changes", root, size=1_000)
    assert len(listed) == 150  # 50 a check, each against the version before
    assert {(c["loc"], c["after"]["lastmod"]) for c in listed if c["snapshot_id"] == ids[3]} == {
        (f"{U}d{i}", "2024-04-01") for i in range(3, 5_000, 100)}
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            v = entry_sets.c
            stored = conn.execute(select(v.id, v.base_id, func.length(v.data))
                                  .order_by(v.id)).all()
    finally:
        engine.dispose()
    whole = stored[0]
    assert whole.base_id is None
    assert [row.base_id for row in stored[1:]] == [whole.id] * 3  # never a delta of a delta
    assert all(row[2] * 50 <= whole[2] for row in stored[1:])  # each under 2% of it
    # Unchanged since: a re-check reads the delta's version whole and finds nothing new.
    assert check(capsys, root, db) > ids[-1]
    assert pages(capsys, db, "changes", root, size=1_000) == listed
    # New bytes, the same entries: the version stored as a delta is the same set, and no
    # version or change is written.
    site.set("/d.xml", urlset(versions[-1]).replace(b"<url>", b"\n  <url>"))
    check(capsys, root, db)
    assert pages(capsys, db, "changes", root, size=1_000) == listed
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(entry_sets)).scalar() == 4
    finally:
        engine.dispose()


def test_a_re_read_of_a_version_stored_as_a_delta_packs_no_whole_version(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The re-read of a document whose version is stored as a delta resolves it where it is
    digested: the check's process does not apply it and pack it whole first (a W1 child took
    45 ms there, and the digest unpacked it again). Its new version is a delta too, made from
    the columns: nothing is packed whole (22 ms a W1 child)."""
    versions = [{f"{U}d{i}": "2024-01-01" for i in range(5_000)}]
    for step in (1, 2):
        versions.append({**versions[-1], **{f"{U}d{i}": f"2024-0{step + 1}-01"
                                            for i in range(step, 5_000, 100)}})
    root = site.url("/d.xml")
    for version in versions[:2]:
        site.set("/d.xml", urlset(version))
        check(capsys, root, db)
    packed: list[int] = []
    real = entryset.pack

    def counted(*args: Any, **kwargs: Any) -> bytes:
        packed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(entryset, "pack", counted)
    site.set("/d.xml", urlset(versions[2]))
    snapshot = check(capsys, root, db)
    assert packed == []
    assert urls_at(capsys, db, root, snapshot) == versions[2]


def test_a_duplicate_dropped_from_a_re_read_stored_as_a_delta(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """A re-read whose new version is a delta alone (never packed whole) that lists a loc an
    earlier document of the check now lists too: the duplicate is dropped from it as from
    any document, its version is made whole for that, and the URL stays listed once."""
    d = {f"{U}d{i}": "2024-01-01" for i in range(5_000)}
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/d.xml")]))
    site.set("/a.xml", urlset({f"{U}a": "2024-01-01"}))
    site.set("/d.xml", urlset(d))
    root = site.url("/index.xml")
    check(capsys, root, db)
    moved = {**d, **{f"{U}d{i}": "2024-02-02" for i in range(0, 5_000, 100)}}
    site.set("/d.xml", urlset(moved))
    site.set("/a.xml", urlset({f"{U}a": "2024-01-01", f"{U}d7": "2024-01-01"}))
    code, out, err = run(capsys, "check", root, "--database-url", db, "--json")
    assert code == 0, err
    found = json.loads(out)
    documents = {d["url"]: (d["urls"], d["duplicates"]) for d in found["documents"]}
    assert documents[site.url("/d.xml")] == (4_999, 1)
    assert documents[site.url("/a.xml")] == (2, 0)
    assert (found["urls"], found["duplicates"], found["added"], found["removed"],
            found["changed"]) == (5_001, 1, 0, 0, 50)
    assert urls_at(capsys, db, root, found["snapshot_id"]) == {f"{U}a": "2024-01-01", **moved}


def test_a_lastmod_made_invalid_in_a_re_read_stored_as_a_delta(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """A re-read whose new version is a delta alone, one of whose moved lastmods is not a date
    (a verdict the delta carries in its header): every change lists back as it was found, and
    the URL set at that snapshot is the document's."""
    d = {f"{U}d{i}": "2024-01-01" for i in range(5_000)}
    root = site.url("/d.xml")
    site.set("/d.xml", urlset(d))
    check(capsys, root, db)
    moved = {**d, **{f"{U}d{i}": "2024-02-02" for i in range(0, 5_000, 100)},
             f"{U}d7": "not a date"}
    site.set("/d.xml", urlset(moved))
    code, out, err = run(capsys, "check", root, "--database-url", db, "--json")
    assert code == 0, err
    found = json.loads(out)
    code, out, err = run(capsys, "issues", root, "--database-url", db, "--format", "json")
    assert code == 0, err
    issues = json.loads(out)["issues"]
    assert [i["loc"] for i in issues if i["rule"] == "lastmod-invalid"] == [f"{U}d7"]
    listed = pages(capsys, db, "changes", root, size=1_000)
    assert sorted((c["kind"], c["loc"], c["after"]["lastmod"]) for c in listed) == sorted(
        [("changed", f"{U}d{i}", "2024-02-02") for i in range(0, 5_000, 100)]
        + [("changed", f"{U}d7", "not a date")])
    assert urls_at(capsys, db, root, found["snapshot_id"]) == moved
