"""A sitemap site on the test HTTP server whose documents the test changes between checks."""

from __future__ import annotations

import hashlib
import json
from typing import Any
from xml.sax.saxutils import escape

import pytest
from httpserver import Reply, Request, TestServer
from sqlalchemy import Table, create_engine, func, select

from monitor.cli.commands import main
from monitor.store import checkreads as sql
from monitor.store.schema import targets

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def urlset(entries: dict[str, str | None]) -> bytes:
    """A urlset document: loc -> lastmod (or None)."""
    rows = []
    for loc, lastmod in entries.items():
        extra = f"<lastmod>{escape(lastmod)}</lastmod>" if lastmod else ""
        rows.append(f"<url><loc>{escape(loc)}</loc>{extra}</url>")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}">'
            + "".join(rows) + "</urlset>\n").encode()


def index(children: list[str]) -> bytes:
    """A sitemap index of these child URLs."""
    rows = "".join(f"<sitemap><loc>{escape(c)}</loc></sitemap>" for c in children)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{NS}">{rows}'
            "</sitemapindex>\n").encode()


class Site:
    """Documents by path, answered with an ETag and 304 to a matching If-None-Match."""

    def __init__(self, server: TestServer) -> None:
        self.server = server
        self.docs: dict[str, bytes] = {}
        self.status: dict[str, int] = {}
        self.etags = True

    def url(self, path: str) -> str:
        """The absolute URL of a path on this site."""
        return self.server.url(path)

    def set(self, path: str, body: bytes) -> None:
        """Serve ``body`` at ``path`` from now on."""
        self.docs[path] = body
        self.server.route(path, self.answer)

    def answer(self, request: Request) -> Reply:
        """The reply to a request for one of the documents (a test may wrap it)."""
        if request.route in self.status:
            return Reply(self.status[request.route], b"server error\n")
        body = self.docs[request.route]
        headers = {"Content-Type": "application/xml"}
        if self.etags:
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            headers["ETag"] = etag
            if request.headers.get("if-none-match") == etag:
                return Reply(304, b"", headers)
        return Reply(200, body, headers)


def url_set_at(db: str, snapshot_id: int) -> set[str]:
    """The (only) target's URL set as of a snapshot, recovered from the entry set versions."""
    engine = create_engine(db)
    with engine.connect() as conn:
        target_id = conn.execute(select(targets.c.id)).scalar_one()
        found = sql.url_set_at(conn, target_id, snapshot_id)
    engine.dispose()
    return found


def row_counts(db: str, *tables: Table) -> tuple[int, ...]:
    """How many rows each of these tables holds."""
    engine = create_engine(db)
    with engine.connect() as conn:
        found = tuple(conn.execute(select(func.count()).select_from(t)).scalar_one()
                      for t in tables)
    engine.dispose()
    return found


def pages(capsys: pytest.CaptureFixture[str], db: str, *argv: str, size: int = 3,
          ) -> list[dict[str, Any]]:
    """Every row of a ``changes`` or ``diff`` listing through the CLI, ``size`` at a time, each
    page following the last one's cursor."""
    found: list[dict[str, Any]] = []
    more: list[str] = []
    while True:
        code = main([*argv, "--database-url", db, "--json", "--limit", str(size), *more])
        out = capsys.readouterr()
        assert code == 0, out.err
        page = json.loads(out.out)
        found.extend(page["changes"])
        if page["next_cursor"] is None:
            return found
        more = ["--cursor", page["next_cursor"]]
