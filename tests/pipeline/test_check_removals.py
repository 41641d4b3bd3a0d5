"""``check --urls``, the CI gate, triages its removals as the daemon does: the command (a
subprocess) against a real local site whose sitemap drops a live page, a moved one and a gone
one, on both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from httpserver import Reply
from site_fixture import Site, urlset

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 2000 + b"</body></html>"
HTML = {"Content-Type": "text/html"}


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("sitemap-monitor")
    return subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SITEMAP_MONITOR_DATABASE_URL": "",
                               "SITEMAP_MONITOR_CONFIG": ""})


def test_check_urls_gives_its_removals_their_reason(site: Site, db: str, tmp_path: Path,
                                                    ) -> None:
    paths = ["/c/p55", "/c/p56", "/c/p57", "/b/item-90", "/b/keep"]
    for path in paths:
        site.server.route(path, Reply(200, PAGE, HTML))
    site.set("/s.xml", urlset({site.url(p): None for p in paths}))
    config = tmp_path / "c.yaml"
    config.write_text("defaults: {url_checks: {enabled: true, rate: 1000}}\n"
                      f"targets:\n  - {{name: shop, url: '{site.url('/s.xml')}'}}\n",
                      encoding="utf-8")
    first = cli("check", "shop", "--urls", "--config", str(config), "--database-url", db)
    assert first.returncode == 0, first.stderr
    site.server.route("/c/p56", Reply(301, b"", {"Location": site.url("/b/item-90")}))
    site.server.route("/c/p57", Reply(404, b"gone", HTML))
    site.set("/s.xml", urlset({site.url(p): None for p in paths[3:]}))

    done = cli("check", "shop", "--urls", "--json", "--config", str(config),
               "--database-url", db)
    assert done.returncode == 0, done.stderr
    removed = {c["loc"]: c for c in json.loads(done.stdout)["changes"] if c["kind"] == "removed"}
    assert {loc: c.get("reason") for loc, c in removed.items()} == {
        site.url("/c/p55"): "live", site.url("/c/p56"): "moved", site.url("/c/p57"): "gone"}
    assert removed[site.url("/c/p56")]["answer"]["final_url"] == site.url("/b/item-90")

    # the table: a REASON column, and what each removed URL answered
    site.set("/s.xml", urlset({site.url(p): None for p in paths}))
    assert cli("check", "shop", "--config", str(config), "--database-url", db).returncode == 0
    site.set("/s.xml", urlset({site.url(p): None for p in paths[3:]}))
    done = cli("check", "shop", "--urls", "--config", str(config), "--database-url", db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    head = next(line for line in lines if line.split()[:2] == ["CHANGE", "LOC"])
    assert head.split() == ["CHANGE", "LOC", "REASON", "DETAIL"]
    row = next(line for line in lines if site.url("/c/p57") in line)
    assert row.split()[2] == "gone"
    assert "not-found (HTTP 404)" in row
    row = next(line for line in lines if site.url("/c/p56") in line)
    assert row.split()[2] == "moved"
    assert site.url("/b/item-90") in row

    # the listing of changes says it too: where a moved URL went, a gone one's 404
    done = cli("changes", "shop", "--kind", "removed", "--config", str(config),
               "--database-url", db)
    assert done.returncode == 0, done.stderr
    moved = [line for line in done.stdout.splitlines() if site.url("/c/p56") in line]
    assert len(moved) == 2
    assert all(f"to {site.url('/b/item-90')}" in line for line in moved), moved
    gone = [line for line in done.stdout.splitlines() if site.url("/c/p57") in line]
    assert all("answered not-found (HTTP 404)" in line for line in gone), gone
