"""``sitemap-monitor robots test``, run as a user runs it (a subprocess), on a file and on a
real local site: each URL's answer in order, with the group and the line that decided, as
Google's parser decides; the usage errors in one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from httpserver import Reply, TestServer, closed_port

SCRIPT = Path(sys.executable).with_name("sitemap-monitor")
ROBOTS = ("User-agent: *\nDisallow: /\n\n# the shop\nUser-agent: Googlebot/2.1\n"
          "User-agent: Bingbot\nCrawl-delay: 5\nDisallow: /cart\nAllow: /cart/help\n\n"
          "User-agent: Google\nDisallow: /\n")


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "robots", "test", *argv], capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def as_json(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def test_each_url_is_answered_in_order_with_its_line_and_group(tmp_path: Path) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text(ROBOTS, encoding="utf-8")
    urls = ["https://shop.example/cart/1", "https://shop.example/cart/help",
            "https://shop.example/", "/cart/2"]
    found = as_json(run(str(robots), "--agent", "Googlebot", "--json", *urls))
    assert [(f["url"], f["allowed"]) for f in found] == [
        (urls[0], False), (urls[1], True), (urls[2], True), (urls[3], False)]
    assert found[0]["line"] == {"number": 8, "text": "Disallow: /cart"}
    assert found[1]["line"] == {"number": 9, "text": "Allow: /cart/help"}
    # Googlebot's group (the Googlebot/2.1 one: not "Google", not "*") has no rule for "/"
    assert found[2]["line"] is None
    assert found[2]["group"] == [{"number": 5, "text": "User-agent: Googlebot/2.1"},
                                 {"number": 6, "text": "User-agent: Bingbot"}]

    table = run(str(robots), "--agent", "Googlebot", *urls)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split() == ["disallowed", urls[0]]
    assert "line 8: Disallow: /cart" in lines[2]
    assert "line 5: User-agent: Googlebot/2.1" in lines[2]
    assert lines[5].split() == ["allowed", urls[2]]
    assert "no rule matched" in lines[6]


def test_an_empty_url_and_an_empty_agent_as_googles_parser_answers_them(
        tmp_path: Path) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text("user-agent: FooBot\ndisallow: /\n", encoding="utf-8")
    # an empty URL is the path "/": disallowed to FooBot; an empty agent has no group
    assert [f["allowed"] for f in as_json(run(str(robots), "--agent", "FooBot", "--json", ""))] \
        == [False]
    assert [f["allowed"] for f in as_json(run(str(robots), "--agent", "", "--json", ""))] \
        == [True]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert [f["allowed"] for f in as_json(run(str(empty), "--agent", "", "--json", ""))] == [True]


def test_a_sites_robots_txt_is_read_as_google_reads_it(http_server: TestServer) -> None:
    http_server.route("/robots.txt", Reply(200, ROBOTS.encode()))
    site = http_server.url("/")
    found = as_json(run(site, "--agent", "googlebot", "--json", http_server.url("/cart/x"),
                        http_server.url("/shop")))
    assert [f["allowed"] for f in found] == [False, True]
    assert http_server.requests_to("/robots.txt")
    # a 4xx is no robots.txt: everything allowed
    http_server.route("/robots.txt", Reply(404, b"nothing here"))
    found = as_json(run(http_server.url("/robots.txt"), "--agent", "Googlebot", "--json",
                        http_server.url("/cart/x")))
    assert found[0]["allowed"] is True
    assert found[0]["group"] == []


def test_what_cannot_be_read_is_a_usage_error_in_one_line(
        http_server: TestServer, tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope.txt"), "--agent", "Googlebot", "/")
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.count("\n") == 1
    assert "nope.txt" in missing.stderr
    http_server.route("/robots.txt", Reply(503, b"down"))
    down = run(http_server.url("/robots.txt"), "--agent", "Googlebot", "/")
    assert down.returncode == 2
    assert down.stderr.count("\n") == 1
    assert "HTTP 503" in down.stderr
    refused = run(f"http://127.0.0.1:{closed_port()}/", "--agent", "Googlebot", "/")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    no_agent = run(str(tmp_path / "nope.txt"), "/")
    assert no_agent.returncode == 2
    assert "--agent" in no_agent.stderr
