"""Documents over 1 MiB: digested in worker processes, and the same without workers.

The children here are ~1.4 MB each, so with workers enabled (the default) every one goes to the
process pool; with SITEMAP_MONITOR_PARSE_WORKERS=0 the same bytes are digested in a thread.
Both must give the same counts, changes, duplicates and URL sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from site_fixture import Site, index, url_set_at, urlset

from monitor.check import fetching
from monitor.cli.commands import main
from monitor.read import digest
from monitor.read.workers import DigestPool

N = 12_000  # URLs a child: about 1.4 MB, over digest.IN_PROCESS_MAX


def pools_started(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each pool of digest workers had started when its owner stopped it."""
    started: list[bool] = []
    shutdown = DigestPool.shutdown

    def spy(pool: DigestPool) -> None:
        started.append(pool.started())
        shutdown(pool)

    monkeypatch.setattr(DigestPool, "shutdown", spy)
    return started


def check(capsys: pytest.CaptureFixture[str], url: str, db: str) -> dict[str, Any]:
    assert main(["check", url, "--database-url", db, "--json"]) in (0, 3)
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("workers", ["2", "0"])
def test_big_children(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, workers: str,
) -> None:
    monkeypatch.setenv("SITEMAP_MONITOR_PARSE_WORKERS", workers)
    assert DigestPool().size == int(workers)
    started = pools_started(monkeypatch)
    U = site.url("/")
    a = {f"{U}a/{i:06d}/{'x' * 60}": "2024-01-01" for i in range(N)}
    b = {f"{U}b/{i:06d}/{'x' * 60}": "2024-01-01" for i in range(N)}
    a["/a/bad"] = "2024-01-01"  # one invalid entry: its loc is relative
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    assert len(site.docs["/a.xml"]) > digest.IN_PROCESS_MAX
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    root = site.url("/index.xml")

    first = check(capsys, root, db)
    assert (first["urls"], first["invalid"], first["added"]) == (2 * N, 1, 2 * N)
    assert first["changes_truncated"] is True
    assert len(first["changes"]) == 1000
    assert [i["rule"] for i in first["issues"]] == ["loc-not-absolute"]
    assert started == [workers != "0"]  # the check's pool, as the command stopped it

    # 10 lastmods change in a, 5 URLs move from a to b, one URL of b is also listed in a.
    moved = list(a)[:5]
    changed = list(a)[5:15]
    for loc in changed:
        a[loc] = "2024-06-01"
    for loc in moved:
        b[loc] = a.pop(loc)
    duplicate = next(iter(b))
    a[duplicate] = "2024-01-01"
    site.set("/a.xml", urlset(a))
    site.set("/b.xml", urlset(b))
    second = check(capsys, root, db)
    assert (second["added"], second["removed"], second["changed"]) == (0, 0, 10)
    assert sorted(c["loc"] for c in second["changes"]) == sorted(changed)
    duplicates = [i for i in second["issues"] if i["rule"] == "loc-duplicate"]
    assert [i["loc"] for i in duplicates] == [duplicate]
    # b is read after a: its occurrence is the later one and is dropped there.
    assert duplicates[0]["document"] == site.url("/b.xml")
    assert second["urls"] == 2 * N
    assert second["invalid"] == 1  # the relative loc; the duplicate is counted apart
    assert second["duplicates"] == 1

    # a goes from the index and b gains a URL: a's URLs are removed, but not the one b
    # still lists (no longer a duplicate once a is gone).
    b[f"{U}b/new"] = "2024-01-01"
    site.set("/b.xml", urlset(b))
    site.set("/index.xml", index([site.url("/b.xml")]))
    third = check(capsys, root, db)
    assert (third["added"], third["removed"], third["changed"]) == (1, N - 4, 0)
    assert third["urls"] == N + 6
    assert third["invalid"] == 0

    assert len(url_set_at(db, first["snapshot_id"])) == 2 * N + 1
    at_second = url_set_at(db, second["snapshot_id"])
    assert set(moved) <= at_second
    assert len(at_second) == 2 * N + 1
    assert url_set_at(db, third["snapshot_id"]) == set(b)


def test_workers_import_this_installation_whatever_the_working_directory(
    site: Site, tmp_path: Any
) -> None:
    """The parse workers' forkserver is a ``python -c``: Python puts the working directory
    first on its path, so a ``monitor`` folder there (a checkout of another version, a project
    of the same name) was what the workers imported, and every big document 'died'."""
    U = site.url("/")
    children = []
    for c in range(6):
        site.set(f"/c{c}.xml", urlset({f"{U}{c}/{i:06d}/{'x' * 60}": None for i in range(N)}))
        children.append(site.url(f"/c{c}.xml"))
    site.set("/index.xml", index(children))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "monitor").mkdir(parents=True)  # a package of that name, not this one
    (elsewhere / "monitor" / "__init__.py").write_text("")
    (elsewhere / "monitor" / "digest.py").write_text('"""another monitor.read.digest"""\n')
    script = Path(sys.executable).with_name("sitemap-monitor")
    env = {**os.environ, "SITEMAP_MONITOR_PARSE_WORKERS": "1"}
    env.pop("PYTHONSAFEPATH", None)
    proc = subprocess.run(
        [str(script), "check", site.url("/index.xml"), "--database-url",
         f"sqlite:///{tmp_path}/m.db", "--json"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert [d["outcome"] for d in r["documents"]] == ["ok"] * 7, r["documents"]
    assert r["urls"] == 6 * N


@pytest.mark.parametrize("bound", [0, fetching.DIGEST_HERE_MAX])
def test_past_its_fingerprints_bound_a_check_leaves_big_documents_to_the_workers(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, bound: int,
) -> None:
    """a check's loc fingerprints grow with its index; past ``DIGEST_HERE_MAX`` of
    them, this process digests no big document itself (its own digest on top of them was W4's
    peak), and the worker digests them all. Below it, this process takes its share while the
    worker is busy. The URL sets are the same either way."""
    monkeypatch.setenv("SITEMAP_MONITOR_PARSE_WORKERS", "1")
    monkeypatch.setattr(fetching, "DIGEST_HERE_MAX", bound)
    here: list[str] = []
    digest_here = DigestPool._here

    async def spy(pool: DigestPool, job: digest.Job) -> digest.Digest:
        here.append(job.url)
        return await digest_here(pool, job)

    monkeypatch.setattr(DigestPool, "_here", spy)
    U = site.url("/")
    children = []
    for name in "abcd":
        site.set(f"/{name}.xml", urlset({f"{U}{name}/{i:06d}/{'x' * 60}": "2024-01-01"
                                         for i in range(N)}))
        children.append(site.url(f"/{name}.xml"))
    assert len(site.docs["/a.xml"]) > digest.IN_PROCESS_MAX
    site.set("/index.xml", index(children))
    found = check(capsys, site.url("/index.xml"), db)
    assert (found["urls"], found["added"]) == (4 * N, 4 * N)
    assert len(url_set_at(db, found["snapshot_id"])) == 4 * N
    if bound == 0:
        assert here == []
    else:
        assert here  # no worker was ready for the first big document to come: digested here
