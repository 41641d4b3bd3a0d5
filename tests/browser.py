"""A real headless Chromium for browser tests: Debian's ``chromium`` driven by Playwright.

Playwright's own browser download is not reachable from CI, so ``playwright install`` is never
run: ``.ci/install-tools`` installs Debian's ``chromium`` package (and a font) and this module
launches ``/usr/bin/chromium`` through Playwright's sync API. A missing browser is an error that
says how to install it, never a skip (a skipped test in CI is a failure)::

    from browser import chromium, screenshot

    @pytest.fixture(scope="module")
    def browser() -> Iterator[Browser]:
        with chromium() as browser:
            yield browser

    def test_page(browser: Browser, http_server: TestServer) -> None:
        page = browser.new_page()
        page.goto(http_server.url("/"))
        assert "Sitemaps" in page.inner_text("h1")
        screenshot(page, "dashboard")  # test-artifacts/screenshots/dashboard.png

The sync API refuses to run while an asyncio loop runs in the same thread: call it from plain
(sync) tests and fixtures, not from an ``@pytest.mark.anyio`` test's body.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

__all__ = ["CHROMIUM", "LAUNCH_ARGS", "BrowserMissing", "artifacts_dir", "chromium", "screenshot"]

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's chromium (a wrapper script that execs /usr/lib/chromium/chromium)."""

LAUNCH_ARGS: tuple[str, ...] = (
    # /dev/shm may be small in a container (64 MiB in Docker): shared memory goes to /tmp.
    "--disable-dev-shm-usage",
)
"""Chromium switches added to Playwright's defaults (which already hold ``--headless`` and,
with ``chromium_sandbox=False``, ``--no-sandbox``: Chromium's sandbox refuses to run as root)."""

_ROOT = Path(__file__).resolve().parent.parent


class BrowserMissing(RuntimeError):
    """Chromium is not installed where the tests look for it."""


@contextlib.contextmanager
def chromium(
    executable: Path = CHROMIUM, args: Sequence[str] = (), timeout_ms: float = 30_000
) -> Iterator[Browser]:
    """Start Playwright and a headless Chromium; close both on exit.

    ``args`` are extra Chromium switches after ``LAUNCH_ARGS``; ``timeout_ms`` bounds the launch.
    Raises ``BrowserMissing`` when ``executable`` is not there.
    """
    if not os.access(executable, os.X_OK):
        raise BrowserMissing(
            f"no Chromium at {executable}: run `bash .ci/install-tools` "
            "(it installs Debian's chromium package; `playwright install` is not used)"
        )
    if _loop_running():
        raise RuntimeError(
            "chromium() uses Playwright's sync API, which cannot start while an asyncio loop "
            "runs in this thread: in an async (anyio) test, or while another chromium() is "
            "open (Playwright's own loop). Use it from sync tests and from one fixture, "
            "function- or module-scoped, never session-scoped when anyio tests follow."
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            chromium_sandbox=False,
            args=[*LAUNCH_ARGS, *args],
            timeout=timeout_ms,
        )
        try:
            yield browser
        finally:
            browser.close()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def artifacts_dir() -> Path:
    """Where screenshots go: ``$TEST_ARTIFACTS_DIR``, else ``<repo>/test-artifacts/screenshots``.

    Created when missing.
    """
    configured = os.environ.get("TEST_ARTIFACTS_DIR")
    folder = Path(configured) if configured else _ROOT / "test-artifacts" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a PNG of ``page`` as ``<artifacts_dir()>/<name>.png`` and return its path.

    ``name`` may be a test's node name: characters other than letters, digits, ``.``, ``_`` and
    ``-`` become ``-``. An existing file of that name is replaced.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name.removesuffix(".png")).strip("-.") or "page"
    path = artifacts_dir() / f"{stem}.png"
    page.screenshot(path=path, full_page=full_page)
    return path
