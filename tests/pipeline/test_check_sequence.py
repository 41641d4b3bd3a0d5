"""`sitemap-monitor check` against a real local site, check after check, on both databases.

Each step changes the site, runs the CLI exactly as a user does and asserts the exact counts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from site_fixture import Site, index, row_counts, url_set_at, urlset
from sqlalchemy import Engine, create_engine, event, func, select

from monitor.cli.commands import main
from monitor.store.schema import changes, entry_sets, snapshots, target_documents, targets

U = "https://example.test/"  # entries' locs: never fetched


def check(capsys: pytest.CaptureFixture[str], url: str, db: str, *extra: str) -> tuple[int, Any]:
    """Run the CLI's check; return its exit code and JSON."""
    code = main(["check", url, "--database-url", db, "--json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out)


def counts(result: dict[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(urls, invalid, added, removed, changed, newly invalid) of a check's JSON."""
    new_invalid = sum(1 for c in result["changes"] if c["kind"] == "invalid")
    return (result["urls"], result["invalid"], result["added"], result["removed"],
            result["changed"], new_invalid)


def outcomes(result: dict[str, Any]) -> dict[str, str]:
    """Document path -> outcome."""
    return {d["url"].rsplit("/", 1)[1]: d["outcome"] for d in result["documents"]}


def rules(result: dict[str, Any]) -> set[str]:
    """The rule ids reported by a check."""
    return {i["rule"] for i in result["issues"]}


def test_sequence(site: Site, database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = database_url.replace("postgresql+psycopg://", "postgresql://")
    if db.startswith("postgresql"):  # only SQLite is migrated by `check` itself
        assert main(["check", "https://example.test/x.xml", "--database-url", db]) == 2
        assert "sitemap-monitor db upgrade" in capsys.readouterr().err
        assert main(["db", "upgrade", "--database-url", db]) == 0
        assert "is at" in capsys.readouterr().out
    a = {U + "1": "2024-01-01", U + "2": "2024-01-01"}
    b = {U + "3": "2024-01-01"}
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    root = site.url("/index.xml")

    # 1. First check: every URL is added.
    code, r = check(capsys, root, db)
    assert code == 0
    assert r["outcome"] == "ok"
    assert counts(r) == (3, 0, 3, 0, 0, 0)
    first = r["snapshot_id"]

    # 2. An addition: the unchanged index and child answer 304.
    a[U + "4"] = "2024-01-01"
    site.set("/a.xml", urlset(a))
    code, r = check(capsys, root, db)
    assert code == 0
    assert counts(r) == (4, 0, 1, 0, 0, 0)
    assert outcomes(r) == {"index.xml": "not_modified", "a.xml": "ok", "b.xml": "not_modified"}
    assert [c["loc"] for c in r["changes"]] == [U + "4"]

    # 3. A removal.
    del a[U + "2"]
    site.set("/a.xml", urlset(a))
    code, r = check(capsys, root, db)
    assert counts(r) == (3, 0, 0, 1, 0, 0)
    assert r["changes"][0]["kind"] == "removed"
    assert r["changes"][0]["loc"] == U + "2"

    # 4. A lastmod change.
    a[U + "1"] = "2024-06-01"
    site.set("/a.xml", urlset(a))
    code, r = check(capsys, root, db)
    assert counts(r) == (3, 0, 0, 0, 1, 0)
    change = r["changes"][0]
    assert change["before"]["lastmod"] == "2024-01-01"
    assert change["after"]["lastmod"] == "2024-06-01"

    # 5. A new invalid entry (its loc is unusable): counted in invalid, not in urls, reported
    # as `invalid`.
    a["/5"] = "2024-01-01"
    site.set("/a.xml", urlset(a))
    code, r = check(capsys, root, db)
    assert code == 0
    assert counts(r) == (3, 1, 0, 0, 0, 1)
    assert "loc-not-absolute" in rules(r)
    code, r = check(capsys, root, db, "--fail-on", "invalid")
    assert code == 0, "no new invalid entry in an unchanged check"
    before_failures = r["snapshot_id"]

    # 6. HTTP 500 on the index: the check fails, nothing is removed.
    site.status["/index.xml"] = 500
    code, r = check(capsys, root, db)
    assert code == 1
    assert r["outcome"] == "failed"
    assert r["error"]["kind"] == "http-status"
    assert counts(r) == (3, 1, 0, 0, 0, 0)
    del site.status["/index.xml"]

    # 7. A truncated child: that child fails, its URLs stay, nothing is removed.
    good_a = site.docs["/a.xml"]
    site.set("/a.xml", good_a[: len(good_a) // 2])
    code, r = check(capsys, root, db)
    assert code == 0
    assert counts(r) == (3, 1, 0, 0, 0, 0)
    assert outcomes(r)["a.xml"] == "failed"
    assert {"xml-malformed", "child-fetch-failed"} <= rules(r)
    site.set("/a.xml", good_a)

    # 8. 304 everywhere: unchanged, and no entry or change row is written.
    code, r = check(capsys, root, db)  # reads a.xml again after the failure
    rows = row_counts(db, entry_sets, changes)
    code, r = check(capsys, root, db)
    assert r["outcome"] == "unchanged"
    assert counts(r) == (3, 1, 0, 0, 0, 0)
    assert set(outcomes(r).values()) == {"not_modified"}
    assert row_counts(db, entry_sets, changes) == rows

    # 9. No ETags: the bodies are fetched, hashed and found unchanged; nothing parsed.
    site.etags = False
    code, r = check(capsys, root, db)
    assert r["outcome"] == "unchanged"
    assert set(outcomes(r).values()) == {"unchanged"}
    assert row_counts(db, entry_sets, changes) == rows
    site.etags = True

    # 9b. New bytes, the same entries: a.xml is read again, but no entry set or change is written.
    site.set("/a.xml", urlset(a).replace(b"<url>", b"\n  <url>"))
    code, r = check(capsys, root, db)
    assert counts(r) == (3, 1, 0, 0, 0, 0)
    assert outcomes(r)["a.xml"] == "ok"
    assert row_counts(db, entry_sets, changes) == rows

    # 10. A URL moves from b to a: neither added nor removed.
    moved = b.pop(U + "3")
    a[U + "3"] = moved
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    code, r = check(capsys, root, db)
    assert counts(r) == (3, 1, 0, 0, 0, 0), r["changes"]

    # ...and back again, the other order of documents.
    b[U + "3"] = a.pop(U + "3")
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    code, r = check(capsys, root, db)
    assert counts(r) == (3, 1, 0, 0, 0, 0), r["changes"]

    # 11. A failed child: its URLs stay current.
    site.status["/b.xml"] = 503
    code, r = check(capsys, root, db)
    assert code == 0
    assert counts(r) == (3, 1, 0, 0, 0, 0)
    assert outcomes(r)["b.xml"] == "failed"
    assert "child-fetch-failed" in rules(r)
    del site.status["/b.xml"]

    # 12. A child dropped from a complete index: its URLs are removed.
    site.set("/index.xml", index([site.url("/a.xml")]))
    code, r = check(capsys, root, db, "--fail-on", "removed")
    assert code == 3
    assert counts(r) == (2, 1, 0, 1, 0, 0)
    assert r["changes"][0]["loc"] == U + "3"

    # History: the URL set at any past snapshot is recoverable.
    assert url_set_at(db, first) == {U + "1", U + "2", U + "3"}
    assert url_set_at(db, before_failures) == {U + "1", U + "3", U + "4", "/5"}
    assert url_set_at(db, r["snapshot_id"]) == {U + "1", U + "4", "/5"}
    engine = create_engine(db)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(targets)).scalar_one() == 1
    engine.dispose()

    # The CLI's read commands: newest first, the same shapes as the JSON API.
    assert main(["history", root, "--database-url", db, "--limit", "3", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)["snapshots"]
    assert history[0]["id"] == r["snapshot_id"]
    assert len(history) == 3
    assert history[0]["removed"] == 1
    assert main(["changes", root, "--database-url", db, "--kind", "removed", "--json"]) == 0
    removed = [c["loc"] for c in json.loads(capsys.readouterr().out)["changes"]]
    assert removed == [U + "3", U + "2"]
    assert main(["changes", root, "--database-url", db, "--since", "1h"]) == 0
    assert "removed" in capsys.readouterr().out
    assert main(["history", "https://never.checked/", "--database-url", db]) == 2


def test_duplicates_across_many_children(site: Site, db: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A URL listed again by a later child is a loc-duplicate there, whichever earlier child
    listed it: the check holds the first 16 children's fingerprints as arrays, folds them into
    a sorted run at the 17th, the next 17 into another, merges the two, and so on."""
    children = {i: {f"{U}{i}/{j}": "2024-01-01" for j in range(3)} for i in range(40)}
    listed_again = {5: 0, 18: 1, 19: 17, 36: 2, 38: 20, 39: 35}  # child: the earlier one
    for later, earlier in listed_again.items():
        children[later][f"{U}{earlier}/1"] = "2024-01-01"
    for i, entries in children.items():
        site.set(f"/c{i}.xml", urlset(entries))
    site.set("/index.xml", index([site.url(f"/c{i}.xml") for i in range(40)]))
    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    found = [(i["loc"], i["document"].rsplit("/", 1)[1]) for i in r["issues"]
             if i["rule"] == "loc-duplicate"]
    assert found == [(f"{U}{earlier}/1", f"c{later}.xml")
                     for later, earlier in listed_again.items()]
    assert (r["urls"], r["invalid"], r["duplicates"], r["added"]) == (120, 0, 6, 120)


def test_unchanged_recheck_is_two_reads_and_one_short_write(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-check answered 304 reads the target, its newest snapshot and its documents in one
    query (and the validators of its robots.txt in another) before it fetches anything; at
    the end, one transaction takes the target's row, makes sure no other snapshot came
    meanwhile, and writes its snapshot whole in one statement, its only new row (a 304
    document is counted in it, not given a row); then the document's and the target's rows
    move. An unchanged robots.txt writes nothing."""
    site.set("/a.xml", urlset({U + "1": "2024-01-01", U + "2": "2024-01-02"}))
    code, first = check(capsys, site.url("/a.xml"), db)
    assert (code, first["added"]) == (0, 2)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        statements.append(" ".join(statement.split()[:3]))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        code, again = check(capsys, site.url("/a.xml"), db)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert code == 0
    assert (again["outcome"], again["urls"], again["added"]) == ("unchanged", 2, 0)
    assert again["snapshot_id"] > first["snapshot_id"]
    # The CLI's schema check comes first; the check's own statements begin with its read.
    checked = statements[[s.split()[:2] for s in statements].index(["SELECT", "targets.id"]):]
    assert checked == ["SELECT targets.id AS", "SELECT robots_files.url, robots_files.text,",
                       "UPDATE targets SET", "SELECT max(snapshots.id) AS",
                       "INSERT INTO snapshots",
                       "UPDATE target_documents SET", "UPDATE targets SET"]
    engine = create_engine(db)
    with engine.connect() as conn:
        row = conn.execute(
            select(snapshots.c.outcome, snapshots.c.urls, snapshots.c.documents_ok,
                   snapshots.c.document_counts)
            .where(snapshots.c.id == again["snapshot_id"])
        ).one()
        seen_by = conn.execute(select(target_documents.c.last_snapshot_id)).scalars().all()
    engine.dispose()
    assert tuple(row) == ("unchanged", 2, 1, '{"not_modified": 1}')
    assert seen_by == [again["snapshot_id"]]  # the 304's document was seen by this snapshot


def test_unchanged_children_are_fetched_while_a_changed_one_is_read(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The window of children in flight does not count those that came back 304: while the
    first child is still being read, every unchanged child after it is fetched. The server
    holds the first child's answer until it has seen them all (or gives up after 10 s)."""
    paths = [f"/c{i}.xml" for i in range(12)]
    for i, path in enumerate(paths):
        site.set(path, urlset({f"{U}{i}/a": "2024-01-01"}))
    site.set("/index.xml", index([site.url(path) for path in paths]))
    code, first = check(capsys, site.url("/index.xml"), db)
    assert (code, first["added"]) == (0, 12)
    site.set(paths[0], urlset({f"{U}0/a": "2024-02-02"}))
    held: list[bool] = []

    def after_the_rest(request: Any) -> Any:
        deadline = time.monotonic() + 30  # only a failure waits this long
        while any(len(site.server.requests_to(p)) < 2 for p in paths[1:]):
            if time.monotonic() > deadline:
                held.append(False)
                break
            time.sleep(0.01)
        else:
            held.append(True)
        return site.answer(request)

    site.server.route(paths[0], after_the_rest)
    code, again = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    assert held == [True]  # every unchanged child was asked for before the first was answered
    assert (again["changed"], again["added"], again["removed"]) == (1, 0, 0)
    assert [outcomes(again)[p[1:]] for p in paths] == ["ok"] + ["not_modified"] * 11


def test_a_duplicate_is_found_whichever_child_was_read_first(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a re-check, the first child digested while nothing else is keeps no fingerprints of
    its locs until another comes. Here both children changed, and the second arrives first,
    the first one 0.3 s later: both go without, and the second's duplicate of a loc of the
    first is found all the same."""
    site.set("/a.xml", urlset({f"{U}a/1": "2024-01-01"}))
    site.set("/b.xml", urlset({f"{U}b/1": "2024-01-01"}))
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    assert check(capsys, site.url("/index.xml"), db)[0] == 0
    site.set("/a.xml", urlset({f"{U}a/1": "2024-01-01", f"{U}a/2": "2024-01-01"}))
    site.set("/b.xml", urlset({f"{U}b/1": "2024-01-01", f"{U}a/2": "2024-01-01"}))

    def after_b(request: Any) -> Any:
        deadline = time.monotonic() + 30  # only a failure waits this long
        while not site.server.requests_to("/b.xml") and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        return site.answer(request)

    site.server.route("/a.xml", after_b)
    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    found = [(i["loc"], i["document"].rsplit("/", 1)[1]) for i in r["issues"]
             if i["rule"] == "loc-duplicate"]
    assert found == [(f"{U}a/2", "b.xml")]
    assert (r["urls"], r["invalid"], r["duplicates"], r["added"]) == (3, 0, 1, 1)


def test_a_changed_child_listing_a_url_of_an_unchanged_one_lists_a_duplicate(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-check reads only the children that changed: one that now lists a URL an earlier,
    unchanged (304) child lists has a loc-duplicate there, as a first check finds, not a
    URL added and counted twice. A URL that moves from a later child is a move, not a
    duplicate (the later child is read after it)."""
    site.set("/a.xml", urlset({f"{U}a/1": "2024-01-01", f"{U}a/2": "2024-01-01"}))
    site.set("/b.xml", urlset({f"{U}b/1": "2024-01-01"}))
    site.set("/c.xml", urlset({f"{U}c/1": "2024-01-01", f"{U}c/2": "2024-01-01"}))
    site.set("/index.xml", index([site.url(f"/{n}.xml") for n in "abc"]))
    assert check(capsys, site.url("/index.xml"), db)[0] == 0
    # b lists a URL of a (before it, unchanged) and takes one from c (after it, changed)
    site.set("/b.xml", urlset({f"{U}b/1": "2024-01-01", f"{U}a/1": "2024-01-01",
                               f"{U}c/2": "2024-01-01"}))
    site.set("/c.xml", urlset({f"{U}c/1": "2024-01-01"}))
    code, r = check(capsys, site.url("/index.xml"), db)
    assert code == 0
    assert sorted(d["outcome"] for d in r["documents"]) == [
        "not_modified", "not_modified", "ok", "ok"]
    found = [(i["loc"], i["document"].rsplit("/", 1)[1]) for i in r["issues"]
             if i["rule"] == "loc-duplicate"]
    assert found == [(f"{U}a/1", "b.xml")]
    assert (r["urls"], r["duplicates"], r["added"], r["removed"]) == (5, 1, 0, 0)
    assert r["changes"] == []
