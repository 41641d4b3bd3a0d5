"""IndexNow submissions end to end: ``check`` writes them, the ``Submitter`` delivers them to a
real local endpoint that speaks the protocol (tests/indexnow_receiver.py), on both databases."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from httpserver import Reply, TestServer
from indexnow_receiver import KEY, Receiver
from site_fixture import Site, urlset
from sqlalchemy import func, select, update

from monitor.cli.commands import main
from monitor.config import load
from monitor.indexnow.submitter import Submitter
from monitor.net.addresses import Resolver
from monitor.read.fetch import Fetcher
from monitor.store.db import make_engine
from monitor.store.indexnowrows import SqlSubmissions
from monitor.store.schema import indexnow_keys, indexnow_submissions

LASTMOD = "2026-01-01"


@pytest.fixture
def receiver(http_server: TestServer) -> Receiver:
    """The IndexNow endpoint and the key files, on the site's server."""
    return Receiver(http_server)


def config(tmp_path: Path, site: Site, receiver: Receiver, *, extra: str = "",
           url_checks: bool = False) -> str:
    path = tmp_path / "monitor.yaml"
    checks = "  url_checks: {enabled: true, rate: 1000}\n" if url_checks else ""
    path.write_text(
        "defaults:\n  timeout: 2s\n  read_timeout: 2s\n" + checks
        + f"  indexnow: {{enabled: true, key: {KEY}, endpoint: '{receiver.endpoint}'"
        + extra + "}\n"
        + f"targets:\n  - {{name: t, url: '{site.url('/sitemap.xml')}'}}\n")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def check(capsys: pytest.CaptureFixture[str], cfg: str, db: str, *extra: str,
          ) -> dict[str, Any]:
    code, out, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                         "--json", *extra)
    assert code == 0, err
    return dict(json.loads(out))


class Delivery:
    """The daemon's Submitter, driven pass by pass, with a clock the test moves."""

    def __init__(self, cfg: str, db: str) -> None:
        self.config = load(cfg)
        self.engine = make_engine(db)
        self.offset = timedelta()
        self.counted: Counter[tuple[str, str]] = Counter()
        self.submitter: Submitter | None = None
        self.logs: list[dict[str, Any]] = []
        self.resolver: Resolver | None = None  # the fetcher's; None: the system's

    def now(self) -> datetime:
        """The real time, moved on by ``advance``: rows a check writes now are due now."""
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)

    def passes(self) -> int:
        """Deliver until nothing is due; how many rows were claimed."""
        with structlog.testing.capture_logs() as logs:
            claimed = asyncio.run(self._passes())
        self.logs += logs
        return claimed

    async def _passes(self) -> int:
        fetcher = Fetcher(resolver=self.resolver)
        submitter = Submitter(
            self.config.target, SqlSubmissions(self.engine), fetcher, owner="test",
            clock=self.now, concurrency=8,
            on_result=lambda t, o, n: self.counted.update({(t, o): n}))
        if self.submitter is not None:  # the endpoint holds of the passes before
            submitter._held = self.submitter._held
        self.submitter = submitter
        claimed = 0
        try:
            while found := await submitter.deliver_due():
                claimed += found
        finally:
            await fetcher.aclose()
        return claimed

    def rows(self) -> list[dict[str, Any]]:
        return SqlSubmissions(self.engine).history("t", 1000)

    def close(self) -> None:
        self.engine.dispose()


@pytest.fixture
def delivery_of(db: str) -> Any:
    made: list[Delivery] = []

    def make(cfg: str) -> Delivery:
        made.append(Delivery(cfg, db))
        return made[-1]

    yield make
    for d in made:
        d.close()


def sitemap(site: Site, entries: dict[str, str | None]) -> None:
    site.set("/sitemap.xml", urlset({site.url(p): lastmod for p, lastmod in entries.items()}))


