"""The robots.txt matcher against the expectations of Google's own parser.

``data/robots/google.json`` holds every allow/disallow expectation of the test suite Google
publishes with its parser (github.com/google/robotstxt, ``robots_test.cc``), one row each: the
file, the agent, the URL, the answer. The cases below them are that suite's other checks (line
length, line endings, byte order marks, product tokens, which part of a URL is matched, how a
pattern is escaped) and the cases users reported against our earlier matcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.robots.matcher import (
    MAX_LINE_BYTES,
    RobotsRules,
    escape_pattern,
    path_of,
    product_token,
)

GOOGLE = json.loads((Path(__file__).parent / "data" / "robots" / "google.json").read_text())


def test_the_table_holds_every_expectation_of_googles_suite() -> None:
    assert len(GOOGLE) == 140
    assert {row["from"] for row in GOOGLE} >= {"ID_LongestMatch", "ID_Encoding",
                                               "GoogleOnly_DocumentationChecks"}


@pytest.mark.parametrize("row", GOOGLE, ids=[f"{i}-{row['from']}" for i, row in enumerate(GOOGLE)])
def test_googles_expectation(row: dict[str, Any]) -> None:
    rules = RobotsRules(row["robots"])
    assert rules.allows(row["url"], row["agent"]) is row["allowed"], row


def test_a_long_line_is_cut_where_googles_parser_cuts_it() -> None:
    # A rule longer than Google's line buffer is cut there: what is left still matches.
    long_path = "/x/" + "a" * (MAX_LINE_BYTES + 1 - len("disallow: ") - 3)
    rules = RobotsRules(f"user-agent: FooBot\ndisallow: {long_path}/qux\n")
    assert rules.allows("http://foo.bar/fux", "FooBot")
    assert not rules.allows(f"http://foo.bar{long_path}/fux", "FooBot")

    path_a = "/x/" + "a" * (MAX_LINE_BYTES + 1 - len("allow: ") - 3)
    path_b = "/x/" + "b" * (MAX_LINE_BYTES + 1 - len("allow: ") - 3)
    rules = RobotsRules(f"user-agent: FooBot\ndisallow: /\nallow: {path_a}/qux\n"
                        f"allow: {path_b}/qux\n")
    assert not rules.allows("http://foo.bar/", "FooBot")
    assert rules.allows(f"http://foo.bar{path_a}/qux", "FooBot")
    assert rules.allows(f"http://foo.bar{path_b}/fux", "FooBot")


def test_the_cut_is_googles_own_length() -> None:
    # One byte more would keep "/q" and the URL below would be allowed; one less, the same.
    body = "disallow: " + "/" + "a" * (MAX_LINE_BYTES - len("disallow: ") - 2) + "/q"
    rules = RobotsRules("user-agent: FooBot\n" + body + "\n")
    kept = body[:MAX_LINE_BYTES][len("disallow: "):]
    assert kept.endswith("/")
    assert not rules.allows("http://foo.bar" + kept + "zzz", "FooBot")
    assert MAX_LINE_BYTES == 2083 * 8 - 1


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_lines_are_numbered_for_every_line_ending(ending: str) -> None:
    text = ending.join(["User-Agent: foo", "Allow: /some/path", "User-Agent: bar", "", "",
                        "Disallow: /"])
    decision = RobotsRules(text).decide("http://foo.bar/x", "bar")
    assert decision.line is not None
    assert decision.line.number == 6
    assert decision.line.text == "Disallow: /"
    assert [line.number for line in decision.group] == [3]


def test_mixed_line_endings_and_no_final_newline() -> None:
    text = "User-Agent: foo\nAllow: /some/path\r\nUser-Agent: bar\n\r\n\nDisallow: /"
    decision = RobotsRules(text).decide("http://foo.bar/x", "bar")
    assert decision.line is not None
    assert decision.line.number == 6


@pytest.mark.parametrize(("bom", "obeyed"), [
    ("\ufeff", True),  # a whole byte order mark is skipped
    ("\udcef\udcbb", True),  # so is a part of one
    ("\udcef", True),
    ("\udcef\x11\udcbf", False),  # a broken one makes the first line garbage
])
def test_a_byte_order_mark_is_skipped(bom: str, obeyed: bool) -> None:
    rules = RobotsRules(bom + "User-Agent: foo\nDisallow: /AnyValue\n")
    assert rules.allows("http://foo.bar/AnyValue", "foo") is not obeyed


def test_a_byte_order_mark_inside_the_file_spoils_its_line() -> None:
    rules = RobotsRules("User-Agent: foo\n\ufeffDisallow: /AnyValue\n")
    assert rules.allows("http://foo.bar/AnyValue", "foo")


@pytest.mark.parametrize(("value", "valid"), [
    ("Foobot", True), ("Foobot-Bar", True), ("Foo_Bar", True), ("", False), ("ツ", False),
    ("Foobot*", False), (" Foobot ", False), ("Foobot/2.1", False), ("Foobot Bar", False),
])
def test_which_user_agent_values_are_whole_product_tokens(value: str, valid: bool) -> None:
    raw = value.encode()
    assert (bool(raw) and product_token(raw) == raw) is valid


@pytest.mark.parametrize(("url", "path"), [
    ("", "/"), ("http://www.example.com", "/"), ("http://www.example.com/", "/"),
    ("http://www.example.com/a", "/a"), ("http://www.example.com/a/", "/a/"),
    ("http://www.example.com/a/b?c=http://d.e/", "/a/b?c=http://d.e/"),
    ("http://www.example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
    ("example.com", "/"), ("example.com/", "/"), ("example.com/a", "/a"),
    ("example.com/a/", "/a/"), ("example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
    ("a", "/"), ("a/", "/"), ("/a", "/a"), ("a/b", "/b"), ("example.com?a", "/?a"),
    ("example.com/a;b#c", "/a;b"), ("//a/b/c", "/b/c"),
])
def test_the_part_of_a_url_that_rules_match(url: str, path: str) -> None:
    assert path_of(url) == path.encode()


@pytest.mark.parametrize(("pattern", "escaped"), [
    ("http://www.example.com", "http://www.example.com"), ("/a/b/c", "/a/b/c"),
    ("á", "%C3%A1"), ("%aa", "%AA"),
])
def test_how_a_pattern_is_escaped(pattern: str, escaped: str) -> None:
    assert escape_pattern(pattern.encode()) == escaped.encode()


# The cases users reported against the earlier matcher, each failing there.

def test_a_shorter_product_token_is_not_googlebots_group() -> None:
    rules = RobotsRules("User-agent: Google\nDisallow: /\n\nUser-agent: *\nAllow: /\n")
    assert rules.allows("https://shop.example/sitemap.xml", "Googlebot")
    assert not rules.has_group("Googlebot")


def test_a_version_after_the_product_token_is_cut() -> None:
    rules = RobotsRules("User-agent: Googlebot/2.1\nDisallow: /private\n\n"
                        "User-agent: *\nDisallow: /\n")
    assert not rules.allows("https://shop.example/private/a", "Googlebot")
    assert rules.allows("https://shop.example/public", "Googlebot")
    assert rules.has_group("googlebot")


def test_a_value_of_two_words_is_its_first() -> None:
    rules = RobotsRules("User-Agent: FOO BAR\nAllow: /x/\nDisallow: /\n")
    assert not rules.allows("https://shop.example/a", "foo")
    assert rules.allows("https://shop.example/x/a", "foo")
    assert rules.allows("https://shop.example/a", "bar")


def test_an_unknown_line_does_not_end_a_group() -> None:
    rules = RobotsRules("User-agent: Googlebot\nCrawl-delay: 10\nUser-agent: Bingbot\n"
                        "Disallow: /\n")
    assert not rules.allows("https://shop.example/a", "Googlebot")


@pytest.mark.parametrize(("rule", "url", "allowed"), [
    ("/a%2Fb", "https://shop.example/a/b", True),  # an escaped slash is not a slash
    ("/a%2fb", "https://shop.example/a%2Fb", False),  # escapes compare upper-cased
    ("/%7Euser", "https://shop.example/~user", True),  # an escape is not decoded
    ("/~user", "https://shop.example/%7Euser", True),  # nor is a URL
    ("/caf%C3%A9", "https://shop.example/café", True),  # the URL is taken as given
    ("/café", "https://shop.example/caf%C3%A9", False),  # the pattern is escaped
])
def test_paths_are_compared_as_written(rule: str, url: str, allowed: bool) -> None:
    rules = RobotsRules(f"User-agent: *\nDisallow: {rule}\n")
    assert rules.allows(url) is allowed


def test_the_decision_names_its_group_and_line() -> None:
    text = ("User-agent: *\nDisallow: /\n\n# shop\nUser-agent: Googlebot\nUser-agent: Bingbot\n"
            "Disallow: /cart\nAllow: /cart/help\n")
    rules = RobotsRules(text)
    cart = rules.decide("https://shop.example/cart/1")
    assert not cart.allowed
    assert cart.line is not None
    assert (cart.line.number, cart.line.text) == (7, "Disallow: /cart")
    assert [(line.number, line.text) for line in cart.group] == [
        (5, "User-agent: Googlebot"), (6, "User-agent: Bingbot")]
    help_page = rules.decide("https://shop.example/cart/help")
    assert help_page.allowed
    assert help_page.line is not None
    assert help_page.line.number == 8
    home = rules.decide("https://shop.example/")
    assert home.allowed
    assert home.line is None
    assert [line.number for line in home.group] == [5, 6]
    other = rules.decide("https://shop.example/", "DuckDuckBot")
    assert not other.allowed
    assert other.line is not None
    assert other.line.number == 2


def test_no_robots_txt_allows_everything_with_no_group() -> None:
    decision = RobotsRules(None).decide("https://shop.example/a")
    assert decision.allowed
    assert decision.line is None
    assert decision.group == ()
