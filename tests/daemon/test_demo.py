"""``sitemap-monitor demo``: the site changes by itself, and the daemon sees it."""

from __future__ import annotations

import re
import signal
import subprocess
import threading

import pytest
from harness import command

from monitor.cli.demo import DemoSite, page


def locs(site: DemoSite) -> dict[str, str]:
    """loc -> lastmod of the site's current sitemap."""
    body = site.sitemap()[0].decode()
    return dict(re.findall(r"<loc>(.*?)</loc><lastmod>(.*?)</lastmod>", body))


def test_the_site_adds_removes_touches_and_breaks() -> None:
    site = DemoSite("http://127.0.0.1:1")
    before = locs(site)
    etag = site.sitemap()[1]
    for _ in range(3):
        site.step()
    after = locs(site)
    assert site.sitemap()[1] != etag
    assert set(after) - set(before)  # added
    assert set(before) - set(after)  # removed
    assert any(after[loc] != before[loc] for loc in set(after) & set(before))  # changed
    assert any("-13-" in lastmod for lastmod in after.values())  # an invalid date, every 3rd
    assert all(loc.startswith("http://127.0.0.1:1/products/") for loc in after)


@pytest.mark.parametrize(("path", "status", "noindex"), [
    ("/products/1", 200, False), ("/products/5", 404, False), ("/products/7", 410, False),
    ("/products/6", 200, True), ("/products/35", 404, False),
])
def test_a_few_demo_pages_are_broken(path: str, status: int, noindex: bool) -> None:
    code, body, _kind, _etag = page(path)
    assert code == status
    assert (b"noindex" in body) is noindex


@pytest.mark.slow
def test_the_demo_shows_changes_and_broken_pages_within_seconds() -> None:
    proc = subprocess.Popen([*command(), "demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    changed, broken = threading.Event(), threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if '"event": "check"' in line and '"removed": 0' not in line:
                changed.set()
            if '"event": "url checks"' in line and '"transitions": 0' not in line:
                broken.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert changed.wait(30), "".join(seen)
        assert broken.wait(30), "".join(seen)  # a page found broken: a health transition
        assert any("/api/v1/targets/demo/changes" in line for line in seen)
        assert any("urls?status=not-found" in line for line in seen)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(20)
        reader.join(5)
        assert proc.stdout is not None
        proc.stdout.close()
    assert code == 0
