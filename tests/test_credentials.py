"""A target's basic auth: read from a file, sent to the target's own host, shown nowhere."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from httpserver import Reply, Request, TestServer

from monitor.cli.commands import main

TOKEN = base64.b64encode(b"robot:hunter2").decode()
URLSET = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
          b"<url><loc>%s/a</loc></url></urlset>")


def test_a_check_sends_the_targets_auth_and_shows_it_nowhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with TestServer() as site:
        def guarded(request: Request) -> Reply:
            if request.headers.get("authorization") != f"Basic {TOKEN}":
                return Reply(401, b"who are you?", {"WWW-Authenticate": 'Basic realm="x"'})
            return Reply(body=URLSET % site.base_url.encode())

        site.route("/sitemap.xml", guarded)
        (tmp_path / "pw").write_text("hunter2\n")
        (tmp_path / "c.yaml").write_text(
            "defaults: {allow_private: true}\n"
            "targets:\n"
            f"  - name: shop\n    url: {site.url('/sitemap.xml')}\n"
            "    auth: {username: robot, password_file: pw}\n")
        code = main(["check", "shop", "--config", str(tmp_path / "c.yaml"), "--database-url",
                     f"sqlite:///{tmp_path / 'm.db'}", "--json"])
        out, err = capsys.readouterr()
    assert code == 0, err
    assert f"{site.base_url}/a" in out
    assert site.requests_to("/sitemap.xml")[0].headers["authorization"] == f"Basic {TOKEN}"
    for shown in (out, err, (tmp_path / "m.db").read_bytes().decode("latin-1")):
        assert "hunter2" not in shown
        assert TOKEN not in shown
