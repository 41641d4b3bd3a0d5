"""One URL's whole story and the search of locs (``url``, ``--loc``), and what the listing
commands tell a person (the ``changes`` table's why, ``history``'s JSON and bounds, a first
check's summary, ``validate`` that stores nothing): the CLI against a real local site, on
both databases."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, urlset

from monitor.cli.commands import main

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 2000 + b"</body></html>"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def serve_pages(server: TestServer, locs: list[str], broken: str) -> None:
    for loc in locs:
        path = "/" + loc.split("/", 3)[3]
        server.route(path, Reply(404 if loc == broken else 200, PAGE,
                                 {"Content-Type": "text/html"}))


def config(tmp_path: Path, site: Site, *, secret: bool = False) -> str:
    path = tmp_path / "monitor.yaml"
    alerts = ("alerts:\n  channels:\n    - {name: hook, type: webhook, "
              "url: 'http://127.0.0.1:9/x', secret: '${UNSET_HOOK_SECRET_FOR_TEST}'}\n"
              if secret else "")
    path.write_text(
        "defaults:\n  url_checks: {enabled: true, rate: 1000}\n"
        f"targets:\n  - {{name: t, url: '{site.url('/s.xml')}'}}\n{alerts}", encoding="utf-8")
    return str(path)


@pytest.fixture
def story(site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
          ) -> tuple[str, str, list[str]]:
    """Three checks of a 40-URL target: its baseline (with the URL checks, which find
    /shoes-7 answering 404), a lastmod change of /shoes-7, its removal."""
    locs = [site.url(f"/{'shoes' if i % 2 else 'hats'}-{i}") for i in range(40)]
    shoe = site.url("/shoes-7")
    serve_pages(site.server, locs, shoe)
    cfg = config(tmp_path, site)
    site.set("/s.xml", urlset(dict.fromkeys(locs, "2024-01-01")))
    code, _out, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db, "--urls")
    assert code == 0, err
    site.set("/s.xml", urlset({loc: "2024-05-05" if loc == shoe else "2024-01-01"
                               for loc in locs}))
    assert run(capsys, "check", "t", "--config", cfg, "--database-url", db)[0] == 0
    site.set("/s.xml", urlset({loc: "2024-05-05" if loc == shoe else "2024-01-01"
                               for loc in locs if loc != shoe}))
    assert run(capsys, "check", "t", "--config", cfg, "--database-url", db)[0] == 0
    return cfg, shoe, locs


def test_one_urls_whole_story(story: tuple[str, str, list[str]], db: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg, shoe, locs = story
    code, out, err = run(capsys, "url", "t", shoe, "--config", cfg, "--database-url", db,
                         "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["loc"] == shoe
    assert found["listed"] is False
    assert found["health"]["state"] == "not-found"
    assert found["health"]["http_status"] == 404
    kinds = [e["kind"] for e in found["changes"]]
    assert kinds == ["removed", "changed", "health"]  # newest first
    assert found["changes"][1]["before"]["lastmod"] == "2024-01-01"
    assert found["changes"][1]["after"]["lastmod"] == "2024-05-05"

    listed = locs[0]
    code, out, _ = run(capsys, "url", "t", listed, "--config", cfg, "--database-url", db)
    assert code == 0
    assert "listed now" in out
    assert site_document(out)
    assert "lastmod 2024-01-01" in out
    assert "health: ok (HTTP 200)" in out
    assert "no change recorded" in out

    code, out, _ = run(capsys, "url", "t", shoe, "--config", cfg, "--database-url", db)
    assert "not listed now" in out
    assert "health: not-found (HTTP 404)" in out
    assert re.search(r"changed\s+snapshot \d+\s+lastmod: 2024-01-01 -> 2024-05-05", out), out
    assert "ok -> not-found (404)" in out or "unknown -> not-found (404)" in out

    code, _, err = run(capsys, "url", "nope", shoe, "--database-url", db)
    assert code == 2
    assert "no target named 'nope'" in err


def site_document(out: str) -> bool:
    return bool(re.search(r"listed now \(snapshot \d+\) in http://127\.0\.0\.1:\d+/s\.xml", out))


def test_a_search_of_the_locs_in_urls_and_changes(
        story: tuple[str, str, list[str]], db: str, capsys: pytest.CaptureFixture[str]) -> None:
    _cfg, _shoe, locs = story
    code, out, _ = run(capsys, "urls", "t", "--loc", "SHOES-1", "--format", "json",
                       "--database-url", db)
    assert code == 0
    found = sorted(r["loc"] for r in json.loads(out)["urls"])
    assert found == sorted(loc for loc in locs if "/shoes-1" in loc)
    assert found  # shoes-1, shoes-11, ...
    code, out, _ = run(capsys, "changes", "t", "--loc", "shoes-7", "--format", "json",
                       "--database-url", db)
    assert [r["kind"] for r in json.loads(out)["changes"]] == ["removed", "changed", "health"]
    # paged: the cursor goes on with the same search
    code, out, err = run(capsys, "urls", "t", "--loc", "shoes", "--limit", "3", "--database-url",
                         db)
    assert code == 0
    assert "--loc shoes" in err
    assert "--cursor" in err


def test_the_changes_table_says_why(story: tuple[str, str, list[str]], db: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _cfg, _shoe, _ = story
    code, out, _ = run(capsys, "changes", "t", "--kind", "health", "--database-url", db)
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["SNAPSHOT_ID", "AT", "KIND", "LOC", "REASON", "RULE", "DETAIL"]
    assert "not-found (404)" in out
    assert "url-not-found" in out
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", out)  # no microseconds
    assert re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z ", out)
    code, out, _ = run(capsys, "changes", "t", "--kind", "changed", "--database-url", db)
    assert "lastmod: 2024-01-01 -> 2024-05-05" in out


def test_changes_help_lists_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["changes", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for kind in ("added", "removed", "changed", "invalid", "health", "robots"):
        assert kind in out


def test_history_is_an_object_paged_and_its_limit_bounded(
        story: tuple[str, str, list[str]], db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "history", "t", "--limit", "2", "--json", "--database-url", db)
    assert code == 0
    page: dict[str, Any] = json.loads(out)
    assert page["target"] == "t"
    assert len(page["snapshots"]) == 2
    assert page["next_cursor"]
    code, out, _ = run(capsys, "history", "t", "--json", "--cursor", page["next_cursor"],
                       "--database-url", db)
    rest = json.loads(out)
    assert len(rest["snapshots"]) == 1
    assert rest["next_cursor"] is None
    assert rest["snapshots"][0]["id"] < page["snapshots"][-1]["id"]
    for command in (["history", "t"], ["urls", "t"], ["changes", "t"]):
        for bad in ("-3", "0"):
            code, _, err = run(capsys, *command, "--limit", bad, "--database-url", db)
            assert code == 2, (command, bad)
            assert len(err.strip().splitlines()) == 1
            assert "--limit" in err


def test_read_only_commands_need_no_alert_secret(
        story: tuple[str, str, list[str]], db: str, tmp_path: Path, site: Site,
        capsys: pytest.CaptureFixture[str]) -> None:
    _cfg, shoe, _ = story
    cfg = config(tmp_path, site, secret=True)
    for argv in (["urls", "t"], ["issues", "t"], ["changes", "t"], ["history", "t"],
                 ["diff", "t", "--from", "1"], ["url", "t", shoe]):
        code, _, err = run(capsys, *argv, "--config", cfg, "--database-url", db)
        assert code == 0, (argv, err)
    code, _, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db)
    assert code == 2
    assert "UNSET_HOOK_SECRET_FOR_TEST" in err


def test_a_first_check_prints_a_summary_not_every_url(
        site: Site, db: str, capsys: pytest.CaptureFixture[str]) -> None:
    site.set("/s.xml", urlset({site.url(f"/p{i}"): None for i in range(300)}))
    code, out, _ = run(capsys, "check", site.url("/s.xml"), "--database-url", db)
    assert code == 0
    assert "first check: urls=300" in out
    assert "added" not in out.replace("first check", "")
    assert len(out.splitlines()) < 10
    assert re.search(r"\(all 300 URLs: sitemap-monitor urls \S+\)", out)


def test_validate_a_url_prints_no_snapshot(site: Site, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    site.set("/s.xml", urlset({site.url(f"/p{i}"): None for i in range(30)}))
    code, out, _ = run(capsys, "validate", site.url("/s.xml"))
    assert code == 0
    assert "snapshot" not in out
    assert "added" not in out
    assert "urls=30" in out


def test_check_urls_shows_progress_on_a_terminal_and_keeps_its_rate(
        site: Site, db: str, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys
    import time

    locs = [site.url(f"/page-{i}") for i in range(20)]
    serve_pages(site.server, locs, broken="")
    site.set("/s.xml", urlset(dict.fromkeys(locs)))
    script = Path(sys.executable).with_name("sitemap-monitor")
    leader, follower = pty.openpty()
    started = time.monotonic()
    done = subprocess.run([str(script), "check", site.url("/s.xml"), "--database-url", db,
                           "--urls", "--rate", "25"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=follower, timeout=120, check=False)
    seconds = time.monotonic() - started
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert done.returncode == 0, shown
    assert b"url checks: " in shown
    assert re.search(rb"\d+ checked, [\d.]+/s", shown)
    assert b"url health: 20 listed, 20 checked" in done.stdout
    assert seconds > 19 / 25  # 25 a second on one host: the 20 pages take 0.76 s at least
    refused = subprocess.run([str(script), "check", site.url("/s.xml"), "--database-url", db,
                              "--urls", "--rate", "0"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 2
    assert "--rate" in refused.stderr
