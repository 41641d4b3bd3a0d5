"""Index structure and hostile input through the whole pipeline: each ends in its issue."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from httpserver import Reply, TestServer
from peak import run_cli
from site_fixture import Site, index, urlset

from monitor.cli.commands import main

U = "https://example.test/"


def check(capsys: pytest.CaptureFixture[str], url: str, db: str) -> tuple[int, Any]:
    code = main(["check", url, "--database-url", db, "--json"])
    return code, json.loads(capsys.readouterr().out)


def rules(result: dict[str, Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for issue in result["issues"]:
        found[issue["rule"]] = found.get(issue["rule"], 0) + 1
    return found


@pytest.fixture
def db(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/m.db"


def test_index_cycle_nested_index_and_out_of_scope_child(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other_host = site.url("/c.xml").replace("127.0.0.1", "localhost")
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/inner.xml"),
                                  site.url("/index.xml"), other_host]))
    site.set("/inner.xml", index([site.url("/b.xml"), site.url("/index.xml")]))
    site.set("/a.xml", urlset({U + "1": None}))
    site.set("/b.xml", urlset({U + "2": None}))
    started = time.monotonic()
    code, r = check(capsys, site.url("/index.xml"), db)
    assert time.monotonic() - started < 5
    assert code == 0
    assert r["urls"] == 2
    assert r["added"] == 2
    found = rules(r)
    assert found["index-cycle"] == 2  # the index lists itself; the inner index lists it again
    assert found["index-nested"] == 1
    assert found["index-child-out-of-scope"] == 1
    assert not site.server.requests_to("/c.xml"), "an out-of-scope child is never fetched"


def test_an_index_at_the_depth_limit_is_read_and_its_children_are_not(
    site: Site, db: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``max_depth: 2``: the index two levels down is read, the ones it lists are not, and it
    says so once a check, read anew or unchanged (304)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"targets:\n  - name: t\n    url: {site.url('/index.xml')}\n"
                      "    max_depth: 2\n")
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/inner.xml")]))
    site.set("/inner.xml", index([site.url("/b.xml"), site.url("/deep.xml")]))
    site.set("/deep.xml", index([site.url("/c.xml")]))
    site.set("/a.xml", urlset({U + "1": None}))
    site.set("/b.xml", urlset({U + "2": None}))
    site.set("/c.xml", urlset({U + "3": None}))
    for outcome in ("ok", "not_modified"):
        code = main(["check", "t", "--config", str(config), "--database-url", db, "--json"])
        r = json.loads(capsys.readouterr().out)
        assert code == 0
        assert r["urls"] == 2
        limit = [(i["rule"], i["document"]) for i in r["issues"] if "depth limit" in i["message"]]
        assert limit == [("index-nested", site.url("/deep.xml"))]
        assert [d["url"].rsplit("/", 1)[1] for d in r["documents"]] == [
            "index.xml", "a.xml", "inner.xml", "b.xml", "deep.xml"]
        assert r["documents"][-1]["outcome"] == outcome
    assert len(site.server.requests_to("/deep.xml")) == 2
    assert not site.server.requests_to("/c.xml"), "a child past the depth limit is not read"


def test_child_at_metadata_address_is_refused_without_a_packet(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    # A target that allows cross-host children: the address rule still refuses the metadata IP.
    config = tmp_path / "c.yaml"
    config.write_text(
        f"targets:\n  - name: t\n    url: {site.url('/index.xml')}\n"
        "    allow_cross_host_children: true\n"
    )
    site.set("/index.xml", index([site.url("/a.xml"),
                                  "http://169.254.169.254/latest/meta-data/sitemap.xml"]))
    site.set("/a.xml", urlset({U + "1": None}))
    started = time.monotonic()
    code = main(["check", "t", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert time.monotonic() - started < 5
    assert code == 0
    assert r["urls"] == 1
    failed = [d for d in r["documents"] if d["outcome"] == "failed"]
    assert [d["url"] for d in failed] == ["http://169.254.169.254/latest/meta-data/sitemap.xml"]
    assert "169.254.169.254" in failed[0]["error"]
    assert rules(r).get("child-fetch-failed") == 1


def test_site_target_reads_robots_txt(site: Site, db: str, tmp_path: Any,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    site.server.route("/robots.txt", Reply(body=(
        "User-agent: *\nDisallow: /private\n"
        f"Sitemap: {site.url('/a.xml')}\nsitemap: {site.url('/b.xml')}\n"
        f"SITEMAP: {site.url('/a.xml')}\nSitemap: {site.url('/robots.txt')}\n"
    ).encode()))
    site.set("/a.xml", urlset({U + "1": None, U + "2": None}))
    site.set("/b.xml", urlset({U + "3": None}))
    config = tmp_path / "c.yaml"
    config.write_text(f"targets:\n  - {{name: shop, site: '{site.url('/')}'}}\n")
    code = main(["check", "shop", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert code == 0
    assert r["target"] == "shop"
    assert r["urls"] == 3
    assert r["added"] == 3
    assert [d["url"].rsplit("/", 1)[1] for d in r["documents"]] == ["robots.txt", "a.xml",
                                                                     "b.xml"]
    # b.xml is dropped from robots.txt: its URL is removed.
    site.server.route("/robots.txt", Reply(body=f"Sitemap: {site.url('/a.xml')}\n".encode()))
    code = main(["check", "shop", "--config", str(config), "--database-url", db, "--json"])
    r = json.loads(capsys.readouterr().out)
    assert (r["urls"], r["removed"]) == (2, 1)


def test_redirect_loop_fails_the_check(site: Site, db: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    site.server.route("/a.xml", Reply(302, headers={"Location": "/b.xml"}))
    site.server.route("/b.xml", Reply(302, headers={"Location": "/a.xml"}))
    code, r = check(capsys, site.url("/a.xml"), db)
    assert code == 1
    assert r["outcome"] == "failed"
    assert r["error"]["kind"] == "redirects"


def _bomb() -> Iterator[bytes]:
    """A gzip stream of 1 GiB of zeros, compressed on the fly (about 1 MiB on the wire)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    for _ in range(1024):
        yield compressor.compress(zeros)
    yield compressor.flush()


