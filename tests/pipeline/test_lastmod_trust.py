"""lastmod that can be trusted: ``lastmod-churn`` and ``lastmod-regressed`` through the
CLI, against sitemaps served by a real HTTP server on 127.0.0.1, with the database of each
backend; the churn alert delivered to a real webhook receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, Request, TestServer
from site_fixture import Site, index, urlset

from monitor.alerts.delivery import Deliverer
from monitor.cli.commands import main
from monitor.config import Channel, Delivery
from monitor.store.db import make_engine
from monitor.store.outbox import SqlOutbox

DAY = "2024-05-{:02d}T{:02d}:{:02d}:00+00:00"


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()  # what came before (a delivery's log lines)
    code = main(["check", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out  # type: ignore[no-any-return]


def rules(result: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [i for i in result["issues"] if i["rule"] == rule]


def listed(capsys: pytest.CaptureFixture[str], db: str, rule: str, target: str = "t",
           ) -> list[str | None]:
    """The locs of the target's current issues of a rule, as ``issues`` lists them."""
    capsys.readouterr()
    assert main(["issues", target, "--database-url", db, "--rule", rule, "--json"]) == 0
    return [row["loc"] for row in json.loads(capsys.readouterr().out)["issues"]]


def pages(site: Site, n: int) -> list[str]:
    return [site.url(f"/p/{i}") for i in range(n)]


