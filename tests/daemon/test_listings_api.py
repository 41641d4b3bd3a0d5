"""The API's listings on a running daemon that checked a real local site: a removal of
50,000 URLs listed in full as CSV and NDJSON streams and in JSON pages that follow their
cursors to the end; bad parameters are JSON 400s that name them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer


def test_a_removal_of_50000_urls_is_listed_by_the_api_in_every_format(
    http_server: TestServer, tmp_path: Path,
) -> None:
    page = http_server.url("/p")
    before = {f"{page}{i}": "2024-01-01" for i in range(60_000)}
    after = dict(list(before.items())[:10_000])
    gone = set(before) - set(after)
    docs = {"/a.xml": sitemap(dict(list(before.items())[:30_000])),
            "/b.xml": sitemap(dict(list(before.items())[30_000:]))}
    index = ('<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/'
             f'0.9"><sitemap><loc>{http_server.url("/a.xml")}</loc></sitemap><sitemap><loc>'
             f'{http_server.url("/b.xml")}</loc></sitemap></sitemapindex>').encode()
    http_server.route("/index.xml", Reply(body=index))
    for path, body in docs.items():
        http_server.route(path, Reply(body=body))
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                          [("shop/eu", http_server.url("/index.xml"))], interval="2s")
    daemon = Daemon(config)
    try:
        daemon.started()
        first = daemon.more_checks("shop/eu", 1, timeout=60)[0]
        assert first["urls"] == 60_000
        http_server.route("/a.xml", Reply(body=sitemap(after)))
        http_server.route("/b.xml", Reply(body=sitemap({})))
        daemon.wait_for(lambda line: line.get("event") == "check" and line.get("removed"),
                        timeout=60)
        base = "/api/v1/targets/shop%2Feu"

        streamed = daemon.get(f"{base}/changes?kind=removed&format=csv")
        assert streamed.status_code == 200
        assert streamed.headers["content-type"] == "text/csv; charset=utf-8"
        assert "attachment" in streamed.headers["content-disposition"]
        found = list(csv.DictReader(io.StringIO(streamed.text)))
        assert len(found) == 50_000
        assert {r["loc"] for r in found} == gone
        accepted = httpx.get(daemon.base + f"{base}/diff?from=1&kind=removed",
                             headers={"Accept": "text/csv"}, timeout=30)
        assert accepted.headers["content-type"] == "text/csv; charset=utf-8"
        assert accepted.text.count("\r\n") == 50_001
        ndjson = daemon.get(f"{base}/urls?at=1&format=ndjson").text.splitlines()
        assert {json.loads(line)["loc"] for line in ndjson} == set(before)

        # JSON pages, each with the cursor and the link that continue it, to the end.
        locs: list[str] = []
        path: str | None = f"{base}/changes?kind=removed&limit=10000"
        pages = 0
        while path is not None:
            answer = daemon.get(path)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            locs.extend(c["loc"] for c in body["changes"])
            pages += 1
            assert (body["next"] is None) == (body["next_cursor"] is None)
            assert (body["next"] is None) == ("link" not in answer.headers)
            path = body["next"]
        assert pages == 5
        assert len(locs) == 50_000
        assert set(locs) == gone

        # A listing of the current URLs and of its issues (none).
        now = daemon.get(f"{base}/urls?limit=10000").json()
        assert {u["loc"] for u in now["urls"]} == set(after)
        assert daemon.get(f"{base}/issues").json()["issues"] == []

        for query, named in (("urls?at=nope", "at:"), ("urls?status=bogus", "status:"),
                             ("issues?rule=nope-*", "rule:"), ("diff", "from:"),
                             ("diff?from=2&to=1", "from:"), ("changes?cursor=%C3%A9", "cursor:"),
                             ("changes?since=99999999999h", "since:"),
                             ("changes?limit=0", "limit:"), ("urls?format=xml", "format:"),
                             ("urls?cursor=" + "A" * 5000, "cursor:")):
            answer = daemon.get(f"{base}/{query}")
            assert answer.status_code == 400, (query, answer.text)
            assert answer.json()["error"]["message"].startswith(named), query
        assert daemon.get(f"{base}/urls?at=999").status_code == 404
    finally:
        daemon.stop()