def test_gzip_bomb_fails_the_check_quickly_in_a_subprocess(
    http_server: TestServer, tmp_path: Any
) -> None:
    """The console script, as a user runs it; memory measured on the child process."""
    http_server.route("/s.xml.gz", Reply(body=_bomb))
    started = time.monotonic()
    proc, peak_mib = run_cli("check", http_server.url("/s.xml.gz"), "--database-url",
                             f"sqlite:///{tmp_path}/m.db", "--json", timeout=60)
    elapsed = time.monotonic() - started
    r = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert r["error"]["kind"] == "size-too-large"
    assert [(i["rule"], i["document"]) for i in r["issues"]] == [
        ("size-too-large", http_server.url("/s.xml.gz"))]
    assert elapsed < 20
    assert peak_mib < 250, f"peak RSS {peak_mib:.0f} MiB"


def test_a_nested_index_stays_an_issue_while_nothing_changes(
    site: Site, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index inside an index is an issue at every check, read anew or unchanged (304): a
    re-check that reads nothing new neither drops it from the current issues nor counts it
    gone."""
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/inner.xml")]))
    site.set("/inner.xml", index([site.url("/b.xml")]))
    site.set("/a.xml", urlset({U + "1": None}))
    site.set("/b.xml", urlset({U + "2": None}))
    nested = [("index-nested", site.url("/index.xml"))]
    for outcome in ("ok", "unchanged"):
        code, r = check(capsys, site.url("/index.xml"), db)
        assert (code, r["outcome"]) == (0, outcome)
        assert [(i["rule"], i["document"]) for i in r["issues"]
                if i["rule"] == "index-nested"] == nested
        assert main(["issues", site.url("/index.xml"), "--database-url", db, "--rule",
                     "index-nested", "--format", "ndjson"]) == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [i["rule"] for i in listed] == ["index-nested"], outcome