def serve(site: Site, locs: list[str], day: int, bumped: int | None = None) -> None:
    """The sitemap with the first ``bumped`` locs (all by default) dated ``day``, the others
    on the 1st: each loc's time of day differs, so every lastmod is distinct."""
    bumped = len(locs) if bumped is None else bumped
    site.set("/sitemap.xml", urlset({
        loc: DAY.format(day if i < bumped else 1, i // 60 % 24, i % 60)
        for i, loc in enumerate(locs)}))


class Hook:
    """A webhook receiver on the test server: the payloads it accepted."""

    def __init__(self, server: TestServer) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.url = server.url("/hook")
        server.route("/hook", self._answer)

    def _answer(self, request: Request) -> Reply:
        with self._lock:
            self.payloads.append(json.loads(request.body))
        return Reply(200, b"{}", {"Content-Type": "application/json"})

    def deliver(self, db: str) -> list[dict[str, Any]]:
        """One delivery pass over the outbox (as the daemon's loop makes); all accepted."""
        engine = make_engine(db)
        channel = Channel(name="hook", type="webhook", url=self.url)
        deliverer = Deliverer([channel], SqlOutbox(engine), owner="test", delivery=Delivery())

        async def go() -> None:
            try:
                await deliverer.deliver_due()
            finally:
                await deliverer.aclose()

        asyncio.run(go())
        engine.dispose()
        with self._lock:
            return list(self.payloads)


def config(tmp_path: Path, url: str, hook: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(
        f'targets:\n  - {{name: t, url: "{url}"}}\n'
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{hook}"}}\n'
        "  rules:\n"
        "    - {name: lastmod-churn, when: issues, rule: [lastmod-churn], channels: [hook]}\n",
        encoding="utf-8")
    return str(path)


def test_lastmod_churn_is_one_issue_and_one_alert_an_episode(
    site: Site, db: str, http_server: TestServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """50,000 URLs whose lastmods all change at every re-check: the issue on the second such
    re-check (not the first), one alert with example URLs, the issue while it goes on, cleared
    by the first re-check without it; a new episode is a new alert."""
    hook = Hook(http_server)
    cfg = config(tmp_path, site.url("/sitemap.xml"), hook.url)
    locs = pages(site, 50_000)
    serve(site, locs, 1)
    first = check(capsys, "t", "--config", cfg, "--database-url", db)
    assert (first["urls"], first["issues"]) == (50_000, [])

    serve(site, locs, 2)
    once = check(capsys, "t", "--config", cfg, "--database-url", db)
    assert once["changed"] == 50_000
    assert rules(once, "lastmod-churn") == []  # one re-check is a site that changed, not churn
    assert hook.deliver(db) == []

    serve(site, locs, 3)
    twice = check(capsys, "t", "--config", cfg, "--database-url", db)
    [churn] = rules(twice, "lastmod-churn")
    assert churn["severity"] == "warning"
    assert churn["loc"] is None
    assert churn["document"] == site.url("/sitemap.xml")
    assert churn["message"].startswith(
        "50,000 of 50,000 URLs (100.0%) changed their lastmod on this re-check, 50,000 of "
        "50,000 URLs (100.0%) on the one before")
    assert locs[0] in churn["message"]
    assert listed(capsys, db, "lastmod-churn") == [None]
    [alert] = hook.deliver(db)
    assert (alert["rule"], alert["state"], alert["snapshot_id"]) == (
        "lastmod-churn", "firing", twice["snapshot_id"])
    assert alert["examples"]["changed"][:3] == locs[:3]

    serve(site, locs, 4)  # it goes on: still the issue, no second alert
    thrice = check(capsys, "t", "--config", cfg, "--database-url", db)
    assert len(rules(thrice, "lastmod-churn")) == 1
    assert len(hook.deliver(db)) == 1

    # nothing changed (a 304): it clears
    quiet = check(capsys, "t", "--config", cfg, "--database-url", db)
    assert quiet["outcome"] == "unchanged"
    assert rules(quiet, "lastmod-churn") == []
    assert listed(capsys, db, "lastmod-churn") == []
    assert len(hook.deliver(db)) == 1  # an event: nothing to resolve

    for day in (5, 6):  # a new episode: again on its second re-check, again one alert
        serve(site, locs, day)
        again = check(capsys, "t", "--config", cfg, "--database-url", db)
    assert len(rules(again, "lastmod-churn")) == 1
    alerts = hook.deliver(db)
    assert [(a["rule"], a["snapshot_id"]) for a in alerts] == [
        ("lastmod-churn", twice["snapshot_id"]), ("lastmod-churn", again["snapshot_id"])]


@pytest.mark.parametrize(("urls", "bumped", "churn"), [
    (19, 19, False),  # every lastmod changed twice, but fewer than 20 URLs
    (20, 20, True),
    (100, 79, False),  # 79%
    (100, 80, True),  # 80%
])
def test_lastmod_churn_needs_80_percent_of_20_urls(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], urls: int, bumped: int,
    churn: bool,
) -> None:
    url = site.url("/sitemap.xml")
    locs = pages(site, urls)
    serve(site, locs, 1)
    check(capsys, url, "--database-url", db)
    for day in (2, 3):
        serve(site, locs, day, bumped)
        result = check(capsys, url, "--database-url", db)
    assert len(rules(result, "lastmod-churn")) == (1 if churn else 0)


def test_unchanged_children_count_as_unchanged_lastmods(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """An index of two children of 50 URLs, one of which bumps every lastmod at every check:
    50% of the target's lastmods change (the other child answers 304), no churn."""
    site.set("/index.xml", index([site.url("/a.xml"), site.url("/b.xml")]))
    a = [site.url(f"/a/{i}") for i in range(50)]
    b = [site.url(f"/b/{i}") for i in range(50)]
    site.set("/b.xml", urlset(dict.fromkeys(b, "2024-01-01")))
    for day in (1, 2, 3):
        site.set("/a.xml", urlset({loc: DAY.format(day, 0, i) for i, loc in enumerate(a)}))
        result = check(capsys, site.url("/index.xml"), "--database-url", db)
    assert result["changed"] == 50
    assert rules(result, "lastmod-churn") == []


# before, after, regressed: compared as instants where both are datetimes, by date where one
# is a date, at the coarser precision for a month or a year; an invalid side is never compared.
REGRESSIONS = [
    ("2024-05-02T10:00:00Z", "2024-05-01T10:00:00Z", True),
    ("2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z", False),
    ("2024-05-01T10:00:00.5Z", "2024-05-01T10:00:00.25Z", True),
    ("2024-05-02", "2024-05-01", True),
    ("2024-05-01", "2024-05-02", False),
    ("2024-05-01T09:00:00Z", "2024-05-01T10:00:00+02:00", True),  # 08:00Z: earlier
    ("2024-05-01T10:00:00+02:00", "2024-05-01T09:00:00Z", False),  # 08:00Z -> 09:00Z
    ("2024-05-01T12:00:00+00:00", "2024-05-01T12:00:00Z", False),  # the same instant
    ("2024-05-01T23:30:00-05:00", "2024-05-01T23:00:00-05:00", True),
    ("2024-05-01", "2024-05-01T23:59:00+00:00", False),  # the same date
    ("2024-05-02", "2024-05-01T23:00:00-05:00", True),  # by its own date (05-02 04:00Z)
    ("2024-05-01T08:00:00Z", "2024-05-01", False),  # the same date
    ("2024-05-02T08:00:00Z", "2024-05-01", True),
    ("2024-06", "2024-05-31", True),
    ("2024-05", "2024-05-31", False),  # the same month
    ("2024", "2023-12-31T23:00:00Z", True),
    ("last tuesday", "2024-01-01", False),  # invalid before: ignored
    ("2024-05-02", "yesterday", False),  # invalid now: lastmod-invalid, not regressed
    (None, "2024-01-01", False),
    ("2024-05-02", None, False),
]


@pytest.mark.parametrize("path", ["reread", "full"])
def test_lastmod_regressed(
    site: Site, db: str, capsys: pytest.CaptureFixture[str], path: str,
) -> None:
    """Each case a URL of one sitemap. ``reread``: the same locs in the same order (the usual
    re-read); ``full``: a URL added, so the whole document is validated and diffed."""
    url = site.url("/sitemap.xml")
    locs = [site.url(f"/case/{i}") for i in range(len(REGRESSIONS))]
    site.set("/sitemap.xml", urlset({loc: before for loc, (before, _, _) in
                                     zip(locs, REGRESSIONS, strict=True)}))
    check(capsys, url, "--database-url", db)
    now = {loc: after for loc, (_, after, _) in zip(locs, REGRESSIONS, strict=True)}
    if path == "full":
        now[site.url("/new")] = "2024-01-01"
    site.set("/sitemap.xml", urlset(now))
    result = check(capsys, url, "--database-url", db)
    expected = [loc for loc, (_, _, hit) in zip(locs, REGRESSIONS, strict=True) if hit]
    found = rules(result, "lastmod-regressed")
    assert [i["loc"] for i in found] == expected
    assert {i["severity"] for i in found} == {"warning"}
    assert found[0]["message"] == ("lastmod '2024-05-01T10:00:00Z' is earlier than the "
                                   "lastmod this URL had before")
    assert listed(capsys, db, "lastmod-regressed", url) == expected


def test_lastmod_regressed_stays_while_the_lastmod_does(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """A current issue, as ``lastmod-invalid`` is: listed at every later snapshot while the URL
    keeps the lastmod that went back (a 304, another field changed, another URL changed),
    and gone once its lastmod changes again."""
    url = site.url("/sitemap.xml")
    back, other = site.url("/back"), site.url("/other")

    def serve_doc(lastmod: str, other_lastmod: str, changefreq: str = "daily") -> None:
        body = urlset({back: lastmod, other: other_lastmod}).replace(
            b"</lastmod></url>", f"</lastmod><changefreq>{changefreq}</changefreq></url>".encode(),
            1)
        site.set("/sitemap.xml", body)

    def count() -> int:
        return len(listed(capsys, db, "lastmod-regressed", url))

    serve_doc("2024-05-02", "2024-01-01")
    check(capsys, url, "--database-url", db)
    serve_doc("2024-05-01", "2024-01-01")
    hit = check(capsys, url, "--database-url", db)
    assert [i["loc"] for i in rules(hit, "lastmod-regressed")] == [back]
    assert check(capsys, url, "--database-url", db)["outcome"] == "unchanged"
    assert count() == 1
    serve_doc("2024-05-01", "2024-01-01", "weekly")  # its changefreq changes, not its lastmod
    assert len(rules(check(capsys, url, "--database-url", db),
                     "lastmod-regressed")) == 1
    serve_doc("2024-05-01", "2024-02-01", "weekly")  # another URL changes
    assert len(rules(check(capsys, url, "--database-url", db),
                     "lastmod-regressed")) == 1
    assert count() == 1
    serve_doc("2024-05-03", "2024-02-01", "weekly")  # forward again: cleared
    assert rules(check(capsys, url, "--database-url", db),
                 "lastmod-regressed") == []
    assert count() == 0
