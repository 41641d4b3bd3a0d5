"""What this machine will skip, said before the first test runs, and how to run everything.

A fresh clone's ``make test`` without PostgreSQL or the chart tools passes with hundreds of
tests skipped; the reasons come at the very end, one test at a time. The summary here comes
first (``conftest.pytest_collection_finish``): what is missing, how many collected tests it
skips, and the one command that runs them all. Under CI (``CI`` set) the same tests fail
instead of skipping, and the summary says so.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

__all__ = ["EVERYTHING", "postgres_missing", "summary"]

ROOT = Path(__file__).resolve().parents[1]
EVERYTHING = ("bash .ci/install-tools && "
              "TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres make test")
# The tools .ci/install-tools brings, by the tests that need them (folders or files of tests/).
_TOOLS: dict[str, tuple[str, ...]] = {
    "helm": ("tests/chart/",),
    "kubernetes-validate": ("tests/chart/",),
    "hadolint": ("tests/chart/",),
    "podman": ("tests/chart/",),
    "promtool": ("tests/chart/", "tests/daemon/test_metrics.py"),
    "prometheus-alertmanager": ("tests/alerts/test_alertmanager.py",),
}


def _which(name: str) -> str | None:
    path = os.pathsep.join([str(ROOT / ".tools" / "bin"), os.environ.get("PATH", ""),
                            "/usr/bin", "/usr/sbin"])
    return shutil.which(name, path=path)


def postgres_missing() -> str | None:
    """Why the PostgreSQL variants cannot run here, or None when they can: TEST_DATABASE_URL
    names a server, or a Docker engine answers for testcontainers."""
    if os.environ.get("TEST_DATABASE_URL"):
        return None
    return _no_docker()


@functools.cache
def _no_docker() -> str | None:
    # Asked once a session, on the engine's socket itself: the docker client's ping leaves its
    # socket open when no engine answers (a ResourceWarning, an error in whichever test runs).
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None  # an engine over TCP: testcontainers will say if it is not there
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(2)
            probe.connect(host.removeprefix("unix://"))
    except OSError:
        return "TEST_DATABASE_URL is unset and no Docker engine answers"
    return None


def summary(items: Sequence[pytest.Item] | None) -> list[str]:
    """Header lines: each missing thing and how many of these tests it skips (``items`` None:
    before the tests are known, as in a run spread over worker processes, where only the
    workers collect); none when nothing these tests need is missing."""
    verb = "fail (CI is set)" if os.environ.get("CI") else "skip"

    def tests(needs: Callable[[pytest.Item], bool]) -> str:
        if items is None:
            return "the tests that need it"
        count = sum(1 for item in items if needs(item))
        return f"{count} tests" if count else ""

    lines = []
    no_postgres = postgres_missing()
    if no_postgres and (those := tests(lambda item: bool(
            item.get_closest_marker("postgres")
            or {"postgres_url", "migrated_postgres_url"}
            & set(getattr(item, "fixturenames", ()))))):
        lines.append(f"  PostgreSQL: {no_postgres}: {those} will {verb}")
    absent = [name for name in _TOOLS
              if _which(name) is None and not (name.startswith("prometheus-")
                                              and _which(name.removeprefix("prometheus-")))]
    places = tuple({place for name in absent for place in _TOOLS[name]})
    if absent and (those := tests(lambda item: item.nodeid.startswith(places))):
        lines.append(f"  tools: {', '.join(absent)} not installed: {those} will {verb}")
    if not Path("/usr/bin/chromium").exists() and (
            those := tests(lambda item: "browser" in item.nodeid)):
        lines.append(f"  Chromium: /usr/bin/chromium missing: {those} will fail")
    if not lines:
        return []
    return ["not everything runs on this machine:", *lines,
            f"  to run everything: {EVERYTHING}"]
