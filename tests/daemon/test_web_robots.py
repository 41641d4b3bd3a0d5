"""The robots.txt page of a target, asked over HTTP of a daemon (a subprocess) that watches a
real local site whose robots.txt changes: the version in force, each version as a diff, and
the tester as a plain form answered by the server, escaped, under the pages' policy."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from harness import Daemon, sitemap
from httpserver import Reply, TestServer

from monitor.serve.headers import CONTENT_SECURITY_POLICY

FIRST = b"User-agent: *\nAllow: /\n"
SECOND = (b"# <script>alert(1)</script>\nUser-agent: *\nDisallow: /\n\n"
          b"User-agent: Googlebot/2.1\nDisallow: /cart\n\nUser-agent: Google\nDisallow: /\n")


def test_the_robots_page_shows_versions_and_tests_urls(
    http_server: TestServer, tmp_path: Path, daemons: list[Daemon],
) -> None:
    s = http_server
    s.route("/s.xml", Reply(body=sitemap({s.url("/a"): None})))
    s.route("/robots.txt", Reply(200, FIRST))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s, allow_private: true}\n"
        f'targets:\n  - {{name: shop, url: "{s.url("/s.xml")}"}}\n', encoding="utf-8")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.started()
    daemon.event("check", target="shop")
    mark = len(daemon.lines)
    s.route("/robots.txt", Reply(200, SECOND))
    daemon.wait_for(lambda line: line.get("event") == "check" and line.get("issues", 0) >= 2,
                    after=mark)

    assert 'href="/targets/shop/robots"' in daemon.get("/targets/shop").text
    page = daemon.get("/targets/shop/robots")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "<script" not in page.text  # the comment is shown, escaped
    assert "# &lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "+User-agent: Googlebot/2.1" in page.text  # the change, as a diff
    assert "-Allow: /" in page.text
    assert "First read" in page.text  # and the first version
    assert f'<option value="{s.url("/robots.txt")}" selected>' in page.text

    query = urlencode({"robots": s.url("/robots.txt"), "agent": "Googlebot",
                       "urls": f"{s.url('/cart/1')}\n{s.url('/shop')}\n"})
    tested = daemon.get(f"/targets/shop/robots?{query}")
    assert tested.status_code == 200
    assert tested.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    rows = tested.text.split('<table class="tested">')[1].split("</table>")[0]
    cart, shop = rows.split("<tr>")[2:4]
    assert '<td class="bad">disallowed</td>' in cart
    assert "line 6: Disallow: /cart" in cart
    assert "line 5: User-agent: Googlebot/2.1" in cart
    # Googlebot's group has no rule for /shop: "User-agent: Google" is not its group
    assert '<td class="ok">allowed</td>' in shop
    assert "no rule matched" in shop

    hostile = daemon.get("/targets/shop/robots?" + urlencode(
        {"robots": s.url("/robots.txt"), "agent": "<b>x</b>", "urls": "/<i>y</i>"}))
    assert hostile.status_code == 200
    assert "<b>x" not in hostile.text
    assert "<i>y" not in hostile.text
    assert "&lt;b&gt;x&lt;/b&gt;" in hostile.text

    unknown = daemon.get("/targets/shop/robots?" + urlencode(
        {"robots": "https://elsewhere.example/robots.txt", "urls": "/"}))
    assert unknown.status_code == 400
    assert "not a robots.txt this target watches" in unknown.text
    assert daemon.get("/targets/nobody/robots").status_code == 404
