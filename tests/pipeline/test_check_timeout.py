"""A whole check has a deadline (``check_timeout``): past it the check fails as a
value, keeps the previous entries current and frees its slot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from httpserver import Reply
from site_fixture import Site, index, urlset

CHILDREN = 1000
U = "https://example.test/"


def _check(config: Path, timeout: float) -> tuple[int, dict[str, Any], float]:
    """``sitemap-monitor check big --json`` in a child process: exit code, JSON and seconds."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "from monitor.cli.commands import script; script()",
         "check", "big", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    seconds = time.monotonic() - started
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout), seconds


def _config(tmp_path: Path, site: Site, extra: str = "") -> Path:
    path = tmp_path / f"c{len(extra)}.yaml"
    path.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\n"
        f"targets:\n  - {{name: big, url: \"{site.url('/index.xml')}\"{extra}}}\n",
        encoding="utf-8",
    )
    return path


def test_a_stalled_index_of_1000_children_ends_at_check_timeout(
    site: Site, tmp_path: Path
) -> None:
    children = [site.url(f"/c{i}.xml") for i in range(CHILDREN)]
    site.set("/index.xml", index(children))
    for i in range(CHILDREN):
        site.set(f"/c{i}.xml", urlset({f"{U}{i}": None}))
    whole = _config(tmp_path, site)
    code, first, _ = _check(whole, timeout=300)
    assert (code, first["urls"], first["added"]) == (0, CHILDREN, CHILDREN), {
        k: v for k, v in first.items() if k not in ("documents", "changes")}

    # Every child now stalls: the server takes each request and never answers (an hour).
    for i in range(CHILDREN):
        site.server.route(f"/c{i}.xml", Reply(body=b"", delay=3600))
    limited = _config(tmp_path, site, ", check_timeout: 2s")
    code, stalled, seconds = _check(limited, timeout=120)
    print(f"\nstalled index of {CHILDREN} children: the check ended after {seconds:.1f} s "
          f"(check_timeout 2 s), {len(site.server.requests)} requests in all")
    assert code == 1
    assert stalled["outcome"] == "failed"
    assert stalled["error"]["kind"] == "check-timeout", stalled["error"]
    assert 2 <= stalled["duration_seconds"] < 4, stalled["duration_seconds"]
    assert seconds < 15
    # No false removals: the previous entries are still the target's current ones.
    assert (stalled["removed"], stalled["urls"]) == (0, CHILDREN)

    for i in range(CHILDREN):  # the children answer again, unchanged
        site.set(f"/c{i}.xml", urlset({f"{U}{i}": None}))
    code, again, _ = _check(whole, timeout=300)
    assert code == 0, again.get("error")
    assert (again["added"], again["removed"], again["urls"]) == (0, 0, CHILDREN)