def test_added_and_moved_lastmods_are_submitted_once_after_the_key_file(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    sitemap(site, {"/a": LASTMOD, "/b": LASTMOD, "/c": LASTMOD, "/gone": LASTMOD})
    check(capsys, cfg, db)
    delivery = delivery_of(cfg)
    assert delivery.passes() == 0  # a first check is a baseline: nothing submitted
    site.set("/sitemap.xml", urlset({
        site.url("/a"): "2026-02-02",  # lastmod moved: submitted
        site.url("/b"): LASTMOD,  # the same: not
        site.url("/c"): LASTMOD,
        site.url("/new1"): None, site.url("/new2"): LASTMOD,  # added
    }).replace(f"<loc>{site.url('/c')}</loc>".encode(),
               f"<loc>{site.url('/c')}</loc><priority>0.3</priority>".encode()))
    result = check(capsys, cfg, db)
    assert (result["added"], result["changed"], result["removed"]) == (2, 2, 1)
    assert delivery.passes() == 1
    assert receiver.accepted == [{
        "host": "127.0.0.1", "key": KEY, "keyLocation": site.url(f"/{KEY}.txt"),
        "urlList": [site.url("/a"), site.url("/new1"), site.url("/new2")]}]
    key_fetch = next(i for i, r in enumerate(receiver.server.requests)
                     if r.route == f"/{KEY}.txt")
    post = next(i for i, r in enumerate(receiver.server.requests) if r.route == "/indexnow")
    assert key_fetch < post
    assert delivery.counted == {("t", "submitted"): 3}
    # Nothing is sent twice: again, a re-check of the same sitemap, another pass.
    assert delivery.passes() == 0
    check(capsys, cfg, db)
    assert delivery.passes() == 0
    assert len(receiver.accepted) == 1
    code, out, _ = run(capsys, "indexnow", "status", "t", "--database-url", db,
                       "--format", "json")
    assert code == 0
    status = json.loads(out)
    assert [(s["host"], s["urls"], s["status"], s["http_status"], s["kinds"])
            for s in status["submissions"]] == [
        (site.url(""), 3, "delivered", 200, {"added": 2, "changed": 1})]
    assert status["keys"][0]["ok"] is True
    code, out, _ = run(capsys, "indexnow", "status", "t", "--database-url", db)
    assert "delivered" in out
    assert site.url(f"/{KEY}.txt") in out


def test_another_hosts_locs_are_never_submitted_and_that_host_never_asked(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    with TestServer(host="127.0.0.2") as elsewhere:  # another host: every request counted
        elsewhere.route(f"/{KEY}.txt", Reply(200, KEY.encode()))
        other = elsewhere.url("/x")
        sitemap(site, {"/a": None})
        check(capsys, cfg, db)
        site.set("/sitemap.xml", urlset({site.url("/a"): None, site.url("/b"): None,
                                         other: None, other + "2": None}))
        code, out, _ = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                           "--indexnow-dry-run", "--json")
        assert code == 0
        assert [(r["host"], r["urlList"]) for r in json.loads(out)["requests"]] == [
            ("127.0.0.1", [site.url("/b")])]
        elsewhere.requests.clear()  # the dry run's check read its robots.txt too
        result = check(capsys, cfg, db)
        assert {i["rule"] for i in result["issues"]} == {"loc-out-of-scope"}
        # The check asks the other host's robots.txt whether it names this sitemap
        # (cross-submission); IndexNow asks it nothing.
        assert [r.path for r in elsewhere.requests] == ["/robots.txt"]
        delivery = delivery_of(cfg)
        assert delivery.passes() == 2
        assert [r.path for r in elsewhere.requests] == ["/robots.txt"]
    assert [(b["host"], b["urlList"]) for b in receiver.accepted] == [
        ("127.0.0.1", [site.url("/b")])]
    assert receiver.key_fetches == ["127.0.0.1"]
    rows = {r["host"]: r for r in delivery.rows()}
    held = rows[elsewhere.base_url]
    assert held["status"] == "failed"
    assert held["answer"] == (f"out of scope: {elsewhere.base_url} is not the origin of one of "
                              "the target's sitemaps")
    assert delivery.counted[("t", "out_of_scope")] == 2
    assert delivery.counted[("t", "submitted")] == 1
    assert not [i for i in check(capsys, cfg, db)["issues"]
                if i["rule"] == "indexnow-key-missing"]


def test_a_key_file_in_a_folder_vouches_for_that_folder_only(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver, extra=f", key_location: /seo/{KEY}.txt")
    site.server.route(f"/seo/{KEY}.txt", Reply(200, KEY.encode()))
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/seo/b": None, "/seo/c/d": None, "/e": None})
    check(capsys, cfg, db)
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    assert delivery.counted[("t", "out_of_scope")] == 1
    assert delivery.counted[("t", "submitted")] == 2
    assert [(b["urlList"], b["keyLocation"]) for b in receiver.accepted] == [
        ([site.url("/seo/b"), site.url("/seo/c/d")], site.url(f"/seo/{KEY}.txt"))]
    assert receiver.key_fetches == []  # the root's key file is not the one that vouches


def test_urls_outside_the_folder_are_counted_once_however_often_the_rest_is_retried(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver, extra=f", key_location: /seo/{KEY}.txt")
    site.server.route(f"/seo/{KEY}.txt", Reply(200, KEY.encode()))
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/seo/b": None, "/e": None, "/f": None})
    check(capsys, cfg, db)
    receiver.answer = 503  # fails first...
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    assert receiver.refused[0][1]["urlList"] == [site.url("/seo/b")]
    assert delivery.counted == {("t", "out_of_scope"): 2, ("t", "retry"): 1}
    delivery.advance(3600)
    assert delivery.passes() == 1
    assert [row["status"] for row in delivery.rows()] == ["pending"]  # ...twice...
    receiver.answer = 200  # ...then accepts
    delivery.advance(3600)
    assert delivery.passes() == 1
    assert [b["urlList"] for b in receiver.accepted] == [[site.url("/seo/b")]]
    assert delivery.counted == {("t", "out_of_scope"): 2, ("t", "retry"): 2,
                                ("t", "submitted"): 1}
    # The row holds what it may submit: `indexnow status` counts what was sent.
    assert [(r["status"], r["urls"], r["attempts"]) for r in delivery.rows()] == [
        ("delivered", 1, 3)]


def test_a_wrong_key_file_holds_the_host_and_the_key_is_never_logged(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    receiver.key_body = b"another-key-entirely"
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    check(capsys, cfg, db)
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    assert receiver.accepted == []
    row = delivery.rows()[0]
    assert row["status"] == "pending"
    assert row["answer"].startswith("indexnow-key-missing: IndexNow key file of http://127.0.0.1")
    assert "does not hold exactly the key" in row["answer"]
    assert delivery.counted[("t", "key_missing")] == 1
    # The next check reports it, with the host, the location and the fix.
    issues = [i for i in check(capsys, cfg, db)["issues"] if i["rule"] == "indexnow-key-missing"]
    assert len(issues) == 1
    assert issues[0]["severity"] == "error"
    assert "[key].txt" in issues[0]["message"]
    assert "answers 200 with the key as its only content" in issues[0]["message"]
    assert not [line for line in delivery.logs if KEY in json.dumps(line, default=str)]
    assert [line["location"] for line in delivery.logs
            if line["event"] == "indexnow key file not verified"] == [
        site.url("/[key].txt")]
    # Fixed: the held submission goes, once, 15 minutes later.
    receiver.key_body = None
    delivery.advance(16 * 60)
    assert delivery.passes() == 1
    assert [(b["host"], b["urlList"]) for b in receiver.accepted] == [
        ("127.0.0.1", [site.url("/b")])]
    assert not [i for i in check(capsys, cfg, db)["issues"]
                if i["rule"] == "indexnow-key-missing"]


def test_an_endpoint_whose_name_resolves_to_a_metadata_address_is_never_posted_to(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    text = Path(cfg).read_text(encoding="utf-8")
    Path(cfg).write_text(text.replace(receiver.endpoint, "https://indexnow.test/indexnow"),
                         encoding="utf-8")
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    check(capsys, cfg, db)
    delivery = delivery_of(cfg)

    async def metadata(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    delivery.resolver = metadata
    assert delivery.passes() == 1
    [row] = delivery.rows()
    assert row["status"] == "failed"
    assert row["answer"] == (
        "no answer from https://indexnow.test/indexnow: refused to fetch "
        "https://indexnow.test/indexnow: 169.254.169.254 is a link-local or metadata address")
    assert delivery.counted[("t", "rejected")] == 1
    assert receiver.accepted == []


def test_10001_changed_urls_are_two_requests(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    paths = [f"/p{i}" for i in range(10_001)]
    sitemap(site, dict.fromkeys(paths, LASTMOD))
    check(capsys, cfg, db)
    sitemap(site, dict.fromkeys(paths, "2026-03-03"))
    assert check(capsys, cfg, db)["changed"] == 10_001
    assert delivery_of(cfg).passes() == 2
    assert sorted(len(b["urlList"]) for b in receiver.accepted) == [1, 10_000]  # in parallel
    assert sorted(receiver.urls()) == sorted(site.url(p) for p in paths)


@pytest.mark.parametrize(("answer", "status", "outcome"), [
    (202, "delivered", "submitted"),
    (400, "failed", "rejected"),
    (403, "failed", "rejected"),
    (422, "failed", "rejected"),
])
def test_answers_of_the_endpoint(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
    answer: int, status: str, outcome: str,
) -> None:
    cfg = config(tmp_path, site, receiver)
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    check(capsys, cfg, db)
    receiver.answer = answer
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    row = delivery.rows()[0]
    assert (row["status"], row["http_status"], row["attempts"]) == (status, answer, 1)
    assert delivery.counted == {("t", outcome): 1}
    if status == "failed":  # permanent: named, and never sent again
        assert row["answer"].startswith(f"HTTP {answer} ")
        assert "refused by the test" in row["answer"]
        delivery.advance(86400)
        assert delivery.passes() == 0


def test_429_holds_the_endpoint_for_its_retry_after_and_a_stall_is_retried(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    check(capsys, cfg, db)
    receiver.answer = 429
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    first = delivery.rows()[0]
    assert (first["status"], first["http_status"]) == ("pending", 429)
    wait = (first["next_attempt_at"] - first["attempted_at"]).total_seconds()
    assert wait == pytest.approx(120, abs=1)
    # Another submission while held waits too, without a request.
    sitemap(site, {"/a": None, "/b": None, "/c": None})
    check(capsys, cfg, db)
    posts = len([r for r in receiver.server.requests if r.route == "/indexnow"])
    delivery.advance(60)
    assert delivery.passes() == 1
    assert len([r for r in receiver.server.requests if r.route == "/indexnow"]) == posts
    # A stalled endpoint (past the target's 2 s timeout) is an attempt to retry.
    receiver.answer = "stall"
    delivery.advance(61)
    assert delivery.passes() == 2
    assert {r["status"] for r in delivery.rows()} == {"pending"}
    assert all("no answer" in r["answer"] for r in delivery.rows())
    receiver.answer = 200
    delivery.advance(3600)
    assert delivery.passes() == 2
    assert sorted(receiver.urls()) == [site.url("/b"), site.url("/c")]
    assert delivery.counted[("t", "retry")] == 3  # the 429, and the two stalls


def test_a_removal_is_submitted_once_gone_and_a_moved_url_once_as_added(
    site: Site, receiver: Receiver, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    page = Reply(200, b"<html><head><title>p</title></head><body>" + b"x" * 2000
                 + b"</body></html>", headers={"Content-Type": "text/html"})
    for path in ("/stays", "/old-home", "/deleted", "/still-live"):
        http_server.route(path, page)
    cfg = config(tmp_path, site, receiver, url_checks=True)
    sitemap(site, dict.fromkeys(("/stays", "/old-home", "/deleted", "/still-live")))
    check(capsys, cfg, db, "--urls")
    # The deploy: /old-home moved to /new-home, /deleted is gone, /still-live is dropped.
    http_server.route("/new-home", page)
    http_server.route("/old-home", Reply(301, headers={"Location": site.url("/new-home")}))
    http_server.route("/deleted", Reply(410, b"gone"))
    sitemap(site, dict.fromkeys(("/stays", "/new-home")))
    result = check(capsys, cfg, db, "--urls")
    assert (result["added"], result["removed"]) == (1, 3)
    delivery = delivery_of(cfg)
    assert delivery.passes() == 2
    assert Counter(receiver.urls()) == {site.url("/new-home"): 1, site.url("/deleted"): 1}
    kinds = sorted(json.dumps(r["kinds"]) for r in delivery.rows())
    assert kinds == ['{"added": 1}', '{"removed": 1}']
    # The triage is written once: another round submits nothing more.
    check(capsys, cfg, db, "--urls")
    assert delivery.passes() == 0


def test_dry_run_prints_the_requests_and_stores_nothing(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = config(tmp_path, site, receiver)
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    code, out, _ = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                       "--indexnow-dry-run", "--json")
    assert code == 0
    assert json.loads(out)["requests"] == [{
        "host": "127.0.0.1", "key": KEY, "keyLocation": site.url(f"/{KEY}.txt"),
        "urlList": [site.url("/b")]}]
    code, out, _ = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                       "--indexnow-dry-run")
    assert "would POST 1 request(s), 1 URLs" in out
    assert site.url("/b") in out
    engine = make_engine(db)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(indexnow_submissions)).scalar() == 0
    engine.dispose()
    # The real check still finds the change, and submits it.
    assert check(capsys, cfg, db)["added"] == 1
    engine = make_engine(db)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(indexnow_submissions)).scalar() == 1
    engine.dispose()


def test_settled_submissions_are_pruned_after_30_days_and_pending_ones_kept(
    site: Site, receiver: Receiver, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], delivery_of: Callable[[str], Delivery],
) -> None:
    cfg = config(tmp_path, site, receiver)
    sitemap(site, {"/a": None})
    check(capsys, cfg, db)
    sitemap(site, {"/a": None, "/b": None})
    check(capsys, cfg, db)
    delivery = delivery_of(cfg)
    assert delivery.passes() == 1
    # A day on, the key file is fetched again and is wrong: the next submission waits.
    receiver.key_body = b"another-key-entirely"
    delivery.advance(86400 + 60)
    sitemap(site, {"/a": None, "/b": None, "/c": None})
    check(capsys, cfg, db)
    assert delivery.passes() == 1
    assert sorted(r["status"] for r in delivery.rows()) == ["delivered", "pending"]
    assert delivery.submitter is not None
    delivery.advance(28 * 86400)
    assert asyncio.run(delivery.submitter.prune()) == 0
    delivery.advance(2 * 86400)
    assert asyncio.run(delivery.submitter.prune()) == 1
    assert [r["status"] for r in delivery.rows()] == ["pending"]
    # The failing host is reported while something waits for it, not forever after.
    assert [i["rule"] for i in check(capsys, cfg, db)["issues"]] == ["indexnow-key-missing"]
    with delivery.engine.begin() as conn:
        conn.execute(update(indexnow_keys).values(
            checked_at=datetime.now(UTC) - timedelta(days=4)))
    assert check(capsys, cfg, db)["issues"] == []
